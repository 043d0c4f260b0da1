"""The reference backend: tokenize and render in pure Python on the PyPI `tokenizers` and
`minijinja` packages (block hashing has its reference in `router_adapter`).

It exists to be obviously right, not fast: the native backend must match it exactly, and the
differential tests prove that on every model in `../shared/models`. Select it with
`sidecar serve --backend reference`. It does not parse: ParseStream is held to the engines' own
parsers (their vectors), not to a second implementation written from the same notes, so on this
backend the stream answers FAILED_PRECONDITION saying so.
"""

from __future__ import annotations

from pathlib import Path

from sidecar.backend import ParseLimits, ParseMux, RendererSettings
from sidecar.errors import FailedPrecondition
from sidecar.reference.renderer import ReferenceRenderer
from sidecar.reference.tokenizer import ReferenceTokenizer

__all__ = ["PARSE_REFUSED", "ReferenceBackend", "ReferenceRenderer", "ReferenceTokenizer"]

#: ParseStream's FAILED_PRECONDITION message on this backend.
PARSE_REFUSED = (
    "ParseStream: the reference backend does not parse; it covers tokenize, render and block hashing, while "
    "parsing is held to the engines' own parsers (vLLM and SGLang vectors) in the native core: start the server "
    "with --backend native"
)


class ReferenceBackend:
    """Backend running tokenize and render in Python; it does not parse (see `PARSE_REFUSED`)."""

    name = "reference"

    def load_tokenizer(self, model_dir: Path, output_size: int = 0) -> ReferenceTokenizer:
        return ReferenceTokenizer.from_dir(model_dir, output_size)

    def load_renderer(
        self, templates: list[tuple[str, str]], variables: list[tuple[str, str]], tokenizer: ReferenceTokenizer,
        settings: RendererSettings,
    ) -> ReferenceRenderer:
        return ReferenceRenderer(templates, variables, tokenizer, settings)

    def load_parse_model(self, tokenizer: ReferenceTokenizer, force_generic: bool = False,
                         response_template: dict | None = None) -> None:
        return None  # nothing to build: the stream is refused

    def new_parse_mux(self, limits: ParseLimits) -> ParseMux:
        raise FailedPrecondition(PARSE_REFUSED)
