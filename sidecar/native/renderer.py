"""`NativeRenderer`: the `sc_renderer` handle (chat templates + tokenizer + multi-turn cache)."""

from __future__ import annotations

import json
from array import array

from sidecar.backend import CacheStats, RenderOptions, Rendered, RendererSettings
from sidecar.native._calls import call_bytes, call_out, cancel_arg, str_arg, timeout_us, unpack_bytes
from sidecar.native._ffi import ffi, lib
from sidecar.native._handle import Handle
from sidecar.native.tokenizer import NativeTokenizer

_EMPTY = b""


class NativeRenderer:
    """A model's chat templates rendered and tokenized in one native call; thread-safe."""

    def __init__(
        self, templates: list[tuple[str, str]], variables: list[tuple[str, str]], tokenizer: NativeTokenizer,
        settings: RendererSettings,
    ) -> None:
        config = {
            "templates": templates,
            "variables": variables,
            "fuel": settings.fuel,
            "recursion_limit": settings.recursion_limit,
            "max_output_bytes": settings.max_output_bytes,
            "fixed_time": settings.fixed_time,
            "cache_bytes": settings.cache_bytes,
            "max_word_chars": settings.max_word_chars or None,
        }
        raw = json.dumps(config).encode()
        with tokenizer.handle as tok:
            handle = call_out("sc_renderer *", lib.sc_renderer_new, tok, str_arg(raw))
        self._handle = Handle(handle, lib.sc_renderer_free, "renderer")
        info = self.info()
        self.template_names: list[str] = [t["name"] for t in info["templates"]]
        #: Template name -> "string" or "openai" (vLLM's content format), for the ones that compile.
        self.content_formats: dict[str, str] = {t["name"]: t["content_format"] for t in info["templates"] if t["content_format"]}

    @property
    def handle(self) -> Handle:
        """The leased `sc_renderer *` (for other native calls that take a renderer)."""
        return self._handle

    def info(self) -> dict:
        """Templates with their content format, and the bytes the multi-turn cache holds."""
        with self._handle as renderer:
            return json.loads(call_bytes(lib.sc_renderer_info, renderer))

    def close(self) -> None:
        """Frees the native renderer now, or when the last render in flight returns."""
        self._handle.close()

    def render(self, opts: RenderOptions) -> Rendered:
        # Encoded strings must outlive the call: cffi's from_buffer borrows them.
        fields = {
            "messages_json": opts.messages_json.encode("utf-8", "surrogatepass"),
            "tools_json": opts.tools_json.encode("utf-8", "surrogatepass"),
            "documents_json": opts.documents_json.encode("utf-8", "surrogatepass"),
            "kwargs_json": opts.chat_template_kwargs_json.encode("utf-8", "surrogatepass"),
            "chat_template": (opts.chat_template or "").encode("utf-8", "surrogatepass"),
        }
        req = ffi.new("sc_render_request *")
        keep = []
        for name, data in fields.items():
            slot = getattr(req, name)
            if data:
                buf = ffi.from_buffer("uint8_t[]", data)
                keep.append(buf)
                slot.ptr = buf
            slot.len = len(data)
        req.has_chat_template = opts.chat_template is not None
        req.allow_request_template = opts.allow_request_template
        req.add_generation_prompt = opts.add_generation_prompt
        req.continue_final_message = opts.continue_final_message
        req.add_special_tokens = opts.add_special_tokens
        req.return_text = opts.return_text
        req.return_ids = opts.return_token_ids
        req.return_offsets = opts.return_offsets
        req.use_cache = opts.use_cache
        req.timeout_us = timeout_us(opts.timeout_s)
        flag = cancel_arg()
        req.cancel = flag
        with self._handle as renderer:
            res = ffi.gc(call_out("sc_render_result *", lib.sc_renderer_render, renderer, req), lib.sc_render_result_free)
        cache = CacheStats(res.cache_hit_segments, res.cache_miss_segments, res.cache_hit_bytes, res.cache_miss_bytes)
        text = unpack_bytes(res.text, res.text_len).decode("utf-8") if opts.return_text else None
        return Rendered(text=text, ids=_u32_view(res, res.ids, res.ids_len),
                        offsets=_u32_view(res, res.offsets, res.offsets_len), cache=cache)


_NO_IDS = memoryview(array("I"))


def _u32_view(owner, ptr, n: int) -> memoryview:  # noqa: ANN001 - cffi cdata
    """The `n` uint32 values at `ptr` inside the render result `owner`, as a read-only
    memoryview (format "I") without copying them; the result is freed once every view of it is
    gone."""
    if not n:
        return _NO_IDS
    # The pointer's own (no-op) destructor holds `owner`, so the view keeps the result alive.
    keep = ffi.gc(ffi.cast("uint32_t *", ptr), lambda _p, owner=owner: None)
    return memoryview(ffi.buffer(keep, n * 4)).toreadonly().cast("B").cast("I")
