//! The multiplexed transport: Tokenize, Detokenize and Render as requests on a pool of
//! `Preprocessor/Multiplex` streams (see `MultiplexRequest` in `protos/`).
//!
//! Each call gets an id, registers a waiter, and queues its `MultiplexCall` on one stream of the
//! pool (round robin). The stream's outbound side (`mux_queue::Coalesce`) turns every call queued
//! at the moment tonic asks for the next message into one `MultiplexRequest`, so under load one
//! message carries many calls; a reader task hands each `MultiplexResult` to its waiter. A call
//! whose future is dropped before its result (its deadline passed, or the caller gave up) is
//! taken back out of the queue, or, when a message has carried it already, sends a cancel for its
//! id, coalesced the same way. The queue is bounded (`multiplex_max_queued_calls`,
//! `multiplex_max_queued_bytes`): when the server stops taking messages, calls fail at once with
//! RESOURCE_EXHAUSTED instead of piling up in memory.
//!
//! A stream that breaks fails its waiting calls with UNAVAILABLE (the connection goes to a health
//! check, as for unary calls) and is replaced by the next call; a call that failed so, or that the
//! server refused because it is draining, is made once more within its deadline on a fresh stream
//! (the contract's requests are idempotent). Requests whose `MultiplexCall` would be larger than
//! `max_request_bytes` take the
//! unary path (multiplexing saves nothing on them, and one message over the server's limit would
//! end the whole stream), as does everything when the server has no Multiplex (an older server,
//! or `--backend reference`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prost::Message;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tonic::{Code, Request, Status};

use crate::carrier::{CallFuture, Carrier, UnaryCarrier};
use crate::connection::{deadline_after, local_failure, Connection, Connections};
use crate::mux_queue::{wire_len, Coalesce, Limits, Queue};
use crate::v1::multiplex_call::Request as Call;
use crate::v1::multiplex_result::Result as Outcome;
use crate::v1::{
    DetokenizeRequest, DetokenizeResponse, MultiplexCall, MultiplexResponse, RenderRequest,
    RenderResponse, TokenizeRequest, TokenizeResponse,
};

/// How long a stream's queue may hold calls past its bounds while the server takes no message:
/// longer, and the server is taken to have stopped reading (a server that is reading takes a
/// message every few milliseconds, however long the queue).
pub(crate) const QUEUE_STALLED_AFTER: Duration = Duration::from_secs(1);

/// How the pool behaves (set through `ClientBuilder`).
#[derive(Debug, Clone)]
pub(crate) struct MultiplexSettings {
    /// Streams in the pool.
    pub streams: usize,
    /// Requests whose `MultiplexCall` is larger than this go unary; also the size of a message.
    pub max_request_bytes: usize,
    /// Calls a stream may hold waiting for the server to take them.
    pub max_queued_calls: usize,
    /// Their bytes.
    pub max_queued_bytes: usize,
    /// The bounds above refuse calls once the stream has taken no message for this long.
    pub stalled_after: Duration,
}

/// Carries calls on a pool of Multiplex streams (see the module docs).
#[derive(Debug)]
pub(crate) struct StreamCarrier {
    connections: Arc<Connections>,
    unary: UnaryCarrier,
    settings: MultiplexSettings,
    slots: Vec<Mutex<Option<Arc<MuxStream>>>>,
    /// Where the search for the least busy stream starts (round robin between equals).
    next_slot: AtomicUsize,
    next_id: AtomicU64,
    /// The server has no Multiplex (UNIMPLEMENTED, or FAILED_PRECONDITION on a backend without
    /// it): every call goes unary from then on.
    unsupported: Arc<AtomicBool>,
    /// A stream has opened: the server has Multiplex (until then a call keeps a copy of its
    /// request, to go unary if the server turns out not to).
    supported: Arc<AtomicBool>,
}

impl StreamCarrier {
    pub fn new(connections: Arc<Connections>, mut settings: MultiplexSettings) -> Self {
        let streams = settings.streams.max(1);
        // A message over the client's own limit would end the stream: larger requests go unary
        // (where they are refused before they are sent), and messages close before it.
        settings.max_request_bytes = settings
            .max_request_bytes
            .min(connections.settings.max_message_bytes);
        StreamCarrier {
            unary: UnaryCarrier {
                connections: connections.clone(),
            },
            connections,
            settings,
            slots: (0..streams).map(|_| Mutex::new(None)).collect(),
            next_slot: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            unsupported: Arc::new(AtomicBool::new(false)),
            supported: Arc::new(AtomicBool::new(false)),
        }
    }

    /// How busy a slot is for a new call: the calls its stream holds, queued or sent and not
    /// answered yet (0 without a usable stream: the call opens one).
    fn slot_load(slot: &Mutex<Option<Arc<MuxStream>>>) -> usize {
        match lock(slot).as_ref().filter(|s| s.usable()) {
            Some(stream) => stream.waiting.load(Ordering::Relaxed),
            None => 0,
        }
    }

    /// The stream a call goes on: the one holding the fewest calls (queued or in flight), the
    /// next in turn between equals, so a burst is spread over every stream of the pool and each
    /// stream still gathers the calls queued on it into one message; a slot without a live
    /// stream gets one (on a health-checked connection).
    async fn stream(&self, deadline: Option<Instant>) -> Result<Arc<MuxStream>, Status> {
        let n = self.slots.len();
        let start = self.next_slot.fetch_add(1, Ordering::Relaxed) % n;
        let mut best: Option<(usize, usize)> = None;
        for i in (0..n).map(|k| (start + k) % n) {
            let load = Self::slot_load(&self.slots[i]);
            if best.is_none_or(|(_, least)| load < least) {
                best = Some((i, load));
            }
        }
        let slot = &self.slots[best.map_or(0, |(i, _)| i)];
        if let Some(stream) = lock(slot).as_ref().filter(|s| s.usable()) {
            return Ok(stream.clone());
        }
        let connection = self.connections.ready(deadline).await?;
        let mut slot = lock(slot);
        if let Some(stream) = slot.as_ref().filter(|s| s.usable()) {
            return Ok(stream.clone());
        }
        let support = (self.unsupported.clone(), self.supported.clone());
        let stream = MuxStream::open(connection, &self.settings, support);
        *slot = Some(stream.clone());
        Ok(stream)
    }

    /// Sends one call and waits for its outcome: once more on UNAVAILABLE (as unary calls
    /// do), by the unary path when the server turns out to have no Multiplex.
    async fn call(&self, call: Call, timeout: Option<Duration>) -> Result<Outcome, Status> {
        let deadline = deadline_after(timeout);
        // Kept for a retry, and, until a stream has opened, for the unary path: whether the
        // server has Multiplex is only known then, even with retries off.
        let keep =
            self.connections.settings.retry_unavailable || !self.supported.load(Ordering::Relaxed);
        let spare = keep.then(|| call.clone());
        let failure = match self.attempt(call, deadline).await {
            Err(status) if status.code() == Code::Unavailable || self.unsupported() => status,
            other => return other,
        };
        let Some(call) = spare else {
            return Err(failure);
        };
        if self.unsupported() {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            return self.unary_call(call, left).await;
        }
        if !self.connections.settings.retry_unavailable {
            return Err(failure);
        }
        self.attempt(call, deadline).await
    }

    async fn unary_call(&self, call: Call, timeout: Option<Duration>) -> Result<Outcome, Status> {
        match call {
            Call::Tokenize(r) => self.unary.tokenize(r, timeout).await.map(Outcome::Tokenize),
            Call::Detokenize(r) => self
                .unary
                .detokenize(r, timeout)
                .await
                .map(Outcome::Detokenize),
            Call::Render(r) => self.unary.render(r, timeout).await.map(Outcome::Render),
        }
    }

    fn unsupported(&self) -> bool {
        self.unsupported.load(Ordering::Relaxed)
    }

    async fn attempt(&self, call: Call, deadline: Option<Instant>) -> Result<Outcome, Status> {
        let stream = self.stream(deadline).await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if deadline.is_some_and(|d| d <= Instant::now()) {
            return Err(deadline_passed());
        }
        // `timeout_us` is set when a message takes the call: the time left then.
        let call = MultiplexCall {
            id,
            timeout_us: 0,
            request: Some(call),
        };
        let waiter = stream.send(call, deadline)?;
        let guard = CancelOnDrop {
            stream: &stream,
            id,
        };
        let outcome = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, waiter)
                .await
                .map_err(|_| deadline_passed())?,
            None => waiter.await,
        };
        std::mem::forget(guard);
        let outcome = outcome.unwrap_or_else(|_| Err(Status::unavailable("stream dropped")))?;
        if let Outcome::Error(error) = &outcome {
            if error.code == Code::Unavailable as i32 {
                // The server is draining: this stream takes no more requests.
                stream.retire();
                return Err(Status::unavailable(error.message.clone()));
            }
        }
        Ok(outcome)
    }

    /// Whether a request of `size` bytes takes the unary path: too large for a stream once
    /// wrapped in its `MultiplexCall` (the server's size limit applies to the whole message), or
    /// no Multiplex on the server.
    fn goes_unary(&self, size: usize) -> bool {
        wire_len(size) > self.settings.max_request_bytes || self.unsupported()
    }
}

/// An `Outcome` as the response `pick` selects, or the status it carries.
fn expect<T>(outcome: Outcome, pick: impl FnOnce(Outcome) -> Option<T>) -> Result<T, Status> {
    match outcome {
        Outcome::Error(status) => Err(Status::new(Code::from(status.code), status.message)),
        other => pick(other).ok_or_else(|| {
            Status::internal("multiplex: the server answered with another kind of response")
        }),
    }
}

impl Carrier for StreamCarrier {
    fn load(&self) -> Option<usize> {
        self.slots.iter().map(Self::slot_load).min()
    }

    fn tokenize(
        &self,
        request: TokenizeRequest,
        timeout: Option<Duration>,
    ) -> CallFuture<'_, TokenizeResponse> {
        if self.goes_unary(request.encoded_len()) {
            return self.unary.tokenize(request, timeout);
        }
        Box::pin(async move {
            let outcome = self.call(Call::Tokenize(request), timeout).await?;
            expect(outcome, |o| match o {
                Outcome::Tokenize(r) => Some(r),
                _ => None,
            })
        })
    }

    fn detokenize(
        &self,
        request: DetokenizeRequest,
        timeout: Option<Duration>,
    ) -> CallFuture<'_, DetokenizeResponse> {
        if self.goes_unary(request.encoded_len()) {
            return self.unary.detokenize(request, timeout);
        }
        Box::pin(async move {
            let outcome = self.call(Call::Detokenize(request), timeout).await?;
            expect(outcome, |o| match o {
                Outcome::Detokenize(r) => Some(r),
                _ => None,
            })
        })
    }

    fn render(
        &self,
        request: RenderRequest,
        timeout: Option<Duration>,
    ) -> CallFuture<'_, RenderResponse> {
        if self.goes_unary(request.encoded_len()) {
            return self.unary.render(request, timeout);
        }
        Box::pin(async move {
            let outcome = self.call(Call::Render(request), timeout).await?;
            expect(outcome, |o| match o {
                Outcome::Render(r) => Some(r),
                _ => None,
            })
        })
    }
}

type Waiter = oneshot::Sender<Result<Outcome, Status>>;

/// What the calls of a stream and its reader share.
#[derive(Debug, Default)]
struct State {
    waiting: HashMap<u64, Waiter>,
    /// Set once the stream has ended: how it ended, for calls that arrive after.
    failed: Option<Status>,
}

/// One stream of the pool. Dropping the last handle half-closes the stream (the server answers
/// what is still waiting, then ends it).
#[derive(Debug)]
struct MuxStream {
    queue: Arc<Queue>,
    /// Calls registered and not answered yet: queued, or sent and waiting for their result.
    waiting: Arc<AtomicUsize>,
    state: Arc<Mutex<State>>,
    connection: Arc<Connection>,
    retired: AtomicBool,
}

impl Drop for MuxStream {
    fn drop(&mut self) {
        self.queue.close();
    }
}

impl MuxStream {
    fn open(
        connection: Arc<Connection>,
        settings: &MultiplexSettings,
        (unsupported, supported): (Arc<AtomicBool>, Arc<AtomicBool>),
    ) -> Arc<MuxStream> {
        let state = Arc::new(Mutex::new(State::default()));
        let waiting = Arc::new(AtomicUsize::new(0));
        let queue = Queue::new(Limits {
            max_calls: settings.max_queued_calls,
            max_bytes: settings.max_queued_bytes,
            max_batch_bytes: settings.max_request_bytes,
            stalled_after: settings.stalled_after,
        });
        let (expired_state, expired_waiting) = (state.clone(), waiting.clone());
        let outbound = Coalesce {
            queue: queue.clone(),
            // Its caller is giving up at this moment too; the server never sees the call.
            expired: Box::new(move |id| {
                if let Some(waiter) = lock(&expired_state).waiting.remove(&id) {
                    expired_waiting.fetch_sub(1, Ordering::Relaxed);
                    let _ = waiter.send(Err(deadline_passed()));
                }
            }),
        };
        // One message carries the results of many calls, cut by the server at its own
        // `--max-message-mb`, which may be above this client's `max_message_bytes`: the client's
        // limit is about one response, so it applies to each result (in `read`), not to the
        // message; the server's limit bounds the message.
        let mut client = connection
            .preprocessor
            .clone()
            .max_decoding_message_size(usize::MAX);
        let max_result_bytes = connection.max_message_bytes;
        let reader_state = state.clone();
        let reader_waiting = waiting.clone();
        let reader_connection = connection.clone();
        tokio::spawn(async move {
            let ended = match client.multiplex(Request::new(outbound)).await {
                Ok(response) => {
                    supported.store(true, Ordering::Relaxed);
                    let inbound = response.into_inner();
                    read(inbound, &reader_state, &reader_waiting, max_result_bytes).await
                }
                Err(status) => {
                    let status = local_failure(status);
                    if is_unsupported(&status) {
                        unsupported.store(true, Ordering::Relaxed);
                    }
                    status
                }
            };
            if ended.code() == Code::Unavailable {
                reader_connection.mark_suspect();
            }
            fail_all(&reader_state, ended);
            reader_waiting.store(0, Ordering::Relaxed);
        });
        Arc::new(MuxStream {
            queue,
            waiting,
            state,
            connection,
            retired: AtomicBool::new(false),
        })
    }

    /// Whether new calls may use it.
    fn usable(&self) -> bool {
        !self.retired.load(Ordering::Relaxed)
            && lock(&self.state).failed.is_none()
            && !self.connection.is_suspect()
    }

    /// Takes no more calls (those waiting still get their results).
    fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }

    /// Registers the call's waiter and queues it.
    fn send(
        &self,
        call: MultiplexCall,
        deadline: Option<Instant>,
    ) -> Result<oneshot::Receiver<Result<Outcome, Status>>, Status> {
        let (waiter, outcome) = oneshot::channel();
        let id = call.id;
        {
            let mut state = lock(&self.state);
            if let Some(status) = &state.failed {
                return Err(status.clone());
            }
            state.waiting.insert(id, waiter);
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        if let Err(full) = self.queue.push_call(call, deadline) {
            if lock(&self.state).waiting.remove(&id).is_some() {
                self.waiting.fetch_sub(1, Ordering::Relaxed);
            }
            return Err(full);
        }
        Ok(outcome)
    }
}

/// Takes back, or sends a cancel for, a call whose future was dropped before its result came.
struct CancelOnDrop<'a> {
    stream: &'a MuxStream,
    id: u64,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        let unanswered = lock(&self.stream.state).waiting.remove(&self.id).is_some();
        if unanswered {
            self.stream.waiting.fetch_sub(1, Ordering::Relaxed);
            if !self.stream.queue.withdraw(self.id) {
                self.stream.queue.push_cancel(self.id);
            }
        }
    }
}

/// Hands each result to its waiter until the stream ends; returns how it ended.
async fn read(
    mut inbound: tonic::Streaming<MultiplexResponse>,
    state: &Mutex<State>,
    waiting: &AtomicUsize,
    max_result_bytes: usize,
) -> Status {
    loop {
        match inbound.message().await {
            Ok(Some(response)) => {
                let mut state = lock(state);
                for result in response.results {
                    let Some(waiter) = state.waiting.remove(&result.id) else {
                        continue; // answered already (cancelled)
                    };
                    waiting.fetch_sub(1, Ordering::Relaxed);
                    let outcome = match result.result {
                        None => Err(Status::internal(
                            "multiplex: the server sent a result with nothing in it",
                        )),
                        Some(outcome) => within_limit(outcome, max_result_bytes),
                    };
                    let _ = waiter.send(outcome);
                }
            }
            Ok(None) => return Status::unavailable("multiplex: the server ended the stream"),
            Err(status) => return local_failure(status),
        }
    }
}

/// The result, or RESOURCE_EXHAUSTED when its response is larger than the client's
/// `max_message_bytes` (as the unary call's response would be refused).
fn within_limit(outcome: Outcome, max: usize) -> Result<Outcome, Status> {
    let len = match &outcome {
        Outcome::Tokenize(r) => r.encoded_len(),
        Outcome::Detokenize(r) => r.encoded_len(),
        Outcome::Render(r) => r.encoded_len(),
        Outcome::Error(_) => 0,
    };
    if len > max {
        return Err(Status::resource_exhausted(format!(
            "the response is larger than the client's limit (ClientBuilder::max_message_bytes): \
             found {len} bytes, the limit is: {max} bytes"
        )));
    }
    Ok(outcome)
}

fn fail_all(state: &Mutex<State>, status: Status) {
    let waiting = {
        let mut state = lock(state);
        state.failed = Some(status.clone());
        std::mem::take(&mut state.waiting)
    };
    for (_, waiter) in waiting {
        let _ = waiter.send(Err(status.clone()));
    }
}

/// A server without the Multiplex RPC, or one whose backend cannot run it.
fn is_unsupported(status: &Status) -> bool {
    status.code() == Code::Unimplemented
        || (status.code() == Code::FailedPrecondition && status.message().starts_with("Multiplex:"))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn deadline_passed() -> Status {
    Status::deadline_exceeded("the call's deadline passed before the sidecar answered")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::Settings;
    use crate::fake_server::{self, Reply};

    fn tokenize(text_len: usize) -> TokenizeRequest {
        TokenizeRequest {
            model: "m".into(),
            texts: vec!["x".repeat(text_len)],
            ..Default::default()
        }
    }

    /// A one-stream carrier to the fake server at `path`.
    fn carrier(path: &std::path::Path, retry: bool, max_queued_bytes: usize) -> StreamCarrier {
        carrier_of(path, retry, max_queued_bytes, 1)
    }

    fn carrier_of(
        path: &std::path::Path,
        retry: bool,
        max_queued_bytes: usize,
        streams: usize,
    ) -> StreamCarrier {
        let settings = Settings {
            target: format!("unix:{}", path.display()).parse().unwrap(),
            connect_timeout: Duration::from_secs(5),
            health_timeout: Duration::from_secs(2),
            health_service: String::new(),
            health_fallback: false,
            max_message_bytes: 4 << 20,
            retry_unavailable: retry,
            reconnect_backoff: crate::connection::RECONNECT_BACKOFF,
        };
        let connections = Arc::new(Connections::new(settings).unwrap());
        let limits = MultiplexSettings {
            streams,
            max_request_bytes: 256 << 10,
            max_queued_calls: 1000,
            max_queued_bytes,
            stalled_after: QUEUE_STALLED_AFTER,
        };
        StreamCarrier::new(connections, limits)
    }

    /// A unary Tokenize answer, marked so a test can tell it from one that came by the stream.
    fn unary_answer() -> Reply {
        Reply::Message(
            TokenizeResponse {
                fingerprint: "unary".into(),
                ..Default::default()
            }
            .encode_to_vec(),
        )
    }

    /// A server without Multiplex (an older one, `--backend reference`): the first calls go
    /// unary too, also with retries off (the copy they need is kept until Multiplex is known).
    #[test]
    fn a_server_without_multiplex_is_served_unary_without_retries() {
        fake_server::runtime().block_on(async {
            let path = fake_server::socket_path("mux-unsupported.sock");
            fake_server::grpc(&path, |rpc| match rpc {
                "/sidecar.v1.Preprocessor/Multiplex" => Reply::Status(Code::Unimplemented),
                _ => unary_answer(),
            });
            let carrier = carrier(&path, false, 1 << 20);
            for _ in 0..3 {
                let timeout = Some(Duration::from_secs(30));
                let response = carrier.tokenize(tokenize(10), timeout).await.unwrap();
                assert_eq!(response.fingerprint, "unary");
            }
        });
    }

    /// A request exactly at the size bound is over it once wrapped in its `MultiplexCall` (id,
    /// deadline, tags): it goes unary, where it fits the server's limit, rather than on a
    /// stream, where a message over the limit would end the stream for every call on it.
    #[test]
    fn a_request_at_the_size_bound_goes_unary() {
        fake_server::runtime().block_on(async {
            let path = fake_server::socket_path("mux-size.sock");
            fake_server::grpc(&path, |rpc| match rpc {
                "/sidecar.v1.Preprocessor/Multiplex" => Reply::Hang,
                _ => unary_answer(),
            });
            let carrier = carrier(&path, true, 1 << 20);
            let bound = carrier.settings.max_request_bytes;
            let mut request = tokenize(bound - 10);
            while request.encoded_len() < bound {
                request.texts[0].push('x');
            }
            assert_eq!(request.encoded_len(), bound);
            let timeout = Some(Duration::from_secs(5));
            let response = carrier.tokenize(request, timeout).await.unwrap();
            assert_eq!(response.fingerprint, "unary");
        });
    }

    /// A server that stopped reading its Multiplex streams: calls over the queue's bound fail at
    /// once, naming the bound, instead of piling up in memory; every call that gave up has left
    /// the queue, so nothing stale is sent once the server reads again.
    #[test]
    fn a_server_not_reading_fills_a_bounded_queue() {
        fake_server::runtime().block_on(async {
            let path = fake_server::socket_path("mux-hangs.sock");
            fake_server::grpc(&path, |_| Reply::Hang);
            let carrier = Arc::new(carrier(&path, true, 1 << 20));
            let spawn = |n: usize, timeout: Duration| -> Vec<_> {
                (0..n)
                    .map(|_| {
                        let carrier = carrier.clone();
                        tokio::spawn(async move {
                            carrier.tokenize(tokenize(100_000), Some(timeout)).await
                        })
                    })
                    .collect()
            };
            // Queued past the bound: the stream has not been waiting long.
            let first = spawn(12, Duration::from_secs(5));
            tokio::time::sleep(QUEUE_STALLED_AFTER + Duration::from_millis(200)).await;
            // The server has taken nothing for longer than QUEUE_STALLED_AFTER: refused.
            let calls = spawn(40, Duration::from_secs(2));
            let mut refused = 0;
            for call in calls {
                let outcome = tokio::time::timeout(Duration::from_secs(30), call)
                    .await
                    .expect("a call outlived its deadline")
                    .unwrap();
                let error = outcome.unwrap_err();
                match error.code() {
                    Code::ResourceExhausted => {
                        assert!(error.message().contains("multiplex_max_queued_bytes"));
                        refused += 1;
                    }
                    code => assert_eq!(code, Code::DeadlineExceeded, "{error}"),
                }
            }
            // Those of the 12 that the HTTP/2 window has not taken (about 1 MiB) still wait: the
            // later calls are refused but for the room the taken ones left.
            assert!(refused >= 30, "{refused} of 40 refused");
            for call in first {
                let error = call.await.unwrap().unwrap_err();
                assert_eq!(error.code(), Code::DeadlineExceeded, "{error}");
            }
            let stream = lock(&carrier.slots[0]).clone().expect("the stream");
            assert_eq!(
                stream.queue.calls(),
                0,
                "calls that gave up are still queued"
            );
        });
    }

    /// A Multiplex server that answers every call of each message at once.
    fn answering_server(rpc: &str) -> Reply {
        match rpc {
            "/grpc.health.v1.Health/Check" => fake_server::serving(),
            "/sidecar.v1.Preprocessor/Multiplex" => Reply::Stream(|_, message| {
                let request = crate::v1::MultiplexRequest::decode(message).unwrap();
                let results = request
                    .calls
                    .iter()
                    .map(|call| crate::v1::MultiplexResult {
                        id: call.id,
                        result: Some(Outcome::Tokenize(TokenizeResponse {
                            fingerprint: "mux".into(),
                            ..Default::default()
                        })),
                    })
                    .collect();
                MultiplexResponse { results }.encode_to_vec()
            }),
            _ => Reply::Status(Code::Unimplemented),
        }
    }

    /// A burst far over a stream's queue bound, against a server that takes and answers every
    /// message: no call fails, and the calls are spread over every stream of the pool (a new
    /// call went to the stream with calls queued, so a burst piled onto one stream and hit its
    /// bound while the other sat unused).
    #[test]
    fn a_burst_is_spread_over_the_streams_and_not_refused() {
        fake_server::runtime().block_on(async {
            let path = fake_server::socket_path("mux-burst.sock");
            fake_server::grpc(&path, answering_server);
            let carrier = Arc::new(carrier_of(&path, true, 64 << 10, 2));
            let calls: Vec<_> = (0..400)
                .map(|_| {
                    let carrier = carrier.clone();
                    let timeout = Some(Duration::from_secs(30));
                    tokio::spawn(async move { carrier.tokenize(tokenize(2_000), timeout).await })
                })
                .collect();
            for call in calls {
                let response = call.await.unwrap().unwrap();
                assert_eq!(response.fingerprint, "mux");
            }
            assert!(carrier.slots.iter().all(|slot| lock(slot).is_some()));
        });
    }

    /// Calls in flight together, answered in one message larger than the client's
    /// `max_message_bytes` (the server cuts its messages at its own, larger, limit): each call
    /// gets its result (the message ended the stream for every call on it, OUT_OF_RANGE, where
    /// the same calls made unary succeeded); a result over the limit fails its own call only.
    #[test]
    fn results_coalesced_past_the_clients_limit_reach_their_calls() {
        fake_server::runtime().block_on(async {
            let path = fake_server::socket_path("mux-coalesced.sock");
            fake_server::grpc(&path, |rpc| match rpc {
                "/grpc.health.v1.Health/Check" => fake_server::serving(),
                // Each call's answer has a fingerprint twice as long as the text it tokenizes.
                "/sidecar.v1.Preprocessor/Multiplex" => Reply::Stream(|_, message| {
                    let request = crate::v1::MultiplexRequest::decode(message).unwrap();
                    let results = request
                        .calls
                        .into_iter()
                        .map(|call| {
                            let Some(Call::Tokenize(tokenize)) = call.request else {
                                unreachable!()
                            };
                            let response = TokenizeResponse {
                                fingerprint: tokenize.texts[0].repeat(2),
                                ..Default::default()
                            };
                            crate::v1::MultiplexResult {
                                id: call.id,
                                result: Some(Outcome::Tokenize(response)),
                            }
                        })
                        .collect();
                    MultiplexResponse { results }.encode_to_vec()
                }),
                _ => Reply::Status(Code::Unimplemented),
            });
            let client = crate::Client::builder(format!("unix:{}", path.display()))
                .multiplex(true)
                .streams(1)
                .max_message_bytes(2_000)
                .build()
                .unwrap();
            let calls: Vec<_> = [600, 600, 600, 600, 600, 600, 600, 1_900]
                .into_iter()
                .map(|len| {
                    let client = client.clone();
                    tokio::spawn(async move { client.tokenize(tokenize(len)).await })
                })
                .collect();
            let mut outcomes = Vec::new();
            for call in calls {
                outcomes.push(call.await.unwrap());
            }
            for outcome in &outcomes[..7] {
                assert_eq!(outcome.as_ref().unwrap().fingerprint.len(), 1_200);
            }
            let error = outcomes[7].as_ref().unwrap_err();
            assert_eq!(error.code(), Code::ResourceExhausted, "{error}");
            assert!(error.message().contains("max_message_bytes"), "{error}");
        });
    }
}
