//! Who holds a key: one 32-bit code per key, and a pool of bitsets for keys held by several
//! workers.
//!
//! Almost every key of a large index is held by one worker (the unshared tail of a sequence), so
//! the code stores that worker and its media mask inline; only shared blocks (system prompts,
//! common documents) spill into the pool, where each medium has a bitset over worker ids.

/// Media one index distinguishes (the mask is 8 bits; vLLM and SGLang name six between them).
pub(crate) const MAX_MEDIA: usize = 8;
/// Worker ids are below this (23 bits in the inline code).
pub(crate) const MAX_WORKERS: u32 = 1 << 23;

const MULTI_TAG: u32 = 1 << 31;

/// A holder code: 0 = nobody; bit 31 clear = one worker (`id << 8 | media mask`); bit 31 set =
/// an index into the [`MultiPool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holders {
    /// Nobody holds the key.
    Nobody,
    /// One worker, in the media of the mask.
    One { worker: u32, media: u8 },
    /// Several workers: a record of the pool.
    Many(u32),
}

impl Holders {
    #[inline]
    pub fn decode(code: u32) -> Holders {
        if code == 0 {
            Holders::Nobody
        } else if code & MULTI_TAG != 0 {
            Holders::Many(code & !MULTI_TAG)
        } else {
            Holders::One {
                worker: code >> 8,
                media: code as u8,
            }
        }
    }

    #[inline]
    pub fn encode(self) -> u32 {
        match self {
            Holders::Nobody => 0,
            Holders::One { worker, media } => {
                debug_assert!(media != 0 && worker < MAX_WORKERS);
                (worker << 8) | media as u32
            }
            Holders::Many(index) => MULTI_TAG | index,
        }
    }
}

/// Per-medium worker bitsets of one shared key: `rows` media of `words` 64-bit words each.
#[derive(Clone, Default)]
pub(crate) struct MultiRecord {
    words: usize,
    bits: Vec<u64>,
}

impl MultiRecord {
    fn rows(&self) -> usize {
        self.bits.len().checked_div(self.words).unwrap_or(0)
    }

    /// Worker ids of medium `m` as words (shorter than the index's word count when the record
    /// was made before workers with higher ids existed; missing words are zero).
    #[inline]
    pub fn row(&self, m: usize) -> &[u64] {
        if m < self.rows() {
            &self.bits[m * self.words..(m + 1) * self.words]
        } else {
            &[]
        }
    }

    /// Number of media rows.
    pub fn media(&self) -> usize {
        self.rows()
    }

    fn ensure(&mut self, worker: u32, m: usize) {
        let words = (worker as usize / 64 + 1).max(self.words);
        let rows = (m + 1).max(self.rows());
        if words == self.words && rows == self.rows() {
            return;
        }
        let mut bits = vec![0u64; words * rows];
        for r in 0..self.rows() {
            bits[r * words..r * words + self.words].copy_from_slice(self.row(r));
        }
        self.words = words;
        self.bits = bits;
    }

    /// Sets (worker, medium); false when it was already set.
    pub fn set(&mut self, worker: u32, m: usize) -> bool {
        self.ensure(worker, m);
        let (word, bit) = (worker as usize / 64, 1u64 << (worker % 64));
        let slot = &mut self.bits[m * self.words + word];
        let fresh = *slot & bit == 0;
        *slot |= bit;
        fresh
    }

    /// Clears (worker, medium).
    pub fn clear(&mut self, worker: u32, m: usize) {
        let (word, bit) = (worker as usize / 64, 1u64 << (worker % 64));
        if m < self.rows() && word < self.words {
            self.bits[m * self.words + word] &= !bit;
        }
    }

    /// Clears the worker in every medium.
    pub fn clear_worker(&mut self, worker: u32) {
        for m in 0..self.rows() {
            self.clear(worker, m);
        }
    }

    /// The holders after a change: `Nobody`, the single remaining worker, or still many.
    pub fn summarize(&self) -> Summary {
        let mut first: Option<u32> = None;
        for word in 0..self.words {
            let mut any = 0u64;
            for m in 0..self.rows() {
                any |= self.bits[m * self.words + word];
            }
            while any != 0 {
                let worker = (word * 64) as u32 + any.trailing_zeros();
                if first.is_some() {
                    return Summary::Many;
                }
                first = Some(worker);
                any &= any - 1;
            }
        }
        match first {
            None => Summary::Nobody,
            Some(worker) => Summary::One(worker, self.media_of(worker)),
        }
    }

    /// The media mask of one worker.
    pub fn media_of(&self, worker: u32) -> u8 {
        let (word, bit) = (worker as usize / 64, 1u64 << (worker % 64));
        let mut mask = 0u8;
        if word < self.words {
            for m in 0..self.rows() {
                if self.bits[m * self.words + word] & bit != 0 {
                    mask |= 1 << m;
                }
            }
        }
        mask
    }

    /// Bytes held on the heap.
    pub fn allocated_bytes(&self) -> usize {
        self.bits.capacity() * 8
    }
}

/// What a [`MultiRecord`] holds after a change.
pub(crate) enum Summary {
    Nobody,
    One(u32, u8),
    Many,
}

/// The records of shared keys, with a free list.
#[derive(Clone, Default)]
pub(crate) struct MultiPool {
    records: Vec<MultiRecord>,
    free: Vec<u32>,
    /// Bytes of the records' bitsets, kept with every change (a record is as wide as its
    /// highest worker id: a restore checks what a snapshot's shared keys take as it goes).
    bits_bytes: usize,
}

impl MultiPool {
    /// A record holding one worker in `media` and another in medium `m`.
    pub fn create(&mut self, first: u32, media: u8, second: u32, m: usize) -> u32 {
        let mut record = MultiRecord::default();
        for bit in 0..MAX_MEDIA {
            if media & (1 << bit) != 0 {
                record.set(first, bit);
            }
        }
        record.set(second, m);
        self.bits_bytes += record.allocated_bytes();
        match self.free.pop() {
            Some(index) => {
                self.records[index as usize] = record;
                index
            }
            None => {
                self.records.push(record);
                (self.records.len() - 1) as u32
            }
        }
    }

    /// Returns a record to the free list.
    pub fn release(&mut self, index: u32) {
        let record = std::mem::take(&mut self.records[index as usize]);
        self.bits_bytes -= record.allocated_bytes();
        self.free.push(index);
    }

    /// Sets (worker, medium) in a record; false when it was already set.
    pub fn set(&mut self, index: u32, worker: u32, m: usize) -> bool {
        let record = &mut self.records[index as usize];
        let before = record.allocated_bytes();
        let fresh = record.set(worker, m);
        self.bits_bytes += record.allocated_bytes() - before;
        fresh
    }

    /// Bytes of the records' bitsets.
    pub fn bits_bytes(&self) -> usize {
        self.bits_bytes
    }

    #[inline]
    pub fn get(&self, index: u32) -> &MultiRecord {
        &self.records[index as usize]
    }

    /// A record to clear holds in (which never grows it).
    #[inline]
    pub fn get_mut(&mut self, index: u32) -> &mut MultiRecord {
        &mut self.records[index as usize]
    }

    /// Bytes held on the heap.
    pub fn allocated_bytes(&self) -> usize {
        self.records.capacity() * std::mem::size_of::<MultiRecord>()
            + self
                .records
                .iter()
                .map(MultiRecord::allocated_bytes)
                .sum::<usize>()
            + self.free.capacity() * 4
    }
}
