//! What a caller asks for: the algorithm and the request facts the engine mixes into its hashes.

use serde::Deserialize;

use crate::error::{Error, Result};

/// The most lookahead tokens a spec may ask for (vLLM's is 1, or `num_speculative_tokens` for a
/// multi-module MTP drafter: a handful); each block's hash serializes that many more ints.
pub const MAX_LOOKAHEAD: u32 = 256;

/// The largest block a spec may name. Engines use 16 to a few hundred tokens; the bound keeps a
/// caller's number from sizing a hashing buffer (SGLang's page buffer is 4 bytes per token, so
/// 2^32 - 1 asked for 16 GiB, and a failed allocation aborts the process).
pub const MAX_BLOCK_SIZE: u32 = 1 << 16;

/// Refuses a block size of 0 or over [`MAX_BLOCK_SIZE`], naming the field.
pub fn check_block_size(block_size: u32) -> Result<()> {
    if block_size == 0 {
        return Err(Error::invalid_argument(
            "block_hashing.block_size: must be > 0",
        ));
    }
    if block_size > MAX_BLOCK_SIZE {
        return Err(Error::invalid_argument(format!(
            "block_hashing.block_size: {block_size} is more than {MAX_BLOCK_SIZE}"
        )));
    }
    Ok(())
}

/// The engine algorithm (see the table in [`super`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// vLLM `sha256` (pickle), the default of vLLM >= 0.10.
    VllmSha256,
    /// vLLM `sha256_cbor`.
    VllmSha256Cbor,
    /// vLLM `xxhash` (pickle, XXH3-128).
    VllmXxhash,
    /// vLLM `xxhash_cbor`.
    VllmXxhashCbor,
    /// SGLang's page hash.
    SglangSha256,
    /// Dynamo's router block hash.
    DynamoXxh3,
}

impl Algorithm {
    /// Every algorithm, by its contract name.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::VllmSha256,
        Algorithm::VllmSha256Cbor,
        Algorithm::VllmXxhash,
        Algorithm::VllmXxhashCbor,
        Algorithm::SglangSha256,
        Algorithm::DynamoXxh3,
    ];

    /// The contract name (`BlockHashing.algorithm`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::VllmSha256 => "vllm_sha256",
            Algorithm::VllmSha256Cbor => "vllm_sha256_cbor",
            Algorithm::VllmXxhash => "vllm_xxhash",
            Algorithm::VllmXxhashCbor => "vllm_xxhash_cbor",
            Algorithm::SglangSha256 => "sglang_sha256",
            Algorithm::DynamoXxh3 => "dynamo_xxh3",
        }
    }

    /// Which 64 bits are reported (`BlockHashSpec.event_value`).
    pub fn event_value(self, sequence_hashes: bool) -> &'static str {
        match self {
            Algorithm::SglangSha256 => "first8_be_signed_as_u64",
            Algorithm::DynamoXxh3 if sequence_hashes => "xxh3_64_sequence",
            Algorithm::DynamoXxh3 => "xxh3_64_local",
            _ => "last8_be_unsigned",
        }
    }

    /// Whether this is one of vLLM's algorithms.
    pub fn is_vllm(self) -> bool {
        matches!(
            self,
            Algorithm::VllmSha256
                | Algorithm::VllmSha256Cbor
                | Algorithm::VllmXxhash
                | Algorithm::VllmXxhashCbor
        )
    }
}

/// vLLM's extra-key layout, which changed in 0.31.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExtraKeyLayout {
    /// vLLM >= 0.31: `("lora", name, path)`, `("mm", identifier, offset)`, `("cache_salt", salt)`.
    #[default]
    Tagged,
    /// vLLM 0.20 to 0.30: bare LoRA name, `(identifier, offset)`, bare salt.
    Legacy,
}

/// SGLang's `kv_events` format setting, which decides how event hashes are namespaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SglangEventFormat {
    /// Namespaced by the LoRA extra key only (when the request runs a named adapter).
    #[default]
    Default,
    /// Namespaced by (extra key, cache salt).
    Dynamo,
}

/// A multimodal item of the prompt: its placeholder run and its content identifier.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MmItem {
    /// The engine's identifier of the item (vLLM `mm_feature.identifier`, the mm hash).
    pub identifier: String,
    /// First placeholder token position.
    pub offset: u64,
    /// Number of placeholder tokens.
    pub length: u64,
}

/// A block-hashing request (the `BlockHashing` proto message, plus what the server resolved).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HashSpec {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Tokens per block, > 0.
    pub block_size: u32,
    /// vLLM: PYTHONHASHSEED of the engine; None = unset.
    #[serde(default)]
    pub seed: Option<String>,
    /// Per-request cache salt; empty = none.
    #[serde(default)]
    pub cache_salt: String,
    /// LoRA adapter name; empty = base model.
    #[serde(default)]
    pub lora_name: String,
    /// LoRA adapter path (vLLM >= 0.31 hashes it).
    #[serde(default)]
    pub lora_path: String,
    /// vLLM extra-key layout.
    #[serde(default)]
    pub extra_keys: ExtraKeyLayout,
    /// Dynamo cache namespace; empty = none.
    #[serde(default)]
    pub namespace: String,
    /// Multimodal items, sorted by offset.
    #[serde(default)]
    pub mm_items: Vec<MmItem>,
    /// SGLang: the radix key's `extra_key`; empty = none.
    #[serde(default)]
    pub sglang_extra_key: String,
    /// SGLang: the publisher's event format.
    #[serde(default)]
    pub sglang_event_format: SglangEventFormat,
    /// Dynamo: report the SequenceHash chain instead of the local block hashes.
    #[serde(default)]
    pub sequence_hashes: bool,
    /// vLLM (>= 0.33, tagged layout): tokens after each block that its hash covers
    /// (`num_hash_lookahead_tokens`); a block is hashed once that many tokens follow it, with the
    /// extra keys `(E, *next_tokens)`. 0 = none.
    #[serde(default)]
    pub lookahead: u32,
}

impl HashSpec {
    /// About what hashing `tokens` ids costs, in the unit of the server's inline bound (bytes of
    /// fast encoding; a block's hash of a few dozen bytes costs about what 4 bytes of encoding
    /// do): each block's ids, the strings vLLM repeats in every block's extra keys (LoRA name and
    /// path), each multimodal item's identifier once per block it overlaps (560 overlapping items
    /// over 8,000 one-token blocks cost what they do, not their 14 bytes each), and the strings
    /// hashed once (the salt on the first block, Dynamo's seed, SGLang's extra key).
    pub fn work(&self, tokens: usize) -> usize {
        let block_size = self.block_size.max(1) as usize;
        let blocks = tokens / block_size;
        let repeated = match self.algorithm {
            Algorithm::VllmSha256
            | Algorithm::VllmSha256Cbor
            | Algorithm::VllmXxhash
            | Algorithm::VllmXxhashCbor => self.lora_name.len() + self.lora_path.len(),
            Algorithm::SglangSha256 | Algorithm::DynamoXxh3 => 0,
        };
        let once = self.cache_salt.len()
            + self.namespace.len()
            + self.sglang_extra_key.len()
            + self.lora_name.len()
            + self.lora_path.len();
        let per_block = 4 * block_size + 4 + repeated + 4 * self.lookahead as usize;
        let items: usize = self
            .mm_items
            .iter()
            .map(|item| {
                let first = item.offset / block_size as u64;
                let end = item
                    .offset
                    .saturating_add(item.length)
                    .div_ceil(block_size as u64);
                let overlapped = end.min(blocks as u64).saturating_sub(first) as usize;
                overlapped.saturating_mul(item.identifier.len() + 16)
            })
            .fold(0, usize::saturating_add);
        blocks
            .saturating_mul(per_block)
            .saturating_add(items)
            .saturating_add(once)
    }

    /// Reads the server's JSON spec and validates it: the one place a spec enters the core.
    pub fn from_json(text: &str) -> Result<HashSpec> {
        let spec: HashSpec = crate::settings::from_json(text, "block_hashing")?;
        spec.validate()?;
        Ok(spec)
    }

    /// A spec with only the algorithm and block size set.
    pub fn new(algorithm: Algorithm, block_size: u32) -> Self {
        HashSpec {
            algorithm,
            block_size,
            seed: None,
            cache_salt: String::new(),
            lora_name: String::new(),
            lora_path: String::new(),
            extra_keys: ExtraKeyLayout::Tagged,
            namespace: String::new(),
            mm_items: Vec::new(),
            sglang_extra_key: String::new(),
            sglang_event_format: SglangEventFormat::Default,
            sequence_hashes: false,
            lookahead: 0,
        }
    }

    /// Refuses specs no engine could have produced hashes for, naming the field.
    pub fn validate(&self) -> Result<()> {
        check_block_size(self.block_size)?;
        if matches!(
            self.algorithm,
            Algorithm::VllmXxhash | Algorithm::VllmXxhashCbor
        ) && self.seed.is_none()
        {
            return Err(Error::invalid_argument(format!(
                "block_hashing.seed: {} without PYTHONHASHSEED uses a random per-process seed in vLLM, so its \
                 hashes cannot be reproduced; give the engine's PYTHONHASHSEED",
                self.algorithm.name()
            )));
        }
        if self.lookahead > 0 {
            if !self.algorithm.is_vllm() {
                return Err(Error::invalid_argument(format!(
                    "block_hashing.vllm_lookahead: only vLLM's algorithms hash lookahead tokens, not {}",
                    self.algorithm.name()
                )));
            }
            if self.extra_keys != ExtraKeyLayout::Tagged {
                return Err(Error::invalid_argument(
                    "block_hashing.vllm_lookahead: the legacy extra-key layout (vLLM 0.20 to 0.30) has no \
                     lookahead hashing; it needs the tagged layout",
                ));
            }
            if self.lookahead > MAX_LOOKAHEAD {
                return Err(Error::invalid_argument(format!(
                    "block_hashing.vllm_lookahead: {} is more than {MAX_LOOKAHEAD}",
                    self.lookahead
                )));
            }
        }
        validate_mm_items(&self.mm_items)
    }
}

/// Refuses multimodal items no engine could have: an empty identifier, items out of offset order
/// (vLLM's walk over them assumes the order), a run past the engine's positions.
pub fn validate_mm_items(items: &[MmItem]) -> Result<()> {
    let mut previous = 0;
    for (i, item) in items.iter().enumerate() {
        if item.identifier.is_empty() {
            return Err(Error::invalid_argument(format!(
                "block_hashing.mm_items[{i}].identifier: empty"
            )));
        }
        if item.offset < previous {
            return Err(Error::invalid_argument(format!(
                "block_hashing.mm_items[{i}].offset: items must be sorted by offset (as the engine keeps them)"
            )));
        }
        if item.offset.checked_add(item.length).is_none() || item.offset > i64::MAX as u64 {
            return Err(Error::invalid_argument(format!(
                "block_hashing.mm_items[{i}]: offset + length overflows"
            )));
        }
        previous = item.offset;
    }
    Ok(())
}
