"""Reference parse session: one request's decoder, stop strings, reasoning split and tool parser
(the pipeline and every rule as in the native `parse` module)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import tokenizers

from sidecar.errors import FailedPrecondition, InvalidArgument, ResourceExhausted
from sidecar.reference.parse.detok import RefDetokenizer
from sidecar.reference.parse.harmony import MARKERS as HARMONY_MARKERS
from sidecar.reference.parse.harmony import Harmony
from sidecar.reference.parse.pipeline import CONTENT, VISIBLE, Buf, Ledger, Markers, Out, StopFilter
from sidecar.reference.parse.reasoning import THINK_FORMATS, Passthrough, ThinkSplit
from sidecar.reference.parse.schema import Tools
from sidecar.reference.parse.tools import PARSERS

#: How far back the reasoning split looks in the prompt (as the native core).
PRIME_PARSER_IDS = 512


@dataclass
class RefModel:
    """A model's tokenizer and what parsing needs to know about its ids."""

    tok: tokenizers.Tokenizer
    vocab_size: int
    known: frozenset[int]
    specials: frozenset[int]
    byte_pieces: frozenset[int]
    added: dict[str, int] = field(default_factory=dict)

    def visible(self, token_id: int, skip: bool) -> str:
        if skip and token_id in self.specials:
            return ""
        return self.tok.decode([token_id], skip_special_tokens=False)


@dataclass
class RefDelta:
    content: str = ""
    reasoning: str = ""
    calls: list[dict] = field(default_factory=list)
    reasoning_tokens: int = 0
    completion_tokens: int = 0
    finished: bool = False
    finish_reason: str = ""
    matched_stop: str = ""


def _parser_name(name: str) -> str:
    return "" if name == "none" else name


def _thinking_flag(kwargs_json: str) -> bool | None:
    if not kwargs_json.strip():
        return None
    try:
        value = json.loads(kwargs_json)
    except ValueError as e:
        raise InvalidArgument(f"chat_template_kwargs_json: not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise InvalidArgument("chat_template_kwargs_json: expected a JSON object")
    for key in ("enable_thinking", "thinking"):
        if isinstance(value.get(key), bool):
            return value[key]
    return None


class RefSession:
    def __init__(self, model: RefModel, config: dict, prompt: list[int]) -> None:
        tool_name = _parser_name(config.get("tool_parser", ""))
        reasoning_name = _parser_name(config.get("reasoning_parser", ""))
        harmony = "openai" in (tool_name, reasoning_name)
        if harmony:
            for field_name, name in (("tool_parser", tool_name), ("reasoning_parser", reasoning_name)):
                if name not in ("", "openai"):
                    raise InvalidArgument(
                        f"{field_name}: {name!r} cannot be combined with the `openai` (harmony) parser, which reads "
                        "reasoning and tool calls itself; use `openai` or `none`"
                    )
            tool_name = reasoning_name = ""
        if tool_name and tool_name not in PARSERS:
            raise InvalidArgument(f"tool_parser: unknown parser {tool_name!r}; known: {', '.join(PARSERS)}")
        if reasoning_name and reasoning_name not in THINK_FORMATS:
            raise InvalidArgument(
                f"reasoning_parser: unknown parser {reasoning_name!r}; known: {', '.join(THINK_FORMATS)}"
            )
        tools = Tools.parse(config.get("tools_json", ""))
        flag = _thinking_flag(config.get("chat_template_kwargs_json", ""))
        for i, token_id in enumerate(prompt):
            if token_id not in model.known:
                raise InvalidArgument(
                    f"prompt_token_ids[{i}]: id {token_id} is not in the vocabulary (size {model.vocab_size})"
                )
        self.model = model
        self.skip = config.get("skip_special_tokens", True)
        markers = Markers()
        think = THINK_FORMATS.get(reasoning_name)
        marker_texts = list(think.markers() if think else ()) + list(PARSERS[tool_name][0] if tool_name else ())
        marker_texts += list(HARMONY_MARKERS) if harmony else []
        for text in marker_texts:
            token_id = model.added.get(text)
            markers.add(text, None if token_id is None else (token_id, model.visible(token_id, self.skip)))
        self.markers = markers
        if harmony:
            self.reasoning_stage = Harmony(markers)
        else:
            self.reasoning_stage = ThinkSplit(think, markers) if think else Passthrough(VISIBLE)
        self.tool_stage = PARSERS[tool_name][1](markers, tools) if tool_name else Passthrough(CONTENT)
        self.detok = RefDetokenizer(model.tok, self.skip, model.byte_pieces, model.specials)
        self.stops = [s for s in config.get("stop", []) if s]
        self.stop = StopFilter(self.stops, config.get("include_stop_str_in_output", False))
        self.out = Out(markers, tool_name == "mistral", config.get("id_seed", 0))
        self.buf1, self.buf2 = Buf(), Buf()
        self.ledger = Ledger()
        self.stream_len = 0
        self.tokens = 0
        self.finished = False
        self.max_held = config.get("max_held_bytes", 1 << 20)
        self._prime(prompt, flag)

    def _prime(self, prompt: list[int], flag: bool | None) -> None:
        self.detok.prime(prompt)
        window = prompt[-PRIME_PARSER_IDS:]
        start = 0
        for i in range(len(window) - 1, -1, -1):
            if window[i] in self.model.specials and window[i] not in self.markers.sentinel_of_id:
                start = i + 1
                break
        segment = window[start:]
        if segment:
            detok = RefDetokenizer(self.model.tok, self.skip, self.model.byte_pieces, self.model.specials)
            text = ""
            scratch: list = []
            for token_id in segment:
                sentinel = self.markers.sentinel_of_id.get(token_id)
                if sentinel is not None:
                    text += detok.flush(0, scratch) + sentinel
                else:
                    text += detok.push(token_id, -1, 0, scratch)
            text += detok.flush(0, scratch)
            buf = Buf()
            buf.push(text, 0)
            self.reasoning_stage.feed(buf, Out(self.markers, False, 1), False)
        self.reasoning_stage.primed(flag)

    def held_bytes(self) -> int:
        return (
            self.detok.held_bytes() + self.stop.held_bytes() + len(self.buf1.text.encode())
            + len(self.buf2.text.encode()) + self.reasoning_stage.held() + self.tool_stage.held()
        )

    def feed(self, ids: list[int], end: bool) -> RefDelta:
        if self.finished:
            raise FailedPrecondition("the request already finished")
        for i, token_id in enumerate(ids):
            if token_id not in self.model.known:
                raise InvalidArgument(
                    f"token_ids[{i}]: id {token_id} is not in the vocabulary (size {self.model.vocab_size})"
                )
        anchors: list = []
        text = ""
        for token_id in ids:
            seq = self.tokens
            self.tokens += 1
            sentinel = self.markers.sentinel_of_id.get(token_id)
            base = self.stream_len + len(text.encode())
            if sentinel is not None:
                visible = not (self.skip and token_id in self.model.specials)
                text += self.detok.flush(base, anchors, token_id, visible)
                anchors.append((seq, self.stream_len + len(text.encode()), False))
                text += sentinel
            else:
                text += self.detok.push(token_id, seq, base, anchors)
        if end:
            text += self.detok.flush(self.stream_len + len(text.encode()), anchors)
        base = self.stream_len
        self.stream_len += len(text.encode())
        self.ledger.add_anchors(anchors)
        matched = self.stop.feed(text, base, end, self.buf1.push)
        done = end or matched is not None
        self.reasoning_stage.feed(self.buf1, self.out, done)
        self.out.visible.drain_into(self.buf2)
        self.tool_stage.feed(self.buf2, self.out, done)
        self.ledger.add_spans(self.out.spans)
        self.out.spans = []
        self.ledger.resolve(done)
        held = self.held_bytes()
        if not done and held > self.max_held:
            self.finished = True
            raise ResourceExhausted(
                f"the request holds back {held} bytes of undecided output, more than the limit of {self.max_held} "
                "(an unterminated tool call or value?)"
            )
        delta = RefDelta(
            content=self.out.content, reasoning=self.out.reasoning, calls=self.out.calls,
            reasoning_tokens=self.ledger.reasoning, completion_tokens=self.tokens,
        )
        self.out.content, self.out.reasoning, self.out.calls = "", "", []
        if done:
            self.finished = True
            delta.finished = True
            if matched is not None:
                delta.finish_reason = "stop"
                delta.matched_stop = self.stops[matched]
            elif self.out.call_count:
                delta.finish_reason = "tool_calls"
        return delta
