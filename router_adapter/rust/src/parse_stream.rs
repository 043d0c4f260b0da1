//! `Preprocessor/ParseStream`: one long-lived bidirectional stream per engine.
//!
//! The server answers every client message (open, step, cancel) with exactly one
//! `ParseStreamResponse`, in order. [`ParseStream::call`] sends one message and waits for its
//! answer (lock-step, as an engine loop does); [`ParseStream::send`] and [`ParseStream::recv`]
//! pipeline several messages and read their answers afterwards, in the same order.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status, Streaming};

use crate::connection::{
    bounded, check_size, deadline_after, with_metadata, Connection, Connections,
};
use crate::v1::parse_stream_request::Kind;
use crate::v1::{CancelRequest, OpenRequest, ParseStreamRequest, ParseStreamResponse, Step};
use crate::Error;

/// The call, started when the stream is opened: it runs as its own task so the request stream is
/// sent (and the outbound channel drained) from the first `send`, before anything is read.
type Opening = JoinHandle<Result<tonic::Response<Streaming<ParseStreamResponse>>, Status>>;

/// The response side: grpc.aio sends its headers only with the first answer, so the response
/// stream is awaited on the first read, not at open.
#[allow(clippy::large_enum_variant)] // one per stream; boxing would add an indirection per read
enum Responses {
    Opening(Opening),
    Open(Streaming<ParseStreamResponse>),
    /// The call failed before it opened; every later read gets the same status.
    Failed(Status),
}

/// An open ParseStream. Dropping it cancels the stream (the server frees every open request).
pub struct ParseStream {
    outbound: Option<mpsc::Sender<ParseStreamRequest>>,
    responses: Responses,
    connection: Arc<Connection>,
    deadline: Option<Instant>,
    /// Messages sent whose answers have not been read.
    in_flight: usize,
    /// Of those, the oldest ones, answers of lock-step calls whose futures were dropped: read
    /// and discarded by the next read.
    abandoned: usize,
    max_message_bytes: usize,
}

impl std::fmt::Debug for ParseStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParseStream")
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl ParseStream {
    pub(crate) async fn start(
        connections: Arc<Connections>,
        timeout: Option<Duration>,
        metadata: Option<&MetadataMap>,
    ) -> Result<ParseStream, Error> {
        // A timeout longer than MAX_TIMEOUT (Duration::MAX) is no deadline, not a panic.
        let timeout = bounded(timeout);
        let deadline = deadline_after(timeout);
        let connection = connections.ready(deadline).await?;
        let max_message_bytes = connections.settings.max_message_bytes;
        // Room for a decode step of every running request to be queued while the last is sent.
        let (sender, receiver) = mpsc::channel(64);
        let mut client = connection.preprocessor.clone();
        let request = with_metadata(ReceiverStream::new(receiver), timeout, metadata);
        let opening: Opening = tokio::spawn(async move { client.parse_stream(request).await });
        Ok(ParseStream {
            outbound: Some(sender),
            responses: Responses::Opening(opening),
            connection,
            deadline,
            in_flight: 0,
            abandoned: 0,
            max_message_bytes,
        })
    }

    /// Queues one message; its answer comes from a later [`recv`](Self::recv), in send order.
    /// Waits while the queue is full (the server reads slower than the engine sends), at most
    /// until the stream's deadline. A message larger than the client's `max_message_bytes` is not
    /// sent (RESOURCE_EXHAUSTED; the stream goes on).
    pub async fn send(&mut self, message: ParseStreamRequest) -> Result<(), Error> {
        check_size(
            prost::Message::encoded_len(&message),
            self.max_message_bytes,
        )?;
        let sender = self.outbound.as_ref().ok_or_else(|| {
            Status::failed_precondition("parse stream: already closed for sending")
        })?;
        let sent = match self.deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, sender.send(message))
                .await
                .map_err(|_| {
                    Status::deadline_exceeded(
                        "parse stream: the stream's deadline passed while the server was not \
                         reading its messages",
                    )
                })?,
            None => sender.send(message).await,
        };
        if sent.is_err() {
            // The call ended; its status comes with the next read.
            return Err(self.ended().await);
        }
        self.in_flight += 1;
        Ok(())
    }

    /// The answer to the oldest unanswered message; `None` once the server has closed the stream.
    /// The answers of lock-step calls whose futures were dropped before their answer came (a
    /// `tokio::time::timeout` around `step`) are read and discarded first.
    pub async fn recv(&mut self) -> Result<Option<ParseStreamResponse>, Error> {
        while self.abandoned > 0 {
            if self.recv_one().await?.is_none() {
                self.abandoned = 0;
                return Ok(None);
            }
            self.abandoned -= 1;
        }
        self.recv_one().await
    }

    /// The next answer on the wire. Cancel-safe: an answer is either taken (and counted) or left
    /// for the next read.
    async fn recv_one(&mut self) -> Result<Option<ParseStreamResponse>, Error> {
        let result = self.read().await;
        if let Err(status) = &result {
            if status.code() == Code::Unavailable {
                self.connection.mark_suspect();
            }
        }
        let response = result?;
        if response.is_some() {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        Ok(response)
    }

    async fn read(&mut self) -> Result<Option<ParseStreamResponse>, Status> {
        let deadline = self.deadline;
        if let Responses::Opening(opening) = &mut self.responses {
            // A finished opening future must not be polled again: keep its outcome instead.
            let opened = crate::connection::within(deadline, |_| async {
                (&mut *opening).await.unwrap_or_else(|join| {
                    Err(Status::internal(format!(
                        "parse stream: the call's task ended: {join}"
                    )))
                })
            })
            .await;
            if opened.is_err() {
                opening.abort(); // the deadline passed first: the call must not go on unseen
            }
            self.responses = match opened {
                Ok(response) => Responses::Open(response.into_inner()),
                Err(status) => Responses::Failed(status),
            };
        }
        match &mut self.responses {
            Responses::Open(stream) => {
                crate::connection::within(deadline, |_| stream.message()).await
            }
            Responses::Failed(status) => Err(status.clone()),
            Responses::Opening(_) => unreachable!("resolved above"),
        }
    }

    /// Sends one message and returns its answer (lock-step). Nothing may be in flight but the
    /// answers of earlier lock-step calls whose futures were dropped (a timeout around `step`):
    /// those are read and discarded first, so dropping a call leaves the stream usable and in
    /// step (what the server did with the dropped call's message stands).
    pub async fn call(
        &mut self,
        message: ParseStreamRequest,
    ) -> Result<ParseStreamResponse, Error> {
        let pipelined = self.in_flight - self.abandoned;
        if pipelined > 0 {
            return Err(Status::failed_precondition(format!(
                "parse stream: {pipelined} pipelined answers not read yet"
            ))
            .into());
        }
        self.send(message).await?;
        // Counted as abandoned until it is read, in case this future is dropped meanwhile.
        self.abandoned += 1;
        loop {
            let Some(response) = self.recv_one().await? else {
                self.abandoned = 0;
                return Err(Status::unavailable(
                    "parse stream: the server closed the stream without answering",
                )
                .into());
            };
            self.abandoned -= 1;
            if self.abandoned == 0 {
                return Ok(response);
            }
        }
    }

    /// Starts parsing a request's output (its answer has an error delta if the open failed).
    pub async fn open(&mut self, open: OpenRequest) -> Result<ParseStreamResponse, Error> {
        self.call(ParseStreamRequest {
            kind: Some(Kind::Open(open)),
        })
        .await
    }

    /// Feeds one decode step: the new token ids of every running request.
    pub async fn step(&mut self, step: Step) -> Result<ParseStreamResponse, Error> {
        self.call(ParseStreamRequest {
            kind: Some(Kind::Step(step)),
        })
        .await
    }

    /// Stops parsing a request and frees its state.
    pub async fn cancel(
        &mut self,
        request_id: impl Into<String>,
    ) -> Result<ParseStreamResponse, Error> {
        self.call(ParseStreamRequest {
            kind: Some(Kind::Cancel(CancelRequest {
                request_id: request_id.into(),
            })),
        })
        .await
    }

    /// Half-closes the stream, reads the answers still in flight and returns them once the server
    /// has ended the call with OK.
    pub async fn finish(mut self) -> Result<Vec<ParseStreamResponse>, Error> {
        self.outbound = None;
        let mut rest = Vec::new();
        while let Some(response) = self.recv().await? {
            rest.push(response);
        }
        Ok(rest)
    }

    /// The status the call ended with, once sending has failed.
    async fn ended(&mut self) -> Error {
        loop {
            match self.read().await {
                Ok(Some(_)) => continue,
                Ok(None) => {
                    return Status::unavailable("parse stream: the server ended the stream").into()
                }
                Err(status) => return status.into(),
            }
        }
    }
}

impl Drop for ParseStream {
    /// A call still waiting for its response headers is a task of its own: stop it, so the
    /// stream is reset (the server frees its requests) rather than left half-closed.
    fn drop(&mut self) {
        if let Responses::Opening(opening) = &self.responses {
            opening.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::fake_server::{self, Reply};
    use crate::Client;

    fn open_message(i: usize, padding: usize) -> ParseStreamRequest {
        ParseStreamRequest {
            kind: Some(Kind::Open(OpenRequest {
                request_id: format!("r{i}"),
                model: "m".into(),
                tools_json: "x".repeat(padding),
                ..Default::default()
            })),
        }
    }

    /// A server that answers the call's headers but then reads nothing: once the queue and the
    /// HTTP/2 window are full, `send` waits, and the stream's deadline must end that wait.
    #[test]
    fn send_gives_up_at_the_deadline_when_the_server_does_not_read() {
        fake_server::runtime().block_on(async {
            let path = fake_server::socket_path("ps-hangs.sock");
            fake_server::grpc(&path, |_| Reply::Hang);
            let client = Client::builder(format!("unix:{}", path.display()))
                .build()
                .unwrap();
            let mut stream = client
                .with_timeout(Duration::from_millis(500))
                .parse_stream()
                .await
                .unwrap();
            let sending = async {
                // 300 x 10 KB: more than the 64-message queue and the 64 KiB HTTP/2 window hold.
                for i in 0..300 {
                    stream.send(open_message(i, 10_000)).await?;
                }
                Ok::<(), Error>(())
            };
            let outcome = tokio::time::timeout(Duration::from_secs(30), sending)
                .await
                .expect("send still waiting 30 s after the stream's 0.5 s deadline");
            assert_eq!(outcome.unwrap_err().code(), Code::DeadlineExceeded);
        });
    }

    /// A server killed while the stream is open: the read fails UNAVAILABLE (not UNKNOWN "error
    /// reading a body") and the connection goes to a health check before its next use.
    #[test]
    fn a_server_dying_mid_stream_is_unavailable() {
        fake_server::runtime().block_on(async {
            let path = fake_server::socket_path("ps-dies.sock");
            fake_server::grpc(&path, |_| Reply::DieAfterHeaders);
            let client = Client::builder(format!("unix:{}", path.display()))
                .build()
                .unwrap();
            let mut stream = client.parse_stream().await.unwrap();
            stream.send(open_message(0, 0)).await.unwrap();
            let read = tokio::time::timeout(Duration::from_secs(30), stream.recv())
                .await
                .expect("recv still waiting 30 s after the server died");
            let error = read.unwrap_err();
            assert_eq!(error.code(), Code::Unavailable, "{error}");
            assert!(stream.connection.is_suspect());
        });
    }

    /// Polls a call once (it sends its message; its answer cannot have come: no other task has
    /// run) and drops it, as a timeout around it does; whether it was still waiting.
    fn dropped_before_its_answer<F: std::future::Future>(call: F) -> bool {
        let mut call = std::pin::pin!(call);
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        call.as_mut().poll(&mut context).is_pending()
    }

    /// A lock-step call whose future is dropped before its answer (a timeout around `step`)
    /// does not leave the stream one answer behind: the next call discards that answer and gets
    /// its own (it failed with "1 pipelined answers not read yet" forever).
    #[test]
    fn a_dropped_step_leaves_the_stream_in_step() {
        fake_server::runtime().block_on(async {
            let path = fake_server::socket_path("ps-dropped-step.sock");
            fake_server::grpc(&path, |_| {
                // The n-th message's answer names n.
                Reply::Stream(|n, _| {
                    let delta = crate::v1::RequestDelta {
                        request_id: n.to_string(),
                        ..Default::default()
                    };
                    prost::Message::encode_to_vec(&ParseStreamResponse {
                        deltas: vec![delta],
                    })
                })
            });
            let client = Client::builder(format!("unix:{}", path.display()))
                .build()
                .unwrap();
            let mut stream = client.parse_stream().await.unwrap();
            let answered = |response: ParseStreamResponse| response.deltas[0].request_id.clone();
            let step = || Step::default();
            assert!(dropped_before_its_answer(stream.step(step())));
            assert_eq!(answered(stream.step(step()).await.unwrap()), "2");
            for _ in 0..2 {
                assert!(dropped_before_its_answer(stream.step(step())));
            }
            assert_eq!(answered(stream.step(step()).await.unwrap()), "5");
            stream.send(open_message(0, 0)).await.unwrap();
            assert_eq!(answered(stream.recv().await.unwrap().unwrap()), "6");
            assert!(stream.finish().await.unwrap().is_empty());
        });
    }
}
