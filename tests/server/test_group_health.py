"""Health of one of `--processes N` servers is answered for the group, by `Check` and by `Watch`
(what gRPC's client-side health checking uses): a sibling that is down makes it NOT_SERVING, and
`sidecar.process` answers for the process alone."""

from __future__ import annotations

import asyncio

from grpc_health.v1 import health_pb2

from sidecar import server
from sidecar.server import PROCESS_HEALTH_NAME, GroupHealthServicer

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


class FakeGroup:
    """The one question the servicer asks the shared state."""

    def __init__(self) -> None:
        self.serving = True

    def all_serving(self) -> bool:
        return self.serving


class Writes:
    """A stream context that keeps what is written."""

    def __init__(self) -> None:
        self.statuses: list[int] = []

    async def write(self, response: health_pb2.HealthCheckResponse) -> None:
        self.statuses.append(response.status)


async def _watch(service: str, group: FakeGroup) -> list[int]:
    servicer = GroupHealthServicer(group)  # type: ignore[arg-type]
    await servicer.set(PROCESS_HEALTH_NAME, SERVING)
    context = Writes()
    task = asyncio.ensure_future(servicer.Watch(health_pb2.HealthCheckRequest(service=service), context))
    await asyncio.sleep(server.GROUP_WATCH_SECONDS / 2)
    group.serving = False  # a sibling died
    await asyncio.sleep(server.GROUP_WATCH_SECONDS * 2)
    group.serving = True  # restarted
    await asyncio.sleep(server.GROUP_WATCH_SECONDS * 2)
    task.cancel()
    return context.statuses


def test_watch_follows_the_group() -> None:
    assert asyncio.run(_watch("", FakeGroup())) == [SERVING, NOT_SERVING, SERVING]


def test_watch_of_the_process_alone_ignores_its_siblings() -> None:
    assert asyncio.run(_watch(PROCESS_HEALTH_NAME, FakeGroup())) == [SERVING]


def test_watch_of_an_unknown_service_says_so() -> None:
    assert asyncio.run(_watch("nope", FakeGroup())) == [health_pb2.HealthCheckResponse.SERVICE_UNKNOWN]
