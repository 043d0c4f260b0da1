//! Tests of [`super::Client`] against the fake server (`crate::fake_server`).

use super::*;
use crate::fake_server::{self, Reply};
use prost::Message;

fn tokenize(text_len: usize) -> TokenizeRequest {
    TokenizeRequest {
        model: "m".into(),
        texts: vec!["x".repeat(text_len)],
        ..Default::default()
    }
}

/// Health SERVING for every service; Tokenize answered with a 4 KB fingerprint; Multiplex
/// unknown; ParseStream answers each message with an empty response.
fn plain_server(rpc: &str) -> Reply {
    match rpc {
        "/grpc.health.v1.Health/Check" => fake_server::serving(),
        "/sidecar.v1.Preprocessor/Tokenize" => Reply::Message(
            TokenizeResponse {
                fingerprint: "f".repeat(4000),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        "/sidecar.v1.Preprocessor/ParseStream" => Reply::Stream(|_, _| Vec::new()),
        _ => Reply::Status(Code::Unimplemented),
    }
}

/// A request over the client's own `max_message_bytes` is refused before it is sent, with
/// RESOURCE_EXHAUSTED naming both sizes; it is not a broken connection (no retry, no
/// reconnect), on every path: unary, multiplexed, a ParseStream message (the stream goes on).
#[test]
fn a_request_over_the_clients_limit_is_not_sent() {
    fake_server::runtime().block_on(async {
        let path = fake_server::socket_path("client-oversize.sock");
        fake_server::grpc(&path, plain_server);
        let target = format!("unix:{}", path.display());
        for multiplex in [false, true] {
            let client = Client::builder(target.as_str())
                .max_message_bytes(10_000)
                .multiplex(multiplex)
                .connect()
                .await
                .unwrap();
            for _ in 0..3 {
                let error = client.tokenize(tokenize(20_000)).await.unwrap_err();
                assert_eq!(error.code(), Code::ResourceExhausted, "{error}");
                assert!(error.message().contains("20007 bytes"), "{error}");
                assert!(error.message().contains("10000 bytes"), "{error}");
            }
            assert_eq!(client.reconnects(), 0);
            client.tokenize(tokenize(10)).await.unwrap();
        }
        let client = Client::builder(target.as_str())
            .max_message_bytes(10_000)
            .build()
            .unwrap();
        let mut stream = client.parse_stream().await.unwrap();
        let big = crate::v1::OpenRequest {
            request_id: "r".into(),
            tools_json: "x".repeat(20_000),
            ..Default::default()
        };
        let error = stream.open(big).await.unwrap_err();
        assert_eq!(error.code(), Code::ResourceExhausted, "{error}");
        let small = crate::v1::OpenRequest {
            request_id: "r".into(),
            ..Default::default()
        };
        stream.open(small).await.unwrap();
        assert_eq!(client.reconnects(), 0);
    });
}

/// A response over the client's `max_message_bytes` is RESOURCE_EXHAUSTED (tonic says
/// OUT_OF_RANGE), as the Python client and the README say, and no reconnect.
#[test]
fn a_response_over_the_clients_limit_is_resource_exhausted() {
    fake_server::runtime().block_on(async {
        let path = fake_server::socket_path("client-big-answer.sock");
        fake_server::grpc(&path, plain_server);
        let client = Client::builder(format!("unix:{}", path.display()))
            .max_message_bytes(1000)
            .connect()
            .await
            .unwrap();
        let error = client.tokenize(tokenize(10)).await.unwrap_err();
        assert_eq!(error.code(), Code::ResourceExhausted, "{error}");
        assert!(error.message().contains("max_message_bytes"), "{error}");
        assert_eq!(client.reconnects(), 0);
    });
}

/// Timeouts longer than `grpc-timeout` can carry are no deadline (tonic panicked: "duration
/// is unrealistically large"), for unary calls, multiplexed calls and streams alike.
#[test]
fn timeouts_too_long_for_grpc_are_no_deadline() {
    fake_server::runtime().block_on(async {
        let path = fake_server::socket_path("client-long-timeouts.sock");
        fake_server::grpc(&path, plain_server);
        let target = format!("unix:{}", path.display());
        for long in [Duration::from_secs(1 << 40), Duration::MAX] {
            for multiplex in [false, true] {
                let client = Client::builder(target.as_str())
                    .multiplex(multiplex)
                    .timeout(Some(long))
                    .connect_timeout(long)
                    .health_timeout(long)
                    .build()
                    .unwrap();
                client.tokenize(tokenize(10)).await.unwrap();
                client
                    .with_timeout(long)
                    .tokenize(tokenize(10))
                    .await
                    .unwrap();
                let status = client.with_timeout(long).health("").await.unwrap();
                assert_eq!(status, ServingStatus::Serving);
                let mut stream = client.with_timeout(long).parse_stream().await.unwrap();
                stream.open(Default::default()).await.unwrap();
            }
        }
    });
}

/// The reconnect health check asks about this connection's own process
/// (`sidecar.process`): a `--processes N` server answers NOT_SERVING for `""` while a sibling
/// restarts, and that must not fail a TCP client whose process is fine. A server that does
/// not know `sidecar.process` (NOT_FOUND) is asked about `""`.
#[test]
fn the_health_check_asks_about_the_process() {
    fake_server::runtime().block_on(async {
        let sibling_down = fake_server::socket_path("client-health-group.sock");
        fake_server::grpc(&sibling_down, |rpc| match rpc {
            "/grpc.health.v1.Health/Check" => Reply::Unary(|request| {
                let service = HealthCheckRequest::decode(request).unwrap().service;
                let status = match service.as_str() {
                    PROCESS_HEALTH_SERVICE => ServingStatus::Serving,
                    _ => ServingStatus::NotServing,
                };
                let response = HealthCheckResponse {
                    status: status as i32,
                };
                Reply::Message(response.encode_to_vec())
            }),
            _ => Reply::Status(Code::Unimplemented),
        });
        Client::connect(format!("unix:{}", sibling_down.display()))
            .await
            .unwrap();
        let older = fake_server::socket_path("client-health-older.sock");
        fake_server::grpc(&older, |rpc| match rpc {
            "/grpc.health.v1.Health/Check" => Reply::Unary(|request| {
                match HealthCheckRequest::decode(request)
                    .unwrap()
                    .service
                    .as_str()
                {
                    "" => fake_server::serving(),
                    _ => Reply::Status(Code::NotFound),
                }
            }),
            _ => Reply::Status(Code::Unimplemented),
        });
        Client::connect(format!("unix:{}", older.display()))
            .await
            .unwrap();
        // A service the caller chose is asked about as it is.
        let error = Client::builder(format!("unix:{}", older.display()))
            .health_service("no.such.Service")
            .connect()
            .await
            .unwrap_err();
        assert_eq!(error.code(), Code::NotFound, "{error}");
    });
}

/// Metadata of a `with_request_id` / `with_metadata` handle reaches the server on every
/// kind of call, and the echoed `x-request-id` is read back: from the trailers of a success
/// (`*_with_meta`) and from the status of an error. With Multiplex on, such calls go unary (the
/// fake's Multiplex hangs: a call on it would miss its deadline).
#[test]
fn per_call_metadata_is_sent_and_the_request_id_read_back() {
    fn server(rpc: &str) -> Reply {
        match rpc {
            "/grpc.health.v1.Health/Check" => fake_server::serving(),
            "/sidecar.v1.Preprocessor/Multiplex" => Reply::Hang,
            "/sidecar.v1.Preprocessor/Tokenize" => {
                Reply::Message(TokenizeResponse::default().encode_to_vec())
            }
            "/sidecar.v1.Preprocessor/ListParsers" => {
                Reply::Message(ListParsersResponse::default().encode_to_vec())
            }
            "/sidecar.v1.Admin/ReloadModels" => Reply::Status(Code::NotFound),
            _ => Reply::Status(Code::Unimplemented),
        }
    }
    fake_server::runtime().block_on(async {
        let path = fake_server::socket_path("client-metadata.sock");
        fake_server::grpc(&path, server);
        let target = format!("unix:{}", path.display());
        let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        for multiplex in [false, true] {
            let client = Client::builder(target.as_str())
                .multiplex(multiplex)
                .timeout(Some(Duration::from_secs(2)))
                .connect()
                .await
                .unwrap();
            let tagged = client
                .with_request_id("req-1")
                .unwrap()
                .with_metadata("traceparent", trace)
                .unwrap();
            let (_, meta) = tagged.tokenize_with_meta(tokenize(10)).await.unwrap();
            assert_eq!(meta.request_id(), Some("req-1"));
            assert_eq!(meta.metadata().get("traceparent").unwrap(), trace);
            tagged.tokenize(tokenize(10)).await.unwrap();
            // The same key is replaced, not added.
            let retagged = tagged.with_request_id("req-2").unwrap();
            let (_, meta) = retagged.list_parsers_with_meta().await.unwrap();
            assert_eq!(meta.request_id(), Some("req-2"));
            assert_eq!(meta.metadata().get_all(REQUEST_ID).iter().count(), 1);
            let error = tagged.reload_models(Default::default()).await.unwrap_err();
            assert_eq!(error.code(), Code::NotFound, "{error}");
            assert_eq!(error.request_id(), Some("req-1"));
            // Without metadata nothing is echoed by this fake; the plain methods are as before.
            let (_, meta) = client.tokenize_with_meta(tokenize(10)).await.unwrap();
            assert_eq!(meta.request_id(), None);
            client.list_parsers().await.unwrap();
        }
        let client = Client::builder(target.as_str()).build().unwrap();
        for (key, value) in [
            ("x-trace-bin", "a"),
            ("grpc-timeout", "1S"),
            ("content-type", "text/plain"),
            ("bad key", "a"),
            ("x-request-id", "caf\u{e9}"),
            ("x-request-id", "a\nb"),
        ] {
            let error = client.with_metadata(key, value).unwrap_err();
            assert_eq!(error.code(), Code::InvalidArgument, "{key}: {error}");
        }
    });
}

/// A `PATH.N` socket left by a crashed `--processes` run (nothing listens on it any more)
/// next to a live process: `connect` uses the live one, and names the stale one when it is
/// all there is.
#[test]
fn connect_leaves_out_a_stale_process_socket() {
    fake_server::runtime().block_on(async {
        let base = fake_server::socket_path("stale.sock");
        let live = fake_server::socket_path("stale.sock.0");
        let stale = fake_server::socket_path("stale.sock.1");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        let target = format!("unix:{}", base.display());
        let error = Client::connect(target.as_str()).await.unwrap_err();
        assert_eq!(error.code(), Code::Unavailable);
        assert!(error.message().contains("stale.sock.1"), "{error}");
        fake_server::grpc(&live, |_| fake_server::serving());
        let client = Client::connect(target.as_str()).await.unwrap();
        assert_eq!(client.processes(), 1);
    });
}

/// A client built before its `--processes 2` server started finds the process sockets at
/// its first call (it was stuck with `PATH` itself, which does not exist, forever).
#[test]
fn a_client_built_before_the_server_finds_its_processes() {
    fake_server::runtime().block_on(async {
        let base = fake_server::socket_path("early.sock");
        let client = Client::builder(format!("unix:{}", base.display()))
            .build()
            .unwrap();
        assert_eq!(client.processes(), 1);
        for index in 0..2 {
            let process = fake_server::socket_path(&format!("early.sock.{index}"));
            fake_server::grpc(&process, plain_server);
        }
        client.tokenize(tokenize(10)).await.unwrap();
        assert_eq!(client.processes(), 2);
    });
}

/// A `PATH` socket left by a crashed single-process server (nothing listens on it) does not
/// hide the live `PATH.0`, for `connect` and for `build` alike.
#[test]
fn a_stale_base_socket_does_not_hide_the_process_sockets() {
    fake_server::runtime().block_on(async {
        let base = fake_server::socket_path("shadow.sock");
        drop(std::os::unix::net::UnixListener::bind(&base).unwrap());
        let live = fake_server::socket_path("shadow.sock.0");
        fake_server::grpc(&live, plain_server);
        let target = format!("unix:{}", base.display());
        let client = Client::connect(target.as_str()).await.unwrap();
        client.tokenize(tokenize(10)).await.unwrap();
        let client = Client::builder(target.as_str()).build().unwrap();
        client.tokenize(tokenize(10)).await.unwrap();
        assert_eq!(client.processes(), 1);
    });
}

/// A process that refused connections when `connect` ran (restarting) is left out, and
/// joins once its socket answers.
#[test]
fn a_process_left_out_at_connect_joins_later() {
    fake_server::runtime().block_on(async {
        let base = fake_server::socket_path("later.sock");
        let live = fake_server::socket_path("later.sock.0");
        let restarting = fake_server::socket_path("later.sock.1");
        drop(std::os::unix::net::UnixListener::bind(&restarting).unwrap());
        fake_server::grpc(&live, plain_server);
        let client = Client::connect(format!("unix:{}", base.display()))
            .await
            .unwrap();
        assert_eq!(client.processes(), 1);
        let restarted = fake_server::socket_path("later.sock.1");
        fake_server::grpc(&restarted, plain_server);
        tokio::time::sleep(crate::fleet::RESCAN.0 + Duration::from_millis(50)).await;
        client.tokenize(tokenize(10)).await.unwrap();
        assert_eq!(client.processes(), 2);
    });
}
