//! The interpreter through a whole session on Qwen3's vocabulary: the same final result in every
//! chunking, and the statuses of a model that cannot serve `hf`/`beam` (the vectors of vLLM's own
//! parser run in tests/parse/test_oracle.py).

use std::sync::Arc;

use serde_json::{json, Value};

use crate::error::ErrorKind;
use crate::parse::{ParseModel, ParseModelOptions, Session, SessionConfig};
use crate::test_support::shared_model;

fn template() -> Value {
    json!({
        "version": 1,
        "start_anchor": "<|im_start|>assistant\n",
        "fields": {
            "thinking": {"open": "<think>", "close": "</think>"},
            "tool_calls": {"open_pattern": r"<tool_call>\s*", "close": "</tool_call>", "content": "json",
                "repeats": true, "transform": {"function": {"name": "{content.name}", "arguments": "{content.arguments}"}}},
            "content": {}
        }
    })
}

fn model(template: Option<Value>) -> Option<(Arc<ParseModel>, crate::tokenizer::Tokenizer)> {
    let tok = shared_model("qwen3")?;
    let options = ParseModelOptions {
        response_template: template,
        ..ParseModelOptions::default()
    };
    Some((
        Arc::new(ParseModel::with_options(&tok, options).expect("model")),
        tok,
    ))
}

fn ids(tok: &crate::tokenizer::Tokenizer, text: &str) -> Vec<u32> {
    tok.hf()
        .encode(text, false)
        .expect("encode")
        .get_ids()
        .to_vec()
}

fn config(tool: &str, reasoning: &str) -> SessionConfig {
    SessionConfig {
        tool_parser: tool.into(),
        reasoning_parser: reasoning.into(),
        tools_json:
            r#"[{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
            "properties": {"n": {"type": "integer"}}}}}]"#
                .into(),
        id_seed: 3,
        ..SessionConfig::default()
    }
}

/// (content, reasoning, [(name, arguments)], finish reason) of `output` fed `per` ids a step.
fn run(
    model: &Arc<ParseModel>,
    tok: &crate::tokenizer::Tokenizer,
    prompt: &str,
    output: &str,
    per: usize,
) -> (String, String, Vec<(String, String)>, &'static str) {
    let mut s = Session::new(
        Arc::clone(model),
        &config("beam", "beam"),
        &ids(tok, prompt),
    )
    .expect("session");
    let all = ids(tok, output);
    let (mut content, mut reasoning, mut calls) =
        (String::new(), String::new(), Vec::<(String, String)>::new());
    let mut finish = "";
    let chunks: Vec<&[u32]> = all.chunks(per.max(1)).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let d = s.feed(chunk, i + 1 == chunks.len()).expect("feed");
        content.push_str(&d.content);
        reasoning.push_str(&d.reasoning);
        for c in d.calls {
            match calls.get_mut(c.index as usize) {
                Some(call) => call.1.push_str(&c.arguments),
                None => calls.push((c.name, c.arguments)),
            }
        }
        finish = d.finish_reason;
    }
    (content, reasoning, calls, finish)
}

#[test]
fn every_chunking_gives_the_same_message() {
    let Some((model, tok)) = model(Some(template())) else {
        return;
    };
    let output = "plan</think>Sure. <tool_call> {\"name\": \"f\", \"arguments\": {\"n\": \"5\"}}</tool_call> \
                  <tool_call>{bad}</tool_call> tail <tool_c";
    let whole = run(
        &model,
        &tok,
        "<|im_start|>assistant\n<think>\n",
        output,
        usize::MAX,
    );
    assert_eq!(whole.0, "Sure.  <tool_call>{bad}</tool_call> tail <tool_c");
    assert_eq!(whole.1, "plan");
    assert_eq!(whole.2, vec![("f".to_string(), "{\"n\": 5}".to_string())]);
    assert_eq!(whole.3, "tool_calls");
    for per in 1..6 {
        assert_eq!(
            run(
                &model,
                &tok,
                "<|im_start|>assistant\n<think>\n",
                output,
                per
            ),
            whole,
            "{per} ids a step"
        );
    }
}

#[test]
fn a_model_without_a_usable_template_is_a_failed_precondition() {
    let Some((plain, tok)) = model(None) else {
        return;
    };
    let prompt = ids(&tok, "hi");
    let err = Session::new(Arc::clone(&plain), &config("hf", ""), &prompt)
        .err()
        .expect("refused");
    assert_eq!(err.kind(), ErrorKind::FailedPrecondition);
    assert!(
        err.message().contains("tokenizer_config.json has none"),
        "{}",
        err.message()
    );
    let mut bad = template();
    bad["fields"]["thinking"]["open_pattern"] = json!("(?<=x)<think>");
    bad["fields"]["thinking"]
        .as_object_mut()
        .expect("object")
        .remove("open");
    let (odd, _) = model(Some(bad)).expect("model");
    let err = Session::new(odd, &config("", "beam"), &prompt)
        .err()
        .expect("refused");
    assert_eq!(err.kind(), ErrorKind::FailedPrecondition);
    assert!(err.message().contains("open_pattern"), "{}", err.message());
    let mut no_thinking = template();
    no_thinking["fields"]
        .as_object_mut()
        .expect("object")
        .remove("thinking");
    let (model, _) = model(Some(no_thinking)).expect("model");
    let err = Session::new(Arc::clone(&model), &config("", "hf"), &prompt)
        .err()
        .expect("refused");
    assert!(
        err.message().contains("thinking field"),
        "{}",
        err.message()
    );
    let err = Session::new(model, &config("hf", "qwen3"), &prompt)
        .err()
        .expect("refused");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}
