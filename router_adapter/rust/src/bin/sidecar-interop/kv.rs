//! `sidecar.v1.KvRouter` on a server started with `--kv-events`, after events for `text` were
//! published: Score by text, by token ids and by chat messages, an unknown model, KvStatus.

use sidecar_client::v1::score_request::Input;
use sidecar_client::v1::{KvStatusRequest, ScoreRequest, TokenIds, TokenizeRequest};
use sidecar_client::{Client, Code};

use crate::record::{Case, Recorder};

pub async fn run(rec: &mut Recorder, client: &Client, model: &str, text: &str) {
    let score = |input: Input| ScoreRequest {
        model: model.into(),
        input: Some(input),
        ..Default::default()
    };
    let by_text = rec
        .unary(
            Case::ok("score: by text", "Score"),
            score(Input::Text(text.into())),
            |r| client.score(r),
        )
        .await;
    if let Some(response) = &by_text {
        let best = response.workers.first().map_or(0, |w| w.blocks);
        rec.check("score: by text", best > 0, || {
            format!("no cached prefix: {response:?}")
        });
    }
    let request = TokenizeRequest {
        model: model.into(),
        texts: vec![text.into()],
        ..Default::default()
    };
    if let Ok(tokens) = client.tokenize(request).await {
        let ids = tokens
            .encodings
            .into_iter()
            .next()
            .map(|e| e.token_ids)
            .unwrap_or_default();
        let by_ids = rec
            .unary(
                Case::ok("score: by token ids", "Score"),
                score(Input::TokenIds(TokenIds { token_ids: ids })),
                |r| client.score(r),
            )
            .await;
        rec.check(
            "score: ids agree with text",
            by_ids.map(|r| r.workers) == by_text.map(|r| r.workers),
            || "different workers".into(),
        );
    }
    let messages = format!(
        r#"[{{"role":"user","content":{}}}]"#,
        serde_json::Value::String(text.into())
    );
    rec.unary(
        Case::ok("score: by chat messages", "Score"),
        score(Input::MessagesJson(messages)),
        |r| client.score(r),
    )
    .await;
    let request = ScoreRequest {
        model: "no-such-model".into(),
        ..score(Input::Text(text.into()))
    };
    rec.unary(
        Case::err("score: unknown model", "Score", Code::NotFound),
        request,
        |r| client.score(r),
    )
    .await;
    rec.unary(
        Case::ok("kv status", "KvStatus"),
        KvStatusRequest {},
        |_| client.kv_status(),
    )
    .await;
    // This server runs without --enable-admin: no Admin service, and no request id echoed for a
    // call it did not run.
    let tagged = client
        .with_request_id("interop-no-admin")
        .expect("a valid id");
    let outcome = tagged.reload_models(Default::default()).await;
    let echoed = outcome.as_ref().err().and_then(|e| e.request_id());
    rec.check("reload models: admin off", echoed.is_none(), || {
        format!("echoed {echoed:?}")
    });
    rec.record(
        Case::err(
            "reload models: admin off",
            "ReloadModels",
            Code::Unimplemented,
        ),
        &[],
        outcome,
    );
}
