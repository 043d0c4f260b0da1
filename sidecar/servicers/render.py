"""Render: an OpenAI-style chat request through the model's chat template and tokenizer, in one
native call (see COMPATIBILITY.md for the exact rules)."""

from __future__ import annotations

from dataclasses import replace

import grpc

from sidecar import metrics
from sidecar.backend import Renderer, RenderOptions
from sidecar.errors import InvalidArgument, Unimplemented
from sidecar.rpc import Call
from sidecar.runtime import Runtime
from sidecar.v1 import preprocessor_pb2 as pb


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


class RenderServicer:
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._cache_hits = (metrics.RENDER_CACHE_SEGMENTS.labels("hit"), metrics.RENDER_CACHE_BYTES.labels("hit"))
        self._cache_misses = (metrics.RENDER_CACHE_SEGMENTS.labels("miss"), metrics.RENDER_CACHE_BYTES.labels("miss"))

    async def Render(self, request: pb.RenderRequest, context: grpc.aio.ServicerContext, call: Call) -> pb.RenderResponse:
        model = self._runtime.registry.get(request.model)
        if request.HasField("block_hashing"):
            raise Unimplemented("block_hashing: block hashes are not built yet in this server")
        renderer: Renderer = model.extras["renderer"]
        opts = replace(render_options(request, self._runtime.config.allow_request_templates, call.timeout_s), wire_response=True)
        cost = len(opts.messages_json) + len(opts.tools_json) + len(opts.documents_json)
        rendered = await self._runtime.offloader.run(lambda: renderer.render(opts), cost, call.rpc)
        stats = rendered.cache
        if stats.hit_segments or stats.miss_segments:
            self._cache_hits[0].inc(stats.hit_segments)
            self._cache_hits[1].inc(stats.hit_bytes)
            self._cache_misses[0].inc(stats.miss_segments)
            self._cache_misses[1].inc(stats.miss_bytes)
        if rendered.wire is not None:
            # Parsed by protobuf's C core: no Python object per token id.
            response = pb.RenderResponse.FromString(rendered.wire)
            response.fingerprint = model.fingerprint
            return response
        response = pb.RenderResponse(fingerprint=model.fingerprint, token_ids=rendered.ids)
        if rendered.text is not None:
            response.text = rendered.text
        if rendered.offsets:
            response.offsets.extend(rendered.offsets)
        return response
