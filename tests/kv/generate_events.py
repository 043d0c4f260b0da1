"""Writes tests/data/kv/events/*.msgpack: KV-event batches encoded with the engines' own msgspec
classes, and next to each a `.expected.json` with what our decoder must return.

Not run by the tests. Re-run it when scenarios change (wheels as for generate_vectors.py):

    .venv/bin/python tests/kv/generate_events.py --wheels /tmp/wheels

The classes `EventBatch`, `KVCacheEvent`, `BlockStored`, `BlockRemoved`, `AllBlocksCleared` are
taken unchanged (with `ast`) from `vllm/distributed/kv_events.py` of vLLM 0.33.0 (events as tagged
maps) and 0.23.0 (events as positional arrays), and from `sglang/srt/disaggregation/kv_events.py`
of SGLang 0.5.23; only the class definitions run, not the publishers. Block hashes are the values
the engines would publish for the scenario's tokens (computed with router_adapter's reference, which
tests/data/kv/vectors.json checks against the engines): vLLM as unsigned 64-bit ints or as full
digests (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`), SGLang as signed int64.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import types
import zipfile
from pathlib import Path
from typing import Any, Optional, Union

import msgspec

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from router_adapter import _reference  # noqa: E402
from router_adapter.spec import HashSpec  # noqa: E402

OUT = REPO / "tests" / "data" / "kv" / "events"
CLASSES = {"EventBatch", "KVCacheEvent", "BlockStored", "BlockRemoved", "AllBlocksCleared", "KVEventBatch"}


def engine_classes(wheel: Path, path: str, name: str) -> types.ModuleType:
    source = zipfile.ZipFile(wheel).read(path).decode()
    tree = ast.parse(source)
    keep = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in CLASSES]
    module = types.ModuleType(name)
    module.__dict__.update({"msgspec": msgspec, "Any": Any, "Optional": Optional, "Union": Union,
                            "ExternalBlockHash": Union[bytes, int]})
    sys.modules[name] = module
    exec(compile(ast.Module(body=keep, type_ignores=[]), f"{wheel.name}:{path}", "exec"), module.__dict__)  # noqa: S102
    return module


def scenario(m: types.ModuleType, engine: str, hash_kind: str) -> tuple[Any, list[dict]]:
    """Stores (two spans of one sequence, a LoRA + salted sequence), a removal, a clear."""
    tokens = list(range(1000, 1064))
    salted = list(range(5000, 5032))
    if engine == "sglang":
        h1 = _reference.sglang_block_hashes(tokens, HashSpec("sglang_sha256", 16))
        h2 = _reference.sglang_block_hashes(salted, HashSpec("sglang_sha256", 16, cache_salt="tenant"))
    else:
        d1 = _reference.vllm_digests(tokens, HashSpec("vllm_sha256", 16))
        d2 = _reference.vllm_digests(salted, HashSpec("vllm_sha256", 16, cache_salt="tenant", lora_name="ad",
                                                      lora_path="/ad"))
        convert = (lambda d: d) if hash_kind == "bytes" else _reference.vllm_event_value
        h1, h2 = [convert(d) for d in d1], [convert(d) for d in d2]
    common: dict[str, Any] = {"lora_id": None}
    if engine == "sglang":
        stores = [
            m.BlockStored(block_hashes=h1[:2], parent_block_hash=None, token_ids=tokens[:32], block_size=16,
                          medium="GPU", **common),
            m.BlockStored(block_hashes=h1[2:], parent_block_hash=h1[1], token_ids=tokens[32:], block_size=16,
                          medium="CPU_PINNED", session_id="s-1", **common),
            m.BlockStored(block_hashes=h2, parent_block_hash=None, token_ids=salted, block_size=16, medium="GPU",
                          cache_salt="tenant", lora_name="ad", lora_id=7),
        ]
    else:
        extra = {"extra_keys": [("ad", "tenant"), ("ad",)]}
        stores = [
            m.BlockStored(block_hashes=h1[:2], parent_block_hash=None, token_ids=tokens[:32], block_size=16,
                          medium="GPU", lora_name=None, **common),
            m.BlockStored(block_hashes=h1[2:], parent_block_hash=h1[1], token_ids=tokens[32:], block_size=16,
                          medium="CPU", lora_name=None, **common),
            m.BlockStored(block_hashes=h2, parent_block_hash=None, token_ids=salted, block_size=16, medium="GPU",
                          lora_id=7, lora_name="ad", **extra),
        ]
    removed = m.BlockRemoved(block_hashes=[h1[3]], medium="CPU_PINNED" if engine == "sglang" else "CPU")
    events = [*stores, removed, m.AllBlocksCleared()]
    rank = None if engine == "vllm-0.33" else 0
    batch = m.EventBatch(ts=1700000000.25, events=events, **({"data_parallel_rank": rank} if engine != "sglang" else {"attn_dp_rank": 0}))

    def value(h: Any) -> str:
        return str(int.from_bytes(h[-8:], "big") if isinstance(h, bytes) else h & ((1 << 64) - 1))

    expected = []
    for e in events:
        if isinstance(e, m.BlockStored):
            expected.append({
                "type": "BlockStored", "block_hashes": [value(h) for h in e.block_hashes],
                "parent_block_hash": None if e.parent_block_hash is None else value(e.parent_block_hash),
                "token_ids": e.token_ids, "block_size": e.block_size, "medium": e.medium, "lora_name": e.lora_name,
                "cache_salt": "tenant" if e.block_hashes == h2 else "",
            })
        elif isinstance(e, m.BlockRemoved):
            expected.append({"type": "BlockRemoved", "block_hashes": [value(h) for h in e.block_hashes], "medium": e.medium})
        else:
            expected.append({"type": "AllBlocksCleared"})
    return batch, [{"ts": batch.ts, "dp_rank": rank, "events": expected}]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=Path, required=True)
    args = parser.parse_args()
    wheels = {k: sorted(args.wheels.glob(p)) for k, p in
              {"vllm-0.33": "vllm-0.33.0*.whl", "vllm-0.23": "vllm-0.23.0*.whl", "sglang": "sglang-0.5.23*.whl"}.items()}
    if not all(wheels.values()):
        print(f"skipped: wheels missing in {args.wheels}")
        return 0
    modules = {
        "vllm-0.33": engine_classes(wheels["vllm-0.33"][0], "vllm/distributed/kv_events.py", "vllm033_kv_events"),
        "vllm-0.23": engine_classes(wheels["vllm-0.23"][0], "vllm/distributed/kv_events.py", "vllm023_kv_events"),
        "sglang": engine_classes(wheels["sglang"][0], "sglang/srt/disaggregation/kv_events.py", "sglang_kv_events"),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    encoder = msgspec.msgpack.Encoder()
    for engine, kinds in {"vllm-0.33": ["int", "bytes"], "vllm-0.23": ["int", "bytes"], "sglang": ["int"]}.items():
        for kind in kinds:
            batch, expected = scenario(modules[engine], engine, kind)
            stem = f"{engine}-{kind}"
            (OUT / f"{stem}.msgpack").write_bytes(encoder.encode(batch))
            (OUT / f"{stem}.expected.json").write_text(json.dumps(expected[0], indent=1) + "\n")
            print(f"wrote {stem}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
