"""KvRouter: Score (which workers hold the longest cached prefix) and KvStatus, over the router
adapter's indexes, plus their Prometheus metrics."""

from __future__ import annotations

import functools
import time
from typing import Any, Iterator, Sequence

import grpc
from google.protobuf.message import DecodeError
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from router_adapter import KvRouter, fanout
from router_adapter.errors import quoted
from router_adapter.index import Score
from router_adapter.spec import HashSpec, MmItem
from sidecar.backend import EncodeOptions, RenderOptions
from sidecar.errors import FailedPrecondition, InvalidArgument, NotFound
from sidecar.hashing import spec_to_proto
from sidecar.rpc import Call, decode_request
from sidecar.runtime import Runtime, request_cost
from sidecar.servicers.detokenize import check_token_ids
from sidecar.servicers.render import check_kwargs_size
from sidecar.servicers.tokenize import check_text_lengths
from sidecar.v1 import kv_router_pb2 as kv

try:
    from sidecar.native.kv_index import split_score
except ImportError:  # no native library (a reference-only install)
    split_score = None


class KvRouterServicer:
    def __init__(self, runtime: Runtime, router: KvRouter | None) -> None:
        self._runtime = runtime
        self._router = router

    def _require_router(self) -> KvRouter:
        if self._router is None:
            raise FailedPrecondition("kv router: the server was started without --kv-events sources or --kv-nats")
        return self._router

    async def ScoreRaw(self, body: bytes, context: grpc.aio.ServicerContext, call: Call) -> bytes:
        """The RPC from its raw body to the response's bytes. A `token_ids` request on the native
        backend has its ids split off natively (`split_score`) and scored from that buffer, never
        as Python ints; anything else (text, messages_json, no input, a body the split does not
        take, another backend) goes through `Score` exactly as a decoded request."""
        if split_score is not None and self._router is not None and self._runtime.config.backend == "native":
            response = await self._runtime.offloader.run(lambda: self._score_ids(body, call), len(body), call.rpc)
            if response is not None:
                return response
        # A large body is decoded on a worker: protobuf holds the GIL for it (some 36 ms for 40 MB
        # of text), so the loop still waits, but not for that and the string reads after it at once.
        request = await self._runtime.offloader.run(lambda: decode_request(call.rpc, kv.ScoreRequest, body),
                                                    len(body), call.rpc, stage="decode")
        call.model = quoted(request.model, str)
        return await self._score(request, call, request_cost(len(body)), as_bytes=True)

    def _score_ids(self, body: bytes, call: Call) -> bytes | None:
        """`Score` of a raw `token_ids` request, on a worker when it is large (the split, the
        decode and the score all read the whole body); None when it is not one, or when it does
        not decode (the Python path then answers it with its own message and count)."""
        try:
            split = split_score(body)
        except InvalidArgument:
            return None
        if split is None:
            return None
        rest, token_ids, refused = split
        try:
            request = kv.ScoreRequest.FromString(rest)
        except DecodeError:
            return None
        call.model = quoted(request.model, str)
        router, index = self._target(request)
        mm_items = _mm_items(request)
        if refused is not None:
            raise refused
        check_token_ids(len(token_ids), self._runtime.config.max_token_ids, "token_ids")
        if hasattr(index, "score_response"):  # the native index writes the response's bytes itself
            return _native_response(router, index, request, token_ids, mm_items, "")
        score = index.score(token_ids, request.lora_name, request.cache_salt, mm_items, request.lora_path)
        return _response(router, index, score, len(token_ids), "").SerializeToString()

    def _target(self, request: kv.ScoreRequest) -> tuple[KvRouter, Any]:
        """The router and the request's model's index."""
        router = self._require_router()
        try:
            index = router.index(request.model)
        except KeyError:
            known = ", ".join(sorted(router.indexes)) or "none"
            raise NotFound(f"model: no KV-event sources for {quoted(request.model)} (known: {known})") from None
        return router, index

    async def Score(self, request: kv.ScoreRequest, context: grpc.aio.ServicerContext, call: Call) -> kv.ScoreResponse:
        return await self._score(request, call, request_cost(request.ByteSize()), as_bytes=False)

    async def _score(self, request: kv.ScoreRequest, call: Call, cost: int, as_bytes: bool) -> Any:
        """The response (`as_bytes`: its bytes, which the native index writes itself, and any
        other serialized off the loop: a long prompt's holds a key per block). `cost`: the
        request's size (see `sidecar.runtime`)."""
        router, index = self._target(request)
        kind = request.WhichOneof("input")
        config = self._runtime.config
        # `ids()` reads the input and makes its ids off the loop when the request is large (copying
        # 10M ids into a list is itself a stall; each read of a protobuf string builds a new one).
        fingerprint = ""
        # The hosted model whose tokenizer or template makes the ids: the one the index is of (an
        # empty name means the only KV model).
        hosted = request.model or _model_name(router, index)
        if kind == "token_ids":
            def ids() -> list[int]:
                check_token_ids(len(request.token_ids.token_ids), config.max_token_ids, "token_ids")
                return list(request.token_ids.token_ids)
        elif kind == "text":
            model = self._runtime.registry.get(hosted)
            fingerprint = model.fingerprint
            add_special = request.add_special_tokens if request.HasField("add_special_tokens") else True
            opts = EncodeOptions(add_special_tokens=add_special, timeout_s=call.timeout_s,
                                 max_word_chars=config.max_word_chars)
            # The native tokenizer hands the ids over as an array, not a list of ints (see
            # `NativeTokenizer.encode_ids`): a long text's would hold the GIL, and the loop, for long.
            encode_ids = getattr(model.tokenizer, "encode_ids", None)

            def ids() -> Sequence[int]:
                text = request.text
                check_text_lengths([text], config.max_text_chars, "text")
                if encode_ids is not None:
                    return encode_ids(text, opts)
                return model.tokenizer.encode_batch([text], opts)[0].ids
        elif kind == "messages_json":
            # Rendered exactly as Render renders it with its defaults, so the blocks are the ones the
            # engine will hash for this chat request.
            model = self._runtime.registry.get(hosted)
            fingerprint = model.fingerprint
            renderer = model.renderer

            def ids() -> list[int]:
                check_kwargs_size(request.chat_template_kwargs_json, config.max_kwargs_bytes)
                opts = RenderOptions(
                    messages_json=request.messages_json,
                    tools_json=request.tools_json,
                    chat_template_kwargs_json=request.chat_template_kwargs_json,
                    timeout_s=call.timeout_s,
                )
                return renderer.render(opts).ids
        else:
            raise InvalidArgument("input: one of text, messages_json or token_ids is required")

        native = as_bytes and hasattr(index, "score_response")

        def work() -> kv.ScoreResponse | bytes:
            # Read here, off the loop when the request is large: a million items took 1.15 s.
            mm_items = _mm_items(request)
            token_ids = ids()
            if native:
                return _native_response(router, index, request, token_ids, mm_items, fingerprint)
            score = index.score(token_ids, request.lora_name, request.cache_salt, mm_items, request.lora_path)
            response = _response(router, index, score, len(token_ids), fingerprint)
            return response.SerializeToString() if as_bytes else response

        if kind == "messages_json":
            # Never inline: a template's prompt can be many times its request (mistral-nemo's
            # 13.6 KB became 723K characters, 10 ms on the loop), as on Render's Python path.
            cost = max(cost, config.inline_bytes + 1)
        return await self._runtime.offloader.run(work, cost, call.rpc)

    async def KvStatus(self, request: kv.KvStatusRequest, context: grpc.aio.ServicerContext, call: Call) -> kv.KvStatusResponse:
        router = self._require_router()
        # On a worker: the event rate and the per-worker counts take the index's lock, which an
        # apply or a restore holds for as long as its payload takes (0.1 s for 34 MB).
        # Sized as a large call (not UNBOUNDED: the huge lane's queue could refuse a status) and
        # never refused by a full queue: monitoring must answer when the server is busy.
        config = self._runtime.config
        return await self._runtime.offloader.run(lambda: _status(router), config.inline_bytes + 1, call.rpc,
                                                 bounded=False)


def _mm_items(request: kv.ScoreRequest) -> tuple[MmItem, ...]:
    """The request's checked `mm_items`."""
    mm_items = tuple(MmItem(m.identifier, m.offset, m.length) for m in request.mm_items)
    for i, item in enumerate(mm_items):
        if not item.identifier:
            raise InvalidArgument(f"mm_items[{i}].identifier: empty")
        if item.offset + item.length >= 1 << 64 or item.offset >= 1 << 63:
            # Either index's spec refuses it too, naming a field of another message
            # (`block_hashing.mm_items`).
            raise InvalidArgument(f"mm_items[{i}]: offset + length ({item.offset} + {item.length}) passes 2^64, "
                                  "or offset passes 2^63")
        if i and item.offset < mm_items[i - 1].offset:
            # Both modes key blocks by the engine's walk over the items in order (content mode
            # too since it keys images); the indexes refuse it naming `block_hashing.mm_items`.
            raise InvalidArgument(f"mm_items[{i}].offset: items must be sorted by offset (as the engine keeps them)")
    return mm_items


def _status(router: KvRouter) -> kv.KvStatusResponse:
    response = kv.KvStatusResponse()
    for name, index in sorted(router.indexes.items()):
        response.models.add(
            model=name, mode=index.mode, block_size=index.block_size or 0, blocks=index.num_blocks,
            events=index.stats.events, events_per_second=index.events_per_second(),
            orphan_blocks=index.stats.orphan_blocks, evicted_blocks=index.stats.evicted_blocks,
            skipped_events=index.stats.skipped_events,
            # Engine mode hashes requests with its spec's lookahead; content mode's index keeps its own.
            lookahead=index.engine_spec.lookahead if index.engine_spec is not None else index.lookahead,
        )
    if router.feed is not None:
        _feed_status(router.feed, response)
    stats = router.source_stats()
    for source in router.subscriber.sources:
        st = stats.get(source.worker)
        index = router.indexes[source.model]
        row = response.workers.add(
            worker=source.worker, model=source.model, endpoint=source.endpoint,
            blocks=index.worker_blocks(source.worker),
        )
        if st is not None:
            row.batches, row.decode_errors, row.gaps = st.batches, st.decode_errors, st.gaps
            row.replayed, row.resets, row.restarts, row.aged_out = st.replayed, st.resets, st.restarts, st.aged_out
            row.disconnects = st.disconnects
    return response


def _response(router: KvRouter, index, score: Score, num_tokens: int, fingerprint: str) -> kv.ScoreResponse:  # noqa: ANN001 - the index scored
    response = kv.ScoreResponse(
        block_hashes=score.block_hashes, block_size=score.block_size, mode=score.mode,
        num_tokens=num_tokens, fingerprint=fingerprint, warming=router.warming(_model_name(router, index)),
    )
    if index.engine_spec is not None:
        response.block_hash_spec.CopyFrom(spec_to_proto(index.engine_spec))
    for w in score.workers:
        response.workers.add(worker=w.worker, blocks=w.blocks, tokens=w.tokens, blocks_by_medium=w.blocks_by_medium)
    return response


def _native_response(router: KvRouter, index, request: kv.ScoreRequest, token_ids: Sequence[int],  # noqa: ANN001
                     mm_items: tuple[MmItem, ...], fingerprint: str) -> bytes:
    """The response's bytes as the native index writes them (no Python object per worker or key)."""
    spec = _spec_bytes(index.engine_spec) if index.engine_spec is not None else b""
    return index.score_response(token_ids, request.lora_name, request.cache_salt, mm_items, request.lora_path,
                                block_hash_spec=spec, fingerprint=fingerprint,
                                warming=router.warming(_model_name(router, index)))


@functools.lru_cache(maxsize=64)
def _spec_bytes(spec: HashSpec) -> bytes:
    """An engine spec's serialized `BlockHashSpec` (indexes keep theirs: computed once each)."""
    return spec_to_proto(spec).SerializeToString()


def _model_name(router: KvRouter, index) -> str:  # noqa: ANN001 - the index Score resolved
    return next(name for name, candidate in router.indexes.items() if candidate is index)


def _feed_status(feed, response: kv.KvStatusResponse) -> None:  # noqa: ANN001 - router_adapter.nats_feed.NatsFeed
    """The `--kv-nats` feed's state per model and its workers (cursors read without a lock: counters)."""
    now = time.time()
    by_model = {row.model: row for row in response.models}
    for name, model_feed in sorted(feed.models.items()):
        row = by_model.get(name)
        if row is not None:
            row.feed_state, row.stream_seq, row.stream_pending = model_feed.state, model_feed.stream_seq, model_feed.pending
            row.snapshot_age_seconds = now - model_feed.snapshot_time if model_feed.snapshot_time else -1.0
            row.malformed_messages, row.consumer_restarts = model_feed.malformed, model_feed.consumer_restarts
        index = feed.router.indexes[name]
        for worker, c in sorted(list(model_feed.workers.items())):
            response.workers.add(
                worker=worker, model=name, endpoint=fanout.subject(feed.options.prefix, name, worker),
                blocks=index.worker_blocks(worker), batches=c.batches, decode_errors=c.decode_errors, gaps=c.gaps,
                resets=c.resets, restarts=c.restarts, aged_out=c.aged_out, duplicates=c.duplicates, lag_seconds=c.lag_s,
            )


class KvMetricsCollector(Collector):
    """Exports the indexes' and sources' counters at scrape time (nothing to update on the hot path)."""

    def __init__(self, router: KvRouter) -> None:
        self._router = router

    def collect(self) -> Iterator:
        blocks = GaugeMetricFamily("sidecar_kv_blocks", "Blocks in the KV prefix index", labels=["model"])
        workers = GaugeMetricFamily("sidecar_kv_workers", "Workers with state in the KV prefix index", labels=["model"])
        rate = GaugeMetricFamily("sidecar_kv_events_per_second", "KV events applied per second (10 s window)", labels=["model"])
        events = CounterMetricFamily("sidecar_kv_events", "KV events applied", labels=["model"])
        orphans = CounterMetricFamily("sidecar_kv_orphan_blocks", "Stored blocks with an unknown parent", labels=["model"])
        evicted = CounterMetricFamily("sidecar_kv_evicted_blocks", "Blocks evicted by the memory bound", labels=["model"])
        skipped = CounterMetricFamily(
            "sidecar_kv_skipped_events", "KV events received but not indexed (block size, group, locality, medium, "
            "unhashable token ids, bigram stores in engine mode, event classes this version does not know)",
            labels=["model"])
        for name, index in self._router.indexes.items():
            blocks.add_metric([name], index.num_blocks)
            workers.add_metric([name], len(index.workers))
            rate.add_metric([name], index.events_per_second())
            events.add_metric([name], index.stats.events)
            orphans.add_metric([name], index.stats.orphan_blocks)
            evicted.add_metric([name], index.stats.evicted_blocks)
            skipped.add_metric([name], index.stats.skipped_events)
        decode = CounterMetricFamily("sidecar_kv_decode_errors", "KV-event payloads that failed to decode", labels=["worker"])
        gaps = CounterMetricFamily("sidecar_kv_sequence_gaps", "KV-event sequence gaps", labels=["worker"])
        resets = CounterMetricFamily("sidecar_kv_worker_resets", "Worker states dropped (restart, gap, silence)", labels=["worker"])
        disconnects = CounterMetricFamily(
            "sidecar_kv_disconnects", "Connections to the engine's KV-event publisher lost (it went away, or sent a "
            "message over --kv-max-message-size)", labels=["worker"])
        stats = self._router.source_stats()
        for worker, st in stats.items():
            decode.add_metric([worker], st.decode_errors)
            gaps.add_metric([worker], st.gaps)
            resets.add_metric([worker], st.resets)
            disconnects.add_metric([worker], st.disconnects)
        if self._router.feed is not None:
            # Workers fed from the stream count the same events in their cursors (worker names are
            # unique across models; one also subscribed to directly keeps its direct counts).
            for model_feed in list(self._router.feed.models.values()):
                for worker, c in list(model_feed.workers.items()):  # the feed thread may add one meanwhile
                    if worker not in stats:
                        decode.add_metric([worker], c.decode_errors)
                        gaps.add_metric([worker], c.gaps)
                        resets.add_metric([worker], c.resets)
        yield from (blocks, workers, rate, events, orphans, evicted, skipped, decode, gaps, resets, disconnects)
        if self._router.feed is not None:
            yield from _feed_metrics(self._router.feed)


def _feed_metrics(feed) -> Iterator:  # noqa: ANN001 - router_adapter.nats_feed.NatsFeed
    from router_adapter.nats_feed import STATES

    state = GaugeMetricFamily("sidecar_kv_nats_state", "1 for the feed's current state per model "
                              "(loading_snapshot, catching_up, live, reconnecting)", labels=["model", "state"])
    seq = GaugeMetricFamily("sidecar_kv_nats_stream_seq", "Last JetStream stream sequence applied", labels=["model"])
    pending = GaugeMetricFamily("sidecar_kv_nats_pending", "The model's messages in the stream not applied yet",
                                labels=["model"])
    age = GaugeMetricFamily("sidecar_kv_nats_snapshot_age_seconds", "Age of the newest snapshot loaded, written or "
                            "seen (absent: none)", labels=["model"])
    lag = GaugeMetricFamily("sidecar_kv_nats_lag_seconds", "Seconds from the worker's last message reaching "
                            "JetStream to its application here", labels=["model", "worker"])
    dups = CounterMetricFamily("sidecar_kv_nats_duplicates", "Batches skipped as already applied", labels=["model", "worker"])
    malformed = CounterMetricFamily("sidecar_kv_nats_malformed_messages", "Messages skipped because their headers "
                                    "are not a relay's", labels=["model"])
    restarts = CounterMetricFamily("sidecar_kv_nats_consumer_restarts", "Consumers made again after a failure (a "
                                   "lost connection, messages dropped on the way)", labels=["model"])
    now = time.time()
    for name, model_feed in feed.models.items():
        for s in STATES:
            state.add_metric([name, s], 1.0 if model_feed.state == s else 0.0)
        seq.add_metric([name], model_feed.stream_seq)
        malformed.add_metric([name], model_feed.malformed)
        restarts.add_metric([name], model_feed.consumer_restarts)
        pending.add_metric([name], model_feed.pending)
        if model_feed.snapshot_time:
            age.add_metric([name], now - model_feed.snapshot_time)
        for worker, c in list(model_feed.workers.items()):  # the feed thread may add one meanwhile
            lag.add_metric([name, worker], c.lag_s)
            dups.add_metric([name, worker], c.duplicates)
    return [state, seq, pending, age, lag, dups, malformed, restarts]


def register_metrics(router: KvRouter) -> None:
    REGISTRY.register(KvMetricsCollector(router))
