//! Per-call metadata against the real server: a call made with `x-request-id` gets it back in the
//! trailers (success and error), with Multiplex on too (such calls go unary); a call without one
//! gets the id the server made. Each record carries `request_id_sent` (null: none) and
//! `request_id_echoed`; the pytest also finds the sent ids in the server's log lines.

use prost::Message;
use serde_json::json;
use sidecar_client::v1::TokenizeRequest;
use sidecar_client::{Client, Code, Error, ResponseMeta};

use crate::record::{Case, Recorder};

/// What the cases use (`--target`); `client` is a unary one.
pub async fn run(rec: &mut Recorder, client: &Client, target: &str, model: &str) {
    let request = |model: &str| TokenizeRequest {
        model: model.into(),
        texts: vec!["request id".into()],
        ..Default::default()
    };
    let tagged = |client: &Client, id: &str| client.with_request_id(id).expect("a valid id");
    tokenize(
        rec,
        Case::ok("request id: echoed", "Tokenize"),
        &tagged(client, "interop-ok-1"),
        request(model),
        Some("interop-ok-1"),
    )
    .await;
    tokenize(
        rec,
        Case::err(
            "request id: echoed with an error",
            "Tokenize",
            Code::NotFound,
        ),
        &tagged(client, "interop-error-2"),
        request("no-such-model"),
        Some("interop-error-2"),
    )
    .await;
    tokenize(
        rec,
        Case::ok("request id: made by the server", "Tokenize"),
        client,
        request(model),
        None,
    )
    .await;
    let multiplexed = match Client::builder(target).multiplex(true).build() {
        Ok(client) => client,
        Err(error) => {
            rec.check("request id: multiplex client", false, || error.to_string());
            return;
        }
    };
    let carrier = rec.carrier;
    rec.carrier = "multiplex+metadata";
    tokenize(
        rec,
        Case::ok("request id: echoed with multiplex on", "Tokenize"),
        &tagged(&multiplexed, "interop-mux-3"),
        request(model),
        Some("interop-mux-3"),
    )
    .await;
    rec.carrier = carrier;
}

async fn tokenize(
    rec: &mut Recorder,
    case: Case,
    client: &Client,
    request: TokenizeRequest,
    sent: Option<&str>,
) {
    let bytes = request.encode_to_vec();
    let outcome = client.tokenize_with_meta(request).await;
    let echoed = match &outcome {
        Ok((_, meta)) => ResponseMeta::request_id(meta),
        Err(error) => Error::request_id(error),
    }
    .map(str::to_string);
    let name = case.name.clone();
    match sent {
        Some(sent) => rec.check(&name, echoed.as_deref() == Some(sent), || {
            format!("sent {sent:?}, echoed {echoed:?}")
        }),
        None => rec.check(
            &name,
            echoed.as_ref().is_some_and(|e| !e.is_empty()),
            || "no request id echoed".into(),
        ),
    }
    let extra = json!({"request_id_sent": sent, "request_id_echoed": echoed});
    rec.record_with(case, &bytes, outcome.map(|(r, _)| r), extra);
}
