//! The typed client: one method per RPC of `sidecar.v1.Preprocessor`, `sidecar.v1.KvRouter` and
//! `grpc.health.v1.Health`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tonic::Response;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::HealthCheckRequest;

use crate::carrier::{Carrier, UnaryCarrier};
use crate::connection::{Connection, Connections, Settings};
use crate::multiplex::{MultiplexSettings, StreamCarrier};
use crate::parse_stream::ParseStream;
use crate::target::Target;
use crate::v1::{
    DetokenizeRequest, DetokenizeResponse, KvStatusRequest, KvStatusResponse, ListModelsRequest,
    ListModelsResponse, RenderRequest, RenderResponse, ScoreRequest, ScoreResponse,
    TokenizeRequest, TokenizeResponse,
};
use crate::Error;

/// Settings of a [`Client`]; start with [`Client::builder`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    target: String,
    timeout: Option<Duration>,
    connect_timeout: Duration,
    health_timeout: Duration,
    health_service: String,
    max_message_bytes: usize,
    retry_unavailable: bool,
    multiplex: bool,
    multiplex_settings: MultiplexSettings,
}

impl ClientBuilder {
    /// Default deadline of every unary call (default 10 s; `None` = no deadline). A handle from
    /// [`Client::with_timeout`] overrides it per call.
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long dialing may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Deadline of the health check made before a channel is reused after a failure (default 2 s,
    /// or less when the call's own deadline is nearer).
    pub fn health_timeout(mut self, timeout: Duration) -> Self {
        self.health_timeout = timeout;
        self
    }

    /// The service name the health check asks about (default `""`, the whole server; the sidecar
    /// also answers `sidecar.v1.Preprocessor` and `sidecar.v1.KvRouter`).
    pub fn health_service(mut self, service: impl Into<String>) -> Self {
        self.health_service = service.into();
        self
    }

    /// Largest message sent or accepted (default 64 MiB, the server's `--max-message-mb` default).
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Whether a unary call that fails with UNAVAILABLE is made once more on a re-established,
    /// health-checked channel (default true; every unary RPC of the contract is idempotent).
    pub fn retry_unavailable(mut self, retry: bool) -> Self {
        self.retry_unavailable = retry;
        self
    }

    /// Whether Tokenize, Detokenize and Render travel as requests on a pool of `Multiplex`
    /// streams (true: the cheapest way per request for a router making many small calls) or as
    /// one unary RPC each (false, the default). Either way the calls, their deadlines and their
    /// errors are the same; a server without Multiplex is served unary.
    pub fn multiplex(mut self, on: bool) -> Self {
        self.multiplex = on;
        self
    }

    /// Streams in the Multiplex pool (default 2; at least 1). Calls are spread over them round
    /// robin; each stream sends every call waiting at a moment as one message, so fewer streams
    /// batch more and more streams wait less behind one another.
    pub fn streams(mut self, streams: usize) -> Self {
        self.multiplex_settings.streams = streams.max(1);
        self
    }

    /// Requests whose encoding is larger than this take the unary path even with Multiplex on
    /// (default 256 KiB; batching saves nothing on them, and a message over the server's
    /// `--max-message-mb` would end the whole stream). Messages of the stream are closed at the
    /// same size.
    pub fn multiplex_max_request_bytes(mut self, bytes: usize) -> Self {
        self.multiplex_settings.max_request_bytes = bytes;
        self.multiplex_settings.max_batch_bytes = bytes;
        self
    }

    /// The client, without dialing: the first call connects. Must run inside a tokio runtime.
    pub fn build(self) -> Result<Client, Error> {
        let settings = Settings {
            target: self.target.parse()?,
            connect_timeout: self.connect_timeout,
            health_timeout: self.health_timeout,
            health_service: self.health_service,
            max_message_bytes: self.max_message_bytes,
            retry_unavailable: self.retry_unavailable,
        };
        let connections = Arc::new(Connections::new(settings)?);
        let carrier: Arc<dyn Carrier> = if self.multiplex {
            Arc::new(StreamCarrier::new(
                connections.clone(),
                self.multiplex_settings,
            ))
        } else {
            Arc::new(UnaryCarrier {
                connections: connections.clone(),
            })
        };
        Ok(Client {
            connections,
            carrier,
            timeout: self.timeout,
            stream_timeout: None,
        })
    }

    /// The client, after a health check has answered SERVING.
    pub async fn connect(self) -> Result<Client, Error> {
        let client = self.build()?;
        let deadline = Instant::now() + client.connections.settings.connect_timeout;
        let connection = client.connections.ready(Some(deadline)).await?;
        client
            .connections
            .check(&connection, Some(deadline))
            .await?;
        Ok(client)
    }
}

fn default_multiplex() -> MultiplexSettings {
    MultiplexSettings {
        streams: 2,
        max_batch_bytes: 256 << 10,
        max_request_bytes: 256 << 10,
    }
}

/// A client of one sidecar server. Cheap to clone (clones share the connection); use it from many
/// tasks at once: calls are multiplexed on one HTTP/2 connection.
#[derive(Debug, Clone)]
pub struct Client {
    connections: Arc<Connections>,
    carrier: Arc<dyn Carrier>,
    timeout: Option<Duration>,
    stream_timeout: Option<Duration>,
}

impl Client {
    /// Settings for a client of `target` (`unix:/path`, `host:port` or `http://host:port`).
    pub fn builder(target: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            target: target.into(),
            timeout: Some(Duration::from_secs(10)),
            connect_timeout: Duration::from_secs(5),
            health_timeout: Duration::from_secs(2),
            health_service: String::new(),
            max_message_bytes: 64 << 20,
            retry_unavailable: true,
            multiplex: false,
            multiplex_settings: default_multiplex(),
        }
    }

    /// A client with the default settings, after a health check has answered SERVING.
    pub async fn connect(target: impl Into<String>) -> Result<Client, Error> {
        Client::builder(target).connect().await
    }

    /// The same client with another deadline for the calls made through the returned handle
    /// (unary calls and the streams it opens); `client.with_timeout(d).tokenize(r)` is a per-call
    /// deadline. The deadline travels as `grpc-timeout` and is enforced here as well.
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        Client {
            timeout: Some(timeout),
            stream_timeout: Some(timeout),
            ..self.clone()
        }
    }

    /// The same client with no deadline at all.
    pub fn without_timeout(&self) -> Client {
        Client {
            timeout: None,
            stream_timeout: None,
            ..self.clone()
        }
    }

    /// Where this client connects.
    pub fn target(&self) -> &Target {
        &self.connections.settings.target
    }

    /// How many times the channel was re-established after a failure (for a router's metrics).
    pub fn reconnects(&self) -> u64 {
        self.connections.reconnects()
    }

    /// `Preprocessor/Render`: chat template and tokenization in one call.
    pub async fn render(&self, request: RenderRequest) -> Result<RenderResponse, Error> {
        Ok(self.carrier.render(request, self.timeout).await?)
    }

    /// `Preprocessor/Tokenize`: a batch of texts to token ids.
    pub async fn tokenize(&self, request: TokenizeRequest) -> Result<TokenizeResponse, Error> {
        Ok(self.carrier.tokenize(request, self.timeout).await?)
    }

    /// `Preprocessor/Detokenize`: a batch of id sequences to text.
    pub async fn detokenize(
        &self,
        request: DetokenizeRequest,
    ) -> Result<DetokenizeResponse, Error> {
        Ok(self.carrier.detokenize(request, self.timeout).await?)
    }

    /// `Preprocessor/ListModels`: the hosted models, their fingerprints and defaults.
    pub async fn list_models(&self) -> Result<ListModelsResponse, Error> {
        let call = |c: Arc<Connection>, r| async move {
            c.preprocessor
                .clone()
                .list_models(r)
                .await
                .map(Response::into_inner)
        };
        Ok(self
            .connections
            .unary(self.timeout, ListModelsRequest {}, call)
            .await?)
    }

    /// `KvRouter/Score`: every known worker of a model by its cached prefix of the request.
    /// FAILED_PRECONDITION when the server runs without `--kv-events`.
    pub async fn score(&self, request: ScoreRequest) -> Result<ScoreResponse, Error> {
        let call = |c: Arc<Connection>, r| async move {
            c.kv_router.clone().score(r).await.map(Response::into_inner)
        };
        Ok(self.connections.unary(self.timeout, request, call).await?)
    }

    /// `KvRouter/KvStatus`: what the prefix indexes hold and how the event sources are doing.
    pub async fn kv_status(&self) -> Result<KvStatusResponse, Error> {
        let call = |c: Arc<Connection>, r| async move {
            c.kv_router
                .clone()
                .kv_status(r)
                .await
                .map(Response::into_inner)
        };
        Ok(self
            .connections
            .unary(self.timeout, KvStatusRequest {}, call)
            .await?)
    }

    /// `grpc.health.v1.Health/Check` of `service` (`""` = the whole server). An unknown service
    /// is NOT_FOUND, as the health protocol says.
    pub async fn health(&self, service: &str) -> Result<ServingStatus, Error> {
        let call = |c: Arc<Connection>, r| async move {
            c.health.clone().check(r).await.map(Response::into_inner)
        };
        let response = self
            .connections
            .unary(
                self.timeout,
                HealthCheckRequest {
                    service: service.to_string(),
                },
                call,
            )
            .await?;
        Ok(ServingStatus::try_from(response.status).unwrap_or(ServingStatus::Unknown))
    }

    /// `Preprocessor/ParseStream`: opens the bidirectional stream (see [`ParseStream`]). It has
    /// no deadline unless this handle came from [`Client::with_timeout`].
    pub async fn parse_stream(&self) -> Result<ParseStream, Error> {
        ParseStream::start(self.connections.clone(), self.stream_timeout).await
    }
}
