"""Simulated engines for the fan-out tests: random stores, removals, clears, restarts and gaps,
published over ZMQ in three real wire formats, with the reference index fed the same events.

Formats (the shapes of the recordings in tests/data/kv/events, made with the engines' own classes):
- `vllm`: vLLM >= 0.24, events as maps tagged by "type", unsigned 64-bit hashes, media GPU and CPU;
- `vllm-array`: vLLM <= 0.23, events as positional arrays;
- `sglang`: SGLang, maps with signed 64-bit hashes and no LoRA name.

`SimEngine` keeps what its cache holds and applies every batch the replicas must see to the
reference `PrefixIndex` too, dropping the worker where the documented semantics drop it (engine
restart; a gap the replay socket cannot fill, at the batch after it).
"""

from __future__ import annotations

import random

import msgspec
import zmq

from router_adapter import PrefixIndex, decode_batch
from tests.kv.publisher import FakeEnginePublisher

MASK64 = (1 << 64) - 1
BS = 16
PROMPT_BLOCKS = 6
PROMPTS = [[(p * 7919 + i * 31) % 50_000 for i in range(PROMPT_BLOCKS * BS)] for p in range(12)]
FORMATS = ("vllm", "vllm-array", "sglang")


def engine_hash(prompt: int, block: int) -> int:
    """A stand-in for the engine's block hash: fixed by the prefix, as the engines' are."""
    return hash(("block", tuple(PROMPTS[prompt][: (block + 1) * BS]))) & MASK64


def _signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


def stored_event(fmt: str, hashes: list[int], parent: int | None, tokens: list[int], medium: str):  # noqa: ANN201
    if fmt == "vllm-array":
        return ["BlockStored", hashes, parent, tokens, BS, None, medium, None, None, None, None, None]
    if fmt == "sglang":
        return {"type": "BlockStored", "block_hashes": [_signed(h) for h in hashes],
                "parent_block_hash": None if parent is None else _signed(parent), "token_ids": tokens,
                "block_size": BS, "lora_id": None, "medium": medium}
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
            "block_size": BS, "lora_id": None, "medium": medium, "lora_name": None}


def removed_event(fmt: str, hashes: list[int], medium: str):  # noqa: ANN201
    if fmt == "vllm-array":
        return ["BlockRemoved", hashes, medium]
    if fmt == "sglang":
        return {"type": "BlockRemoved", "block_hashes": [_signed(h) for h in hashes], "medium": medium}
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium}


def cleared_event(fmt: str):  # noqa: ANN201
    return ["AllBlocksCleared"] if fmt == "vllm-array" else {"type": "AllBlocksCleared"}


class SimEngine:
    def __init__(self, ctx: zmq.Context, worker: str, fmt: str, reference: PrefixIndex, rng: random.Random) -> None:
        self.pub = FakeEnginePublisher(ctx, engine="sglang" if fmt == "sglang" else "vllm")
        self.worker = worker
        self.fmt = fmt
        self.reference = reference
        self.rng = rng
        #: engine hash -> (prompt, block, media)
        self.held: dict[int, tuple[int, int, set[str]]] = {}
        self._held_back: list[bytes] = []
        self._reset_at_next = False

    # --- what the engine does ----------------------------------------------------------------

    def _store(self) -> list:
        rng = self.rng
        prompt = rng.randrange(len(PROMPTS))
        starts = [0] + [b + 1 for h, (p, b, _) in self.held.items() if p == prompt and b + 1 < PROMPT_BLOCKS]
        start = rng.choice(starts)
        count = rng.randint(1, min(3, PROMPT_BLOCKS - start))
        medium = "CPU" if self.fmt == "vllm" and rng.random() < 0.2 else "GPU"
        hashes = [engine_hash(prompt, b) for b in range(start, start + count)]
        parent = engine_hash(prompt, start - 1) if start else None
        for b, h in zip(range(start, start + count), hashes):
            self.held.setdefault(h, (prompt, b, set()))[2].add(medium)
        tokens = PROMPTS[prompt][start * BS: (start + count) * BS]
        return [stored_event(self.fmt, hashes, parent, tokens, medium)]

    def _remove(self) -> list:
        pairs = [(h, m) for h, (_, _, media) in self.held.items() for m in media]
        if not pairs:
            return self._store()
        h, medium = self.rng.choice(pairs)
        self.held[h][2].discard(medium)
        if not self.held[h][2]:
            del self.held[h]
        return [removed_event(self.fmt, [h], medium)]

    def random_batch(self) -> list:
        roll = self.rng.random()
        if roll < 0.03:
            self.held.clear()
            return [cleared_event(self.fmt)]
        events = self._remove() if roll < 0.3 else self._store()
        if self.rng.random() < 0.3:
            events += self._store()
        return events

    # --- publishing, with the reference fed the same ------------------------------------------

    def publish(self, events: list, *, lost: bool = False, replayable: bool = True) -> None:
        """Publishes one batch. `lost`: it does not reach the relay now (dropped on the wire, or the
        relay is down); kept in the replay buffer when `replayable`, so the relay recovers it at the
        next batch it sees. A lost batch that is not replayable makes that next batch reset the worker,
        and everything lost in between is gone (the replay is all or nothing)."""
        self.pub.publish(events, drop=lost)
        payload = self.pub.buffer[-1][1]
        if lost:
            if replayable:
                self._held_back.append(payload)
            else:
                self.pub.buffer.pop()
                self._reset_at_next = True
            return
        if self._reset_at_next:
            self.reference.drop_worker(self.worker)
            self._held_back = []
            self._reset_at_next = False
        for held in self._held_back:
            self.reference.apply_batch(self.worker, decode_batch(held))
        self._held_back = []
        self.reference.apply_batch(self.worker, decode_batch(payload))

    def restart(self) -> None:
        """The engine restarts: empty cache, sequence numbers from 0, empty replay buffer."""
        self.held.clear()
        self.pub.buffer.clear()
        self.pub.seq = 0
        self._held_back = []
        self._reset_at_next = True

    def lose_unpublished(self) -> None:
        """Its replay buffer forgets everything (what a long relay outage does to a bounded buffer)."""
        self.pub.buffer.clear()
        if self._held_back:
            self._held_back = []
            self._reset_at_next = True

    def step(self, *, lost_rate: float = 0.05, restart_rate: float = 0.01) -> None:
        restarted = self.pub.seq > 0 and self.rng.random() < restart_rate
        if restarted:
            self.restart()
        events = self.random_batch()
        roll = 1.0 if restarted else self.rng.random()  # the batch that shows the restart arrives
        self.publish(events, lost=roll < lost_rate, replayable=roll < lost_rate / 2)

    def settle(self) -> None:
        """One batch that arrives, so whatever was lost before is recovered or reset now."""
        self.publish(self.random_batch())

    def close(self) -> None:
        self.pub.close()


def score_rows(score) -> list[tuple]:  # noqa: ANN001 - router_adapter Score or ScoreResponse
    return [(w.worker, w.blocks, dict(w.blocks_by_medium)) for w in score.workers]


def requests(rng: random.Random, count: int) -> list[list[int]]:
    out = []
    for _ in range(count):
        prompt = PROMPTS[rng.randrange(len(PROMPTS))]
        out.append(prompt[: rng.randint(0, len(prompt))])
    return out


def encode(events: list) -> bytes:
    return msgspec.msgpack.encode(events)
