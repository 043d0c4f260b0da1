//! Pipeline tests on a real vocabulary (skipped visibly when ../shared/models is absent, failing
//! under CI=true: see `crate::test_support`); the data-driven cases for every format run in
//! tests/parse/.

use std::sync::Arc;

use crate::cancel::Cancel;
use crate::parse::session::STEP_CHECK_IDS;
use crate::parse::{ParseModel, Session, SessionConfig};
use crate::test_support::{encode, shared_model};
use crate::tokenizer::Tokenizer;

/// A shared model's tokenizer and the parse model built on it (None when ../shared/models is
/// absent).
fn parse_model(name: &str) -> Option<(Arc<ParseModel>, Tokenizer)> {
    let tok = shared_model(name)?;
    Some((Arc::new(ParseModel::new(&tok, false).expect("model")), tok))
}

fn session(
    tool: &str,
    reasoning: &str,
    prompt: &str,
) -> Option<(Session, crate::tokenizer::Tokenizer)> {
    let (model, tok) = parse_model("qwen3")?;
    let cfg = SessionConfig {
        tool_parser: tool.into(),
        reasoning_parser: reasoning.into(),
        id_seed: 7,
        ..SessionConfig::default()
    };
    let prompt = encode(&tok, prompt);
    Some((Session::new(model, &cfg, &prompt).expect("session"), tok))
}

#[test]
fn streams_reasoning_content_and_calls() {
    let Some((mut s, tok)) = session("hermes", "qwen3", "<|im_start|>assistant\n") else {
        return;
    };
    let text = "<think>plan</think>Hi <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"x\"}}</tool_call>";
    let ids = encode(&tok, text);
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
    let Some((model, _)) = parse_model("qwen3") else {
        return;
    };
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

#[test]
fn mux_refuses_a_step_over_the_id_limit_or_with_an_id_above_32_bits_per_request() {
    use crate::parse::{Mux, MuxLimits, OpenOptions};
    use crate::wire::pb::{self, parse_stream_request::Kind};
    use prost::Message;

    let Some((model, _)) = parse_model("qwen3") else {
        return;
    };
    let mut mux = Mux::new(MuxLimits {
        max_step_ids: 4,
        ..MuxLimits::default()
    });
    for id in ["long", "wide", "fine"] {
        let opts = OpenOptions {
            request_id: id.into(),
            fingerprint: String::new(),
        };
        mux.open(model.clone(), &opts, &SessionConfig::default(), &[])
            .expect("opens");
    }
    let item = |id: &str, ids: Vec<u32>| pb::StepTokens {
        request_id: id.into(),
        token_ids: ids,
        finished: false,
    };
    let step = pb::ParseStreamRequest {
        kind: Some(Kind::Step(pb::Step {
            items: vec![
                item("long", vec![9707; 5]),
                item("wide", vec![]),
                item("fine", vec![9707, 1879]),
            ],
        })),
    };
    let mut bytes = step.encode_to_vec();
    // "wide" gets a packed 2^32 (prost cannot write one into a uint32 field).
    let wide = bytes.windows(4).position(|w| w == b"wide").expect("wide") + 4;
    let packed = [0x12, 5, 0x80, 0x80, 0x80, 0x80, 0x10];
    bytes.splice(wide..wide, packed);
    // Fix the lengths of the item and the step around the 7 inserted bytes.
    let item_len_at = wide - 4 - 3;
    bytes[item_len_at] += packed.len() as u8;
    bytes[1] += packed.len() as u8;
    let mut out = Vec::new();
    mux.handle(&bytes, &mut out).expect("handled");
    let answer = pb::ParseStreamResponse::decode(out.as_slice()).expect("decodes");
    let by_id = |id: &str| {
        answer
            .deltas
            .iter()
            .find(|d| d.request_id == id)
            .expect("answered")
    };
    let long = by_id("long").error.as_ref().expect("refused");
    assert_eq!(long.code, crate::ErrorKind::ResourceExhausted.grpc_code());
    assert!(long.message.contains("--max-token-ids"), "{}", long.message);
    let wide = by_id("wide").error.as_ref().expect("refused");
    assert_eq!(wide.code, crate::ErrorKind::InvalidArgument.grpc_code());
    assert!(
        wide.message
            .starts_with("step.items.token_ids[0]: 4294967296"),
        "{}",
        wide.message
    );
    assert_eq!(by_id("fine").content, "Hello world");
    assert_eq!(mux.len(), 1, "the refused requests are retired");
}

/// A step is fed as one whole: its deltas joined, in any number of checked parts.
fn feed_joined(
    s: &mut Session,
    ids: &[u32],
    end: bool,
    cancel: &Cancel<'_>,
) -> (String, String, String) {
    let mut delta = crate::parse::Delta::default();
    s.feed_cancellable(ids, end, &mut delta, cancel, usize::MAX)
        .expect("feed");
    let args = delta.calls.iter().map(|c| c.arguments.as_str()).collect();
    (delta.content, delta.reasoning, args)
}

#[test]
fn a_long_step_fed_in_checked_parts_equals_small_steps() {
    let Some((mut small, tok)) = session("hermes", "qwen3", "<|im_start|>assistant\n") else {
        return;
    };
    let (mut long, _) = session("hermes", "qwen3", "<|im_start|>assistant\n").expect("model");
    let filler = "word ".repeat(3 * STEP_CHECK_IDS / 2);
    let text = format!("<think>{filler}</think>{filler}<tool_call>{{\"name\": \"f\", \"arguments\": {{\"a\": \"x\"}}}}</tool_call>");
    let ids = encode(&tok, &text);
    assert!(ids.len() > 2 * STEP_CHECK_IDS, "{}", ids.len());
    let mut expected = (String::new(), String::new(), String::new());
    for chunk in ids.chunks(1000) {
        let d = small.feed(chunk, false).expect("feed");
        expected.0.push_str(&d.content);
        expected.1.push_str(&d.reasoning);
        d.calls
            .iter()
            .for_each(|c| expected.2.push_str(&c.arguments));
    }
    assert_eq!(
        feed_joined(&mut long, &ids, false, &Cancel::default()),
        expected
    );
}

#[test]
fn padded_output_ids_add_no_text_and_ids_past_the_output_size_fail_the_request() {
    let Some(tok) = shared_model("qwen3") else {
        return;
    };
    // Qwen3 checkpoints: 151,936 output rows for the tokenizer's 151,669 ids.
    let tok = tok.with_options(&crate::tokenizer::TokenizerOptions {
        output_size: 151_936,
    });
    let model = Arc::new(ParseModel::new(&tok, false).expect("model"));
    let cfg = SessionConfig {
        tool_parser: "none".into(),
        reasoning_parser: "none".into(),
        ..SessionConfig::default()
    };
    let gap = [151_669u32, 151_700, 151_935];
    // One token per byte of "漢" (the first two bytes alone are no character), padded ids between.
    let mut ids = Vec::new();
    for (i, b) in "漢".bytes().enumerate() {
        ids.push(gap[i]);
        ids.push(tok.token_to_id(&byte_level_char(b)).expect("byte token"));
    }
    ids.extend(encode(&tok, " ok"));
    let mut s = Session::new(Arc::clone(&model), &cfg, &[9707, 151_800]).expect("session");
    let mut text = String::new();
    for (i, id) in ids.iter().enumerate() {
        let d = s.feed(&[*id], i + 1 == ids.len()).expect("feed");
        text.push_str(&d.content);
        if i + 1 == ids.len() {
            assert_eq!(d.completion_tokens, ids.len() as u32);
        }
    }
    assert_eq!(text, "漢 ok");
    let mut s = Session::new(model, &cfg, &[]).expect("session");
    let err = s.feed(&[9707, 151_936], false).unwrap_err();
    assert_eq!(
        err.message(),
        "token_ids[1]: id 151936 is not in the vocabulary (size 151669) nor below the model's \
         output size (151936)"
    );
}

/// The byte-level (GPT-2) vocabulary's character for byte `b`.
fn byte_level_char(b: u8) -> String {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    let shifted = (0..b).filter(|&x| !printable(x)).count() as u32;
    let c = if printable(b) {
        u32::from(b)
    } else {
        256 + shifted
    };
    char::from_u32(c).expect("char").to_string()
}

#[test]
fn a_long_step_names_a_bad_id_by_its_place_in_the_step_and_stops_when_cancelled() {
    let Some((mut s, _)) = session("", "", "") else {
        return;
    };
    let mut ids = vec![1000u32; 2 * STEP_CHECK_IDS];
    ids[STEP_CHECK_IDS + 7] = u32::MAX;
    let mut delta = crate::parse::Delta::default();
    let err = s
        .feed_cancellable(&ids, false, &mut delta, &Cancel::default(), usize::MAX)
        .unwrap_err();
    let at = format!("token_ids[{}]", STEP_CHECK_IDS + 7);
    assert!(err.message().starts_with(&at), "{}", err.message());
    let flag = std::sync::atomic::AtomicU32::new(1);
    let ids = vec![1000u32; 2 * STEP_CHECK_IDS];
    let err = s
        .feed_cancellable(
            &ids,
            false,
            &mut delta,
            &Cancel::new(None, Some(&flag)),
            usize::MAX,
        )
        .unwrap_err();
    assert_eq!(err.kind(), crate::error::ErrorKind::Cancelled);
}

/// A wait on undecided text (each marker of every format, then 20,000 tokens of one kind; and a
/// wait inside Muse's nested reader) is handed to the parsers at most about seventeen times over
/// (`parse::pacing`), whatever the format: without pacing, a stage fed once per step reads such a
/// wait `n²/2` bytes in all.
#[test]
fn a_long_undecided_wait_is_read_a_bounded_number_of_times() {
    use crate::parse::pacing::PACED_FROM;
    use crate::parse::registry::{rows, Kind};
    const UNITS: usize = 20_000;
    let Some((model, tok)) = parse_model("qwen3") else {
        return;
    };
    let mut checked = 0;
    for kind in [Kind::Tool, Kind::Reasoning] {
        for row in rows(kind).iter().filter(|r| r.implemented()) {
            let cfg = SessionConfig {
                tool_parser: if kind == Kind::Tool {
                    row.name.into()
                } else {
                    String::new()
                },
                reasoning_parser: if kind == Kind::Reasoning {
                    row.name.into()
                } else {
                    String::new()
                },
                id_seed: 7,
                ..SessionConfig::default()
            };
            // Every marker, a wait inside a nested reader (Muse's tool body), and objects for the
            // JSON reader of dots that each end in a block end and start another block.
            let mut waits: Vec<(&str, &str, usize)> = row
                .markers
                .iter()
                .flat_map(|m| [(*m, " ", UNITS), (*m, "a", UNITS)])
                .collect();
            match row.name {
                "muse" => waits.push((
                    "<|start|>assistant to=functions.f<|message|><atem:function_calls>\n<atem:invoke name=\"",
                    "a",
                    UNITS,
                )),
                // 46 bytes each: 5,000 stay under the held-back limit until the end.
                "dots" => waits.push((
                    "<dots_function_call>",
                    "{\"</dots_function_call><dots_function_call>\":[",
                    5_000,
                )),
                _ => {}
            }
            for (marker, unit, units) in waits {
                {
                    let Ok(mut s) = Session::new(Arc::clone(&model), &cfg, &[]) else {
                        continue;
                    };
                    let mut ids = encode(&tok, marker);
                    let unit_ids = encode(&tok, unit);
                    for _ in 0..units {
                        ids.extend_from_slice(&unit_ids);
                    }
                    let text_bytes = (marker.len() + units * unit.len()) as u64;
                    for (i, id) in ids.iter().enumerate() {
                        if s.feed(&[*id], i + 1 == ids.len()).is_err() || s.is_finished() {
                            break;
                        }
                    }
                    let handed = s.handed_bytes();
                    // Per stage: a sixteenth's growth between feeds past the paced size, every step
                    // below it, and a step's own few bytes.
                    let paced = PACED_FROM as u64;
                    let bound = 2 * (17 * text_bytes + paced * paced / 2 + 64 * ids.len() as u64);
                    assert!(
                        handed <= bound,
                        "{} after {marker:?} then {unit:?}: {handed} bytes handed for {text_bytes}",
                        row.name
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} waits checked");
}

/// What a whole request gave: content, reasoning, and each call as `name(arguments)`.
type Outcome = (String, String, Vec<String>);

/// Feeds `ids` in steps of `per_step` and joins the deltas.
fn run_in_steps(s: &mut Session, ids: &[u32], per_step: usize) -> Outcome {
    let (mut content, mut reasoning, mut calls) =
        (String::new(), String::new(), Vec::<String>::new());
    let steps: Vec<&[u32]> = ids.chunks(per_step.max(1)).collect();
    for (i, step) in steps.iter().enumerate() {
        let d = s.feed(step, i + 1 == steps.len()).expect("feed");
        content.push_str(&d.content);
        reasoning.push_str(&d.reasoning);
        for c in d.calls {
            if calls.len() <= c.index as usize {
                calls.resize(c.index as usize + 1, String::new());
            }
            let call = &mut calls[c.index as usize];
            call.push_str(&c.name);
            call.push_str(&c.arguments);
        }
    }
    (content, reasoning, calls)
}

/// Waits longer than the paced size that then resolve give the result of the whole text fed at
/// once, fed one token per step (paced) and in steps of 7 tokens.
#[test]
fn paced_waits_resolve_as_the_whole_text_does() {
    use crate::parse::pacing::PACED_FROM;
    let Some((model, tok)) = parse_model("qwen3") else {
        return;
    };
    let pad = " ".repeat(3 * PACED_FROM);
    let long_name = "n".repeat(2 * PACED_FROM);
    let outcome = |content: &str, reasoning: &str, calls: Vec<String>| -> Outcome {
        (content.into(), reasoning.into(), calls)
    };
    let cases: Vec<(&str, &str, String, Outcome)> = vec![
        (
            "hermes",
            "",
            format!("Hi <tool_call>{pad}{{\"name\": \"f\", \"arguments\": {{\"a\": 1}}}}</tool_call> bye"),
            outcome("Hi  bye", "", vec!["f{\"a\": 1}".to_string()]),
        ),
        (
            "",
            "glm45",
            format!("<think>plan{pad}</think>answer"),
            outcome("answer", "plan", vec![]),
        ),
        (
            "hermes",
            "",
            format!("<tool_call>{{\"name\": \"{long_name}\", \"arguments\": {{}}}}</tool_call>"),
            outcome("", "", vec![format!("{long_name}{{}}")]),
        ),
    ];
    for (tool, reasoning, text, expect) in cases {
        let cfg = SessionConfig {
            tool_parser: tool.into(),
            reasoning_parser: reasoning.into(),
            id_seed: 7,
            ..SessionConfig::default()
        };
        let ids = encode(&tok, &text);
        let whole = run_in_steps(
            &mut Session::new(Arc::clone(&model), &cfg, &[]).expect("session"),
            &ids,
            ids.len(),
        );
        assert_eq!(whole, expect, "{tool}{reasoning}");
        for per_step in [1, 7] {
            let mut s = Session::new(Arc::clone(&model), &cfg, &[]).expect("session");
            assert_eq!(
                run_in_steps(&mut s, &ids, per_step),
                whole,
                "{tool}{reasoning}, {per_step} per step"
            );
        }
    }
}

/// Text a paced stage has not read yet does not fail a request on the held-back limit that the
/// same text fed whole passes: a 1,100-byte wait (past the paced size) resolved by a call whose
/// arguments then stream, under a limit of 1,150 bytes.
#[test]
fn the_held_back_limit_counts_what_unpaced_reading_would_hold() {
    let Some((model, tok)) = parse_model("qwen3") else {
        return;
    };
    let text = format!(
        "<tool_call>{}{{\"name\": \"f\", \"arguments\": {{\"a\": \"{}\"}}}}</tool_call>",
        " ".repeat(1100),
        "x".repeat(200)
    );
    let cfg = SessionConfig {
        tool_parser: "hermes".into(),
        ..SessionConfig::default()
    };
    for (per_step, calls) in calls_under_a_held_limit(&model, &tok, &text, cfg) {
        assert_eq!(
            calls,
            [format!("f{{\"a\": \"{}\"}}", "x".repeat(200))],
            "{per_step} per step"
        );
    }
}

/// The calls of `text` under a held-back limit of 1,150 bytes, fed whole and one token per step
/// (keyed by the ids per step).
fn calls_under_a_held_limit(
    model: &Arc<ParseModel>,
    tok: &Tokenizer,
    text: &str,
    cfg: SessionConfig,
) -> Vec<(usize, Vec<String>)> {
    let cfg = SessionConfig {
        max_held_bytes: 1150,
        id_seed: 7,
        ..cfg
    };
    let ids = encode(tok, text);
    [ids.len(), 1]
        .into_iter()
        .map(|per_step| {
            let mut s = Session::new(Arc::clone(model), &cfg, &[]).expect("session");
            (per_step, run_in_steps(&mut s, &ids, per_step).2)
        })
        .collect()
}

/// As above, for a wait inside a nested reader (Muse's tool body: a parameter named with 1,100
/// bytes, then its value).
#[test]
fn the_held_back_limit_reads_nested_waits_too() {
    let Some((model, tok)) = parse_model("gpt-oss") else {
        return;
    };
    let key = "c".repeat(1100);
    let tools = format!(
        r#"[{{"type":"function","function":{{"name":"get_weather","parameters":{{"type":"object","properties":{{"{key}":{{"type":"string"}}}}}}}}}}]"#
    );
    let text = format!(
        "<|start|>assistant to=functions.get_weather<|message|><atem:function_calls>\n\
         <atem:invoke name=\"get_weather\">\n<atem:parameter name=\"{key}\">{}</atem:parameter>\n\
         </atem:invoke>\n</atem:function_calls><|eom|>",
        "x".repeat(300)
    );
    let cfg = SessionConfig {
        tool_parser: "muse".into(),
        tools_json: tools,
        ..SessionConfig::default()
    };
    for (per_step, calls) in calls_under_a_held_limit(&model, &tok, &text, cfg) {
        assert_eq!(calls.len(), 1, "{per_step} per step");
        assert!(calls[0].starts_with("get_weather{"), "{per_step} per step");
    }
}

/// The stream's held-back bound: requests that each stay far under their own limit fail, in the
/// order their steps take the stream past the bound, naming its flag; a finished or cancelled
/// request gives its share back. One step per request or all in one step: the same answers.
#[test]
fn the_stream_held_back_limit_fails_the_request_that_passes_it() {
    use crate::parse::{Mux, MuxLimits, OpenOptions};
    use crate::wire::pb::{self, parse_stream_request::Kind};
    use prost::Message;

    let Some((model, tok)) = parse_model("qwen3") else {
        return;
    };
    // An opener and 1,200 bytes of waiting: about 1.2 KB held each, under the 1 MiB default.
    let waiting = encode(&tok, &format!("<tool_call>{}", " ".repeat(1200)));
    let cfg = SessionConfig {
        tool_parser: "hermes".into(),
        id_seed: 7,
        ..SessionConfig::default()
    };
    let step = |items: &[&str]| {
        pb::ParseStreamRequest {
            kind: Some(Kind::Step(pb::Step {
                items: items
                    .iter()
                    .map(|id| pb::StepTokens {
                        request_id: id.to_string(),
                        token_ids: waiting.clone(),
                        finished: false,
                    })
                    .collect(),
            })),
        }
        .encode_to_vec()
    };
    for together in [false, true] {
        let mut mux = Mux::new(MuxLimits {
            max_stream_held_bytes: 3000,
            ..MuxLimits::default()
        });
        for id in ["a", "b", "c", "d"] {
            let opts = OpenOptions {
                request_id: id.into(),
                fingerprint: String::new(),
            };
            mux.open(model.clone(), &opts, &cfg, &[]).expect("opens");
        }
        let mut answers = Vec::new();
        let batches: Vec<Vec<&str>> = if together {
            vec![vec!["a", "b", "c"]]
        } else {
            vec![vec!["a"], vec!["b"], vec!["c"]]
        };
        for ids in batches {
            let mut out = Vec::new();
            mux.handle(&step(&ids), &mut out).expect("handled");
            answers.extend(
                pb::ParseStreamResponse::decode(out.as_slice())
                    .expect("decodes")
                    .deltas,
            );
        }
        let failed: Vec<_> = answers.iter().filter(|d| d.error.is_some()).collect();
        assert_eq!(failed.len(), 1, "together: {together}");
        assert_eq!(failed[0].request_id, "c", "together: {together}");
        let error = failed[0].error.as_ref().expect("error");
        assert_eq!(error.code, crate::ErrorKind::ResourceExhausted.grpc_code());
        assert!(
            error.message.contains("--parse-max-stream-held-mb"),
            "{}",
            error.message
        );
        let two = mux.held_bytes();
        assert!((2400..=3000).contains(&two), "{two} held by a and b");
        // "a" cancelled: "d" has its room.
        mux.cancel("a");
        assert!(mux.held_bytes() < two);
        let mut out = Vec::new();
        mux.handle(&step(&["d"]), &mut out).expect("handled");
        let answer = pb::ParseStreamResponse::decode(out.as_slice()).expect("decodes");
        assert!(
            answer.deltas.iter().all(|d| d.error.is_none()),
            "{answer:?}"
        );
        mux.cancel("b");
        mux.cancel("d");
        assert_eq!(mux.held_bytes(), 0);
    }
}

/// A long step stops at the part where it passes a bound, not after decoding all of it: the
/// held-back limit (an unterminated call) and the room its answer has (plain text). 16M ids of a
/// 75-byte token in one step made 1.2 GB of text before either was looked at.
#[test]
fn a_long_step_stops_at_the_part_that_passes_a_bound() {
    let Some((model, tok)) = parse_model("qwen3") else {
        return;
    };
    let cases = [
        (
            "hermes",
            "<tool_call>{\"a\": \"",
            64 << 10,
            usize::MAX,
            "--parse-max-held-kb",
        ),
        ("", "", 1 << 20, 64 << 10, "--max-message-mb"),
    ];
    for (tool, opening, max_held, max_delta, flag) in cases {
        let cfg = SessionConfig {
            tool_parser: tool.into(),
            max_held_bytes: max_held,
            ..SessionConfig::default()
        };
        let mut s = Session::new(Arc::clone(&model), &cfg, &[]).expect("session");
        let mut ids = encode(&tok, opening);
        let word = encode(&tok, " word");
        assert_eq!(word.len(), 1);
        ids.resize(4 * STEP_CHECK_IDS, word[0]);
        let mut delta = crate::parse::Delta::default();
        let err = s
            .feed_cancellable(&ids, false, &mut delta, &Cancel::default(), max_delta)
            .unwrap_err();
        assert_eq!(err.kind(), crate::error::ErrorKind::ResourceExhausted);
        assert!(err.message().contains(flag), "{}", err.message());
        assert!(s.is_finished());
        assert!(
            s.tokens_read() <= STEP_CHECK_IDS as u64,
            "{flag}: read {} ids",
            s.tokens_read()
        );
    }
}

/// The held-back limit charges each undecided token its bookkeeping (8 bytes: a packed anchor)
/// beside the text, and the refusal says how much is which. It said "holds back 1072993 bytes of
/// undecided output" for 92 KB of text: the rest was 24 bytes for each of 37,000 tokens.
#[test]
fn the_held_back_refusal_tells_text_from_bookkeeping() {
    let Some((model, tok)) = parse_model("qwen3") else {
        return;
    };
    // Skipped special tokens (<|endoftext|>) make no text: 8 bytes each, 1,000 fit in 8,000.
    let cfg = SessionConfig {
        reasoning_parser: "qwen3".into(),
        max_held_bytes: 8000,
        ..SessionConfig::default()
    };
    let mut s = Session::new(Arc::clone(&model), &cfg, &[]).expect("session");
    s.feed(&[151643; 1000], false).expect("1,000 tokens fit");
    let err = s.feed(&[151643], false).unwrap_err();
    assert_eq!(
        err.message(),
        "the request holds back 0 bytes of undecided text (each copy a parser keeps counted) and 8008 \
         bytes of bookkeeping for its 1001 undecided tokens (8008 bytes in all), more than the limit \
         of 8000 (--parse-max-held-kb; an unterminated tool call or value, or tokens with no text \
         waiting for the text before them?)"
    );
    // An unterminated call name: text and bookkeeping add up to what is held.
    let cfg = SessionConfig {
        tool_parser: "hermes".into(),
        max_held_bytes: 20_000,
        ..SessionConfig::default()
    };
    let mut s = Session::new(Arc::clone(&model), &cfg, &[]).expect("session");
    let ids = encode(
        &tok,
        &format!("<tool_call>\n{{\"name\": \"{}", "abcd efgh ".repeat(2000)),
    );
    let err = ids
        .iter()
        .find_map(|id| s.feed(&[*id], false).err())
        .expect("fails");
    let numbers: Vec<usize> = err
        .message()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let [text, bookkeeping, tokens, all, limit] = numbers[..] else {
        panic!("{}", err.message())
    };
    assert_eq!(
        (text + bookkeeping, limit),
        (all, 20_000),
        "{}",
        err.message()
    );
    assert!(all > limit && text > 0, "{}", err.message());
    assert!(
        (8 * tokens..8 * tokens + 100).contains(&bookkeeping),
        "{}",
        err.message()
    );
}
