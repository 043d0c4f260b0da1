"""Render: chat template + tokenization in one call. Not built yet: answers UNIMPLEMENTED."""

from __future__ import annotations

import grpc

from sidecar.errors import Unimplemented
from sidecar.rpc import Call
from sidecar.runtime import Runtime
from sidecar.v1 import preprocessor_pb2 as pb


class RenderServicer:
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def Render(self, request: pb.RenderRequest, context: grpc.aio.ServicerContext, call: Call) -> pb.RenderResponse:
        self._runtime.registry.get(request.model)
        raise Unimplemented("Render is not built yet in this server; use Tokenize on text you rendered")
