"""Shared fixtures: where the real models live, a cache of loaded tokenizers, a live server.

Tests that need `../shared/models` skip with a clear reason on a fresh clone without it, and fail
when `CI=true` (CI must have the data). Set SIDECAR_SHARED_MODELS to use another location.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_MODELS = Path(os.environ.get("SIDECAR_SHARED_MODELS", REPO.parent / "shared" / "models"))
IN_CI = os.environ.get("CI", "").lower() == "true"

#: Model folders of ../shared/models that have a tokenizer.
TOKENIZER_MODELS = [
    "qwen3", "qwen2.5", "llama3", "deepseek-v3", "gpt-oss", "mistral-nemo", "mistral-v3-spm", "gemma3", "phi3", "gpt2",
]


def require_shared_models() -> Path:
    """The shared models folder, or skip (fail under CI) when it is absent."""
    if (SHARED_MODELS / "SOURCES.md").is_file():
        return SHARED_MODELS
    message = f"real models not found at {SHARED_MODELS} (set SIDECAR_SHARED_MODELS); see README 'Test data'"
    if IN_CI:
        pytest.fail(f"CI=true but {message}")
    pytest.skip(message)


def require_native_testing_exports() -> None:
    """Skip (fail under CI) unless the loaded native library is the test build, which has the test-
    and benchmark-only exports (`make native-testing`; `make test` builds it)."""
    from sidecar.native._ffi import has_testing_exports

    if has_testing_exports():
        return
    message = "the loaded native library is the user build, without the test exports (build `make native-testing`)"
    if IN_CI:
        pytest.fail(f"CI=true but {message}")
    pytest.skip(message)


@pytest.fixture(scope="session")
def shared_models() -> Path:
    return require_shared_models()


_TOKENIZERS: dict[tuple[str, str], object] = {}
#: Models made from a shared one by `derived_model`: name -> folder.
_DERIVED: dict[str, Path] = {}


def model_dir(model: str) -> Path:
    """The folder of a shared model, or of a model `derived_model` made."""
    return _DERIVED.get(model) or require_shared_models() / model


def derived_model(base: str, special_tokens: list[str], response_template: dict | None = None) -> str:
    """A shared model's tokenizer with `special_tokens` added as special tokens, for vocabularies no
    shared model has (Hunyuan's per-checkpoint suffixed tags): written once per session to a
    temporary folder with the base's tokenizer_config.json, plus `response_template` in it when
    given (what vLLM's `hf`/`beam` parsers read). Returns its model name."""
    import hashlib

    key = "\n".join(special_tokens) + json.dumps(response_template, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    model = f"{base}+{digest}"
    if model not in _DERIVED:
        import shutil
        import tempfile

        import tokenizers

        src = require_shared_models() / base
        tok = tokenizers.Tokenizer.from_file(str(src / "tokenizer.json"))
        tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t in special_tokens])
        folder = Path(tempfile.mkdtemp(prefix=f"sidecar-{base}-{digest}-"))
        tok.save(str(folder / "tokenizer.json"))
        if (src / "tokenizer_config.json").is_file():
            shutil.copy(src / "tokenizer_config.json", folder / "tokenizer_config.json")
        if response_template is not None:
            path = folder / "tokenizer_config.json"
            config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
            config["response_template"] = response_template
            path.write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
        _DERIVED[model] = folder
    return model


def load_tokenizer(backend: str, model: str):  # noqa: ANN201
    """A tokenizer of a shared (or derived) model, loaded once per session per backend."""
    key = (backend, model)
    if key not in _TOKENIZERS:
        from sidecar.factory import get_backend

        _TOKENIZERS[key] = get_backend(backend).load_tokenizer(model_dir(model))
    return _TOKENIZERS[key]


@dataclass
class LiveServer:
    """A `sidecar serve` subprocess."""

    process: subprocess.Popen
    tcp: str
    uds: str
    metrics_port: int | None
    log_path: Path

    def log_lines(self) -> list[dict]:
        return _json_lines(self.log_path)


def start_server(tmp_dir: Path, *args: str, timeout: float = 120.0) -> LiveServer:
    """Starts the real server on a free TCP port and a temp Unix socket; waits until it listens."""
    uds = str(tmp_dir / "sidecar.sock")
    log_path = tmp_dir / "server.log"
    log = open(log_path, "w")  # noqa: SIM115 - owned by the process for its lifetime
    cmd = [sys.executable, "-m", "sidecar", "serve", "--port", "0", "--uds", uds, "--metrics-port", "0", *args]
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log_path.read_text()}")
        for event in _json_lines(log_path):
            if event.get("event") == "listening":
                tcp = next(a for a in event["addresses"] if not a.startswith("unix:"))
                return LiveServer(process, tcp, f"unix:{uds}", event["metrics_port"], log_path)
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server did not start in {timeout}s:\n{log_path.read_text()}")


def _json_lines(path: Path) -> list[dict]:
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue  # a partly written last line, or a non-JSON line from a dependency
    return events


def stop_server(server: LiveServer, timeout: float = 30.0) -> int:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(timeout)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
    return server.process.returncode


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The server on the embedded default model plus, when present, two shared models."""
    tmp = tmp_path_factory.mktemp("server")
    args: list[str] = []
    if (SHARED_MODELS / "SOURCES.md").is_file():
        args = ["--model", "qwen3=" + str(SHARED_MODELS / "qwen3"), "--model", "gpt2=" + str(SHARED_MODELS / "gpt2")]
    server = start_server(tmp, *args)
    yield server
    stop_server(server)


#: Parity tallies reported at the end of the run: area -> {"cases": n, "mismatches": m, ...}.
PARITY_COUNTS: dict[str, dict[str, int]] = {}


def count_parity(area: str, **increments: int) -> None:
    tally = PARITY_COUNTS.setdefault(area, {})
    for key, n in increments.items():
        tally[key] = tally.get(key, 0) + n


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest hook
    if not PARITY_COUNTS:
        return
    terminalreporter.section("parity counts")
    for area, tally in sorted(PARITY_COUNTS.items()):
        terminalreporter.write_line(f"{area}: " + ", ".join(f"{k}={v}" for k, v in sorted(tally.items())))
