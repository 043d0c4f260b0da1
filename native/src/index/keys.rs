//! Index key -> the workers holding it, per medium.
//!
//! One slot per distinct key: the mixed key (see [`super::table::mix`]) and a 32-bit holder
//! code (see [`super::holders`]), 12 bytes (`packed(4)`). Every method takes keys already mixed
//! (`hkey`): the workers' entries store them that way, so nothing is hashed twice.
//!
//! A worker may hold one key through two engine hashes (the same placeholder tokens with two
//! images): the first hold sets its bit, further holds are counted in `extra_holds`, and a
//! release first consumes those, exactly like the Python index's `_extra_holds`.

use std::collections::HashMap;

use super::holders::{Holders, MultiPool, MultiRecord, Summary};
use super::table::{Growth, Slot, Table};

/// One key and its holder code.
#[derive(Clone, Copy)]
#[repr(C, packed(4))]
pub(crate) struct KeySlot {
    hkey: u64,
    holders: u32,
}

impl Slot for KeySlot {
    const EMPTY: Self = KeySlot {
        hkey: 0,
        holders: 0,
    };
    #[inline]
    fn is_empty(&self) -> bool {
        self.holders == 0
    }
    #[inline]
    fn hash(&self) -> u64 {
        self.hkey
    }
    /// A holder code no key has: one worker (1) in no medium.
    fn buried(self) -> Self {
        KeySlot {
            hkey: self.hkey,
            holders: BURIED,
        }
    }
    #[inline]
    fn is_buried(&self) -> bool {
        self.holders == BURIED
    }
    #[inline]
    fn or_empty(self, keep: bool) -> Self {
        let mask = 0u64.wrapping_sub(keep as u64);
        KeySlot {
            hkey: self.hkey & mask,
            holders: self.holders & mask as u32,
        }
    }
}

/// The holder code of a removed key's tombstone (`Holders::One` always has a medium).
const BURIED: u32 = 1 << 8;

/// The key table (see the module docs).
#[derive(Clone, Default)]
pub(crate) struct KeyTable {
    table: Table<KeySlot>,
    pool: MultiPool,
    /// Worker -> (mixed key, medium) -> holds beyond the first; per worker, so a clear forgets its
    /// own without reading every worker's (0.57 ms per clear with 300k of another's).
    extra_holds: HashMap<u32, HashMap<(u64, u8), u32>>,
}

impl KeyTable {
    /// An empty key table with room for `n` keys (see [`Table::with_capacity`]); [`KeyTable::fit`]
    /// sizes it down to the keys it got.
    pub fn with_capacity(n: usize) -> Self {
        KeyTable {
            table: Table::with_capacity(n),
            ..KeyTable::default()
        }
    }

    /// See [`Table::fit`].
    pub fn fit(&mut self) {
        self.table.fit();
    }

    /// How the table grows from now on (see [`Growth`]).
    pub fn set_growth(&mut self, growth: Growth) {
        self.table.set_growth(growth);
    }

    #[cfg(test)]
    pub fn growth(&self) -> Growth {
        self.table.growth()
    }

    /// Distinct keys held by anyone.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// The holders of a key.
    #[inline]
    pub fn holders(&self, hkey: u64) -> Holders {
        match self.table.find(hkey) {
            Some(pos) => Holders::decode(self.table.get(pos).holders),
            None => Holders::Nobody,
        }
    }

    /// Starts fetching the table memory of a (mixed) key ahead of use (see `Table::prefetch`).
    #[inline]
    pub fn prefetch(&self, hkey: u64) {
        self.table.prefetch(hkey)
    }

    /// The bitsets behind `Holders::Many`.
    #[inline]
    pub fn record(&self, index: u32) -> &MultiRecord {
        self.pool.get(index)
    }

    /// Adds one hold of a key by `worker` in medium `m`.
    pub fn add_hold(&mut self, hkey: u64, worker: u32, m: usize) {
        let table = &mut self.table;
        let bit = 1u8 << m;
        let pos = match table.lookup(hkey) {
            Ok(pos) => pos,
            Err(vacancy) => {
                let holders = Holders::One { worker, media: bit }.encode();
                table.insert_vacant(vacancy, KeySlot { hkey, holders });
                return;
            }
        };
        let fresh = match Holders::decode(table.get(pos).holders) {
            Holders::One { worker: w, media } if w == worker => {
                let code = Holders::One {
                    worker,
                    media: media | bit,
                }
                .encode();
                table.set(
                    pos,
                    KeySlot {
                        hkey,
                        holders: code,
                    },
                );
                media & bit == 0
            }
            Holders::One { worker: w, media } => {
                let index = self.pool.create(w, media, worker, m);
                table.set(
                    pos,
                    KeySlot {
                        hkey,
                        holders: Holders::Many(index).encode(),
                    },
                );
                true
            }
            Holders::Many(index) => self.pool.set(index, worker, m),
            Holders::Nobody => unreachable!("occupied key slot with no holders"),
        };
        if !fresh {
            *self
                .extra_holds
                .entry(worker)
                .or_default()
                .entry((hkey, m as u8))
                .or_insert(0) += 1;
        }
    }

    /// Releases one hold of a key by `worker` in medium `m`.
    pub fn release(&mut self, hkey: u64, worker: u32, m: usize) {
        if let Some(mine) = self.extra_holds.get_mut(&worker) {
            let hold = (hkey, m as u8);
            if let Some(extra) = mine.get_mut(&hold) {
                *extra -= 1;
                if *extra == 0 {
                    mine.remove(&hold);
                    if mine.is_empty() {
                        self.extra_holds.remove(&worker);
                    }
                }
                return;
            }
        }
        self.update(hkey, |pool, holders| match holders {
            Holders::One { worker: w, media } if w == worker => {
                let media = media & !(1u8 << m);
                Some(if media == 0 {
                    Holders::Nobody
                } else {
                    Holders::One { worker, media }
                })
            }
            Holders::Many(index) => {
                pool.get_mut(index).clear(worker, m);
                Some(settle(pool, index))
            }
            _ => None,
        });
    }

    /// Drops every hold of a key by `worker` (its extra holds are purged by `purge_extras`).
    pub fn remove_worker(&mut self, hkey: u64, worker: u32) {
        self.update(hkey, |pool, holders| match holders {
            Holders::One { worker: w, .. } if w == worker => Some(Holders::Nobody),
            Holders::Many(index) => {
                pool.get_mut(index).clear_worker(worker);
                Some(settle(pool, index))
            }
            _ => None,
        });
    }

    /// Forgets the extra holds of a worker being cleared.
    pub fn purge_extras(&mut self, worker: u32) {
        self.extra_holds.remove(&worker);
    }

    /// Applies `change` to the holders of a key (when it is held); `None` = unchanged.
    fn update(
        &mut self,
        hkey: u64,
        change: impl FnOnce(&mut MultiPool, Holders) -> Option<Holders>,
    ) {
        // `lookup`'s search, not `find`'s: a released key is often some slots past its home
        // (the eviction bound keeps the table full), where the window's search is faster.
        let Ok(pos) = self.table.lookup(hkey) else {
            return;
        };
        match change(&mut self.pool, Holders::decode(self.table.get(pos).holders)) {
            None => {}
            Some(Holders::Nobody) => self.table.remove(pos),
            Some(holders) => self.table.set(
                pos,
                KeySlot {
                    hkey,
                    holders: holders.encode(),
                },
            ),
        }
    }

    /// Bytes of the shared keys' worker bitsets.
    pub fn shared_bits_bytes(&self) -> usize {
        self.pool.bits_bytes()
    }

    /// Bytes held by the tables, the shared-key records and the extra-hold map.
    pub fn allocated_bytes(&self) -> usize {
        self.table.allocated_bytes()
            + self.pool.allocated_bytes()
            + self.extra_holds.capacity() * 48
            + self
                .extra_holds
                .values()
                .map(|mine| mine.capacity() * 24)
                .sum::<usize>()
    }
}

/// The holders of a shared record after a change; returns the record to the pool when it no
/// longer holds several workers.
fn settle(pool: &mut MultiPool, index: u32) -> Holders {
    match pool.get(index).summarize() {
        Summary::Many => Holders::Many(index),
        Summary::One(worker, media) => {
            pool.release(index);
            Holders::One { worker, media }
        }
        Summary::Nobody => {
            pool.release(index);
            Holders::Nobody
        }
    }
}
