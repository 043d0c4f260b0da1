//! A fixed workload for profiling the KV index under callgrind or perf (instruction counts are
//! repeatable where wall time is not): the shapes of bench/kv_index.py.
//!
//! `kv_profile ingest SEQUENCES [BOUND [EVENT_BLOCKS]]`: vLLM-shaped payloads (64 blocks of 16
//! random tokens each, in one BlockStored or in events of EVENT_BLOCKS blocks; 16 workers)
//! through `SharedIndex::apply`; a BOUND of 0 is none (the index starts empty).
//! `kv_profile decode SEQUENCES DISTINCT [BLOCKS [EVENT_BLOCKS]]`: decoding alone (no index), over DISTINCT
//! payloads (1 = one payload hot in cache, as a just-received one is) of BLOCKS blocks each (64),
//! in events of EVENT_BLOCKS blocks (all in one; 1 is what an engine publishes per block filled
//! while decoding).
//! `kv_profile steady SEQUENCES ENTRIES [WARMUP]`: an index of ENTRIES held at its size by the
//! engines' removals: each worker's oldest sequence removed, then a new one stored; the first
//! WARMUP of the SEQUENCES untimed. `KV_PROFILE_LAPS` (ingest, steady) prints the rate of every
//! 4,000 payloads timed.
//! `kv_profile score ENTRIES ITERATIONS`: a 2048-block request over 64 workers, each holding a
//! prefix of it of a different depth plus unrelated sequences.

use std::time::Instant;

/// `struct rusage` (Linux x86-64): two timevals, then 14 longs.
#[repr(C)]
struct RUsage {
    utime: [i64; 2],
    stime: [i64; 2],
    rest: [i64; 14],
}

extern "C" {
    fn getrusage(who: i32, usage: *mut RUsage) -> i32;
}

/// (user, system) CPU seconds of this thread.
fn thread_cpu() -> (f64, f64) {
    let mut u = RUsage {
        utime: [0; 2],
        stime: [0; 2],
        rest: [0; 14],
    };
    // SAFETY: RUSAGE_THREAD (1) fills the struct it is given.
    unsafe { getrusage(1, &mut u) };
    let s = |t: [i64; 2]| t[0] as f64 + t[1] as f64 * 1e-6;
    (s(u.utime), s(u.stime))
}

use sidecar_native::index::{Encoding, Options, RequestFacts, SharedIndex};

const BS: usize = 16;
const SEQ_BLOCKS: usize = 64;
const PROMPT_BLOCKS: usize = 2048;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn tokens(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| (self.next() % 151_000) as u32).collect()
    }
}

fn uint(out: &mut Vec<u8>, v: u64) {
    match v {
        0..=0x7f => out.push(v as u8),
        0x80..=0xff => out.extend_from_slice(&[0xcc, v as u8]),
        0x100..=0xffff => {
            out.push(0xcd);
            out.extend_from_slice(&(v as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xce);
            out.extend_from_slice(&(v as u32).to_be_bytes());
        }
        _ => {
            out.push(0xcf);
            out.extend_from_slice(&v.to_be_bytes());
        }
    }
}

fn str(out: &mut Vec<u8>, s: &str) {
    assert!(s.len() < 32);
    out.push(0xa0 | s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

fn array(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x90 | n as u8);
    } else {
        out.push(0xdc);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    }
}

/// A batch's `[ts, [` up to its `events` events (the caller writes them, then the data-parallel rank).
fn batch_start(events: usize) -> Vec<u8> {
    let mut out = Vec::new();
    array(&mut out, 3);
    out.push(0xcb);
    out.extend_from_slice(&1.7e9f64.to_be_bytes());
    array(&mut out, events);
    out
}

/// The engine hashes of sequence `n`: 64 consecutive values from `n << 20`.
fn sequence_hashes(n: usize) -> Vec<u64> {
    let first = (n << 20) as u64;
    (first..first + SEQ_BLOCKS as u64).collect()
}

/// The fill's sequences are numbered from here, the measured ones from 1.
const FILLED_FROM: usize = 1_000_000;

/// Applies `payloads` in order, timed: (wall, user, system) seconds of this thread.
/// `KV_PROFILE_LAPS` prints the rate of every 4,000 payloads of 64 blocks.
fn apply_timed(index: &SharedIndex, payloads: &[(String, Vec<u8>)]) -> (f64, f64, f64) {
    let laps = std::env::var_os("KV_PROFILE_LAPS").is_some();
    let start = Instant::now();
    let cpu = thread_cpu();
    let mut lap = Instant::now();
    for (n, (w, p)) in payloads.iter().enumerate() {
        index.apply(w, p, Encoding::Engine).unwrap();
        if laps && (n + 1) % 4000 == 0 {
            let rate = 4000.0 * SEQ_BLOCKS as f64 / lap.elapsed().as_secs_f64() / 1e6;
            eprintln!("lap {}: {rate:.2}M blocks/s", n / 4000);
            lap = Instant::now();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let (user, sys) = thread_cpu();
    (secs, user - cpu.0, sys - cpu.1)
}

/// `[ts, [{"type": "BlockStored", ...}], 0]` as msgspec encodes it: one event storing all blocks.
fn payload(hashes: &[u64], tokens: &[u32]) -> Vec<u8> {
    events_payload(hashes, tokens, hashes.len())
}

/// The same blocks as events of `per_event` blocks each (1: as an engine publishes while
/// decoding, a block per event).
fn events_payload(hashes: &[u64], tokens: &[u32], per_event: usize) -> Vec<u8> {
    let events: Vec<&[u64]> = hashes.chunks(per_event).collect();
    let mut out = batch_start(events.len());
    for (e, hashes) in events.iter().enumerate() {
        let tokens = &tokens[e * per_event * BS..(e * per_event + hashes.len()) * BS];
        out.push(0x88);
        str(&mut out, "type");
        str(&mut out, "BlockStored");
        str(&mut out, "block_hashes");
        array(&mut out, hashes.len());
        hashes.iter().for_each(|&h| uint(&mut out, h));
        str(&mut out, "parent_block_hash");
        out.push(0xc0);
        str(&mut out, "token_ids");
        array(&mut out, tokens.len());
        tokens.iter().for_each(|&t| uint(&mut out, t as u64));
        str(&mut out, "block_size");
        uint(&mut out, BS as u64);
        str(&mut out, "lora_id");
        out.push(0xc0);
        str(&mut out, "medium");
        str(&mut out, "GPU");
        str(&mut out, "lora_name");
        out.push(0xc0);
    }
    uint(&mut out, 0);
    out
}

/// Content mode, or engine mode when `KV_PROFILE_ENGINE` is set (keys are the engine hashes).
fn options(max_blocks: u64) -> Options {
    let engine_spec = std::env::var_os("KV_PROFILE_ENGINE").map(|_| {
        sidecar_native::hash::HashSpec::from_json(&format!(
            r#"{{"algorithm": "vllm_sha256_cbor", "block_size": {BS}}}"#
        ))
        .unwrap()
    });
    Options {
        block_size: Some(BS as u32),
        max_blocks,
        engine_spec,
        ..Options::default()
    }
}

fn ingest(sequences: usize, bound: Option<u64>, per_event: usize) {
    let mut rng = Rng(7);
    let index = SharedIndex::new(options(bound.unwrap_or(4_000_000)));
    if let Some(bound) = bound {
        for s in 0..2 * bound as usize / SEQ_BLOCKS {
            let p = payload(
                &sequence_hashes(s + FILLED_FROM),
                &rng.tokens(SEQ_BLOCKS * BS),
            );
            index
                .apply(&format!("w{}", s % 16), &p, Encoding::Engine)
                .unwrap();
        }
    }
    let payloads: Vec<(String, Vec<u8>)> = (0..sequences)
        .map(|s| {
            let p = events_payload(
                &sequence_hashes(s + 1),
                &rng.tokens(SEQ_BLOCKS * BS),
                per_event,
            );
            (format!("w{}", s % 16), p)
        })
        .collect();
    let (secs, user, sys) = apply_timed(&index, &payloads);
    let blocks = (sequences * SEQ_BLOCKS) as f64;
    println!(
        "ingest: {blocks} blocks in {secs:.3} s: {:.2}M blocks/s wall, {:.2}M/s CPU (user {user:.3} s, sys {sys:.3} s)",
        blocks / secs / 1e6,
        blocks / (user + sys) / 1e6
    );
}

/// `[ts, [{"type": "BlockRemoved", "block_hashes": [...], "medium": "GPU"}], 0]`.
fn removed_payload(hashes: &[u64]) -> Vec<u8> {
    let mut out = batch_start(1);
    out.push(0x83);
    str(&mut out, "type");
    str(&mut out, "BlockRemoved");
    str(&mut out, "block_hashes");
    array(&mut out, hashes.len());
    hashes.iter().for_each(|&h| uint(&mut out, h));
    str(&mut out, "medium");
    str(&mut out, "GPU");
    uint(&mut out, 0);
    out
}

/// See the module docs (the bound, twice ENTRIES, is never reached).
fn steady(sequences: usize, entries: usize, warmup: usize) {
    let mut rng = Rng(7);
    let index = SharedIndex::new(options(2 * entries as u64));
    for s in 0..entries / SEQ_BLOCKS {
        let p = payload(
            &sequence_hashes(s + FILLED_FROM),
            &rng.tokens(SEQ_BLOCKS * BS),
        );
        index
            .apply(&format!("w{}", s % 16), &p, Encoding::Engine)
            .unwrap();
    }
    let payloads: Vec<(String, Vec<u8>)> = (0..sequences)
        .flat_map(|s| {
            let w = format!("w{}", s % 16);
            let gone = removed_payload(&sequence_hashes(s + FILLED_FROM));
            let stored = payload(&sequence_hashes(s + 1), &rng.tokens(SEQ_BLOCKS * BS));
            [(w.clone(), gone), (w, stored)]
        })
        .collect();
    let (warmup, payloads) = payloads.split_at(2 * warmup);
    for (w, p) in warmup {
        index.apply(w, p, Encoding::Engine).unwrap();
    }
    let (secs, user, sys) = apply_timed(&index, payloads);
    let events = (payloads.len() * SEQ_BLOCKS) as f64;
    println!(
        "steady at {} entries: {events} block events (half removals) in {secs:.3} s: {:.2}M/s wall, {:.2}M/s CPU (user {user:.3} s, sys {sys:.3} s)",
        index.status().blocks,
        events / secs / 1e6,
        events / (user + sys) / 1e6
    );
}

fn score(entries: usize, iterations: usize) {
    let workers = 64;
    let mut rng = Rng(11);
    let prompt = rng.tokens(PROMPT_BLOCKS * BS);
    let index = SharedIndex::new(options(u64::MAX));
    let per_worker = entries / workers;
    let mut h = 1u64 << 50;
    for w in 0..workers {
        let name = format!("w{w}");
        let depth = (w + 1) * PROMPT_BLOCKS / workers;
        let hashes: Vec<u64> = (h..h + depth as u64).collect();
        h += depth as u64;
        index
            .apply(
                &name,
                &payload(&hashes, &prompt[..depth * BS]),
                Encoding::Engine,
            )
            .unwrap();
        let mut held = depth;
        while held < per_worker {
            let n = 512.min(per_worker - held);
            let hashes: Vec<u64> = (h..h + n as u64).collect();
            let p = payload(&hashes, &rng.tokens(n * BS));
            index.apply(&name, &p, Encoding::Engine).unwrap();
            h += n as u64;
            held += n;
        }
    }
    let keys = index
        .request_keys(&prompt, &RequestFacts::default())
        .unwrap();
    let mut times = Vec::with_capacity(iterations);
    let mut best = 0;
    for _ in 0..iterations {
        let start = Instant::now();
        let table = index.score_keys(keys.clone());
        times.push(start.elapsed().as_secs_f64());
        best = table.workers[0].blocks;
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let p = |q: f64| times[((q * times.len() as f64) as usize).min(times.len() - 1)] * 1e6;
    println!(
        "score_keys ({} entries, best {best}): p50 {:.1} us, p99 {:.1} us",
        index.status().blocks,
        p(0.5),
        p(0.99)
    );
    let start = Instant::now();
    for _ in 0..iterations {
        std::hint::black_box(
            index
                .request_keys(&prompt, &RequestFacts::default())
                .unwrap(),
        );
    }
    println!(
        "request_keys: {:.1} us each",
        start.elapsed().as_secs_f64() * 1e6 / iterations as f64
    );
}

fn decode(sequences: usize, distinct: usize, blocks: usize, per_event: usize) {
    let mut rng = Rng(7);
    let payloads: Vec<Vec<u8>> = (0..distinct)
        .map(|s| {
            let first = ((s + 1) << 20) as u64;
            let hashes: Vec<u64> = (first..first + blocks as u64).collect();
            events_payload(&hashes, &rng.tokens(blocks * BS), per_event)
        })
        .collect();
    let start = Instant::now();
    let mut n = 0usize;
    for s in 0..sequences {
        let b =
            sidecar_native::index::decode_batch(&payloads[s % distinct], Encoding::Engine).unwrap();
        n += b.tokens.len();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "decode: {n} tokens, {:.2} ns/token, {:.1} ns/block",
        secs * 1e9 / n as f64,
        secs * 1e9 / n as f64 * BS as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: usize| args.get(i).map_or(default, |a| a.parse().unwrap());
    match args.get(1).map(String::as_str) {
        Some("ingest") => ingest(
            arg(2, 2000),
            args.get(3).map(|a| a.parse().unwrap()).filter(|&b| b > 0),
            arg(4, SEQ_BLOCKS),
        ),
        Some("decode") => decode(
            arg(2, 20000),
            arg(3, 1),
            arg(4, SEQ_BLOCKS),
            arg(5, arg(4, SEQ_BLOCKS)),
        ),
        Some("score") => score(arg(2, 4_000_000), arg(3, 1000)),
        Some("steady") => steady(arg(2, 2000), arg(3, 2_000_000), arg(4, 0)),
        _ => eprintln!("usage: kv_profile ingest SEQUENCES [BOUND [EVENT_BLOCKS]] | decode SEQUENCES DISTINCT [BLOCKS [EVENT_BLOCKS]] | score ENTRIES ITERATIONS | steady SEQUENCES ENTRIES [WARMUP]"),
    }
}
