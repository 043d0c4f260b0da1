//! The index's own content keys: Dynamo-style XXH3 SequenceHashes of each full block (the LoRA
//! name in every block's seed, the cache salt in the first block's only, a block's multimodal
//! keys after its tokens), the same values as `router_adapter.hashing.prefix_keys` and
//! `sc_prefix_keys` (a unit test holds them to `crate::hash`'s `local_block_hashes` /
//! `sequence_hashes`).
//!
//! This is the hot path of ingestion and scoring, so it hashes each block from one small reused
//! buffer of its tokens' little-endian bytes, with no allocation per block; only a block with
//! multimodal keys takes a second buffer.

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::hash::{dynamo_block_seed, DYNAMO_SEED};

/// A multimodal key of one block (vLLM's `("mm", identifier, offset)`, published untagged as an
/// `[identifier, offset]` pair of the block's `extra_keys`), as a content key hashes it: after
/// the block's token bytes, the identifier's XXH3-64 and the offset (two's complement; negative
/// for an item that began in an earlier block), both u64 little-endian. A block without such
/// keys hashes its tokens only, as before multimodal keys were hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmKey {
    /// The block (0 = the first of the tokens hashed).
    pub block: u32,
    /// XXH3-64 of the identifier's UTF-8.
    pub id: u64,
    /// The offset of the item relative to the block's first token, as 64 bits.
    pub offset: u64,
}

impl MmKey {
    /// The key of `identifier` at `offset` in block `block`.
    pub fn new(block: u32, identifier: &str, offset: i128) -> MmKey {
        MmKey {
            block,
            id: xxh3_64(identifier.as_bytes()),
            offset: offset as u64,
        }
    }
}

/// The keys of the full blocks of `tokens`, chained after `parent` (None = sequence start);
/// `mm` are the blocks' multimodal keys, by block, in order.
pub fn prefix_keys(
    tokens: &[u32],
    block_size: usize,
    lora_name: &str,
    salt: &str,
    parent: Option<u64>,
    mm: &[MmKey],
) -> Vec<u64> {
    let mut keys = Vec::new();
    prefix_keys_into(tokens, block_size, lora_name, salt, parent, mm, &mut keys);
    keys
}

/// [`prefix_keys`] appended to `keys`: the index reuses one buffer for every event, where a
/// fresh vector per event cost more than hashing a one-block event.
pub(crate) fn prefix_keys_into(
    tokens: &[u32],
    block_size: usize,
    lora_name: &str,
    salt: &str,
    parent: Option<u64>,
    mm: &[MmKey],
    keys: &mut Vec<u64>,
) {
    // Two copies of the loop: the one for stores and requests without images is the loop as it
    // was before multimodal keys (a branch per block for them, and a second hash call site, cost
    // 40-75 instructions per block of `kv_profile ingest` under callgrind).
    if mm.is_empty() {
        keys_into::<false>(tokens, block_size, lora_name, salt, parent, mm, keys)
    } else {
        keys_with_mm(tokens, block_size, lora_name, salt, parent, mm, keys)
    }
}

/// [`keys_into`] with multimodal keys, out of line (inlined too, it made the loop without them
/// slower).
#[inline(never)]
fn keys_with_mm(
    tokens: &[u32],
    block_size: usize,
    lora_name: &str,
    salt: &str,
    parent: Option<u64>,
    mm: &[MmKey],
    keys: &mut Vec<u64>,
) {
    keys_into::<true>(tokens, block_size, lora_name, salt, parent, mm, keys)
}

/// [`prefix_keys_into`]; `MM` false: `mm` is empty.
#[inline(always)]
fn keys_into<const MM: bool>(
    tokens: &[u32],
    block_size: usize,
    lora_name: &str,
    salt: &str,
    parent: Option<u64>,
    mm: &[MmKey],
    keys: &mut Vec<u64>,
) {
    if block_size == 0 || tokens.len() < block_size {
        return;
    }
    let blocks = tokens.len() / block_size;
    let seed = dynamo_block_seed(lora_name, "");
    let first_seed = if parent.is_none() && !salt.is_empty() {
        dynamo_block_seed(lora_name, salt)
    } else {
        seed
    };
    // A block's bytes: on the stack for the block sizes engines use.
    let mut stack = [0u8; 4 * STACK_BLOCK];
    let mut heap = Vec::new();
    let bytes: &mut [u8] = if block_size <= STACK_BLOCK {
        &mut stack[..block_size * 4]
    } else {
        heap.resize(block_size * 4, 0);
        &mut heap
    };
    // A block with multimodal keys: its token bytes, then its keys.
    let mut with_mm = Vec::new();
    let mut mm = mm;
    keys.reserve(blocks);
    let mut previous = parent;
    for (i, block) in tokens.chunks_exact(block_size).enumerate() {
        for (out, t) in bytes.chunks_exact_mut(4).zip(block) {
            out.copy_from_slice(&t.to_le_bytes());
        }
        let block_seed = if i == 0 { first_seed } else { seed };
        let local = if !MM {
            xxh3_64_with_seed(bytes, block_seed)
        } else {
            match mm.first() {
                Some(first) if first.block as usize == i => {
                    let n = mm.iter().take_while(|k| k.block == first.block).count();
                    with_mm_keys(&mut with_mm, bytes, &mm[..n]);
                    mm = &mm[n..];
                    xxh3_64_with_seed(&with_mm, block_seed)
                }
                _ => xxh3_64_with_seed(bytes, block_seed),
            }
        };
        let key = match previous {
            None => local,
            Some(p) => {
                let mut pair = [0u8; 16];
                pair[..8].copy_from_slice(&p.to_le_bytes());
                pair[8..].copy_from_slice(&local.to_le_bytes());
                xxh3_64_with_seed(&pair, DYNAMO_SEED)
            }
        };
        keys.push(key);
        previous = Some(key);
    }
}

/// `out` = a block's token bytes followed by its multimodal keys (see [`MmKey`]).
fn with_mm_keys(out: &mut Vec<u8>, tokens: &[u8], keys: &[MmKey]) {
    out.clear();
    out.extend_from_slice(tokens);
    for k in keys {
        out.extend_from_slice(&k.id.to_le_bytes());
        out.extend_from_slice(&k.offset.to_le_bytes());
    }
}

/// Block sizes (in tokens) whose bytes are hashed from a stack buffer.
const STACK_BLOCK: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::{local_block_hashes, sequence_hashes};

    /// The definition, with the hashing module's own functions; a block with multimodal keys
    /// hashes its token bytes followed by its keys' bytes.
    fn reference(
        tokens: &[u32],
        bs: usize,
        lora: &str,
        salt: &str,
        parent: Option<u64>,
        mm: &[MmKey],
    ) -> Vec<u64> {
        let mut local = local_block_hashes(tokens, bs, dynamo_block_seed(lora, ""), &[]);
        if parent.is_none() && !salt.is_empty() && !local.is_empty() {
            local[0] = local_block_hashes(&tokens[..bs], bs, dynamo_block_seed(lora, salt), &[])[0];
        }
        for (i, value) in local.iter_mut().enumerate() {
            let mine: Vec<&MmKey> = mm.iter().filter(|k| k.block as usize == i).collect();
            if mine.is_empty() {
                continue;
            }
            let mut bytes: Vec<u8> = tokens[i * bs..(i + 1) * bs]
                .iter()
                .flat_map(|t| t.to_le_bytes())
                .collect();
            for k in mine {
                bytes.extend(k.id.to_le_bytes());
                bytes.extend(k.offset.to_le_bytes());
            }
            let salted = i == 0 && parent.is_none();
            let seed = dynamo_block_seed(lora, if salted { salt } else { "" });
            *value = xxh3_64_with_seed(&bytes, seed);
        }
        sequence_hashes(parent, &local)
    }

    #[test]
    fn equals_the_hash_module_definition() {
        let tokens: Vec<u32> = (0..300u32).map(|i| i.wrapping_mul(2654435761)).collect();
        let image = [
            MmKey::new(0, "x", 2),
            MmKey::new(1, "x", -2),
            MmKey::new(1, "y", 3),
        ];
        for bs in [1, 3, 4, 16, 64] {
            for n in [0, bs - 1, bs, 5 * bs + 1, 300] {
                for (lora, salt, parent) in [
                    ("", "", None),
                    ("ad", "", None),
                    ("", "s", None),
                    ("ad", "s", Some(7)),
                ] {
                    for mm in [
                        &[][..],
                        &image[..],
                        &image[1..],
                        &[MmKey::new(4, "z", 0)][..],
                    ] {
                        let t = &tokens[..n.min(300)];
                        assert_eq!(
                            prefix_keys(t, bs, lora, salt, parent, mm),
                            reference(t, bs, lora, salt, parent, mm)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn multimodal_keys_change_their_block_and_the_chain_after_it_only() {
        let tokens: Vec<u32> = (0..64).collect();
        let plain = prefix_keys(&tokens, 16, "", "", None, &[]);
        let x = prefix_keys(&tokens, 16, "", "", None, &[MmKey::new(1, "x", 0)]);
        let y = prefix_keys(&tokens, 16, "", "", None, &[MmKey::new(1, "y", 0)]);
        let moved = prefix_keys(&tokens, 16, "", "", None, &[MmKey::new(1, "x", 1)]);
        assert_eq!(plain[0], x[0]);
        for i in 1..4 {
            assert!(plain[i] != x[i] && x[i] != y[i] && x[i] != moved[i], "{i}");
        }
    }
}
