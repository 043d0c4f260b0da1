//! vLLM's prefix-cache block hash (`hash_block_tokens` chained by the request block hasher).
//!
//! `h_i = H(serialize((h_{i-1}, tuple(block_i_tokens), extra_keys_i)))` with `h_{-1} = NONE_HASH =
//! H(serialize(seed_string))`; H is SHA-256 or XXH3-128 and serialize is pickle (protocol 5) or
//! canonical CBOR. The published 64-bit value is the last 8 digest bytes, big-endian.
//!
//! With lookahead (vLLM >= 0.33, `num_hash_lookahead_tokens` L > 0) only the blocks followed by at
//! least L tokens are hashed, and `extra_keys_i` becomes `(E_i, *next_L_tokens)`, where `E_i` is
//! the usual extra keys (or None) over the block *and* its lookahead tokens
//! (`generate_lookahead_block_hash_extra_keys`).

use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::xxh3_128;

use super::spec::{Algorithm, ExtraKeyLayout, HashSpec, MmItem};
use super::value::Value;
use super::{cbor, pickle, BlockHashes};
use crate::cancel::{Cancel, Every};
use crate::error::Result;

/// vLLM >= 0.29's NONE_HASH seed when PYTHONHASHSEED is unset and the algorithm is SHA-256 based.
pub const DEFAULT_NONE_HASH_SEED: &str = "vllm-none-hash";

pub(super) fn block_hashes(
    tokens: &[u32],
    spec: &HashSpec,
    cancel: &Cancel<'_>,
) -> Result<BlockHashes> {
    let seed = spec
        .seed
        .clone()
        .unwrap_or_else(|| DEFAULT_NONE_HASH_SEED.to_owned());
    let mut hasher = Hasher {
        algorithm: spec.algorithm,
        buf: Vec::with_capacity(256),
    };
    let pickled = matches!(
        spec.algorithm,
        Algorithm::VllmSha256 | Algorithm::VllmXxhash
    );
    hasher.buf.clear();
    if pickled {
        pickle::dumps_into(&Value::Str(&seed), &mut hasher.buf);
    } else {
        cbor::encode_into(&Value::Str(&seed), &mut hasher.buf);
    }
    let mut parent = [0u8; 32];
    let mut parent_len = hasher.finish(&mut parent);
    let bs = spec.block_size as usize;
    let lookahead = spec.lookahead as usize;
    // With lookahead, a block is hashed once `lookahead` tokens follow it.
    let hashed = &tokens[..tokens.len().saturating_sub(lookahead)];
    let blocks = hashed.len() / bs;
    let mut values = Vec::with_capacity(blocks);
    let mut mm = MmCursor::default();
    let plain = spec.lora_name.is_empty() && spec.mm_items.is_empty() && spec.cache_salt.is_empty();
    let mut every = Every::new(super::HASH_CHECK_BLOCKS);
    for (i, block) in hashed.chunks_exact(bs).enumerate() {
        every.tick(cancel)?;
        let (start, end) = (i * bs, (i + 1) * bs);
        let extra = if lookahead > 0 {
            lookahead_extra_keys(spec, tokens, start, end, end + lookahead, &mut mm)
        } else if plain {
            Value::None
        } else {
            extra_keys(spec, start, end, &mut mm)
        };
        hasher.buf.clear();
        if pickled {
            pickle::dumps_block_into(&parent[..parent_len], block, &extra, &mut hasher.buf);
        } else {
            cbor::encode_block_into(&parent[..parent_len], block, &extra, &mut hasher.buf);
        }
        parent_len = hasher.finish(&mut parent);
        values.push(event_value(&parent[..parent_len]));
    }
    debug_assert_eq!(values.len(), blocks);
    Ok(BlockHashes { values, seed })
}

/// The value vLLM publishes in events: the last 8 bytes, big-endian.
pub fn event_value(digest: &[u8]) -> u64 {
    let tail: [u8; 8] = digest[digest.len() - 8..]
        .try_into()
        .expect("digests are >= 8 bytes");
    u64::from_be_bytes(tail)
}

struct Hasher {
    algorithm: Algorithm,
    buf: Vec<u8>,
}

impl Hasher {
    /// Digests the serialized bytes in `buf` into `out`; returns the digest length.
    fn finish(&mut self, out: &mut [u8; 32]) -> usize {
        match self.algorithm {
            Algorithm::VllmSha256 | Algorithm::VllmSha256Cbor => {
                out.copy_from_slice(&Sha256::digest(&self.buf));
                32
            }
            _ => {
                out[..16].copy_from_slice(&xxh3_128(&self.buf).to_be_bytes());
                16
            }
        }
    }
}

/// Where the multimodal walk is, carried from block to block as vLLM's `curr_mm_idx`.
#[derive(Default)]
struct MmCursor {
    index: usize,
}

/// `generate_block_hash_extra_keys` for the block `[start, end)`: LoRA, multimodal items, then the
/// cache salt on the first block; None when there is nothing.
fn extra_keys<'a>(spec: &'a HashSpec, start: usize, end: usize, mm: &mut MmCursor) -> Value<'a> {
    let tagged = spec.extra_keys == ExtraKeyLayout::Tagged;
    let mut keys = Vec::new();
    if !spec.lora_name.is_empty() {
        keys.push(if tagged {
            Value::Tuple(vec![
                Value::Tag("lora"),
                Value::Str(&spec.lora_name),
                Value::Str(&spec.lora_path),
            ])
        } else {
            Value::Str(&spec.lora_name)
        });
    }
    for (identifier, relative) in mm_keys(&spec.mm_items, start as u64, end as u64, mm) {
        keys.push(if tagged {
            Value::Tuple(vec![
                Value::Tag("mm"),
                Value::Str(identifier),
                Value::Int(relative),
            ])
        } else {
            Value::Tuple(vec![Value::Str(identifier), Value::Int(relative)])
        });
    }
    if start == 0 && !spec.cache_salt.is_empty() {
        keys.push(if tagged {
            Value::Tuple(vec![Value::Tag("cache_salt"), Value::Str(&spec.cache_salt)])
        } else {
            Value::Str(&spec.cache_salt)
        });
    }
    if keys.is_empty() {
        Value::None
    } else {
        Value::Tuple(keys)
    }
}

/// `get_request_block_hasher`'s extra keys with lookahead: `(E, *tokens[end..hash_end])`, where
/// `E` is [`extra_keys`] of `[start, hash_end)` (items overlapping the lookahead tokens count, at
/// their offset from `start`); then `generate_lookahead_block_hash_extra_keys` moves the multimodal
/// cursor back to the first item that runs past `end`, which the next block may overlap too.
fn lookahead_extra_keys<'a>(
    spec: &'a HashSpec,
    tokens: &[u32],
    start: usize,
    end: usize,
    hash_end: usize,
    mm: &mut MmCursor,
) -> Value<'a> {
    let window = extra_keys(spec, start, hash_end, mm);
    while mm.index > 0 {
        let item = &spec.mm_items[mm.index - 1];
        if item.offset + item.length <= end as u64 {
            break;
        }
        mm.index -= 1;
    }
    let mut keys = Vec::with_capacity(1 + hash_end - end);
    keys.push(window);
    keys.extend(
        tokens[end..hash_end]
            .iter()
            .map(|&t| Value::Int(i64::from(t))),
    );
    Value::Tuple(keys)
}

/// The multimodal keys of the first `blocks` blocks by vLLM's rule ([`mm_keys`], what vLLM hashes
/// and publishes in a store's `extra_keys`), as `(block, identifier, offset)` in block order.
/// With `lookahead` L > 0 a block's keys are those of its window (the block and the L tokens
/// after it), the cursor moved back as `generate_lookahead_block_hash_extra_keys` does: vLLM >=
/// 0.33 publishes a store's `extra_keys` over the same window.
pub(crate) fn block_mm_keys(
    items: &[MmItem],
    blocks: usize,
    block_size: usize,
    lookahead: usize,
) -> Vec<(usize, &str, i64)> {
    let mut out = Vec::new();
    if items.is_empty() {
        return out;
    }
    let mut cursor = MmCursor::default();
    for block in 0..blocks {
        let start = (block * block_size) as u64;
        let end = start + block_size as u64;
        for (identifier, offset) in mm_keys(items, start, end + lookahead as u64, &mut cursor) {
            out.push((block, identifier, offset));
        }
        if lookahead > 0 {
            while cursor.index > 0 {
                let item = &items[cursor.index - 1];
                if item.offset + item.length <= end {
                    break;
                }
                cursor.index -= 1;
            }
        }
    }
    out
}

/// vLLM's `_gen_mm_extra_hash_keys`: the items whose placeholder run overlaps the block, with their
/// offset relative to the block start (negative for an item that began in an earlier block).
fn mm_keys<'a>(
    items: &'a [MmItem],
    start: u64,
    end: u64,
    cursor: &mut MmCursor,
) -> Vec<(&'a str, i64)> {
    let mut keys = Vec::new();
    let Some(last) = items.last() else {
        return keys;
    };
    if last.offset + last.length <= start {
        return keys;
    }
    while cursor.index < items.len() {
        let item = &items[cursor.index];
        if end > item.offset {
            if start >= item.offset + item.length {
                cursor.index += 1;
                continue;
            }
            keys.push((item.identifier.as_str(), item.offset as i64 - start as i64));
            if end >= item.offset + item.length {
                cursor.index += 1;
            } else {
                break;
            }
        } else {
            break;
        }
    }
    keys
}
