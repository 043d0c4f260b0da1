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

`vllm-0.33-mm`: stores of a prompt with images, whose `extra_keys` are vLLM 0.33.0's own: its
`generate_block_hash_extra_keys` (with the LoRA / multimodal / prompt-embeds helpers) and
`to_event_extra_keys` are extracted from `vllm/v1/core/kv_cache_utils.py` with `ast` (as
generate_vectors.py does) and run per block as `BlockPool.cache_full_blocks` runs them, against a
stand-in `Request` carrying the prompt's mm features, LoRA request and cache salt.
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
from router_adapter.spec import HashSpec, MmItem  # noqa: E402
from tests.kv.generate_vectors import load_functions  # noqa: E402

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


#: The multimodal prompt: text | image (2 blocks) | text, a small image at offset 4 of the last block.
MM_BS = 16
MM_PAD = 151655
MM_TOKENS = list(range(1000, 1016)) + [MM_PAD] * 32 + list(range(2000, 2004)) + [MM_PAD] * 8 + list(range(3000, 3004))
MM_X, MM_Y, MM_Z = "a" * 64, "b" * 64, "c" * 64


def mm_items(image: str) -> tuple[MmItem, ...]:
    return (MmItem(image, 16, 32), MmItem(MM_Z, 52, 8))


def vllm_event_extra_keys(wheel: Path) -> Any:
    """`(spec, first_block, end_block) -> (the blocks' extra keys, the store's extra_keys)`, by vLLM's
    own code: the tagged keys it hashes and the untagged ones it publishes."""
    names = {"_gen_mm_extra_hash_keys", "_gen_lora_extra_hash_keys", "_gen_prompt_embeds_extra_hash_keys",
             "generate_block_hash_extra_keys", "to_event_extra_keys"}
    ns: dict[str, Any] = {"Any": Any}
    load_functions(zipfile.ZipFile(wheel).read("vllm/v1/core/kv_cache_utils.py").decode(), names, ns,
                   f"{wheel.name}:kv_cache_utils.py")

    def run(spec: HashSpec, first: int, end: int) -> Any:
        request = types.SimpleNamespace(
            mm_features=[types.SimpleNamespace(identifier=m.identifier,
                                               mm_position=types.SimpleNamespace(offset=m.offset, length=m.length))
                         for m in spec.mm_items],
            lora_request=types.SimpleNamespace(lora_name=spec.lora_name, lora_path=spec.lora_path, lora_int_id=1)
            if spec.lora_name else None,
            cache_salt=spec.cache_salt or None, prompt_embeds=None, _prompt_embeds_per_block_hashes={},
        )
        # BlockPool.cache_full_blocks: one entry per block stored, the mm index carried from 0.
        keys, mm_index = [], 0
        for i in range(first, end):
            extra, mm_index = ns["generate_block_hash_extra_keys"](request, i * spec.block_size,
                                                                   (i + 1) * spec.block_size, mm_index)
            keys.append(extra)
        return keys, ns["to_event_extra_keys"](keys)

    return run


def mm_scenario(m: types.ModuleType, extra_keys_of: Any, hash_kind: str) -> tuple[Any, dict]:
    """Two workers' worth of stores of one prompt: with images X and Z under LoRA "ad" and salt
    "tenant" (two spans of the sequence), and with images Y and Z (one span)."""
    convert = (lambda d: d) if hash_kind == "bytes" else _reference.vllm_event_value
    a = HashSpec("vllm_sha256", MM_BS, cache_salt="tenant", lora_name="ad", lora_path="/ad", mm_items=mm_items(MM_X))
    b = HashSpec("vllm_sha256", MM_BS, mm_items=mm_items(MM_Y))
    ha = [convert(d) for d in _reference.vllm_digests(MM_TOKENS, a)]
    hb = [convert(d) for d in _reference.vllm_digests(MM_TOKENS, b)]
    spans = [(a, ha, 0, 2, "ad"), (a, ha, 2, 4, "ad"), (b, hb, 0, 4, None)]
    events = [
        m.BlockStored(block_hashes=h[first:end], parent_block_hash=h[first - 1] if first else None,
                      token_ids=MM_TOKENS[first * MM_BS : end * MM_BS], block_size=MM_BS, lora_id=1 if lora else None,
                      medium="GPU", lora_name=lora, extra_keys=extra_keys_of(spec, first, end)[1], group_idx=0)
        for spec, h, first, end, lora in spans
    ]
    batch = m.EventBatch(ts=1700000000.5, events=events, data_parallel_rank=None)

    def value(h: Any) -> str:
        return str(int.from_bytes(h[-8:], "big") if isinstance(h, bytes) else h & ((1 << 64) - 1))

    expected = [{
        "type": "BlockStored", "block_hashes": [value(h) for h in e.block_hashes],
        "parent_block_hash": None if e.parent_block_hash is None else value(e.parent_block_hash),
        "token_ids": e.token_ids, "block_size": e.block_size, "medium": e.medium, "lora_name": e.lora_name,
        "cache_salt": "tenant" if e.lora_name and e.parent_block_hash is None else "",
        # Each block's multimodal keys: the ("mm", identifier, offset) keys vLLM hashed for it.
        "mm_keys": [[[k[1], k[2]] for k in (keys or ()) if k[0] == "mm"] for keys in extra_keys_of(spec, first, end)[0]],
    } for e, (spec, _, first, end, _) in zip(events, spans)]
    return batch, {"ts": batch.ts, "dp_rank": None, "events": expected}


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
    extra_keys_of = vllm_event_extra_keys(wheels["vllm-0.33"][0])
    for kind in ["int", "bytes"]:
        batch, expected = mm_scenario(modules["vllm-0.33"], extra_keys_of, kind)
        stem = f"vllm-0.33-mm-{kind}"
        (OUT / f"{stem}.msgpack").write_bytes(encoder.encode(batch))
        (OUT / f"{stem}.expected.json").write_text(json.dumps(expected, indent=1) + "\n")
        print(f"wrote {stem}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
