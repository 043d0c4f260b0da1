//! Dynamo's router hashes: the local block hash (content only, XXH3-64) and the SequenceHash
//! chain that identifies a prefix.
//!
//! `seed = 1337 (+ xxh3_64(lora_name, 0)) (+ xxh3_64(namespace, 1))` with wrapping adds;
//! `local_i = xxh3_64(u32le(block_i) || u64le(sorted mm hashes of block_i), seed)`;
//! `seq_0 = local_0`, `seq_i = xxh3_64(u64le(seq_{i-1}) || u64le(local_i), 1337)`.

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use super::spec::MmItem;
use crate::cancel::Cancel;
use crate::error::Result;

/// Dynamo's fixed XXH3 seed.
pub const DYNAMO_SEED: u64 = 1337;

/// The seed of the local block hash for a LoRA adapter and cache namespace (empty = none).
pub fn block_seed(lora_name: &str, namespace: &str) -> u64 {
    let mut seed = DYNAMO_SEED;
    if !lora_name.is_empty() {
        seed = seed.wrapping_add(xxh3_64_with_seed(lora_name.as_bytes(), 0));
    }
    if !namespace.is_empty() {
        seed = seed.wrapping_add(xxh3_64_with_seed(namespace.as_bytes(), 1));
    }
    seed
}

/// Local block hashes of the full blocks of `tokens`; `mm[i]` are block i's multimodal hashes
/// (missing or empty = none).
pub fn local_block_hashes(
    tokens: &[u32],
    block_size: usize,
    seed: u64,
    mm: &[Vec<u64>],
) -> Vec<u64> {
    let mut bytes = Vec::with_capacity(block_size * 4 + 64);
    tokens
        .chunks_exact(block_size)
        .enumerate()
        .map(|(i, chunk)| {
            bytes.clear();
            for t in chunk {
                bytes.extend_from_slice(&t.to_le_bytes());
            }
            if let Some(hashes) = mm.get(i).filter(|h| !h.is_empty()) {
                let mut sorted = hashes.clone();
                sorted.sort_unstable();
                for h in sorted {
                    bytes.extend_from_slice(&h.to_le_bytes());
                }
            }
            xxh3_64_with_seed(&bytes, seed)
        })
        .collect()
}

/// [`local_block_hashes`] in parts of [`super::HASH_CHECK_BLOCKS`] blocks, checking `cancel`
/// before each (the blocks are independent, so the parts join to the same values).
pub(super) fn local_block_hashes_cancellable(
    tokens: &[u32],
    block_size: usize,
    seed: u64,
    mm: &[Vec<u64>],
    cancel: &Cancel<'_>,
) -> Result<Vec<u64>> {
    let full = tokens.len() / block_size * block_size;
    let mut values = Vec::with_capacity(full / block_size);
    for (part, ids) in tokens[..full]
        .chunks(super::HASH_CHECK_BLOCKS * block_size)
        .enumerate()
    {
        cancel.check()?;
        let first = part * super::HASH_CHECK_BLOCKS;
        let part_mm = mm.get(first..).unwrap_or(&[]);
        values.extend(local_block_hashes(ids, block_size, seed, part_mm));
    }
    Ok(values)
}

/// The SequenceHash chain over local hashes, continuing from `parent` (None = sequence start).
pub fn sequence_hashes(parent: Option<u64>, local: &[u64]) -> Vec<u64> {
    let mut previous = parent;
    local
        .iter()
        .map(|&h| {
            let next = match previous {
                None => h,
                Some(p) => {
                    let mut bytes = [0u8; 16];
                    bytes[..8].copy_from_slice(&p.to_le_bytes());
                    bytes[8..].copy_from_slice(&h.to_le_bytes());
                    xxh3_64_with_seed(&bytes, DYNAMO_SEED)
                }
            };
            previous = Some(next);
            next
        })
        .collect()
}

/// Dynamo's routing hash of a multimodal identifier: a 64-digit hex digest (vLLM's) gives its first
/// 16 digits as a u64; anything else its XXH3-64.
pub fn mm_identifier_hash(identifier: &str) -> u64 {
    if identifier.len() == 64 && identifier.bytes().all(|b| b.is_ascii_hexdigit()) {
        if let Ok(v) = u64::from_str_radix(&identifier[..16], 16) {
            return v;
        }
    }
    xxh3_64(identifier.as_bytes())
}

/// Each block's multimodal hashes: an item belongs to every block its placeholder run overlaps.
pub(super) fn block_mm_hashes(blocks: usize, block_size: usize, items: &[MmItem]) -> Vec<Vec<u64>> {
    if items.is_empty() {
        return Vec::new();
    }
    let mut out = vec![Vec::new(); blocks];
    for item in items {
        if item.length == 0 {
            continue;
        }
        let hash = mm_identifier_hash(&item.identifier);
        let first = (item.offset / block_size as u64) as usize;
        let last = ((item.offset + item.length - 1) / block_size as u64) as usize;
        for block in out.iter_mut().take(last + 1).skip(first) {
            block.push(hash);
        }
    }
    out
}
