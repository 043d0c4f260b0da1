"""Hot reload of model directories (SIGHUP and `Admin.ReloadModels`): a changed template or tokenizer
is loaded beside the serving model and swapped in under traffic, every response is consistent with
the fingerprint it carries, a broken directory leaves the old model serving, the old model's native
state is freed once the last call lets go. The models are copies of the embedded Qwen3 files, so
this runs without ../shared/models."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import shutil
import signal
import threading
import time
import weakref
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from sidecar.v1 import admin_pb2, admin_pb2_grpc
from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc
from tests.conftest import LiveServer, start_server, stop_server

MESSAGES = json.dumps([{"role": "user", "content": "Hello there"}])
NEW_TOKEN = "<|sidecar_reload_probe|>"
Outcome = admin_pb2.ModelReload


def copy_embedded_model(target: Path) -> Path:
    from sidecar.registry import materialize_embedded

    shutil.copytree(materialize_embedded(), target)
    return target


def replace_file(path: Path, content: str) -> None:
    """Writes a file the way an operator should: a new file renamed over the old one."""
    staging = path.with_name(path.name + ".new")
    staging.write_text(content, encoding="utf-8")
    os.replace(staging, path)


def add_token(model_dir: Path, content: str) -> int:
    """Adds a special token to the directory's tokenizer.json; returns its id."""
    path = model_dir / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    new_id = max(t["id"] for t in data["added_tokens"]) + 1
    data["added_tokens"].append({"id": new_id, "content": content, "single_word": False, "lstrip": False,
                                 "rstrip": False, "normalized": False, "special": True})
    replace_file(path, json.dumps(data, ensure_ascii=False))
    return new_id


# ---- against the real server --------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("reload")
    a = copy_embedded_model(tmp / "model-a")
    b = copy_embedded_model(tmp / "model-b")
    live = start_server(tmp, "--model", f"a={a}", "--model", f"b={b}", "--enable-admin")
    live.dirs = {"a": a, "b": b}  # type: ignore[attr-defined]
    yield live
    stop_server(live)


@pytest.mark.e2e
def test_a_template_swapped_under_traffic(server: LiveServer) -> None:
    channel = grpc.insecure_channel(server.uds)
    stub = pb_grpc.PreprocessorStub(channel)
    admin = admin_pb2_grpc.AdminStub(channel)
    render = pb.RenderRequest(model="a", messages_json=MESSAGES, return_text=True)
    before = stub.Render(render, timeout=30)
    # Listed before the swap too: the server keeps its ListModels answer until the models change.
    assert {m.name: m.fingerprint for m in stub.ListModels(pb.ListModelsRequest(), timeout=30).models}["a"] == \
        before.fingerprint

    seen: list[tuple[str, str]] = []
    errors: list[grpc.RpcError] = []
    stop = threading.Event()

    def traffic() -> None:
        traffic_stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(server.tcp))
        while not stop.is_set():
            try:
                r = traffic_stub.Render(render, timeout=30)
            except grpc.RpcError as e:
                errors.append(e)
                continue
            seen.append((r.fingerprint, r.text))

    workers = [threading.Thread(target=traffic) for _ in range(3)]
    for w in workers:
        w.start()
    try:
        template = server.dirs["a"] / "chat_template.jinja"  # type: ignore[attr-defined]
        replace_file(template, "RELOADED " + template.read_text(encoding="utf-8"))
        result = admin.ReloadModels(admin_pb2.ReloadModelsRequest(models=["a"]), timeout=120)
        time.sleep(0.3)  # traffic on the new model too (not an assertion)
    finally:
        stop.set()
        for w in workers:
            w.join()

    (reload,) = result.models
    assert reload.outcome == Outcome.OUTCOME_RELOADED, reload
    assert reload.previous_fingerprint == before.fingerprint != reload.fingerprint
    after = stub.Render(render, timeout=30)
    assert after.fingerprint == reload.fingerprint
    assert after.text.startswith("RELOADED") and after.text.removeprefix("RELOADED").lstrip() == before.text
    assert not errors, errors[:3]
    # Every response is one model's: its text is the text of the fingerprint it carries.
    expected = {before.fingerprint: before.text, after.fingerprint: after.text}
    assert all(expected[fp] == text for fp, text in seen)
    assert {fp for fp, _ in seen} == set(expected), "traffic saw only one of the two models"

    listed = {m.name: m.fingerprint for m in stub.ListModels(pb.ListModelsRequest(), timeout=30).models}
    assert listed["a"] == reload.fingerprint
    again = admin.ReloadModels(admin_pb2.ReloadModelsRequest(models=["a"]), timeout=120).models[0]
    assert (again.outcome, again.fingerprint) == (Outcome.OUTCOME_UNCHANGED, reload.fingerprint)
    logged = wait_for(server, lambda e: e.get("event") == "model_reloaded" and e["model"] == "a")
    assert (logged["previous_fingerprint"], logged["fingerprint"]) == (before.fingerprint, reload.fingerprint)
    # The old model's native state is released once the traffic that used it has finished.
    wait_for(server, lambda e: e.get("event") == "model_released" and e["fingerprint"] == before.fingerprint)
    channel.close()


@pytest.mark.e2e
def test_a_broken_directory_keeps_the_old_model_and_sighup_loads_a_new_tokenizer(server: LiveServer) -> None:
    stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(server.uds))
    admin = admin_pb2_grpc.AdminStub(grpc.insecure_channel(server.uds))
    model_dir: Path = server.dirs["b"]  # type: ignore[attr-defined]
    probe = pb.TokenizeRequest(model="b", texts=[f"x{NEW_TOKEN}y"], add_special_tokens=False)
    before = stub.Tokenize(probe, timeout=30)

    good_tokenizer = (model_dir / "tokenizer.json").read_text(encoding="utf-8")
    replace_file(model_dir / "tokenizer.json", good_tokenizer[: len(good_tokenizer) // 2])
    failed = admin.ReloadModels(admin_pb2.ReloadModelsRequest(), timeout=120)
    by_name = {r.model: r for r in failed.models}
    assert by_name["b"].outcome == Outcome.OUTCOME_FAILED and by_name["b"].error, by_name["b"]
    assert by_name["b"].fingerprint == before.fingerprint
    assert by_name["a"].outcome == Outcome.OUTCOME_UNCHANGED
    still = stub.Tokenize(probe, timeout=30)
    assert (still.fingerprint, list(still.encodings[0].token_ids)) == (before.fingerprint, list(before.encodings[0].token_ids))
    logged = wait_for(server, lambda e: e.get("event") == "model_reload_failed" and e["model"] == "b")
    assert logged["error"] == by_name["b"].error

    replace_file(model_dir / "tokenizer.json", good_tokenizer)
    new_id = add_token(model_dir, NEW_TOKEN)
    server.process.send_signal(signal.SIGHUP)
    wait_for(server, lambda e: e.get("event") == "model_reloaded" and e["model"] == "b")
    assert server.process.poll() is None
    after = stub.Tokenize(probe, timeout=30)
    assert after.fingerprint != before.fingerprint
    assert new_id in after.encodings[0].token_ids and new_id not in before.encodings[0].token_ids
    listed = {m.name: m for m in stub.ListModels(pb.ListModelsRequest(), timeout=30).models}
    assert listed["b"].fingerprint == after.fingerprint
    assert any(t.id == new_id and t.content == NEW_TOKEN for t in listed["b"].special_tokens)


@pytest.mark.parametrize(("body", "outcome"), [
    # Fail every Render at run time (the syntax is fine): the old model keeps serving.
    ("{{ no_such_function() }}", Outcome.OUTCOME_FAILED),
    ("{{ messages[0].content.nosuchmethod() }}", Outcome.OUTCOME_FAILED),
    ("{{ (1 / 0) }}", Outcome.OUTCOME_FAILED),
    # The template's own refusal of the smoke conversation: it compiled and ran.
    ("{{ raise_exception('only tool calls here') }}", Outcome.OUTCOME_RELOADED),
])
def test_a_template_that_fails_at_run_time_is_not_swapped_in(server: LiveServer, body: str, outcome: int) -> None:
    """A template whose every Render fails was swapped in as RELOADED, and each Render then answered
    INVALID_ARGUMENT "chat template failed", blaming the client."""
    stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(server.uds))
    admin = admin_pb2_grpc.AdminStub(grpc.insecure_channel(server.uds))
    render = pb.RenderRequest(model="a", messages_json=MESSAGES, return_text=True)
    template = server.dirs["a"] / "chat_template.jinja"  # type: ignore[attr-defined]
    good = template.read_text(encoding="utf-8")
    before = stub.Render(render, timeout=30)
    try:
        replace_file(template, body)
        (reload,) = admin.ReloadModels(admin_pb2.ReloadModelsRequest(models=["a"]), timeout=120).models
        assert reload.outcome == outcome, reload
        if outcome == Outcome.OUTCOME_FAILED:
            assert "fails a plain conversation" in reload.error
            assert stub.Render(render, timeout=30) == before
    finally:
        replace_file(template, good)
        admin.ReloadModels(admin_pb2.ReloadModelsRequest(models=["a"]), timeout=120)
    assert stub.Render(render, timeout=30).text == before.text


@pytest.mark.e2e
def test_unknown_model_names_are_not_found(server: LiveServer) -> None:
    admin = admin_pb2_grpc.AdminStub(grpc.insecure_channel(server.uds))
    with pytest.raises(grpc.RpcError) as e:
        admin.ReloadModels(admin_pb2.ReloadModelsRequest(models=["nope"]), timeout=30)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "nope" in e.value.details()


def wait_for(server: LiveServer, match, timeout: float = 60) -> dict:  # noqa: ANN001 - predicate on a log line
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in server.log_lines():
            if match(line):
                return line
        time.sleep(0.05)
    raise AssertionError(f"no matching log line:\n{server.log_path.read_text()[-3000:]}")


# ---- in process: the reloader and the registry --------------------------------------------------


def test_in_flight_users_keep_the_old_model_until_they_let_go(tmp_path: Path) -> None:
    from sidecar.backend import EncodeOptions
    from sidecar.factory import get_backend
    from sidecar.registry import ModelRegistry, ModelSpec
    from sidecar.reload import RELOADED, Reloader

    model_dir = copy_embedded_model(tmp_path / "m")
    registry = ModelRegistry(get_backend("native"))
    registry.load(ModelSpec("m", model_dir))
    in_flight = registry.get("m")  # what a call holds while it runs
    handle = weakref.ref(in_flight.tokenizer.handle)
    new_id = add_token(model_dir, NEW_TOKEN)

    (result,) = asyncio.run(Reloader(registry).reload())
    assert result.outcome == RELOADED and registry.get("m").fingerprint == result.fingerprint != in_flight.fingerprint
    text = [f"a{NEW_TOKEN}"]
    assert new_id not in in_flight.tokenizer.encode_batch(text, EncodeOptions())[0].ids  # the old one still works
    assert new_id in registry.get("m").tokenizer.encode_batch(text, EncodeOptions())[0].ids
    del in_flight
    gc.collect()
    assert handle() is None, "the replaced model's tokenizer handle was not freed after its last user let go"


@pytest.mark.parametrize("rpc", ["Tokenize", "Multiplex"])
def test_a_call_queued_before_a_reload_runs_on_the_table_it_fetched(tmp_path: Path, rpc: str) -> None:
    """A large call waits for a worker holding the native table it fetched; a reload meanwhile
    makes the next fetch build a new table and close that one, which must stay usable until the
    waiting call is done (it was freed at once: FAILED_PRECONDITION "multiplexer: already closed",
    and for a Multiplex message, the end of its stream)."""
    pytest.importorskip("sidecar.native.multiplex")
    from sidecar.config import ServerConfig
    from sidecar.factory import get_backend, get_hasher
    from sidecar.registry import ModelRegistry, ModelSpec
    from sidecar.reload import RELOADED, Reloader
    from sidecar.rpc import Call, Gate, StreamCounts
    from sidecar.runtime import Offloader, Runtime
    from sidecar.servicers.multiplex import MultiplexServicer
    from sidecar.servicers.tokenize import TokenizeServicer

    model_dir = copy_embedded_model(tmp_path / "m")
    registry = ModelRegistry(get_backend("native"))
    registry.load(ModelSpec("m", model_dir))
    config = ServerConfig(backend="native", port=None, metrics_port=None, workers=1)
    offloader = Offloader.for_config(config)
    runtime = Runtime(config, registry, offloader, get_hasher("native"))
    tokenize = pb.TokenizeRequest(model="m", texts=["word " * (config.inline_bytes // 4)])

    async def scenario() -> object:
        servicer = TokenizeServicer(runtime)
        gate = threading.Event()
        blocker = asyncio.create_task(offloader.run(lambda: gate.wait(30), config.inline_bytes + 1, "test"))
        await asyncio.sleep(0)  # the only worker is taken
        if rpc == "Tokenize":
            waiting = asyncio.create_task(servicer.TokenizeRaw(tokenize.SerializeToString(), None,
                                                               Call("Tokenize", "test", None)))
        else:
            message = pb.MultiplexRequest(calls=[pb.MultiplexCall(id=1, tokenize=tokenize)]).SerializeToString()

            async def one_message():  # noqa: ANN202
                yield message

            multiplex = MultiplexServicer(runtime, Gate(), servicer._native)
            answers = multiplex.Multiplex(one_message(), None, Call("Multiplex", "test", None), StreamCounts())
            waiting = asyncio.create_task(anext(answers))
        await asyncio.sleep(0.05)  # queued behind the blocker
        old = servicer._native.get()
        add_token(model_dir, NEW_TOKEN)
        (result,) = await Reloader(registry).reload()
        assert result.outcome == RELOADED
        assert servicer._native.get() is not old  # the next call's fetch closed the old table
        assert not old._handle.closed  # held by the waiting call
        gate.set()
        await blocker
        answer = await asyncio.wait_for(waiting, 30)
        await asyncio.sleep(0)  # the done callbacks of the waiting call's tasks
        assert old._handle.closed, "the replaced table was not freed once its last call let go"
        return answer

    try:
        answer = asyncio.run(scenario())
    finally:
        offloader.shutdown()
    if rpc == "Tokenize":
        assert pb.TokenizeResponse.FromString(answer).encodings[0].token_ids
    else:
        (result,) = pb.MultiplexResponse.FromString(answer).results
        assert result.id == 1 and result.WhichOneof("result") == "tokenize", result.error
        assert result.tokenize.encodings[0].token_ids


def test_the_embedded_model_is_never_reloaded() -> None:
    from sidecar.factory import get_backend
    from sidecar.registry import ModelRegistry, embedded_spec
    from sidecar.reload import SKIPPED, Reloader

    registry = ModelRegistry(get_backend("native"))
    registry.load(embedded_spec())
    (result,) = asyncio.run(Reloader(registry).reload(force=True))
    assert result.outcome == SKIPPED and result.fingerprint == registry.get("qwen3").fingerprint
