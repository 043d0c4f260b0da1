"""The reference backend: the same operations in pure Python on the PyPI `tokenizers` package.

It exists to be obviously right, not fast: the native backend must match it exactly, and the
differential tests prove that on every model in `../shared/models`. Select it with
`sidecar serve --backend reference`.
"""

from __future__ import annotations

from pathlib import Path

from sidecar.backend import ParseLimits, RendererSettings
from sidecar.reference.renderer import ReferenceRenderer
from sidecar.reference.tokenizer import ReferenceTokenizer

__all__ = ["ReferenceBackend", "ReferenceRenderer", "ReferenceTokenizer"]


class ReferenceBackend:
    """Backend running every operation in Python."""

    name = "reference"

    def load_tokenizer(self, model_dir: Path) -> ReferenceTokenizer:
        return ReferenceTokenizer.from_dir(model_dir)

    def load_renderer(
        self, templates: list[tuple[str, str]], variables: list[tuple[str, str]], tokenizer: ReferenceTokenizer,
        settings: RendererSettings,
    ) -> ReferenceRenderer:
        return ReferenceRenderer(templates, variables, tokenizer, settings)

    def load_parse_model(self, tokenizer: ReferenceTokenizer, force_generic: bool = False):  # noqa: ANN201
        from sidecar.reference.parse import ReferenceParseModel

        return ReferenceParseModel(tokenizer)

    def new_parse_mux(self, limits: ParseLimits):  # noqa: ANN201
        from sidecar.reference.parse import ReferenceParseMux

        return ReferenceParseMux(limits)
