//! KV-cache block hashing, computed exactly as each engine computes it, so a router can compare
//! its block hashes with the ones in the engine's KV events.
//!
//! | algorithm | engine | per block | reported 64-bit value |
//! |---|---|---|---|
//! | `vllm_sha256` (vLLM default) | vLLM | SHA-256 of `pickle.dumps((parent, tokens, extra), 5)` | last 8 digest bytes, big-endian |
//! | `vllm_sha256_cbor` | vLLM | SHA-256 of canonical CBOR of the same tuple | last 8 bytes, big-endian |
//! | `vllm_xxhash` / `vllm_xxhash_cbor` | vLLM >= 0.13 | XXH3-128 of pickle / CBOR | last 8 bytes, big-endian |
//! | `sglang_sha256` | SGLang | SHA-256 chain over u32 little-endian tokens | first 8 bytes as a signed int64 |
//! | `dynamo_xxh3` | Dynamo router | XXH3-64 (seed 1337, LoRA/namespace mixed in) | the value itself |
//!
//! Only full blocks are hashed: a trailing partial block has no hash in any engine. The 64-bit
//! values are what the engines publish in KV events; chaining always uses the full digest.
//! See `shared/docs/kv-hashing.md` for the sources of every rule.

mod cbor;
mod dynamo;
mod pickle;
mod sglang;
mod spec;
mod value;
mod vllm;

#[cfg(test)]
mod tests;

pub use cbor::encode as cbor_encode;
pub use dynamo::{
    block_seed as dynamo_block_seed, local_block_hashes, mm_identifier_hash, sequence_hashes,
    DYNAMO_SEED,
};
pub use pickle::dumps as pickle_dumps;
pub use spec::{
    check_block_size, validate_mm_items, Algorithm, ExtraKeyLayout, HashSpec, MmItem,
    SglangEventFormat, MAX_BLOCK_SIZE, MAX_LOOKAHEAD,
};
pub use value::Value;
pub(crate) use vllm::block_mm_keys;

use crate::cancel::Cancel;
use crate::error::Result;

/// Blocks hashed between two cancellation checks: about a millisecond of SHA-256 chaining.
pub const HASH_CHECK_BLOCKS: usize = 1024;

/// The block hashes of one token sequence and the facts a router needs to compare them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockHashes {
    /// One 64-bit value per full block, as the engine publishes it (see the module table; SGLang's
    /// signed values are given as their two's complement bit pattern).
    pub values: Vec<u64>,
    /// The seed string the chain started from (vLLM); empty for the other algorithms.
    pub seed: String,
}

/// Hashes the full blocks of `tokens` as `spec` says.
pub fn block_hashes(tokens: &[u32], spec: &HashSpec) -> Result<BlockHashes> {
    block_hashes_cancellable(tokens, spec, &Cancel::default())
}

/// [`block_hashes`] that stops when `cancel` says so, checked every [`HASH_CHECK_BLOCKS`] blocks
/// (a 16M-token prompt is a second of chained SHA-256).
pub fn block_hashes_cancellable(
    tokens: &[u32],
    spec: &HashSpec,
    cancel: &Cancel<'_>,
) -> Result<BlockHashes> {
    spec.validate()?;
    let bs = spec.block_size as usize;
    match spec.algorithm {
        Algorithm::VllmSha256
        | Algorithm::VllmSha256Cbor
        | Algorithm::VllmXxhash
        | Algorithm::VllmXxhashCbor => vllm::block_hashes(tokens, spec, cancel),
        Algorithm::SglangSha256 => Ok(BlockHashes {
            values: sglang::block_hashes(tokens, spec, cancel)?,
            seed: String::new(),
        }),
        Algorithm::DynamoXxh3 => {
            let mm = dynamo::block_mm_hashes(tokens.len() / bs, bs, &spec.mm_items);
            let seed = dynamo::block_seed(&spec.lora_name, &spec.namespace);
            let local = dynamo::local_block_hashes_cancellable(tokens, bs, seed, &mm, cancel)?;
            let values = if spec.sequence_hashes {
                sequence_hashes(None, &local)
            } else {
                local
            };
            Ok(BlockHashes {
                values,
                seed: String::new(),
            })
        }
    }
}

/// The router adapter index's own content keys: Dynamo-style local block hashes of the full blocks
/// of `ids` (LoRA name mixed into every block's seed; the namespace, i.e. the cache salt, into the
/// first block of a sequence only, so it reaches later blocks through the chain as in vLLM; a
/// block's multimodal keys `mm` after its tokens) chained into SequenceHashes after `parent`
/// (None = sequence start). The index's own function ([`crate::index::prefix_keys`]).
pub fn prefix_keys(
    ids: &[u32],
    block_size: u32,
    lora_name: &str,
    namespace: &str,
    parent: Option<u64>,
    mm: &[crate::index::MmKey],
) -> Result<Vec<u64>> {
    if block_size == 0 {
        return Err(crate::Error::invalid_argument("block_size: must be > 0"));
    }
    Ok(crate::index::prefix_keys(
        ids,
        block_size as usize,
        lora_name,
        namespace,
        parent,
        mm,
    ))
}
