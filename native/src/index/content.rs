//! The index's own content keys: Dynamo-style XXH3 SequenceHashes of each full block (the LoRA
//! name in every block's seed, the cache salt in the first block's only), the same values as
//! `router_adapter.hashing.prefix_keys` and `sc_prefix_keys` (a unit test holds them to
//! `crate::hash`'s `local_block_hashes` / `sequence_hashes`).
//!
//! This is the hot path of ingestion and scoring, so it hashes each block from one small reused
//! buffer of its tokens' little-endian bytes, with no allocation per block.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::hash::{dynamo_block_seed, DYNAMO_SEED};

/// The keys of the full blocks of `tokens`, chained after `parent` (None = sequence start).
pub fn prefix_keys(
    tokens: &[u32],
    block_size: usize,
    lora_name: &str,
    salt: &str,
    parent: Option<u64>,
) -> Vec<u64> {
    let mut keys = Vec::new();
    prefix_keys_into(tokens, block_size, lora_name, salt, parent, &mut keys);
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
    keys.reserve(blocks);
    let mut previous = parent;
    for (i, block) in tokens.chunks_exact(block_size).enumerate() {
        for (out, t) in bytes.chunks_exact_mut(4).zip(block) {
            out.copy_from_slice(&t.to_le_bytes());
        }
        let local = xxh3_64_with_seed(bytes, if i == 0 { first_seed } else { seed });
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

/// Block sizes (in tokens) whose bytes are hashed from a stack buffer.
const STACK_BLOCK: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::{local_block_hashes, sequence_hashes};

    /// The definition, with the hashing module's own functions.
    fn reference(
        tokens: &[u32],
        bs: usize,
        lora: &str,
        salt: &str,
        parent: Option<u64>,
    ) -> Vec<u64> {
        let mut local = local_block_hashes(tokens, bs, dynamo_block_seed(lora, ""), &[]);
        if parent.is_none() && !salt.is_empty() && !local.is_empty() {
            local[0] = local_block_hashes(&tokens[..bs], bs, dynamo_block_seed(lora, salt), &[])[0];
        }
        sequence_hashes(parent, &local)
    }

    #[test]
    fn equals_the_hash_module_definition() {
        let tokens: Vec<u32> = (0..300u32).map(|i| i.wrapping_mul(2654435761)).collect();
        for bs in [1, 3, 4, 16, 64] {
            for n in [0, bs - 1, bs, 5 * bs + 1, 300] {
                for (lora, salt, parent) in [
                    ("", "", None),
                    ("ad", "", None),
                    ("", "s", None),
                    ("ad", "s", Some(7)),
                ] {
                    let t = &tokens[..n.min(300)];
                    assert_eq!(
                        prefix_keys(t, bs, lora, salt, parent),
                        reference(t, bs, lora, salt, parent)
                    );
                }
            }
        }
    }
}
