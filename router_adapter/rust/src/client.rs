//! The typed client: one method per RPC of `sidecar.v1.Preprocessor`, `sidecar.v1.KvRouter`,
//! `sidecar.v1.Admin` and `grpc.health.v1.Health`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tonic::metadata::MetadataMap;
use tonic::{Code, Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::carrier::CallFuture;
use crate::carrier::{Carrier, UnaryCarrier};
use crate::connection::{
    bounded, Connection, Connections, Settings, MAX_TIMEOUT, RECONNECT_BACKOFF,
};
use crate::fleet::{discover, scan, Discovery, Fleet, MakeMember, Member};
use crate::metadata::{entry, ResponseMeta, REQUEST_ID};
use crate::multiplex::{MultiplexSettings, StreamCarrier};
use crate::parse_stream::ParseStream;
use crate::target::Target;
use crate::v1::{
    DetokenizeRequest, DetokenizeResponse, KvStatusRequest, KvStatusResponse, ListModelsRequest,
    ListModelsResponse, ListParsersRequest, ListParsersResponse, ReloadModelsRequest,
    ReloadModelsResponse, RenderRequest, RenderResponse, ScoreRequest, ScoreResponse,
    TokenizeRequest, TokenizeResponse,
};
use crate::Error;

/// The health service name a `--processes N` server answers for one process alone.
pub const PROCESS_HEALTH_SERVICE: &str = "sidecar.process";

/// Settings of a [`Client`]; start with [`Client::builder`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    target: String,
    timeout: Option<Duration>,
    connect_timeout: Duration,
    health_timeout: Duration,
    health_service: Option<String>,
    max_message_bytes: usize,
    retry_unavailable: bool,
    multiplex: bool,
    multiplex_settings: MultiplexSettings,
}

impl ClientBuilder {
    /// Default deadline of every unary call (default 10 s; `None` = no deadline, as is a timeout
    /// too long for gRPC's `grpc-timeout`, such as `Duration::MAX`). A handle from
    /// [`Client::with_timeout`] overrides it per call.
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = bounded(timeout);
        self
    }

    /// How long dialing may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.min(MAX_TIMEOUT);
        self
    }

    /// Deadline of the health check made before a channel is reused after a failure (default 2 s,
    /// or less when the call's own deadline is nearer).
    pub fn health_timeout(mut self, timeout: Duration) -> Self {
        self.health_timeout = timeout.min(MAX_TIMEOUT);
        self
    }

    /// The service name the health check asks about. By default [`PROCESS_HEALTH_SERVICE`]: the
    /// process this connection reached, alone (every other name of a `--processes N` server
    /// answers for the group, so a restarting sibling would make a live process look down; over
    /// TCP the kernel picks the process, and the connection stays with it). A server that does not
    /// know that name (older) is asked about `""` instead. The sidecar also answers `""`,
    /// `sidecar.v1.Preprocessor`, `sidecar.v1.KvRouter` and each model's name.
    pub fn health_service(mut self, service: impl Into<String>) -> Self {
        self.health_service = Some(service.into());
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

    /// Streams in the Multiplex pool of each server process (default 2; at least 1). Calls are spread over them round
    /// robin; each stream sends every call waiting at a moment as one message, so fewer streams
    /// batch more and more streams wait less behind one another.
    pub fn streams(mut self, streams: usize) -> Self {
        self.multiplex_settings.streams = streams.max(1);
        self
    }

    /// Requests whose encoding, wrapped in its `MultiplexCall`, is larger than this take the unary
    /// path even with Multiplex on (default 256 KiB; batching saves nothing on them, and a message
    /// over the server's `--max-message-mb` would end the whole stream, so at most that limit).
    /// Messages of the stream are closed at the same size.
    pub fn multiplex_max_request_bytes(mut self, bytes: usize) -> Self {
        self.multiplex_settings.max_request_bytes = bytes;
        self
    }

    /// Calls one Multiplex stream may hold waiting for the server to take them (default 8192).
    /// The server takes messages as fast as it reads them; when it stops (hung, overloaded) the
    /// calls over this bound fail at once with RESOURCE_EXHAUSTED rather than pile up in memory.
    /// A call that gives up while waiting (its deadline) leaves the queue.
    pub fn multiplex_max_queued_calls(mut self, calls: usize) -> Self {
        self.multiplex_settings.max_queued_calls = calls.max(1);
        self
    }

    /// The bytes of those waiting calls, per stream (default 32 MiB); as
    /// [`multiplex_max_queued_calls`](Self::multiplex_max_queued_calls).
    pub fn multiplex_max_queued_bytes(mut self, bytes: usize) -> Self {
        self.multiplex_settings.max_queued_bytes = bytes;
        self
    }

    /// The client, without dialing: the first call connects. Must run inside a tokio runtime.
    /// A `unix:PATH` target whose `PATH` does not exist but `PATH.0`, `PATH.1`, ... do (a server
    /// with `--processes N`) gets one channel per process socket found now; the sockets are
    /// looked at again at the first call, after failures and periodically (see
    /// [`Client::processes`]).
    pub fn build(self) -> Result<Client, Error> {
        let target: Target = self.target.parse()?;
        let members = self.members(discover(&target))?;
        Ok(self.client(target, members, false))
    }

    fn client(&self, target: Target, members: Vec<Member>, scanned: bool) -> Client {
        let discovery = match &target {
            Target::Unix(base) => {
                let builder = self.clone();
                let make: MakeMember = Box::new(move |process| builder.member(process).ok());
                Some(Discovery::new(base.clone(), make, scanned))
            }
            Target::Tcp(_) => None,
        };
        Client {
            fleet: Arc::new(Fleet::new(members, discovery)),
            target: Arc::new(target),
            timeout: self.timeout,
            stream_timeout: None,
            metadata: None,
        }
    }

    /// One member per server process socket.
    fn members(&self, processes: Vec<Target>) -> Result<Vec<Member>, Error> {
        processes
            .into_iter()
            .map(|process| self.member(process))
            .collect()
    }

    /// The member of one server process: its connection and what carries its calls.
    fn member(&self, process: Target) -> Result<Member, Error> {
        let settings = Settings {
            target: process,
            connect_timeout: self.connect_timeout,
            health_timeout: self.health_timeout,
            health_service: self
                .health_service
                .clone()
                .unwrap_or_else(|| PROCESS_HEALTH_SERVICE.to_string()),
            health_fallback: self.health_service.is_none(),
            max_message_bytes: self.max_message_bytes,
            retry_unavailable: self.retry_unavailable,
            reconnect_backoff: RECONNECT_BACKOFF,
        };
        let connections = Arc::new(Connections::new(settings)?);
        let carrier: Arc<dyn Carrier> = if self.multiplex {
            Arc::new(StreamCarrier::new(
                connections.clone(),
                self.multiplex_settings.clone(),
            ))
        } else {
            Arc::new(UnaryCarrier {
                connections: connections.clone(),
            })
        };
        Ok(Member::new(connections, carrier))
    }

    /// The client, after a health check of every server process has answered SERVING.
    ///
    /// Of a `--processes N` server's sockets, one that refuses connections is left out (with a
    /// `tracing` warning): a `PATH.N` left behind by an earlier run whose process is gone must not
    /// stop the client from using the live ones, and a `PATH` that refuses connections does not
    /// hide `PATH.N` next to it. When none answers, the error names each socket. A process left
    /// out joins once its socket answers (the client looks again, see [`Client::processes`]).
    pub async fn connect(self) -> Result<Client, Error> {
        let target: Target = self.target.parse()?;
        let processes = match &target {
            Target::Unix(base) => scan(base, &[]).await,
            Target::Tcp(_) => None,
        };
        let members = self.members(processes.unwrap_or_else(|| discover(&target)))?;
        let several = members.len() > 1;
        let mut live = Vec::new();
        let mut refused = Vec::new();
        for member in members {
            let connections = &member.connections;
            let deadline = Instant::now() + connections.settings.connect_timeout;
            let checked = match connections.ready(Some(deadline)).await {
                Ok(connection) => connections.check(&connection, Some(deadline)).await,
                Err(status) => Err(status),
            };
            let status = match checked {
                Ok(()) => {
                    live.push(member);
                    continue;
                }
                Err(status) => status,
            };
            let named = Status::new(
                status.code(),
                format!("{}: {}", connections.settings.target, status.message()),
            );
            if !several || status.code() != Code::Unavailable {
                return Err(named.into());
            }
            refused.push(named.message().to_string());
        }
        if live.is_empty() {
            return Err(Status::unavailable(format!(
                "no server process answered: {}",
                refused.join("; ")
            ))
            .into());
        }
        for why in &refused {
            tracing::warn!("sidecar client: left out a server process socket: {why}");
        }
        Ok(self.client(target, live, true))
    }
}

fn default_multiplex() -> MultiplexSettings {
    MultiplexSettings {
        streams: 2,
        max_request_bytes: 256 << 10,
        max_queued_calls: 8192,
        max_queued_bytes: 32 << 20,
        stalled_after: crate::multiplex::QUEUE_STALLED_AFTER,
    }
}

/// A client of one sidecar server. Cheap to clone (clones share the connections); use it from many
/// tasks at once: calls are multiplexed on one HTTP/2 connection per server process.
#[derive(Debug, Clone)]
pub struct Client {
    fleet: Arc<Fleet>,
    target: Arc<Target>,
    timeout: Option<Duration>,
    stream_timeout: Option<Duration>,
    /// The caller's metadata sent with every call of this handle ([`Client::with_metadata`]).
    metadata: Option<Arc<MetadataMap>>,
}

impl Client {
    /// Settings for a client of `target` (`unix:/path`, `host:port` or `http://host:port`).
    pub fn builder(target: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            target: target.into(),
            timeout: Some(Duration::from_secs(10)),
            connect_timeout: Duration::from_secs(5),
            health_timeout: Duration::from_secs(2),
            health_service: None,
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
    /// deadline. The deadline travels as `grpc-timeout` and is enforced here as well. A timeout
    /// longer than `grpc-timeout` can carry (about 11,400 years; `Duration::MAX`) is no deadline.
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        let timeout = bounded(Some(timeout));
        Client {
            timeout,
            stream_timeout: timeout,
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

    /// The same client, whose calls through the returned handle (unary calls and the streams it
    /// opens) carry `key: value` as gRPC metadata, besides what this handle already carries (the
    /// same key is replaced). For what the server reads: `x-request-id` (see
    /// [`with_request_id`](Self::with_request_id)), and `traceparent` / `tracestate` (W3C trace
    /// context: the server's span continues the caller's trace when it runs with
    /// `--otlp-endpoint`). INVALID_ARGUMENT for a key that is not an ASCII metadata key
    /// (`-bin` keys included) or is gRPC's own (`grpc-*`, `te`, `content-type`, `user-agent`), and
    /// for a value that is not printable ASCII.
    ///
    /// Calls with metadata travel as one unary RPC each even when the client was built with
    /// [`ClientBuilder::multiplex`]: a call on a Multiplex stream has no metadata of its own.
    pub fn with_metadata(&self, key: &str, value: &str) -> Result<Client, Error> {
        let (key, value) = entry(key, value)?;
        let mut metadata = self.metadata.as_deref().cloned().unwrap_or_default();
        metadata.insert(key, value);
        Ok(Client {
            metadata: Some(Arc::new(metadata)),
            ..self.clone()
        })
    }

    /// [`with_metadata`](Self::with_metadata)`("x-request-id", id)`: the server logs the calls
    /// under this id (and names it in their trace spans) instead of one it makes, and echoes it
    /// back (see the `*_with_meta` methods and [`Error::request_id`]). The server takes at most
    /// 128 characters of printable ASCII; it replaces a longer or unprintable id by its own.
    pub fn with_request_id(&self, id: &str) -> Result<Client, Error> {
        self.with_metadata(REQUEST_ID, id)
    }

    /// Where this client connects.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The server processes this client spreads its calls over now (1 unless the target is the
    /// base path of a `--processes N` server's sockets). For a `unix:PATH` target the sockets are
    /// looked at again at the first call, after a call failed UNAVAILABLE (at most every 250 ms)
    /// and at intervals doubling from 250 ms to 30 s, so the number follows the server.
    pub fn processes(&self) -> usize {
        self.fleet.members().len()
    }

    /// How many times a channel was re-established after a failure, i.e. answered a health check
    /// again (for a router's metrics; failed attempts while the server is away are not counted).
    pub fn reconnects(&self) -> u64 {
        self.fleet.reconnects()
    }

    /// `Preprocessor/Render`: chat template and tokenization in one call.
    pub async fn render(&self, request: RenderRequest) -> Result<RenderResponse, Error> {
        if self.metadata.is_some() {
            return Ok(self.unary(request, rpc::render).await?.0);
        }
        Ok(self.fleet.call(request, self.timeout, on::render).await?)
    }

    /// [`render`](Self::render), with what the server sent back besides the response (its
    /// `x-request-id`). Always one unary RPC, also with [`ClientBuilder::multiplex`] on (a
    /// Multiplex stream's calls have no metadata of their own); so are all `*_with_meta` calls.
    pub async fn render_with_meta(
        &self,
        request: RenderRequest,
    ) -> Result<(RenderResponse, ResponseMeta), Error> {
        self.unary(request, rpc::render).await
    }

    /// `Preprocessor/Tokenize`: a batch of texts to token ids.
    pub async fn tokenize(&self, request: TokenizeRequest) -> Result<TokenizeResponse, Error> {
        if self.metadata.is_some() {
            return Ok(self.unary(request, rpc::tokenize).await?.0);
        }
        Ok(self.fleet.call(request, self.timeout, on::tokenize).await?)
    }

    /// [`tokenize`](Self::tokenize), with what the server sent back besides the response.
    pub async fn tokenize_with_meta(
        &self,
        request: TokenizeRequest,
    ) -> Result<(TokenizeResponse, ResponseMeta), Error> {
        self.unary(request, rpc::tokenize).await
    }

    /// `Preprocessor/Detokenize`: a batch of id sequences to text.
    pub async fn detokenize(
        &self,
        request: DetokenizeRequest,
    ) -> Result<DetokenizeResponse, Error> {
        if self.metadata.is_some() {
            return Ok(self.unary(request, rpc::detokenize).await?.0);
        }
        Ok(self
            .fleet
            .call(request, self.timeout, on::detokenize)
            .await?)
    }

    /// [`detokenize`](Self::detokenize), with what the server sent back besides the response.
    pub async fn detokenize_with_meta(
        &self,
        request: DetokenizeRequest,
    ) -> Result<(DetokenizeResponse, ResponseMeta), Error> {
        self.unary(request, rpc::detokenize).await
    }

    /// `Preprocessor/ListModels`: the hosted models, their fingerprints and defaults.
    pub async fn list_models(&self) -> Result<ListModelsResponse, Error> {
        Ok(self.list_models_with_meta().await?.0)
    }

    /// [`list_models`](Self::list_models), with what the server sent back besides the response.
    pub async fn list_models_with_meta(&self) -> Result<(ListModelsResponse, ResponseMeta), Error> {
        self.unary(ListModelsRequest {}, rpc::list_models).await
    }

    /// `Preprocessor/ListParsers`: the tool and reasoning parsers this server knows, their
    /// aliases and markers, and the engine versions whose names are covered.
    pub async fn list_parsers(&self) -> Result<ListParsersResponse, Error> {
        Ok(self.list_parsers_with_meta().await?.0)
    }

    /// [`list_parsers`](Self::list_parsers), with what the server sent back besides the response.
    pub async fn list_parsers_with_meta(
        &self,
    ) -> Result<(ListParsersResponse, ResponseMeta), Error> {
        self.unary(ListParsersRequest {}, rpc::list_parsers).await
    }

    /// `KvRouter/Score`: every known worker of a model by its cached prefix of the request.
    /// FAILED_PRECONDITION when the server runs without `--kv-events`.
    pub async fn score(&self, request: ScoreRequest) -> Result<ScoreResponse, Error> {
        Ok(self.score_with_meta(request).await?.0)
    }

    /// [`score`](Self::score), with what the server sent back besides the response.
    pub async fn score_with_meta(
        &self,
        request: ScoreRequest,
    ) -> Result<(ScoreResponse, ResponseMeta), Error> {
        self.unary(request, rpc::score).await
    }

    /// `KvRouter/KvStatus`: what the prefix indexes hold and how the event sources are doing.
    pub async fn kv_status(&self) -> Result<KvStatusResponse, Error> {
        Ok(self.kv_status_with_meta().await?.0)
    }

    /// [`kv_status`](Self::kv_status), with what the server sent back besides the response.
    pub async fn kv_status_with_meta(&self) -> Result<(KvStatusResponse, ResponseMeta), Error> {
        self.unary(KvStatusRequest {}, rpc::kv_status).await
    }

    /// `Admin/ReloadModels`: reloads the model directories whose files changed (all hosted models
    /// when `request.models` is empty; `force` reloads unchanged ones too). Served only by a server
    /// started with `sidecar serve --enable-admin` (UNIMPLEMENTED otherwise); an unknown model is
    /// NOT_FOUND. Of a `--processes N` server it reaches one process, as every call does.
    pub async fn reload_models(
        &self,
        request: ReloadModelsRequest,
    ) -> Result<ReloadModelsResponse, Error> {
        Ok(self.reload_models_with_meta(request).await?.0)
    }

    /// [`reload_models`](Self::reload_models), with what the server sent back besides the
    /// response.
    pub async fn reload_models_with_meta(
        &self,
        request: ReloadModelsRequest,
    ) -> Result<(ReloadModelsResponse, ResponseMeta), Error> {
        self.unary(request, rpc::reload_models).await
    }

    /// `grpc.health.v1.Health/Check` of `service` (`""` = the whole server; every process of a
    /// `--processes N` server answers for all of them). An unknown service is NOT_FOUND, as the
    /// health protocol says.
    pub async fn health(&self, service: &str) -> Result<ServingStatus, Error> {
        let request = HealthCheckRequest {
            service: service.to_string(),
        };
        let (response, _) = self.unary(request, rpc::health).await?;
        Ok(ServingStatus::try_from(response.status).unwrap_or(ServingStatus::Unknown))
    }

    /// One unary RPC (never on a Multiplex stream) carrying this handle's metadata, on a picked
    /// server process (see [`Fleet::call`]).
    async fn unary<M, T>(&self, message: M, rpc: Rpc<M, T>) -> Result<(T, ResponseMeta), Error>
    where
        M: Clone + prost::Message + Send + 'static,
        T: Send + 'static,
    {
        let sent = Sent {
            message,
            metadata: self.metadata.clone(),
            rpc,
        };
        Ok(self
            .fleet
            .call(sent, self.timeout, on::sent::<M, T>)
            .await?)
    }

    /// `Preprocessor/ParseStream`: opens the bidirectional stream (see [`ParseStream`]) on the
    /// next healthy server process. It has no deadline unless this handle came from
    /// [`Client::with_timeout`].
    pub async fn parse_stream(&self) -> Result<ParseStream, Error> {
        let member = self.fleet.member().await;
        ParseStream::start(
            member.connections.clone(),
            self.stream_timeout,
            self.metadata.as_deref(),
        )
        .await
    }
}

/// Each RPC on one server process (for [`Fleet::call`]).
mod on {
    use super::*;

    pub fn tokenize(
        m: &Member,
        r: TokenizeRequest,
        t: Option<Duration>,
    ) -> CallFuture<'_, TokenizeResponse> {
        m.carrier.tokenize(r, t)
    }

    pub fn detokenize(
        m: &Member,
        r: DetokenizeRequest,
        t: Option<Duration>,
    ) -> CallFuture<'_, DetokenizeResponse> {
        m.carrier.detokenize(r, t)
    }

    pub fn render(
        m: &Member,
        r: RenderRequest,
        t: Option<Duration>,
    ) -> CallFuture<'_, RenderResponse> {
        m.carrier.render(r, t)
    }

    /// A unary RPC with the caller's metadata; its answer with the response's metadata.
    pub fn sent<M, T>(
        m: &Member,
        sent: Sent<M, T>,
        t: Option<Duration>,
    ) -> CallFuture<'_, (T, ResponseMeta)>
    where
        M: Clone + prost::Message + Send + 'static,
        T: Send + 'static,
    {
        let Sent {
            message,
            metadata,
            rpc,
        } = sent;
        Box::pin(async move {
            let response = m
                .connections
                .unary_with(t, message, metadata.as_deref(), rpc)
                .await?;
            let (metadata, message, _) = response.into_parts();
            Ok((message, ResponseMeta::new(metadata)))
        })
    }
}

/// A generated client's call of one RPC.
type RpcFuture<T> = Pin<Box<dyn Future<Output = Result<Response<T>, Status>> + Send>>;
type Rpc<M, T> = fn(Arc<Connection>, Request<M>) -> RpcFuture<T>;

/// A unary call's message, the metadata it carries and its RPC (what [`on::sent`] makes).
struct Sent<M, T> {
    message: M,
    metadata: Option<Arc<MetadataMap>>,
    rpc: Rpc<M, T>,
}

impl<M: Clone, T> Clone for Sent<M, T> {
    fn clone(&self) -> Self {
        Sent {
            message: self.message.clone(),
            metadata: self.metadata.clone(),
            rpc: self.rpc,
        }
    }
}

/// The unary RPCs on one connection.
mod rpc {
    use super::*;

    macro_rules! rpc {
        ($name:ident, $service:ident, $method:ident, $request:ty, $response:ty) => {
            pub fn $name(c: Arc<Connection>, r: Request<$request>) -> RpcFuture<$response> {
                Box::pin(async move { c.$service.clone().$method(r).await })
            }
        };
    }

    rpc!(render, preprocessor, render, RenderRequest, RenderResponse);
    rpc!(
        tokenize,
        preprocessor,
        tokenize,
        TokenizeRequest,
        TokenizeResponse
    );
    rpc!(
        detokenize,
        preprocessor,
        detokenize,
        DetokenizeRequest,
        DetokenizeResponse
    );
    rpc!(
        list_models,
        preprocessor,
        list_models,
        ListModelsRequest,
        ListModelsResponse
    );
    rpc!(
        list_parsers,
        preprocessor,
        list_parsers,
        ListParsersRequest,
        ListParsersResponse
    );
    rpc!(score, kv_router, score, ScoreRequest, ScoreResponse);
    rpc!(
        kv_status,
        kv_router,
        kv_status,
        KvStatusRequest,
        KvStatusResponse
    );
    rpc!(
        reload_models,
        admin,
        reload_models,
        ReloadModelsRequest,
        ReloadModelsResponse
    );
    rpc!(
        health,
        health,
        check,
        HealthCheckRequest,
        HealthCheckResponse
    );
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
