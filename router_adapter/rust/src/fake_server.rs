//! Stand-ins for a sidecar that misbehaves, for the unit tests only: the real server cannot be
//! made to hang at a chosen point, die between two frames or lack an RPC on demand, and these
//! failures are what the transport code has to survive. Everything a real server does right is
//! tested against the real server (`tests/client/`).

use std::path::PathBuf;
use std::time::Duration;

use prost::Message;
use tokio::net::UnixListener;
use tonic::codegen::http::{HeaderMap, Response};
use tonic::codegen::Bytes;
use tonic::Code;

/// What the fake answers to one RPC, by its path.
#[derive(Clone)]
pub(crate) enum Reply {
    /// A trailers-only answer with this status.
    Status(Code),
    /// One message, then OK.
    Message(Vec<u8>),
    /// Response headers, then nothing: the request body is never read (a server that stopped).
    Hang,
    /// Response headers, then the connection is closed under the call (a server killed mid-call).
    DieAfterHeaders,
    /// Reads the request's message, then answers as the function says of its bytes.
    Unary(fn(&[u8]) -> Reply),
    /// A streaming call: each request message in turn (numbered from 1) is answered by one
    /// response message, the function's bytes of it; OK once the client half-closes.
    Stream(fn(usize, &[u8]) -> Vec<u8>),
}

/// A current-thread runtime with IO and timers, as the client needs.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A fresh socket path for one test (the file does not exist yet).
pub(crate) fn socket_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sidecar-client-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("test dir");
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

/// The health check's SERVING answer.
pub(crate) fn serving() -> Reply {
    let response = tonic_health::pb::HealthCheckResponse {
        status: tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
    };
    Reply::Message(response.encode_to_vec())
}

/// An HTTP/2 server answering each RPC as `reply(path)` says.
pub(crate) fn grpc(path: &PathBuf, reply: fn(&str) -> Reply) {
    let listener = UnixListener::bind(path).expect("bind");
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(serve_connection(socket, reply));
        }
    });
}

async fn serve_connection(socket: tokio::net::UnixStream, reply: fn(&str) -> Reply) {
    let Ok(mut connection) = h2::server::handshake(socket).await else {
        return;
    };
    let (die, mut dying) = tokio::sync::mpsc::channel::<()>(1);
    loop {
        // A reply that kills the connection returns from here: dropping it closes the socket.
        let accepted = std::future::poll_fn(|cx| {
            if dying.poll_recv(cx).is_ready() {
                return std::task::Poll::Ready(None);
            }
            connection.poll_accept(cx)
        })
        .await;
        let Some(Ok((request, mut respond))) = accepted else {
            return;
        };
        let mut answer = reply(request.uri().path());
        let echoed = echoed(request.headers());
        let die = die.clone();
        tokio::spawn(async move {
            // Keep the request body open until the answer is out (a real server reads it).
            let mut body = request.into_body();
            let mut buffer = Vec::new();
            if let Reply::Unary(by_request) = answer {
                let Some(message) = read_message(&mut body, &mut buffer).await else {
                    return;
                };
                answer = by_request(&message);
            }
            let head = |status: Option<Code>| {
                let mut response = Response::builder()
                    .status(200)
                    .header("content-type", "application/grpc");
                if let Some(code) = status {
                    response = response.header("grpc-status", (code as i32).to_string());
                    for (key, value) in &echoed {
                        response = response.header(key, value);
                    }
                }
                response.body(()).expect("response head")
            };
            match answer {
                Reply::Status(code) => {
                    let _ = respond.send_response(head(Some(code)), true);
                }
                Reply::Message(bytes) => {
                    let Ok(mut stream) = respond.send_response(head(None), false) else {
                        return;
                    };
                    let _ = stream.send_data(frame(&bytes), false);
                    let mut trailers = HeaderMap::new();
                    trailers.insert("grpc-status", "0".parse().expect("header"));
                    trailers.extend(echoed.clone());
                    let _ = stream.send_trailers(trailers);
                }
                Reply::Hang => {
                    let _stream = respond.send_response(head(None), false);
                    std::future::pending::<()>().await;
                }
                Reply::Stream(respond_to) => {
                    let Ok(mut stream) = respond.send_response(head(None), false) else {
                        return;
                    };
                    let mut n = 0;
                    while let Some(message) = read_message(&mut body, &mut buffer).await {
                        n += 1;
                        let _ = stream.send_data(frame(&respond_to(n, &message)), false);
                    }
                    let mut trailers = HeaderMap::new();
                    trailers.insert("grpc-status", "0".parse().expect("header"));
                    trailers.extend(echoed.clone());
                    let _ = stream.send_trailers(trailers);
                }
                Reply::Unary(_) => unreachable!("answered above"),
                Reply::DieAfterHeaders => {
                    let _stream = respond.send_response(head(None), false);
                    // Let the connection task write the headers out before it is dropped.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let _ = die.send(()).await;
                }
            }
        });
    }
}

/// The request headers every answer sends back in its trailers (in a trailers-only answer, its
/// headers): `x-request-id`, as the real server echoes it, and `traceparent`, so that a test sees
/// what the client sent.
fn echoed(headers: &HeaderMap) -> HeaderMap {
    let mut echoed = HeaderMap::new();
    for key in ["x-request-id", "traceparent"] {
        if let Some(value) = headers.get(key) {
            echoed.insert(key, value.clone());
        }
    }
    echoed
}

/// One gRPC message frame (uncompressed).
fn frame(bytes: &[u8]) -> Bytes {
    let mut frame = vec![0];
    frame.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    frame.extend_from_slice(bytes);
    Bytes::from(frame)
}

/// The next gRPC message of a request body (`buffer` keeps what was read past it); None at its end.
async fn read_message(body: &mut h2::RecvStream, buffer: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        if buffer.len() >= 5 {
            let len = u32::from_be_bytes(buffer[1..5].try_into().expect("4 bytes")) as usize;
            if buffer.len() >= 5 + len {
                let message = buffer[5..5 + len].to_vec();
                buffer.drain(..5 + len);
                return Some(message);
            }
        }
        let data = std::future::poll_fn(|cx| body.poll_data(cx)).await?.ok()?;
        let _ = body.flow_control().release_capacity(data.len());
        buffer.extend_from_slice(&data);
    }
}
