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
//! Finding the oldest blocks scans the worker's table (a linear pass over 20-byte slots), which
//! costs `worker blocks / evicted blocks` slot reads per evicted block: about 100 / workers,
//! since each eviction round removes 1% of the bound from the largest worker. The pass sets
//! bits in a bitmap of the stamps since the previous eviction (`oldest`), whose count gives the
//! threshold; a copy and partition of all stamps remains for a range too wide for a bitmap.

use super::table::{mix, unmix, Slot, Table};

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
}

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
    /// No live entry has a smaller stamp (stamps only grow, and eviction removes the smallest).
    oldest: u32,
}

impl Worker {
    pub fn new(name: String, order: u64) -> Self {
        Worker {
            name,
            order,
            last_event: 0.0,
            entries: Table::default(),
            next_stamp: 0,
            oldest: 0,
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
        if self.next_stamp >= STAMP_LIMIT {
            // Renumbering rebuilds the table: do it before taking a slot position.
            self.renumber();
        }
        let stamp = self.stamp();
        match self.entries.lookup(hash) {
            Ok(pos) => {
                let old = self.entries.get(pos);
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

    /// Sets the media of a held block without changing its recency (0 removes the block).
    pub fn set_media(&mut self, engine_hash: u64, media: u8) {
        if let Some(pos) = self.entries.find(mix(engine_hash)) {
            if media == 0 {
                self.entries.remove(pos);
            } else {
                let old = self.entries.get(pos);
                self.entries.set(pos, old.with(old.stamp(), media));
            }
        }
    }

    /// Removes and returns every entry.
    pub fn take_all(&mut self) -> Table<Entry> {
        self.next_stamp = 0;
        self.oldest = 0;
        std::mem::take(&mut self.entries)
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
            .nth_stamp_in_range(count - 1)
            .unwrap_or_else(|| self.nth_stamp(count - 1));
        self.entries
            .remove_where(|e| e.stamp() <= threshold, removed);
        self.oldest = threshold + 1;
    }

    /// The `n`-th smallest stamp (0-based) from a bitmap of the stamps since `oldest`, when
    /// that range is small (as in steady eviction): one pass over the table and a count of bits,
    /// where `nth_stamp` also copies the stamps and partitions them. None when the range is
    /// wide.
    fn nth_stamp_in_range(&self, n: usize) -> Option<u32> {
        let base = self.oldest.min(self.next_stamp);
        let range = (self.next_stamp - base) as usize;
        if range > 16 * self.entries.len() + 64 {
            return None;
        }
        let mut bits = vec![0u64; range.div_ceil(64)];
        let mut outside = false;
        self.entries.for_each(|e| {
            let i = e.stamp().wrapping_sub(base) as usize;
            match bits.get_mut(i / 64) {
                Some(word) => *word |= 1 << (i % 64),
                None => outside = true,
            }
        });
        if outside {
            debug_assert!(false, "a stamp below `oldest`");
            return None;
        }
        let mut left = n;
        for (w, &word) in bits.iter().enumerate() {
            let ones = word.count_ones() as usize;
            if left < ones {
                let mut word = word;
                for _ in 0..left {
                    word &= word - 1;
                }
                return Some(base + (w * 64) as u32 + word.trailing_zeros());
            }
            left -= ones;
        }
        None
    }

    /// The `n`-th smallest stamp (0-based; stamps are distinct).
    fn nth_stamp(&self, n: usize) -> u32 {
        // Sized up front: growing it by doubling costs fresh pages at every step.
        let mut stamps = Vec::with_capacity(self.entries.len());
        self.entries.for_each(|e| stamps.push(e.stamp()));
        *stamps.select_nth_unstable(n).1
    }

    /// Rebuilds from entries (snapshot load), keeping their stamps.
    pub fn restore(&mut self, entries: Vec<Entry>) {
        let mut table = Table::default();
        let mut next = 0;
        for e in entries {
            next = next.max(e.stamp() + 1);
            table.insert_new(e);
        }
        self.entries = table;
        self.next_stamp = next;
        self.oldest = 0;
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
        let mut stamps = Vec::with_capacity(self.entries.len());
        stamps.extend(self.entries.iter().map(|e| e.stamp()));
        stamps.sort_unstable();
        self.entries.update_each(|e| {
            let rank = stamps
                .binary_search(&e.stamp())
                .expect("an entry's own stamp") as u32;
            *e = e.with(rank, e.media());
        });
        self.next_stamp = stamps.len() as u32;
        self.oldest = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_bitmap_agrees_with_partitioning() {
        let mut worker = Worker::new("w".into(), 0);
        let mut state = 0x2545_f491_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut bitmap_answers = 0;
        for step in 0..20_000u64 {
            let hash = mix(next() % 3000);
            match next() % 10 {
                // Stores and re-stores (a re-store makes the block newest again).
                0..=6 => {
                    worker.store(hash, hash ^ 1, 1 << (next() % 2));
                }
                7 => worker.set_media(unmix(hash), 0),
                _ if worker.len() > 1 => {
                    let n = (next() as usize) % worker.len();
                    if let Some(stamp) = worker.nth_stamp_in_range(n) {
                        assert_eq!(stamp, worker.nth_stamp(n), "step {step}");
                        bitmap_answers += 1;
                    }
                    let count = 1 + (next() as usize) % (worker.len() / 4 + 1);
                    let threshold = worker.nth_stamp(count - 1);
                    let mut gone = 0;
                    worker.remove_oldest(count, |e| {
                        assert!(e.stamp() <= threshold);
                        gone += 1;
                    });
                    assert_eq!(gone, count);
                    assert!(worker.entries().all(|e| e.stamp() >= worker.oldest));
                }
                _ => {}
            }
        }
        assert!(bitmap_answers > 100);
    }
}
