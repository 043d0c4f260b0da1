//! The short fuzz run of `make test`: every committed input of each target (`corpus/<target>/`,
//! and the reproducers of fixed findings in `regressions/<target>/`), then a bounded number of
//! seeded random mutations of them, through the same `run` functions libFuzzer drives. No
//! coverage feedback here (that is `make fuzz`); the mutations are deterministic, so a failure
//! reproduces. `FUZZ_REPLAY_MUTATIONS` sets the number per target (default 2000); a failing input
//! is written to `target/replay-failures/` for `cargo fuzz run <target> <file>`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use sidecar_native_fuzz::input::Rng;
use sidecar_native_fuzz::{models, TARGETS};

/// Byte strings the formats care about, spliced in by the mutator (libFuzzer's `-dict` role).
const DICTIONARY: &[&str] = &[
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<|im_end|>",
    "<|python_tag|>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "<function=",
    "</function>",
    "<parameter=",
    "</parameter>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|call|>",
    "{\"name\": \"f\", \"arguments\": {",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "\\u00",
    "\\ud800",
    ":",
    ",",
    "NaN",
    "1e999",
    "{{",
    "}}",
    "{%",
    "%}",
    "{% for x in range(99) %}",
    "{{ raise_exception('x') }}",
    "| tojson",
    "\0",
    "\u{FDD0}",
    "\u{1F600}",
    "\u{FFFD}",
    "\n",
];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(crate_dir().join(dir).join(target)) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for p in paths {
            let name = format!(
                "{dir}/{target}/{}",
                p.file_name().unwrap_or_default().to_string_lossy()
            );
            out.push((name, std::fs::read(&p).expect("readable input")));
        }
    }
    out
}

fn mutate(seeds: &[(String, Vec<u8>)], rng: &mut Rng) -> Vec<u8> {
    let mut data = seeds[rng.below(seeds.len())].1.clone();
    for _ in 0..1 + rng.below(4) {
        let len = data.len();
        match rng.below(7) {
            0 if len > 0 => {
                let i = rng.below(len);
                data[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                data[i] = rng.next_u64() as u8;
            }
            2 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                data.splice(at..at, bytes);
            }
            3 if len > 0 => {
                let at = rng.below(len);
                let end = (at + 1 + rng.below(16)).min(len);
                data.drain(at..end);
            }
            4 if len > 0 => {
                let at = rng.below(len);
                let end = (at + 1 + rng.below(32)).min(len);
                let piece = data[at..end].to_vec();
                let to = rng.below(len + 1);
                data.splice(to..to, piece);
            }
            5 => {
                let other = &seeds[rng.below(seeds.len())].1;
                let cut = rng.below(other.len() + 1);
                let at = rng.below(len + 1);
                data.truncate(at);
                data.extend_from_slice(&other[cut..]);
            }
            _ => {
                let word = DICTIONARY[rng.below(DICTIONARY.len())].as_bytes();
                let at = rng.below(len + 1);
                data.splice(at..at, word.iter().copied());
            }
        }
    }
    data
}

fn record_failure(target: &str, data: &[u8]) -> PathBuf {
    let dir = crate_dir().join("target/replay-failures");
    std::fs::create_dir_all(&dir).expect("failure folder");
    let path = dir.join(format!("{target}-{:016x}", fnv(data)));
    std::fs::write(&path, data).expect("failure written");
    path
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn check(target: &str, run: fn(&[u8]), name: &str, data: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| run(data))).is_err() {
        let path = record_failure(target, data);
        panic!("{target}: input {name} fails (saved as {})", path.display());
    }
}

fn replay(target: &str) {
    if models::shared_models().is_none() {
        let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
        assert!(
            !ci,
            "CI=true but ../shared/models is missing (set SIDECAR_SHARED_MODELS)"
        );
        eprintln!("{target}: skipped, ../shared/models not found (set SIDECAR_SHARED_MODELS)");
        return;
    }
    let run = TARGETS
        .iter()
        .find(|(n, _)| *n == target)
        .expect("known target")
        .1;
    let started = std::time::Instant::now();
    let seeds = inputs(target);
    assert!(
        !seeds.is_empty(),
        "{target}: no committed corpus in {}",
        Path::new("corpus").join(target).display()
    );
    check(target, run, "the empty input", &[]);
    for (name, data) in &seeds {
        check(target, run, name, data);
    }
    let count: usize = std::env::var("FUZZ_REPLAY_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let mut rng = Rng::new(fnv(target.as_bytes()));
    for i in 0..count {
        let data = mutate(&seeds, &mut rng);
        check(target, run, &format!("mutation {i}"), &data);
    }
    eprintln!(
        "{target}: {} committed inputs and {count} mutations pass ({:.1} s)",
        seeds.len(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn every_target_is_replayed() {
    let here: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        here,
        [
            "parse_session",
            "parse_wire",
            "json_args",
            "detok",
            "render",
            "template_source",
            "kv_events",
            "score_split"
        ]
    );
}

#[test]
fn parse_session() {
    replay("parse_session");
}

#[test]
fn parse_wire() {
    replay("parse_wire");
}

#[test]
fn json_args() {
    replay("json_args");
}

#[test]
fn detok() {
    replay("detok");
}

#[test]
fn render() {
    replay("render");
}

#[test]
fn template_source() {
    replay("template_source");
}

#[test]
fn kv_events() {
    replay("kv_events");
}

#[test]
fn score_split() {
    replay("score_split");
}
