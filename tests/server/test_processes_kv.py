"""KvRouter with `sidecar serve --processes 2 --kv-events ...`: each process subscribes to the
engines and keeps its own index, so both answer Score alike; a process killed and restarted by the
parent asks the engine's replay endpoint for the batches it missed, and answers like its sibling
again (without that it would know only the blocks published after it came back)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
import zmq

from router_adapter import _reference
from router_adapter.spec import HashSpec
from sidecar.v1 import kv_router_pb2 as kv
from sidecar.v1 import kv_router_pb2_grpc as kv_grpc
from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc
from tests.conftest import REPO
from tests.kv.publisher import FakeEnginePublisher, stored
from tests.server.test_processes import child_pid, log_events, wait_for, wait_restarted

pytestmark = pytest.mark.e2e

BLOCK_SIZE = 16
TEXT = "A router asks which worker already holds this prompt's prefix. " * 12
OTHER = "Filler published until the restarted process has subscribed. " * 4


def blocks(address: str, text: str) -> list[int]:
    with grpc.insecure_channel(address) as channel:
        response = kv_grpc.KvRouterStub(channel).Score(kv.ScoreRequest(model="qwen3", text=text), timeout=30)
    return [w.blocks for w in response.workers]


def published(address: str, text: str) -> dict:
    """The stored event of `text`'s full blocks (ids from the server's own tokenizer)."""
    with grpc.insecure_channel(address) as channel:
        request = pb.TokenizeRequest(model="qwen3", texts=[text])
        ids = list(pb_grpc.PreprocessorStub(channel).Tokenize(request, timeout=30).encodings[0].token_ids)
    n = len(ids) // BLOCK_SIZE
    return stored(_reference.block_hashes(ids, HashSpec("vllm_sha256", BLOCK_SIZE))[:n], ids[: n * BLOCK_SIZE],
                  BLOCK_SIZE), n


def test_each_process_indexes_the_events_and_a_restarted_one_catches_up(tmp_path: Path) -> None:
    ctx = zmq.Context()
    engine = FakeEnginePublisher(ctx)
    uds = tmp_path / "sidecar.sock"
    log_path = tmp_path / "server.log"
    source = f"worker-a={engine.endpoint},replay={engine.replay_endpoint},model=qwen3"
    with open(log_path, "w") as log:
        parent = subprocess.Popen([sys.executable, "-m", "sidecar", "serve", "--processes", "2", "--port", "-1",
                                   "--uds", str(uds), "--kv-events", source, "--kv-block-size", str(BLOCK_SIZE)],
                                  stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    sockets = [f"unix:{uds}.0", f"unix:{uds}.1"]
    try:
        wait_for(lambda: sum(e.get("event") == "kv_events_subscribed" for e in log_events(log_path)) == 2,
                 "not every process subscribed", log_path)
        event, n = published(sockets[0], TEXT)
        filler, _ = published(sockets[0], OTHER)
        # Until both subscriptions are through (ZMQ's slow joiner), a batch can be lost: publish
        # filler until each process has indexed one, then the text.
        _publish_until(engine, filler, lambda: all(blocks(s, OTHER) for s in sockets), log_path)
        engine.publish([event])
        wait_for(lambda: all(blocks(s, TEXT) == [n] for s in sockets), "a process missed the event", log_path)

        os.kill(child_pid(parent.pid, 1), signal.SIGKILL)
        wait_restarted(log_path, 1)
        # The first batch the restarted process receives shows it the gap: it replays from the start.
        _publish_until(engine, filler, lambda: blocks(sockets[1], OTHER) != [], log_path)
        wait_for(lambda: blocks(sockets[1], TEXT) == [n], "the restarted process did not catch up", log_path)
        assert blocks(sockets[0], TEXT) == blocks(sockets[1], TEXT) == [n]
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(60) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        engine.close()
        ctx.term()


def _publish_until(engine: FakeEnginePublisher, event: dict, done, log_path: Path) -> None:  # noqa: ANN001
    deadline = time.monotonic() + 60
    while True:
        engine.publish([event])
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            try:
                if done():
                    return
            except grpc.RpcError:
                pass  # the restarted process is not listening yet
            time.sleep(0.05)
        assert time.monotonic() < deadline, f"never indexed:\n{log_path.read_text()[-4000:]}"
