"""ParseStream: per-decode-step detokenization, stop strings, reasoning and tool-call parsing.

One bidirectional stream multiplexes many requests. Messages arrive as raw bytes: steps and
cancels go straight to the backend's multiplexer (for the native backend, one native call per
step, no per-request Python work); only `open` is decoded here, because it names a model and
defaults to resolve. Every client message gets exactly one `ParseStreamResponse` (possibly
empty), so a client can pair answers with its messages.

A request that fails (unknown model or parser, bad token id, too much held-back text, a step for a
finished request) gets its own `RequestDelta.error`; the stream goes on. A malformed message ends
the stream with INVALID_ARGUMENT, a step naming more requests than --parse-max-requests with
RESOURCE_EXHAUSTED. Cancel and the end of the stream free the requests' state.

The next message is read only once the previous answer is written (a client that does not read
holds one answer, counted against --max-unsent-mb with every other response); while the bound is
passed, an open or a step is refused with RESOURCE_EXHAUSTED in its requests' deltas (a step's
requests are ended). While the server drains, new opens are refused UNAVAILABLE each, and the
stream ends UNAVAILABLE once it has no request open (at once when it has none).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import AsyncIterator, Sequence

import grpc

from router_adapter.errors import quoted
from sidecar import metrics, parsers
from sidecar.backend import Deferred, ParseLimits, ParseMux, ParseOpenConfig
from sidecar.errors import (FailedPrecondition, InvalidArgument, ResourceExhausted, SidecarError, Unavailable,
                            status_proto_fields)
from sidecar.logs import get_logger
from sidecar.parse_defaults import ParseDefaults
from sidecar.rpc import DRAINING, Call, Gate, StreamCounts, StreamUnsent
from sidecar.runtime import Runtime
from sidecar.v1 import preprocessor_pb2 as pb

try:
    from sidecar.native.parse import split_open
except ImportError:  # no native library (a reference-only install, whose backend does not parse)
    split_open = None

_log = get_logger("sidecar.parse_stream")


def error_delta(request_id: str, error: SidecarError, note: str = "") -> bytes:
    """A `ParseStreamResponse` holding one failed request (`note` is added to its message)."""
    code, message = status_proto_fields(error)
    delta = pb.RequestDelta(request_id=request_id, finished=True, error=pb.Status(code=code, message=message + note))
    return pb.ParseStreamResponse(deltas=[delta]).SerializeToString()


def end_request(mux: ParseMux, request_id: str) -> bool:
    """Frees the request open under `request_id`, if any (as a cancel does); whether there was one."""
    before = len(mux)
    mux.handle(pb.ParseStreamRequest(cancel=pb.CancelRequest(request_id=request_id)).SerializeToString())
    return len(mux) < before


#: An answer this small (a cancel's, an empty step's) is sent even while answers past
#: --max-unsent-mb wait: it adds nothing worth refusing.
_SMALL_ANSWER = 1024


def refuse_step(mux: ParseMux, message: bytes, reason: str, counts: StreamCounts) -> bytes:
    """The answer to a step refused because answers past --max-unsent-mb wait for their clients: each
    request it names gets RESOURCE_EXHAUSTED and is ended (its tokens were not parsed, or their text
    was dropped), as a request that passes a per-request limit is."""
    ids = list(dict.fromkeys(item.request_id for item in pb.ParseStreamRequest.FromString(message).step.items))
    error = ResourceExhausted(reason)
    deltas = []
    for request_id in ids:
        end_request(mux, request_id)
        code, text = status_proto_fields(error)
        deltas.append(pb.RequestDelta(request_id=request_id, finished=True,
                                      error=pb.Status(code=code, message=text + "; the request is ended")))
    counts.errors += len(deltas)
    return pb.ParseStreamResponse(deltas=deltas).SerializeToString()


class ParseStreamServicer:
    def __init__(self, runtime: Runtime, gate: Gate | None = None) -> None:
        self._runtime = runtime
        self._gate = gate or Gate()
        config = runtime.config
        # A delta is framed inside the answer: a little under the message limit leaves room for it.
        self._limits = ParseLimits(max_requests=config.parse_max_requests, max_held_bytes=config.parse_max_held_bytes,
                                   max_step_ids=config.max_token_ids,
                                   max_delta_bytes=max(1, config.max_message_bytes - 1024),
                                   max_stream_held_bytes=config.parse_max_stream_held_bytes)

    async def ParseStream(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext, call: Call, counts: StreamCounts
    ) -> AsyncIterator[bytes]:
        """Runs inside `sidecar.rpc.stream` (request id, log line, metrics, status mapping, and the
        count of the answer being written: the next message is read only once it is)."""
        mux = self._runtime.registry.backend.new_parse_mux(self._limits)
        step_latency = metrics.STAGE_LATENCY.labels(call.rpc, "message")
        gate, unsent = self._gate, call.unsent
        offload = self._runtime.offloader.run
        inline = self._runtime.config.inline_bytes
        task = asyncio.current_task()
        reading = drained = False

        def end_if_idle() -> None:
            # The drain began: a stream waiting for its client with no request running ends now
            # (an idle stream held the drain for all of --drain-seconds), as a Multiplex stream does.
            nonlocal drained
            if reading and not len(mux):
                drained = True
                task.cancel()

        forget = gate.on_close(end_if_idle)
        messages = aiter(requests)
        try:
            while True:
                if not gate.open and not len(mux):
                    raise Unavailable(DRAINING)  # every running request has finished
                reading = True
                try:
                    message = await anext(messages)
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if not drained:
                        raise
                    task.uncancel()
                    raise Unavailable(DRAINING) from None
                finally:
                    reading = False
                started = time.perf_counter()
                busy = unsent.refusal() if unsent is not None else None
                # A step is microseconds per request and runs inline; a large message (a whole
                # output parsed in one step) goes to the worker pool so the loop stays free. The
                # stream's messages are handled one at a time, so the mux is never shared (and the
                # pool's queue bound does not apply: see `sidecar.runtime`). A malformed message
                # raises: the stream ends with its status. While answers past --max-unsent-mb
                # wait for their clients, only cancels run (a budget of 0 defers every step).
                answer: bytes | Deferred | None = Deferred(len(message))
                if busy is not None or len(message) <= inline:
                    # A small step may still finish (or push over the held-back limit) requests
                    # holding much text, which it then reads whole: the native call prices it
                    # and defers it when it is not cheap after all.
                    within = 0 if busy is not None else inline
                    answer = await offload(lambda: mux.handle(message, within), len(message), call.rpc, bounded=False)
                skipped: list[str] = []
                if isinstance(answer, Deferred) and busy is None:
                    answer = await offload(lambda: self._step(mux, message, unsent, skipped), answer.cost, call.rpc,
                                           bounded=False)
                    busy = skipped[0] if skipped else None
                if answer is None:
                    # An open reads every field of its message (prompt ids, stop strings, tools,
                    # kwargs) in Python and builds its stop-string automaton: sized the same way.
                    refusal = (Unavailable(DRAINING) if not gate.open else
                               ResourceExhausted(busy) if busy is not None else None)
                    answer = await offload(lambda: self._open(mux, message, counts, refusal), len(message), call.rpc,
                                           bounded=False)
                elif busy is not None or isinstance(answer, Deferred) or len(answer) > _SMALL_ANSWER:
                    if busy is None and unsent is not None:
                        # Computed while other streams' answers may have filled the bound: dropped
                        # if holding it too would pass it (so the bound holds whatever the number
                        # of streams computing at once).
                        busy = unsent.refusal(len(answer))
                    if busy is not None:
                        answer = await offload(lambda: refuse_step(mux, message, busy, counts), len(message), call.rpc,
                                               bounded=False)
                step_latency.observe(time.perf_counter() - started)
                yield answer
        finally:
            forget()
            mux.close()

    @staticmethod
    def _step(mux: ParseMux, message: bytes, unsent: StreamUnsent | None, skipped: list[str]) -> bytes:
        """A large step, on a worker: not computed (b"", the reason in `skipped`) when answers past
        --max-unsent-mb wait by the time a worker takes it, so steps queued behind the ones that
        filled the bound are not computed only to be dropped. (The gate is read off the loop here: a
        few ints and a dict lookup, each atomic under the GIL; the loop rechecks what it holds.)"""
        reason = unsent.refusal() if unsent is not None else None
        if reason is not None:
            skipped.append(reason)
            return b""
        return mux.handle(message)

    def _open(self, mux: ParseMux, message: bytes, counts: StreamCounts, refusal: SidecarError | None = None) -> bytes:
        """Opens the request of an `open` message; counts it as opened or, refused (`refusal`: the
        server drains, or answers wait past --max-unsent-mb), as an error.
        (A step's per-request errors are written by the native mux into its response bytes, which
        the stream does not decode, so they are not in the count.)"""
        refused = None
        try:
            if split_open is not None:
                # The prompt ids (possibly millions) are decoded natively with the GIL released;
                # protobuf reads only the rest.
                rest, prompt_ids, refused = split_open(message)
                request = pb.ParseStreamRequest.FromString(rest).open
            else:
                request = pb.ParseStreamRequest.FromString(message).open
                prompt_ids = request.prompt_token_ids
        except Exception:  # noqa: BLE001 - protobuf raises DecodeError; native already parsed it
            counts.errors += 1
            return error_delta("", InvalidArgument("open: malformed OpenRequest"))
        try:
            if refusal is not None:
                raise refusal
            if refused is not None:  # a prompt id above 2^32-1 (protobuf would have truncated it)
                raise refused
            self._open_checked(mux, request, prompt_ids)
        except SidecarError as e:
            counts.errors += 1
            _log.info("parse_open_failed", parse_request_id=request.request_id[:200], model=quoted(request.model, str),
                      error=e.message)
            # The answer says request `request_id` is finished and freed: a request still open
            # under that id ends here too (a duplicate open is ended by the mux itself, which says
            # so; this covers the refusals that come first: an unknown model, a bad option).
            ended = bool(request.request_id) and end_request(mux, request.request_id)
            return error_delta(request.request_id, e, "; the request open under this id is ended too" if ended else "")
        counts.opened += 1
        return b""

    def _open_checked(self, mux: ParseMux, request: pb.OpenRequest, prompt_ids: Sequence[int]) -> None:
        model = self._runtime.registry.get(request.model)
        if model.parse_model is None:
            raise FailedPrecondition(f"model: {model.name!r} has no parsing data on this backend")
        check_open_limits(request, self._runtime.config, len(prompt_ids))
        defaults = defaults_for(request, model.parse_defaults)
        check_defaults(request, model.name, defaults)
        config = open_config(request, defaults, self._limits)
        mux.open(model.parse_model, request.request_id, model.fingerprint, config, prompt_ids)


def defaults_for(request: pb.OpenRequest, defaults: ParseDefaults) -> ParseDefaults:
    """The model's defaults as they apply to `request`: without tools, no default tool parser. vLLM
    runs its tool parser only for a request with tools (and `tool_choice` auto or unset), SGLang
    only with tools too; the model's parser on a request without tools would hold back JSON-mode
    answers (`llama3_json`) and turn quoted call syntax into calls (`hermes`). A parser the request
    names runs either way: engines that do not pass `tools_json` keep what they asked for."""
    if not defaults.tool_parser or has_tools(request.tools_json):
        return defaults
    return dataclasses.replace(defaults, tool_parser="")


def has_tools(tools_json: str) -> bool:
    """Whether `tools_json` declares tools: not empty (blank, as the core reads it) nor an empty
    JSON array. Anything else counts, malformed text included (the core refuses it)."""
    text = tools_json.strip()
    return bool(text) and not (text[0] == "[" and text[-1] == "]" and not text[1:-1].strip(" \t\n\r"))


def check_defaults(request: pb.OpenRequest, model: str, defaults: ParseDefaults) -> None:
    """A request that names no parser gets the model's default (`defaults_for`: the tool parser
    only when it has tools); one recognised from the model's template that this server does not
    implement yet is refused here, saying where it came from (the native core refuses explicitly
    named ones, from the same registry)."""
    for kind, named, default in (("tool", request.tool_parser, defaults.tool_parser),
                                 ("reasoning", request.reasoning_parser, defaults.reasoning_parser)):
        row = parsers.find(kind, default) if default and not named else None
        if row is not None and not row.implemented:
            raise FailedPrecondition(
                f"{kind}_parser: the default {kind} parser of model {model!r} is {default!r} (recognised from "
                f"its chat template and tokens), which this server does not implement yet; name a parser, or "
                f"`none` to parse without one"
            )


def check_open_limits(request: pb.OpenRequest, config, prompt_count: int | None = None) -> None:  # noqa: ANN001
    """Refuses an open over the per-request limits, naming the field and the flag (`prompt_count`:
    its prompt ids when they were read apart from `request`)."""
    if prompt_count is None:
        prompt_count = len(request.prompt_token_ids)
    if prompt_count > config.max_token_ids:
        raise ResourceExhausted(
            f"open.prompt_token_ids: {prompt_count} token ids is more than the server's limit of "
            f"{config.max_token_ids} per request (--max-token-ids)"
        )
    if len(request.stop) > config.max_stop_strings:
        raise ResourceExhausted(
            f"open.stop: {len(request.stop)} stop strings is more than the server's limit of {config.max_stop_strings} "
            "(--max-stop-strings)"
        )
    stop_bytes = sum(len(s.encode("utf-8", "surrogatepass")) for s in request.stop)
    if stop_bytes > config.max_stop_bytes:
        raise ResourceExhausted(
            f"open.stop: {stop_bytes} bytes of stop strings is more than the server's limit of {config.max_stop_bytes} "
            "(--max-stop-bytes)"
        )
    if len(request.chat_template_kwargs_json) > config.max_kwargs_bytes:
        raise ResourceExhausted(
            f"open.chat_template_kwargs_json: {len(request.chat_template_kwargs_json)} characters is more than the "
            f"server's limit of {config.max_kwargs_bytes} (--max-kwargs-bytes)"
        )


def open_config(request: pb.OpenRequest, defaults: ParseDefaults, limits: ParseLimits) -> ParseOpenConfig:
    """The parse configuration of an `OpenRequest`: the model's defaults where it names no parser,
    the proto's defaults where a field is unset, the stream's held-back bound."""
    return ParseOpenConfig(
        tool_parser=request.tool_parser or defaults.tool_parser,
        reasoning_parser=request.reasoning_parser or defaults.reasoning_parser,
        tools_json=request.tools_json,
        chat_template_kwargs_json=request.chat_template_kwargs_json,
        skip_special_tokens=request.skip_special_tokens if request.HasField("skip_special_tokens") else True,
        stop=tuple(request.stop),
        include_stop_str_in_output=request.include_stop_str_in_output,
        max_held_bytes=limits.max_held_bytes,
    )
