//! Index key -> the workers holding it, per medium.
//!
//! One slot per distinct key: the 64-bit key and a 32-bit holder code (see [`super::holders`]),
//! 12 bytes (`packed(4)`). The table is split into 64 shards by the low bits of the mixed key so
//! that a growth step rebuilds 1/64 of the keys at a time (a write lock held for a fraction of a
//! millisecond instead of tens of milliseconds at 4M keys).
//!
//! A worker may hold one key through two engine hashes (the same placeholder tokens with two
//! images): the first hold sets its bit, further holds are counted in `extra_holds`, and a
//! release first consumes those, exactly like the Python index's `_extra_holds`.

use std::collections::HashMap;

use super::holders::{Holders, MultiPool, MultiRecord, Summary};
use super::table::{mix, RhTable, Slot};

const SHARD_BITS: u32 = 6;
const SHARDS: usize = 1 << SHARD_BITS;

/// One key and its holder code.
#[derive(Clone, Copy)]
#[repr(C, packed(4))]
pub(crate) struct KeySlot {
    key: u64,
    holders: u32,
}

impl Slot for KeySlot {
    const EMPTY: Self = KeySlot { key: 0, holders: 0 };
    #[inline]
    fn is_empty(&self) -> bool {
        self.holders == 0
    }
    #[inline]
    fn key(&self) -> u64 {
        self.key
    }
}

/// The key table (see the module docs).
#[derive(Clone)]
pub(crate) struct KeyTable {
    shards: Vec<RhTable<KeySlot>>,
    pool: MultiPool,
    /// (key, worker, medium) -> holds beyond the first.
    extra_holds: HashMap<(u64, u32, u8), u32>,
}

impl Default for KeyTable {
    fn default() -> Self {
        KeyTable {
            shards: (0..SHARDS).map(|_| RhTable::default()).collect(),
            pool: MultiPool::default(),
            extra_holds: HashMap::new(),
        }
    }
}

impl KeyTable {
    #[inline]
    fn shard(hash: u64) -> usize {
        (hash & (SHARDS as u64 - 1)) as usize
    }

    /// Distinct keys held by anyone.
    pub fn len(&self) -> usize {
        self.shards.iter().map(RhTable::len).sum()
    }

    /// The holders of `key`.
    #[inline]
    pub fn holders(&self, key: u64) -> Holders {
        let hash = mix(key);
        let table = &self.shards[Self::shard(hash)];
        match table.find(key, hash) {
            Some(pos) => Holders::decode(table.get(pos).holders),
            None => Holders::Nobody,
        }
    }

    /// The bitsets behind `Holders::Many`.
    #[inline]
    pub fn record(&self, index: u32) -> &MultiRecord {
        self.pool.get(index)
    }

    /// Adds one hold of `key` by `worker` in medium `m`.
    pub fn add_hold(&mut self, key: u64, worker: u32, m: usize) {
        let hash = mix(key);
        let table = &mut self.shards[Self::shard(hash)];
        let bit = 1u8 << m;
        let Some(pos) = table.find(key, hash) else {
            let holders = Holders::One { worker, media: bit }.encode();
            table.insert_new(KeySlot { key, holders }, hash);
            return;
        };
        let fresh = match Holders::decode(table.get(pos).holders) {
            Holders::One { worker: w, media } if w == worker => {
                let code = Holders::One {
                    worker,
                    media: media | bit,
                }
                .encode();
                table.set(pos, KeySlot { key, holders: code });
                media & bit == 0
            }
            Holders::One { worker: w, media } => {
                let index = self.pool.create(w, media, worker, m);
                table.set(
                    pos,
                    KeySlot {
                        key,
                        holders: Holders::Many(index).encode(),
                    },
                );
                true
            }
            Holders::Many(index) => self.pool.get_mut(index).set(worker, m),
            Holders::Nobody => unreachable!("occupied key slot with no holders"),
        };
        if !fresh {
            *self.extra_holds.entry((key, worker, m as u8)).or_insert(0) += 1;
        }
    }

    /// Releases one hold of `key` by `worker` in medium `m`.
    pub fn release(&mut self, key: u64, worker: u32, m: usize) {
        if !self.extra_holds.is_empty() {
            let hold = (key, worker, m as u8);
            if let Some(extra) = self.extra_holds.get_mut(&hold) {
                *extra -= 1;
                if *extra == 0 {
                    self.extra_holds.remove(&hold);
                }
                return;
            }
        }
        self.update(key, |pool, holders| match holders {
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

    /// Drops every hold of `key` by `worker` (its extra holds are purged by `purge_extras`).
    pub fn remove_worker(&mut self, key: u64, worker: u32) {
        self.update(key, |pool, holders| match holders {
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
        if !self.extra_holds.is_empty() {
            self.extra_holds.retain(|hold, _| hold.1 != worker);
        }
    }

    /// Applies `change` to the holders of `key` (when it is held); `None` = unchanged.
    fn update(
        &mut self,
        key: u64,
        change: impl FnOnce(&mut MultiPool, Holders) -> Option<Holders>,
    ) {
        let hash = mix(key);
        let table = &mut self.shards[Self::shard(hash)];
        let Some(pos) = table.find(key, hash) else {
            return;
        };
        match change(&mut self.pool, Holders::decode(table.get(pos).holders)) {
            None => {}
            Some(Holders::Nobody) => {
                table.remove_at(pos);
                table.maybe_shrink();
            }
            Some(holders) => table.set(
                pos,
                KeySlot {
                    key,
                    holders: holders.encode(),
                },
            ),
        }
    }

    /// Bytes held by the tables, the shared-key records and the extra-hold map.
    pub fn allocated_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(RhTable::allocated_bytes)
            .sum::<usize>()
            + self.pool.allocated_bytes()
            + self.extra_holds.capacity() * 24
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
