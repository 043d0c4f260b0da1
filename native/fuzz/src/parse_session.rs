//! Target `parse_session`: one request through [`sidecar_native::parse::Session`] with any tool
//! and reasoning parser, any output, fed at once and in a second chunking.
//!
//! Layout: `tool reasoning flags chunk_seed model` (one byte each), then NUL-separated fields
//! `output \0 prompt \0 stop \0 tools_json`.
//! - `tool` / `reasoning` pick a parser (0 = none) from the implemented rows of the registry
//!   (canonical names, table order).
//! - `flags`: bit 0 keeps special tokens, bit 1 includes the stop string, bits 2-3 set
//!   `enable_thinking` false / true, bit 4 adds an empty final step, bits 5-6 say how `output`
//!   becomes ids (0, 3: the tokenizer's encoding, markers become their tokens; 1: one token per
//!   byte, splitting every character and marker; 2: raw little-endian u32 ids, out-of-range ones
//!   included), bit 7 runs the prompt through the same conversion instead of encoding it.
//! - `chunk_seed` picks the second run's chunking (one token per step, or random sizes).
//! - `model` picks a folder of [`crate::models::PARSE_MODELS`].
//!
//! Checks: every error is a clean one; each run keeps the stream invariants
//! ([`crate::stream_check`]); both runs give the same content, reasoning, calls and finish.

use sidecar_native::parse::registry::{implemented, Kind};
use sidecar_native::parse::SessionConfig;

use crate::input::{chunking, fields, pick, text, Input, Rng};
use crate::models::{self, Model, PARSE_MODELS};
use crate::stream_check;

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let (tool, reasoning) = (input.byte(), input.byte());
    let (flags, chunk_seed, model_byte) = (input.byte(), input.byte(), input.byte());
    let Some(model) = models::model(PARSE_MODELS[model_byte as usize % PARSE_MODELS.len()]) else {
        return;
    };
    let parts = fields(input.rest(), 4);
    let mode = (flags >> 5) & 3;
    let Some(ids) = to_ids(&model, parts[0], mode) else {
        return;
    };
    let prompt_mode = if flags & 0x80 != 0 { mode } else { 0 };
    let Some(prompt) = to_ids(&model, parts[1], prompt_mode) else {
        return;
    };
    let kwargs = match (flags >> 2) & 3 {
        1 => r#"{"enable_thinking": false}"#,
        2 => r#"{"enable_thinking": true}"#,
        _ => "",
    };
    let cfg = SessionConfig {
        tool_parser: pick(&implemented(Kind::Tool), tool).into(),
        reasoning_parser: pick(&implemented(Kind::Reasoning), reasoning).into(),
        tools_json: text(parts[3]),
        chat_template_kwargs_json: kwargs.into(),
        skip_special_tokens: flags & 1 == 0,
        stop: if parts[2].is_empty() {
            vec![]
        } else {
            vec![text(parts[2])]
        },
        include_stop_str_in_output: flags & 2 != 0,
        trace: true,
        id_seed: 7,
        ..SessionConfig::default()
    };
    let empty_end = flags & 0x10 != 0;
    if std::env::var_os("FUZZ_DEBUG").is_some() {
        let shown: Vec<String> = ids
            .iter()
            .map(|&id| model.tok.decode(&[id], false).unwrap_or_default())
            .collect();
        eprintln!("{cfg:?}\nprompt {prompt:?}\noutput tokens {shown:?}");
    }
    let mut results = Vec::with_capacity(2);
    for chunk_mode in [0, 1 + chunk_seed % 2] {
        let session = match stream_check::open(&model.parse, &cfg, &prompt) {
            Ok(s) => s,
            Err(e) => return crate::assert_clean_error(&e, "Session::new"),
        };
        let chunks = chunking(ids.len(), chunk_mode, &mut Rng::new(u64::from(chunk_seed)));
        results.push(stream_check::run(session, &ids, &chunks, empty_end));
    }
    // A step with an unknown id fails the request wherever it comes, after whatever the earlier
    // steps emitted: only the error itself must not depend on the chunking.
    // A stop string ends the request inside a step. `completion_tokens` then counts the tokens up
    // to the one completing it, whatever the chunking, except where the stop completes inside
    // text held from earlier steps (a byte-fallback run lands whole), whose tokens those steps
    // already counted: a chunked run never counts fewer than the whole output in one step (the
    // first run), which gives vLLM's count. Reasoning tokens past the stop depend on the cut.
    if results[0].matched_stop.is_some() && results[0].error.is_none() && results[1].error.is_none()
    {
        assert!(
            results[0].completion_tokens <= results[1].completion_tokens,
            "a chunked run counted fewer tokens than the whole output"
        );
    }
    for r in results.iter_mut().filter(|r| r.matched_stop.is_some()) {
        (r.completion_tokens, r.reasoning_tokens) = (0, 0);
    }
    if results[0].error.is_some() || results[1].error.is_some() {
        assert_eq!(
            results[0].error, results[1].error,
            "the error depends on the chunking"
        );
    } else {
        assert_eq!(results[0], results[1], "the result depends on the chunking");
    }
}

/// The ids `bytes` stand for in `mode` (see the module docs); `None` when the vocabulary cannot
/// spell them one token per byte.
pub fn to_ids(model: &Model, bytes: &[u8], mode: u8) -> Option<Vec<u32>> {
    match mode {
        1 => models::byte_tokens(&model.tok, &text(bytes)),
        2 => {
            let span = model.tok.vocab_size() as u64 + 8;
            Some(
                bytes
                    .chunks(4)
                    .map(|c| {
                        let mut b = [0u8; 4];
                        b[..c.len()].copy_from_slice(c);
                        (u64::from(u32::from_le_bytes(b)) % span) as u32
                    })
                    .collect(),
            )
        }
        _ => Some(models::encode(&model.tok, &text(bytes))),
    }
}
