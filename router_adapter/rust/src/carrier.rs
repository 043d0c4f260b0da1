//! What carries the per-request calls a router makes most (Tokenize, Detokenize, Render).
//!
//! The typed calls of [`crate::Client`] go through the [`Carrier`] trait, not through tonic
//! directly, so the way these requests travel is the builder's choice and not the API's: one
//! unary RPC each ([`UnaryCarrier`]), or requests on a pool of `Multiplex` streams (many requests
//! on one RPC, each with its own id and deadline, answered out of order:
//! [`crate::multiplex::StreamCarrier`], the default).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tonic::{Response, Status};

use crate::connection::Connections;
use crate::v1::{
    DetokenizeRequest, DetokenizeResponse, RenderRequest, RenderResponse, TokenizeRequest,
    TokenizeResponse,
};

/// A boxed call in flight (one allocation per call; the trait stays object-safe).
pub(crate) type CallFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, Status>> + Send + 'a>>;

/// Carries Tokenize, Detokenize and Render; `timeout` is the whole call's deadline from now.
pub(crate) trait Carrier: Send + Sync + std::fmt::Debug {
    /// How busy it is for a new call, when that matters for where the call goes (a stream whose
    /// message is being gathered: 0, else 1 + calls waiting); None: any member will do.
    fn load(&self) -> Option<usize> {
        None
    }

    fn tokenize(
        &self,
        request: TokenizeRequest,
        timeout: Option<Duration>,
    ) -> CallFuture<'_, TokenizeResponse>;
    fn detokenize(
        &self,
        request: DetokenizeRequest,
        timeout: Option<Duration>,
    ) -> CallFuture<'_, DetokenizeResponse>;
    fn render(
        &self,
        request: RenderRequest,
        timeout: Option<Duration>,
    ) -> CallFuture<'_, RenderResponse>;
}

/// One unary RPC per request on the shared connection (with reconnect and one retry on UNAVAILABLE).
#[derive(Debug)]
pub(crate) struct UnaryCarrier {
    pub connections: Arc<Connections>,
}

impl Carrier for UnaryCarrier {
    fn tokenize(
        &self,
        request: TokenizeRequest,
        timeout: Option<Duration>,
    ) -> CallFuture<'_, TokenizeResponse> {
        Box::pin(self.connections.unary(timeout, request, |c, r| async move {
            c.preprocessor
                .clone()
                .tokenize(r)
                .await
                .map(Response::into_inner)
        }))
    }

    fn detokenize(
        &self,
        request: DetokenizeRequest,
        timeout: Option<Duration>,
    ) -> CallFuture<'_, DetokenizeResponse> {
        Box::pin(self.connections.unary(timeout, request, |c, r| async move {
            c.preprocessor
                .clone()
                .detokenize(r)
                .await
                .map(Response::into_inner)
        }))
    }

    fn render(
        &self,
        request: RenderRequest,
        timeout: Option<Duration>,
    ) -> CallFuture<'_, RenderResponse> {
        Box::pin(self.connections.unary(timeout, request, |c, r| async move {
            c.preprocessor
                .clone()
                .render(r)
                .await
                .map(Response::into_inner)
        }))
    }
}
