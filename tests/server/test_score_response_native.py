"""The native index writes KvRouter's `ScoreResponse` itself on the `token_ids` path
(`NativePrefixIndex.score_response`); its bytes parse to the message the servicer's Python
`_response` builds from the same score, on indexes of every shape: content and engine mode, no
worker, one, many, one medium or several, LoRA and salted requests, unknown block size."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from router_adapter.events import Batch, BlockStored
from router_adapter.spec import HashSpec, MmItem
from sidecar.servicers.kv_router import _response, _spec_bytes
from sidecar.v1 import kv_router_pb2 as kv

kv_index = pytest.importorskip("sidecar.native.kv_index")

BS = 4
PROMPT = [random.Random(11).randrange(150_000) for _ in range(BS * 40 + 3)]
MEDIA = ("GPU", "CPU", "CPU_PINNED", "DISK")


def store(index, worker: str, blocks: int, medium: str, lora: str = "", salt: str = "") -> None:  # noqa: ANN001
    # The adapter's path counts in engine mode (vLLM >= 0.31 hashes it), not in content keys.
    keys = index.request_keys(PROMPT, lora, salt, lora_path=f"/adapters/{lora}" if lora else "")[:blocks]
    event = BlockStored(keys, None, PROMPT[: blocks * BS], BS, medium=medium, lora_name=lora or None,
                        cache_salt=salt or None)
    index.apply_batch(worker, Batch(0.0, [event]))


def build(mode: str, workers: int, media: int, seed: int):  # noqa: ANN201 - NativePrefixIndex
    spec = HashSpec("vllm_sha256", BS) if mode == "engine" else None
    index = kv_index.NativePrefixIndex(None if spec else BS, engine_spec=spec)
    rng = random.Random(seed)
    for w in range(workers):
        name = "" if w == 3 else f"worker-{w:02d}" + "x" * rng.choice([0, 150])
        for m in range(rng.randint(1, media) if media else 0):
            store(index, name, rng.randint(0, 40), MEDIA[m])
        if rng.random() < 0.3:
            store(index, name, rng.randint(1, 10), MEDIA[0], lora=rng.choice(["l", ""]), salt=rng.choice(["s", ""]))
    return index


INDEXES = [
    ("content", 0, 0),
    ("content", 1, 1),
    ("content", 5, 1),
    ("content", 64, 3),
    ("engine", 0, 0),
    ("engine", 1, 2),
    ("engine", 20, 4),
]


@pytest.mark.parametrize(("mode", "workers", "media"), INDEXES)
def test_native_response_equals_the_python_response(mode: str, workers: int, media: int) -> None:
    index = build(mode, workers, media, seed=workers * 7 + media)
    try:
        spec = _spec_bytes(index.engine_spec) if index.engine_spec is not None else b""
        requests = [
            (PROMPT, "", "", (), ""),
            (PROMPT[:0], "", "", (), ""),
            (PROMPT[: BS * 3 + 1], "", "", (), ""),
            (PROMPT[: BS * 12], "l", "", (), ""),
            (PROMPT[: BS * 12], "l", "", (), "/adapters/l"),
            (PROMPT[: BS * 12], "l", "s", (), "/adapters/l"),
            (PROMPT[: BS * 12], "", "s", (), ""),
        ]
        if mode == "engine":
            requests.append((PROMPT[: BS * 8], "", "", (MmItem("img", 1, 2),), ""))
        for ids, lora, salt, mm, path in requests:
            for warming, fingerprint in ((False, ""), (True, "fp-1")):
                router = SimpleNamespace(indexes={"m": index}, warming=lambda _name, w=warming: w)
                expected = _response(router, index, index.score(ids, lora, salt, mm, path), len(ids), fingerprint)
                got = kv.ScoreResponse.FromString(index.score_response(
                    ids, lora, salt, mm, path, block_hash_spec=spec, fingerprint=fingerprint, warming=warming))
                assert got == expected, (len(ids), lora, salt, mm, path, warming)
                assert got.HasField("block_hash_spec") == (mode == "engine")
        # The data the comparison ran on is not all zeros.
        if workers:
            assert any(w.blocks for w in kv.ScoreResponse.FromString(index.score_response(PROMPT)).workers)
    finally:
        index.close()


def test_an_unknown_block_size_is_zero_in_both() -> None:
    index = kv_index.NativePrefixIndex()
    router = SimpleNamespace(indexes={"m": index}, warming=lambda _name: False)
    expected = _response(router, index, index.score(PROMPT), len(PROMPT), "")
    assert kv.ScoreResponse.FromString(index.score_response(PROMPT)) == expected
    assert expected.block_size == 0 and expected.num_tokens == len(PROMPT)
    index.close()
