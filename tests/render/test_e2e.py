"""Render end to end: the real server (subprocess) over TCP and UDS, its status codes, metrics and
the `sidecar render` command."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import grpc
import pytest

from tests.conftest import REPO, SHARED_MODELS, LiveServer, require_shared_models, start_server, stop_server
from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc

pytestmark = [pytest.mark.e2e, pytest.mark.models]

CHAT = json.dumps([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris? 🌧️"},
])
TOOLS = json.dumps([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])


def stub(address: str) -> pb_grpc.PreprocessorStub:
    return pb_grpc.PreprocessorStub(grpc.insecure_channel(address))


@pytest.fixture(scope="module")
def permissive_server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """The reference backend, allowing request templates."""
    shared = require_shared_models()
    server = start_server(
        tmp_path_factory.mktemp("permissive"), "--backend", "reference", "--allow-request-templates",
        "--model", f"qwen3={shared / 'qwen3'}",
    )
    yield server
    stop_server(server)


def direct_render(**fields) -> tuple[str, list[int]]:  # noqa: ANN003
    from sidecar.backend import RenderOptions, RendererSettings
    from sidecar.factory import get_backend
    from sidecar.chat_template import renderer_inputs
    from sidecar.model_config import ModelConfig

    directory = SHARED_MODELS / "qwen3"
    backend = get_backend("reference")
    templates, variables = renderer_inputs(ModelConfig.from_dir(directory))
    renderer = backend.load_renderer(templates, variables, backend.load_tokenizer(directory), RendererSettings(cache_bytes=0))
    out = renderer.render(RenderOptions(return_text=True, **fields))
    return out.text, out.ids


def test_render_over_tcp_and_uds(live_server: LiveServer) -> None:
    require_shared_models()
    want_text, want_ids = direct_render(messages_json=CHAT, tools_json=TOOLS)
    fingerprint = next(m.fingerprint for m in stub(live_server.tcp).ListModels(pb.ListModelsRequest()).models if m.name == "qwen3")
    for address in (live_server.tcp, live_server.uds):
        response = stub(address).Render(pb.RenderRequest(model="qwen3", messages_json=CHAT, tools_json=TOOLS, return_text=True))
        assert response.text == want_text
        assert list(response.token_ids) == want_ids
        assert response.fingerprint == fingerprint


def test_defaults(live_server: LiveServer) -> None:
    s = stub(live_server.tcp)
    response = s.Render(pb.RenderRequest(model="qwen3", messages_json=CHAT))
    assert response.text == "" and len(response.token_ids) > 0  # ids by default, text only when asked
    with_prompt = s.Render(pb.RenderRequest(model="qwen3", messages_json=CHAT, return_text=True)).text
    without = s.Render(pb.RenderRequest(model="qwen3", messages_json=CHAT, return_text=True, add_generation_prompt=False)).text
    assert with_prompt == without + "<|im_start|>assistant\n"


def test_continue_final_message(live_server: LiveServer) -> None:
    s = stub(live_server.tcp)
    messages = json.dumps([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, I am"}])
    # Unset add_generation_prompt means false when the final message is continued.
    text = s.Render(pb.RenderRequest(model="qwen3", messages_json=messages, continue_final_message=True, return_text=True)).text
    assert text.endswith("Hello, I am") and "<|im_start|>assistant\n" in text
    with pytest.raises(grpc.RpcError) as err:
        s.Render(pb.RenderRequest(model="qwen3", messages_json=messages, continue_final_message=True, add_generation_prompt=True))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("request_fields", "code", "needle"),
    [
        ({"model": "qwen3", "messages_json": "[{"}, grpc.StatusCode.INVALID_ARGUMENT, "messages_json"),
        ({"model": "qwen3", "messages_json": '[{"role": 1}]'}, grpc.StatusCode.INVALID_ARGUMENT, "messages[0].role"),
        ({"model": "nope", "messages_json": CHAT}, grpc.StatusCode.NOT_FOUND, "model"),
        ({"model": "qwen3", "messages_json": CHAT, "chat_template": "rag"}, grpc.StatusCode.NOT_FOUND, "chat_template"),
        ({"model": "qwen3", "messages_json": CHAT, "chat_template": "{{ 1 }}"}, grpc.StatusCode.FAILED_PRECONDITION, "--allow-request-templates"),
        ({"model": "gpt2", "messages_json": CHAT}, grpc.StatusCode.FAILED_PRECONDITION, "no chat template"),
        ({"model": "qwen3", "messages_json": CHAT, "block_hashing": {"algorithm": "md5", "block_size": 16}},
         grpc.StatusCode.INVALID_ARGUMENT, "block_hashing.algorithm"),
    ],
    ids=["malformed-json", "bad-role", "unknown-model", "unknown-template", "request-template", "no-template", "block-hashing"],
)
def test_errors(live_server: LiveServer, request_fields: dict, code: grpc.StatusCode, needle: str) -> None:
    require_shared_models()
    with pytest.raises(grpc.RpcError) as err:
        stub(live_server.tcp).Render(pb.RenderRequest(**request_fields))
    assert err.value.code() == code
    assert needle in err.value.details()


def test_block_hashes_of_the_rendered_prompt(live_server: LiveServer) -> None:
    from router_adapter import _reference
    from router_adapter.spec import HashSpec

    s = stub(live_server.tcp)
    long_chat = json.dumps([{"role": "user", "content": "block hashing " * 40}])
    hashing = pb.BlockHashing(algorithm="vllm_sha256_cbor", block_size=16, seed="0")
    response = s.Render(pb.RenderRequest(model="qwen3", messages_json=long_chat, block_hashing=hashing))
    ids = list(response.token_ids)
    expected = _reference.block_hashes(ids, HashSpec("vllm_sha256_cbor", 16, seed="0"))
    assert len(expected) == len(ids) // 16 > 0
    assert list(response.block_hashes) == expected
    assert (response.block_hash_spec.algorithm, response.block_hash_spec.seed) == ("vllm_sha256_cbor", "0")
    # Hashes without the ids when the caller does not want them back.
    no_ids = s.Render(pb.RenderRequest(model="qwen3", messages_json=long_chat, block_hashing=hashing, return_token_ids=False))
    assert list(no_ids.token_ids) == [] and list(no_ids.block_hashes) == expected


def test_request_templates_when_allowed(permissive_server: LiveServer) -> None:
    s = stub(permissive_server.tcp)
    text = s.Render(pb.RenderRequest(model="qwen3", messages_json=CHAT, chat_template="{{ messages[1].content }}", return_text=True)).text
    assert text == "Weather in Paris? 🌧️"
    with pytest.raises(grpc.RpcError) as err:
        s.Render(pb.RenderRequest(model="qwen3", messages_json=CHAT, chat_template="{{ raise_exception('System role not supported') }}"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "System role not supported" in err.value.details()


def test_cache_metrics(live_server: LiveServer) -> None:
    s = stub(live_server.tcp)
    for _ in range(2):
        s.Render(pb.RenderRequest(model="qwen3", messages_json=CHAT))
    with urllib.request.urlopen(f"http://127.0.0.1:{live_server.metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    hits = [line for line in text.splitlines() if line.startswith('sidecar_render_cache_segments_total{result="hit"}')]
    assert hits and float(hits[0].split()[-1]) > 0


def test_render_command(live_server: LiveServer) -> None:
    body = json.dumps({"messages": json.loads(CHAT), "chat_template_kwargs": {"enable_thinking": False}})
    result = subprocess.run(
        [sys.executable, "-m", "sidecar", "render", "--target", live_server.tcp, "--model", "qwen3", "--ids", "-"],
        input=body, capture_output=True, text=True, cwd=REPO, timeout=60, check=True,
    )
    lines = result.stdout.splitlines()
    assert lines[0] == "<|im_start|>system"
    assert "<think>" in result.stdout  # enable_thinking=false makes Qwen3 write an empty think block
    assert lines[-1].split()[0] == "151644"
    assert "tokens" in result.stderr
