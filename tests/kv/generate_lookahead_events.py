"""Writes tests/data/kv/events/vllm-0.33-lookahead-*.msgpack and `.expected.json`: stores of vLLM 0.33
with lookahead hashing (an EAGLE/EAGLE3/MTP drafter: `num_hash_lookahead_tokens` L), and requests
with the number of leading blocks the engine itself would find cached for each.

Not run by the tests. Re-run it when scenarios change (the vLLM 0.33.0 wheel in a scratch folder):

    .venv/bin/python tests/kv/generate_lookahead_events.py --wheels /tmp/wheels

Everything engine-side is vLLM 0.33.0's own code, extracted with `ast` from the wheel:
- block hashes: `get_request_block_hasher(block_size, hash_fn, L)` (with
  `generate_lookahead_block_hash_extra_keys`), as `generate_vectors.vllm_hasher` loads it;
- the events: the msgspec classes of `vllm/distributed/kv_events.py`, filled as
  `BlockPool.cache_full_blocks` fills them, its methods `_generate_event_extra_keys` (extra keys
  over the block and its lookahead window) and `_lookahead_token_ids` extracted from
  `vllm/v1/core/block_pool.py` and run on a stand-in pool, and `to_event_extra_keys`;
- a request's cached blocks: its hashes by the same hasher, counted while the worker holds them
  (the prefix-cache lookup walks the request's block hashes from the first).

Scenarios (block size 4): `over` (L=1, a prompt of 9 tokens: 2 blocks hashed; requests that diverge
right after a block boundary or end on one), `mm` (L=1, an image starting right at a block boundary:
the previous block's window holds it), `mixed` (L=3, LoRA, salt, an image in a lookahead window,
and a second store continuing the first).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from router_adapter.spec import HashSpec, MmItem  # noqa: E402
from tests.kv.generate_events import OUT, engine_classes  # noqa: E402
from tests.kv.generate_vectors import load_functions, vllm_hasher  # noqa: E402

BS = 4


def block_pool_methods(wheel: Path) -> dict[str, Any]:
    """`BlockPool._generate_event_extra_keys` and `_lookahead_token_ids`, and the kv_cache_utils
    functions they call, from the wheel."""
    z = zipfile.ZipFile(wheel)
    ns: dict[str, Any] = {"Any": Any, "Request": Any}
    load_functions(z.read("vllm/v1/core/kv_cache_utils.py").decode(), {
        "_gen_mm_extra_hash_keys", "_gen_lora_extra_hash_keys", "_gen_prompt_embeds_extra_hash_keys",
        "generate_block_hash_extra_keys", "generate_lookahead_block_hash_extra_keys", "to_event_extra_keys",
    }, ns, f"{wheel.name}:kv_cache_utils.py")
    tree = ast.parse(z.read("vllm/v1/core/block_pool.py").decode())
    pool = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "BlockPool")
    keep = [n for n in pool.body if isinstance(n, ast.FunctionDef)
            and n.name in ("_generate_event_extra_keys", "_lookahead_token_ids")]
    if len(keep) != 2:
        raise SystemExit(f"{wheel.name}: BlockPool's event methods not found")
    module = ast.Module(body=keep, type_ignores=[])
    exec(compile(module, f"{wheel.name}:block_pool.py", "exec"), ns)  # noqa: S102
    return ns


def request(tokens: list[int], spec: HashSpec) -> SimpleNamespace:
    return SimpleNamespace(
        all_token_ids=list(tokens), session_id=None, prompt_embeds=None, _prompt_embeds_per_block_hashes={},
        mm_features=[SimpleNamespace(identifier=m.identifier, mm_position=SimpleNamespace(offset=m.offset,
                                                                                        length=m.length))
                     for m in spec.mm_items],
        lora_request=SimpleNamespace(lora_name=spec.lora_name, lora_path=spec.lora_path, lora_int_id=1,
                                     adapter_id=1, name=spec.lora_name) if spec.lora_name else None,
        cache_salt=spec.cache_salt or None,
    )


def store(m: Any, ns: dict[str, Any], tokens: list[int], spec: HashSpec, hashes: list[int], first: int,
          end: int) -> tuple[Any, list]:
    """The BlockStored `BlockPool.cache_full_blocks` publishes for blocks [first, end), and the
    (tagged) extra keys it computed for each block."""
    pool = SimpleNamespace(num_hash_lookahead_tokens=spec.lookahead)
    req = request(tokens, spec)
    extra, lookahead, mm_index = [], [], 0
    for i in range(first, end):
        keys, mm_index = ns["_generate_event_extra_keys"](pool, req, i * BS, (i + 1) * BS, mm_index)
        extra.append(keys)
        lookahead.append(ns["_lookahead_token_ids"](pool, req, (i + 1) * BS))
    return m.BlockStored(block_hashes=hashes[first:end], parent_block_hash=hashes[first - 1] if first else None,
                         token_ids=tokens[first * BS:end * BS], block_size=BS, lora_id=1 if spec.lora_name else None,
                         medium="GPU", lora_name=spec.lora_name or None, extra_keys=ns["to_event_extra_keys"](extra),
                         group_idx=0, lookahead_token_ids=lookahead), extra


def scenarios() -> dict[str, tuple[int, list[tuple[list[int], HashSpec, list[tuple[int, int]]]], list]]:
    """name -> (L, stores as (tokens, spec, spans of blocks), requests as (tokens, spec))."""
    over = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    plain = HashSpec("vllm_sha256", BS, seed="0", lookahead=1)
    image = HashSpec("vllm_sha256", BS, seed="0", lookahead=1, mm_items=(MmItem("img-A", 4, 4),))
    other = HashSpec("vllm_sha256", BS, seed="0", lookahead=1, mm_items=(MmItem("img-B", 4, 4),))
    mm_tokens = list(range(100, 113))
    mixed = HashSpec("vllm_sha256", BS, seed="0", lookahead=3, lora_name="ad", lora_path="/ad", cache_salt="t",
                     mm_items=(MmItem("img-C", 10, 5),))
    mixed_tokens = list(range(200, 226))
    return {
        "over": (1, [(over, plain, [(0, 2)])], [
            ([1, 2, 3, 4, 99, 98, 97, 96, 95], plain), (over[:8], plain), (over, plain), (over + [10, 11], plain),
            (over[:4], plain), ([1, 2, 3, 4, 5, 6, 7, 8, 77], plain)]),
        "mm": (1, [(mm_tokens, image, [(0, 3)])], [
            (mm_tokens, image), (mm_tokens, other), (mm_tokens[:9], image), (mm_tokens, plain)]),
        "mixed": (3, [(mixed_tokens, mixed, [(0, 2), (2, 5)])], [
            (mixed_tokens, mixed), (mixed_tokens[:20], mixed), (mixed_tokens[:13], mixed),
            (mixed_tokens[:11] + [9] * 12, mixed),
            (mixed_tokens, HashSpec("vllm_sha256", BS, seed="0", lookahead=3, lora_name="ad", lora_path="/ad",
                                    cache_salt="t", mm_items=(MmItem("img-C", 11, 4),))),
            (mixed_tokens, HashSpec("vllm_sha256", BS, seed="0", lookahead=3, lora_name="ad", lora_path="/ad",
                                    mm_items=mixed.mm_items))]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=Path, required=True)
    args = parser.parse_args()
    wheels = sorted(args.wheels.glob("vllm-0.33.0*.whl"))
    if not wheels:
        print(f"skipped: no vLLM 0.33.0 wheel in {args.wheels}")
        return 0
    m = engine_classes(wheels[0], "vllm/distributed/kv_events.py", "vllm033_kv_events")
    ns = block_pool_methods(wheels[0])
    hasher = vllm_hasher(wheels[0], lookahead=True)
    for name, (lookahead, stores, requests) in scenarios().items():
        events, decoded, held = [], [], set()
        for tokens, spec, spans in stores:
            hashes = hasher(tokens, spec)
            for first, end in spans:
                event, extra = store(m, ns, tokens, spec, hashes, first, end)
                events.append(event)
                held.update(hashes[first:end])
                # What the decoder must return (as tests/kv/test_events.py reads recordings).
                decoded.append({
                    "type": "BlockStored", "block_hashes": [str(h) for h in event.block_hashes],
                    "parent_block_hash": None if event.parent_block_hash is None else str(event.parent_block_hash),
                    "token_ids": event.token_ids, "block_size": BS, "medium": "GPU", "lora_name": event.lora_name,
                    "cache_salt": spec.cache_salt if first == 0 else "",
                    "mm_keys": [[[k[1], k[2]] for k in (keys or ()) if k[0] == "mm"] for keys in extra]
                    if any(k[0] == "mm" for keys in extra for k in (keys or ())) else [],
                    "lookahead_token_ids": event.lookahead_token_ids,
                })
        expected = []
        for tokens, spec in requests:
            cached = 0
            for h in hasher(tokens, spec):
                if h not in held:
                    break
                cached += 1
            expected.append({"token_ids": tokens, "lora_name": spec.lora_name, "cache_salt": spec.cache_salt,
                             "mm_items": [[i.identifier, i.offset, i.length] for i in spec.mm_items],
                             "engine_blocks": cached})
        batch = m.KVEventBatch(ts=1700000000.5, events=events, data_parallel_rank=None)
        stem = f"vllm-0.33-lookahead-{name}-int"
        (OUT / f"{stem}.msgpack").write_bytes(msgspec.msgpack.Encoder().encode(batch))
        (OUT / f"{stem}.expected.json").write_text(json.dumps({
            "ts": batch.ts, "dp_rank": None, "events": decoded, "block_size": BS, "lookahead": lookahead,
            "requests": expected}, indent=1) + "\n")
        print(f"wrote {stem}: engine blocks {[r['engine_blocks'] for r in expected]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
