"""What tracing costs per unary call: the per-call wrapper (`sidecar.rpc.unary`, decode, handler,
encode, metrics, log line) on a small Tokenize body, without tracing, and with the OpenTelemetry SDK
making the call's span and its stage spans (exported to a no-op exporter through the batch processor,
as `--otlp-endpoint` does). Thread CPU time per call, interleaved rounds, so other load on the
machine does not land on one side only.
"""

from __future__ import annotations

import asyncio
import io
import time

from bench.common import Section, fmt_time
from sidecar import logs, rpc, tracing
from sidecar.v1 import preprocessor_pb2 as pb


class _Context:
    def __init__(self, metadata: tuple) -> None:
        self._metadata = metadata

    def invocation_metadata(self) -> tuple:
        return self._metadata

    def time_remaining(self) -> None:
        return None

    def set_trailing_metadata(self, metadata: tuple) -> None:
        pass

    def add_done_callback(self, callback) -> None:  # noqa: ANN001
        callback(self)  # no response to send here: the call is done once the handler returns


def run(quick: bool) -> list[Section]:
    if tracing.enabled():
        return []
    try:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    except ImportError:
        return []

    class NullExporter(SpanExporter):
        def export(self, spans):  # noqa: ANN001, ANN201
            return SpanExportResult.SUCCESS

    logs.configure("info", stream=io.StringIO())  # the log line is part of the path, not of the output
    response = pb.TokenizeResponse(fingerprint="sha256:" + "0" * 32)
    response.encodings.add().token_ids.extend(range(120))

    async def handler(request, context, call):  # noqa: ANN001, ANN202
        return response

    context = _Context((("x-request-id", "bench"), ("traceparent", f"00-{'1' * 32}-{'2' * 16}-01")))
    off = rpc.unary("BenchTracingOff", handler, pb.TokenizeRequest)
    tracing.configure_with(BatchSpanProcessor(NullExporter()))
    try:
        on = rpc.unary("BenchTracingOn", handler, pb.TokenizeRequest)
        samples = asyncio.run(_interleave({"off": off, "on": on}, context, rounds=10 if quick else 40))
    finally:
        tracing.shutdown()
        logs.configure("info")
    best = {name: min(values) for name, values in samples.items()}
    section = Section("Tracing: per-call CPU of the unary wrapper, small Tokenize body", ["tracing", "best", "median"])
    for name, values in samples.items():
        values.sort()
        section.rows.append([name, fmt_time(best[name]), fmt_time(values[len(values) // 2])])
    section.notes.append(
        f"With tracing a call costs {best['on'] / best['off']:.1f}x the wrapper without it (a call span and "
        "decode and encode stage spans through the OpenTelemetry SDK). Without `--otlp-endpoint` no span "
        "object is made: the wrapper tests a flag fixed when it is built."
    )
    return [section]


async def _interleave(wrappers: dict, context: _Context, rounds: int, per_round: int = 1000) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in wrappers}
    body = pb.TokenizeRequest(model="qwen3", texts=["x" * 500]).SerializeToString()
    for wrapped in wrappers.values():
        for _ in range(200):
            await wrapped(body, context)
    for _ in range(rounds):
        for name, wrapped in wrappers.items():
            started = time.thread_time()
            for _ in range(per_round):
                await wrapped(body, context)
            samples[name].append((time.thread_time() - started) / per_round)
    return samples
