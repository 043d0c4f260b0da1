"""The wire conventions of KV-event fan-out over NATS JetStream, shared by the relay (the publisher,
`router_adapter.relay`) and the replicas' feed (the consumer, `router_adapter.nats_feed`).

One stream (`SIDECAR_KV` by default) holds the subjects `<prefix>.<model>.<worker>`; model and worker
names are percent-encoded into subject tokens (anything but ASCII letters, digits and `-`), the empty
model name is `_`. Each message carries headers:

- `Sidecar-Kind`: `batch` (the payload is the engine's msgpack batch, byte for byte) or `reset`
  (empty payload: every replica drops what the worker holds; `Sidecar-Reason` says why: `restart`,
  `gap` (lost batches the engine could no longer replay) or `silent`);
- `Sidecar-Epoch`: the relay's name for one unbroken run of the engine's sequence numbers. A reset
  starts a new epoch (a larger number: milliseconds since 1970, or the previous epoch plus one);
- `Sidecar-Seq`: the engine's 8-byte sequence number of a batch; on a reset, that of the last batch
  the relay handled before it (absent when there was none), where a restarted relay resumes;
- `Sidecar-Digest`: on a relay's reset after a batch, that batch's `payload_digest`
  (`router_adapter.subscriber`), with which a restarted relay tells the engine that published it
  from one that restarted since (a batch carries its payload itself);
- `Sidecar-Engine-Clock`: on a relay's batch or reset, the relay's clock when it took the message
  from the engine (seconds). It advances only while the relay waits for the engine, not while a
  publish waits for NATS, so the difference between two consecutive messages of a worker is how
  long the engine was silent in between, whatever the NATS outages; its value is no wall-clock time;
- `Nats-Msg-Id`: `<worker>.<epoch>.<seq>` for a batch and `<worker>.<epoch>.reset` for a reset, so a
  batch published twice (a relay that retries or restarts) is stored once by JetStream within its
  duplicate window, and a replica skips it anyway (a batch of the current epoch at or below the last
  applied sequence number).

A replica applies, per worker, in stream order: a reset drops the worker and adopts its epoch; a
batch of another epoch than the worker's drops the worker first (its reset was lost or never sent:
a relay starting with no history); a batch whose sequence number skips ahead within an epoch drops
the worker (counted as a gap) and is applied. These are the ZMQ subscriber's semantics moved to the
relay: see docs/kv_fanout.md.
"""

from __future__ import annotations

import asyncio
import json
import math
import string
import time
from typing import Any

DEFAULT_PREFIX = "sidecar.kv"
DEFAULT_STREAM = "SIDECAR_KV"
DEFAULT_SNAPSHOT_BUCKET = "SIDECAR_KV_SNAPSHOTS"
#: Seconds the stream keeps messages (`--kv-nats-retention`): well above the snapshot period, so a
#: starting replica finds every message after the newest snapshot.
DEFAULT_RETENTION_S = 3600.0
#: Seconds between snapshots of each model's index (`--kv-nats-snapshot-period`).
DEFAULT_SNAPSHOT_PERIOD_S = 60.0

KIND = "Sidecar-Kind"
REASON = "Sidecar-Reason"
EPOCH = "Sidecar-Epoch"
SEQ = "Sidecar-Seq"
MSG_ID = "Nats-Msg-Id"
#: Of a relay's reset: the digest of the payload of batch `SEQ` (see `reset_headers`).
DIGEST = "Sidecar-Digest"
#: Of a reset a replica publishes for a silent worker: applied only while the worker's last batch
#: is still this one (a batch stored before the reset makes it moot, on every replica alike).
IF_LAST = "Sidecar-If-Last"
#: Of a relay's message: its engine clock (see `engine_clock`).
ENGINE_CLOCK = "Sidecar-Engine-Clock"

BATCH = "batch"
RESET = "reset"

_SAFE = frozenset(string.ascii_letters + string.digits + "-")


def subject_token(name: str) -> str:
    """`name` as one subject token (no `.`, `*`, `>` or whitespace; reversible)."""
    if not name:
        return "_"
    return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in name)


def subject(prefix: str, model: str, worker: str) -> str:
    return f"{prefix}.{subject_token(model)}.{subject_token(worker)}"


def model_filter(prefix: str, model: str) -> str:
    """The subjects of every worker of `model`."""
    return f"{prefix}.{subject_token(model)}.*"


def batch_headers(worker: str, epoch: int, seq: int) -> dict[str, str]:
    return {KIND: BATCH, EPOCH: str(epoch), SEQ: str(seq), MSG_ID: f"{subject_token(worker)}.{epoch}.{seq}"}


def engine_clock(headers: dict[str, str]) -> float | None:
    """A message's `ENGINE_CLOCK`; None without one (an older relay's message, a replica's reset)
    or with one that is not a finite number (then judged as without)."""
    try:
        clock = float(headers[ENGINE_CLOCK])
    except (KeyError, ValueError):
        return None
    return clock if math.isfinite(clock) else None


def reset_headers(worker: str, epoch: int, reason: str, seq: int | None = None,
                  digest: str | None = None) -> dict[str, str]:
    """`seq`: the engine sequence number of the last batch the relay had handled, which a relay
    restarting after the reset resumes from (None: none yet); `digest`: that batch's payload
    digest, by which the restarted relay checks that the engine is still the one that published
    it."""
    headers = {KIND: RESET, EPOCH: str(epoch), REASON: reason, MSG_ID: f"{subject_token(worker)}.{epoch}.reset"}
    if seq is not None:
        headers[SEQ] = str(seq)
        if digest is not None:
            headers[DIGEST] = digest
    return headers


def silent_reset_headers(worker: str, epoch: int, last_seq: int) -> dict[str, str]:
    """A replica's reset of a worker silent since batch `last_seq` of `epoch`: one message however
    many replicas publish it (the same id), carrying the batch as a relay's reset does (`SEQ`)."""
    return {KIND: RESET, EPOCH: str(epoch), REASON: "silent", SEQ: str(last_seq), IF_LAST: str(last_seq),
            MSG_ID: f"{subject_token(worker)}.{epoch}.silent.{last_seq}"}


async def connect_until_stopped(url: str, stop: asyncio.Event, name: str, **callbacks: Any) -> Any:
    """A NATS connection that reconnects on its own once made; the first connection is retried
    (NATS may come up after us) until `stop` is set, which returns None at once. (The client alone
    would retry a first connection forever, deaf to a stop.) `callbacks`: `disconnected_cb`,
    `reconnected_cb`, called after the connection's state is logged (`nats_status`): one line per
    change of state and per new error, never one per attempt."""
    import nats

    from router_adapter.nats_status import ConnectionStatus

    status = ConnectionStatus(name, url)
    client_callbacks = status.callbacks(**callbacks)
    while True:
        # With unlimited reconnects the client's first connect never raises for an unreachable
        # server: it retries every `reconnect_time_wait`, handing each failure to `error_cb`.
        connecting = asyncio.create_task(nats.connect(
            url, max_reconnect_attempts=-1, reconnect_time_wait=0.5, name=name, **client_callbacks,
        ))
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({connecting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not connecting.done():
            await cancel_until_done(connecting)
            if not connecting.cancelled() and connecting.exception() is None:
                await connecting.result().close()  # made meanwhile
            return None
        try:
            nc = connecting.result()
        except Exception as e:  # noqa: BLE001 - not reachable yet (an error the client does not retry): again until stopped
            status.error(e)
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
                return None
            except asyncio.TimeoutError:
                continue
        status.connected(nc)
        return nc


async def cancel_until_done(*tasks: asyncio.Task) -> None:
    """Cancels `tasks` and waits for them to end, cancelling again any that goes on. One cancel is
    not always enough: one that comes as an inner `asyncio.wait_for` finishes is lost (Python 3.11
    returns the inner call's result or error instead; the NATS client, given a failed connection
    attempt, tries again). Their errors are retrieved (not logged as never retrieved)."""
    left = set(tasks)
    while left:
        for task in left:
            task.cancel()
        _, left = await asyncio.wait(left, timeout=0.05)
    for task in tasks:
        if not task.cancelled():
            task.exception()


def next_epoch(previous: int | None) -> int:
    """A new epoch: the wall clock in milliseconds, and always above the previous one."""
    now = int(time.time() * 1000)
    return now if previous is None else max(now, previous + 1)


def token_name(token: str) -> str:
    """The name `subject_token` encoded."""
    from urllib.parse import unquote

    return "" if token == "_" else unquote(token)


async def server_time(nc, stream: str, timeout_s: float) -> float | None:  # noqa: ANN001 - nats Client
    """The NATS server's clock now (seconds since 1970): the `ts` of a JetStream stream-info answer
    (nats-server 2.10 and later), or None (an older server, no answer). JetStream stamps stored
    messages with this clock; a time since a message was stored is measured on it, since the
    clock of the host asking can be off by any amount."""
    from datetime import datetime

    try:
        reply = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=timeout_s)
        stamp = json.loads(reply.data).get("ts")
        return datetime.fromisoformat(stamp).timestamp() if isinstance(stamp, str) else None
    except Exception:  # noqa: BLE001 - no answer, or not one with a time: the caller's fallback
        return None


async def ensure_stream(js, stream: str, prefix: str, retention_s: float) -> None:  # noqa: ANN001 - nats JetStreamContext
    """Creates the stream unless it exists (a stream made by someone else keeps its settings)."""
    from nats.js.api import StorageType, StreamConfig
    from nats.js.errors import NotFoundError

    try:
        await js.stream_info(stream)
    except NotFoundError:
        config = StreamConfig(
            name=stream, subjects=[f"{prefix}.>"], max_age=retention_s or None, storage=StorageType.FILE,
        )
        try:
            await js.add_stream(config)
        except Exception:  # noqa: BLE001 - created meanwhile by another process: check it is there
            await js.stream_info(stream)
