"""The parser registry as Python sees it: `sidecar/parsers.json`, the export of the native table
(`native/src/parse/registry`, one row per format; a Rust test fails when the committed file differs).

Every tool-call and reasoning parser name vLLM 0.33 and SGLang 0.5.23 register is in it, with its
kind, aliases, markers, whether this build implements it, and how a model's default is recognised.
`ListParsers` reports it, `sidecar.parse_defaults` recognises model defaults with it, the tests read
it. Opening a request resolves names in the native core, from the same table.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

_PATH = Path(__file__).resolve().parent / "parsers.json"


@dataclass(frozen=True, slots=True)
class Signature:
    """How a model's default parser is recognised: every group holds (one of its conditions does:
    `("template", text)` = the chat templates contain text, `("token", text)` = an added token is
    exactly text) and no `unless` text is in the templates. The lowest rank that holds wins."""

    rank: int
    groups: tuple[tuple[tuple[str, str], ...], ...]
    unless: tuple[str, ...]

    def holds(self, template: str, tokens: set[str]) -> bool:
        def one(kind: str, text: str) -> bool:
            return text in template if kind == "template" else text in tokens

        return all(any(one(k, t) for k, t in group) for group in self.groups) and not any(
            u in template for u in self.unless
        )


@dataclass(frozen=True, slots=True)
class Parser:
    """One row: a format and every name it is registered under."""

    name: str
    kind: str
    implemented: bool
    aliases: tuple[str, ...]
    vllm_names: tuple[str, ...]
    sglang_names: tuple[str, ...]
    legacy_names: tuple[str, ...]
    shadowed: tuple[str, ...]
    markers: tuple[str, ...]
    id_style: str | None
    start: dict | None
    detect: tuple[Signature, ...]
    about: str

    @property
    def names(self) -> tuple[str, ...]:
        """Every name that selects this row, canonical first."""
        return (self.name, *self.aliases)

    def alias_engine(self, alias: str) -> str:
        """Who registers `alias`: "vllm", "sglang", or "sidecar" (a name this server took before)."""
        if alias in self.vllm_names:
            return "vllm"
        return "sglang" if alias in self.sglang_names else "sidecar"


def _signature(raw: dict) -> Signature:
    groups = tuple(tuple(next(iter(c.items())) for c in group) for group in raw["all"])
    return Signature(raw["rank"], groups, tuple(raw["unless"]))


def _parser(raw: dict) -> Parser:
    return Parser(
        name=raw["name"], kind=raw["kind"], implemented=raw["implemented"], aliases=tuple(raw["aliases"]),
        vllm_names=tuple(raw["vllm_names"]), sglang_names=tuple(raw["sglang_names"]),
        legacy_names=tuple(raw["legacy_names"]), shadowed=tuple(raw["shadowed"]), markers=tuple(raw["markers"]), id_style=raw["id_style"],
        start=raw["start"], detect=tuple(_signature(d) for d in raw["detect"]), about=raw["about"],
    )


@functools.cache
def parsers() -> tuple[Parser, ...]:
    """Every row, tool rows first, in table order."""
    return tuple(_parser(raw) for raw in json.loads(_PATH.read_text(encoding="utf-8"))["parsers"])


def engines() -> dict[str, str]:
    """The engine versions whose registries the table covers."""
    return dict(json.loads(_PATH.read_text(encoding="utf-8"))["engines"])


def of_kind(kind: str) -> tuple[Parser, ...]:
    return tuple(p for p in parsers() if p.kind == kind)


def find(kind: str, name: str) -> Parser | None:
    """The row `name` selects among parsers of `kind` (canonical names, then aliases), or None."""
    rows = of_kind(kind)
    return next((p for p in rows if p.name == name), None) or next((p for p in rows if name in p.aliases), None)


def detect(kind: str, templates: Iterable[str], added_tokens: Iterable[str]) -> str:
    """The canonical name of the parser of `kind` a model's chat templates and added tokens point
    to ("" when none does): the lowest-ranked signature that holds."""
    template = "\n".join(templates)
    tokens = set(added_tokens)
    best: tuple[int, str] | None = None
    for row in of_kind(kind):
        for sig in row.detect:
            if (best is None or sig.rank < best[0]) and sig.holds(template, tokens):
                best = (sig.rank, row.name)
    return best[1] if best else ""
