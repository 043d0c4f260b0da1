//! The KV prefix index: engine KV events in, "which worker holds the longest prefix of this
//! request" out. The same semantics as `router_adapter/index.py` (the differential reference in
//! tests): content and engine key modes, media, LoRA, salt and multimodal keys, parents,
//! removals, clears, the `max_blocks` bound, worker drops, and the same statistics; plus its own
//! MessagePack decoding of the engines' payloads ([`decode`]) so a batch goes from bytes to index
//! with no per-event object on the Python side.
//!
//! # Data layout, and why
//!
//! The budget is 48 bytes per (worker, block) entry, everything included (measured as RSS), at
//! millions of entries, with scoring of a 2048-block request in well under a millisecond. In a
//! large index nearly every key is held by one worker (what workers share is a short common
//! prefix), so the layout is tuned for that case:
//!
//! - **Workers are small integers** (ids reused after a drop, like the Python index's bits), so
//!   a set of workers is a bitset and a single holder fits in a few bits.
//! - **Per worker, an inline table engine hash -> entry** ([`worker`]): 20-byte slots holding
//!   the engine hash, the index key, a 24-bit recency stamp and an 8-bit media mask. Parent
//!   lookups and removals use the engine hash, as in Dynamo, SMG and llm-d. The stamp keeps the
//!   Python index's order (oldest first, a re-store moves a block to the end) without 8 bytes of
//!   list links per entry; a bitmap of each worker's live stamps ([`stamps`], a few bits per
//!   entry) names the oldest, and eviction removes them in one pass.
//! - **One table key -> holders** ([`keys`]): 12-byte slots, the key and a 32-bit holder code:
//!   one worker and its media mask inline, or a reference to per-medium worker bitsets for the
//!   shared keys ([`holders`]). Scoring needs one lookup per request block, and the walk
//!   intersects bitsets ([`score`]).
//! - **Tables with a controlled load** ([`table`]): extendible hashing over Robin Hood segments
//!   of any capacity, kept between 75% and 88% full once the index holds 2^18 entries, where
//!   tables that double would swing between 44% and 88%. Payload: 20 + 12 bytes per entry with
//!   distinct keys, so about 40 bytes with the load. Below 2^18 entries the tables do double
//!   (under 20 MB in all): growing 1.17x at a time copies every slot 6-7 times, and an index
//!   filling from empty spent a third of its time on it. Slots store their key's *mixed* hash
//!   (a bijection, keyed by a secret of the process so that engines cannot choose where their
//!   hashes land), so a probe compares numbers without hashing what it passes. A removal
//!   leaves a tombstone (no shifting), and a restore sizes the tables for the snapshot's
//!   entries before filling them.
//! - **Memory traffic**: stores and evictions request each table slot a few blocks before they
//!   use it (prefetch hints; the worker-table slots across the events of a batch), and scores
//!   request a chunk of keys' slots before walking them, so the processor overlaps the cache
//!   misses while it works on lines already fetched. Growth frees whole tables; the C ABI asks the
//!   allocator to return them to the OS after every 8 MiB freed ([`take_released_bytes`]).
//!
//! Limits (documented divergences from the Python index, far beyond real deployments): at most
//! 8 distinct media per index (a store naming a 9th is counted as skipped), 2^23 workers per
//! index, and 2^23 blocks per worker (past that its oldest 1% are evicted). A store whose
//! hashed token ids do not fit in 32 bits is counted as skipped (the Python index raises).
//!
//! A [`snapshot`] serializes the entries (the holder table follows from them) into about 20
//! bytes per entry, for replicas that catch up from a snapshot plus the event stream. A restore
//! takes at most 65,536 workers, and the shared keys' bitsets at most 64 bytes per block of the
//! bound plus 64 MiB (a snapshot is anyone's to write who can write the bucket).
//!
//! [`SharedIndex`] is the handle other threads share: a read-write lock (scoring reads, events
//! write), with request hashing and payload decoding done outside it.

mod content;
mod core;
pub mod decode;
mod holders;
mod keys;
mod msgpack;
mod rate;
mod score;
mod snapshot;
mod stamps;
mod table;
mod worker;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use serde::Deserialize;

pub use self::core::Index;
pub use content::{prefix_keys, MmKey};
pub use decode::{decode_batch, decode_columns, Batch, Columns, Encoding, Event};

pub use score::{RequestFacts, ScoreTable, WorkerScore};
pub use table::take_released_bytes;

use crate::error::{Error, Result};
use crate::hash::{HashSpec, MAX_LOOKAHEAD};

/// Default bound on (worker, block) entries (the Python index's default).
pub(crate) const DEFAULT_MAX_BLOCKS: u64 = 4_000_000;

/// How an index keys blocks and how large it may grow.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Tokens per block; None = learned from the first store event.
    pub block_size: Option<u32>,
    /// Engine mode: keys are the engine's own hashes and requests are hashed with this spec.
    pub engine_spec: Option<HashSpec>,
    /// The spec as JSON (what a snapshot records).
    pub engine_spec_json: Option<String>,
    /// Past this many entries 1% of it is evicted: the oldest blocks of the largest worker, at
    /// most a quarter of that worker per pass (`core::EVICTION_PASS_SHARE`).
    pub max_blocks: u64,
    /// The KV-cache group indexed (events of other groups are skipped).
    pub group_idx: i64,
    /// Content mode: tokens after each block that its key covers (vLLM's lookahead hashing with
    /// an EAGLE/EAGLE3/MTP drafter); None = learned from the first indexed store that tells.
    pub lookahead: Option<u32>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            block_size: None,
            engine_spec: None,
            engine_spec_json: None,
            max_blocks: DEFAULT_MAX_BLOCKS,
            group_idx: 0,
            lookahead: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OptionsJson {
    #[serde(default)]
    block_size: Option<u64>,
    #[serde(default)]
    engine_spec: Option<serde_json::Value>,
    #[serde(default)]
    max_blocks: Option<u64>,
    #[serde(default)]
    group_idx: i64,
    #[serde(default)]
    lookahead: Option<u64>,
}

impl Options {
    /// Options from JSON: `{"block_size", "engine_spec" (a `HashSpec` object), "max_blocks",
    /// "group_idx", "lookahead" (content mode only)}`, every field optional.
    pub fn from_json(text: &str) -> Result<Options> {
        let raw: OptionsJson = if text.trim().is_empty() {
            serde_json::from_str("{}")
        } else {
            serde_json::from_str(text)
        }
        .map_err(|e| Error::invalid_argument(format!("options: {e}")))?;
        let mut options = Options {
            max_blocks: raw.max_blocks.unwrap_or(DEFAULT_MAX_BLOCKS),
            group_idx: raw.group_idx,
            ..Options::default()
        };
        if let Some(bs) = raw.block_size {
            if bs == 0 || bs > u32::MAX as u64 {
                return Err(Error::invalid_argument("block_size: must be in 1..2^32"));
            }
            options.block_size = Some(bs as u32);
        }
        if let Some(l) = raw.lookahead {
            if l > MAX_LOOKAHEAD as u64 {
                return Err(Error::invalid_argument(format!(
                    "lookahead: must be in 0..={MAX_LOOKAHEAD}"
                )));
            }
            if raw.engine_spec.is_some() {
                return Err(Error::invalid_argument(
                    "lookahead: content mode only (engine mode hashes with engine_spec.lookahead)",
                ));
            }
            options.lookahead = Some(l as u32);
        }
        if let Some(value) = raw.engine_spec {
            let spec = HashSpec::deserialize(&value)
                .map_err(|e| Error::invalid_argument(format!("engine_spec: {e}")))?;
            spec.validate()?;
            if options.block_size.is_some_and(|bs| bs != spec.block_size) {
                return Err(Error::invalid_argument(
                    "block_size: differs from engine_spec.block_size",
                ));
            }
            options.block_size = Some(spec.block_size);
            options.engine_spec_json = Some(value.to_string());
            options.engine_spec = Some(spec);
        }
        Ok(options)
    }
}

/// Counters an operator watches (the fields of the Python `IndexStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Events applied.
    pub events: u64,
    /// Blocks stored (re-stores included).
    pub blocks_stored: u64,
    /// Blocks removed by removal events.
    pub blocks_removed: u64,
    /// Stored blocks whose parent is unknown, of stores whose first block is not held either
    /// (not indexed).
    pub orphan_blocks: u64,
    /// Removals of blocks not held.
    pub unknown_removals: u64,
    /// Events not indexed (block size, group, locality, and the limits in the module docs).
    pub skipped_events: u64,
    /// Blocks evicted by the bound.
    pub evicted_blocks: u64,
    /// Workers dropped.
    pub worker_resets: u64,
}

impl Stats {
    fn as_array(&self) -> [u64; 8] {
        [
            self.events,
            self.blocks_stored,
            self.blocks_removed,
            self.orphan_blocks,
            self.unknown_removals,
            self.skipped_events,
            self.evicted_blocks,
            self.worker_resets,
        ]
    }

    fn from_array(a: [u64; 8]) -> Stats {
        Stats {
            events: a[0],
            blocks_stored: a[1],
            blocks_removed: a[2],
            orphan_blocks: a[3],
            unknown_removals: a[4],
            skipped_events: a[5],
            evicted_blocks: a[6],
            worker_resets: a[7],
        }
    }
}

/// A point-in-time summary of an index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Status {
    /// The counters.
    pub stats: Stats,
    /// (worker, block) entries held.
    pub blocks: u64,
    /// Workers known.
    pub workers: u64,
    /// Distinct keys held.
    pub keys: u64,
    /// Tokens per block (0 while unknown).
    pub block_size: u32,
    /// Content mode: tokens after each block that its key covers, configured or learned (None
    /// until a store tells; always None in engine mode, whose spec carries its own).
    pub lookahead: Option<u32>,
}

impl Status {
    fn of(index: &Index) -> Status {
        Status {
            stats: index.stats,
            blocks: index.blocks,
            workers: index.by_name.len() as u64,
            keys: index.keys.len() as u64,
            block_size: index.block_size.unwrap_or(0),
            lookahead: index.lookahead,
        }
    }
}

/// An index shared between threads (see the module docs).
pub struct SharedIndex {
    state: RwLock<Index>,
    started: Instant,
    /// The block size, readable without the lock (0 = not known yet).
    block_size: AtomicU32,
    /// The lookahead, readable without the lock (`u32::MAX` = not known yet).
    lookahead: AtomicU32,
    engine_spec: Option<HashSpec>,
    /// The status after the last update: status reads (metrics, KvStatus on an event loop)
    /// never wait for a writer.
    published: Mutex<Status>,
}

impl SharedIndex {
    /// An empty index.
    pub fn new(options: Options) -> SharedIndex {
        let index = Index::new(options);
        SharedIndex {
            block_size: AtomicU32::new(index.block_size.unwrap_or(0)),
            lookahead: AtomicU32::new(index.lookahead.unwrap_or(u32::MAX)),
            engine_spec: index.options.engine_spec.clone(),
            published: Mutex::new(Status::of(&index)),
            state: RwLock::new(index),
            started: Instant::now(),
        }
    }

    fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    // A panic while applying (a bug) poisons the lock; the index is a routing hint, so it keeps
    // serving what it has rather than failing every later call.
    fn read(&self) -> RwLockReadGuard<'_, Index> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Index> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes the state's status (called with the write lock held).
    fn publish(&self, state: &Index) {
        let status = Status::of(state);
        self.block_size.store(status.block_size, Ordering::Relaxed);
        self.lookahead
            .store(status.lookahead.unwrap_or(u32::MAX), Ordering::Relaxed);
        *self.published.lock().unwrap_or_else(|e| e.into_inner()) = status;
    }

    /// Decodes a payload (outside the lock) and applies it; a malformed payload changes nothing.
    pub fn apply(&self, worker: &str, payload: &[u8], encoding: Encoding) -> Result<()> {
        let batch = decode_batch(payload, encoding).map_err(|e| e.context("payload"))?;
        self.apply_decoded(worker, &batch)
    }

    /// [`SharedIndex::apply`] of each (worker, payload) in order, the lock taken per payload as
    /// by separate calls. Stops at the first payload that fails: `Err((applied, error))`, where
    /// `applied` payloads went in before it and it changed nothing; `Ok(count)` when all did.
    pub fn apply_many<'p>(
        &self,
        items: impl IntoIterator<Item = (&'p str, &'p [u8])>,
        encoding: Encoding,
    ) -> std::result::Result<usize, (usize, Error)> {
        let mut applied = 0;
        for (worker, payload) in items {
            self.apply(worker, payload, encoding)
                .map_err(|e| (applied, e))?;
            applied += 1;
        }
        Ok(applied)
    }

    /// [`SharedIndex::apply`] for a header and its side arrays ([`decode_columns`]).
    pub fn apply_columns(&self, worker: &str, header: &[u8], columns: Columns<'_>) -> Result<()> {
        let batch = decode_columns(header, columns).map_err(|e| e.context("payload"))?;
        self.apply_decoded(worker, &batch)
    }

    fn apply_decoded(&self, worker: &str, batch: &Batch<'_>) -> Result<()> {
        let now = self.now();
        let mut state = self.write();
        let applied = state.apply(worker, batch, now);
        self.publish(&state);
        applied
    }

    /// Forgets a worker; false when unknown.
    pub fn drop_worker(&self, worker: &str) -> bool {
        let mut state = self.write();
        let dropped = state.drop_worker(worker);
        self.publish(&state);
        dropped
    }

    /// The keys of a request's full blocks (hashed without taking the lock).
    pub fn request_keys(&self, tokens: &[u32], facts: &RequestFacts) -> Result<Vec<u64>> {
        let block_size = Some(self.block_size.load(Ordering::Relaxed)).filter(|&b| b > 0);
        let lookahead = Some(self.lookahead.load(Ordering::Relaxed)).filter(|&l| l != u32::MAX);
        score::request_keys(
            self.engine_spec.as_ref(),
            block_size,
            lookahead,
            tokens,
            facts,
        )
    }

    /// Each worker's cached prefix of a request, best first.
    pub fn score(&self, tokens: &[u32], facts: &RequestFacts) -> Result<ScoreTable> {
        let keys = self.request_keys(tokens, facts)?;
        Ok(self.read().score_keys(keys))
    }

    /// "engine" when the index holds the engine's hashes, else "content" (the keys' kind).
    pub fn mode(&self) -> &'static str {
        if self.engine_spec.is_some() {
            "engine"
        } else {
            "content"
        }
    }

    /// Scores precomputed keys.
    pub fn score_keys(&self, keys: Vec<u64>) -> ScoreTable {
        self.read().score_keys(keys)
    }

    /// Counters and sizes as of the last update (does not wait for a writer).
    pub fn status(&self) -> Status {
        *self.published.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes the index's tables hold (takes the read lock; O(workers)).
    pub fn allocated_bytes(&self) -> u64 {
        self.read().allocated_bytes() as u64
    }

    /// Worker names, sorted.
    pub fn workers(&self) -> Vec<String> {
        let mut names: Vec<String> = self.read().by_name.keys().cloned().collect();
        names.sort_unstable();
        names
    }

    /// Blocks one worker holds (0 when unknown).
    pub fn worker_blocks(&self, worker: &str) -> u64 {
        let state = self.read();
        match state.by_name.get(worker) {
            Some(&id) => state.worker(id).len() as u64,
            None => 0,
        }
    }

    /// Events applied per second over the last `window_s` seconds (at most 4096 events).
    pub fn events_per_second(&self, window_s: f64) -> f64 {
        let now = self.now();
        self.read().rate.per_second(now, window_s)
    }

    /// The state as bytes ([`snapshot`]).
    pub fn snapshot(&self) -> Vec<u8> {
        self.read().snapshot()
    }

    /// Replaces the state with a snapshot's.
    pub fn restore(&self, bytes: &[u8]) -> Result<()> {
        let mut state = self.write();
        let restored = state.restore(bytes);
        self.publish(&state);
        restored
    }
}
