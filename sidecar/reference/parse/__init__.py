"""The reference ParseStream: the same per-step parse as the native core, in plain Python on the
PyPI `tokenizers` package, written separately from the same format descriptions. The differential
tests hold both to the same results on every case."""

from __future__ import annotations

import json
import re
from collections import OrderedDict

from google.protobuf.message import DecodeError

from sidecar.backend import ParseLimits
from sidecar.errors import FailedPrecondition, Internal, InvalidArgument, NotFound, ResourceExhausted, SidecarError
from sidecar.reference.parse.reasoning import THINK_FORMATS
from sidecar.reference.parse.session import RefDelta, RefModel, RefSession
from sidecar.reference.parse.tools import PARSERS
from sidecar.v1 import preprocessor_pb2 as pb

_BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")


class ReferenceParseModel:
    """A model's parse data for the reference backend."""

    decoder = "window"

    def __init__(self, tokenizer) -> None:  # noqa: ANN001 - ReferenceTokenizer
        tok = tokenizer._tok
        vocab = tok.get_vocab(with_added_tokens=True)
        special_texts = {t.content for t in tokenizer.added_tokens if t.special}
        decoder = json.loads(tok.to_str()).get("decoder") or {}
        steps = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
        byte_fallback = any(isinstance(s, dict) and s.get("type") == "ByteFallback" for s in steps)
        specials, byte_pieces = set(), set()
        for text, token_id in vocab.items():
            # `decode` checks what id_to_token returns, which prefers added tokens.
            shown = tok.id_to_token(token_id)
            if shown in special_texts:
                specials.add(token_id)
            if byte_fallback and _BYTE_PIECE.fullmatch(shown.replace("\u2581", " ")):
                byte_pieces.add(token_id)
        self.model = RefModel(
            tok=tok,
            vocab_size=tokenizer.vocab_size,
            known=frozenset(vocab.values()),
            specials=frozenset(specials),
            byte_pieces=frozenset(byte_pieces),
            added={t.content: t.id for t in tokenizer.added_tokens},
        )
        self.vocab_size = tokenizer.vocab_size
        self.tool_parsers = sorted([*PARSERS, "openai"])
        self.reasoning_parsers = sorted([*THINK_FORMATS, "openai"])


def _code(error: SidecarError) -> int:
    return error.code.value[0]


class ReferenceParseMux:
    """The open requests of one ParseStream (reference backend)."""

    def __init__(self, limits: ParseLimits) -> None:
        self._limits = limits
        self._sessions: dict[str, tuple[RefSession, str, list[bool]]] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, model: ReferenceParseModel, request_id: str, fingerprint: str, config: dict, prompt_ids) -> None:  # noqa: ANN001
        if not request_id:
            raise InvalidArgument("open.request_id: must not be empty")
        if request_id in self._sessions:
            raise InvalidArgument(f"open.request_id: {request_id!r} is already open on this stream")
        if len(self._sessions) >= self._limits.max_requests:
            raise ResourceExhausted(
                f"open: this stream already has {len(self._sessions)} open requests (the limit); finish or cancel some"
            )
        session = RefSession(model.model, config, list(prompt_ids))
        self._finished.pop(request_id, None)
        self._sessions[request_id] = (session, fingerprint, [False])

    def handle(self, message: bytes) -> bytes | None:
        try:
            request = pb.ParseStreamRequest.FromString(message)
        except DecodeError:
            raise InvalidArgument("malformed ParseStreamRequest") from None
        kind = request.WhichOneof("kind")
        if kind == "open":
            return None
        if kind == "cancel":
            if self._sessions.pop(request.cancel.request_id, None) is not None:
                self._remember(request.cancel.request_id)
            return b""
        if kind is None:
            raise InvalidArgument("ParseStreamRequest: none of open, step, cancel is set")
        response = pb.ParseStreamResponse()
        for item in request.step.items:
            delta = self._step_one(item.request_id, list(item.token_ids), item.finished)
            if delta is not None:
                response.deltas.append(delta)
        return response.SerializeToString()

    def _step_one(self, request_id: str, ids: list[int], finished: bool) -> pb.RequestDelta | None:
        entry = self._sessions.get(request_id)
        if entry is None:
            if request_id in self._finished:
                error: SidecarError = FailedPrecondition(f"step.items.request_id: request {request_id!r} already finished")
            else:
                error = NotFound(f"step.items.request_id: no open request {request_id!r} on this stream")
            return pb.RequestDelta(request_id=request_id, finished=True,
                                   error=pb.Status(code=_code(error), message=error.message))
        session, fingerprint, sent = entry
        first = "" if sent[0] else fingerprint
        try:
            delta: RefDelta = session.feed(ids, finished)
        except SidecarError as e:
            self._retire(request_id)
            return pb.RequestDelta(request_id=request_id, finished=True, fingerprint=first,
                                   error=pb.Status(code=_code(e), message=f"step.items: {e.message}"))
        except Exception as e:  # noqa: BLE001 - a bug fails its request only
            self._retire(request_id)
            err = Internal(f"step.items: reference parser failed: {type(e).__name__}: {e}")
            return pb.RequestDelta(request_id=request_id, finished=True, fingerprint=first,
                                   error=pb.Status(code=_code(err), message=err.message))
        if delta.finished:
            self._retire(request_id)
        if not (delta.finished or delta.content or delta.reasoning or delta.calls):
            return None
        sent[0] = True
        return pb.RequestDelta(
            request_id=request_id, content=delta.content, reasoning=delta.reasoning,
            tool_calls=[pb.ToolCallDelta(**c) for c in delta.calls],
            reasoning_tokens=delta.reasoning_tokens, completion_tokens=delta.completion_tokens,
            finished=delta.finished, finish_reason=delta.finish_reason, matched_stop=delta.matched_stop,
            fingerprint=first,
        )

    def _retire(self, request_id: str) -> None:
        self._sessions.pop(request_id, None)
        self._remember(request_id)

    def _remember(self, request_id: str) -> None:
        self._finished[request_id] = None
        while len(self._finished) > self._limits.remember_finished:
            self._finished.popitem(last=False)

    def trace(self, request_id: str) -> dict | None:
        return None

    def close(self) -> None:
        self._sessions.clear()
