//! The index state and its updates: the same semantics, step for step, as
//! `router_adapter/index.py` (`_store`, `_remove`, `_clear`, `drop_worker`, `_evict`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::content::{prefix_keys_into, MmKey};
use super::decode::{Batch, Event, Removed, Stored};
use super::holders::{MAX_MEDIA, MAX_WORKERS};
use super::keys::KeyTable;
use super::rate::EventRate;
use super::table::{mix, Growth};
use super::worker::{Entry, Worker, MAX_WORKER_BLOCKS};
use super::{Options, Stats};
use crate::error::{Error, Result};
use crate::hash::MAX_LOOKAHEAD;

/// Evicted entries collected before their holds are released (their key slots fetched
/// `PREFETCH_AHEAD` entries ahead).
const EVICTION_GROUP: usize = 64;
/// An eviction pass takes at most 1/4 (rounded up) of the largest worker's blocks, then looks
/// for the largest again. A round (1% of the bound) is larger than a whole worker in a fleet of
/// many small ones, and taking whole workers left them blind: their newest blocks gone, and the
/// stores that follow orphaned. A pass reads the worker's whole table: a pass that takes a
/// quarter reads four slots per block it takes.
const EVICTION_PASS_SHARE: usize = 4;
/// How many blocks ahead of its use a table slot is prefetched. Prefetching a whole batch's slots
/// first (64 blocks, four lines each, in two tables) asked for some 500 lines at once: the
/// processor holds about a dozen misses in flight, and the prefetches waited in line for them,
/// holding up the work behind them. Eight blocks ahead keeps the misses in flight while the
/// blocks before them are applied (`kv_profile ingest` at a 200k bound: 3.6-3.76M -> 3.95-4.0M
/// blocks/s; 4 ahead did as well there and worse at a 2M bound, 16 worse at both).
const PREFETCH_AHEAD: usize = 8;
/// How far ahead a removal requests worker slots (16 and 32 measured alike; 8 left a removal
/// waiting on most of them).
const REMOVAL_AHEAD: usize = 16;
/// Entries from which the tables grow compactly ([`Growth::Compact`]); below, they double. A
/// compact growth copies every slot 6-7 times on its way up (a segment grows 1.17x at a time):
/// an index filling from empty spent about a third of its time copying, where doubling copies
/// each slot about twice. Doubling costs memory, up to about 75 bytes per entry (0.44 load),
/// which below 2^18 entries is at most some 20 MB; at the switch the tables are laid out as
/// tightly as compact growth keeps them, so the 48-byte budget holds from here on.
#[cfg(not(test))]
pub(crate) const COMPACT_FROM: u64 = 1 << 18;
#[cfg(test)]
pub(crate) const COMPACT_FROM: u64 = 1 << 12;

/// Releases every hold of the entries (evicted, or removed in their media) of worker `id`;
/// returns how many entries there were.
fn release_all(keys: &mut KeyTable, id: u32, entries: &[Entry]) -> u64 {
    for entry in entries.iter().take(PREFETCH_AHEAD) {
        keys.prefetch(entry.hkey());
    }
    for (i, entry) in entries.iter().enumerate() {
        if let Some(ahead) = entries.get(i + PREFETCH_AHEAD) {
            keys.prefetch(ahead.hkey());
        }
        for m in 0..MAX_MEDIA {
            if entry.media() & (1 << m) != 0 {
                keys.release(entry.hkey(), id, m);
            }
        }
    }
    entries.len() as u64
}

/// Whether a store names its blocks by engine hash alone (block size 0, no tokens): vLLM's
/// offloading connector announces a block it offloaded without self-describing metadata so, and
/// the block is held in the medium named (as the Python index's `by_hash`).
fn by_hash(event: &Stored<'_>) -> bool {
    event.block_size == 0 && event.tokens.0 == event.tokens.1
}

/// One model's index (not synchronized; [`super::SharedIndex`] adds the lock).
#[derive(Clone)]
pub struct Index {
    pub(crate) options: Options,
    /// Tokens per block: configured, or learned from the first store that names one.
    pub(crate) block_size: Option<u32>,
    /// Content mode: the tokens after each block that its key covers (vLLM's lookahead hashing):
    /// configured, or learned from the first indexed store that tells (see [`Index::lookahead_fits`]).
    pub(crate) lookahead: Option<u32>,
    pub(crate) stats: Stats,
    /// Worker ids are indexes here; a dropped worker's id is reused.
    pub(crate) workers: Vec<Option<Worker>>,
    pub(crate) free_ids: Vec<u32>,
    pub(crate) by_name: HashMap<String, u32>,
    pub(crate) next_order: u64,
    /// Medium names by medium id, in order of first appearance.
    pub(crate) media: Vec<String>,
    pub(crate) keys: KeyTable,
    /// (worker, engine hash) entries, whatever their media.
    pub(crate) blocks: u64,
    pub(crate) rate: EventRate,
    /// Buffers reused by every store (content keys; mixed engine hashes and keys).
    scratch_keys: Vec<u64>,
    scratch_mixed: Vec<(u64, u64)>,
    /// Each block's tokens followed by its lookahead tokens (stores of an index with lookahead).
    scratch_window: Vec<u32>,
    /// The entries of a removal whose key holds are released next.
    scratch_entries: Vec<Entry>,
    /// `batch.hashes[..n]` of the batch being applied have had their worker-table slots
    /// requested (see `request_worker_slots`).
    requested: usize,
    /// How every table grows: doubling until the index first holds `COMPACT_FROM` entries.
    growth: Growth,
}

impl Index {
    /// An empty index.
    pub fn new(options: Options) -> Index {
        Index {
            block_size: options.block_size,
            lookahead: options.lookahead,
            options,
            stats: Stats::default(),
            workers: Vec::new(),
            free_ids: Vec::new(),
            by_name: HashMap::new(),
            next_order: 0,
            media: Vec::new(),
            keys: KeyTable::default(),
            blocks: 0,
            rate: EventRate::default(),
            scratch_keys: Vec::new(),
            scratch_mixed: Vec::new(),
            scratch_window: Vec::new(),
            scratch_entries: Vec::new(),
            requested: 0,
            growth: Growth::Doubling,
        }
    }

    /// How the tables grow (and how each worker's does, which must agree).
    #[cfg(test)]
    pub(crate) fn growth(&self) -> Growth {
        for worker in self.workers.iter().flatten() {
            assert_eq!(worker.growth(), self.growth, "worker {}", worker.name);
        }
        assert_eq!(self.keys.growth(), self.growth);
        self.growth
    }

    /// Sets how every table grows from now on.
    pub(crate) fn set_growth(&mut self, growth: Growth) {
        self.growth = growth;
        self.keys.set_growth(growth);
        for worker in self.workers.iter_mut().flatten() {
            worker.set_growth(growth);
        }
    }

    /// Applies a decoded batch published by `worker`; `now` is in seconds (any fixed origin).
    pub fn apply(&mut self, worker: &str, batch: &Batch<'_>, now: f64) -> Result<()> {
        let id = self.worker_id(worker)?;
        self.worker_mut(id).last_event = now;
        self.requested = 0;
        self.request_worker_slots(id, batch, PREFETCH_AHEAD);
        for event in &batch.events {
            let end = match event {
                Event::Stored(s) => {
                    self.store(id, s, batch);
                    s.hashes.1
                }
                Event::Removed(r) => {
                    self.remove(id, r, batch);
                    r.hashes.1
                }
                Event::Cleared => {
                    self.clear(id);
                    0
                }
            };
            self.request_worker_slots(id, batch, end + PREFETCH_AHEAD);
        }
        self.rate.record(now, batch.events.len());
        // Events of a class the decoder does not know: received, not applied.
        self.stats.events += batch.events.len() as u64 + batch.unknown;
        self.stats.skipped_events += batch.unknown;
        if self.blocks > self.options.max_blocks {
            self.evict();
        }
        Ok(())
    }

    /// Requests the worker-table slots of the batch's blocks up to position `to` in
    /// `batch.hashes`. The pipeline of `PREFETCH_AHEAD` blocks runs across the events of a
    /// batch: engines publish one event per block filled while decoding, and a pipeline per
    /// event left each such block waiting on memory (`kv_profile ingest` of one-block events at
    /// a 200k bound: 4% less user time). Key-table slots stay requested within a store: their
    /// keys are computed per event, and planning a batch's keys first to request them across
    /// events too cost as much as it saved.
    #[inline]
    fn request_worker_slots(&mut self, id: u32, batch: &Batch<'_>, to: usize) {
        let to = to.min(batch.hashes.len());
        if self.requested < to {
            let worker = self.worker(id);
            for &h in &batch.hashes[self.requested..to] {
                worker.prefetch(mix(h));
            }
            self.requested = to;
        }
    }

    /// Forgets everything `worker` holds; false when it is unknown.
    pub fn drop_worker(&mut self, worker: &str) -> bool {
        let Some(id) = self.by_name.remove(worker) else {
            return false;
        };
        self.clear(id);
        self.workers[id as usize] = None;
        self.free_ids.push(id);
        self.stats.worker_resets += 1;
        true
    }

    pub(crate) fn worker(&self, id: u32) -> &Worker {
        self.workers[id as usize].as_ref().expect("live worker id")
    }

    fn worker_mut(&mut self, id: u32) -> &mut Worker {
        self.workers[id as usize].as_mut().expect("live worker id")
    }

    /// The id of `name`, creating the worker (as the Python index's `_worker`).
    pub(crate) fn worker_id(&mut self, name: &str) -> Result<u32> {
        if let Some(&id) = self.by_name.get(name) {
            return Ok(id);
        }
        let id = match self.free_ids.pop() {
            Some(id) => id,
            None if (self.workers.len() as u32) < MAX_WORKERS => {
                self.workers.push(None);
                (self.workers.len() - 1) as u32
            }
            None => {
                return Err(Error::resource_exhausted(format!(
                    "worker: more than {MAX_WORKERS} workers in one index"
                )))
            }
        };
        let mut worker = Worker::new(name.to_owned(), self.next_order);
        worker.set_growth(self.growth);
        self.workers[id as usize] = Some(worker);
        self.next_order += 1;
        self.by_name.insert(name.to_owned(), id);
        Ok(id)
    }

    /// The id of a medium, registering it; None past `MAX_MEDIA` distinct media.
    pub(crate) fn medium_id(&mut self, name: &str) -> Option<usize> {
        if let Some(m) = self.media.iter().position(|n| n == name) {
            return Some(m);
        }
        if self.media.len() >= MAX_MEDIA {
            return None;
        }
        self.media.push(name.to_owned());
        Some(self.media.len() - 1)
    }

    /// Whether an event of this group and locality is indexed.
    fn indexed(&self, group_idx: Option<i128>, remote: bool) -> bool {
        !remote && group_idx.is_none_or(|g| g == self.options.group_idx as i128)
    }

    fn store(&mut self, id: u32, event: &Stored<'_>, batch: &Batch<'_>) {
        let indexed = self.indexed(event.group_idx, event.remote);
        // Learned only from a store that is indexed: another KV-cache group (a hybrid model's
        // other group has blocks of another size) or a remote store would fix the wrong size.
        if self.block_size.is_none()
            && indexed
            && event.block_size > 0
            && event.block_size <= u32::MAX as i128
        {
            self.block_size = Some(event.block_size as u32);
        }
        let matches_size = self.block_size.map(|b| b as i128) == Some(event.block_size);
        if !(matches_size || by_hash(event)) || !indexed {
            self.stats.skipped_events += 1;
            return;
        }
        // A store by hash alone (no tokens, no lookahead lists) neither teaches nor needs one.
        if self.options.engine_spec.is_none() && !by_hash(event) && !self.lookahead_fits(event) {
            self.stats.skipped_events += 1;
            return;
        }
        // The buffers are lent out for the call: `store_blocks` mutates the rest of the index.
        let mut keys = std::mem::take(&mut self.scratch_keys);
        let mut mixed = std::mem::take(&mut self.scratch_mixed);
        self.store_blocks(id, event, batch, &mut keys, &mut mixed);
        self.scratch_keys = keys;
        self.scratch_mixed = mixed;
    }

    /// Whether a store's lookahead is the index's (as the Python index's `_lookahead_fits`),
    /// learning it from the first that says: a store without `lookahead_token_ids` has L = 0, one
    /// with them the length of its lists, which must be one per block hash, all of one length, at
    /// most `MAX_LOOKAHEAD` (an empty list tells nothing).
    fn lookahead_fits(&mut self, event: &Stored<'_>) -> bool {
        let theirs = match event.lookahead {
            None => 0,
            Some(la) => {
                if la.lists != event.hashes.1 - event.hashes.0
                    || la.ragged
                    || la.width > MAX_LOOKAHEAD as usize
                {
                    return false;
                }
                if la.lists == 0 {
                    return true;
                }
                la.width as u32
            }
        };
        *self.lookahead.get_or_insert(theirs) == theirs
    }

    /// The blocks of a store that passed its checks, with buffers for the content keys and the
    /// mixed (engine hash, key) pairs.
    fn store_blocks(
        &mut self,
        id: u32,
        event: &Stored<'_>,
        batch: &Batch<'_>,
        computed: &mut Vec<u64>,
        mixed: &mut Vec<(u64, u64)>,
    ) {
        let hashes = &batch.hashes[event.hashes.0..event.hashes.1];
        computed.clear();
        let keys: &[u64] = if self.options.engine_spec.is_some() {
            if event.bigram {
                // SGLang with EAGLE hashes each page's token pairs: no request hashed with the
                // spec could match these (content keys of the first elements do).
                self.stats.skipped_events += 1;
                return;
            }
            hashes
        } else if self.content_keys(id, event, batch, hashes.len(), computed) {
            computed
        } else {
            return;
        };
        let hashes = &hashes[..keys.len()];
        if hashes.is_empty() {
            // Nothing to hold: its medium is not registered (8 stores of no blocks under 8 made-up
            // media used up the slots for good, and every other medium's stores were skipped).
            return;
        }
        let Some(m) = self.medium_id(event.medium) else {
            // More distinct media than the mask has bits: not indexable (documented limit).
            self.stats.skipped_events += 1;
            return;
        };
        mixed.clear();
        mixed.extend(hashes.iter().zip(keys).map(|(&h, &k)| (mix(h), mix(k))));
        for &(_, hkey) in mixed.iter().take(PREFETCH_AHEAD) {
            self.keys.prefetch(hkey);
        }
        let mut added = 0;
        for (i, &(hash, hkey)) in mixed.iter().enumerate() {
            if let Some(&(_, ahead_key)) = mixed.get(i + PREFETCH_AHEAD) {
                self.keys.prefetch(ahead_key);
            }
            self.request_worker_slots(id, batch, event.hashes.0 + i + 1 + PREFETCH_AHEAD);
            added += self.hold(id, hash, hkey, m) as u64;
        }
        self.blocks += added;
        self.stats.blocks_stored += hashes.len() as u64;
        if self.growth == Growth::Doubling && self.blocks >= COMPACT_FROM {
            self.set_growth(Growth::Compact);
        }
    }

    /// Appends the content keys of a store to `keys`; false when it is not indexed (an unknown
    /// parent and a first block the worker does not hold, counted as orphans; token ids that
    /// cannot be hashed, or a store by hash alone of a block not held, counted as a skipped
    /// event).
    fn content_keys(
        &mut self,
        id: u32,
        event: &Stored<'_>,
        batch: &Batch<'_>,
        n: usize,
        keys: &mut Vec<u64>,
    ) -> bool {
        let hashes = || &batch.hashes[event.hashes.0..event.hashes.0 + n];
        if by_hash(event) {
            // No tokens to key: only blocks the worker already holds (under their keys).
            if self.held_keys(id, hashes(), keys) == 0 {
                self.stats.skipped_events += 1;
                return false;
            }
            return true;
        }
        // Leading blocks of the store the worker already holds: they keep their keys.
        let mut held = 0;
        let (parent_key, salt) = match event.parent {
            Some(parent) => match self.worker(id).get(parent) {
                Some(entry) => (Some(entry.key()), ""),
                None => {
                    // A store in a second medium after the parent left (as the Python index): a
                    // block the worker holds keeps its key, and the blocks after it chain from it.
                    held = self.held_keys(id, hashes(), keys);
                    if held == 0 {
                        self.stats.orphan_blocks += n as u64;
                        return false;
                    }
                    (keys.last().copied(), "")
                }
            },
            None => (None, event.salt),
        };
        let bs = self.block_size.expect("checked by the caller") as usize;
        let tokens = &batch.tokens[event.tokens.0..event.tokens.1];
        if tokens.len() / bs > n {
            // More full blocks of tokens than hashes: the engine left blocks out (a hybrid model's
            // sliding-window or Mamba group), and the event does not say which (as the Python index).
            self.stats.skipped_events += 1;
            return false;
        }
        let used = tokens.len().min(n.saturating_mul(bs));
        if event.wide_token.is_some_and(|i| i < used) {
            self.stats.skipped_events += 1;
            return false;
        }
        let mm = &batch.mm[event.mm.0 as usize..event.mm.1 as usize];
        let start = used.min(held * bs);
        // The held blocks' multimodal keys go with them; the rest are renumbered from the first
        // block hashed (rare: allocated here only).
        let shifted: Vec<MmKey>;
        let mm = if held > 0 && !mm.is_empty() {
            shifted = mm
                .iter()
                .filter(|k| k.block as usize >= held)
                .map(|k| MmKey {
                    block: k.block - held as u32,
                    ..*k
                })
                .collect();
            &shifted[..]
        } else {
            mm
        };
        let lookahead = self.lookahead.unwrap_or(0) as usize;
        let Some(la) = event.lookahead.filter(|_| lookahead > 0) else {
            prefix_keys_into(
                &tokens[start..used],
                bs,
                event.lora_name,
                salt,
                parent_key,
                mm,
                keys,
            );
            return true;
        };
        // Each block followed by its own lookahead tokens, keyed as one block of B + L tokens
        // (`score::request_keys` keys a request's blocks the same way). `lookahead_fits` checked
        // one list of `lookahead` tokens per hash.
        let blocks = used / bs;
        if la.wide_token.is_some_and(|i| i / lookahead < blocks) {
            self.stats.skipped_events += 1;
            return false;
        }
        let first = held.min(blocks);
        let after = &batch.lookahead[la.start..la.start + la.lists * lookahead];
        let mut window = std::mem::take(&mut self.scratch_window);
        window.clear();
        for (block, next) in tokens[first * bs..blocks * bs]
            .chunks_exact(bs)
            .zip(after[first * lookahead..].chunks_exact(lookahead))
        {
            window.extend_from_slice(block);
            window.extend_from_slice(next);
        }
        prefix_keys_into(
            &window,
            bs + lookahead,
            event.lora_name,
            salt,
            parent_key,
            mm,
            keys,
        );
        self.scratch_window = window;
        true
    }

    /// Appends the keys of the leading `hashes` the worker holds to `keys`; returns how many.
    /// (Out of the way of the stores with a known parent, nearly all of them.)
    #[cold]
    #[inline(never)]
    fn held_keys(&self, id: u32, hashes: &[u64], keys: &mut Vec<u64>) -> usize {
        let worker = self.worker(id);
        let before = keys.len();
        for &hash in hashes {
            let Some(entry) = worker.get(hash) else {
                break;
            };
            keys.push(entry.key());
        }
        keys.len() - before
    }

    /// One block of a store (mixed engine hash and key): a new entry or a re-store (newest
    /// again, maybe in a new medium). Returns whether the entry is new.
    fn hold(&mut self, id: u32, hash: u64, hkey: u64, m: usize) -> bool {
        let bit = 1u8 << m;
        let full = self.worker(id).len() >= MAX_WORKER_BLOCKS;
        if full && !self.worker(id).contains(hash) {
            self.evict_oldest(id, MAX_WORKER_BLOCKS / 100);
        }
        let worker = self.workers[id as usize].as_mut().expect("live worker id");
        match worker.store(hash, hkey, bit) {
            Some(old) => {
                if old.media() & bit == 0 {
                    self.keys.add_hold(old.hkey(), id, m);
                }
                false
            }
            None => {
                self.keys.add_hold(hkey, id, m);
                true
            }
        }
    }

    fn remove(&mut self, id: u32, event: &Removed<'_>, batch: &Batch<'_>) {
        if !self.indexed(event.group_idx, event.remote) {
            self.stats.skipped_events += 1;
            return;
        }
        let hashes = &batch.hashes[event.hashes.0..event.hashes.1];
        let Some(m) = self.media.iter().position(|n| n == event.medium) else {
            self.stats.unknown_removals += hashes.len() as u64;
            return;
        };
        let bit = 1u8 << m;
        let keys = &mut self.keys;
        let worker = self.workers[id as usize].as_mut().expect("live worker id");
        // A removal does little with each slot once it has it, so the batch's pipeline of worker
        // slots (`request_worker_slots`) runs further ahead here; the key slots are requested a
        // group at a time before the releases that wait on them. Without either, a removal from a
        // fleet-sized index (2M entries, past the caches) cost as much as a store.
        let mut requested = self.requested;
        let mut group = std::mem::take(&mut self.scratch_entries);
        group.clear();
        let mut removed = 0;
        for (i, &engine_hash) in hashes.iter().enumerate() {
            let ahead = (event.hashes.0 + i + REMOVAL_AHEAD).min(batch.hashes.len());
            for &h in batch.hashes.get(requested..ahead).unwrap_or_default() {
                worker.prefetch(mix(h));
            }
            requested = requested.max(ahead);
            let Some(entry) = worker.remove_medium(engine_hash, bit) else {
                self.stats.unknown_removals += 1;
                continue;
            };
            if entry.media() == bit {
                self.blocks -= 1;
            }
            group.push(entry.only(bit));
            if group.len() == EVICTION_GROUP {
                removed += release_all(keys, id, &group);
                group.clear();
            }
        }
        removed += release_all(keys, id, &group);
        self.stats.blocks_removed += removed;
        self.scratch_entries = group;
        self.requested = requested;
    }

    pub(crate) fn clear(&mut self, id: u32) {
        let worker = self.workers[id as usize].as_mut().expect("live worker id");
        let entries = worker.take_all();
        for entry in entries.iter() {
            self.keys.remove_worker(entry.hkey(), id);
        }
        self.keys.purge_extras(id);
        self.blocks -= entries.len() as u64;
    }

    /// Past `max_blocks`, the oldest blocks of the largest worker go, down to 99% of the bound.
    pub(super) fn evict(&mut self) {
        let max = self.options.max_blocks as i128;
        let target = max - (max / 100).max(1);
        if (self.blocks as i128) <= target {
            return;
        }
        // Largest first, ties to the worker registered first (the Python index's `max` over its
        // dict). Only the evicted worker's size changes within a round, so a heap stays exact.
        let mut largest: BinaryHeap<(usize, Reverse<u64>, u32)> = self
            .workers
            .iter()
            .enumerate()
            .filter_map(|(id, w)| w.as_ref().map(|w| (w.len(), Reverse(w.order), id as u32)))
            .collect();
        while (self.blocks as i128) > target {
            let Some((len, order, id)) = largest.pop() else {
                return;
            };
            let count =
                (len.div_ceil(EVICTION_PASS_SHARE) as i128).min(self.blocks as i128 - target);
            if count <= 0 {
                return;
            }
            self.evict_oldest(id, count as usize);
            let left = self.workers[id as usize].as_ref().map_or(0, Worker::len);
            largest.push((left, order, id));
        }
    }

    fn evict_oldest(&mut self, id: u32, count: usize) {
        let keys = &mut self.keys;
        let worker = self.workers[id as usize].as_mut().expect("live worker id");
        // Victims go in groups, whose key slots are fetched ahead of the releases (see `Table::prefetch`).
        let mut group = Vec::with_capacity(EVICTION_GROUP);
        let mut evicted = 0u64;
        worker.remove_oldest(count, |entry| {
            group.push(entry);
            if group.len() == EVICTION_GROUP {
                evicted += release_all(keys, id, &group);
                group.clear();
            }
        });
        evicted += release_all(keys, id, &group);
        self.blocks -= evicted;
        self.stats.evicted_blocks += evicted;
    }

    /// The live workers' ids.
    pub(crate) fn worker_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.workers
            .iter()
            .enumerate()
            .filter(|(_, w)| w.is_some())
            .map(|(id, _)| id as u32)
    }

    /// Bytes the index structures hold on the heap (what RSS measures, less allocator slack).
    pub fn allocated_bytes(&self) -> usize {
        self.keys.allocated_bytes()
            + self
                .workers
                .iter()
                .flatten()
                .map(Worker::allocated_bytes)
                .sum::<usize>()
    }
}
