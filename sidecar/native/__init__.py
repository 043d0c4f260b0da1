"""The native backend: idiomatic Python wrappers over the Rust core's C ABI.

Every wrapper method makes one native call (with the GIL released by cffi), copies the results into
Python objects and frees the native buffers in a `finally`.
"""

from __future__ import annotations

from pathlib import Path

from sidecar.backend import ParseLimits, RendererSettings
from sidecar.native._ffi import LIBRARY_VERSION, NativeLibraryError, ffi, lib
from sidecar.native.parse import NativeParseModel, NativeParseMux
from sidecar.native.renderer import NativeRenderer
from sidecar.native.tokenizer import NativeTokenizer

__all__ = [
    "LIBRARY_VERSION", "NativeBackend", "NativeLibraryError", "NativeParseModel", "NativeParseMux", "NativeRenderer",
    "NativeTokenizer", "ffi", "lib",
]


class NativeBackend:
    """Backend running every operation in the Rust core."""

    name = "native"

    def load_tokenizer(self, model_dir: Path, output_size: int = 0) -> NativeTokenizer:
        return NativeTokenizer.from_dir(model_dir, output_size)

    def load_renderer(
        self, templates: list[tuple[str, str]], variables: list[tuple[str, str]], tokenizer: NativeTokenizer,
        settings: RendererSettings,
    ) -> NativeRenderer:
        return NativeRenderer(templates, variables, tokenizer, settings)

    def load_parse_model(self, tokenizer: NativeTokenizer, force_generic: bool = False,
                         response_template: dict | None = None) -> NativeParseModel:
        return NativeParseModel(tokenizer, force_generic, response_template)

    def new_parse_mux(self, limits: ParseLimits) -> NativeParseMux:
        return NativeParseMux(limits)

    def release_memory(self) -> None:
        """Hands freed memory back to the system (the native allocator's and glibc's); the server
        calls it after large calls (see `sidecar.runtime`)."""
        lib.sc_release_memory()
