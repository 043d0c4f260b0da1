"""Detokenize: a batch of id sequences back to text."""

from __future__ import annotations

import grpc

from sidecar.rpc import Call
from sidecar.runtime import Runtime
from sidecar.v1 import preprocessor_pb2 as pb

#: Rough bytes of text per token, to size the offload decision like Tokenize's.
_BYTES_PER_TOKEN = 4


class DetokenizeServicer:
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def Detokenize(
        self, request: pb.DetokenizeRequest, context: grpc.aio.ServicerContext, call: Call
    ) -> pb.DetokenizeResponse:
        model = self._runtime.registry.get(request.model)
        skip = request.skip_special_tokens if request.HasField("skip_special_tokens") else True
        seqs = [s.token_ids for s in request.sequences]
        cost = _BYTES_PER_TOKEN * sum(len(s) for s in seqs)
        texts = await self._runtime.offloader.run(
            lambda: model.tokenizer.decode_batch(seqs, skip, call.timeout_s), cost, call.rpc
        )
        return pb.DetokenizeResponse(texts=texts, fingerprint=model.fingerprint)
