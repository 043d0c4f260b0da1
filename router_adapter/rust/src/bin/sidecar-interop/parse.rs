//! ParseStream: several requests multiplexed on one stream (reasoning, a tool call, a stop
//! string, a bad parser, the per-stream request limit, a cancel), pipelined; then the lock-step
//! helpers on a second stream.

use std::collections::BTreeMap;
use std::time::Duration;

use prost::Message;
use serde_json::json;
use sidecar_client::v1::parse_stream_request::Kind;
use sidecar_client::v1::{
    CancelRequest, OpenRequest, ParseStreamRequest, ParseStreamResponse, Step, StepTokens,
    TokenizeRequest,
};
use sidecar_client::{Client, Error};

use crate::record::{hex, Recorder};

/// (request id, generated text, open settings) of the well-formed requests.
const OUTPUTS: [(&str, &str); 3] = [
    ("think", "<think>\nI should greet them.\n</think>\n\nHello there, friend!"),
    ("tool", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
    ("stop", "one two three STOP four five"),
];
const TOOLS: &str = r#"[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]"#;

pub async fn run(rec: &mut Recorder, client: &Client, model: &str) -> Result<(), Error> {
    let texts = OUTPUTS.iter().map(|(_, text)| text.to_string()).collect();
    let request = TokenizeRequest {
        model: model.into(),
        texts,
        add_special_tokens: Some(false),
        ..Default::default()
    };
    let ids: Vec<Vec<u32>> = client
        .tokenize(request)
        .await?
        .encodings
        .into_iter()
        .map(|e| e.token_ids)
        .collect();
    multiplexed(rec, client, model, &ids).await?;
    deep_pipeline(rec, client, model).await?;
    lock_step(rec, client, model, &ids[2]).await
}

fn open(model: &str, id: &str) -> OpenRequest {
    let mut open = OpenRequest {
        request_id: id.into(),
        model: model.into(),
        ..Default::default()
    };
    match id {
        "think" => open.reasoning_parser = "qwen3".into(),
        "tool" => {
            (open.tool_parser, open.reasoning_parser, open.tools_json) =
                ("hermes".into(), "none".into(), TOOLS.into())
        }
        "bad-parser" => open.tool_parser = "no_such_parser".into(),
        _ => {
            (open.tool_parser, open.reasoning_parser, open.stop) =
                ("none".into(), "none".into(), vec!["STOP".into()])
        }
    }
    open
}

fn message(kind: Kind) -> ParseStreamRequest {
    ParseStreamRequest { kind: Some(kind) }
}

/// Opens, steps of 3 tokens interleaving every request, a cancel; all sent before any answer is read.
fn script(model: &str, ids: &[Vec<u32>]) -> Vec<ParseStreamRequest> {
    // --parse-max-requests 4: think, tool, stop and extra are open when over-limit is refused.
    let opens = ["think", "tool", "stop", "bad-parser", "extra", "over-limit"];
    let mut messages: Vec<_> = opens
        .iter()
        .map(|id| message(Kind::Open(open(model, id))))
        .collect();
    let longest = ids.iter().map(Vec::len).max().unwrap_or(0);
    for start in (0..longest).step_by(3) {
        let items = OUTPUTS
            .iter()
            .zip(ids)
            .filter(|(_, ids)| start < ids.len())
            .map(|((id, _), ids)| StepTokens {
                request_id: id.to_string(),
                token_ids: ids[start..(start + 3).min(ids.len())].to_vec(),
                finished: start + 3 >= ids.len(),
            })
            .collect();
        messages.push(message(Kind::Step(Step { items })));
    }
    messages.push(message(Kind::Cancel(CancelRequest {
        request_id: "extra".into(),
    })));
    messages
}

async fn multiplexed(
    rec: &mut Recorder,
    client: &Client,
    model: &str,
    ids: &[Vec<u32>],
) -> Result<(), Error> {
    let case = "parse stream: 6 requests multiplexed on one stream, pipelined";
    let requests = script(model, ids);
    let mut stream = client.parse_stream().await?;
    for request in &requests {
        stream.send(request.clone()).await?;
    }
    let mut responses = Vec::new();
    for _ in &requests {
        responses.extend(stream.recv().await?);
    }
    responses.extend(stream.finish().await?);
    rec.cases += 1;
    rec.check(case, responses.len() == requests.len(), || {
        format!("{} answers to {} messages", responses.len(), requests.len())
    });
    check_outputs(rec, case, &responses);
    emit_stream(rec, case, &requests, &responses);
    Ok(())
}

/// More messages sent before the first read than the client's outbound queue holds (64): the
/// call runs from the open, so the server takes them while the engine is still sending. The
/// deadline turns a regression (a send waiting forever) into a failed case.
async fn deep_pipeline(rec: &mut Recorder, client: &Client, model: &str) -> Result<(), Error> {
    let case = "parse stream: 200 messages pipelined before the first read";
    let mut stream = client
        .with_timeout(Duration::from_secs(60))
        .parse_stream()
        .await?;
    // Open and cancel in turn: one request open at a time, under --parse-max-requests 4.
    for i in 0..100 {
        let id = format!("deep-{i}");
        stream.send(message(Kind::Open(open(model, &id)))).await?;
        stream
            .send(message(Kind::Cancel(CancelRequest { request_id: id })))
            .await?;
    }
    let mut answered = 0;
    let mut errors = Vec::new();
    for _ in 0..200 {
        let response = stream.recv().await?;
        answered += usize::from(response.is_some());
        let deltas = response.iter().flat_map(|r| &r.deltas);
        errors.extend(deltas.filter_map(|d| d.error.clone()));
    }
    let rest = stream.finish().await?;
    rec.cases += 1;
    rec.check(
        case,
        answered == 200 && rest.is_empty() && errors.is_empty(),
        || {
            format!(
                "{answered} answers, {} after, errors {errors:?}",
                rest.len()
            )
        },
    );
    Ok(())
}

#[derive(Default, Debug)]
struct Output {
    content: String,
    reasoning: String,
    tools: String,
    finish_reason: String,
    error: Option<i32>,
}

fn check_outputs(rec: &mut Recorder, case: &str, responses: &[ParseStreamResponse]) {
    let mut outputs: BTreeMap<String, Output> = BTreeMap::new();
    for delta in responses.iter().flat_map(|r| &r.deltas) {
        let out = outputs.entry(delta.request_id.clone()).or_default();
        out.content += &delta.content;
        out.reasoning += &delta.reasoning;
        for call in &delta.tool_calls {
            out.tools += &format!("{}{}", call.name, call.arguments);
        }
        if delta.finished {
            out.finish_reason = delta.finish_reason.clone();
        }
        out.error = out.error.or(delta.error.as_ref().map(|e| e.code));
    }
    let get = |id: &str| {
        outputs
            .get(id)
            .map(|o| format!("{o:?}"))
            .unwrap_or_default()
    };
    let think = &outputs.get("think");
    rec.check(
        case,
        think.is_some_and(|o| {
            o.reasoning.contains("greet them") && o.content.contains("Hello there")
        }),
        || get("think"),
    );
    rec.check(
        case,
        outputs
            .get("tool")
            .is_some_and(|o| o.tools.contains("get_weather") && o.tools.contains("Paris")),
        || get("tool"),
    );
    let stop = outputs.get("stop");
    rec.check(
        case,
        stop.is_some_and(|o| o.content.trim_end() == "one two three" && o.finish_reason == "stop"),
        || get("stop"),
    );
    rec.check(
        case,
        outputs.get("bad-parser").and_then(|o| o.error) == Some(3),
        || get("bad-parser"),
    );
    rec.check(
        case,
        outputs.get("over-limit").and_then(|o| o.error) == Some(8),
        || get("over-limit"),
    );
}

/// The lock-step helpers (open, step, cancel, finish) on a fresh stream.
async fn lock_step(
    rec: &mut Recorder,
    client: &Client,
    model: &str,
    ids: &[u32],
) -> Result<(), Error> {
    let case = "parse stream: lock-step open, steps, cancel";
    let mut stream = client.parse_stream().await?;
    let mut requests = vec![message(Kind::Open(open(model, "stop")))];
    let mut responses = vec![stream.open(open(model, "stop")).await?];
    for chunk in ids.chunks(2).take(3) {
        let step = Step {
            items: vec![StepTokens {
                request_id: "stop".into(),
                token_ids: chunk.to_vec(),
                finished: false,
            }],
        };
        requests.push(message(Kind::Step(step.clone())));
        responses.push(stream.step(step).await?);
    }
    requests.push(message(Kind::Cancel(CancelRequest {
        request_id: "stop".into(),
    })));
    responses.push(stream.cancel("stop").await?);
    responses.extend(stream.finish().await?);
    rec.cases += 1;
    let content: String = responses
        .iter()
        .flat_map(|r| &r.deltas)
        .map(|d| d.content.as_str())
        .collect();
    rec.check(
        case,
        responses.len() == requests.len() && "one two three".starts_with(content.trim_end()),
        || content.clone(),
    );
    emit_stream(rec, case, &requests, &responses);
    Ok(())
}

fn emit_stream(
    rec: &mut Recorder,
    case: &str,
    requests: &[ParseStreamRequest],
    responses: &[ParseStreamResponse],
) {
    let hexes = |messages: Vec<Vec<u8>>| messages.iter().map(|m| hex(m)).collect::<Vec<_>>();
    rec.emit(&json!({
        "case": case, "target": rec.target, "method": "ParseStream", "compare": true,
        "requests": hexes(requests.iter().map(Message::encode_to_vec).collect()),
        "responses": hexes(responses.iter().map(Message::encode_to_vec).collect()),
    }));
}
