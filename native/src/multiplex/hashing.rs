//! `BlockHashing` (the request's proto message) to a [`HashSpec`], and the `BlockHashSpec` a
//! response reports: the same checks, in the same order and with the same messages, as the
//! server's unary path (`sidecar.hashing.spec_from_proto` and `router_adapter.spec.HashSpec`), so
//! a request fails alike on both transports.

use crate::error::{quoted, Error, Result};
use crate::hash::{
    check_block_size, Algorithm, ExtraKeyLayout, HashSpec, MmItem, SglangEventFormat,
};
use crate::wire::pb;

use super::py_repr;

/// vLLM >= 0.29's NONE_HASH seed string when PYTHONHASHSEED is unset (sha256 algorithms).
const NONE_HASH_SEED: &str = "vllm-none-hash";

/// The spec a `BlockHashing` message asks for, validated.
pub(super) fn spec_from_proto(msg: &pb::BlockHashing) -> Result<HashSpec> {
    let algorithm = Algorithm::ALL
        .into_iter()
        .find(|a| a.name() == msg.algorithm)
        .ok_or_else(|| {
            let known: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
            Error::invalid_argument(format!(
                "block_hashing.algorithm: unknown {}; expected one of {}",
                quoted(&msg.algorithm, py_repr),
                known.join(", ")
            ))
        })?;
    let mut spec = HashSpec::new(algorithm, msg.block_size);
    spec.seed = msg.seed.clone();
    check_block_size(msg.block_size)?;
    // The seed rule is the core's own check (same message); run it before the layout checks, in
    // the unary path's order.
    if matches!(algorithm, Algorithm::VllmXxhash | Algorithm::VllmXxhashCbor) && spec.seed.is_none()
    {
        spec.validate()?;
    }
    spec.extra_keys = match msg.vllm_extra_keys.as_str() {
        "" | "tagged" => ExtraKeyLayout::Tagged,
        "legacy" => ExtraKeyLayout::Legacy,
        other => {
            return Err(Error::invalid_argument(format!(
                "block_hashing.vllm_extra_keys: expected 'tagged' or 'legacy', got {}",
                quoted(other, py_repr)
            )))
        }
    };
    spec.sglang_event_format = match msg.sglang_event_format.as_str() {
        "" | "default" => SglangEventFormat::Default,
        "dynamo" => SglangEventFormat::Dynamo,
        other => {
            return Err(Error::invalid_argument(format!(
                "block_hashing.sglang_event_format: expected 'default' or 'dynamo', got {}",
                quoted(other, py_repr)
            )))
        }
    };
    spec.cache_salt.clone_from(&msg.cache_salt);
    spec.lora_name.clone_from(&msg.lora_name);
    spec.lora_path.clone_from(&msg.lora_path);
    spec.namespace.clone_from(&msg.namespace);
    spec.sglang_extra_key.clone_from(&msg.sglang_extra_key);
    spec.sequence_hashes = msg.sequence_hashes;
    spec.lookahead = msg.vllm_lookahead;
    spec.mm_items = msg
        .mm_items
        .iter()
        .map(|m| MmItem {
            identifier: m.identifier.clone(),
            offset: m.offset,
            length: m.length,
        })
        .collect();
    spec.validate()?;
    Ok(spec)
}

/// What a response says about how its hashes were made.
pub(super) fn spec_to_proto(spec: &HashSpec) -> pb::BlockHashSpec {
    let vllm = spec.algorithm.is_vllm();
    let seed = match (&spec.seed, vllm) {
        (_, false) => String::new(),
        (Some(seed), true) => seed.clone(),
        (None, true) => NONE_HASH_SEED.to_string(),
    };
    let extra_keys = match (vllm, spec.extra_keys) {
        (false, _) => "",
        (true, ExtraKeyLayout::Tagged) => "tagged",
        (true, ExtraKeyLayout::Legacy) => "legacy",
    };
    pb::BlockHashSpec {
        algorithm: spec.algorithm.name().to_string(),
        block_size: spec.block_size,
        seed,
        event_value: spec.algorithm.event_value(spec.sequence_hashes).to_string(),
        vllm_extra_keys: extra_keys.to_string(),
        vllm_lookahead: spec.lookahead,
    }
}
