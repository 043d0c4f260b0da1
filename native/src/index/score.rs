//! Longest-prefix scoring: each worker's count of leading request keys it holds, in any medium
//! and in each medium.
//!
//! The walk keeps, per walk (any medium, then each medium when there are several), the set of
//! workers still matching as a bitset over worker ids, intersects it with each key's holders and
//! records the position where a worker drops out (at most once per worker and walk). Key
//! lookups are done a chunk at a time ahead of the walk: they do not depend on each other, so
//! the processor overlaps their cache misses instead of waiting for each in turn.

use super::content::MmKey;
use super::core::Index;
use super::holders::{Holders, MultiRecord};
use super::table::mix;
use crate::error::Result;
use crate::hash::{self, MmItem};

/// Keys looked up ahead of the walk.
const CHUNK: usize = 64;

/// One worker's cached prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerScore {
    /// The worker's name.
    pub name: String,
    /// Leading blocks held in any medium.
    pub blocks: u32,
    /// Leading blocks held in each medium, in the order of [`ScoreTable::media`].
    pub by_medium: Vec<u32>,
}

/// The answer to "who holds the longest prefix of this request".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScoreTable {
    /// Tokens per block (0 while unknown).
    pub block_size: u32,
    /// The request's keys.
    pub keys: Vec<u64>,
    /// Every medium the index has seen, in order of first appearance.
    pub media: Vec<String>,
    /// Every worker, best first, then by name.
    pub workers: Vec<WorkerScore>,
}

/// What the walk needs to know about the index's shape.
struct Shape {
    /// Worker id slots.
    slots: usize,
    /// 64-bit words per worker bitset.
    words: usize,
    /// 1 (any medium) or 1 + media.
    walks: usize,
}

/// What a request runs with, besides its tokens, that its blocks' keys depend on.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestFacts<'a> {
    /// The LoRA adapter's name; empty for the base model.
    pub lora_name: &'a str,
    /// The adapter's path as the engine was given it: vLLM >= 0.31 hashes it into every block
    /// (engine mode only; content keys name the adapter by name).
    pub lora_path: &'a str,
    /// The cache salt; empty for none.
    pub cache_salt: &'a str,
    /// Multimodal items: the engine hashes them into the blocks they overlap, and so do content keys.
    pub mm_items: &'a [MmItem],
}

impl Index {
    /// The keys of a request's full blocks: content keys, or the engine's hashes in engine mode.
    pub fn request_keys(&self, tokens: &[u32], facts: &RequestFacts) -> Result<Vec<u64>> {
        request_keys(
            self.options.engine_spec.as_ref(),
            self.block_size,
            self.lookahead,
            tokens,
            facts,
        )
    }

    /// Scores precomputed request keys.
    pub fn score_keys(&self, keys: Vec<u64>) -> ScoreTable {
        let media = self.media.len();
        let slots = self.workers.len();
        let shape = Shape {
            slots,
            words: slots.div_ceil(64),
            walks: if media <= 1 { 1 } else { 1 + media },
        };
        let depth = self.walk(&keys, &shape);
        let mut workers: Vec<WorkerScore> = self
            .worker_ids()
            .map(|id| {
                let blocks = depth[id as usize];
                let by_medium = match media {
                    0 => Vec::new(),
                    1 => vec![blocks],
                    _ => (0..media)
                        .map(|m| depth[(1 + m) * slots + id as usize])
                        .collect(),
                };
                let name = self.worker(id).name.clone();
                WorkerScore {
                    name,
                    blocks,
                    by_medium,
                }
            })
            .collect();
        workers.sort_unstable_by(|a, b| b.blocks.cmp(&a.blocks).then_with(|| a.name.cmp(&b.name)));
        ScoreTable {
            block_size: self.block_size.unwrap_or(0),
            keys,
            media: self.media.clone(),
            workers,
        }
    }

    /// `depth[walk * slots + worker id]`: leading keys held (walk 0 = any medium).
    fn walk(&self, keys: &[u64], shape: &Shape) -> Vec<u32> {
        let mut depth = vec![0u32; shape.walks * shape.slots];
        let mut active = vec![0u64; shape.walks * shape.words];
        for id in self.worker_ids() {
            for w in 0..shape.walks {
                active[w * shape.words + id as usize / 64] |= 1 << (id % 64);
            }
        }
        if active.iter().all(|&a| a == 0) {
            return depth;
        }
        let mut codes = [Holders::Nobody; CHUNK];
        let mut mixed = [0u64; CHUNK];
        for (c, chunk) in keys.chunks(CHUNK).enumerate() {
            // First only prefetch each key's slots, with no branch on what they hold: a lookup's
            // probe loop branches on the slots, and one mispredicted branch discards the loads
            // issued after it, so lookups done directly would wait for each miss in turn.
            let mut sink = 0u64;
            for (hkey, &key) in mixed.iter_mut().zip(chunk) {
                *hkey = mix(key);
                self.keys.prefetch(*hkey);
            }
            for (code, &hkey) in codes.iter_mut().zip(&mixed[..chunk.len()]) {
                *code = self.keys.holders(hkey);
                if let Holders::Many(index) = *code {
                    // A shared key's bitsets are a second fetch: start it here too.
                    sink ^= self.keys.record(index).row(0).first().copied().unwrap_or(0);
                }
            }
            std::hint::black_box(sink);
            for (i, code) in codes[..chunk.len()].iter().enumerate() {
                let position = (c * CHUNK + i) as u32;
                if !self.step(*code, position, &mut active, &mut depth, shape) {
                    return depth;
                }
            }
        }
        // Workers still matching hold every key.
        let n = keys.len() as u32;
        for w in 0..shape.walks {
            record(
                &active[w * shape.words..(w + 1) * shape.words],
                n,
                &mut depth[w * shape.slots..],
            );
        }
        depth
    }

    /// Intersects each walk's matching set with the holders of key number `position`; false
    /// once nobody matches in any walk.
    fn step(
        &self,
        code: Holders,
        position: u32,
        active: &mut [u64],
        depth: &mut [u32],
        shape: &Shape,
    ) -> bool {
        let record_of = match code {
            Holders::Many(index) => Some(self.keys.record(index)),
            _ => None,
        };
        let mut anyone = false;
        for w in 0..shape.walks {
            let set = &mut active[w * shape.words..(w + 1) * shape.words];
            for (word, bits) in set.iter_mut().enumerate() {
                if *bits == 0 {
                    continue;
                }
                let present = present_word(code, record_of, w, word);
                let dropped = *bits & !present;
                if dropped != 0 {
                    record_word(dropped, word, position, &mut depth[w * shape.slots..]);
                    *bits &= present;
                }
                anyone |= *bits != 0;
            }
        }
        anyone
    }
}

/// Word `word` of the holders of a key in walk `walk` (0 = any medium, 1 + m = medium m).
#[inline]
fn present_word(code: Holders, record: Option<&MultiRecord>, walk: usize, word: usize) -> u64 {
    match code {
        Holders::Nobody => 0,
        Holders::One { worker, media } => {
            let in_walk = walk == 0 || media & (1 << (walk - 1)) != 0;
            if in_walk && worker as usize / 64 == word {
                1 << (worker % 64)
            } else {
                0
            }
        }
        Holders::Many(_) => {
            let record = record.expect("record of a shared key");
            if walk == 0 {
                (0..record.media()).fold(0, |acc, m| {
                    acc | record.row(m).get(word).copied().unwrap_or(0)
                })
            } else {
                record.row(walk - 1).get(word).copied().unwrap_or(0)
            }
        }
    }
}

fn record_word(mut bits: u64, word: usize, value: u32, depth: &mut [u32]) {
    while bits != 0 {
        depth[word * 64 + bits.trailing_zeros() as usize] = value;
        bits &= bits - 1;
    }
}

fn record(set: &[u64], value: u32, depth: &mut [u32]) {
    for (word, &bits) in set.iter().enumerate() {
        record_word(bits, word, value, depth);
    }
}

/// Request keys for an index of this configuration (callable without the index's lock);
/// `lookahead` is the content mode's (None while not known: keyed as 0).
pub fn request_keys(
    engine_spec: Option<&hash::HashSpec>,
    block_size: Option<u32>,
    lookahead: Option<u32>,
    tokens: &[u32],
    facts: &RequestFacts,
) -> Result<Vec<u64>> {
    let Some(spec) = engine_spec else {
        let Some(bs) = block_size else {
            return Ok(Vec::new());
        };
        let bs = bs as usize;
        let lookahead = lookahead.unwrap_or(0) as usize;
        // With lookahead each block is keyed over its window (its tokens and the L after them)
        // as one block of B + L tokens, and only blocks whose whole window exists count: the
        // blocks the engine has hashed.
        let windows;
        let (tokens, blocks) = if lookahead == 0 {
            (tokens, tokens.len() / bs)
        } else {
            let blocks = tokens.len().saturating_sub(lookahead) / bs;
            windows = (0..blocks)
                .flat_map(|i| &tokens[i * bs..(i + 1) * bs + lookahead])
                .copied()
                .collect::<Vec<u32>>();
            (&windows[..], blocks)
        };
        // A block's multimodal keys by the engine's rule: what a store of the same prompt carries
        // (over the same window with lookahead).
        hash::validate_mm_items(facts.mm_items)?;
        let mm: Vec<MmKey> = hash::block_mm_keys(facts.mm_items, blocks, bs, lookahead)
            .into_iter()
            .map(|(block, identifier, offset)| MmKey::new(block as u32, identifier, offset as i128))
            .collect();
        return Ok(super::content::prefix_keys(
            tokens,
            bs + lookahead,
            facts.lora_name,
            facts.cache_salt,
            None,
            &mm,
        ));
    };
    let mut spec = spec.clone();
    spec.cache_salt = facts.cache_salt.to_owned();
    spec.lora_name = facts.lora_name.to_owned();
    spec.lora_path = facts.lora_path.to_owned();
    spec.mm_items = facts.mm_items.to_vec();
    Ok(hash::block_hashes(tokens, &spec)?.values)
}
