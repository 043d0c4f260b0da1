//! Fuzz targets of the native core. Each module has one `run(data)` that decodes arbitrary bytes
//! into a call of the library's public Rust API and checks invariants beyond "no panic"; it panics
//! (so libFuzzer reports a crash) when one breaks. The same functions run under libFuzzer
//! (`fuzz_targets/*.rs`, `make fuzz`) and in the replay test (`tests/replay.rs`, `make test`).
//!
//! Input layouts are documented per module; `corpus/<target>/` holds seeds written by
//! `make_seeds.py` from the project's test data, so every layout starts from real cases.

pub mod detok;
pub mod input;
pub mod json_args;
pub mod kv_events;
pub mod models;
pub mod parse_session;
pub mod parse_wire;
pub mod render;
pub mod score_split;
pub mod stream_check;
pub mod template_source;

/// A target's entry point.
pub type Target = fn(&[u8]);

/// Every target: name and entry point.
pub const TARGETS: &[(&str, Target)] = &[
    ("parse_session", parse_session::run),
    ("parse_wire", parse_wire::run),
    ("json_args", json_args::run),
    ("detok", detok::run),
    ("render", render::run),
    ("template_source", template_source::run),
    ("kv_events", kv_events::run),
    ("score_split", score_split::run),
];

/// Loads what `target` needs (models, compiled templates) before libFuzzer starts timing inputs,
/// so that a first input is not charged with seconds of loading (and `-timeout` stays tight).
pub fn warm_up(target: &str) {
    let models: &[&str] = match target {
        "parse_session" | "detok" => models::PARSE_MODELS,
        "parse_wire" => &["qwen3"],
        "json_args" => &["qwen3", "llama3", "mistral-v3-spm"],
        _ => &[],
    };
    for name in models {
        models::model(name);
    }
    // One pass over a trivial input builds the targets' own lazy state (templates, environments).
    if let Some((_, run)) = TARGETS.iter().find(|(n, _)| *n == target) {
        run(&[]);
    }
}

/// An error is a bug when it is `Internal`: every input the caller can send must get one of the
/// documented client-facing kinds.
pub fn assert_clean_error(e: &sidecar_native::Error, what: &str) {
    assert!(
        e.kind() != sidecar_native::ErrorKind::Internal,
        "{what}: internal error {:?}",
        e.message()
    );
    assert!(!e.message().is_empty(), "{what}: empty error message");
}
