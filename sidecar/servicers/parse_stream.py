"""ParseStream: per-decode-step detokenization and parsing. Not built yet: answers UNIMPLEMENTED."""

from __future__ import annotations

from typing import AsyncIterator

import grpc

from sidecar import metrics
from sidecar.runtime import Runtime
from sidecar.v1 import preprocessor_pb2 as pb


class ParseStreamServicer:
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def ParseStream(
        self, requests: AsyncIterator[pb.ParseStreamRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ParseStreamResponse]:
        metrics.REQUESTS.labels("ParseStream", "UNIMPLEMENTED").inc()
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "ParseStream is not built yet in this server")
        yield pb.ParseStreamResponse()  # pragma: no cover - unreachable, makes this an async generator
