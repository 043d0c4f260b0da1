"""The pieces every reference stage shares: the input buffer with stream offsets, marker search,
the output sink and token attribution. Same semantics as the native core (see its module docs):
marker tokens are single noncharacters U+FDD0+i in the text; every byte is routed to one channel;
a token belongs to the channel holding its first byte.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field

SENTINEL_BASE = 0xFDD0
SENTINEL_END = 0xFDEF

CONTENT, REASONING, TOOL, FRAMING, VISIBLE = "content", "reasoning", "tool", "framing", "visible"


#: ASCII whitespace, the set Rust's `is_ascii_whitespace` (the native parsers) skips.
WS = " \t\n\r\x0c"


def is_sentinel(ch: str) -> bool:
    return SENTINEL_BASE <= ord(ch) <= SENTINEL_END


def after_ws(s: str, i: int = 0) -> int:
    """The index after the ASCII whitespace that starts at `i`."""
    while i < len(s) and s[i] in WS:
        i += 1
    return i


class Buf:
    """Parser input: text plus the stream offset where each contiguous piece starts."""

    def __init__(self) -> None:
        self.text = ""
        self._segs: list[tuple[int, int]] = []  # (char index, stream byte offset)

    def __len__(self) -> int:
        return len(self.text)

    def push(self, s: str, offset: int) -> None:
        if not s:
            return
        if self._segs:
            i, o = self._segs[-1]
            if o + len(self.text[i:].encode()) == offset:
                self.text += s
                return
        self._segs.append((len(self.text), offset))
        self.text += s

    def take(self, n: int) -> list[tuple[str, int, int]]:
        """Removes the first n characters; returns (text, start, end) per stream range."""
        if n <= 0:
            return []
        pieces = []
        keep = []
        for k, (i, o) in enumerate(self._segs):
            end = self._segs[k + 1][0] if k + 1 < len(self._segs) else len(self.text)
            if i >= n:
                keep.append((i - n, o))
                continue
            cut = min(end, n)
            piece = self.text[i:cut]
            pieces.append((piece, o, o + len(piece.encode())))
            if end > n:
                keep.append((0, o + len(piece.encode())))
        self._segs = keep
        self.text = self.text[n:]
        return pieces

    def drain_into(self, other: Buf) -> None:
        for piece, start, _ in self.take(len(self.text)):
            other.push(piece, start)


def find_marker(hay: str, patterns: list[str]) -> tuple[str, int, int]:
    """("found", at, index) for the earliest pattern (longest on a tie), ("partial", at, -1) for the
    earliest suffix that is a proper prefix of a pattern, or ("none", -1, -1)."""
    best = None
    for index, pat in enumerate(patterns):
        if not pat:
            continue
        at = hay.find(pat)
        if at >= 0 and (best is None or at < best[0] or (at == best[0] and len(pat) > len(patterns[best[1]]))):
            best = (at, index)
    if best is not None:
        return "found", best[0], best[1]
    for at in range(max(0, len(hay) - max((len(p) for p in patterns), default=0) + 1), len(hay)):
        tail = hay[at:]
        if any(len(p) > len(tail) and p.startswith(tail) for p in patterns):
            return "partial", at, -1
    return "none", -1, -1


@dataclass
class Markers:
    """The request's markers: text -> sentinel (token markers) and sentinel -> visible text."""

    sentinel_of_id: dict[int, str] = field(default_factory=dict)
    pattern_of_text: dict[str, str] = field(default_factory=dict)
    visible_of_sentinel: dict[str, str] = field(default_factory=dict)

    def add(self, text: str, token: tuple[int, str] | None) -> None:
        if text in self.pattern_of_text:
            return
        if token is not None and len(self.sentinel_of_id) < 32:
            token_id, visible = token
            sentinel = chr(SENTINEL_BASE + len(self.sentinel_of_id))
            self.sentinel_of_id[token_id] = sentinel
            self.visible_of_sentinel[sentinel] = visible
            self.pattern_of_text[text] = sentinel
        else:
            self.pattern_of_text[text] = text

    def pattern(self, text: str) -> str:
        return self.pattern_of_text.get(text, text)

    def render(self, s: str) -> str:
        if not self.visible_of_sentinel:
            return s
        return "".join(self.visible_of_sentinel.get(ch, ch) for ch in s)


class Out:
    """What stages write to; one per request, emptied every step."""

    def __init__(self, markers: Markers, mistral_ids: bool, seed: int = 0) -> None:
        self.markers = markers
        self.content = ""
        self.reasoning = ""
        self.calls: list[dict] = []
        self.spans: list[tuple[int, int, str]] = []
        self.visible = Buf()
        self.call_count = 0
        self._mistral_ids = mistral_ids

    def route(self, buf: Buf, n: int, channel: str) -> None:
        for text, start, end in buf.take(n):
            if channel == CONTENT:
                self.content += self.markers.render(text)
            elif channel == REASONING:
                self.reasoning += self.markers.render(text)
            elif channel == VISIBLE:
                self.visible.push(text, start)
            if channel != VISIBLE:
                self.spans.append((start, end, channel))

    def route_all(self, buf: Buf, channel: str) -> None:
        self.route(buf, len(buf), channel)

    def route_until(self, buf: Buf, patterns: list[str], channel: str, end: bool) -> int | None:
        """Routes `buf` to `channel` up to the earliest of `patterns`: the index of the pattern the
        buffer now starts with, or None when all it could was routed (the rest may still turn into
        a pattern, or `end` flushed it too) and the stage waits for more input."""
        kind, at, index = find_marker(buf.text, patterns)
        if kind == "found":
            self.route(buf, at, channel)
            return index
        if kind == "partial" and not end:
            self.route(buf, at, channel)
        else:
            self.route_all(buf, channel)
        return None

    def start_call(self, name: str, call_id: str | None = None) -> int:
        index = self.call_count
        self.call_count += 1
        self.calls.append({"index": index, "id": call_id or self._new_id(), "name": name, "arguments": ""})
        return index

    def add_call(self, name: str, arguments: str, call_id: str | None = None) -> None:
        """A whole call at once (the reference reads each call complete): its name and arguments."""
        self.call_args(self.start_call(name, call_id), arguments)

    def call_args(self, index: int, fragment: str) -> None:
        if not fragment:
            return
        if self.calls and self.calls[-1]["index"] == index:
            self.calls[-1]["arguments"] += fragment
        else:
            self.calls.append({"index": index, "id": "", "name": "", "arguments": fragment})

    def _new_id(self) -> str:
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
        n = 9 if self._mistral_ids else 24
        raw = os.urandom(n)
        body = "".join(alphabet[b % len(alphabet)] for b in raw)
        return body if self._mistral_ids else "call_" + body


class Stage:
    """One stage of the pipeline (the native `Stage` trait): reads its buffer as far as it can
    decide, routes what it read and leaves the undecided rest in the buffer."""

    def feed(self, buf: Buf, out: Out, end: bool) -> None:
        raise NotImplementedError

    def primed(self, flag: bool | None) -> None:
        """Called once after the prompt primed the stage, with the request's thinking flag."""

    def held(self) -> int:
        """Bytes held inside the stage beyond its buffer: none, reference stages keep text there."""
        return 0


class Ledger:
    """First-byte ownership: counts tokens whose first byte went to reasoning."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, int, bool]] = []  # (seq, offset, zero_width)
        self._starts: list[int] = []
        self._spans: list[tuple[int, int, str]] = []
        self.reasoning = 0

    def add_anchors(self, anchors: list[tuple[int, int, bool]]) -> None:
        self._pending.extend(sorted(anchors, key=lambda a: a[1]))

    def add_spans(self, spans: list[tuple[int, int, str]]) -> None:
        for span in spans:
            if span[1] > span[0]:
                i = bisect.bisect(self._starts, span[0])
                self._starts.insert(i, span[0])
                self._spans.insert(i, span)

    def _channel_at(self, offset: int) -> str | None:
        i = bisect.bisect(self._starts, offset) - 1
        if i >= 0 and self._spans[i][0] <= offset < self._spans[i][1]:
            return self._spans[i][2]
        return None

    def resolve(self, everything: bool) -> None:
        done = 0
        for _seq, offset, zero in self._pending:
            if zero and offset > 0:
                channel = self._channel_at(offset - 1)
                if channel is None and everything:
                    channel = self._channel_at(offset)
            else:
                channel = self._channel_at(offset)
            if channel is None and not everything:
                break
            if channel == REASONING:
                self.reasoning += 1
            done += 1
        del self._pending[:done]


class StopFilter:
    """Stop strings with hold-back; the earliest-starting match wins once no earlier one can."""

    def __init__(self, stops: list[str], include: bool) -> None:
        self.stops = [s for s in stops if s]
        self.include = include
        self.held = ""
        self.base = 0

    def held_bytes(self) -> int:
        return len(self.held.encode())

    def feed(self, text: str, base: int, end: bool, emit) -> int | None:  # noqa: ANN001 - callable
        if not self.stops:
            emit(text, base)
            return None
        if not self.held:
            self.base = base
        self.held += text
        matches = [(self.held.find(s), len(s), i) for i, s in enumerate(self.stops) if s in self.held]
        first = min(matches) if matches else None
        limit = first[0] if first else len(self.held)
        partial = None
        if not end:
            longest = max(len(s) for s in self.stops)
            for at in range(max(0, len(self.held) - longest + 1), limit):
                tail = self.held[at:]
                if any(len(s) > len(tail) and s.startswith(tail) for s in self.stops):
                    partial = at
                    break
        if first is not None and partial is None:
            at, length, index = first
            emit(self.held[: at + length if self.include else at], self.base)
            self.held = ""
            return index
        cut = partial if partial is not None else len(self.held)
        if cut:
            emit(self.held[:cut], self.base)
            self.base += len(self.held[:cut].encode())
            self.held = self.held[cut:]
        return None
