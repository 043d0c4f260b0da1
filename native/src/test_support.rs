//! Real-model data for Rust tests, with the same rule as the Python tests
//! (`tests/conftest.py: require_shared_models`): the models live in `../shared/models` (or where
//! `SIDECAR_SHARED_MODELS` points); without them a test is skipped with a visible reason, and with
//! `CI=true` it fails instead, because CI must have the data.
//!
//! cargo has no "skipped" outcome, and whether the data exists is only known when the tests run,
//! so a test that needs it starts with
//!
//! ```ignore
//! let Some(tok) = test_support::shared_model("qwen3") else { return };
//! ```
//!
//! and the helper prints `skipped: <test name>: <reason>` straight to the process's stderr (which
//! the test harness does not capture, so the line shows in every `cargo test` run, `-q` included)
//! before the test returns; cargo counts such a test as passed, the line says it did not run.

use std::io::Write;
use std::path::PathBuf;

use crate::tokenizer::Tokenizer;

/// A small deterministic generator (xorshift64), so randomized tests draw the same cases on every
/// run.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A draw below `n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Where the shared models are expected.
fn models_dir() -> PathBuf {
    match std::env::var_os("SIDECAR_SHARED_MODELS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/models"),
    }
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The shared models folder; `None` (after printing why the calling test is skipped) when it is
/// absent. Panics when it is absent and `CI=true`.
pub(crate) fn shared_models() -> Option<PathBuf> {
    let dir = models_dir();
    if dir.join("SOURCES.md").is_file() {
        return Some(dir);
    }
    let reason = format!(
        "real models not found at {} (set SIDECAR_SHARED_MODELS); see README 'Test data'",
        dir.display()
    );
    assert!(!in_ci(), "CI=true but {reason}");
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    // Not `eprintln!`: the harness captures that and shows it only for failing tests.
    let _ = writeln!(std::io::stderr().lock(), "\nskipped: {test}: {reason}");
    None
}

/// The tokenizer of shared model `name` (a folder of the shared models), or `None` when the
/// shared models are absent (see [`shared_models`]). A model missing from a present folder is a
/// failure, not a skip.
pub(crate) fn shared_model(name: &str) -> Option<Tokenizer> {
    let dir = shared_models()?.join(name);
    Some(Tokenizer::from_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())))
}

/// `text`'s token ids (no special tokens added), as the tokenizer's Hugging Face encoder gives them.
pub(crate) fn encode(tok: &Tokenizer, text: &str) -> Vec<u32> {
    tok.hf()
        .encode(text, false)
        .expect("encode")
        .get_ids()
        .to_vec()
}
