//! One worker's blocks: engine hash -> (index key, media, recency).
//!
//! The slots live inline in the worker's own table (20 bytes, `packed(4)`): the engine hash it
//! was published under, the index key, and a 32-bit word with a 24-bit recency stamp and the
//! 8-bit media mask. The stamp reproduces the Python index's dict order (insertion order, a
//! re-store moves a block to the end): the oldest blocks are the smallest stamps. Stamps are
//! renumbered 0..n when the counter reaches 2^24, which keeps their order; a worker is held
//! below 2^23 blocks (see `MAX_WORKER_BLOCKS`) so that renumbering always frees most stamps.
//!
//! Finding the oldest blocks scans the worker's table (a linear pass over 20-byte slots), which
//! costs `worker blocks / evicted blocks` slot reads per evicted block: about 100 / workers,
//! since each eviction round removes 1% of the bound from the largest worker.

use super::table::{mix, RhTable, Slot};

const STAMP_LIMIT: u32 = 1 << 24;
/// Blocks one worker may hold; beyond it, its oldest 1% are evicted (see the module docs).
pub(crate) const MAX_WORKER_BLOCKS: usize = 1 << 23;

/// One (worker, engine hash) entry.
#[derive(Clone, Copy)]
#[repr(C, packed(4))]
pub(crate) struct Entry {
    engine_hash: u64,
    key: u64,
    /// `stamp << 8 | media mask`; 0 = empty slot (a live entry has at least one medium).
    meta: u32,
}

impl Slot for Entry {
    const EMPTY: Self = Entry {
        engine_hash: 0,
        key: 0,
        meta: 0,
    };
    #[inline]
    fn is_empty(&self) -> bool {
        self.meta == 0
    }
    #[inline]
    fn key(&self) -> u64 {
        self.engine_hash
    }
}

impl Entry {
    pub fn new(engine_hash: u64, key: u64, stamp: u32, media: u8) -> Self {
        Entry {
            engine_hash,
            key,
            meta: (stamp << 8) | media as u32,
        }
    }
    #[inline]
    pub fn engine_hash(&self) -> u64 {
        self.engine_hash
    }
    #[inline]
    pub fn key(&self) -> u64 {
        self.key
    }
    #[inline]
    pub fn media(&self) -> u8 {
        self.meta as u8
    }
    #[inline]
    pub fn stamp(&self) -> u32 {
        self.meta >> 8
    }
    fn with(self, stamp: u32, media: u8) -> Self {
        Entry::new(self.engine_hash, self.key, stamp, media)
    }
}

/// A worker (see the module docs).
#[derive(Clone)]
pub(crate) struct Worker {
    pub name: String,
    /// Creation order among the index's workers (ties of the eviction choice go to the oldest).
    pub order: u64,
    /// Seconds since the index started at the last batch from this worker.
    pub last_event: f64,
    entries: RhTable<Entry>,
    next_stamp: u32,
}

impl Worker {
    pub fn new(name: String, order: u64) -> Self {
        Worker {
            name,
            order,
            last_event: 0.0,
            entries: RhTable::default(),
            next_stamp: 0,
        }
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry of an engine hash.
    #[inline]
    pub fn get(&self, engine_hash: u64) -> Option<Entry> {
        self.entries
            .find(engine_hash, mix(engine_hash))
            .map(|pos| self.entries.get(pos))
    }

    /// Every entry, in table order.
    pub fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        self.entries.iter()
    }

    /// Stores a block not held yet, as the newest.
    pub fn insert(&mut self, engine_hash: u64, key: u64, media: u8) {
        let stamp = self.stamp();
        self.entries
            .insert_new(Entry::new(engine_hash, key, stamp, media), mix(engine_hash));
    }

    /// Makes a held block the newest and adds `media` to its mask; returns the entry as it was.
    pub fn refresh(&mut self, engine_hash: u64, media: u8) -> Option<Entry> {
        if self.next_stamp >= STAMP_LIMIT {
            // Renumbering rebuilds the table: do it before taking a slot position.
            self.renumber();
        }
        let pos = self.entries.find(engine_hash, mix(engine_hash))?;
        let stamp = self.stamp();
        let old = self.entries.get(pos);
        self.entries.set(pos, old.with(stamp, old.media() | media));
        Some(old)
    }

    /// Sets the media of a held block without changing its recency (0 removes the block).
    pub fn set_media(&mut self, engine_hash: u64, media: u8) {
        let hash = mix(engine_hash);
        if let Some(pos) = self.entries.find(engine_hash, hash) {
            if media == 0 {
                self.entries.remove_at(pos);
                self.entries.maybe_shrink();
            } else {
                let old = self.entries.get(pos);
                self.entries.set(pos, old.with(old.stamp(), media));
            }
        }
    }

    /// Removes and returns every entry.
    pub fn take_all(&mut self) -> RhTable<Entry> {
        self.next_stamp = 0;
        std::mem::take(&mut self.entries)
    }

    /// Removes and returns the `count` oldest entries.
    pub fn take_oldest(&mut self, count: usize) -> Vec<Entry> {
        if count >= self.entries.len() {
            return self.take_all().iter().collect();
        }
        if count == 0 {
            return Vec::new();
        }
        let mut stamps: Vec<u32> = self.entries.iter().map(|e| e.stamp()).collect();
        let (_, &mut threshold, _) = stamps.select_nth_unstable(count - 1);
        let victims: Vec<Entry> = self
            .entries
            .iter()
            .filter(|e| e.stamp() <= threshold)
            .collect();
        self.entries.retain(|e| e.stamp() > threshold);
        victims
    }

    /// Rebuilds from entries (snapshot load), keeping their stamps.
    pub fn restore(&mut self, entries: Vec<Entry>) {
        let mut table = RhTable::with_capacity(entries.len());
        let mut next = 0;
        for e in entries {
            next = next.max(e.stamp() + 1);
            table.insert_new(e, mix(e.engine_hash));
        }
        self.entries = table;
        self.next_stamp = next;
    }

    /// Bytes held by the table.
    pub fn allocated_bytes(&self) -> usize {
        self.entries.allocated_bytes() + self.name.capacity()
    }

    fn stamp(&mut self) -> u32 {
        if self.next_stamp >= STAMP_LIMIT {
            self.renumber();
        }
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        stamp
    }

    /// Stamps 0..n in the same order.
    fn renumber(&mut self) {
        let mut all: Vec<Entry> = self.entries.iter().collect();
        all.sort_unstable_by_key(Entry::stamp);
        let mut table = RhTable::with_capacity(all.len());
        for (rank, e) in all.iter().enumerate() {
            table.insert_new(e.with(rank as u32, e.media()), mix(e.engine_hash));
        }
        self.entries = table;
        self.next_stamp = all.len() as u32;
    }
}
