"""`KvRouter`: KV-event sources wired to one prefix index per model, and the `score` query.

    router = KvRouter([Source("w0", "tcp://10.0.0.5:5557", replay_endpoint="tcp://10.0.0.5:5558",
                              model="qwen3")], block_size=16)
    router.start()
    score = router.score("qwen3", token_ids)      # score.workers: best first
    router.stop()
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Sequence

from router_adapter.events import Batch, DecodeError, apply_each, decode_batch
from router_adapter.hashing import REFERENCE_HASHER, BlockHasher
from router_adapter.index import PrefixIndex, Score
from router_adapter.spec import HashSpec, MmItem
from router_adapter.subscriber import DEFAULT_MAX_MESSAGE_BYTES, Source, SourceStats, Subscriber

_log = logging.getLogger("router_adapter.router")

#: Makes one model's index, called as `factory(block_size, engine_spec=..., max_blocks=...,
#: hasher=..., group_idx=...)`, plus `lookahead=` when the model's options give one: `PrefixIndex`
#: unless injected; the server passes the native core's index (`sidecar.factory.get_index_factory`),
#: which has the same API.
IndexFactory = Callable[..., PrefixIndex]


@dataclass(frozen=True)
class ModelOptions:
    """How one model's index keys blocks."""

    #: Tokens per block; None = learned from the first event.
    block_size: int | None = None
    #: The engine's hash spec: when set, the index matches on the engine's own hashes.
    engine_spec: HashSpec | None = None
    #: The KV-cache group whose stores are indexed (vLLM's `group_idx`): a hybrid model's
    #: full-attention group; the others' blocks are sparse (sliding window, Mamba).
    group_idx: int = 0
    #: Content mode: tokens after each block that its key covers (vLLM >= 0.33's lookahead hashing
    #: with an EAGLE/EAGLE3/MTP drafter); None = learned from the first store that tells. Engine
    #: mode takes it from `engine_spec.lookahead` (both set: the index refuses).
    lookahead: int | None = None


class KvRouter:
    """Owns the subscriber thread and the per-model indexes."""

    def __init__(
        self,
        sources: list[Source],
        *,
        block_size: int | None = None,
        models: dict[str, ModelOptions] | None = None,
        max_blocks: int = 4_000_000,
        silence_timeout_s: float | None = 300.0,
        replay_timeout_s: float = 2.0,
        hasher: BlockHasher = REFERENCE_HASHER,
        index_factory: IndexFactory = PrefixIndex,
        replay_history: bool = False,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        """`replay_history`: ask each source with a replay endpoint for every batch it still holds
        (from sequence 0) when its first message arrives, instead of starting from that message (a
        restarted process of `sidecar serve --processes N` catching up with its siblings).
        `max_message_bytes`: the largest message taken from an engine (see `Subscriber`)."""
        models = dict(models or {})
        self._worker_model: dict[str, str] = {}
        for source in sources:
            models.setdefault(source.model, ModelOptions(block_size=block_size))
            self._worker_model[source.worker] = source.model
        self.indexes: dict[str, PrefixIndex] = {
            name: index_factory(
                opts.block_size if opts.engine_spec is None else None,
                engine_spec=opts.engine_spec, max_blocks=max_blocks, hasher=hasher, group_idx=opts.group_idx,
                # Only when given: a factory written before the option need not take it.
                **({} if opts.lookahead is None else {"lookahead": opts.lookahead}),
            )
            for name, opts in models.items()
        }
        _log.info("kv_router_hasher name=%s models=%s", hasher.name, ",".join(sorted(self.indexes)))
        self.feed = None
        # Indexes that decode engine payloads themselves (the native one) get them raw: no Python
        # object per event on the subscriber thread.
        raw = all(hasattr(index, "apply_payload") for index in self.indexes.values())
        self.subscriber = Subscriber(
            sources, None if raw else self._on_batch, self._on_reset,
            on_payloads=self._on_payloads if raw else None,
            silence_timeout_s=silence_timeout_s, replay_timeout_s=replay_timeout_s,
            resume={s.worker: -1 for s in sources if s.replay_endpoint} if replay_history else None,
            max_message_bytes=max_message_bytes,
        )

    def start(self) -> None:
        if self.subscriber.sources:
            self.subscriber.start()
        if self.feed is not None:
            self.feed.start()

    def stop(self) -> None:
        if self.feed is not None:
            self.feed.stop()
        self.subscriber.stop()

    def attach_feed(self, feed) -> None:  # noqa: ANN001 - router_adapter.nats_feed.NatsFeed
        """Another event source (NATS fan-out), started and stopped with the router. It delivers
        through `feed_payloads` (or `feed_payload`, `feed_batch`) and `feed_reset`."""
        self.feed = feed

    def warming(self, model: str) -> bool:
        """True while `model`'s view is catching up (a feed loading a snapshot or a backlog)."""
        return self.feed is not None and self.feed.warming(model)

    def feed_batch(self, model: str, worker: str, batch: Batch) -> None:
        """A batch of `worker` of `model` from a feed: applied as a subscribed source's batch is."""
        self.indexes[model].apply_batch(worker, batch)

    def feed_payload(self, model: str, worker: str, payload: bytes) -> None:
        """A batch as the engine published it (msgpack bytes): the native index decodes and applies it
        in native code (no Python object per event, the GIL released); the Python index gets it
        decoded. `DecodeError` for a malformed payload, which changes nothing."""
        index = self.indexes[model]
        apply_payload = getattr(index, "apply_payload", None)
        if apply_payload is not None:
            apply_payload(worker, payload)
        else:
            index.apply_batch(worker, decode_batch(payload))

    def feed_payloads(self, model: str, items: Sequence[tuple[str, bytes]]) -> list[tuple[int, DecodeError]]:
        """`feed_payload` of each (worker, payload) of `model`, in order; the native index takes
        them in one call (`apply_payloads`). Returns the payloads refused as malformed, as
        (position, DecodeError): each changed nothing, and the others are applied."""
        index = self.indexes[model]
        apply_payloads = getattr(index, "apply_payloads", None)
        if apply_payloads is not None:
            return apply_payloads(items)
        return apply_each(lambda worker, payload: self.feed_payload(model, worker, payload), items)

    def feed_reset(self, model: str, worker: str, reason: str) -> None:
        _log.warning("kv_index_worker_dropped worker=%s reason=%s", worker, reason)
        self.indexes[model].drop_worker(worker)

    def index(self, model: str) -> PrefixIndex:
        """The index of `model`; with a single model, "" also names it. KeyError when unknown."""
        if model in self.indexes:
            return self.indexes[model]
        if not model and len(self.indexes) == 1:
            return next(iter(self.indexes.values()))
        raise KeyError(model)

    def score(
        self, model: str, token_ids: Sequence[int], lora_name: str = "", cache_salt: str = "",
        mm_items: Sequence[MmItem] = (), lora_path: str = "",
    ) -> Score:
        """Each worker of `model` with its cached prefix of the request, best first."""
        return self.index(model).score(token_ids, lora_name, cache_salt, mm_items, lora_path)

    def source_stats(self) -> dict[str, SourceStats]:
        return self.subscriber.stats()

    def _on_batch(self, worker: str, batch: Batch) -> None:
        self.indexes[self._worker_model[worker]].apply_batch(worker, batch)

    def _on_payloads(self, worker: str, items: list[tuple[int, bytes]]) -> list[tuple[int, DecodeError]]:
        """A run of `worker`'s batches in one native call: a small message costs mostly its call
        from Python (runs of one-block payloads apply about 2x faster; bench/kv_index.py)."""
        return self.feed_payloads(self._worker_model[worker], [(worker, payload) for _, payload in items])

    def _on_reset(self, worker: str, reason: str) -> None:
        _log.warning("kv_index_worker_dropped worker=%s reason=%s", worker, reason)
        self.indexes[self._worker_model[worker]].drop_worker(worker)
