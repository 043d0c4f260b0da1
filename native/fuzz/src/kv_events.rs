//! Target `kv_events`: engine KV-event payloads through the native decoder and index
//! (`sidecar_native::index`).
//!
//! Layout: `flags snapshot_at`, then one or more payloads separated by [`SEP`] (`c1 7c c1`: 0xc1
//! is the one byte MessagePack never uses, so a separator can only fall inside a string or binary
//! value). Payload `i` is published by worker `w{i % workers}`.
//! - flags bits 0-1: block size of both indexes: 16, 16 (a content index that learns it from the
//!   first store), 4, 1;
//! - bit 2: `max_blocks` 24 (eviction runs) instead of the default;
//! - bit 3: the payloads are in the normalized encoding (`router_adapter.events.Batch` as msgspec
//!   writes it) instead of as engines publish them;
//! - bits 4-5: 1 + that many workers;
//! - bits 6-7: the engine index's algorithm (vLLM sha256, SGLang, Dynamo, vLLM xxhash seeded 0);
//! - `snapshot_at % (payloads + 1)`: after that many payloads, the restored index takes a
//!   snapshot of the reference.
//!
//! Checks, for a content-mode and an engine-mode index:
//! 1. decoding any bytes gives a batch or an `InvalidArgument` error with a message;
//! 2. a payload that does not decode changes nothing when applied (status and snapshot equal
//!    before and after); applying one that decodes never panics, and any error is clean;
//! 3. an index that restores the reference's snapshot midway and then receives the same payloads
//!    ends in the same state: equal status, the same entries in the same recency order per worker
//!    (the snapshots compared up to stamp values and slot order, see [`canonical`]), and equal
//!    scores of requests built from the payloads' own stores (their token ids, LoRA and salt), as
//!    `snapshot_round_trip_gives_the_same_answers` in native/src/index/tests.rs does for its
//!    operations;
//! 4. a decoded batch without multimodal keys or token ids beyond 32 bits, written back as a
//!    columns header and side arrays (`decode_columns`, the Python `apply_batch` path), decodes
//!    to the same events, and a third index fed that way ends equal to the reference (status,
//!    scores and snapshot bytes). (Multimodal
//!    keys are kept only as hashes of their identifiers, so such batches cannot be written back.)

use sidecar_native::index::{
    decode_batch, decode_columns, Batch, Columns, Encoding, Event, Options, RequestFacts,
    SharedIndex,
};
use sidecar_native::ErrorKind;

use crate::assert_clean_error;
use crate::input::Input;

/// Separates payloads in an input.
pub const SEP: &[u8] = b"\xc1|\xc1";

/// The engine index's `engine_spec` fields besides the block size (vLLM's xxhash needs the
/// engine's PYTHONHASHSEED to be reproducible).
const ALGORITHMS: [&str; 4] = [
    r#""algorithm": "vllm_sha256""#,
    r#""algorithm": "sglang_sha256""#,
    r#""algorithm": "dynamo_xxh3""#,
    r#""algorithm": "vllm_xxhash", "seed": "0""#,
];
/// Requests scored per check, and tokens per request at most.
const REQUESTS: usize = 6;
const REQUEST_TOKENS: usize = 1024;

/// Splits `body` at every [`SEP`].
pub fn split(body: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(at) = rest.windows(SEP.len()).position(|w| w == SEP) {
        out.push(&rest[..at]);
        rest = &rest[at + SEP.len()..];
    }
    out.push(rest);
    out
}

/// One mode's indexes: the reference, the one restored midway, the one fed columns.
struct Trio {
    reference: SharedIndex,
    restored: SharedIndex,
    columns: SharedIndex,
    mode: &'static str,
}

impl Trio {
    fn new(options: &Options, mode: &'static str) -> Trio {
        Trio {
            reference: SharedIndex::new(options.clone()),
            restored: SharedIndex::new(options.clone()),
            columns: SharedIndex::new(options.clone()),
            mode,
        }
    }
}

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let (flags, snapshot_at) = (input.byte(), input.byte());
    let payloads = split(input.rest());
    let block_size = [16u32, 16, 4, 1][(flags & 3) as usize];
    let max_blocks = if flags & 4 != 0 { 24 } else { 4_000_000 };
    let encoding = if flags & 8 != 0 {
        Encoding::Normalized
    } else {
        Encoding::Engine
    };
    let workers = 1 + ((flags >> 4) & 3) as usize;
    let algorithm = ALGORITHMS[(flags >> 6) as usize];
    let snapshot_at = snapshot_at as usize % (payloads.len() + 1);

    let content = Options::from_json(&if flags & 3 == 1 {
        format!(r#"{{"max_blocks": {max_blocks}}}"#)
    } else {
        format!(r#"{{"block_size": {block_size}, "max_blocks": {max_blocks}}}"#)
    })
    .expect("content options");
    let engine = Options::from_json(&format!(
        r#"{{"max_blocks": {max_blocks}, "engine_spec": {{{algorithm}, "block_size": {block_size}}}}}"#
    ))
    .expect("engine options");
    let trios = [Trio::new(&content, "content"), Trio::new(&engine, "engine")];
    let mut requests: Vec<(Vec<u32>, String, String)> = Vec::new();

    for (i, payload) in payloads.iter().enumerate() {
        if i == snapshot_at {
            restore_from_reference(&trios);
        }
        let worker = format!("w{}", i % workers);
        let decoded = decode_batch(payload, encoding);
        match &decoded {
            Ok(batch) => collect_requests(batch, &mut requests),
            Err(e) => {
                assert_eq!(
                    e.kind(),
                    ErrorKind::InvalidArgument,
                    "decode: {:?}",
                    e.message()
                );
                assert_clean_error(e, "decode");
            }
        }
        let rewritten = decoded.as_ref().ok().and_then(columns_of);
        if let (Ok(batch), Some((header, hashes, tokens))) = (&decoded, &rewritten) {
            let columns = Columns { hashes, tokens };
            let again = decode_columns(header, columns)
                .unwrap_or_else(|e| panic!("columns form refused: {:?}", e.message()));
            assert_eq!(resolved(&again), resolved(batch), "columns form: events");
            assert_eq!(again.unknown, batch.unknown, "columns form: unknown events");
        }
        for trio in &trios {
            let before = decoded
                .is_err()
                .then(|| (trio.reference.status(), trio.reference.snapshot()));
            let applied = trio.reference.apply(&worker, payload, encoding);
            if let Some((status, snapshot)) = before {
                let e = applied
                    .as_ref()
                    .expect_err("a payload that does not decode is refused");
                assert_clean_error(e, "apply");
                assert_eq!(
                    trio.reference.status(),
                    status,
                    "{}: refused payload",
                    trio.mode
                );
                assert!(
                    trio.reference.snapshot() == snapshot,
                    "{}: a refused payload changed the index",
                    trio.mode
                );
            } else if let Err(e) = &applied {
                assert_clean_error(e, "apply");
            }
            if i >= snapshot_at {
                let again = trio.restored.apply(&worker, payload, encoding);
                assert_eq!(
                    again.is_ok(),
                    applied.is_ok(),
                    "{}: restored index",
                    trio.mode
                );
            }
            match &rewritten {
                Some((header, hashes, tokens)) => {
                    let columns = Columns { hashes, tokens };
                    let fed = trio.columns.apply_columns(&worker, header, columns);
                    assert_eq!(fed.is_ok(), applied.is_ok(), "{}: columns index", trio.mode);
                }
                // Batches that cannot be written back go in as they are.
                None => {
                    let _ = trio.columns.apply(&worker, payload, encoding);
                }
            }
        }
    }
    if snapshot_at == payloads.len() {
        restore_from_reference(&trios);
    }
    for trio in &trios {
        for (other, what) in [(&trio.restored, "restored"), (&trio.columns, "columns")] {
            assert_eq!(
                other.status(),
                trio.reference.status(),
                "{}: {what} index status",
                trio.mode
            );
        }
        // The columns index went through the same calls from empty: the same bytes. The restored
        // one holds the same entries in the same recency order (its stamps restart after the
        // live ones, and its tables are sized anew).
        assert!(
            trio.columns.snapshot() == trio.reference.snapshot(),
            "{}: columns index snapshot differs",
            trio.mode
        );
        assert!(
            canonical(&trio.restored.snapshot()) == canonical(&trio.reference.snapshot()),
            "{}: restored index holds other entries",
            trio.mode
        );
        for (tokens, lora_name, cache_salt) in &requests {
            let facts = RequestFacts {
                lora_name,
                cache_salt,
                ..RequestFacts::default()
            };
            let want = trio.reference.score(tokens, &facts);
            if let Err(e) = &want {
                assert_clean_error(e, "score");
            }
            let want = want.map_err(|e| e.kind());
            for (other, what) in [(&trio.restored, "restored"), (&trio.columns, "columns")] {
                let got = other.score(tokens, &facts).map_err(|e| e.kind());
                assert_eq!(got, want, "{}: {what} index score", trio.mode);
            }
        }
    }
}

/// The restored index of each mode takes the reference's snapshot.
fn restore_from_reference(trios: &[Trio]) {
    for trio in trios {
        let snapshot = trio.reference.snapshot();
        if let Err(e) = trio.restored.restore(&snapshot) {
            panic!("{}: own snapshot refused: {:?}", trio.mode, e.message());
        }
        assert!(
            canonical(&trio.restored.snapshot()) == canonical(&snapshot),
            "{}: restore then snapshot holds other entries",
            trio.mode
        );
    }
}

/// Requests from a batch's stores: each store's tokens (a sequence start or not), and all of
/// them in order, with the store's LoRA and salt.
fn collect_requests(batch: &Batch<'_>, requests: &mut Vec<(Vec<u32>, String, String)>) {
    let mut all = Vec::new();
    for event in &batch.events {
        let Event::Stored(s) = event else { continue };
        let tokens = &batch.tokens[s.tokens.0..s.tokens.1];
        if all.len() < REQUEST_TOKENS {
            all.extend_from_slice(&tokens[..tokens.len().min(REQUEST_TOKENS - all.len())]);
        }
        if requests.len() + 1 < REQUESTS {
            requests.push((
                tokens[..tokens.len().min(REQUEST_TOKENS)].to_vec(),
                s.lora_name.to_owned(),
                s.salt.to_owned(),
            ));
        }
    }
    if !all.is_empty() && requests.len() < REQUESTS {
        requests.push((all, String::new(), String::new()));
    }
}

/// A MessagePack writer for the columns header.
struct Writer(Vec<u8>);

impl Writer {
    fn map(&mut self, n: usize) {
        self.0.push(0xdf);
        self.0.extend_from_slice(&(n as u32).to_be_bytes());
    }
    fn array(&mut self, n: usize) {
        self.0.push(0xdd);
        self.0.extend_from_slice(&(n as u32).to_be_bytes());
    }
    fn str(&mut self, s: &str) {
        self.0.push(0xdb);
        self.0.extend_from_slice(&(s.len() as u32).to_be_bytes());
        self.0.extend_from_slice(s.as_bytes());
    }
    fn nil(&mut self) {
        self.0.push(0xc0);
    }
    fn bool(&mut self, b: bool) {
        self.0.push(if b { 0xc3 } else { 0xc2 });
    }
    /// An integer as published (MessagePack holds -2^63..2^64).
    fn int(&mut self, v: i128) {
        if v >= 0 {
            self.0.push(0xcf);
            self.0.extend_from_slice(&(v as u64).to_be_bytes());
        } else {
            self.0.push(0xd3);
            self.0.extend_from_slice(&(v as i64).to_be_bytes());
        }
    }
    fn opt_int(&mut self, v: Option<i128>) {
        match v {
            Some(v) => self.int(v),
            None => self.nil(),
        }
    }
    fn locality(&mut self, remote: bool) {
        if remote {
            self.str("REMOTE");
        } else {
            self.nil();
        }
    }
}

/// A decoded batch as a columns header and its side arrays; None when it holds what that form
/// cannot carry back (multimodal keys, token ids beyond 32 bits, lookahead lists).
fn columns_of(batch: &Batch<'_>) -> Option<(Vec<u8>, Vec<u64>, Vec<u32>)> {
    let mut w = Writer(Vec::new());
    w.map(2);
    w.str("unknown_events");
    w.int(batch.unknown as i128);
    w.str("events");
    w.array(batch.events.len());
    for event in &batch.events {
        match event {
            Event::Stored(s) => {
                if s.mm.1 > s.mm.0 || s.wide_token.is_some() || s.lookahead.is_some() {
                    return None;
                }
                w.map(10);
                w.str("block_hashes");
                w.int((s.hashes.1 - s.hashes.0) as i128);
                w.str("parent_block_hash");
                w.opt_int(s.parent.map(|p| p as i128));
                w.str("token_ids");
                w.int((s.tokens.1 - s.tokens.0) as i128);
                // After token_ids, which resets it.
                w.str("bigram");
                w.bool(s.bigram);
                w.str("block_size");
                w.int(s.block_size);
                w.str("medium");
                w.str(s.medium);
                w.str("lora_name");
                w.str(s.lora_name);
                w.str("cache_salt");
                w.str(s.salt);
                w.str("group_idx");
                w.opt_int(s.group_idx);
                w.str("locality");
                w.locality(s.remote);
            }
            Event::Removed(r) => {
                w.map(4);
                w.str("block_hashes");
                w.int((r.hashes.1 - r.hashes.0) as i128);
                w.str("medium");
                w.str(r.medium);
                w.str("group_idx");
                w.opt_int(r.group_idx);
                w.str("locality");
                w.locality(r.remote);
            }
            Event::Cleared => w.map(0),
        }
    }
    let (hashes, tokens) = resolved(batch).into_iter().fold(
        (Vec::new(), Vec::new()),
        |(mut hashes, mut tokens), (_, h, t)| {
            hashes.extend(h);
            tokens.extend(t);
            (hashes, tokens)
        },
    );
    Some((w.0, hashes, tokens))
}

/// A batch's events with their hashes and token ids taken out of the shared arrays (the ranges
/// zeroed): what two decodings of one batch must agree on. (A field given twice leaves its first
/// values in the arrays, named by no event.)
fn resolved<'a>(batch: &Batch<'a>) -> Vec<(Event<'a>, Vec<u64>, Vec<u32>)> {
    batch
        .events
        .iter()
        .map(|event| {
            let mut event = event.clone();
            let (hashes, tokens) = match &mut event {
                Event::Stored(s) => {
                    let hashes = batch.hashes[s.hashes.0..s.hashes.1].to_vec();
                    let tokens = batch.tokens[s.tokens.0..s.tokens.1].to_vec();
                    s.hashes = (0, 0);
                    s.tokens = (0, 0);
                    if s.mm.0 == s.mm.1 {
                        s.mm = (0, 0);
                    }
                    (hashes, tokens)
                }
                Event::Removed(r) => {
                    let hashes = batch.hashes[r.hashes.0..r.hashes.1].to_vec();
                    r.hashes = (0, 0);
                    (hashes, Vec::new())
                }
                Event::Cleared => (Vec::new(), Vec::new()),
            };
            (event, hashes, tokens)
        })
        .collect()
}

/// A snapshot's content up to what restoring may change (native/src/index/snapshot.rs, version
/// 1 or 2): the header verbatim, then each worker's name, order and entries (engine hash, key,
/// media), oldest first, workers by name. Entry order in the buffer follows the table's slots and
/// stamps are only an order, so neither is compared as such.
type Canonical = (Vec<u8>, Vec<(Vec<u8>, u64, Vec<(u64, u64, u8)>)>);

fn canonical(snapshot: &[u8]) -> Canonical {
    let version = u32::from_le_bytes(snapshot[8..12].try_into().expect("4 bytes"));
    // Version 2 adds the lookahead (u8 has_lookahead, u32 lookahead) after the block size.
    let lookahead = if version >= 2 { 1 + 4 } else { 0 };
    let mut at = 8 + 4 + 1 + 4 + lookahead + 8 + 8;
    let u8_at = |at: &mut usize| {
        *at += 1;
        snapshot[*at - 1]
    };
    let u16_at = |at: &mut usize| {
        *at += 2;
        u16::from_le_bytes(snapshot[*at - 2..*at].try_into().expect("2 bytes")) as usize
    };
    let u32_at = |at: &mut usize| {
        *at += 4;
        u32::from_le_bytes(snapshot[*at - 4..*at].try_into().expect("4 bytes"))
    };
    let u64_at = |at: &mut usize| {
        *at += 8;
        u64::from_le_bytes(snapshot[*at - 8..*at].try_into().expect("8 bytes"))
    };
    at += u32_at(&mut at) as usize; // spec
    at += 8 * 8 + 8; // stats, next_order
    for _ in 0..u8_at(&mut at) {
        at += u16_at(&mut at);
    }
    let header = snapshot[..at].to_vec();
    let mut workers = Vec::new();
    for _ in 0..u32_at(&mut at) {
        let len = u32_at(&mut at) as usize;
        let name = snapshot[at..at + len].to_vec();
        at += len;
        let order = u64_at(&mut at);
        let mut entries: Vec<(u32, (u64, u64, u8))> = (0..u32_at(&mut at))
            .map(|_| {
                let (hash, key, meta) = (u64_at(&mut at), u64_at(&mut at), u32_at(&mut at));
                (meta >> 8, (hash, key, meta as u8))
            })
            .collect();
        entries.sort_unstable_by_key(|&(stamp, _)| stamp);
        workers.push((name, order, entries.into_iter().map(|(_, e)| e).collect()));
    }
    assert_eq!(at + 8, snapshot.len(), "snapshot layout");
    workers.sort();
    (header, workers)
}
