//! One worker's blocks: engine hash -> (index key, media, recency).
//!
//! The slots live inline in the worker's own table (20 bytes, `packed(4)`): the engine hash it
//! was published under and the index key, both mixed (see [`super::table::mix`]; the key is
//! stored the way the key table wants it), and a 32-bit word with a 24-bit recency stamp and
//! the 8-bit media mask. The stamp reproduces the Python index's dict order (insertion order, a
//! re-store moves a block to the end): the oldest blocks are the smallest stamps. Stamps are
//! renumbered 0..n when the counter reaches 2^24, which keeps their order; a worker is held
//! below 2^23 blocks (see `MAX_WORKER_BLOCKS`) so that renumbering always frees most stamps.
//!
//! The live stamps are also bits of a bitmap kept with every change ([`StampBits`]): the
//! `n`-th oldest is a count of bits, so an eviction round reads the worker's table once, to
//! remove the entries at or below that stamp (`worker blocks / evicted blocks` slot reads per
//! evicted block: about 100 / workers, since each round removes 1% of the bound from the
//! largest worker). Stamps are renumbered 0..n when the bitmap grows wider than a few bits per
//! entry (re-stores and removals leave holes) or the counter reaches 2^24.

use super::stamps::StampBits;
use super::table::{mix, unmix, Growth, Slot, Table};

const STAMP_LIMIT: u32 = 1 << 24;
/// Blocks one worker may hold; beyond it, its oldest 1% are evicted (see the module docs).
pub(crate) const MAX_WORKER_BLOCKS: usize = 1 << 23;

/// One (worker, engine hash) entry.
#[derive(Clone, Copy)]
#[repr(C, packed(4))]
pub(crate) struct Entry {
    /// `mix(engine hash)`.
    hash: u64,
    /// `mix(index key)`.
    hkey: u64,
    /// `stamp << 8 | media mask`; 0 = empty slot (a live entry has at least one medium).
    meta: u32,
}

impl Slot for Entry {
    const EMPTY: Self = Entry {
        hash: 0,
        hkey: 0,
        meta: 0,
    };
    #[inline]
    fn is_empty(&self) -> bool {
        self.meta == 0
    }
    #[inline]
    fn hash(&self) -> u64 {
        self.hash
    }
    /// A stamp with no medium: no live entry has one.
    fn buried(self) -> Self {
        Entry {
            meta: BURIED,
            ..self
        }
    }
    #[inline]
    fn is_buried(&self) -> bool {
        self.meta == BURIED
    }
    #[inline]
    fn or_empty(self, keep: bool) -> Self {
        let mask = 0u64.wrapping_sub(keep as u64);
        Entry {
            hash: self.hash & mask,
            hkey: self.hkey & mask,
            meta: self.meta & mask as u32,
        }
    }
}

/// The `meta` of a removed entry's tombstone.
const BURIED: u32 = 1 << 8;

impl Entry {
    /// An entry from mixed values.
    pub fn new(hash: u64, hkey: u64, stamp: u32, media: u8) -> Self {
        Entry {
            hash,
            hkey,
            meta: (stamp << 8) | media as u32,
        }
    }
    /// The engine hash as published.
    pub fn engine_hash(&self) -> u64 {
        unmix(self.hash)
    }
    /// The index key.
    #[inline]
    pub fn key(&self) -> u64 {
        unmix(self.hkey)
    }
    /// The index key, mixed.
    #[inline]
    pub fn hkey(&self) -> u64 {
        self.hkey
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
        Entry::new(self.hash, self.hkey, stamp, media)
    }
    /// The entry in medium `bit` alone.
    pub fn only(self, bit: u8) -> Self {
        self.with(self.stamp(), bit)
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
    entries: Table<Entry>,
    next_stamp: u32,
    /// The stamps of the live entries.
    live: StampBits,
}

impl Worker {
    pub fn new(name: String, order: u64) -> Self {
        Worker {
            name,
            order,
            last_event: 0.0,
            entries: Table::default(),
            next_stamp: 0,
            live: StampBits::default(),
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
            .find(mix(engine_hash))
            .map(|pos| self.entries.get(pos))
    }

    /// Starts fetching the table memory of a (mixed) engine hash ahead of use (see
    /// `Table::prefetch`).
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        self.entries.prefetch(hash)
    }

    /// Every entry, in table order.
    pub fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        self.entries.iter()
    }

    /// Stores a block (by mixed engine hash and key) as the newest: a held block gets `media`
    /// added to its mask and is returned as it was; a new one is inserted (None).
    pub fn store(&mut self, hash: u64, hkey: u64, media: u8) -> Option<Entry> {
        // Renumbering rewrites every slot: done before taking a slot position.
        let stamp = self.stamp();
        match self.entries.lookup(hash) {
            Ok(pos) => {
                let old = self.entries.get(pos);
                self.live.clear(old.stamp());
                self.entries.set(pos, old.with(stamp, old.media() | media));
                Some(old)
            }
            Err(vacancy) => {
                let entry = Entry::new(hash, hkey, stamp, media);
                self.entries.insert_vacant(vacancy, entry);
                None
            }
        }
    }

    /// Whether a (mixed) engine hash is held.
    pub fn contains(&self, hash: u64) -> bool {
        self.entries.find(hash).is_some()
    }

    /// Takes medium `bit` from a held block without changing its recency (the block goes with
    /// its last medium); returns the entry as it was, or None when the block is not held in
    /// that medium.
    pub fn remove_medium(&mut self, engine_hash: u64, bit: u8) -> Option<Entry> {
        let pos = self.entries.find(mix(engine_hash))?;
        let old = self.entries.get(pos);
        if old.media() & bit == 0 {
            return None;
        }
        let media = old.media() & !bit;
        if media == 0 {
            self.live.clear(old.stamp());
            self.entries.remove(pos);
        } else {
            self.entries.set(pos, old.with(old.stamp(), media));
        }
        Some(old)
    }

    /// Removes and returns every entry.
    pub fn take_all(&mut self) -> Table<Entry> {
        self.next_stamp = 0;
        self.live.reset();
        let emptied = self.entries.emptied();
        std::mem::replace(&mut self.entries, emptied)
    }

    /// How the table grows from now on (see [`Growth`]).
    pub fn set_growth(&mut self, growth: Growth) {
        self.entries.set_growth(growth);
    }

    #[cfg(test)]
    pub fn growth(&self) -> Growth {
        self.entries.growth()
    }

    /// Removes the `count` oldest entries, passing each to `removed`.
    pub fn remove_oldest(&mut self, count: usize, mut removed: impl FnMut(Entry)) {
        if count == 0 {
            return;
        }
        if count >= self.entries.len() {
            self.take_all().for_each(|&e| removed(e));
            return;
        }
        let threshold = self
            .live
            .nth(count - 1)
            .expect("as many live stamps as entries");
        self.entries
            .remove_where(|e| e.stamp() <= threshold, removed);
        self.live.clear_through(threshold);
    }

    /// The `n`-th smallest stamp (0-based; stamps are distinct), from the table itself.
    #[cfg(test)]
    fn nth_stamp(&self, n: usize) -> u32 {
        // Sized up front: growing it by doubling costs fresh pages at every step.
        let mut stamps = Vec::with_capacity(self.entries.len());
        self.entries.for_each(|e| stamps.push(e.stamp()));
        *stamps.select_nth_unstable(n).1
    }

    /// Rebuilds from entries (snapshot load), keeping their order by stamp; false (and nothing
    /// changed) when two share a stamp. A snapshot is untrusted: eviction counts on distinct
    /// stamps, and the bitmap of live stamps spans their range, so stamps spread far wider than
    /// the live index keeps them (see [`StampBits::too_wide_to_restore`]) are renumbered by rank
    /// rather than given memory set by their range.
    #[must_use]
    pub fn restore(&mut self, entries: Vec<Entry>) -> bool {
        let mut stamps: Vec<u32> = entries.iter().map(Entry::stamp).collect();
        stamps.sort_unstable();
        if stamps.windows(2).any(|pair| pair[0] == pair[1]) {
            return false;
        }
        let span = match (stamps.first(), stamps.last()) {
            (Some(&first), Some(&last)) => (last - first) as usize,
            _ => 0,
        };
        let by_rank = StampBits::too_wide_to_restore(span, stamps.len());
        let mut table = Table::with_capacity(entries.len());
        for e in entries {
            let e = if by_rank {
                let rank = stamps
                    .binary_search(&e.stamp())
                    .expect("a stamp of these entries");
                e.with(rank as u32, e.media())
            } else {
                e
            };
            table.insert_new(e);
        }
        self.live.reset();
        if by_rank {
            self.next_stamp = stamps.len() as u32;
            self.live = StampBits::dense(self.next_stamp);
        } else {
            stamps.iter().for_each(|&s| self.live.set(s));
            self.next_stamp = stamps.last().map_or(0, |&s| s + 1);
        }
        self.entries = table;
        true
    }

    /// Bytes held by the table.
    pub fn allocated_bytes(&self) -> usize {
        self.entries.allocated_bytes() + self.live.allocated_bytes() + self.name.capacity()
    }

    fn stamp(&mut self) -> u32 {
        if self.next_stamp >= STAMP_LIMIT || self.live.too_wide(self.next_stamp, self.len()) {
            self.renumber();
        }
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.live.set(stamp);
        stamp
    }

    /// Stamps 0..n in the same order.
    fn renumber(&mut self) {
        {
            let rank = self.live.ranks();
            self.entries
                .update_each(|e| *e = e.with(rank(e.stamp()), e.media()));
        }
        self.next_stamp = self.entries.len() as u32;
        self.live = StampBits::dense(self.next_stamp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::Rng;

    #[test]
    fn live_stamps_agree_with_partitioning_through_renumberings() {
        let mut worker = Worker::new("w".into(), 0);
        let mut rng = Rng(0x2545_f491_u64);
        let mut bitmap_answers = 0;
        let mut renumberings = 0;
        for step in 0..40_000u64 {
            let next_before = worker.next_stamp;
            // Mostly re-stores of a few hot blocks, which widen the bitmap while cold blocks
            // hold its start.
            let hash = match rng.next() % 10 {
                0..=7 => mix(rng.next() % 8),
                _ => mix(8 + rng.next() % 3000),
            };
            match rng.next() % 10 {
                // Stores and re-stores (a re-store makes the block newest again).
                0..=6 => {
                    worker.store(hash, hash ^ 1, 1 << (rng.next() % 2));
                }
                // A removal from both media.
                7 => {
                    worker.remove_medium(unmix(hash), 1);
                    worker.remove_medium(unmix(hash), 2);
                }
                // Rare evictions, so that re-stores widen the bitmap into renumberings.
                _ if worker.len() > 1 && rng.next().is_multiple_of(64) => {
                    let n = (rng.next() as usize) % worker.len();
                    assert_eq!(worker.live.nth(n), Some(worker.nth_stamp(n)), "step {step}");
                    bitmap_answers += 1;
                    let count = 1 + (rng.next() as usize) % (worker.len() / 4 + 1);
                    let threshold = worker.nth_stamp(count - 1);
                    let mut gone = 0;
                    worker.remove_oldest(count, |e| {
                        assert!(e.stamp() <= threshold);
                        gone += 1;
                    });
                    assert_eq!(gone, count);
                    assert!(worker.entries().all(|e| e.stamp() > threshold));
                    assert_eq!(worker.live.nth(worker.len()), None);
                }
                _ => {}
            }
            renumberings += (worker.next_stamp < next_before) as u32;
        }
        assert!(bitmap_answers > 50, "{bitmap_answers}");
        assert!(renumberings > 10, "{renumberings}");
    }
}
