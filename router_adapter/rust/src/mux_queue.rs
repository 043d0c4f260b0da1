//! The outbound side of one Multiplex stream: the calls and cancels waiting for tonic to ask for
//! the next message, and [`Coalesce`], which turns everything waiting at that moment into one
//! `MultiplexRequest`.
//!
//! The queue is bounded (calls and bytes) because tonic only asks for a message when the
//! connection can take it: a server that stopped reading (hung, overloaded) would otherwise let
//! it grow with the call rate. The bound is for such a server only: it refuses calls once the
//! stream has taken no message for [`Limits::stalled_after`] while calls waited. A burst against
//! a server that is reading (tonic takes a message every few milliseconds) may queue past it, as
//! the same calls made unary would all be in flight at once. A call that gives up before a message carries it is taken back
//! out (it costs no memory and the server never runs it), and one whose deadline has passed by
//! the time its message is built is dropped; the time left (`timeout_us`) is measured then too,
//! not when the call was queued.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use prost::Message;
use tokio::time::Instant;
use tokio_stream::Stream;
use tonic::Status;

use crate::v1::{MultiplexCall, MultiplexRequest};

/// Bytes a `MultiplexCall` around a request of `request_len` bytes takes in a `MultiplexRequest`,
/// at most (largest id and timeout): what the server's message-size limit sees.
pub(crate) fn wire_len(request_len: usize) -> usize {
    let field = |len: usize| 1 + prost::length_delimiter_len(len) + len;
    let call = 2 * (1 + 10) + field(request_len);
    field(call)
}

/// A cancel's share of a `MultiplexRequest` (a packed varint), at most.
const CANCEL_LEN: usize = 10;

/// How much may wait (set through `ClientBuilder`).
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub max_calls: usize,
    pub max_bytes: usize,
    /// A message is closed once its calls reach this many bytes.
    pub max_batch_bytes: usize,
    /// `max_calls` and `max_bytes` refuse calls only when no message has been taken for this
    /// long while calls waited (the server stopped reading), not during a burst it is taking.
    pub stalled_after: Duration,
}

enum Entry {
    Call {
        // Boxed: a call is hundreds of bytes, a cancel eight.
        call: Box<MultiplexCall>,
        deadline: Option<Instant>,
        len: usize,
    },
    Cancel(u64),
}

#[derive(Default)]
struct Inner {
    entries: VecDeque<Entry>,
    calls: usize,
    bytes: usize,
    waker: Option<Waker>,
    closed: bool,
    /// When a message was last taken, or calls began to wait (the queue was empty before).
    progress: Option<Instant>,
}

/// The queue of one stream, shared by its calls and its [`Coalesce`].
pub(crate) struct Queue {
    inner: Mutex<Inner>,
    limits: Limits,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}

impl Queue {
    pub fn new(limits: Limits) -> Arc<Queue> {
        Arc::new(Queue {
            inner: Mutex::new(Inner::default()),
            limits,
        })
    }

    /// Queues a call (its `timeout_us` is set when a message takes it); RESOURCE_EXHAUSTED when
    /// the queue is full, i.e. the server has not been taking messages.
    pub fn push_call(&self, call: MultiplexCall, deadline: Option<Instant>) -> Result<(), Status> {
        let len = wire_len(call.encoded_len());
        let mut inner = self.lock();
        let limits = &self.limits;
        let now = Instant::now();
        // One call always fits, however large, so a small byte limit cannot refuse everything.
        let over = inner.calls > 0
            && (inner.calls >= limits.max_calls || inner.bytes + len > limits.max_bytes);
        let stalled = inner
            .progress
            .is_none_or(|at| now.saturating_duration_since(at) >= limits.stalled_after);
        if over && stalled {
            return Err(Status::resource_exhausted(format!(
                "multiplex: {} calls ({} bytes) already wait for the server to take them and it \
                 has taken none for {} ms, the limit is {} calls and {} bytes \
                 (ClientBuilder::multiplex_max_queued_calls, multiplex_max_queued_bytes); the \
                 server is not keeping up or not answering",
                inner.calls,
                inner.bytes,
                inner
                    .progress
                    .map_or(0, |at| now.saturating_duration_since(at).as_millis()),
                limits.max_calls,
                limits.max_bytes
            )));
        }
        if inner.calls == 0 {
            inner.progress = Some(now);
        }
        inner.calls += 1;
        inner.bytes += len;
        inner.entries.push_back(Entry::Call {
            call: Box::new(call),
            deadline,
            len,
        });
        wake(inner);
        Ok(())
    }

    /// Queues a cancel for a call a message has already carried.
    pub fn push_cancel(&self, id: u64) {
        let mut inner = self.lock();
        inner.entries.push_back(Entry::Cancel(id));
        wake(inner);
    }

    /// Takes call `id` back out if no message has carried it yet (then the server never sees
    /// it and needs no cancel); false when it has been sent.
    pub fn withdraw(&self, id: u64) -> bool {
        let mut inner = self.lock();
        let position = inner
            .entries
            .iter()
            .position(|e| matches!(e, Entry::Call { call, .. } if call.id == id));
        let Some(Entry::Call { len, .. }) = position.and_then(|i| inner.entries.remove(i)) else {
            return false;
        };
        inner.calls -= 1;
        inner.bytes -= len;
        true
    }

    /// Calls waiting for a message.
    pub fn calls(&self) -> usize {
        self.lock().calls
    }

    /// No more calls: the stream half-closes once what is queued has been sent.
    pub fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        wake(inner);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The next message: every cancel and call waiting, calls up to `max_batch_bytes` (the
    /// rest wait for the next one); the ids of calls dropped because their deadline had passed.
    fn take(&self) -> (MultiplexRequest, Vec<u64>) {
        let mut inner = self.lock();
        let mut message = MultiplexRequest::default();
        let mut expired = Vec::new();
        let mut size = 0;
        let now = Instant::now();
        while let Some(entry) = inner.entries.pop_front() {
            let (mut call, deadline, len) = match entry {
                Entry::Cancel(id) => {
                    message.cancel.push(id);
                    size += CANCEL_LEN;
                    continue;
                }
                Entry::Call {
                    call,
                    deadline,
                    len,
                } => (call, deadline, len),
            };
            if size + len > self.limits.max_batch_bytes && !message.calls.is_empty() {
                inner.entries.push_front(Entry::Call {
                    call,
                    deadline,
                    len,
                });
                break;
            }
            inner.calls -= 1;
            inner.bytes -= len;
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(now);
                if left.is_zero() {
                    expired.push(call.id);
                    continue;
                }
                call.timeout_us = left.as_micros().max(1) as u64;
            }
            size += len;
            message.calls.push(*call);
        }
        if !message.calls.is_empty() {
            inner.progress = Some(now);
        }
        (message, expired)
    }
}

fn wake(mut inner: MutexGuard<'_, Inner>) {
    let waker = inner.waker.take();
    drop(inner);
    if let Some(waker) = waker {
        waker.wake();
    }
}

/// The request stream of one Multiplex call (see the module docs). `expired` is told the id of
/// each call dropped because its deadline passed while it waited.
pub(crate) struct Coalesce {
    pub queue: Arc<Queue>,
    pub expired: Box<dyn Fn(u64) + Send>,
}

impl Stream for Coalesce {
    type Item = MultiplexRequest;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let (message, expired) = self.queue.take();
            for id in expired {
                (self.expired)(id);
            }
            if !message.calls.is_empty() || !message.cancel.is_empty() {
                return Poll::Ready(Some(message));
            }
            let mut inner = self.queue.lock();
            if !inner.entries.is_empty() {
                continue; // queued after `take` looked
            }
            if inner.closed {
                return Poll::Ready(None);
            }
            inner.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::v1::multiplex_call::Request as Call;
    use crate::v1::TokenizeRequest;

    fn call(id: u64, text_len: usize) -> MultiplexCall {
        MultiplexCall {
            id,
            timeout_us: 0,
            request: Some(Call::Tokenize(TokenizeRequest {
                texts: vec!["x".repeat(text_len)],
                ..Default::default()
            })),
        }
    }

    fn limits() -> Limits {
        Limits {
            max_calls: 100,
            max_bytes: 1 << 20,
            max_batch_bytes: 1 << 20,
            stalled_after: Duration::ZERO,
        }
    }

    #[test]
    fn wire_len_covers_the_whole_call_in_its_message() {
        for text_len in [0, 100, 200, 20_000, 1 << 20] {
            let mut call = call(u64::MAX, text_len);
            call.timeout_us = u64::MAX;
            let Some(Call::Tokenize(request)) = &call.request else {
                unreachable!()
            };
            let request_len = request.encoded_len();
            let message = MultiplexRequest {
                calls: vec![call],
                cancel: vec![],
            };
            assert!(wire_len(request_len) >= message.encoded_len(), "{text_len}");
            assert!(wire_len(request_len) > request_len);
        }
    }

    #[test]
    fn a_call_given_up_before_it_was_sent_leaves_the_queue() {
        let queue = Queue::new(limits());
        queue.push_call(call(1, 10), None).unwrap();
        queue.push_call(call(2, 10), None).unwrap();
        assert!(queue.withdraw(1));
        assert!(!queue.withdraw(1));
        let (message, _) = queue.take();
        assert_eq!(message.calls.iter().map(|c| c.id).collect::<Vec<_>>(), [2]);
        assert_eq!(queue.calls(), 0);
        assert!(!queue.withdraw(2)); // sent: the caller sends a cancel instead
    }

    #[test]
    fn a_full_queue_refuses_calls_naming_the_limit() {
        let queue = Queue::new(Limits {
            max_calls: 3,
            ..limits()
        });
        for id in 0..3 {
            queue.push_call(call(id, 10), None).unwrap();
        }
        let refused = queue.push_call(call(3, 10), None).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(refused.message().contains("multiplex_max_queued_calls"));
        let queue = Queue::new(Limits {
            max_bytes: 50_000,
            ..limits()
        });
        queue.push_call(call(0, 30_000), None).unwrap();
        let refused = queue.push_call(call(1, 30_000), None).unwrap_err();
        assert!(refused.message().contains("multiplex_max_queued_bytes"));
    }

    /// The bound refuses calls only once the server has taken nothing for `stalled_after`: a
    /// burst larger than the bound against a server that takes messages is queued.
    #[test]
    fn the_bound_applies_once_the_server_stopped_taking_messages() {
        let queue = Queue::new(Limits {
            max_calls: 3,
            stalled_after: Duration::from_millis(200),
            ..limits()
        });
        for id in 0..10 {
            queue.push_call(call(id, 10), None).unwrap(); // calls began to wait just now
        }
        let (message, _) = queue.take();
        assert_eq!(message.calls.len(), 10);
        for id in 10..20 {
            queue.push_call(call(id, 10), None).unwrap(); // a message was taken just now
        }
        std::thread::sleep(Duration::from_millis(250));
        let refused = queue.push_call(call(20, 10), None).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(
            refused.message().contains("has taken none for"),
            "{refused}"
        );
        queue.take();
        queue.push_call(call(21, 10), None).unwrap();
    }

    #[test]
    fn the_time_left_is_measured_when_the_message_is_built() {
        let queue = Queue::new(limits());
        let now = Instant::now();
        queue.push_call(call(1, 10), Some(now)).unwrap(); // already over
        queue
            .push_call(call(2, 10), Some(now + Duration::from_secs(60)))
            .unwrap();
        let dropped = Arc::new(AtomicU64::new(0));
        let seen = dropped.clone();
        let mut coalesce = Coalesce {
            queue,
            expired: Box::new(move |id| seen.store(id, Ordering::Relaxed)),
        };
        let waker = std::task::Waker::noop();
        let polled = Pin::new(&mut coalesce).poll_next(&mut Context::from_waker(waker));
        let Poll::Ready(Some(message)) = polled else {
            panic!("no message")
        };
        assert_eq!(message.calls.len(), 1);
        assert_eq!(message.calls[0].id, 2);
        let timeout_us = message.calls[0].timeout_us;
        assert!(timeout_us > 0 && timeout_us <= 60_000_000, "{timeout_us}");
        assert_eq!(dropped.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_message_stays_within_the_batch_bound() {
        let queue = Queue::new(Limits {
            max_batch_bytes: 25_000,
            ..limits()
        });
        for id in 0..5 {
            queue.push_call(call(id, 10_000), None).unwrap();
        }
        queue.push_cancel(99);
        let (first, _) = queue.take();
        assert_eq!(first.calls.len(), 2);
        assert!(first.encoded_len() <= 25_000);
        assert_eq!(queue.calls(), 3);
    }
}
