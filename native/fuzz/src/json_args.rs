//! Target `json_args`: JSON tool-call arguments, through the streaming JSON relay of the parsers
//! (native/src/parse/json.rs, reached through the formats that carry JSON arguments) and through
//! the template JSON parser and `tojson` (native/src/template/json.rs, pyjson.rs).
//!
//! Layout: `format flags`, then the JSON text `X`.
//! - `format` 0-2: `X` as a call's arguments in hermes (qwen3), llama3_json (llama3) or mistral
//!   (mistral-v3-spm) output, fed at once and one token per step (flags bit 0: `X` one token per
//!   byte where the vocabulary is byte-level, splitting every character). When `serde_json` reads `X`
//!   as an object and `X` spells none of the model's added tokens, there must be exactly one call,
//!   named `f`, whose streamed arguments are JSON equal to `X`; always the stream invariants of
//!   [`crate::stream_check`] and chunking independence.
//! - `format` 3: `X` as a template kwarg rendered with `{{ x | tojson }}`: a clean error, or a
//!   dump that parses back to the same value; and whatever `serde_json` accepts, the template JSON
//!   parser accepts too, with the same value.

use std::sync::OnceLock;

use serde_json::Value;
use sidecar_native::parse::SessionConfig;
use sidecar_native::template::json::{self as tjson, Json};
use sidecar_native::template::{ChatTemplates, Clock, Limits, RenderRequest};

use crate::input::{chunking, text, Input, Rng};
use crate::models;
use crate::stream_check;

const TOOLS: &str =
    r#"[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]"#;

/// (tool parser, model, text before the arguments, text after them).
const FORMATS: &[(&str, &str, &str, &str)] = &[
    (
        "hermes",
        "qwen3",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": ",
        "}\n</tool_call>",
    ),
    (
        "llama3_json",
        "llama3",
        "{\"name\": \"f\", \"parameters\": ",
        "}",
    ),
    (
        "mistral",
        "mistral-v3-spm",
        "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": ",
        "}]",
    ),
];

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let (format, flags) = (input.byte() % 4, input.byte());
    let x = text(input.rest());
    match FORMATS.get(format as usize) {
        Some(f) => through_parser(*f, &x, flags),
        None => through_template(&x),
    }
}

fn through_parser((parser, model, before, after): (&str, &str, &str, &str), x: &str, flags: u8) {
    let Some(model) = models::model(model) else {
        return;
    };
    // The format's markers as the model's tokens; with flags bit 0 the arguments one token per
    // byte (every character split across steps) where the vocabulary is byte-level.
    let mut ids = models::encode(&model.tok, before);
    let x_ids = match flags & 1 {
        1 => models::byte_tokens(&model.tok, x),
        _ => None,
    }
    .unwrap_or_else(|| models::encode(&model.tok, x));
    ids.extend(&x_ids);
    ids.extend(models::encode(&model.tok, after));
    let cfg = SessionConfig {
        tool_parser: parser.into(),
        tools_json: TOOLS.into(),
        trace: true,
        id_seed: 7,
        ..SessionConfig::default()
    };
    let mut results = Vec::new();
    for mode in [0, 1] {
        let session = stream_check::open(&model.parse, &cfg, &[]).expect("a fixed config opens");
        let chunks = chunking(ids.len(), mode, &mut Rng::new(1));
        results.push(stream_check::run(session, &ids, &chunks, false));
    }
    assert_eq!(results[0], results[1], "the result depends on the chunking");
    let Ok(expected) = serde_json::from_str::<Value>(x) else {
        return;
    };
    let spells_marker = model
        .tok
        .added_tokens()
        .iter()
        .any(|t| x.contains(&t.content));
    // The vocabulary must spell `X` back as it is (SentencePiece reads `▁` as a space, and a
    // normalizer may rewrite text): the parser sees the decoded text, not `X`.
    // (Checked on the ids fed.)
    let round_trips = model.tok.decode(&x_ids, false).is_ok_and(|d| d == x);
    if !expected.is_object()
        || spells_marker
        || !round_trips
        || x.chars().any(|c| ('\u{FDD0}'..='\u{FDEF}').contains(&c))
    {
        return;
    }
    let calls = &results[0].calls;
    assert_eq!(
        calls.len(),
        1,
        "{parser}: valid object arguments gave {calls:?}"
    );
    assert_eq!(calls[0].name, "f");
    let got: Value = serde_json::from_str(&calls[0].arguments).expect("checked by stream_check");
    assert_eq!(
        got, expected,
        "{parser}: arguments changed: {:?}",
        calls[0].arguments
    );
}

fn dump_template() -> &'static ChatTemplates {
    static ONE: OnceLock<ChatTemplates> = OnceLock::new();
    ONE.get_or_init(|| {
        let source = "{{ x | tojson }}".to_string();
        ChatTemplates::new(
            vec![("default".into(), source)],
            vec![],
            Limits::default(),
            Clock::Fixed(0),
        )
    })
}

fn through_template(x: &str) {
    let parsed = tjson::parse(x, "x");
    if let Ok(reference) = serde_json::from_str::<Value>(x) {
        let ours = parsed
            .as_ref()
            .unwrap_or_else(|e| panic!("serde_json reads it, we refuse: {e:?}"));
        assert!(
            same(ours, &reference),
            "values differ: {ours:?} / {reference}"
        );
    }
    if let Err(e) = &parsed {
        crate::assert_clean_error(e, "json::parse");
    }
    let kwargs = format!("{{\"x\": {x}}}");
    let request = RenderRequest {
        messages_json: r#"[{"role": "user", "content": "a"}]"#,
        kwargs_json: &kwargs,
        ..RenderRequest::default()
    };
    match dump_template().render(&request) {
        Ok(dumped) => {
            let (Ok(value), Ok(back)) = (&parsed, tjson::parse(&dumped, "dump")) else {
                // The kwargs object may read where `x` alone does not (`1, "y": 2`): no round trip.
                return;
            };
            assert!(
                equal(value, &back),
                "tojson does not round-trip: {x:?} -> {dumped:?}"
            );
        }
        Err(e) => crate::assert_clean_error(&e, "render tojson"),
    }
}

/// Equality with NaN equal to itself (a dump of NaN reads back as NaN).
fn equal(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Float(x), Json::Float(y)) => x == y || (x.is_nan() && y.is_nan()),
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((k, a), (l, b))| k == l && equal(a, b))
        }
        _ => a == b,
    }
}

/// Whether our value is what serde_json read (integers beyond 64 bits and floats compared as
/// serde_json's f64, which may be one ULP off: compared with a relative tolerance).
fn same(ours: &Json, theirs: &Value) -> bool {
    match (ours, theirs) {
        (Json::Null, Value::Null) => true,
        (Json::Bool(a), Value::Bool(b)) => a == b,
        (Json::Int(a), Value::Number(n)) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(b), _, _) => *a == i128::from(b),
            (_, Some(b), _) => *a == i128::from(b),
            (_, _, Some(f)) => close(*a as f64, f),
            _ => false,
        },
        (Json::Float(a), Value::Number(n)) => n.as_f64().is_some_and(|b| close(*a, b)),
        (Json::Str(a), Value::String(b)) => a == b,
        (Json::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
        }
        // A repeated key keeps its first position and last value in both.
        (Json::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same(v, w)))
        }
        _ => false,
    }
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-15 * a.abs().max(b.abs())
}
