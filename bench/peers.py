"""Peers to compare against in the same run. `vllm-rs` is vLLM's own Rust render server (from the
vLLM PyPI wheel), started by ../shared/peers/vllm-rs.sh on the Qwen3 model; it is the fastest peer
measured here. When it cannot start (no network for the wheel, no shared folder) the benchmark says
so instead of failing.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Iterator

_SCRIPT = Path(__file__).resolve().parent.parent.parent / "shared" / "peers" / "vllm-rs.sh"


class VllmRs:
    """A running `vllm-rs render` server and a keep-alive HTTP client for it."""

    def __init__(self, pid: int, port: int, model: str) -> None:
        self.pid, self.port, self.model = pid, port, model
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def _post(self, path: str, body: dict) -> object:
        self._conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = self._conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"vllm-rs {path}: HTTP {response.status}: {data[:200]!r}")
        return json.loads(data)

    def tokenize(self, text: str) -> list[int]:
        """Token ids of a completion prompt (no chat template)."""
        result = self._post("/v1/completions/render", {"model": self.model, "prompt": text, "max_tokens": 1})
        return result[0]["token_ids"]

    def render_chat(self, body: dict) -> list[int]:
        """Token ids of an OpenAI chat request rendered with the model's template."""
        result = self._post("/v1/chat/completions/render", {"model": self.model, **body})
        item = result[0] if isinstance(result, list) else result
        return item["token_ids"]

    @classmethod
    @contextlib.contextmanager
    def start_or_none(cls, port: int = 18200) -> Iterator[VllmRs | None]:
        if not _SCRIPT.is_file() or os.environ.get("SIDECAR_BENCH_NO_PEERS"):
            yield None
            return
        try:
            out = subprocess.run(["bash", str(_SCRIPT), str(port)], check=True, capture_output=True, text=True, timeout=900)
        except (subprocess.SubprocessError, OSError):
            yield None
            return
        pid, bound = (int(x) for x in out.stdout.split())
        cache = Path(os.environ.get("VLLM_RS_CACHE", Path.home() / ".cache" / "sidecar-peers"))
        peer = cls(pid, bound, str(cache / "qwen3-model"))
        try:
            yield peer
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
