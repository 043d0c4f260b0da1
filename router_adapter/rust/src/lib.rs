//! Rust client of the sidecar preprocessing service.
//!
//! The messages and the low-level tonic clients are generated at build time from
//! `protos/sidecar/v1/*.proto` (module [`v1`]); [`Client`] adds what a router needs on top:
//! Unix-socket or TCP targets, per-call deadlines, reconnect with a health check after a failure,
//! and one error type carrying the gRPC status.
//!
//! Per-call metadata: [`Client::with_request_id`] (`x-request-id`, under which the server logs the
//! call) and [`Client::with_metadata`] (e.g. `traceparent`) return a handle whose calls carry it;
//! the id the server echoes is read with the `*_with_meta` methods ([`ResponseMeta`]) or, on an
//! error, [`Error::request_id`].
//!
//! A server started with `sidecar serve --processes N --uds PATH` listens on `PATH.0` ...
//! `PATH.{N-1}`, one socket per process: `unix:PATH` then finds them all (when `PATH` itself does
//! not exist or refuses connections, every `PATH.<digits>` in its directory, looked at again after
//! failures and periodically, so the set follows the server), keeps one channel
//! (and one multiplex pool) per process and spreads calls round robin over those that are healthy;
//! a process whose call failed UNAVAILABLE is skipped, health-checked in the background and used
//! again once it answers SERVING, and the failed call is made once more on another process.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sidecar_client::Error> {
//! use std::time::Duration;
//! use sidecar_client::{v1::TokenizeRequest, Client};
//!
//! let client = Client::connect("unix:/tmp/sidecar.sock").await?;
//! let request = TokenizeRequest { model: "qwen3".into(), texts: vec!["Hello world".into()], ..Default::default() };
//! let response = client.with_timeout(Duration::from_millis(200)).tokenize(request).await?;
//! println!("{:?} {}", response.encodings[0].token_ids, response.fingerprint);
//! # Ok(()) }
//! ```

mod carrier;
mod client;
mod connection;
mod error;
#[cfg(test)]
mod fake_server;
mod fleet;
mod metadata;
mod multiplex;
mod mux_queue;
mod parse_stream;
mod target;

pub use client::{Client, ClientBuilder, PROCESS_HEALTH_SERVICE};
pub use error::{code_name, Error};
pub use metadata::{ResponseMeta, REQUEST_ID};
pub use parse_stream::ParseStream;
pub use target::Target;
/// gRPC metadata, as [`ResponseMeta::metadata`] and a [`Status`] carry it.
pub use tonic::metadata::MetadataMap;
/// gRPC status codes, as carried by [`Error::code`].
pub use tonic::{Code, Status};

/// Messages and generated tonic clients of `sidecar.v1` (`Preprocessor`, `KvRouter`, `Admin`), with the
/// field documentation of the `.proto` files.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("sidecar.v1");
}

/// `grpc.health.v1` messages (the health check's request, response and serving status).
pub mod health {
    pub use tonic_health::pb::health_check_response::ServingStatus;
    pub use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
}
