//! The whole index state as one compact binary buffer, and back (for a replica catching up).
//!
//! Layout (little-endian), version 1 or 2:
//!
//! ```text
//! magic "SCKVIDX1" | u32 version
//! u8 has_block_size | u32 block_size
//! (version 2 only) u8 has_lookahead | u32 lookahead
//! u64 max_blocks | i64 group_idx
//! u32 spec_len | spec JSON (0 bytes in content mode)
//! 8 x u64 stats | u64 next_order
//! u8 media | per medium: u16 len, UTF-8 name
//! u32 workers | per worker: u32 len, UTF-8 name, u64 order, u32 entries,
//!               per entry: u64 engine hash, u64 key, u32 stamp << 8 | media mask
//! u64 XXH3-64 of everything before
//! ```
//!
//! Version 2 records the content mode's lookahead (vLLM's lookahead hashing: a restored index must
//! key requests over the same windows). A snapshot whose lookahead is what a version-1 snapshot
//! reads as (none in engine mode or before a block size is known, 0 otherwise) is still written
//! as version 1, so replicas that predate version 2 read it; everything else is version 2.
//!
//! Only the workers' entries are stored: who holds each key (and the extra holds) follows from
//! them and is rebuilt on load, so a snapshot is about 20 bytes per (worker, block) entry.

use xxhash_rust::xxh3::xxh3_64;

use super::core::{Index, COMPACT_FROM};
use super::holders::MAX_MEDIA;
use super::table::Growth;

/// Workers a snapshot may hold (`router_adapter/index.py` refuses the same).
pub(crate) const MAX_SNAPSHOT_WORKERS: usize = 1 << 16;
/// What a restore lets shared keys' worker bitsets take: this many bytes per block of the
/// index's bound (a snapshot's own size limit in `router_adapter/nats_feed.py`), plus a fixed
/// allowance.
const SHARED_BITS_PER_BLOCK: usize = 64;
const SHARED_BITS_FIXED: usize = 64 << 20;
use super::keys::KeyTable;
use super::table::mix;
use super::worker::{Entry, Worker, MAX_WORKER_BLOCKS};
use super::Stats;
use crate::error::{Error, Result};
use crate::hash::{HashSpec, MAX_LOOKAHEAD};

const MAGIC: &[u8; 8] = b"SCKVIDX1";
const VERSION: u32 = 2;

impl Index {
    /// The state as bytes (see the module docs).
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.blocks as usize * 20);
        out.extend_from_slice(MAGIC);
        let engine = self.options.engine_spec.is_some();
        let version = if self.lookahead == v1_lookahead(engine, self.block_size) {
            1
        } else {
            VERSION
        };
        out.extend_from_slice(&version.to_le_bytes());
        out.push(self.block_size.is_some() as u8);
        out.extend_from_slice(&self.block_size.unwrap_or(0).to_le_bytes());
        if version >= 2 {
            out.push(self.lookahead.is_some() as u8);
            out.extend_from_slice(&self.lookahead.unwrap_or(0).to_le_bytes());
        }
        out.extend_from_slice(&self.options.max_blocks.to_le_bytes());
        out.extend_from_slice(&self.options.group_idx.to_le_bytes());
        let spec = self.options.engine_spec_json.as_deref().unwrap_or("");
        put_bytes32(&mut out, spec.as_bytes());
        for value in self.stats.as_array() {
            out.extend_from_slice(&value.to_le_bytes());
        }
        out.extend_from_slice(&self.next_order.to_le_bytes());
        out.push(self.media.len() as u8);
        for name in &self.media {
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
        }
        let workers: Vec<&Worker> = self.workers.iter().flatten().collect();
        out.extend_from_slice(&(workers.len() as u32).to_le_bytes());
        for w in workers {
            put_bytes32(&mut out, w.name.as_bytes());
            out.extend_from_slice(&w.order.to_le_bytes());
            out.extend_from_slice(&(w.len() as u32).to_le_bytes());
            for e in w.entries() {
                out.extend_from_slice(&e.engine_hash().to_le_bytes());
                out.extend_from_slice(&e.key().to_le_bytes());
                out.extend_from_slice(&((e.stamp() << 8) | e.media() as u32).to_le_bytes());
            }
        }
        let checksum = xxh3_64(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
        out
    }

    /// Replaces the state with a snapshot's. The snapshot must come from an index of the same
    /// mode, engine spec, group and (when configured here) block size; this index keeps its own
    /// `max_blocks`. Nothing changes when the snapshot is refused.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        let loaded = parse(bytes).map_err(|e| e.context("snapshot"))?;
        self.check_compatible(&loaded)?;
        // Sized for one key per entry (most keys have one holder), then fitted to the keys.
        let entries = loaded.workers.iter().map(Worker::len).sum();
        let mut keys = KeyTable::with_capacity(entries);
        let mut blocks = 0u64;
        // A shared key's worker bitsets are as wide as its highest holder's id, per medium: a
        // snapshot of a million empty workers and keys shared with the last of them took a
        // megabyte per 40 bytes of entries, and aborted the process. What they may take is
        // what this index's own bound sizes a snapshot at.
        let budget = SHARED_BITS_PER_BLOCK
            .saturating_mul(self.options.max_blocks as usize)
            .saturating_add(SHARED_BITS_FIXED);
        for (id, worker) in loaded.workers.iter().enumerate() {
            for e in worker.entries() {
                for m in 0..MAX_MEDIA {
                    if e.media() & (1 << m) != 0 {
                        keys.add_hold(e.hkey(), id as u32, m);
                    }
                }
                if keys.shared_bits_bytes() > budget {
                    return Err(Error::invalid_argument(format!(
                        "snapshot: its shared keys' worker sets take more than {budget} bytes \
                         ({SHARED_BITS_PER_BLOCK} per block of this index's bound, plus \
                         {SHARED_BITS_FIXED}): not an index's"
                    )));
                }
            }
            blocks += worker.len() as u64;
        }
        keys.fit();
        self.block_size = loaded.block_size.or(self.block_size);
        self.lookahead = loaded.lookahead.or(self.lookahead);
        self.stats = loaded.stats;
        self.by_name = loaded
            .workers
            .iter()
            .enumerate()
            .map(|(id, w)| (w.name.clone(), id as u32))
            .collect();
        self.workers = loaded.workers.into_iter().map(Some).collect();
        self.free_ids.clear();
        self.next_order = loaded.next_order;
        self.media = loaded.media;
        self.keys = keys;
        self.blocks = blocks;
        self.set_growth(if blocks >= COMPACT_FROM {
            Growth::Compact
        } else {
            Growth::Doubling
        });
        self.rate = Default::default();
        // A snapshot of an index with a larger bound (another replica's --kv-max-blocks): held to
        // this one's at once, as the next apply would, not only when the next event comes.
        if self.blocks > self.options.max_blocks {
            self.evict();
        }
        Ok(())
    }

    fn check_compatible(&self, loaded: &Loaded) -> Result<()> {
        let refuse = |what: &str| {
            Err(Error::failed_precondition(format!(
                "snapshot: taken from an index with another {what}"
            )))
        };
        if loaded.engine_spec.as_ref() != self.options.engine_spec.as_ref() {
            return refuse("mode or engine spec");
        }
        if loaded.group_idx != self.options.group_idx {
            return refuse("group_idx");
        }
        if let (Some(ours), Some(theirs)) = (self.options.lookahead, loaded.lookahead) {
            if ours != theirs {
                // Its keys cover other windows: none would match a request keyed here.
                return refuse("lookahead");
            }
        }
        match (self.options.block_size, loaded.block_size) {
            (Some(ours), Some(theirs)) if ours != theirs => refuse("block_size"),
            _ => Ok(()),
        }
    }
}

fn put_bytes32(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// The lookahead a version-1 snapshot (taken before lookahead was recorded) is read with: its
/// content keys covered each block alone.
fn v1_lookahead(engine: bool, block_size: Option<u32>) -> Option<u32> {
    (!engine && block_size.is_some()).then_some(0)
}

struct Loaded {
    block_size: Option<u32>,
    lookahead: Option<u32>,
    group_idx: i64,
    engine_spec: Option<HashSpec>,
    stats: Stats,
    next_order: u64,
    media: Vec<String>,
    workers: Vec<Worker>,
}

/// A bounds-checked little-endian cursor.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| Error::invalid_argument("truncated"))?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn text(&mut self, len: usize) -> Result<String> {
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| Error::invalid_argument("a name is not UTF-8"))
    }
}

fn parse(bytes: &[u8]) -> Result<Loaded> {
    let bad = |what: &str| Error::invalid_argument(what.to_owned());
    if bytes.len() < MAGIC.len() + 12 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad("not an index snapshot"));
    }
    let (body, tail) = bytes.split_at(bytes.len() - 8);
    if xxh3_64(body).to_le_bytes() != tail {
        return Err(bad("checksum mismatch (corrupt or truncated)"));
    }
    let mut c = Cursor {
        buf: body,
        pos: MAGIC.len(),
    };
    let version = c.u32()?;
    if !(1..=VERSION).contains(&version) {
        return Err(bad("unknown version"));
    }
    let has_block_size = c.u8()? != 0;
    let block_size = c.u32()?;
    let block_size = (has_block_size && block_size > 0).then_some(block_size);
    let recorded = if version >= 2 {
        let has_lookahead = c.u8()? != 0;
        let lookahead = c.u32()?;
        if lookahead > MAX_LOOKAHEAD {
            return Err(bad("lookahead past the most a spec may name"));
        }
        Some(has_lookahead.then_some(lookahead))
    } else {
        None
    };
    let _max_blocks = c.u64()?;
    let group_idx = c.u64()? as i64;
    let spec_len = c.u32()? as usize;
    let engine_spec: Option<HashSpec> = match spec_len {
        0 => None,
        n => Some(
            serde_json::from_slice(c.take(n)?).map_err(|e| bad(&format!("engine spec: {e}")))?,
        ),
    };
    let lookahead = recorded.unwrap_or_else(|| v1_lookahead(engine_spec.is_some(), block_size));
    let mut stats = [0u64; 8];
    for value in stats.iter_mut() {
        *value = c.u64()?;
        // Counted on from here: near 2^64 they wrapped to zero (counters going backwards).
        if *value >= 1 << 63 {
            return Err(bad("a statistic past 2^63"));
        }
    }
    let next_order = c.u64()?;
    let media_count = c.u8()? as usize;
    if media_count > MAX_MEDIA {
        return Err(bad("too many media"));
    }
    let mut media = Vec::with_capacity(media_count);
    for _ in 0..media_count {
        let len = c.u16()? as usize;
        let name = c.text(len)?;
        // Events name a medium: blocks held under a second slot of one name could never be
        // removed by them.
        if media.contains(&name) {
            return Err(bad("a medium named twice"));
        }
        media.push(name);
    }
    let workers = parse_workers(&mut c, media_count)?;
    if c.pos != body.len() {
        return Err(bad("trailing bytes"));
    }
    // A new worker takes `next_order` and the one after it the next: above every order here
    // (eviction breaks ties by order), with room to count on.
    let highest = workers.iter().map(|w| w.order).max();
    if highest.is_some_and(|h| next_order <= h) || next_order > u64::MAX / 2 {
        return Err(bad("next_order is not above every worker's order"));
    }
    Ok(Loaded {
        block_size,
        lookahead,
        group_idx,
        engine_spec,
        stats: Stats::from_array(stats),
        next_order,
        media,
        workers,
    })
}

fn parse_workers(c: &mut Cursor<'_>, media_count: usize) -> Result<Vec<Worker>> {
    let count = c.u32()? as usize;
    // Far past a real fleet's engines, and what keeps a restore's eviction (a pass over the
    // workers per round) and every Score's rows bounded: 800,000 one-block workers took 47 s to
    // restore, and a million empty ones 3 s per Score.
    if count > MAX_SNAPSHOT_WORKERS {
        return Err(Error::invalid_argument(format!(
            "{count} workers (a snapshot holds at most {MAX_SNAPSHOT_WORKERS})"
        )));
    }
    let mut workers: Vec<Worker> = Vec::new();
    let mut names = std::collections::HashSet::new();
    let mut orders = std::collections::HashSet::new();
    for _ in 0..count {
        let len = c.u32()? as usize;
        let name = c.text(len)?;
        if !names.insert(name.clone()) {
            return Err(Error::invalid_argument(format!(
                "worker {name:?} appears twice"
            )));
        }
        let order = c.u64()?;
        if !orders.insert(order) {
            return Err(Error::invalid_argument(format!(
                "worker {name:?}: an order another worker has"
            )));
        }
        let n = c.u32()? as usize;
        if n > MAX_WORKER_BLOCKS || n.saturating_mul(20) > c.buf.len() - c.pos {
            return Err(Error::invalid_argument(format!(
                "worker {name:?}: bad entry count"
            )));
        }
        let mut entries = Vec::with_capacity(n);
        let mut seen = std::collections::HashSet::with_capacity(n);
        for _ in 0..n {
            let (engine_hash, key, meta) = (c.u64()?, c.u64()?, c.u32()?);
            let media = meta as u8;
            if media == 0 || (media as u32) >> media_count != 0 || !seen.insert(engine_hash) {
                return Err(Error::invalid_argument(format!(
                    "worker {name:?}: bad entry"
                )));
            }
            entries.push(Entry::new(mix(engine_hash), mix(key), meta >> 8, media));
        }
        let mut worker = Worker::new(name, order);
        if !worker.restore(entries) {
            return Err(Error::invalid_argument(format!(
                "worker {:?}: two entries with one stamp",
                worker.name
            )));
        }
        workers.push(worker);
    }
    Ok(workers)
}
