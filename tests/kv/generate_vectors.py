"""Writes tests/data/kv/vectors.json: block hashes computed by the engines' own code.

Not run by the tests (they only read the JSON). Re-run it when cases change:

    mkdir -p /tmp/wheels && cd /tmp/wheels
    pip download --no-deps vllm==0.33.0 vllm==0.30.0 sglang==0.5.23 ai-dynamo-runtime==1.6.1
    pip install pybind11            # to build SGLang's page-hash extension
    .venv/bin/python tests/kv/generate_vectors.py --wheels /tmp/wheels

How each engine's code is run without installing the engine (nothing of it is copied into this
repository):
- vLLM 0.33.0 (tagged extra keys) and 0.30.0 (legacy layout): `vllm/utils/hashing.py` is executed
  as is; from `vllm/v1/core/kv_cache_utils.py` the functions `init_none_hash`,
  `resolve_none_hash_seed`, `hash_block_tokens`, `generate_block_hash_extra_keys` (and its LoRA /
  MM / prompt-embeds helpers), `get_request_block_hasher` and `maybe_convert_block_hash` are
  extracted with `ast` (annotations stripped) and executed against a stand-in `Request` carrying
  the case's tokens, LoRA request, cache salt and mm features. PYTHONHASHSEED is set or unset per
  case before `init_none_hash`. Lookahead cases (vLLM 0.33.0 only) call
  `get_request_block_hasher(block_size, hash_fn, lookahead)`, which also runs
  `generate_lookahead_block_hash_extra_keys` and, on resumed requests,
  `vllm/multimodal/utils.py:get_mm_features_in_window`; each is also hashed as the engine does it
  while tokens arrive (prompts of 0, 1, n/2 and n-1 tokens, then one token at a time) and must
  give the one-pass values.
- SGLang 0.5.23: `cpp_utils/hash_binding.cpp` is compiled with pybind11 and OpenSSL and called
  through SGLang's own `native_hash.get_native_hash` / `utils.get_hash_str`; the salt prior,
  `hash_str_to_int64`, `kv_event_namespace_seed` and `namespaced_block_hash` are SGLang's own
  functions (ast-extracted). The choice of namespace per event format follows
  `KVCacheEventRecorder._namespace_seed`.
- Dynamo (ai-dynamo-runtime 1.6.1): the compiled `dynamo._core.compute_block_hash_for_seq` with
  `lora_name`, `cache_namespace` and per-block `block_mm_infos`. The per-item mm hash it is given is
  Dynamo's documented `hash_mm_identifier` rule (that function is not exported by the wheel).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import logging
import os
import subprocess
import sys
import sysconfig
import tempfile
import types
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.kv.cases import spec_of, tokens_of, vector_cases  # noqa: E402
from router_adapter._reference import dynamo_mm_identifier_hash  # noqa: E402

OUT = REPO / "tests" / "data" / "kv" / "vectors.json"


def load_functions(source: str, names: set[str], namespace: dict[str, Any], filename: str) -> None:
    """Executes the named top-level functions and assignments of `source` in `namespace`."""
    tree = ast.parse(source)
    keep: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            for arg in [*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs]:
                arg.annotation = None
            node.returns = None
            keep.append(node)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets):
            keep.append(node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in names:
            if node.value is not None:
                keep.append(ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno))
    missing = names - {getattr(n, "name", None) or getattr(n.targets[0], "id", None) for n in keep}
    if missing:
        raise SystemExit(f"{filename}: not found: {sorted(missing)}")
    module = ast.fix_missing_locations(ast.Module(body=keep, type_ignores=[]))
    exec(compile(module, filename, "exec"), namespace)  # noqa: S102 - the engine's own code, on purpose


def find_wheel(wheels: Path, prefix: str) -> Path | None:
    found = sorted(wheels.glob(f"{prefix}*.whl"))
    return found[0] if found else None


# --- vLLM --------------------------------------------------------------------------------------


def vllm_hasher(wheel: Path, lookahead: bool = False) -> Callable[[list[int], Any], list[int]]:
    """vLLM's request block hasher; `lookahead` (vLLM >= 0.33) also loads its lookahead hashing
    (`generate_lookahead_block_hash_extra_keys`, and `get_mm_features_in_window`, which the hasher
    calls when it resumes a request past its first block)."""
    z = zipfile.ZipFile(wheel)
    hashing = types.ModuleType("vllm_hashing")
    exec(compile(z.read("vllm/utils/hashing.py").decode(), f"{wheel.name}:vllm/utils/hashing.py", "exec"),
         hashing.__dict__)  # noqa: S102
    names = {
        "DEFAULT_NONE_HASH_SEED", "_NON_CRYPTO_HASH_FUNCTIONS", "resolve_none_hash_seed", "init_none_hash",
        "maybe_convert_block_hash", "hash_block_tokens", "_gen_mm_extra_hash_keys", "_gen_lora_extra_hash_keys",
        "_gen_prompt_embeds_extra_hash_keys", "generate_block_hash_extra_keys", "get_request_block_hasher",
    }
    ns: dict[str, Any] = {
        "os": os, "hashlib": hashlib, "logger": logging.getLogger("vllm"),
        "envs": SimpleNamespace(VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=True),
        "xxhash": hashing.xxhash, "xxhash_cbor": hashing.xxhash_cbor, "BlockHash": lambda b: b,
        "Any": Any, "_NONE_HASH_SEED": None,
    }
    if lookahead:
        names.add("generate_lookahead_block_hash_extra_keys")
        ns["bisect"] = __import__("bisect")
        load_functions(z.read("vllm/multimodal/utils.py").decode(), {"get_mm_features_in_window"}, ns,
                       f"{wheel.name}:vllm/multimodal/utils.py")
    load_functions(z.read("vllm/v1/core/kv_cache_utils.py").decode(), names, ns, f"{wheel.name}:kv_cache_utils.py")

    def run(tokens: list[int], spec: Any) -> list[int]:
        algo = spec.algorithm.removeprefix("vllm_")
        hash_fn = hashing.get_hash_fn_by_name(algo)
        saved = os.environ.pop("PYTHONHASHSEED", None)
        try:
            if spec.seed is not None:
                os.environ["PYTHONHASHSEED"] = spec.seed
            ns["init_none_hash"](hash_fn)
        finally:
            os.environ.pop("PYTHONHASHSEED", None)
            if saved is not None:
                os.environ["PYTHONHASHSEED"] = saved
        def request(prompt: list[int]) -> SimpleNamespace:
            return SimpleNamespace(
                block_hashes=[], num_tokens=len(prompt), all_token_ids=list(prompt),
                mm_features=[
                    SimpleNamespace(identifier=m.identifier,
                                    mm_position=SimpleNamespace(offset=m.offset, length=m.length))
                    for m in spec.mm_items
                ],
                lora_request=SimpleNamespace(lora_name=spec.lora_name, lora_path=spec.lora_path, lora_int_id=1)
                if spec.lora_name else None,
                cache_salt=spec.cache_salt or None, prompt_embeds=None, _prompt_embeds_per_block_hashes={},
            )

        if not spec.lookahead:
            digests = ns["get_request_block_hasher"](spec.block_size, hash_fn)(request(tokens))
            return [ns["maybe_convert_block_hash"](d) for d in digests]
        if not lookahead:
            raise SystemExit(f"{wheel.name}: no lookahead hashing")
        hasher = ns["get_request_block_hasher"](spec.block_size, hash_fn, spec.lookahead)
        digests = hasher(request(tokens))
        # The engine hashes a request as its tokens arrive (the prompt, then each sampled token:
        # `Request.append_output_token_ids`), resuming past its blocks with the mm cursor found by
        # `get_mm_features_in_window`; the values must not depend on where the prompt ended.
        for prompt_len in sorted({0, 1, len(tokens) // 2, len(tokens) - 1} & set(range(len(tokens)))):
            r = request(tokens[:prompt_len])
            r.block_hashes.extend(hasher(r))
            for token in tokens[prompt_len:]:
                r.all_token_ids.append(token)
                r.num_tokens += 1
                r.block_hashes.extend(hasher(r))
            if r.block_hashes != digests:
                raise SystemExit(f"vLLM's incremental lookahead hashes differ from one pass: {spec}")
        return [ns["maybe_convert_block_hash"](d) for d in digests]

    return run


# --- SGLang ------------------------------------------------------------------------------------


def build_sglang_extension(z: zipfile.ZipFile, build: Path) -> types.ModuleType:
    import pybind11

    src = build / "hash_binding.cpp"
    src.write_bytes(z.read("sglang/srt/mem_cache/cpp_utils/hash_binding.cpp"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    out = build / f"hicache_hash_cpp{suffix}"
    subprocess.run(
        ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-DTORCH_EXTENSION_NAME=hicache_hash_cpp",
         f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}", str(src), "-o", str(out),
         "-lcrypto"],
        check=True,
    )
    spec = importlib.util.spec_from_file_location("hicache_hash_cpp", out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sglang_hasher(wheel: Path, build: Path) -> Callable[[list[int], Any], list[int]]:
    z = zipfile.ZipFile(wheel)
    extension = build_sglang_extension(z, build)
    native = types.ModuleType("sglang_native_hash")
    native_src = z.read("sglang/srt/mem_cache/cpp_utils/native_hash.py").decode()
    exec(compile(native_src, "native_hash.py", "exec"), native.__dict__)  # noqa: S102
    native._load_native_hash_module = lambda: extension
    ns: dict[str, Any] = {"hashlib": hashlib, "get_native_hash": native.get_native_hash, "Optional": Any}
    load_functions(z.read("sglang/srt/mem_cache/utils.py").decode(), {"get_hash_str", "hash_str_to_int64"}, ns,
                   "sglang/srt/mem_cache/utils.py")
    load_functions(z.read("sglang/srt/disaggregation/kv_events.py").decode(),
                   {"_NAMESPACE_SEED_TAG", "kv_event_namespace_seed", "namespaced_block_hash"}, ns,
                   "sglang/srt/disaggregation/kv_events.py")

    def run(tokens: list[int], spec: Any) -> list[int]:
        page = spec.block_size
        full = tokens[: len(tokens) // page * page]
        extra_key = spec.sglang_extra_key or None
        salt = spec.cache_salt or None
        # compute_node_event_hash_values: a salted chain starts from the salt digest (hex).
        prior = (hashlib.sha256(b"sglang-cache-salt-v1\0" + salt.encode()).hexdigest()
                 if (extra_key, salt) != (None, None) and salt is not None else None)
        hexes = ns["get_hash_str"](full, prior, page_size=page) if full else []
        values = [ns["hash_str_to_int64"](h) for h in hexes]
        # KVCacheEventRecorder._namespace_seed.
        if spec.sglang_event_format == "dynamo":
            seed = ns["kv_event_namespace_seed"](extra_key=extra_key, cache_salt=salt)
        else:
            seed = ns["kv_event_namespace_seed"](extra_key=extra_key if spec.lora_name else None, cache_salt=None)
        values = [ns["namespaced_block_hash"](v, namespace_seed=seed) for v in values]
        return [v & ((1 << 64) - 1) for v in values]

    return run


# --- Dynamo ------------------------------------------------------------------------------------


def dynamo_hasher(wheel: Path, build: Path) -> Callable[[list[int], Any], list[int]]:
    with zipfile.ZipFile(wheel) as z:
        z.extractall(build / "dynamo_wheel", [n for n in z.namelist() if n.startswith("dynamo/_core")])
    spec_ = importlib.util.spec_from_file_location("_core", next((build / "dynamo_wheel" / "dynamo").glob("_core*.so")))
    core = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(core)

    def run(tokens: list[int], spec: Any) -> list[int]:
        bs = spec.block_size
        blocks = len(tokens) // bs
        infos = None
        if spec.mm_items:
            infos = []
            for b in range(blocks):
                objs = [{"mm_hash": dynamo_mm_identifier_hash(m.identifier), "offsets": []} for m in spec.mm_items
                        if m.length and m.offset < (b + 1) * bs and m.offset + m.length > b * bs]
                infos.append({"mm_objects": objs} if objs else None)
        return core.compute_block_hash_for_seq(
            tokens, bs, block_mm_infos=infos, lora_name=spec.lora_name or None,
            cache_namespace=spec.namespace or None,
        )

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=Path, required=True)
    args = parser.parse_args()
    wheels = {
        "vllm033": find_wheel(args.wheels, "vllm-0.33.0"), "vllm030": find_wheel(args.wheels, "vllm-0.30.0"),
        "sglang": find_wheel(args.wheels, "sglang-0.5.23"), "dynamo": find_wheel(args.wheels, "ai_dynamo_runtime-1.6.1"),
    }
    if not all(wheels.values()):
        print(f"skipped: wheels missing in {args.wheels}: {[k for k, v in wheels.items() if not v]}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        build = Path(tmp)
        vllm_new, vllm_old = vllm_hasher(wheels["vllm033"], lookahead=True), vllm_hasher(wheels["vllm030"])
        runners = {"sglang": sglang_hasher(wheels["sglang"], build), "dynamo": dynamo_hasher(wheels["dynamo"], build)}
        cases = []
        for case in vector_cases():
            spec, tokens = spec_of(case), tokens_of(case)
            if spec.algorithm.startswith("vllm_"):
                engine = "vllm-0.33.0" if spec.extra_keys == "tagged" else "vllm-0.30.0"
                hashes = (vllm_new if spec.extra_keys == "tagged" else vllm_old)(tokens, spec)
            elif spec.algorithm == "sglang_sha256":
                engine, hashes = "sglang-0.5.23", runners["sglang"](tokens, spec)
            else:
                engine, hashes = "ai-dynamo-runtime-1.6.1", runners["dynamo"](tokens, spec)
            cases.append({**case, "engine": engine, "hashes": [str(h) for h in hashes]})
    OUT.write_text(json.dumps({
        "produced_by": "tests/kv/generate_vectors.py (see its docstring)",
        "hashes": "unsigned 64-bit event values as decimal strings",
        "cases": cases,
    }, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(cases)} cases to {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
