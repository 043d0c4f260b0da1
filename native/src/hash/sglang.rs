//! SGLang's KV-event block hash (`mem_cache/events.py`, `mem_cache/utils.py`, the native page hash).
//!
//! Pages are chained: `d_0 = SHA256([prior] || u32le(page_0))`, `d_i = SHA256(d_{i-1} ||
//! u32le(page_i))`; the event value is the first 8 bytes as a signed int64. A salted request starts
//! the chain from `prior = SHA256("sglang-cache-salt-v1\0" || salt)`. When the request has a
//! namespace (its LoRA `extra_key` with the default format; extra key and salt with the `dynamo`
//! format), each value is replaced by the first 8 bytes of `SHA256(seed || i64be(value))`.

use sha2::{Digest, Sha256};

use super::spec::{HashSpec, SglangEventFormat};
use crate::cancel::{Cancel, Every};
use crate::error::Result;

const SALT_TAG: &[u8] = b"sglang-cache-salt-v1\0";
const NAMESPACE_TAG: &[u8] = b"sglang-kv-event-namespace-v1";

pub(super) fn block_hashes(
    tokens: &[u32],
    spec: &HashSpec,
    cancel: &Cancel<'_>,
) -> Result<Vec<u64>> {
    let page = spec.block_size as usize;
    let mut prior: Option<[u8; 32]> = (!spec.cache_salt.is_empty())
        .then(|| sha256_parts(&[SALT_TAG, spec.cache_salt.as_bytes()]));
    let seed = namespace_seed(spec);
    // One reused buffer holds `prior || u32le(page)`, so each page is a single digest call.
    let mut buf = vec![0u8; 32 + page * 4];
    let mut values = Vec::with_capacity(tokens.len() / page);
    let mut every = Every::new(super::HASH_CHECK_BLOCKS);
    for chunk in tokens.chunks_exact(page) {
        every.tick(cancel)?;
        for (dst, t) in buf[32..].chunks_exact_mut(4).zip(chunk) {
            dst.copy_from_slice(&t.to_le_bytes());
        }
        let digest: [u8; 32] = match &prior {
            Some(p) => {
                buf[..32].copy_from_slice(p);
                Sha256::digest(&buf).into()
            }
            None => Sha256::digest(&buf[32..]).into(),
        };
        prior = Some(digest);
        let value = i64::from_be_bytes(digest[..8].try_into().expect("32-byte digest"));
        values.push(match &seed {
            Some(seed) => namespaced(seed, value) as u64,
            None => value as u64,
        });
    }
    Ok(values)
}

fn namespace_seed(spec: &HashSpec) -> Option<[u8; 32]> {
    let extra_key = (!spec.sglang_extra_key.is_empty()).then_some(spec.sglang_extra_key.as_str());
    let salt = (!spec.cache_salt.is_empty()).then_some(spec.cache_salt.as_str());
    let (extra_key, salt) = match spec.sglang_event_format {
        // The default format names only LoRA namespaces whose adapter has a public name.
        SglangEventFormat::Default => (extra_key.filter(|_| !spec.lora_name.is_empty()), None),
        SglangEventFormat::Dynamo => (extra_key, salt),
    };
    if extra_key.is_none() && salt.is_none() {
        return None;
    }
    let mut h = Sha256::new();
    h.update(NAMESPACE_TAG);
    for part in [extra_key, salt] {
        match part {
            None => h.update([0u8]),
            Some(s) => {
                h.update([1u8]);
                h.update((s.len() as u64).to_le_bytes());
                h.update(s.as_bytes());
            }
        }
    }
    Some(h.finalize().into())
}

fn namespaced(seed: &[u8; 32], value: i64) -> i64 {
    let digest = sha256_parts(&[seed, &value.to_be_bytes()]);
    i64::from_be_bytes(digest[..8].try_into().expect("32-byte digest"))
}

fn sha256_parts(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}
