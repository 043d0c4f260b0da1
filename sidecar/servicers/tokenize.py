"""Tokenize: a batch of texts to token ids (and optional offsets, token strings)."""

from __future__ import annotations

import grpc

from sidecar.backend import EncodeOptions
from sidecar.errors import InvalidArgument, Unimplemented
from sidecar.rpc import Call
from sidecar.runtime import Runtime
from sidecar.v1 import preprocessor_pb2 as pb


class TokenizeServicer:
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def Tokenize(self, request: pb.TokenizeRequest, context: grpc.aio.ServicerContext, call: Call) -> pb.TokenizeResponse:
        model = self._runtime.registry.get(request.model)
        if request.truncation_side not in (pb.TRUNCATION_SIDE_UNSPECIFIED, pb.TRUNCATION_SIDE_RIGHT, pb.TRUNCATION_SIDE_LEFT):
            raise InvalidArgument(f"truncation_side: unknown value {request.truncation_side}")
        if request.HasField("block_hashing"):
            raise Unimplemented("block_hashing: block hashes are not built yet in this server")
        texts = list(request.texts)
        opts = EncodeOptions(
            add_special_tokens=request.add_special_tokens if request.HasField("add_special_tokens") else True,
            return_offsets=request.return_offsets,
            return_tokens=request.return_tokens,
            max_length=request.max_length,
            truncate_left=request.truncation_side == pb.TRUNCATION_SIDE_LEFT,
            timeout_s=call.timeout_s,
        )
        cost = sum(len(t) for t in texts)
        encodings = await self._runtime.offloader.run(lambda: model.tokenizer.encode_batch(texts, opts), cost, call.rpc)
        response = pb.TokenizeResponse(fingerprint=model.fingerprint)
        for e in encodings:
            out = response.encodings.add()
            out.token_ids.extend(e.ids)
            if e.offsets:
                out.offsets.extend(e.offsets)
            if e.tokens:
                out.tokens.extend(e.tokens)
            out.truncated = e.truncated
        return response
