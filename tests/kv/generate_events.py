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

`sglang-eagle-int` (SGLang with EAGLE speculative decoding: bigram pages) is SGLang's publisher
itself: `KVCacheEventRecorder` (`sglang/srt/mem_cache/events.py`: `record_store` with its
"bigram pages expose tuples", `record_remove`, `enqueue`'s coalescing), `RadixKey`
(`mem_cache/radix_cache.py`, `is_bigram=True` as `RadixCache` makes it when `is_eagle`), the node
hash functions of `mem_cache/utils.py` and the namespace functions of
`disaggregation/kv_events.py`, all extracted with `ast`, with `cpp_utils/hash_binding.cpp`
compiled as tests/kv/generate_vectors.py does (needs pybind11, g++ and OpenSSL), run over stand-in
radix nodes (two nodes of two pages each, the second a child of the first). Its expected
`token_ids` are the pairs' first elements, with `"bigram": true`.
"""

from __future__ import annotations

import __future__
import argparse
import ast
import json
import sys
import tempfile
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


def load_definitions(source: str, names: set[str], namespace: dict[str, Any], filename: str) -> None:
    """Executes the named top-level classes, functions and assignments of `source` in `namespace`
    (annotations not evaluated: they name modules not loaded here)."""
    keep = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in names:
            keep.append(node)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets):
            keep.append(node)
    found = {getattr(n, "name", None) or getattr(n.targets[0], "id", None) for n in keep}
    if names - found:
        raise SystemExit(f"{filename}: not found: {sorted(names - found)}")
    code = compile(ast.Module(body=keep, type_ignores=[]), filename, "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, namespace)  # noqa: S102 - the engine's own code, on purpose


def sglang_eagle(wheel: Path, build: Path) -> tuple[bytes, dict]:
    """A batch SGLang's own publisher records for an EAGLE (bigram) radix tree (see the module docs)."""
    from tests.kv import generate_vectors

    z = zipfile.ZipFile(wheel)
    extension = generate_vectors.build_sglang_extension(z, build)
    native = types.ModuleType("sglang_native_hash")
    exec(compile(z.read("sglang/srt/mem_cache/cpp_utils/native_hash.py").decode(), "native_hash.py", "exec"),  # noqa: S102
         native.__dict__)
    native._load_native_hash_module = lambda: extension
    import enum
    import hashlib
    from array import array

    ns: dict[str, Any] = {"msgspec": msgspec, "Any": Any, "Optional": Optional, "Union": Union, "enum": enum,
                          "hashlib": hashlib, "array": array, "get_native_hash": native.get_native_hash}
    load_definitions(z.read("sglang/srt/disaggregation/kv_events.py").decode(),
                     {"KVCacheEvent", "BlockStored", "BlockRemoved", "AllBlocksCleared", "EventBatch", "StorageMedium",
                      "_NAMESPACE_SEED_TAG", "kv_event_namespace_seed", "namespaced_block_hash"}, ns,
                     "sglang/srt/disaggregation/kv_events.py")
    load_definitions(z.read("sglang/srt/mem_cache/utils.py").decode(),
                     {"get_hash_str", "storage_namespace_seed", "get_storage_hash_str", "hash_str_to_int64",
                      "compute_node_hash_values", "compute_node_event_hash_values"}, ns, "sglang/srt/mem_cache/utils.py")
    load_definitions(z.read("sglang/srt/mem_cache/radix_cache.py").decode(), {"RadixKey"}, ns,
                     "sglang/srt/mem_cache/radix_cache.py")
    load_definitions(z.read("sglang/srt/mem_cache/events.py").decode(),
                     {"_LORA_ID_LEN", "LoRANameTable", "KvEventLoraNames", "KVCacheEventRecorder"}, ns,
                     "sglang/srt/mem_cache/events.py")

    class Node:  # the fields of a radix TreeNode the recorder reads
        def __init__(self, key: Any, parent: Any) -> None:
            self.key, self.parent, self.hash_value, self.event_hash_value = key, parent, None, None

    page = 16
    raw = list(range(2000, 2000 + 4 * page + 1))  # 4 * page bigrams span one raw token more
    whole = ns["RadixKey"](array("q", raw), is_bigram=True)
    root = Node(ns["RadixKey"](array("q"), is_bigram=True), None)
    root.hash_value = []
    first = Node(whole[: 2 * page], root)
    second = Node(whole[2 * page : 4 * page], first)
    recorder = ns["KVCacheEventRecorder"](enabled=True, page_size=page)
    recorder.record_store(first)
    recorder.record_store(second)  # coalesced into the first store (its parent is the tail's last hash)
    recorder.record_remove(second)
    batch = ns["EventBatch"](ts=1700000000.5, events=recorder.take(), attn_dp_rank=0)

    def value(h: int) -> str:
        return str(h & ((1 << 64) - 1))

    expected = []
    for e in batch.events:
        if isinstance(e, ns["BlockStored"]):
            expected.append({
                "type": "BlockStored", "block_hashes": [value(h) for h in e.block_hashes],
                "parent_block_hash": None if e.parent_block_hash is None else value(e.parent_block_hash),
                "token_ids": [pair[0] for pair in e.token_ids], "bigram": True, "block_size": e.block_size,
                "medium": e.medium, "lora_name": e.lora_name, "cache_salt": "",
            })
        else:
            expected.append({"type": "BlockRemoved", "block_hashes": [value(h) for h in e.block_hashes],
                             "medium": e.medium})
    return msgspec.msgpack.encode(batch), {"ts": batch.ts, "dp_rank": 0, "events": expected}


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
    with tempfile.TemporaryDirectory() as build:
        data, expected_eagle = sglang_eagle(wheels["sglang"][0], Path(build))
    (OUT / "sglang-eagle-int.msgpack").write_bytes(data)
    (OUT / "sglang-eagle-int.expected.json").write_text(json.dumps(expected_eagle, indent=1) + "\n")
    print("wrote sglang-eagle-int")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
