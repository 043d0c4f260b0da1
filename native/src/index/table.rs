//! An open-addressing hash table of fixed-size slots keyed by a 64-bit value: Robin Hood linear
//! probing, no wrap-around, any capacity (not only powers of two).
//!
//! Why not `std::collections::HashMap`: its capacity doubles, so its load factor swings between
//! 7/16 and 7/8 and a table just past a doubling costs twice the memory per element; the
//! index's memory budget (48 bytes per (worker, block) entry, all structures included) cannot
//! absorb that. Here the capacity grows by 5/4 and the load stays between 0.7 and 0.875.
//!
//! - The home slot of a key is `(mix(key) * capacity) >> 64` ("fastrange"), which is monotonic
//!   in the mixed hash, so with Robin Hood ordering the slots are sorted by home. Lookups stop
//!   at the first slot whose home lies past theirs, and a rebuild reads the old slots in order
//!   and writes the new ones nearly sequentially.
//! - There is no wrap-around: `OVERFLOW` spare slots follow the last home slot; a probe that
//!   would run past them grows the table instead (it never happens at these loads in practice).
//! - Deletion shifts the following displaced slots back (no tombstones).

/// Spare slots after the last home slot (see the module docs).
const OVERFLOW: usize = 48;
/// Smallest capacity (home slots) of a table.
const MIN_CAPACITY: usize = 8;

/// One slot's contents. The empty slot is a reserved bit pattern of the slot itself.
pub(crate) trait Slot: Copy {
    /// The empty slot.
    const EMPTY: Self;
    /// Whether this slot holds nothing.
    fn is_empty(&self) -> bool;
    /// The slot's key.
    fn key(&self) -> u64;
}

/// The 64-bit finalizer of MurmurHash3: keys here are often already hashes, but engine hashes in
/// tests and synthetic loads can be small consecutive integers, which must not cluster.
#[inline]
pub(crate) fn mix(key: u64) -> u64 {
    let mut h = key;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The table (see the module docs).
#[derive(Clone)]
pub(crate) struct RhTable<S: Slot> {
    slots: Vec<S>,
    capacity: usize,
    len: usize,
}

impl<S: Slot> Default for RhTable<S> {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl<S: Slot> RhTable<S> {
    /// A table that holds `n` slots without growing.
    pub fn with_capacity(n: usize) -> Self {
        let capacity = (n + n / 7 + 1).max(MIN_CAPACITY);
        RhTable {
            slots: vec![S::EMPTY; capacity + OVERFLOW],
            capacity,
            len: 0,
        }
    }

    /// Number of occupied slots.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes held by the slot array.
    pub fn allocated_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<S>()
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        ((hash as u128 * self.capacity as u128) >> 64) as usize
    }

    /// Where `key` (whose `mix` is `hash`) is stored.
    #[inline]
    pub fn find(&self, key: u64, hash: u64) -> Option<usize> {
        let home = self.home(hash);
        let mut pos = home;
        while pos < self.slots.len() {
            let slot = self.slots[pos];
            if slot.is_empty() {
                return None;
            }
            if slot.key() == key {
                return Some(pos);
            }
            if self.home(mix(slot.key())) > home {
                return None;
            }
            pos += 1;
        }
        None
    }

    /// The slot at `pos` (occupied or not).
    #[inline]
    pub fn get(&self, pos: usize) -> S {
        self.slots[pos]
    }

    /// Overwrites the occupied slot at `pos` with a slot of the same key.
    #[inline]
    pub fn set(&mut self, pos: usize, slot: S) {
        debug_assert_eq!(self.slots[pos].key(), slot.key());
        self.slots[pos] = slot;
    }

    /// Inserts a slot whose key is not in the table.
    pub fn insert_new(&mut self, slot: S, hash: u64) {
        if (self.len + 1) * 8 > self.capacity * 7 {
            self.rebuild(self.capacity + self.capacity / 4 + 1);
        }
        let mut carried = (slot, hash);
        while let Err(left) = self.place(carried.0, carried.1) {
            // The probe ran past the spare slots: grow and place what was left over.
            self.rebuild(self.capacity * 2);
            carried = (left, mix(left.key()));
        }
        self.len += 1;
    }

    /// Robin Hood placement; `Err` returns the slot that found no room.
    fn place(&mut self, slot: S, hash: u64) -> Result<(), S> {
        let mut carried = slot;
        let mut carried_home = self.home(hash);
        let mut pos = carried_home;
        while pos < self.slots.len() {
            let resident = self.slots[pos];
            if resident.is_empty() {
                self.slots[pos] = carried;
                return Ok(());
            }
            let resident_home = self.home(mix(resident.key()));
            if resident_home > carried_home {
                self.slots[pos] = carried;
                carried = resident;
                carried_home = resident_home;
            }
            pos += 1;
        }
        Err(carried)
    }

    /// Removes the slot at `pos` (occupied), shifting the displaced slots after it back.
    pub fn remove_at(&mut self, pos: usize) {
        let mut hole = pos;
        loop {
            let next = hole + 1;
            let shift = next < self.slots.len() && {
                let s = self.slots[next];
                !s.is_empty() && self.home(mix(s.key())) <= hole
            };
            if !shift {
                self.slots[hole] = S::EMPTY;
                break;
            }
            self.slots[hole] = self.slots[next];
            hole = next;
        }
        self.len -= 1;
    }

    /// Shrinks a table that is mostly empty after removals (keeps memory proportional to size).
    pub fn maybe_shrink(&mut self) {
        if self.capacity > 4 * MIN_CAPACITY && self.len * 4 < self.capacity {
            self.rebuild(self.len * 3 / 2);
        }
    }

    /// The occupied slots, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = S> + '_ {
        self.slots.iter().copied().filter(|s| !s.is_empty())
    }

    /// Keeps the slots for which `keep` is true (a rebuild), sized for what remains.
    pub fn retain(&mut self, mut keep: impl FnMut(&S) -> bool) {
        let kept: Vec<S> = self.iter().filter(|s| keep(s)).collect();
        let mut table = Self::with_capacity(kept.len());
        for slot in kept {
            table.insert_new(slot, mix(slot.key()));
        }
        *self = table;
    }

    /// Moves every slot into a table of `capacity` home slots (at least what fits the load).
    fn rebuild(&mut self, capacity: usize) {
        let capacity = capacity.max(self.len + self.len / 7 + 1).max(MIN_CAPACITY);
        let old = std::mem::replace(
            self,
            RhTable {
                slots: vec![S::EMPTY; capacity + OVERFLOW],
                capacity,
                len: 0,
            },
        );
        for slot in old.slots.into_iter().filter(|s| !s.is_empty()) {
            // Old slots come sorted by home, so these placements land at or near the end of
            // the occupied run: sequential writes.
            self.insert_new(slot, mix(slot.key()));
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
        fn key(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn behaves_like_a_map_under_random_operations() {
        let mut table: RhTable<Pair> = RhTable::default();
        let mut model = std::collections::HashMap::new();
        let mut state = 0x1234_5678_u64;
        for step in 0..200_000u64 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Small key space: many hits, removals and re-inserts.
            let key = (state >> 33) % 5000;
            let hash = mix(key);
            match (state >> 20) % 4 {
                0 | 1 => {
                    if let Some(pos) = table.find(key, hash) {
                        table.set(pos, Pair(key, step + 1));
                    } else {
                        table.insert_new(Pair(key, step + 1), hash);
                    }
                    model.insert(key, step + 1);
                }
                2 => {
                    if let Some(pos) = table.find(key, hash) {
                        table.remove_at(pos);
                        table.maybe_shrink();
                    }
                    model.remove(&key);
                }
                _ => {
                    let found = table.find(key, hash).map(|p| table.get(p).1);
                    assert_eq!(found, model.get(&key).copied());
                }
            }
            assert_eq!(table.len(), model.len());
        }
        let mut all: Vec<_> = table.iter().map(|p| (p.0, p.1)).collect();
        all.sort_unstable();
        let mut expected: Vec<_> = model.into_iter().collect();
        expected.sort_unstable();
        assert_eq!(all, expected);
    }

    #[test]
    fn consecutive_keys_and_retain() {
        let mut table: RhTable<Pair> = RhTable::default();
        for k in 0..100_000u64 {
            table.insert_new(Pair(k, k + 1), mix(k));
        }
        table.retain(|p| p.0 % 3 == 0);
        assert_eq!(table.len(), 33_334);
        for k in 0..100_000u64 {
            assert_eq!(table.find(k, mix(k)).is_some(), k % 3 == 0);
        }
    }
}
