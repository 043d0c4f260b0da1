"""Which tool-call and reasoning parsers a model uses when a request names none.

Configuration wins (`--model NAME=DIR,tool_parser=...,reasoning_parser=...`); otherwise the parsers
are recognised from the model's chat templates and special tokens by the signatures of the parser
registry's rows (`sidecar.parsers`): each format has markers only its templates write
(`<minimax:tool_call>`, `｜DSML｜`, `<arg_key>`, harmony's `<|channel|>` token...), and signatures
are ranked from the most specific to the most generic (`<tool_call>`). A recognised parser that is
not implemented yet is still the model's default (ListModels reports it; opening a request with it
is FAILED_PRECONDITION naming it, and `none` parses without it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from sidecar import parsers


@dataclass(frozen=True, slots=True)
class ParseDefaults:
    """The parsers a model's ParseStream requests get when they name none ("" = none)."""

    tool_parser: str = ""
    reasoning_parser: str = ""


def detect_parsers(templates: list[str], added_tokens: set[str]) -> tuple[str, str]:
    """(tool parser, reasoning parser) recognised from template sources and added-token texts;
    "" where nothing is recognised."""
    return parsers.detect("tool", templates, added_tokens), parsers.detect("reasoning", templates, added_tokens)


def parse_defaults(templates: Iterable[str], added_tokens: Iterable[str], options: Mapping[str, str]) -> ParseDefaults:
    """A model's defaults: configured (`tool_parser=`, `reasoning_parser=` options), else recognised
    from its template sources and added-token texts."""
    tool, reasoning = detect_parsers(list(templates), set(added_tokens))
    return ParseDefaults(options.get("tool_parser", tool), options.get("reasoning_parser", reasoning))
