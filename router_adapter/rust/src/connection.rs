//! The transport: one HTTP/2 channel to the sidecar, re-established after a failure and
//! health-checked before it is used again.
//!
//! Every call takes the current [`Connection`]. A call that fails with UNAVAILABLE (connection
//! refused or reset, server draining) marks it suspect; the next user re-creates the channel and
//! runs `grpc.health.v1.Health/Check` on it before sending anything. Idempotent unary calls (all of
//! the contract's unary RPCs are) are then tried once more within their original deadline.
//!
//! A failed reconnect is not tried again for a while (50 ms, doubling up to 250 ms while the server
//! stays away): meanwhile calls fail at once with its UNAVAILABLE status, so a router calling at
//! full rate while the server is down does not dial it (and spawn a channel) for every call.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic::{Code, Extensions, Request, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::target::Target;
use crate::v1::admin_client::AdminClient;
use crate::v1::kv_router_client::KvRouterClient;
use crate::v1::preprocessor_client::PreprocessorClient;

/// How connections are made and checked (set through `ClientBuilder`).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub target: Target,
    pub connect_timeout: Duration,
    pub health_timeout: Duration,
    pub health_service: String,
    /// When `health_service` is unknown to the server (NOT_FOUND: a server older than
    /// [`crate::PROCESS_HEALTH_SERVICE`]), ask about `""` instead (the default service only, not
    /// one the caller chose).
    pub health_fallback: bool,
    pub max_message_bytes: usize,
    pub retry_unavailable: bool,
    /// The first and the longest wait after a failed reconnect.
    pub reconnect_backoff: (Duration, Duration),
}

/// The longest deadline a call can carry: `grpc-timeout` has at most 8 digits, of hours at most
/// (about 11,400 years), and tonic panics on a longer one. A longer timeout (`Duration::MAX`
/// included) means no deadline, wherever a timeout is applied ([`bounded`], [`deadline_after`]).
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(99_999_999 * 3600);

/// `timeout`, or None (no deadline) when it is longer than [`MAX_TIMEOUT`].
pub(crate) fn bounded(timeout: Option<Duration>) -> Option<Duration> {
    timeout.filter(|t| *t <= MAX_TIMEOUT)
}

/// The instant `timeout` from now; None (no deadline) for no timeout or one longer than
/// [`MAX_TIMEOUT`].
pub(crate) fn deadline_after(timeout: Option<Duration>) -> Option<Instant> {
    bounded(timeout).and_then(|t| Instant::now().checked_add(t))
}

/// `Settings::reconnect_backoff` of every client (the tests shorten or lengthen it).
pub(crate) const RECONNECT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(50), Duration::from_millis(250));

/// One channel and the generated clients on it (clones share the channel).
#[derive(Debug)]
pub(crate) struct Connection {
    pub generation: u64,
    pub preprocessor: PreprocessorClient<Channel>,
    pub kv_router: KvRouterClient<Channel>,
    pub admin: AdminClient<Channel>,
    pub health: HealthClient<Channel>,
    /// The client's `max_message_bytes` (the generated clients' limits).
    pub max_message_bytes: usize,
    /// A call on this channel failed as if the server were gone: check health before reusing it.
    suspect: AtomicBool,
}

impl Connection {
    fn open(settings: &Settings, generation: u64) -> Result<Self, crate::Error> {
        let channel = settings
            .target
            .endpoint()?
            .connect_timeout(settings.connect_timeout)
            .tcp_nodelay(true)
            .connect_lazy();
        let max = settings.max_message_bytes;
        Ok(Connection {
            generation,
            preprocessor: PreprocessorClient::new(channel.clone())
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
            kv_router: KvRouterClient::new(channel.clone())
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
            admin: AdminClient::new(channel.clone())
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
            health: HealthClient::new(channel),
            max_message_bytes: max,
            suspect: AtomicBool::new(false),
        })
    }

    /// Marks the channel for a health check before its next use.
    pub fn mark_suspect(&self) {
        self.suspect.store(true, Ordering::Relaxed);
    }

    /// Whether a call failed on it since it was checked.
    pub fn is_suspect(&self) -> bool {
        self.suspect.load(Ordering::Relaxed)
    }
}

/// The current connection and the rules for replacing it.
#[derive(Debug)]
pub(crate) struct Connections {
    pub settings: Settings,
    current: Mutex<Arc<Connection>>,
    /// Channels created, the first one included (each later one is a reconnect attempt).
    generations: AtomicU64,
    /// Reconnects whose health check answered SERVING.
    reestablished: AtomicU64,
    /// Held while one caller re-creates and checks the channel; the others wait and share its result.
    recovering: tokio::sync::Mutex<Recovery>,
    /// The server answered NOT_FOUND for `settings.health_service`: checks ask about `""`.
    health_unknown: AtomicBool,
}

/// How the last reconnect went, and when the next may be tried.
#[derive(Debug)]
struct Recovery {
    last_failure: Option<Status>,
    retry_at: Option<Instant>,
    backoff: Duration,
}

impl Connections {
    /// A lazy connection: nothing is dialed until the first call.
    pub fn new(settings: Settings) -> Result<Self, crate::Error> {
        let first = Connection::open(&settings, 0)?;
        Ok(Connections {
            current: Mutex::new(Arc::new(first)),
            generations: AtomicU64::new(1),
            reestablished: AtomicU64::new(0),
            recovering: tokio::sync::Mutex::new(Recovery {
                last_failure: None,
                retry_at: None,
                backoff: settings.reconnect_backoff.0,
            }),
            settings,
            health_unknown: AtomicBool::new(false),
        })
    }

    /// Channels re-established after a failure (attempts whose health check failed not counted).
    pub fn reconnects(&self) -> u64 {
        self.reestablished.load(Ordering::Relaxed)
    }

    /// Whether the current channel failed and has not passed a health check since.
    pub fn is_suspect(&self) -> bool {
        self.current().is_suspect()
    }

    fn current(&self) -> Arc<Connection> {
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The connection to use now; after a failure, a fresh channel that has passed a health check.
    pub async fn ready(&self, deadline: Option<Instant>) -> Result<Arc<Connection>, Status> {
        let current = self.current();
        if !current.suspect.load(Ordering::Relaxed) {
            return Ok(current);
        }
        self.recover(current.generation, deadline).await
    }

    /// Replaces the connection of `failed_generation` with a new channel and checks its health.
    /// Callers that were waiting on the same attempt get its outcome without a second check.
    pub async fn recover(
        &self,
        failed_generation: u64,
        deadline: Option<Instant>,
    ) -> Result<Arc<Connection>, Status> {
        // Waiting for another caller's check counts against this call's deadline too.
        let mut recovery = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, self.recovering.lock())
                .await
                .map_err(|_| deadline_passed())?,
            None => self.recovering.lock().await,
        };
        let current = self.current();
        if current.generation != failed_generation {
            if !current.suspect.load(Ordering::Relaxed) {
                return Ok(current);
            }
            if let Some(status) = recovery.last_failure.as_ref() {
                return Err(status.clone());
            }
        }
        if let (Some(at), Some(status)) = (recovery.retry_at, recovery.last_failure.as_ref()) {
            if Instant::now() < at {
                return Err(status.clone()); // the server was away a moment ago: do not dial yet
            }
        }
        let fresh = Arc::new(
            Connection::open(
                &self.settings,
                self.generations.fetch_add(1, Ordering::Relaxed),
            )
            .map_err(to_status)?,
        );
        let outcome = self.check(&fresh, deadline).await;
        if outcome.is_err() {
            fresh.mark_suspect();
        }
        *self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = fresh.clone();
        match outcome {
            Ok(()) => {
                self.reestablished.fetch_add(1, Ordering::Relaxed);
                recovery.last_failure = None;
                recovery.retry_at = None;
                recovery.backoff = self.settings.reconnect_backoff.0;
                Ok(fresh)
            }
            Err(status) => {
                let wait = recovery.backoff;
                let status = Status::unavailable(format!(
                    "{}: reconnect failed: health check: {} (next attempt in {} ms)",
                    self.settings.target,
                    status.message(),
                    wait.as_millis()
                ));
                recovery.last_failure = Some(status.clone());
                recovery.retry_at = Some(Instant::now() + wait);
                recovery.backoff = (wait * 2).min(self.settings.reconnect_backoff.1);
                Err(status)
            }
        }
    }

    /// `grpc.health.v1.Health/Check` of the configured service on `connection`: Ok when SERVING.
    /// A server that does not know the default per-process service (NOT_FOUND) is asked about
    /// `""` instead, from then on.
    pub async fn check(
        &self,
        connection: &Connection,
        deadline: Option<Instant>,
    ) -> Result<(), Status> {
        let limit = Instant::now() + self.settings.health_timeout;
        let deadline = Some(deadline.map_or(limit, |d| d.min(limit)));
        let ask = |service: String| {
            let mut health = connection.health.clone();
            within(deadline, |timeout| async move {
                health
                    .check(with_timeout(HealthCheckRequest { service }, timeout))
                    .await
                    .map(tonic::Response::into_inner)
            })
        };
        let fallback = self.settings.health_fallback;
        let response = if fallback && self.health_unknown.load(Ordering::Relaxed) {
            ask(String::new()).await?
        } else {
            match ask(self.settings.health_service.clone()).await {
                Err(status) if fallback && status.code() == Code::NotFound => {
                    self.health_unknown.store(true, Ordering::Relaxed);
                    ask(String::new()).await?
                }
                other => other?,
            }
        };
        match ServingStatus::try_from(response.status) {
            Ok(ServingStatus::Serving) => Ok(()),
            other => Err(Status::unavailable(format!(
                "not serving ({:?})",
                other.unwrap_or(ServingStatus::Unknown)
            ))),
        }
    }

    /// Runs an idempotent unary call: on UNAVAILABLE the channel is re-established, checked, and
    /// the call made once more, all within the same deadline. `message` is cloned for the retry
    /// only when retries are on. A message larger than `max_message_bytes` is not sent:
    /// RESOURCE_EXHAUSTED at once (tonic would reset the HTTP/2 stream, which looks like a broken
    /// connection).
    pub async fn unary<M, T, F, Fut>(
        &self,
        timeout: Option<Duration>,
        message: M,
        call: F,
    ) -> Result<T, Status>
    where
        M: Clone + prost::Message,
        F: Fn(Arc<Connection>, Request<M>) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        self.unary_with(timeout, message, None, call).await
    }

    /// [`unary`](Self::unary) with the caller's metadata on the request (and on its retry).
    pub async fn unary_with<M, T, F, Fut>(
        &self,
        timeout: Option<Duration>,
        message: M,
        metadata: Option<&MetadataMap>,
        call: F,
    ) -> Result<T, Status>
    where
        M: Clone + prost::Message,
        F: Fn(Arc<Connection>, Request<M>) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        check_size(message.encoded_len(), self.settings.max_message_bytes)?;
        let deadline = deadline_after(timeout);
        let spare = self.settings.retry_unavailable.then(|| message.clone());
        let connection = self.ready(deadline).await?;
        let first = within(deadline, |timeout| {
            call(
                connection.clone(),
                with_metadata(message, timeout, metadata),
            )
        })
        .await;
        let failure = match first {
            Err(status) if status.code() == Code::Unavailable => status,
            other => return other,
        };
        connection.mark_suspect();
        let Some(message) = spare else {
            return Err(failure);
        };
        let connection = match self.recover(connection.generation, deadline).await {
            Ok(connection) => connection,
            Err(recovery) => {
                return Err(Status::unavailable(format!(
                    "{}; {}",
                    failure.message(),
                    recovery.message()
                )))
            }
        };
        within(deadline, |timeout| {
            call(connection, with_metadata(message, timeout, metadata))
        })
        .await
    }
}

/// RESOURCE_EXHAUSTED when a request of `len` bytes is over the client's `max_message_bytes`
/// (as gRPC's other clients report a message over their limit).
pub(crate) fn check_size(len: usize, max: usize) -> Result<(), Status> {
    if len <= max {
        return Ok(());
    }
    Err(Status::resource_exhausted(format!(
        "the request is {len} bytes, larger than the client's limit of {max} bytes \
         (ClientBuilder::max_message_bytes); it was not sent"
    )))
}

/// A request carrying the remaining time as its `grpc-timeout` (none when longer than
/// [`MAX_TIMEOUT`]).
pub(crate) fn with_timeout<M>(message: M, timeout: Option<Duration>) -> Request<M> {
    with_metadata(message, timeout, None)
}

/// A request carrying `metadata` (the caller's own entries, e.g. `x-request-id`) and the
/// remaining time as its `grpc-timeout`.
pub(crate) fn with_metadata<M>(
    message: M,
    timeout: Option<Duration>,
    metadata: Option<&MetadataMap>,
) -> Request<M> {
    let mut request = match metadata {
        Some(metadata) => Request::from_parts(metadata.clone(), Extensions::default(), message),
        None => Request::new(message),
    };
    if let Some(timeout) = bounded(timeout) {
        request.set_timeout(timeout);
    }
    request
}

/// Runs `call(remaining)` and gives up with DEADLINE_EXCEEDED when `deadline` passes, so a call
/// never outlives its deadline even when the server does not enforce it (dropping the future
/// resets the HTTP/2 stream, which cancels the call on the server).
pub(crate) async fn within<T, F, Fut>(deadline: Option<Instant>, call: F) -> Result<T, Status>
where
    F: FnOnce(Option<Duration>) -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let Some(deadline) = deadline else {
        return call(None).await.map_err(local_failure);
    };
    let remaining = deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        return Err(deadline_passed());
    }
    match tokio::time::timeout_at(deadline, call(Some(remaining))).await {
        Err(_elapsed) => Err(deadline_passed()),
        Ok(result) => result.map_err(local_failure),
    }
}

/// Statuses tonic makes from local errors, spelled as gRPC defines them (and as the other
/// languages' clients report them): its own `grpc-timeout` enforcement (CANCELLED, "Timeout
/// expired") is DEADLINE_EXCEEDED; a broken connection is UNAVAILABLE, which also sends the channel
/// to a health check and lets idempotent calls be retried. tonic reports a broken connection as
/// UNKNOWN with the transport's error as the source: a `transport::Error` (connect, write to a
/// server that has gone), or, when the server dies during a call, the `hyper::Error` ("error
/// reading a body from connection", "connection closed before message completed"), `h2::Error`
/// or `io::Error` (connection reset) of the read. A response over the client's
/// `max_message_bytes` (tonic: OUT_OF_RANGE "decoded message length too large") is
/// RESOURCE_EXHAUSTED, as gRPC's other clients report it. The server's own statuses carry no
/// source and pass unchanged.
pub(crate) fn local_failure(status: Status) -> Status {
    let causes = || std::iter::successors(std::error::Error::source(&status), |e| e.source());
    if causes().any(|e| e.is::<tonic::TimeoutExpired>()) {
        return deadline_passed();
    }
    if status.code() == Code::OutOfRange
        && status
            .message()
            .starts_with("Error, decoded message length too large")
    {
        return Status::resource_exhausted(format!(
            "the response is larger than the client's limit (ClientBuilder::max_message_bytes): {}",
            status.message()
        ));
    }
    if status.code() == Code::Unavailable {
        return status;
    }
    let unknown = status.code() == Code::Unknown;
    let broken = causes().find(|e| {
        e.is::<tonic::transport::Error>()
            || (unknown
                && (e.is::<hyper::Error>() || e.is::<h2::Error>() || e.is::<std::io::Error>()))
    });
    let Some(broken) = broken else {
        return status;
    };
    let cause = std::iter::successors(Some(broken), |e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ");
    Status::unavailable(format!("connection failed: {cause}"))
}

fn deadline_passed() -> Status {
    Status::deadline_exceeded("the call's deadline passed before the sidecar answered")
}

fn to_status(error: crate::Error) -> Status {
    match error {
        crate::Error::Status(status) => status,
        other => Status::invalid_argument(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_server;

    #[test]
    fn a_connection_reset_during_a_call_is_unavailable() {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let status = Status::from_error(Box::new(reset));
        assert_eq!(status.code(), Code::Unknown); // what tonic makes of it
        let status = local_failure(status);
        assert_eq!(status.code(), Code::Unavailable);
        assert!(status.message().contains("reset by peer"), "{status:?}");
    }

    fn connections(path: &std::path::Path, backoff: Duration) -> Connections {
        Connections::new(Settings {
            target: format!("unix:{}", path.display()).parse().unwrap(),
            connect_timeout: Duration::from_secs(5),
            health_timeout: Duration::from_secs(5),
            health_service: String::new(),
            health_fallback: false,
            max_message_bytes: 1 << 20,
            retry_unavailable: true,
            reconnect_backoff: (backoff, backoff),
        })
        .unwrap()
    }

    async fn health(connections: &Connections) -> Result<(), Status> {
        let request = HealthCheckRequest::default();
        let call = |c: Arc<Connection>, r| async move { c.health.clone().check(r).await };
        connections
            .unary(Some(Duration::from_secs(30)), request, call)
            .await
            .map(drop)
    }

    /// While the server is away, a failed reconnect is not repeated by every call: they fail at
    /// once with its status until the backoff has passed (here: longer than the test).
    #[test]
    fn a_failed_reconnect_is_not_retried_by_every_call() {
        fake_server::runtime().block_on(async {
            let path = fake_server::socket_path("conn-missing.sock");
            let connections = connections(&path, Duration::from_secs(3600));
            for _ in 0..100 {
                let error = health(&connections).await.unwrap_err();
                assert_eq!(error.code(), Code::Unavailable, "{error}");
            }
            // The first channel and one reconnect attempt (the first call's retry).
            assert_eq!(connections.generations.load(Ordering::Relaxed), 2);
            assert_eq!(connections.reconnects(), 0);
        });
    }

    /// reconnects() counts channels that came back, not attempts.
    #[test]
    fn reconnects_counts_the_reconnects_that_succeeded() {
        fake_server::runtime().block_on(async {
            let path = fake_server::socket_path("conn-later.sock");
            let connections = connections(&path, Duration::ZERO);
            for _ in 0..5 {
                health(&connections).await.unwrap_err();
            }
            assert_eq!(connections.reconnects(), 0);
            fake_server::grpc(&path, |_| fake_server::serving());
            health(&connections).await.unwrap();
            assert_eq!(connections.reconnects(), 1);
        });
    }

    #[test]
    fn the_servers_own_statuses_pass_unchanged() {
        for status in [
            Status::unknown("the server's own UNKNOWN"),
            Status::internal("boom"),
        ] {
            let code = status.code();
            assert_eq!(local_failure(status).code(), code);
        }
    }
}
