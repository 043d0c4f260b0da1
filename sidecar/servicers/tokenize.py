"""Tokenize: a batch of texts to token ids (and optional offsets, token strings)."""

from __future__ import annotations

import grpc

from sidecar.backend import EncodeOptions
from sidecar.errors import InvalidArgument, ResourceExhausted
from sidecar.hashing import spec_from_proto, spec_to_proto
from sidecar.rpc import Call
from sidecar.runtime import Runtime, request_cost
from sidecar.servicers.native_table import NativeTable, run_decoded, run_unary
from sidecar.v1 import preprocessor_pb2 as pb

_TOKENIZE = 1  # sidecar.native.multiplex.UNARY_TOKENIZE (not importable without the native library)


def check_text_lengths(texts, limit: int, field: str = "texts") -> None:  # noqa: ANN001 - a repeated str field
    """Refuses a text of more than `limit` characters, naming it and the flag."""
    for i, text in enumerate(texts):
        if len(text) > limit:
            raise ResourceExhausted(
                f"{field}[{i}]: {len(text)} characters is more than the server's limit of {limit} (--max-text-chars)"
            )


class TokenizeServicer:
    def __init__(self, runtime: Runtime, native: NativeTable | None = None) -> None:
        self._runtime = runtime
        self._native = native or NativeTable(runtime)

    async def TokenizeRaw(self, body: bytes, context: grpc.aio.ServicerContext, call: Call) -> bytes:
        """The RPC from its raw body to the response's wire bytes: in the native core when the
        backend is native (see `sidecar.servicers.native_table`), else through `Tokenize`."""
        table = self._native.get()
        if table is None:
            return await run_decoded(self._runtime, self.Tokenize, pb.TokenizeRequest, body, context, call)
        return (await run_unary(self._runtime, table, _TOKENIZE, body, call)).response

    async def Tokenize(self, request: pb.TokenizeRequest, context: grpc.aio.ServicerContext, call: Call) -> bytes:
        """The Python path (see `run_decoded`): the response's wire bytes."""
        model = self._runtime.registry.get(request.model)
        if request.truncation_side not in (pb.TRUNCATION_SIDE_UNSPECIFIED, pb.TRUNCATION_SIDE_RIGHT, pb.TRUNCATION_SIDE_LEFT):
            raise InvalidArgument(f"truncation_side: unknown value {request.truncation_side}")
        hash_request = request.block_hashing if request.HasField("block_hashing") else None
        # Validate the spec before tokenizing, so a bad spec costs nothing.
        hash_spec = spec_from_proto(hash_request) if hash_request is not None else None
        config = self._runtime.config
        opts = EncodeOptions(
            add_special_tokens=request.add_special_tokens if request.HasField("add_special_tokens") else True,
            return_offsets=request.return_offsets,
            return_tokens=request.return_tokens,
            max_length=request.max_length,
            truncate_left=request.truncation_side == pb.TRUNCATION_SIDE_LEFT,
            timeout_s=call.timeout_s,
            max_word_chars=config.max_word_chars,
        )
        hasher = self._runtime.hasher

        def work() -> bytes:
            # Everything that reads the texts or the ids, the response included, runs here: on a
            # worker when the request is large.
            check_text_lengths(request.texts, config.max_text_chars)
            encodings = model.tokenizer.encode_batch(list(request.texts), opts)
            response = pb.TokenizeResponse(fingerprint=model.fingerprint)
            if hash_spec is not None:
                response.block_hash_spec.CopyFrom(spec_to_proto(hash_spec))
            for e in encodings:
                out = response.encodings.add()
                out.token_ids.extend(e.ids)
                if hash_spec is not None:
                    out.block_hashes.extend(hasher.block_hashes(e.ids, hash_spec))
                if e.offsets:
                    out.offsets.extend(e.offsets)
                if e.tokens:
                    out.tokens.extend(e.tokens)
                out.truncated = e.truncated
            return response.SerializeToString()

        cost = request_cost(call.body_bytes or request.ByteSize(), items=len(request.texts))
        return await self._runtime.offloader.run(work, cost, call.rpc)
