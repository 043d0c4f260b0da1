//! An open-addressing hash table of fixed-size slots, built for the index's memory budget.
//!
//! **Why not `std::collections::HashMap`.** Its capacity doubles, so its load swings between
//! 7/16 and 7/8 and a table just past a doubling costs twice the memory per element; and each
//! growth frees the old array, which the allocator keeps resident for a while, so right after a
//! growth the process holds both. The 48-byte-per-entry budget (measured as RSS) absorbs
//! neither.
//!
//! **Layout.** Extendible hashing over bounded Robin Hood segments:
//! - The low bits of a slot's hash pick a directory entry, which names a segment; a segment
//!   that reaches `SEGMENT_MAX` slots splits in two on its next hash bit. No allocation ever
//!   exceeds a few MB, and no write holds a lock for a whole-table rebuild (a segment of
//!   `SEGMENT_MAX` slots is laid out again in about a millisecond).
//! - A segment is linear probing in Robin Hood order over any capacity (not only powers of
//!   two); past a load of 0.88 it is laid out again at 0.75, and after a split each half is
//!   sized for 0.8, so the load stays between 0.75 and 0.88: [`Growth::Compact`], while a
//!   small index's tables double instead (see [`Growth`]). (Higher loads save memory but make
//!   an insertion shift longer runs of slots. Bounds of 0.70-0.82 cut the instructions of
//!   ingestion at the eviction bound by 11% and cost 2.6 bytes per entry, but quiet-machine
//!   throughput did not move (cache misses, not instructions, bound it), so they were not kept.)
//! - A removal leaves a tombstone that keeps the slot's hash (lookups pass it, an insertion
//!   takes it as a free slot, a relayout drops it; tombstones count toward the load), instead
//!   of shifting the rest of the run back.
//! - A dropped slot array is counted in [`take_released_bytes`].
//! - Slots store the *mixed* hash of their key (`mix` is a bijection, `unmix` its inverse), and
//!   the home slot is `(hash * capacity) >> 64`, monotonic in the hash: a segment's slots are
//!   sorted by hash, so a probe stops at the first slot whose hash is larger, with no hashing of
//!   resident keys. There is no wrap-around: `OVERFLOW` spare slots follow the last home slot.

use std::sync::atomic::{AtomicU64, Ordering};

/// Spare slots after the last home slot of a segment.
const OVERFLOW: usize = 32;
/// Cache lines fetched ahead from a home slot on (see [`Table::prefetch`]).
const PREFETCH_LINES: usize = 4;
/// Slots a search or an insertion compares at once (see [`Segment::search`]); 4 and 12 were
/// slower at the 200k bound.
const SEARCH_WINDOW: usize = 8;
/// Slots a removal pass collects before passing them on.
const REMOVED_GROUP: usize = 64;
/// Smallest capacity (home slots) of a segment that holds anything.
const MIN_CAPACITY: usize = 8;
/// A segment splits when it holds this many slots. Its array is then a few MB: the allocator
/// gives arrays above 512 KiB pages of their own, returned whole when freed (smaller ones share
/// pages and leave holes). Unit tests use small segments so that every test splits.
#[cfg(not(test))]
const SEGMENT_MAX: usize = 1 << 18;
#[cfg(test)]
const SEGMENT_MAX: usize = 1 << 10;
/// Past this load (per mille) a segment is laid out again, at `RELAID_LOAD`; a split sizes each
/// half for `SPLIT_LOAD`. Higher loads save memory and cost longer shifts on insertion.
const MAX_LOAD: usize = 880;
const RELAID_LOAD: usize = 750;
const SPLIT_LOAD: usize = 800;
/// The load a segment grows to under [`Growth::Doubling`]: twice its capacity.
const DOUBLED_LOAD: usize = MAX_LOAD / 2;

/// How a segment past `MAX_LOAD` grows. A compact growth (to `RELAID_LOAD`, 1.17x) keeps the
/// load between 0.75 and 0.88, which the index's 48-byte budget needs at millions of entries,
/// but copies every slot 6-7 times on its way up; doubling copies it about twice and leaves the
/// load between 0.44 and 0.88. The index doubles while it is small enough for the memory not
/// to matter and grows compactly from then on (see `core::COMPACT_FROM`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Growth {
    Doubling,
    Compact,
}

impl Growth {
    /// The load (per mille) a growing segment is laid out at.
    fn load(self) -> usize {
        match self {
            Growth::Doubling => DOUBLED_LOAD,
            Growth::Compact => RELAID_LOAD,
        }
    }
}

/// Bytes of slot arrays freed since the last [`take_released_bytes`] (all tables, all threads).
static RELEASED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Bytes of slot arrays freed (by growth, splits, clears and drops) since the last call. The
/// C ABI uses it to ask the allocator to return them to the OS (see `ffi::index`).
pub fn take_released_bytes(threshold: u64) -> Option<u64> {
    if RELEASED_BYTES.load(Ordering::Relaxed) < threshold {
        return None;
    }
    Some(RELEASED_BYTES.swap(0, Ordering::Relaxed))
}

/// One slot's contents; the empty slot is a reserved bit pattern of the slot itself.
pub(crate) trait Slot: Copy {
    /// The empty slot.
    const EMPTY: Self;
    /// Whether this slot holds nothing.
    fn is_empty(&self) -> bool;
    /// The slot's mixed hash (unique per slot: `mix` of its key).
    fn hash(&self) -> u64;
    /// The slot as a tombstone: removed, keeping its hash (see [`Segment::bury`]).
    fn buried(self) -> Self;
    /// Whether this slot is a tombstone.
    fn is_buried(&self) -> bool;
    /// This slot when `keep`, else the empty slot, without a branch.
    fn or_empty(self, keep: bool) -> Self;
    /// Whether this slot holds a live value.
    #[inline]
    fn is_live(&self) -> bool {
        !self.is_empty() && !self.is_buried()
    }
}

const C1: u64 = 0xff51_afd7_ed55_8ccd;
const C2: u64 = 0xc4ce_b9fe_1a85_ec53;

/// The multiplicative inverse of an odd number modulo 2^64 (Newton's iteration).
const fn inverse(c: u64) -> u64 {
    let mut x = c;
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(c.wrapping_mul(x)));
        i += 1;
    }
    x
}

const C1_INV: u64 = inverse(C1);
const C2_INV: u64 = inverse(C2);

/// A secret of this process folded into every `mix`: engines choose their block hashes (and
/// clients the tokens content keys come from), and with a public bijection anyone could choose
/// values that crowd one run of a table (an insertion then scans the run: tens of seconds under
/// the write lock for one 2^18-block store) or fill one side of every segment split (each insert
/// then doubles the directory, until memory runs out). Chosen at the first `mix` and never
/// changed after, so every table of the process agrees; snapshots hold unmixed values.
static MIX_KEY: AtomicU64 = AtomicU64::new(0);

#[inline]
fn mix_key() -> u64 {
    match MIX_KEY.load(Ordering::Relaxed) {
        0 => seed_mix_key(),
        key => key,
    }
}

#[cold]
fn seed_mix_key() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // `RandomState` is seeded from the operating system's random source.
    let candidate = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
        | 1;
    match MIX_KEY.compare_exchange(0, candidate, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => candidate,
        Err(chosen) => chosen, // another thread's first `mix` came first
    }
}

/// MurmurHash3's 64-bit finalizer (a bijection) of the key XOR the process's secret: engine
/// hashes in tests and synthetic loads can be small consecutive integers, which must not
/// cluster, and hostile ones must not be able to choose where they land.
#[inline]
pub(crate) fn mix(key: u64) -> u64 {
    let mut h = key ^ mix_key();
    h ^= h >> 33;
    h = h.wrapping_mul(C1);
    h ^= h >> 33;
    h = h.wrapping_mul(C2);
    h ^ (h >> 33)
}

/// The key whose `mix` is `h`.
#[inline]
pub(crate) fn unmix(h: u64) -> u64 {
    let mut k = h ^ (h >> 33);
    k = k.wrapping_mul(C2_INV);
    k ^= k >> 33;
    k = k.wrapping_mul(C1_INV);
    k ^ (k >> 33) ^ mix_key()
}

/// Asks the processor to fetch the cache line at `at` into its caches (a hint: nothing waits
/// for it, so the fetches of a whole batch are in flight together). `std::hint` has no stable
/// prefetch, hence the intrinsic and an `unsafe` outside `ffi`.
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch<T>(at: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes no state the program sees; SSE is part of
    // the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Where a slot is: (segment, position in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pos {
    segment: u32,
    slot: u32,
}

/// One Robin Hood segment (see the module docs).
#[derive(Clone)]
struct Segment<S: Slot> {
    slots: Vec<S>,
    capacity: usize,
    len: usize,
    /// Tombstones (see [`Segment::bury`]).
    dead: usize,
    /// Low hash bits shared by every slot of this segment.
    depth: u32,
}

impl<S: Slot> Drop for Segment<S> {
    fn drop(&mut self) {
        let bytes = self.slots.capacity() * std::mem::size_of::<S>();
        RELEASED_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

impl<S: Slot> Segment<S> {
    fn empty(depth: u32) -> Self {
        Segment {
            slots: Vec::new(),
            capacity: 0,
            len: 0,
            dead: 0,
            depth,
        }
    }

    /// An empty segment of `capacity` home slots.
    fn sized(capacity: usize, depth: u32) -> Self {
        let capacity = capacity.max(MIN_CAPACITY);
        Segment {
            slots: vec![S::EMPTY; capacity + OVERFLOW],
            capacity,
            len: 0,
            dead: 0,
            depth,
        }
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        ((hash as u128 * self.capacity as u128) >> 64) as usize
    }

    /// `Ok(position)` of `hash`, or `Err(position)` where it would go: the first slot past it.
    /// For insertions and releases (see [`Segment::find`]).
    #[inline]
    fn search(&self, hash: u64) -> Result<usize, usize> {
        let mut pos = self.home(hash);
        // A window of slots at a time: how many lead with a smaller hash (tombstones included)
        // is where the hash is or goes, with no branch per slot. Stopping at the end of the run
        // slot by slot mispredicted about once per search (two per block stored at the
        // eviction bound). `scan` takes the array's last slots.
        while let Some(window) = self.slots.get(pos..pos + SEARCH_WINDOW) {
            let mut before = 0u32;
            for (i, s) in window.iter().enumerate() {
                before |= ((!s.is_empty() & (s.hash() < hash)) as u32) << i;
            }
            let n = before.trailing_ones() as usize;
            if n < SEARCH_WINDOW {
                let slot = window[n];
                return if !slot.is_empty() && slot.hash() == hash && !slot.is_buried() {
                    Ok(pos + n)
                } else {
                    Err(pos + n)
                };
            }
            pos += SEARCH_WINDOW;
        }
        self.scan(pos, hash)
    }

    /// [`Segment::search`] slot by slot from `pos`.
    #[inline]
    fn scan(&self, mut pos: usize, hash: u64) -> Result<usize, usize> {
        while let Some(slot) = self.slots.get(pos) {
            if slot.is_empty() || slot.hash() > hash {
                return Err(pos);
            }
            if slot.hash() == hash {
                // A tombstone of the same hash is where the slot goes back.
                return if slot.is_buried() { Err(pos) } else { Ok(pos) };
            }
            pos += 1;
        }
        Err(pos)
    }

    /// Where a slot of `hash` is. Slot by slot: scoring looks up this way keys mostly held at
    /// or next to their home, where comparing a whole window cost Score over 4M entries
    /// 28 -> 41 us (p50).
    #[inline]
    fn find(&self, hash: u64) -> Option<usize> {
        self.scan(self.home(hash), hash).ok()
    }

    /// Places a slot whose hash is absent: before the first larger hash, the rest of the run
    /// moving up one slot (one `memmove`).
    fn place(&mut self, slot: S) {
        let at = self.search(slot.hash()).unwrap_or_else(|at| at);
        self.place_at(at, slot);
    }

    /// `place` with the position `search` returned for the slot's hash.
    fn place_at(&mut self, at: usize, slot: S) {
        // Most free slots are a few slots on (within `SEARCH_WINDOW` for three insertions in
        // four at the eviction bound): found and shifted into without a branch on the
        // distance. A scan and a `memmove` of that length mispredicted about two branches per
        // insertion.
        if let Some(window) = self.slots.get(at..at + SEARCH_WINDOW) {
            let mut free = 0u32;
            for (i, s) in window.iter().enumerate() {
                free |= (!s.is_live() as u32) << i;
            }
            if free != 0 {
                let distance = free.trailing_zeros() as usize;
                self.dead -= window[distance].is_buried() as usize;
                let shifted = &mut self.slots[at..at + SEARCH_WINDOW];
                // From the top down: up one slot up to the free one, the rest as they were.
                for i in (1..SEARCH_WINDOW).rev() {
                    shifted[i] = shifted[i - (i <= distance) as usize];
                }
                shifted[0] = slot;
                self.len += 1;
                return;
            }
        }
        // A slice search: no bounds check per slot (runs are long at the loads kept here).
        // A tombstone takes a slot as an empty slot does: the slots before it are larger than
        // the new one, and it is the first non-live slot after them.
        let free = self.slots[at..]
            .iter()
            .position(|s| !s.is_live())
            .map_or(self.slots.len(), |i| at + i);
        if free == self.slots.len() {
            // The run reaches the end of the spare slots: lay out again, twice as wide.
            *self = self.relayout(self.capacity * 2, |_| true, Some(slot));
            return;
        }
        if self.slots[free].is_buried() {
            self.dead -= 1;
        }
        self.slots.copy_within(at..free, at + 1);
        self.slots[at] = slot;
        self.len += 1;
    }

    /// Whether one more slot would pass the maximum load, tombstones counted (a relayout drops
    /// them, so it may keep the capacity).
    fn must_grow(&self) -> bool {
        (self.len + self.dead + 1) * 1000 > self.capacity * MAX_LOAD
    }

    fn insert(&mut self, slot: S, growth: Growth) {
        if self.must_grow() {
            if (self.len + 1) * 1000 <= self.capacity * RELAID_LOAD {
                // Tombstones filled it (removals as fast as inserts: the eviction bound's steady
                // state): dropped in place. A new array here would be freed at the next purge,
                // and the allocator, returning it to the OS, would fault fresh pages every time.
                self.remove_where(&|_| false, &mut |_| {});
            } else {
                *self = self.relayout((self.len + 1) * 1000 / growth.load(), |_| true, None);
            }
        }
        self.place(slot);
    }

    /// `insert` at the position `search` returned for the slot's hash.
    fn insert_at(&mut self, at: usize, slot: S, growth: Growth) {
        if self.must_grow() {
            self.insert(slot, growth);
        } else {
            self.place_at(at, slot);
        }
    }

    fn remove_at(&mut self, pos: usize) {
        self.bury(pos);
        self.maybe_shrink();
    }

    /// Shrinks a segment that removals left mostly empty.
    fn maybe_shrink(&mut self) {
        if self.capacity > 4 * MIN_CAPACITY && self.len * 4 < self.capacity {
            *self = self.relayout(self.len * 1000 / RELAID_LOAD, |_| true, None);
        }
    }

    /// Removes the slots matching `remove`, passing each to `removed`, in one forward pass that
    /// lays the kept slots out again in place: each goes to its home or right after the previous
    /// kept slot, which is never to the right of where it was (the `relayout` rule, so the
    /// segment stays sorted and every run stays unbroken). One pass however many go, where
    /// removing them one by one would shift the rest of each run once per removal.
    fn remove_where(&mut self, remove: &impl Fn(&S) -> bool, removed: &mut impl FnMut(S)) {
        // Without a branch on what each slot is (empty, tombstone, removed, kept where it is,
        // moved): eviction removes a sixth of a worker's slots at random places, and branches
        // on that were mispredicted slot after slot. The removed slots are collected and
        // passed on in groups.
        let mut next = 0usize;
        let mut kept = 0usize;
        let mut gone = [S::EMPTY; REMOVED_GROUP];
        let mut count = 0;
        for pos in 0..self.slots.len() {
            let slot = self.slots[pos];
            let live = slot.is_live();
            let remove = live & remove(&slot);
            let keep = live & !remove;
            gone[count] = slot;
            count += remove as usize;
            if count == REMOVED_GROUP {
                gone.iter().for_each(|&s| removed(s));
                count = 0;
            }
            // Each kept slot goes to its home or right after the previous kept slot, which is
            // never to the right of where it was (the `relayout` rule).
            let to = self.home(slot.hash()).max(next);
            let dst = if keep { to } else { pos };
            self.slots[pos] = S::EMPTY;
            self.slots[dst] = slot.or_empty(keep);
            next = if keep { to + 1 } else { next };
            kept += keep as usize;
        }
        gone[..count].iter().for_each(|&s| removed(s));
        self.len = kept;
        self.dead = 0;
        self.maybe_shrink();
    }

    /// Removes the slot at `pos` by leaving a tombstone with its hash: lookups pass it as a
    /// slot of the run, an insertion takes it as a free slot, and the next relayout drops it.
    /// Shifting the rest of the run back instead (a scan to the run's end and a `memmove`) cost
    /// the key table about 160 instructions per evicted block at the eviction bound.
    fn bury(&mut self, pos: usize) {
        self.slots[pos] = self.slots[pos].buried();
        self.len -= 1;
        self.dead += 1;
    }

    fn iter(&self) -> impl Iterator<Item = S> + '_ {
        self.slots.iter().copied().filter(|s| s.is_live())
    }

    /// A new segment with `capacity` home slots (at least what `MAX_LOAD` needs) holding the
    /// slots for which `keep` is true, plus `extra`. Reads the slots in place: they are sorted
    /// by hash, and sorted input needs no Robin Hood swaps, each slot going to its home or right
    /// after the previous one.
    fn relayout(&self, capacity: usize, keep: impl Fn(&S) -> bool, extra: Option<S>) -> Self {
        let kept = || self.iter().filter(|s| keep(s));
        let count = if extra.is_some() {
            self.len + 1
        } else {
            kept().count()
        };
        let mut capacity = capacity.max(count * 1000 / MAX_LOAD + 1).max(MIN_CAPACITY);
        loop {
            let mut out = Segment {
                slots: vec![S::EMPTY; capacity + OVERFLOW],
                capacity,
                len: 0,
                dead: 0,
                depth: self.depth,
            };
            let mut extra = extra;
            let mut next = 0usize;
            let mut fits = true;
            for slot in kept() {
                if let Some(e) = extra.filter(|e| e.hash() < slot.hash()) {
                    fits &= out.append(e, &mut next);
                    extra = None;
                }
                fits &= out.append(slot, &mut next);
            }
            if let Some(e) = extra {
                fits &= out.append(e, &mut next);
            }
            if fits {
                return out;
            }
            capacity *= 2;
        }
    }

    /// Appends a slot larger than every slot placed so far; false when it does not fit.
    #[inline]
    fn append(&mut self, slot: S, next: &mut usize) -> bool {
        let pos = self.home(slot.hash()).max(*next);
        if pos >= self.slots.len() {
            return false;
        }
        self.slots[pos] = slot;
        self.len += 1;
        *next = pos + 1;
        true
    }
}

/// The table (see the module docs).
#[derive(Clone)]
pub(crate) struct Table<S: Slot> {
    /// Low hash bits -> segment.
    directory: Vec<u32>,
    depth: u32,
    segments: Vec<Segment<S>>,
    len: usize,
    growth: Growth,
}

impl<S: Slot> Default for Table<S> {
    fn default() -> Self {
        Table {
            directory: vec![0],
            depth: 0,
            segments: vec![Segment::empty(0)],
            len: 0,
            growth: Growth::Doubling,
        }
    }
}

impl<S: Slot> Table<S> {
    /// An empty table sized for `n` slots, so that filling it lays nothing out again: segments
    /// of at most half `SEGMENT_MAX` slots at `SPLIT_LOAD`. A snapshot's entries come sorted by
    /// hash, and a table grown while they arrive crowds all of them into the part of the
    /// segment their hashes reached so far: one run the length of the table, laid out again
    /// twice as wide each time it overruns (restoring 2M entries took 3.6 s).
    pub fn with_capacity(n: usize) -> Self {
        if n == 0 {
            return Table::default();
        }
        let mut depth = 0;
        while (n >> depth) > SEGMENT_MAX / 2 {
            depth += 1;
        }
        // Each segment gets a binomial share of the `n`: room for four deviations over the mean.
        let share = (n >> depth) + 1;
        let capacity = (share + 4 * (share as f64).sqrt() as usize) * 1000 / SPLIT_LOAD + 1;
        Table {
            directory: (0..1u32 << depth).collect(),
            depth,
            segments: (0..1usize << depth)
                .map(|_| Segment::sized(capacity, depth))
                .collect(),
            len: 0,
            growth: Growth::Doubling,
        }
    }

    /// How segments grow from now on. A table switched to `Growth::Compact` lays out again, at
    /// `RELAID_LOAD`, the segments doubling left emptier than that, so that it holds its slots
    /// as tightly as a table that always grew compactly (an index just past the switch held up
    /// to 59 bytes per entry without it).
    pub fn set_growth(&mut self, growth: Growth) {
        if growth == Growth::Compact && self.growth == Growth::Doubling {
            self.relayout_below(RELAID_LOAD, RELAID_LOAD);
        }
        self.growth = growth;
    }

    #[cfg(test)]
    pub fn growth(&self) -> Growth {
        self.growth
    }

    /// An empty table that grows as this one does.
    pub fn emptied(&self) -> Self {
        Table {
            growth: self.growth,
            ..Table::default()
        }
    }

    /// Lays out again the segments left far emptier than a relayout makes them (after filling
    /// a table sized for more than it got).
    pub fn fit(&mut self) {
        self.relayout_below(RELAID_LOAD - 100, SPLIT_LOAD);
    }

    /// Lays out again, at load `to` (per mille), every segment less full than `below`.
    fn relayout_below(&mut self, below: usize, to: usize) {
        for segment in &mut self.segments {
            if segment.capacity > MIN_CAPACITY && segment.len * 1000 < segment.capacity * below {
                *segment = segment.relayout(segment.len * 1000 / to, |_| true, None);
            }
        }
    }

    /// Number of occupied slots.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes held by the slot arrays and the directory.
    pub fn allocated_bytes(&self) -> usize {
        self.segments
            .iter()
            .map(|s| s.slots.capacity() * std::mem::size_of::<S>())
            .sum::<usize>()
            + self.segments.capacity() * std::mem::size_of::<Segment<S>>()
            + self.directory.capacity() * 4
    }

    #[inline]
    fn segment_of(&self, hash: u64) -> u32 {
        self.directory[(hash & ((1u64 << self.depth) - 1)) as usize]
    }

    /// Where the slot of `hash` is (`Ok`), or where it would be inserted (`Err`, for
    /// [`Table::insert_vacant`] before any other change): one probe for "update or insert".
    #[inline]
    pub fn lookup(&self, hash: u64) -> Result<Pos, Pos> {
        let segment = self.segment_of(hash);
        match self.segments[segment as usize].search(hash) {
            Ok(slot) => Ok(Pos {
                segment,
                slot: slot as u32,
            }),
            Err(slot) => Err(Pos {
                segment,
                slot: slot as u32,
            }),
        }
    }

    /// Inserts a slot at the vacancy [`Table::lookup`] returned for its hash (no change to the
    /// table in between).
    pub fn insert_vacant(&mut self, at: Pos, slot: S) {
        let segment = at.segment as usize;
        debug_assert_eq!(self.segment_of(slot.hash()), at.segment);
        self.segments[segment].insert_at(at.slot as usize, slot, self.growth);
        self.len += 1;
        if self.segments[segment].len >= SEGMENT_MAX {
            self.split(segment);
        }
    }

    /// Where the slot of `hash` is.
    #[inline]
    pub fn find(&self, hash: u64) -> Option<Pos> {
        let segment = self.segment_of(hash);
        let slot = self.segments[segment as usize].find(hash)?;
        Some(Pos {
            segment,
            slot: slot as u32,
        })
    }

    /// Starts fetching the home slot of `hash`: callers do this some blocks ahead of the lookup
    /// (see `core::PREFETCH_AHEAD`), so the processor fetches several blocks' slots in parallel
    /// while it applies the ones before, and the real lookups then hit the cache. A
    /// prefetch, not a load: a load that misses holds up the loads behind it once the
    /// processor's reorder window fills (a few dozen instructions per block), so loads
    /// overlapped only a few blocks' misses, and at fleet sizes (2M entries) the stores ran
    /// 6-10% slower for it (see docs/benchmarks.md).
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        let segment = &self.segments[self.segment_of(hash) as usize];
        let home = segment.home(hash);
        // The home slot's line and the next three: an insertion scans on to the end of the run
        // (the free slot it shifts into) and a removal to the run's end, often past two lines
        // (at a 2M-entry bound, four lines cut thread CPU by a further 4-7% over two).
        // Addresses past the array are fine for a prefetch (a hint never faults), so no bounds
        // checks: this runs for every block of every store, in both tables.
        let line = 64 / std::mem::size_of::<S>();
        let base = segment.slots.as_ptr().wrapping_add(home);
        for ahead in 0..PREFETCH_LINES {
            prefetch(base.wrapping_add(ahead * line));
        }
    }

    /// The slot at `pos`.
    #[inline]
    pub fn get(&self, pos: Pos) -> S {
        self.segments[pos.segment as usize].slots[pos.slot as usize]
    }

    /// Overwrites the slot at `pos` with a slot of the same hash.
    #[inline]
    pub fn set(&mut self, pos: Pos, slot: S) {
        let target = &mut self.segments[pos.segment as usize].slots[pos.slot as usize];
        debug_assert_eq!(target.hash(), slot.hash());
        *target = slot;
    }

    /// Inserts a slot whose hash is not in the table.
    pub fn insert_new(&mut self, slot: S) {
        let segment = self.segment_of(slot.hash()) as usize;
        self.segments[segment].insert(slot, self.growth);
        self.len += 1;
        if self.segments[segment].len >= SEGMENT_MAX {
            self.split(segment);
        }
    }

    /// Removes the slot at `pos`.
    pub fn remove(&mut self, pos: Pos) {
        self.segments[pos.segment as usize].remove_at(pos.slot as usize);
        self.len -= 1;
    }

    /// Calls `f` with every slot (plain loops: much faster than `iter` for a full pass).
    pub fn for_each(&self, mut f: impl FnMut(&S)) {
        for segment in &self.segments {
            for slot in &segment.slots {
                if slot.is_live() {
                    f(slot);
                }
            }
        }
    }

    /// Every slot, segment by segment.
    pub fn iter(&self) -> impl Iterator<Item = S> + '_ {
        self.segments.iter().flat_map(Segment::iter)
    }

    /// Changes every slot in place (`update` must keep each slot's hash).
    pub fn update_each(&mut self, mut update: impl FnMut(&mut S)) {
        for segment in &mut self.segments {
            for slot in segment.slots.iter_mut().filter(|s| s.is_live()) {
                let hash = slot.hash();
                update(slot);
                debug_assert_eq!(slot.hash(), hash);
            }
        }
    }

    /// Removes the slots for which `remove` is true, passing each to `removed` (`remove` is
    /// also asked about empty slots, and its answer for them ignored).
    pub fn remove_where(&mut self, remove: impl Fn(&S) -> bool, mut removed: impl FnMut(S)) {
        let mut len = 0;
        for segment in &mut self.segments {
            segment.remove_where(&remove, &mut removed);
            len += segment.len;
        }
        self.len = len;
    }

    /// Splits a full segment on its next hash bit, doubling the directory when needed.
    fn split(&mut self, index: usize) {
        let depth = self.segments[index].depth;
        if depth == self.depth {
            self.directory.extend_from_within(..);
            self.depth += 1;
        }
        let bit = 1u64 << depth;
        let old = &mut self.segments[index];
        old.depth = depth + 1;
        let high = old.iter().filter(|s| s.hash() & bit != 0).count();
        let upper = old.relayout(high * 1000 / SPLIT_LOAD, |s| s.hash() & bit != 0, None);
        let lower = old.relayout(
            (old.len - high) * 1000 / SPLIT_LOAD,
            |s| s.hash() & bit == 0,
            None,
        );
        let new_index = self.segments.len() as u32;
        self.segments[index] = lower;
        self.segments.push(upper);
        for (i, entry) in self.directory.iter_mut().enumerate() {
            if *entry == index as u32 && (i as u64) & bit != 0 {
                *entry = new_index;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Pair(u64, u64);

    impl Slot for Pair {
        const EMPTY: Self = Pair(0, 0);
        fn is_empty(&self) -> bool {
            self.1 == 0
        }
        fn hash(&self) -> u64 {
            self.0
        }
        fn buried(self) -> Self {
            Pair(self.0, u64::MAX)
        }
        fn is_buried(&self) -> bool {
            self.1 == u64::MAX
        }
        fn or_empty(self, keep: bool) -> Self {
            if keep {
                self
            } else {
                Self::EMPTY
            }
        }
    }

    #[test]
    fn mix_is_a_bijection() {
        for k in [0, 1, 2, u64::MAX, 1 << 63, 0x1234_5678_9abc_def0] {
            assert_eq!(unmix(mix(k)), k);
        }
        let mut state = 7u64;
        for _ in 0..100_000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            assert_eq!(unmix(mix(state)), state);
        }
    }

    /// The layout every operation keeps: in each segment, the live slots and tombstones in
    /// increasing hash order, each at or after its home with no empty slot between, and the
    /// counts right.
    fn assert_laid_out(table: &Table<Pair>) {
        for segment in &table.segments {
            let mut previous = None;
            let mut last_empty = None;
            let (mut live, mut dead) = (0, 0);
            for (pos, slot) in segment.slots.iter().enumerate() {
                if slot.is_empty() {
                    last_empty = Some(pos);
                    continue;
                }
                let home = segment.home(slot.hash());
                assert!(previous < Some(slot.hash()), "slots out of order at {pos}");
                assert!(home <= pos, "a slot before its home at {pos}");
                assert!(
                    last_empty.is_none_or(|e| e < home),
                    "a run broken before {pos}"
                );
                previous = Some(slot.hash());
                live += slot.is_live() as usize;
                dead += slot.is_buried() as usize;
            }
            assert_eq!((live, dead), (segment.len, segment.dead));
        }
    }

    /// Capacities a segment passes through while 1,000 slots go in (fewer than a unit-test
    /// segment splits at): doubling past 0.88 under `Growth::Doubling`, 1.17x under
    /// `Growth::Compact`; either way it holds every slot.
    fn capacities_while_filling(growth: Growth) -> Vec<usize> {
        let mut table: Table<Pair> = Table::default();
        table.set_growth(growth);
        let mut seen = vec![];
        for k in 1..=1_000u64 {
            table.insert_new(Pair(mix(k), k));
            let capacity = table.segments[0].capacity;
            if seen.last() != Some(&capacity) {
                seen.push(capacity);
            }
        }
        assert_eq!(table.segments.len(), 1);
        assert_laid_out(&table);
        assert!((1..=1_000u64).all(|k| table.find(mix(k)).is_some()));
        seen
    }

    #[test]
    fn tables_double_until_told_to_grow_compactly() {
        let doubling = capacities_while_filling(Growth::Doubling);
        let compact = capacities_while_filling(Growth::Compact);
        let ratios = |c: &[usize]| -> Vec<f64> {
            c.windows(2)
                .skip(1)
                .map(|w| w[1] as f64 / w[0] as f64)
                .collect()
        };
        assert!(
            ratios(&doubling).iter().all(|&r| (1.9..2.1).contains(&r)),
            "{doubling:?}"
        );
        assert!(
            ratios(&compact).iter().all(|&r| (1.1..1.25).contains(&r)),
            "{compact:?}"
        );
        assert!(compact.len() > 2 * doubling.len());
        // A table switched to compact growth is as full as one that grew compactly.
        let mut table: Table<Pair> = Table::default();
        let load = |t: &Table<Pair>| t.segments[0].len * 1000 / t.segments[0].capacity;
        let mut n = 0;
        // Just past a doubling (at most 0.5 full) with a few hundred slots.
        while n < 200 || load(&table) > 500 {
            n += 1;
            table.insert_new(Pair(mix(n), n));
        }
        table.set_growth(Growth::Compact);
        assert!((RELAID_LOAD..=MAX_LOAD).contains(&load(&table)));
        assert_laid_out(&table);
        assert!((1..=n).all(|k| table.find(mix(k)).is_some()));
        // What a table emptied by a clear keeps: its growth.
        assert_eq!(table.emptied().growth(), Growth::Compact);
    }

    #[test]
    fn behaves_like_a_map_under_random_operations() {
        let mut table: Table<Pair> = Table::default();
        let mut model = std::collections::HashMap::new();
        let mut state = 0x1234_5678_u64;
        for step in 0..600_000u64 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // A key space several segments wide: hits, removals, re-inserts, splits.
            let hash = mix((state >> 33) % 150_000);
            match (state >> 20) % 4 {
                0 | 1 => {
                    if step % 2 == 0 {
                        match table.find(hash) {
                            Some(pos) => table.set(pos, Pair(hash, step + 1)),
                            None => table.insert_new(Pair(hash, step + 1)),
                        }
                    } else {
                        match table.lookup(hash) {
                            Ok(pos) => table.set(pos, Pair(hash, step + 1)),
                            Err(vacancy) => table.insert_vacant(vacancy, Pair(hash, step + 1)),
                        }
                    }
                    model.insert(hash, step + 1);
                }
                2 => {
                    if let Some(pos) = table.find(hash) {
                        table.remove(pos);
                    }
                    model.remove(&hash);
                }
                _ => {
                    let found = table.find(hash).map(|p| table.get(p).1);
                    assert_eq!(found, model.get(&hash).copied());
                }
            }
            if step % 50_000 == 49_999 {
                // A removal pass (as eviction's) over a sixth of the slots.
                let mut removed = Vec::new();
                table.remove_where(|p| p.1 % 6 == step % 6, |p| removed.push(p.0));
                for hash in removed {
                    assert!(model.remove(&hash).is_some_and(|v| v % 6 == step % 6));
                }
                assert!(model.values().all(|v| v % 6 != step % 6));
            }
            if step % 10_000 == 0 {
                assert_laid_out(&table);
            }
            assert_eq!(table.len(), model.len());
        }
        assert_laid_out(&table);
        let mut all: Vec<_> = table.iter().map(|p| (p.0, p.1)).collect();
        all.sort_unstable();
        let mut expected: Vec<_> = model.into_iter().collect();
        expected.sort_unstable();
        assert_eq!(all, expected);
        assert!(table.segments.len() > 1);
    }

    #[test]
    fn a_presized_table_takes_sorted_input_without_growing() {
        let n = 50_000u64;
        let mut hashes: Vec<u64> = (0..n).map(mix).collect();
        hashes.sort_unstable();
        let mut table: Table<Pair> = Table::with_capacity(n as usize);
        let sized = table.allocated_bytes();
        for &h in &hashes {
            table.insert_new(Pair(h, 1));
        }
        assert_eq!(
            table.allocated_bytes(),
            sized,
            "a segment was laid out again"
        );
        assert_eq!(table.len(), n as usize);
        assert!(hashes.iter().all(|&h| table.find(h).is_some()));
        // About SPLIT_LOAD full: the slots plus each segment's spare ones and its headroom.
        let slot = std::mem::size_of::<Pair>();
        let spare = table.segments.len() * (OVERFLOW + 2 + 4 * 23 * 1000 / SPLIT_LOAD);
        assert!(sized <= (n as usize * 1000 / SPLIT_LOAD + spare) * slot + 64 * 1024);

        // Sized for ten times what it gets, then fitted: every segment as full as a relayout
        // makes it.
        let mut roomy: Table<Pair> = Table::with_capacity(10 * n as usize);
        for &h in &hashes {
            roomy.insert_new(Pair(h, 1));
        }
        let before = roomy.allocated_bytes();
        roomy.fit();
        assert!(roomy.allocated_bytes() * 4 < before);
        assert!(roomy.segments.iter().all(
            |s| s.capacity <= MIN_CAPACITY || s.len * 1000 >= s.capacity * (RELAID_LOAD - 100)
        ));
        assert!(hashes.iter().all(|&h| roomy.find(h).is_some()));
    }

    #[test]
    fn consecutive_keys_splits_and_retain() {
        let mut table: Table<Pair> = Table::default();
        for k in 0..200_000u64 {
            table.insert_new(Pair(mix(k), k + 1));
        }
        assert!(table.segments.len() >= 200_000 / SEGMENT_MAX);
        assert!(table.segments.iter().all(|s| s.len < SEGMENT_MAX));
        table.remove_where(|p| !unmix(p.0).is_multiple_of(3), |_| {});
        assert_eq!(table.len(), 66_667);
        for k in 0..200_000u64 {
            assert_eq!(table.find(mix(k)).is_some(), k % 3 == 0);
        }
    }
}
