//! Pipeline tests on a real vocabulary (skipped visibly when ../shared/models is absent, failing
//! under CI=true: see `crate::test_support`); the data-driven cases for every format run in
//! tests/parse/.

use std::sync::Arc;

use crate::parse::{ParseModel, Session, SessionConfig};
use crate::test_support::shared_model;

fn session(
    tool: &str,
    reasoning: &str,
    prompt: &str,
) -> Option<(Session, crate::tokenizer::Tokenizer)> {
    let tok = shared_model("qwen3")?;
    let model = Arc::new(ParseModel::new(&tok, false).expect("model"));
    let cfg = SessionConfig {
        tool_parser: tool.into(),
        reasoning_parser: reasoning.into(),
        id_seed: 7,
        ..SessionConfig::default()
    };
    let prompt = tok
        .hf()
        .encode(prompt, false)
        .expect("encode")
        .get_ids()
        .to_vec();
    Some((Session::new(model, &cfg, &prompt).expect("session"), tok))
}

#[test]
fn streams_reasoning_content_and_calls() {
    let Some((mut s, tok)) = session("hermes", "qwen3", "<|im_start|>assistant\n") else {
        return;
    };
    let text = "<think>plan</think>Hi <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"x\"}}</tool_call>";
    let ids = tok
        .hf()
        .encode(text, false)
        .expect("encode")
        .get_ids()
        .to_vec();
    let (mut content, mut reasoning, mut args, mut names) =
        (String::new(), String::new(), String::new(), Vec::new());
    let mut last = None;
    for (i, id) in ids.iter().enumerate() {
        let d = s.feed(&[*id], i + 1 == ids.len()).expect("feed");
        content.push_str(&d.content);
        reasoning.push_str(&d.reasoning);
        for c in &d.calls {
            if !c.name.is_empty() {
                names.push(c.name.clone());
            }
            args.push_str(&c.arguments);
        }
        last = Some(d);
    }
    let last = last.expect("fed");
    assert_eq!((content.as_str(), reasoning.as_str()), ("Hi ", "plan"));
    assert_eq!(names, ["f"]);
    assert_eq!(args, "{\"a\": \"x\"}");
    assert_eq!(
        (
            last.finish_reason,
            last.reasoning_tokens,
            last.completion_tokens
        ),
        ("tool_calls", 1, ids.len() as u32)
    );
}

#[test]
fn rejects_unknown_parsers_and_ids() {
    let Some((mut s, _)) = session("", "", "") else {
        return;
    };
    assert!(s.feed(&[u32::MAX], false).is_err());
    let Some(tok) = shared_model("qwen3") else {
        return;
    };
    let model = Arc::new(ParseModel::new(&tok, false).expect("model"));
    let cfg = SessionConfig {
        tool_parser: "nope".into(),
        ..SessionConfig::default()
    };
    let err = Session::new(model, &cfg, &[])
        .err()
        .expect("unknown parser");
    assert!(err.message().starts_with("tool_parser"));
}

#[test]
fn mux_answers_an_unknown_request_with_not_found_from_the_table() {
    use crate::parse::{Handled, Mux, MuxLimits};
    use crate::wire::pb::{self, parse_stream_request::Kind};
    use prost::Message;

    let mut mux = Mux::new(MuxLimits::default());
    let step = pb::ParseStreamRequest {
        kind: Some(Kind::Step(pb::Step {
            items: vec![pb::StepTokens {
                request_id: "ghost".into(),
                token_ids: vec![1],
                finished: false,
            }],
        })),
    };
    let mut out = Vec::new();
    assert_eq!(
        mux.handle(&step.encode_to_vec(), &mut out)
            .expect("handled"),
        Handled::Done
    );
    let answer = pb::ParseStreamResponse::decode(out.as_slice()).expect("decodes");
    let error = answer.deltas[0].error.as_ref().expect("an error");
    assert_eq!(error.code, crate::ErrorKind::NotFound.grpc_code());
    assert!(answer.deltas[0].finished);
    assert!(mux.handle(&[], &mut out).is_err(), "an empty message");
}
