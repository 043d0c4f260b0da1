//! The index's own content keys: Dynamo-style XXH3 SequenceHashes of each full block (the LoRA
//! name in every block's seed, the cache salt in the first block's only), the same values as
//! `router_adapter.hashing.prefix_keys` and `sc_prefix_keys`.

use crate::hash::{dynamo_block_seed, local_block_hashes, sequence_hashes};

/// The keys of the full blocks of `tokens`, chained after `parent` (None = sequence start).
pub fn prefix_keys(
    tokens: &[u32],
    block_size: usize,
    lora_name: &str,
    salt: &str,
    parent: Option<u64>,
) -> Vec<u64> {
    if block_size == 0 || tokens.len() < block_size {
        return Vec::new();
    }
    let mut local = local_block_hashes(tokens, block_size, dynamo_block_seed(lora_name, ""), &[]);
    if parent.is_none() && !salt.is_empty() {
        let salted = dynamo_block_seed(lora_name, salt);
        local[0] = local_block_hashes(&tokens[..block_size], block_size, salted, &[])[0];
    }
    sequence_hashes(parent, &local)
}
