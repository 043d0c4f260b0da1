"""Which tool-call and reasoning parsers a model uses when a request names none.

Configuration wins (`--model NAME=DIR,tool_parser=...,reasoning_parser=...`); otherwise the parsers
are recognised from the model's chat templates and special tokens by the signatures of the parser
registry's rows (`sidecar.parsers`): each format has markers only its templates write
(`<minimax:tool_call>`, `｜DSML｜`, `<arg_key>`, harmony's `<|channel|>` token...), and signatures
are ranked from the most specific to the most generic (`<tool_call>`); what nothing decided becomes
`hf` where the model's own `response_template` has the field for it. A recognised parser that is
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


#: The parser (both kinds) that interprets a model's own `response_template`.
RESPONSE_TEMPLATE_PARSER = "hf"


def with_response_template(tool: str | None, reasoning: str | None, fields: Iterable[str]) -> tuple[str, str]:
    """Fills each kind still undecided (None) with `hf` where the model's usable `response_template`
    has its field (`tool_calls`, `thinking`), as SGLang's detection does (vLLM picks none by itself),
    else none. `hf` pairs only with itself or none, so a kind decided as another format keeps the
    other kind from becoming `hf`."""
    fields = set(fields)
    compatible = ("", RESPONSE_TEMPLATE_PARSER, None)
    if tool is None and "tool_calls" in fields and reasoning in compatible:
        tool = RESPONSE_TEMPLATE_PARSER
    if reasoning is None and "thinking" in fields and tool in compatible:
        reasoning = RESPONSE_TEMPLATE_PARSER
    return tool or "", reasoning or ""


def parse_defaults(templates: Iterable[str], added_tokens: Iterable[str], options: Mapping[str, str],
                   response_template_fields: Iterable[str] = ()) -> ParseDefaults:
    """A model's defaults: configured (`tool_parser=`, `reasoning_parser=` options), else recognised
    from its template sources and added-token texts, else `hf` from its `response_template`."""
    tool, reasoning = detect_parsers(list(templates), set(added_tokens))
    return ParseDefaults(*with_response_template(options.get("tool_parser", tool or None),
                                                 options.get("reasoning_parser", reasoning or None),
                                                 response_template_fields))
