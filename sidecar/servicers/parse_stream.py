"""ParseStream: per-decode-step detokenization, stop strings, reasoning and tool-call parsing.

One bidirectional stream multiplexes many requests. Messages arrive as raw bytes: steps and
cancels go straight to the backend's multiplexer (for the native backend, one native call per
step, no per-request Python work); only `open` is decoded here, because it names a model and
defaults to resolve. Every client message gets exactly one `ParseStreamResponse` (possibly
empty), so a client can pair answers with its messages.

A request that fails (unknown model or parser, bad token id, too much held-back text, a step for a
finished request) gets its own `RequestDelta.error`; the stream goes on. A malformed message ends
the stream with INVALID_ARGUMENT. Cancel and the end of the stream free the requests' state.
"""

from __future__ import annotations

import time
from typing import AsyncIterator

import grpc

from sidecar import metrics
from sidecar.backend import ParseLimits, ParseModel, ParseMux
from sidecar.errors import InvalidArgument, SidecarError
from sidecar.logs import get_logger
from sidecar.parse_defaults import default_parsers
from sidecar.runtime import Runtime
from sidecar.v1 import preprocessor_pb2 as pb

_log = get_logger("sidecar.parse_stream")

_RPC = "ParseStream"


def error_delta(request_id: str, error: SidecarError) -> bytes:
    """A `ParseStreamResponse` holding one failed request."""
    delta = pb.RequestDelta(
        request_id=request_id, finished=True, error=pb.Status(code=error.code.value[0], message=error.message)
    )
    return pb.ParseStreamResponse(deltas=[delta]).SerializeToString()


class ParseStreamServicer:
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        config = runtime.config
        self._limits = ParseLimits(max_requests=config.parse_max_requests, max_held_bytes=config.parse_max_held_bytes)

    async def ParseStream(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        mux = self._runtime.registry.backend.new_parse_mux(self._limits)
        metrics.INFLIGHT.labels(_RPC).inc()
        step_latency = metrics.STAGE_LATENCY.labels(_RPC, "message")
        code = "OK"
        try:
            async for message in requests:
                started = time.perf_counter()
                try:
                    # A step is microseconds per request and runs inline; a large message (a whole
                    # output parsed in one step) goes to the worker pool so the loop stays free. The
                    # stream's messages are handled one at a time, so the mux is never shared.
                    answer = await self._runtime.offloader.run(lambda: mux.handle(message), len(message), _RPC)
                except SidecarError as e:
                    code = e.code.name
                    await context.abort(e.code, e.message)
                    return
                if answer is None:
                    answer = self._open(mux, message)
                step_latency.observe(time.perf_counter() - started)
                yield answer
        finally:
            mux.close()
            metrics.INFLIGHT.labels(_RPC).dec()
            metrics.REQUESTS.labels(_RPC, code).inc()

    def _open(self, mux: ParseMux, message: bytes) -> bytes:
        try:
            request = pb.ParseStreamRequest.FromString(message).open
        except Exception:  # noqa: BLE001 - protobuf raises DecodeError; native already parsed it
            return error_delta("", InvalidArgument("open: malformed OpenRequest"))
        try:
            self._open_checked(mux, request)
        except SidecarError as e:
            _log.info("parse_open_failed", request_id=request.request_id, model=request.model, error=e.message)
            return error_delta(request.request_id, e)
        return b""

    def _open_checked(self, mux: ParseMux, request: pb.OpenRequest) -> None:
        model = self._runtime.registry.get(request.model)
        default_tool, default_reasoning = default_parsers(model)
        config = {
            "tool_parser": request.tool_parser or default_tool,
            "reasoning_parser": request.reasoning_parser or default_reasoning,
            "tools_json": request.tools_json,
            "chat_template_kwargs_json": request.chat_template_kwargs_json,
            "skip_special_tokens": request.skip_special_tokens if request.HasField("skip_special_tokens") else True,
            "stop": list(request.stop),
            "include_stop_str_in_output": request.include_stop_str_in_output,
            "max_held_bytes": self._limits.max_held_bytes,
        }
        parse_model: ParseModel = model.extras["parse_model"]
        mux.open(parse_model, request.request_id, model.fingerprint, config, request.prompt_token_ids)

