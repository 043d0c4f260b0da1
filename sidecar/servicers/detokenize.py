"""Detokenize: a batch of id sequences back to text."""

from __future__ import annotations

import grpc

from sidecar.errors import ResourceExhausted
from sidecar.rpc import Call
from sidecar.runtime import Runtime, request_cost
from sidecar.servicers.native_table import NativeTable, run_decoded, run_unary
from sidecar.v1 import preprocessor_pb2 as pb

_DETOKENIZE = 2  # sidecar.native.multiplex.UNARY_DETOKENIZE (not importable without the native library)


def check_token_ids(count: int, limit: int, field: str) -> None:
    """Refuses more than `limit` token ids in one request, naming the field and the flag."""
    if count > limit:
        raise ResourceExhausted(
            f"{field}: {count} token ids is more than the server's limit of {limit} per request (--max-token-ids)"
        )


class DetokenizeServicer:
    def __init__(self, runtime: Runtime, native: NativeTable | None = None) -> None:
        self._runtime = runtime
        self._native = native or NativeTable(runtime)

    async def DetokenizeRaw(self, body: bytes, context: grpc.aio.ServicerContext, call: Call) -> bytes:
        """The RPC from its raw body to the response's wire bytes: in the native core when the
        backend is native (see `sidecar.servicers.native_table`), else through `Detokenize`."""
        table = self._native.get()
        if table is None:
            return await run_decoded(self._runtime, self.Detokenize, pb.DetokenizeRequest, body, context, call)
        return (await run_unary(self._runtime, table, _DETOKENIZE, body, call)).response

    async def Detokenize(self, request: pb.DetokenizeRequest, context: grpc.aio.ServicerContext, call: Call) -> bytes:
        """The Python path (see `run_decoded`): the response's wire bytes."""
        model = self._runtime.registry.get(request.model)
        skip = request.skip_special_tokens if request.HasField("skip_special_tokens") else True
        limit = self._runtime.config.max_token_ids

        def work() -> bytes:
            seqs = [s.token_ids for s in request.sequences]
            check_token_ids(sum(len(s) for s in seqs), limit, "sequences")
            texts = model.tokenizer.decode_batch(seqs, skip, call.timeout_s)
            return pb.DetokenizeResponse(texts=texts, fingerprint=model.fingerprint).SerializeToString()

        cost = request_cost(call.body_bytes or request.ByteSize(), items=len(request.sequences))
        return await self._runtime.offloader.run(work, cost, call.rpc)
