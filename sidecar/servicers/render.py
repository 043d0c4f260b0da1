"""Render: an OpenAI-style chat request through the model's chat template and tokenizer, in one
native call (see COMPATIBILITY.md for the exact rules)."""

from __future__ import annotations

from dataclasses import replace

import grpc

from sidecar import metrics
from sidecar.backend import CacheStats, Rendered, RenderOptions
from sidecar.errors import InvalidArgument, ResourceExhausted
from sidecar.hashing import spec_from_proto, spec_to_proto
from sidecar.rpc import Call
from sidecar.runtime import UNBOUNDED, Runtime, request_cost
from sidecar.servicers.native_table import NativeTable, run_decoded, run_unary
from sidecar.v1 import preprocessor_pb2 as pb

_RENDER = 3  # sidecar.native.multiplex.UNARY_RENDER (not importable without the native library)

try:
    from sidecar.native.wire import render_response_bytes
except ImportError:  # no native library (a reference-only install): protobuf builds the response itself
    render_response_bytes = None


def render_options(request: pb.RenderRequest, allow_request_templates: bool, timeout_s: float | None) -> RenderOptions:
    """The backend options for a request, with the proto's defaults applied."""
    continue_final = request.continue_final_message
    if request.HasField("add_generation_prompt"):
        add_generation_prompt = request.add_generation_prompt
        if add_generation_prompt and continue_final:
            raise InvalidArgument(
                "add_generation_prompt: cannot be true together with continue_final_message (the first opens a new "
                "assistant turn, the second ends the prompt inside the final message)"
            )
    else:
        # Unset means true, except that continuing the final message implies no new turn.
        add_generation_prompt = not continue_final
    return RenderOptions(
        messages_json=request.messages_json,
        tools_json=request.tools_json,
        documents_json=request.documents_json,
        chat_template_kwargs_json=request.chat_template_kwargs_json,
        chat_template=request.chat_template if request.HasField("chat_template") else None,
        allow_request_template=allow_request_templates,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final,
        add_special_tokens=request.add_special_tokens if request.HasField("add_special_tokens") else False,
        return_text=request.return_text,
        return_token_ids=request.return_token_ids if request.HasField("return_token_ids") else True,
        return_offsets=request.return_offsets,
        use_cache=not request.bypass_cache,
        timeout_s=timeout_s,
    )


def check_kwargs_size(kwargs_json: str, limit: int) -> None:
    """Refuses `chat_template_kwargs_json` longer than `limit`, naming the field and the flag."""
    if len(kwargs_json) > limit:
        raise ResourceExhausted(
            f"chat_template_kwargs_json: {len(kwargs_json)} characters is more than the server's limit of {limit} "
            "(--max-kwargs-bytes)"
        )


def render_cost(request: pb.RenderRequest, allow_request_templates: bool, body_bytes: int = 0) -> int:
    """The offload cost of a Render: every field it reads (`body_bytes` when known); a request's own
    template is code whose cost its size does not bound (a 100-byte template can run for seconds),
    so it always offloads."""
    if allow_request_templates and request.HasField("chat_template"):
        return UNBOUNDED
    return request_cost(body_bytes or request.ByteSize())


class RenderServicer:
    def __init__(self, runtime: Runtime, native: NativeTable | None = None) -> None:
        self._runtime = runtime
        self._native = native or NativeTable(runtime)
        self._cache_hits = (metrics.RENDER_CACHE_SEGMENTS.labels("hit"), metrics.RENDER_CACHE_BYTES.labels("hit"))
        self._cache_misses = (metrics.RENDER_CACHE_SEGMENTS.labels("miss"), metrics.RENDER_CACHE_BYTES.labels("miss"))

    async def RenderRaw(self, body: bytes, context: grpc.aio.ServicerContext, call: Call) -> bytes:
        """The RPC from its raw body to the response's wire bytes: in the native core when the
        backend is native (see `sidecar.servicers.native_table`), else through `Render`."""
        table = self._native.get()
        if table is None:
            return await run_decoded(self._runtime, self.Render, pb.RenderRequest, body, context, call)
        result = await run_unary(self._runtime, table, _RENDER, body, call)
        self._count_cache(*result.cache)
        return result.response

    def _count_cache(self, hit_segments: int, miss_segments: int, hit_bytes: int, miss_bytes: int) -> None:
        if hit_segments or miss_segments:
            self._cache_hits[0].inc(hit_segments)
            self._cache_hits[1].inc(hit_bytes)
            self._cache_misses[0].inc(miss_segments)
            self._cache_misses[1].inc(miss_bytes)

    async def Render(self, request: pb.RenderRequest, context: grpc.aio.ServicerContext, call: Call) -> bytes:
        """The Python path (see `run_decoded`): the response's wire bytes."""
        model = self._runtime.registry.get(request.model)
        renderer = model.renderer
        config = self._runtime.config
        # A bad hashing spec fails before any rendering work; hashing needs the ids even when the
        # caller does not want them back.
        hash_spec = spec_from_proto(request.block_hashing) if request.HasField("block_hashing") else None
        hasher = self._runtime.hasher

        def work() -> tuple[CacheStats, bytes]:
            # Reading the request's text fields copies them: that too runs here, off the loop when
            # the request is large.
            check_kwargs_size(request.chat_template_kwargs_json, config.max_kwargs_bytes)
            opts = render_options(request, config.allow_request_templates, call.timeout_s)
            wants_ids = opts.return_token_ids
            if hash_spec is not None:
                opts = replace(opts, return_token_ids=True)
            rendered = renderer.render(opts)
            response = response_from(rendered, wants_ids)
            if hash_spec is not None:
                response.block_hashes.extend(hasher.block_hashes(rendered.ids, hash_spec))
                response.block_hash_spec.CopyFrom(spec_to_proto(hash_spec))
            response.fingerprint = model.fingerprint
            return rendered.cache, response.SerializeToString()

        # Never inline on this path (the reference backend): a template's prompt can be many times
        # its request, and Python renders and tokenizes it at full cost (mistral-nemo repeats the
        # tools for each user turn equal to the last: 15.6 KB became 921K characters, 0.9 s on the
        # loop). The native path tokenizes repeated segments once (the same request: 8 ms).
        cost = max(render_cost(request, config.allow_request_templates, call.body_bytes), config.inline_bytes + 1)
        stats, response = await self._runtime.offloader.run(work, cost, call.rpc)
        self._count_cache(stats.hit_segments, stats.miss_segments, stats.hit_bytes, stats.miss_bytes)
        return response


def response_from(rendered: Rendered, with_ids: bool) -> pb.RenderResponse:
    """The response's text, token ids (when `with_ids`) and offsets."""
    ids = rendered.ids if with_ids else ()
    if render_response_bytes is not None:
        # Encoded natively from the id buffer and parsed by protobuf's C core: no Python int per id.
        return pb.RenderResponse.FromString(render_response_bytes(rendered.text, ids, rendered.offsets))
    response = pb.RenderResponse(token_ids=ids, offsets=rendered.offsets)
    if rendered.text is not None:
        response.text = rendered.text
    return response
