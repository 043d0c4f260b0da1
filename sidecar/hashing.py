"""Block hashes for Tokenize and Render responses: `BlockHashing` proto in, values + `BlockHashSpec` out.

    hashes, spec = block_hashes_for(runtime.hasher, token_ids, request.block_hashing)
    encoding.block_hashes.extend(hashes); response.block_hash_spec.CopyFrom(spec)
"""

from __future__ import annotations

from typing import Sequence

from router_adapter.hashing import BlockHasher
from router_adapter.spec import HashSpec, MmItem
from sidecar.v1 import preprocessor_pb2 as pb


def spec_from_proto(msg: pb.BlockHashing) -> HashSpec:
    """The `HashSpec` a `BlockHashing` message asks for (validated: `InvalidSpec` names the field, and
    `sidecar.errors` makes it INVALID_ARGUMENT)."""
    spec = HashSpec(
        algorithm=msg.algorithm,
        block_size=msg.block_size,
        seed=msg.seed if msg.HasField("seed") else None,
        cache_salt=msg.cache_salt,
        lora_name=msg.lora_name,
        lora_path=msg.lora_path,
        extra_keys=msg.vllm_extra_keys or "tagged",
        namespace=msg.namespace,
        mm_items=tuple(MmItem(m.identifier, m.offset, m.length) for m in msg.mm_items),
        sglang_extra_key=msg.sglang_extra_key,
        sglang_event_format=msg.sglang_event_format or "default",
        sequence_hashes=msg.sequence_hashes,
        lookahead=msg.vllm_lookahead,
    )
    spec.validate()
    return spec


def spec_to_proto(spec: HashSpec) -> pb.BlockHashSpec:
    """What a response says about how its hashes were made."""
    return pb.BlockHashSpec(
        algorithm=spec.algorithm,
        block_size=spec.block_size,
        seed=spec.effective_seed,
        event_value=spec.event_value,
        vllm_extra_keys=spec.extra_keys if spec.algorithm.startswith("vllm_") else "",
        vllm_lookahead=spec.lookahead,
    )


def block_hashes_for(
    hasher: BlockHasher, token_ids: Sequence[int], msg: pb.BlockHashing
) -> tuple[list[int], pb.BlockHashSpec]:
    """The engine block hashes of `token_ids` and the spec that produced them."""
    spec = spec_from_proto(msg)
    return hasher.block_hashes(token_ids, spec), spec_to_proto(spec)
