"""A stand-in engine for tests: an XPUB socket publishing `[topic, seq, payload]` like vLLM's and
SGLang's ZmqEventPublisher, and a ROUTER replay socket answering from its buffer the way either
does (vLLM's and SGLang 0.5.23's answers carry the topic, older SGLang's do not)."""

from __future__ import annotations

import threading
import time

import msgspec
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class FakeEnginePublisher:
    def __init__(self, ctx: zmq.Context, *, replay: bool = True, topic: bytes = b"", send_hwm: int = 1000,
                 engine: str = "vllm") -> None:
        """`send_hwm`: messages queued per subscriber before ZMQ drops (0 = no limit); set before
        the bind, which fixes it for every connection the socket accepts. `engine`: whose replay
        answers to give ("vllm", as SGLang 0.5.23 also answers, or "sglang": older SGLang's)."""
        # The frames before seq in a replay answer: vLLM sends the topic there, older SGLang nothing.
        self._before_seq = [topic] if engine == "vllm" else []
        # XPUB behaves as PUB for the subscriber and lets the test wait for its subscription, so no
        # message is lost to ZMQ's slow-joiner window. Verbose, because a restarted subscriber may
        # subscribe before ZMQ has dropped the stopped one: the topic is then still held, and a
        # plain XPUB passes no message up (a test waiting for it timed out in CI).
        self._ctx, self._send_hwm = ctx, send_hwm
        self.pub = self._xpub()
        port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.topic = topic
        self.seq = 0
        self.buffer: list[tuple[int, bytes]] = []
        self.replay_requests: list[int] = []
        self.replay_endpoint: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if replay:
            self.router = ctx.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 0)
            rport = self.router.bind_to_random_port("tcp://127.0.0.1")
            self.replay_endpoint = f"tcp://127.0.0.1:{rport}"
            self._thread = threading.Thread(target=self._serve_replay, daemon=True)
            self._thread.start()

    def _xpub(self) -> zmq.Socket:
        pub = self._ctx.socket(zmq.XPUB)
        pub.setsockopt(zmq.XPUB_VERBOSE, 1)
        pub.setsockopt(zmq.LINGER, 0)
        pub.setsockopt(zmq.SNDHWM, self._send_hwm)
        return pub

    def rebind(self) -> None:
        """Closes the PUB socket (its subscribers lose their connection) and binds a new one to
        the same endpoint, as an engine that went away and came back there does."""
        self.pub.close(0)
        self.pub = self._xpub()
        deadline = time.monotonic() + 10
        while True:
            try:
                self.pub.bind(self.endpoint)
                return
            except zmq.ZMQError:  # the closed socket's I/O thread has not let the port go yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def wait_for_subscriber(self, timeout: float = 10.0) -> None:
        if not self.pub.poll(int(timeout * 1000)):
            raise TimeoutError("no subscriber connected")
        self.pub.recv()

    def publish(self, events: list, *, drop: bool = False, seq: int | None = None) -> int:
        """Publishes a batch (vLLM's EventBatch shape); `drop` loses it on the wire but keeps it for replay."""
        if seq is not None:
            self.seq = seq
        seq = self.seq
        self.seq += 1
        payload = msgspec.msgpack.encode([time.time(), events, 0])
        self.buffer.append((seq, payload))
        if not drop:
            self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        return seq

    def _serve_replay(self) -> None:
        while not self._stop.is_set():
            if not self.router.poll(50):
                continue
            client, _, start = self.router.recv_multipart()
            start_seq = int.from_bytes(start, "big")
            self.replay_requests.append(start_seq)
            for seq, payload in list(self.buffer):
                if seq >= start_seq:
                    self.router.send_multipart([client, b"", *self._before_seq, seq.to_bytes(8, "big"), payload])
            end_before_seq = [b""] if self._before_seq else []  # vLLM's end marker has an empty topic
            self.router.send_multipart([client, b"", *end_before_seq, END_SEQ, b""])

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self.router.close(0)
        self.pub.close(0)


def stored(hashes: list[int], tokens: list[int], block_size: int, parent: int | None = None, **extra: object) -> dict:
    """A vLLM >= 0.24 BlockStored map."""
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
            "block_size": block_size, "lora_id": None, "medium": "GPU", "lora_name": None, **extra}


def removed(hashes: list[int], medium: str = "GPU") -> dict:
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium}


CLEARED = {"type": "AllBlocksCleared"}


def wait_until(predicate, timeout: float = 15.0, what: str = "condition") -> None:  # noqa: ANN001
    """Polls `predicate` until true; fails after `timeout` seconds (a bound, not an assertion on time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")
