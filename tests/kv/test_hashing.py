"""Block hashing parity: the reference against the engines' own code (tests/data/kv/vectors.json),
and the native core against the reference on generated sequences for every algorithm and option."""

from __future__ import annotations

import itertools
import json
import random
import re
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from router_adapter import _reference
from router_adapter.errors import InvalidSpec
from router_adapter.spec import ALGORITHMS, HashSpec, MmItem
from sidecar.errors import InvalidArgument, status_of
from sidecar.factory import get_hasher
from tests.kv.cases import lcg_tokens, spec_of, tokens_of

pytestmark = pytest.mark.parity

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "data" / "kv" / "vectors.json").read_text())["cases"]
native = pytest.importorskip("sidecar.native.hashing", reason="native library not built")


def _id(case: dict) -> str:
    s = case["spec"]
    return f"{s['algorithm']}-bs{s['block_size']}-n{case['tokens']['count']}-{case['tokens']['seed']}"


@pytest.mark.parametrize("case", VECTORS, ids=_id)
def test_engine_vectors(case: dict) -> None:
    spec, tokens = spec_of(case), tokens_of(case)
    expected = [int(h) for h in case["hashes"]]
    assert _reference.block_hashes(tokens, spec) == expected
    assert native.block_hashes(tokens, spec) == expected


def test_vectors_cover_every_algorithm_and_layout() -> None:
    seen = {(c["spec"]["algorithm"], c["spec"].get("extra_keys", "tagged")) for c in VECTORS}
    assert {a for a, _ in seen} == set(ALGORITHMS)
    assert ("vllm_sha256", "legacy") in seen and ("vllm_sha256", "tagged") in seen
    lookahead = {(c["spec"]["algorithm"], c["spec"]["lookahead"]) for c in VECTORS if c["spec"].get("lookahead")}
    assert lookahead == {(a, n) for a in ALGORITHMS[:4] for n in (1, 3)}
    for n in (1, 3):
        # With LoRA, salt and mm items together; and a last block with fewer than L followers.
        assert any(c["spec"].get("lookahead") == n and c["spec"].get("mm_items") and c["spec"].get("lora_name")
                   and c["spec"].get("cache_salt") for c in VECTORS)
        assert any(c["spec"].get("lookahead") == n and c["tokens"]["count"] % c["spec"]["block_size"] < n
                   for c in VECTORS)


# --- native against reference on generated inputs --------------------------------------------

_STRINGS = ["", "a", "é", "x" * 2, "tenant-ünïcode-🙂", "mm", "lora"]


def _random_spec(rng: random.Random, algorithm: str, block_size: int) -> HashSpec:
    mm: list[MmItem] = []
    offset = rng.randrange(0, 3 * block_size + 1)
    for _ in range(rng.randrange(0, 4)):
        ident = rng.choice(["a" * 64, "img", "same", "same", "0123456789abcdef" * 4, "é"])
        length = rng.randrange(0, 3 * block_size + 2)
        mm.append(MmItem(ident, offset, length))
        offset += rng.randrange(0, length + 2)
    lora = rng.choice(_STRINGS + ["adapter"])
    return HashSpec(
        algorithm=algorithm,
        block_size=block_size,
        seed=rng.choice([None, "0", "", "PYTHONHASHSEED-ünï"]) if "xxhash" not in algorithm else rng.choice(["0", "7", ""]),
        cache_salt=rng.choice(_STRINGS),
        lora_name=lora,
        lora_path=rng.choice(_STRINGS + [lora]),
        extra_keys=rng.choice(["tagged", "legacy"]),
        namespace=rng.choice(_STRINGS),
        mm_items=tuple(mm),
        sglang_extra_key=rng.choice(["", "k", "extra-key-0123456789abcdef0123456789abcdef"]),
        sglang_event_format=rng.choice(["default", "dynamo"]),
        sequence_hashes=rng.random() < 0.5,
    )


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_native_matches_reference_on_generated_sequences(algorithm: str) -> None:
    rng = random.Random(f"kv-{algorithm}")
    compared = 0
    for i in range(250):
        block_size = rng.choice([1, 2, 3, 4, 5, 16, 17, 32, 64])
        tokens = lcg_tokens(i, rng.randrange(0, 6 * block_size + 3), rng.choice([50, 160_000, 2**31, 2**32]))
        spec = _random_spec(rng, algorithm, block_size)
        assert native.block_hashes(tokens, spec) == _reference.block_hashes(tokens, spec), spec
        compared += 1
    assert compared == 250


@pytest.mark.parametrize("algorithm", ["vllm_sha256", "vllm_sha256_cbor", "vllm_xxhash", "vllm_xxhash_cbor"])
def test_native_matches_reference_with_lookahead(algorithm: str) -> None:
    # vLLM >= 0.33 with an EAGLE/MTP drafter: lookahead tokens (and the multimodal items they
    # overlap) in every block's extra keys; blocks without `lookahead` followers are not hashed.
    rng = random.Random(f"kv-lookahead-{algorithm}")
    for i in range(250):
        block_size = rng.choice([1, 2, 3, 4, 16, 17])
        lookahead = rng.choice([1, 1, 2, 3, 5, 17, 256])
        spec = replace(_random_spec(rng, algorithm, block_size), extra_keys="tagged", lookahead=lookahead)
        tokens = lcg_tokens(i, rng.randrange(0, 6 * block_size + lookahead + 3), rng.choice([50, 2**31, 2**32]))
        values = native.block_hashes(tokens, spec)
        assert values == _reference.block_hashes(tokens, spec), spec
        assert len(values) == max(0, len(tokens) - lookahead) // block_size


def test_lookahead_changes_every_block_and_zero_is_the_plain_hash() -> None:
    tokens = lcg_tokens(3, 64, 1000)
    for hasher in (get_hasher("native"), get_hasher("reference")):
        plain = hasher.block_hashes(tokens, HashSpec("vllm_sha256", 16))
        assert hasher.block_hashes(tokens, HashSpec("vllm_sha256", 16, lookahead=0)) == plain
        one = hasher.block_hashes(tokens, HashSpec("vllm_sha256", 16, lookahead=1))
        assert len(one) == 3 and not set(one) & set(plain)
        # The same prefix followed by another token: another hash for the last block only.
        other = hasher.block_hashes(tokens[:48] + [tokens[48] + 1], HashSpec("vllm_sha256", 16, lookahead=1))
        assert other[:2] == one[:2] and other[2] != one[2]


@pytest.mark.parametrize("algorithm", ["vllm_sha256", "vllm_xxhash"])
@pytest.mark.parametrize("block_size", [21822, 21823, 21824, 21825, 13101, 13102, 13103, 9352, 9353, 30000])
def test_pickle_framing_around_64k(algorithm: str, block_size: int) -> None:
    # 3-byte ints (BININT2) and 5-byte ints (BININT) put the 64 KiB frame boundary at every spot:
    # inside the tuple, right after its last element, and before the closing opcodes.
    for modulus in (65536, 2**31, 2**32):
        tokens = lcg_tokens(block_size + modulus, 2 * block_size, modulus)
        spec = HashSpec(algorithm, block_size, seed="0", lora_name="a", lora_path="", cache_salt="s")
        assert native.block_hashes(tokens, spec) == _reference.block_hashes(tokens, spec)


@pytest.mark.parametrize("algorithm", ["vllm_sha256", "vllm_sha256_cbor", "vllm_xxhash"])
def test_long_strings_bypass_frames(algorithm: str) -> None:
    # Strings of 64 KiB or more are written outside pickle frames; 256+ bytes use BINUNICODE.
    for n in (255, 256, 65535, 65536, 70000):
        spec = HashSpec(algorithm, 4, seed="s" * n, cache_salt="é" * (n // 2), lora_name="l" * n, lora_path="p")
        tokens = lcg_tokens(n, 13, 2**32)
        assert native.block_hashes(tokens, spec) == _reference.block_hashes(tokens, spec)


def test_prefix_keys_native_matches_reference() -> None:
    rng = random.Random(5)
    for i in range(200):
        bs = rng.choice([1, 4, 16, 64])
        tokens = lcg_tokens(i, rng.randrange(0, 5 * bs + 2), 2**32)
        args = (bs, rng.choice(_STRINGS), rng.choice(_STRINGS), rng.choice([None, 0, 2**64 - 1, rng.getrandbits(64)]))
        assert native.prefix_keys(tokens, *args) == _reference.prefix_keys(tokens, *args)


def test_prefix_keys_chain_continues_across_events() -> None:
    tokens = lcg_tokens(1, 64, 1000)
    for hasher in (get_hasher("native"), get_hasher("reference")):
        whole = hasher.prefix_keys(tokens, 16, "lora", "salt")
        first = hasher.prefix_keys(tokens[:32], 16, "lora", "salt")
        rest = hasher.prefix_keys(tokens[32:], 16, "lora", "", parent=first[-1])
        assert first + rest == whole


BAD_SPECS = [
    (HashSpec("vllm_md5", 16), "block_hashing.algorithm"),
    (HashSpec("vllm_sha256", 0), "block_hashing.block_size"),
    (HashSpec("vllm_xxhash", 16), "block_hashing.seed"),
    (HashSpec("vllm_xxhash_cbor", 16), "block_hashing.seed"),
    (HashSpec("vllm_sha256", 16, extra_keys="v2"), "block_hashing.vllm_extra_keys"),
    (HashSpec("sglang_sha256", 16, sglang_event_format="x"), "block_hashing.sglang_event_format"),
    (HashSpec("vllm_sha256", 16, mm_items=(MmItem("a", 5, 1), MmItem("b", 1, 1))), "block_hashing.mm_items[1]"),
    (HashSpec("vllm_sha256", 16, mm_items=(MmItem("", 5, 1),)), "block_hashing.mm_items[0].identifier"),
    # Past the engine's int64 positions: the reference hashed them, the native spec refused them.
    (HashSpec("vllm_sha256", 16, mm_items=(MmItem("a", (1 << 64) - 2, 5),)), "block_hashing.mm_items[0]: offset + length"),
    (HashSpec("dynamo_xxh3", 16, mm_items=(MmItem("a", 1 << 63, 0),)), "block_hashing.mm_items[0]: offset "),
    (HashSpec("sglang_sha256", 16, lookahead=1), "block_hashing.vllm_lookahead: only vLLM"),
    (HashSpec("dynamo_xxh3", 16, lookahead=1), "block_hashing.vllm_lookahead: only vLLM"),
    # vLLM 0.20 to 0.30 (legacy extra keys) has no lookahead hashing.
    (HashSpec("vllm_sha256", 16, extra_keys="legacy", lookahead=1), "block_hashing.vllm_lookahead: the legacy"),
    (HashSpec("vllm_sha256", 16, lookahead=257), "block_hashing.vllm_lookahead: 257 is more than 256"),
]


@pytest.mark.parametrize(("spec", "field"), BAD_SPECS, ids=[f for _, f in BAD_SPECS])
@pytest.mark.parametrize("backend", ["native", "reference"])
def test_bad_specs_are_invalid_spec_naming_the_field(spec: HashSpec, field: str, backend: str) -> None:
    with pytest.raises(InvalidSpec, match=re.escape(field)):
        get_hasher(backend).block_hashes(list(range(32)), spec)


def test_native_refuses_an_undersized_output_buffer_and_bad_utf8() -> None:
    from sidecar.native._ffi import ffi, lib
    from sidecar.native._errors import raise_for_status

    spec = HashSpec("vllm_sha256", 4).to_json()
    ids = ffi.new("uint32_t[]", list(range(16)))
    out = ffi.new("uint64_t[]", 2)
    written = ffi.new("uintptr_t *")
    err = ffi.new("sc_error **")
    keep = ffi.from_buffer("uint8_t[]", spec)
    status = lib.sc_block_hashes({"ptr": keep, "len": len(spec)}, {"ptr": ids, "len": 16}, ffi.NULL, out, 2, written, err)
    with pytest.raises(InvalidArgument, match="room for 2"):
        raise_for_status(status, err)
    bad = b"\xff\xfe"
    keep = ffi.from_buffer("uint8_t[]", bad)
    status = lib.sc_block_hashes({"ptr": keep, "len": 2}, {"ptr": ids, "len": 16}, ffi.NULL, out, 4, written, err)
    with pytest.raises(InvalidArgument, match="spec: not valid UTF-8"):
        raise_for_status(status, err)


@pytest.mark.parametrize("bad", [2**32, -1, 1.5, "7"])
@pytest.mark.parametrize("backend", ["native", "reference"])
def test_both_hashers_refuse_what_is_not_a_token_id_by_name(backend: str, bad: object) -> None:
    hasher = get_hasher(backend)
    tokens = [1, 2, 3, bad, 5, 6, 7, 8]
    for call in (lambda: hasher.block_hashes(tokens, HashSpec("sglang_sha256", 4)), lambda: hasher.prefix_keys(tokens, 4)):
        with pytest.raises(Exception) as info:
            call()
        code, message = status_of(info.value)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("token_ids"), (code, message)


def test_native_hashing_stops_when_its_call_is_cancelled() -> None:
    from sidecar.cancel import CancelToken, bound
    from sidecar.errors import Cancelled

    token = CancelToken()
    token.cancel()
    with bound(token), pytest.raises(Cancelled):
        native.block_hashes(list(range(64)), HashSpec("vllm_sha256_cbor", 16))
    assert len(native.block_hashes(list(range(64)), HashSpec("vllm_sha256_cbor", 16))) == 4


def test_only_full_blocks_and_prefix_stability() -> None:
    for algorithm, n in itertools.product(ALGORITHMS, (0, 15, 16, 47, 48)):
        spec = HashSpec(algorithm, 16, seed="0")
        tokens = lcg_tokens(n, n, 1000)
        values = native.block_hashes(tokens, spec)
        assert len(values) == n // 16
        assert values == native.block_hashes(tokens + [1, 2, 3], spec)[: n // 16]
