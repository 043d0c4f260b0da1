"""Admin: operator actions (`--enable-admin`). ReloadModels runs the same reload as SIGHUP."""

from __future__ import annotations

from typing import Callable

import grpc

from sidecar.reload import FAILED, RELOADED, SKIPPED, UNCHANGED, Reloader, ReloadResult
from sidecar.rpc import Call
from sidecar.v1 import admin_pb2 as admin

_OUTCOMES = {
    UNCHANGED: admin.ModelReload.OUTCOME_UNCHANGED,
    RELOADED: admin.ModelReload.OUTCOME_RELOADED,
    FAILED: admin.ModelReload.OUTCOME_FAILED,
    SKIPPED: admin.ModelReload.OUTCOME_SKIPPED,
}


def reload_proto(result: ReloadResult) -> admin.ModelReload:
    return admin.ModelReload(
        model=result.model, outcome=_OUTCOMES[result.outcome], previous_fingerprint=result.previous_fingerprint,
        fingerprint=result.fingerprint, error=result.error, seconds=result.seconds,
    )


class AdminServicer:
    def __init__(self, reloader: Reloader, reload_siblings: Callable[[], None] | None = None) -> None:
        """`reload_siblings`: in a process of `--processes N`, asks every process for the SIGHUP
        reload (the answer is this process's; the others reload their changed files alike)."""
        self._reloader = reloader
        self._reload_siblings = reload_siblings

    async def ReloadModels(
        self, request: admin.ReloadModelsRequest, context: grpc.aio.ServicerContext, call: Call
    ) -> admin.ReloadModelsResponse:
        results = await self._reloader.reload(list(request.models), request.force)
        if self._reload_siblings is not None and any(r.outcome == RELOADED for r in results):
            self._reload_siblings()
        return admin.ReloadModelsResponse(models=[reload_proto(r) for r in results])
