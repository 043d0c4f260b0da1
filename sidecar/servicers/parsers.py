"""ListParsers: every parser name OpenRequest knows, from the parser registry (`sidecar.parsers`)."""

from __future__ import annotations

import grpc

from sidecar import parsers
from sidecar.rpc import Call
from sidecar.runtime import Runtime
from sidecar.v1 import preprocessor_pb2 as pb


def parser_info(row: parsers.Parser) -> pb.ParserInfo:
    return pb.ParserInfo(
        name=row.name,
        kind=row.kind,
        implemented=row.implemented,
        aliases=[pb.ParserAlias(name=a, engine=row.alias_engine(a)) for a in row.aliases],
        markers=list(row.markers),
        id_style=row.id_style or "",
        shadowed=list(row.shadowed),
        about=row.about,
    )


def list_parsers_response() -> pb.ListParsersResponse:
    """The same for every server of this build (the table is part of the code), built once."""
    return pb.ListParsersResponse(parsers=[parser_info(p) for p in parsers.parsers()], engines=parsers.engines())


class ParsersServicer:
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._response = list_parsers_response()

    async def ListParsers(
        self, request: pb.ListParsersRequest, context: grpc.aio.ServicerContext, call: Call
    ) -> pb.ListParsersResponse:
        return self._response
