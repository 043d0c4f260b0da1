"""The native table of the hosted models (`NativeMultiplexer`) that the Multiplex stream and the
unary Tokenize, Detokenize and Render RPCs run requests on, and the unary path over it.

On the unary path the raw request body goes to the native core and the response's wire bytes come
back: the request is decoded, checked, run and its response encoded in one native call with the
GIL released, so no protobuf message is parsed or built in Python. A body no larger than the
inline bound runs on the event loop in that call (the core first decodes it and, when the
request's cost is above the bound after all, defers it); a larger one, or a deferred one, runs on
the worker pool like any large call, cancellable and within its deadline.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from router_adapter.errors import quoted
from sidecar import metrics
from sidecar.rpc import Call, decode_request
from sidecar.runtime import Runtime

try:
    from sidecar.native._calls import timeout_us
    from sidecar.native.multiplex import MultiplexModel, NativeMultiplexer, Unary
except ImportError:  # no native library (a reference-only install)
    NativeMultiplexer = None


class NativeTable:
    """The table for the registry's current models, rebuilt after a reload (calls that fetched
    the old one keep it until they return: they `hold` it before any wait); None on a backend
    other than the native one."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._table: NativeMultiplexer | None = None
        self._generation = -1

    def get(self) -> NativeMultiplexer | None:
        registry = self._runtime.registry
        if self._table is not None and self._generation == registry.generation:
            return self._table
        if NativeMultiplexer is None or registry.backend.name != "native":
            return None
        config = self._runtime.config
        models = [MultiplexModel(m.name, m.fingerprint, m.tokenizer, m.renderer) for m in registry]
        settings = {
            "allow_request_templates": config.allow_request_templates, "inline_bytes": config.inline_bytes,
            "max_inflight": config.multiplex_max_inflight, "max_message_bytes": config.max_message_bytes,
            # The unary RPCs' per-item limits, with their messages (see the servicers).
            "max_text_chars": config.max_text_chars, "max_word_chars": config.max_word_chars,
            "max_token_ids": config.max_token_ids, "max_kwargs_bytes": config.max_kwargs_bytes,
        }
        previous, self._table = self._table, NativeMultiplexer(models, settings)
        self._generation = registry.generation
        if previous is not None:
            previous.close()
        return self._table


async def run_unary(runtime: Runtime, table: NativeMultiplexer, kind: int, body: bytes, call: Call) -> Unary:
    """Runs one unary request natively (see the module docs); raises its status when it failed,
    counting a body that does not decode in `sidecar_malformed_requests_total`."""
    inline = runtime.config.inline_bytes
    timeout = timeout_us(call.timeout_s)
    offloader = runtime.offloader
    # Held from here, before any wait: a reload meanwhile closes the table (`NativeTable.get`).
    table.hold()
    try:
        if len(body) <= inline:
            result = await offloader.run(lambda: table.unary(kind, body, timeout, inline), 0, call.rpc)
            cost = result.deferred_cost
        else:
            result, cost = None, len(body)
        if cost:
            result = await offloader.run(lambda: table.unary(kind, body, timeout), cost, call.rpc)
    finally:
        table.release()
    call.model = quoted(result.model, str)
    if result.error is not None:
        if result.malformed:
            metrics.MALFORMED.labels(call.rpc).inc()
        raise result.error
    return result


async def run_decoded(runtime: Runtime, method: Callable[[Any, Any, Call], Awaitable[bytes]], request_type: type,
                      body: bytes, context: Any, call: Call) -> bytes:
    """The Python path of a raw unary RPC (a backend without the native table): `body` decoded as
    `request_type` and run by the servicer's `method`, which returns the response's wire bytes
    (serialized with its work, on a worker when the call is large). Decoding reads the whole
    message with the GIL held, so a large body is decoded on a worker too (the `decode` stage):
    the loop still waits for the GIL, but not for that and the rest at once."""
    call.body_bytes = len(body)
    request = await runtime.offloader.run(lambda: decode_request(call.rpc, request_type, body), len(body), call.rpc,
                                          stage="decode")
    call.model = quoted(request.model, str)
    return await method(request, context, call)
