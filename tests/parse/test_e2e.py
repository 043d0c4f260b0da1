"""End to end: the real server, driven like an engine drives it: one ParseStream, requests
opened, then one message per decode step carrying one new token of every running request."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import urllib.request

import grpc
import pytest

from sidecar import parsers
from tests.conftest import REPO, LiveServer, derived_model, model_dir, require_shared_models, start_server, stop_server
from tests.parse.harness import (
    Result, absorb, check_delta_shape, check_expected, encode, hf_tokenizer, load_cases, output_ids, prompt_ids,
)
from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc

pytestmark = [pytest.mark.e2e, pytest.mark.models]


def open_request(request_id: str, case: dict, model: str = "qwen3") -> pb.ParseStreamRequest:
    kwargs = {}
    if "skip_special_tokens" in case:
        kwargs["skip_special_tokens"] = case["skip_special_tokens"]
    return pb.ParseStreamRequest(open=pb.OpenRequest(
        request_id=request_id, model=model, tool_parser=case.get("tool_parser", ""),
        reasoning_parser=case.get("reasoning_parser", ""),
        tools_json=json.dumps(case["tools"]) if case.get("tools") else "",
        prompt_token_ids=prompt_ids(case),
        chat_template_kwargs_json=json.dumps(case["kwargs"]) if case.get("kwargs") else "",
        stop=case.get("stop", []), include_stop_str_in_output=case.get("include_stop", False), **kwargs,
    ))


async def engine(target: str, cases: dict[str, dict]) -> dict[str, Result]:
    """Runs every case on one stream, one token per request per step, in lock-step."""
    async with grpc.aio.insecure_channel(target) as channel:
        call = preprocessor_pb2_grpc.PreprocessorStub(channel).ParseStream()
        results = {rid: Result() for rid in cases}
        for rid, case in cases.items():
            await call.write(open_request(rid, case, case.get("served_model", "qwen3")))
            answer = await call.read()
            assert not answer.deltas, f"open {rid} failed: {answer}"
        pending = {rid: output_ids(case) for rid, case in cases.items()}
        position = 0
        while pending:
            items = []
            for rid, ids in list(pending.items()):
                last = position + 1 >= len(ids)
                end = cases[rid].get("end", True)
                items.append(pb.StepTokens(request_id=rid, token_ids=ids[position : position + 1], finished=last and end))
                if last:
                    del pending[rid]
            await call.write(pb.ParseStreamRequest(step=pb.Step(items=items)))
            answer = await call.read()
            for d in answer.deltas:
                absorb(results[d.request_id], d)
                if d.finished:
                    pending.pop(d.request_id, None)
            position += 1
        await call.done_writing()
        return results


#: A response_template (vLLM's `hf`/`beam`) written for the test: Qwen3's markers, JSON calls.
RESPONSE_TEMPLATE = {
    "version": 1, "start_anchor": "<|im_start|>assistant\n",
    "fields": {"thinking": {"open": "<think>", "close": "</think>"},
               "tool_calls": {"open": "<tool_call>", "close": "</tool_call>", "content": "json",
                              "transform": {"function": {"name": "{content.name}", "arguments": "{content.arguments}"}}}},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    models = require_shared_models()
    tmp = tmp_path_factory.mktemp("parse-e2e")
    with_template = model_dir(derived_model("qwen3", [], RESPONSE_TEMPLATE))
    padded = tmp / "qwen3-padded"  # a checkpoint's config.json: 151,936 output rows for 151,669 ids
    padded.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(models / "qwen3" / name, padded / name)
    (padded / "config.json").write_text(json.dumps({"vocab_size": 151_936}), encoding="utf-8")
    live = start_server(tmp, "--model", f"qwen3={models / 'qwen3'}", "--model", f"gpt2={models / 'gpt2'}",
                        "--model", f"qwen3rt={with_template}", "--model", f"qwen3pad={padded}",
                        "--model", f"llama3={models / 'llama3'}", "--parse-max-requests", "200")
    yield live
    stop_server(live)


def qwen3_cases() -> dict[str, dict]:
    cases = [c for c in load_cases("hermes") if c["model"] == "qwen3"]
    cases += [c for c in load_cases("reasoning") if c["model"] == "qwen3"]
    # Several copies of each case run at once on the same stream.
    return {f"{k}-{i}": c for k in range(3) for i, c in enumerate(cases)}


def test_many_concurrent_requests_on_one_stream(server: LiveServer) -> None:
    cases = qwen3_cases()
    assert len(cases) > 90
    results = asyncio.run(engine(server.uds, cases))
    for rid, case in cases.items():
        result = results[rid]
        assert result.finished or not case.get("end", True), rid
        check_delta_shape(result)
        check_expected(result, case["expect"])


def test_many_streams_at_once(server: LiveServer) -> None:
    cases = list(qwen3_cases().items())

    async def all_streams() -> list[dict[str, Result]]:
        groups = [dict(cases[i::4]) for i in range(4)]
        return await asyncio.gather(*(engine(server.tcp, g) for g in groups))

    merged: dict[str, Result] = {}
    for part in asyncio.run(all_streams()):
        merged.update(part)
    for rid, case in cases:
        check_expected(merged[rid], case["expect"])


def test_request_errors_do_not_end_the_stream(server: LiveServer) -> None:
    async def scenario() -> list[pb.ParseStreamResponse]:
        async with grpc.aio.insecure_channel(server.uds) as channel:
            call = preprocessor_pb2_grpc.PreprocessorStub(channel).ParseStream()
            answers = []
            for message in [
                pb.ParseStreamRequest(open=pb.OpenRequest(request_id="m", model="no-such-model")),
                pb.ParseStreamRequest(open=pb.OpenRequest(request_id="p", model="qwen3", tool_parser="nope")),
                pb.ParseStreamRequest(open=pb.OpenRequest(request_id="ok", model="qwen3", reasoning_parser="none")),
                pb.ParseStreamRequest(step=pb.Step(items=[
                    pb.StepTokens(request_id="ghost", token_ids=[1]),
                    pb.StepTokens(request_id="ok", token_ids=[9707], finished=True),
                ])),
                pb.ParseStreamRequest(cancel=pb.CancelRequest(request_id="ok")),
            ]:
                await call.write(message)
                answers.append(await call.read())
            await call.done_writing()
            return answers

    answers = asyncio.run(scenario())
    assert answers[0].deltas[0].error.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert "no-such-model" in answers[0].deltas[0].error.message
    assert answers[1].deltas[0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "tool_parser" in answers[1].deltas[0].error.message
    assert not answers[2].deltas
    by_id = {d.request_id: d for d in answers[3].deltas}
    assert by_id["ghost"].error.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert by_id["ok"].content == "Hello" and by_id["ok"].finished and by_id["ok"].fingerprint.startswith("sha256:")
    assert not answers[4].deltas


def test_an_open_reusing_the_id_of_an_open_request_ends_that_request(server: LiveServer) -> None:
    # An error delta says its request is finished and freed. An open refused under the id of a
    # request still open (a duplicate, or refused for another reason first: an unknown model) ends
    # that request too, so the answer is true: later steps for it are FAILED_PRECONDITION, and the
    # id may be opened again.
    def open_(rid: str, model: str = "qwen3") -> pb.ParseStreamRequest:
        return pb.ParseStreamRequest(open=pb.OpenRequest(request_id=rid, model=model, tool_parser="none",
                                                         reasoning_parser="none"))

    def step(rid: str, text: str, finished: bool = False) -> pb.ParseStreamRequest:
        return pb.ParseStreamRequest(step=pb.Step(items=[pb.StepTokens(
            request_id=rid, token_ids=encode("qwen3", text), finished=finished)]))

    async def scenario() -> list[pb.ParseStreamResponse]:
        async with grpc.aio.insecure_channel(server.uds) as channel:
            call = preprocessor_pb2_grpc.PreprocessorStub(channel).ParseStream()
            answers = []
            for message in [open_("a"), step("a", "Hello"), open_("a"), step("a", " world"),
                            open_("b"), open_("b", "no-such-model"), step("b", "x"),
                            open_("a"), step("a", "again", True)]:
                await call.write(message)
                answers.append(await call.read())
            await call.done_writing()
            return answers

    answers = asyncio.run(scenario())
    assert not answers[0].deltas and answers[1].deltas[0].content == "Hello"
    (refused,) = answers[2].deltas
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert (refused.request_id, refused.finished, refused.error.code) == ("a", True, invalid)
    assert "already open" in refused.error.message and "ended too" in refused.error.message
    (late,) = answers[3].deltas
    assert (late.request_id, late.content, late.error.code) == ("a", "", grpc.StatusCode.FAILED_PRECONDITION.value[0])
    (missing,) = answers[5].deltas
    assert (missing.request_id, missing.finished, missing.error.code) == ("b", True, grpc.StatusCode.NOT_FOUND.value[0])
    assert answers[6].deltas[0].error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert not answers[7].deltas
    (again,) = answers[8].deltas
    assert (again.content, again.finished, again.HasField("error")) == ("again", True, False)


def test_an_open_with_a_prompt_id_above_32_bits_is_refused_by_name(server: LiveServer) -> None:
    # Prompt ids are decoded natively off the event loop; a varint of 2^32 (which protobuf would
    # truncate to token 0) refuses that request, naming the position and the request, and the
    # stream goes on.
    open_fields = pb.OpenRequest(request_id="w", model="qwen3", reasoning_parser="none").SerializeToString()
    open_fields += b"\x32\x06\x07\x80\x80\x80\x80\x10"  # prompt_token_ids = [7, 2^32], packed
    wide_open = b"\x0a" + bytes([len(open_fields)]) + open_fields

    async def scenario() -> list[pb.ParseStreamResponse]:
        async with grpc.aio.insecure_channel(server.uds) as channel:
            call = channel.stream_stream("/sidecar.v1.Preprocessor/ParseStream")()
            answers = []
            fine = pb.ParseStreamRequest(open=pb.OpenRequest(request_id="ok", model="qwen3", reasoning_parser="none",
                                                             prompt_token_ids=[7, 9]))
            for message in [wide_open, fine.SerializeToString()]:
                await call.write(message)
                answers.append(pb.ParseStreamResponse.FromString(await call.read()))
            await call.done_writing()
            return answers

    refused, opened = asyncio.run(scenario())
    (delta,) = refused.deltas
    assert (delta.request_id, delta.error.code, delta.finished) == ("w", grpc.StatusCode.INVALID_ARGUMENT.value[0], True)
    assert delta.error.message.startswith("open.prompt_token_ids[1]: 4294967296 is not a token id"), delta.error.message
    assert not opened.deltas


def test_stream_has_a_request_id_a_log_line_and_metrics(server: LiveServer) -> None:
    """ParseStream runs in the same per-call wrapper as the unary RPCs."""
    async def scenario() -> tuple:
        async with grpc.aio.insecure_channel(server.uds) as channel:
            call = preprocessor_pb2_grpc.PreprocessorStub(channel).ParseStream(metadata=(("x-request-id", "ps-e2e-1"),))
            for message in [
                pb.ParseStreamRequest(open=pb.OpenRequest(request_id="ok", model="qwen3")),
                pb.ParseStreamRequest(open=pb.OpenRequest(request_id="m", model="no-such-model")),
                pb.ParseStreamRequest(step=pb.Step(items=[pb.StepTokens(request_id="ok", token_ids=[9707], finished=True)])),
            ]:
                await call.write(message)
                await call.read()
            await call.done_writing()
            assert await call.read() == grpc.aio.EOF
            return await call.code(), await call.trailing_metadata()

    code, trailing = asyncio.run(scenario())
    assert code == grpc.StatusCode.OK
    assert ("x-request-id", "ps-e2e-1") in tuple(trailing)
    deadline = time.monotonic() + 10
    while not (lines := [e for e in server.log_lines() if e.get("request_id") == "ps-e2e-1" and e.get("event") == "rpc"]):
        assert time.monotonic() < deadline, "no log line for the stream"
        time.sleep(0.05)
    assert len(lines) == 1
    line = lines[0]
    assert (line["rpc"], line["code"], line["messages"], line["opened"], line["errors"]) == ("ParseStream", "OK", 3, 1, 1)
    body = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    assert 'sidecar_requests_total{code="OK",rpc="ParseStream"}' in body
    assert 'sidecar_request_seconds_count{rpc="ParseStream"}' in body
    assert 'sidecar_inflight_requests{rpc="ParseStream"} 0.0' in body


def test_malformed_message_ends_the_stream(server: LiveServer) -> None:
    async def scenario() -> grpc.StatusCode:
        async with grpc.aio.insecure_channel(server.uds) as channel:
            raw = channel.stream_stream("/sidecar.v1.Preprocessor/ParseStream")
            call = raw()
            await call.write(b"\x12\xff\xff\xff\x0f")
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call.read()
            return info.value.code()

    assert asyncio.run(scenario()) == grpc.StatusCode.INVALID_ARGUMENT


def test_list_models_reports_default_parsers(server: LiveServer) -> None:
    with grpc.insecure_channel(server.tcp) as channel:
        models = preprocessor_pb2_grpc.PreprocessorStub(channel).ListModels(pb.ListModelsRequest()).models
    by_name = {m.name: m for m in models}
    assert (by_name["qwen3"].default_tool_parser, by_name["qwen3"].default_reasoning_parser) == ("hermes", "qwen3")
    assert (by_name["gpt2"].default_tool_parser, by_name["gpt2"].default_reasoning_parser) == ("", "")


def test_reference_backend_refuses_parse_stream(tmp_path) -> None:  # noqa: ANN001
    """The reference backend covers tokenize, render and hashing; ParseStream says why it is refused."""
    models = require_shared_models()
    live = start_server(tmp_path, "--backend", "reference", "--model", f"qwen3={models / 'qwen3'}")

    async def scenario() -> grpc.aio.AioRpcError:
        async with grpc.aio.insecure_channel(live.uds) as channel:
            call = preprocessor_pb2_grpc.PreprocessorStub(channel).ParseStream()
            # The stream is refused as it starts, before any message: a write racing with that status
            # can fail on the client with a local INTERNAL ("Internal error from Core") that replaces
            # the server's status, so the test only reads.
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call.read()
            return info.value

    try:
        error = asyncio.run(scenario())
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "reference backend does not parse" in error.details() and "--backend native" in error.details()
        with grpc.insecure_channel(live.uds) as channel:
            tokens = preprocessor_pb2_grpc.PreprocessorStub(channel).Tokenize(pb.TokenizeRequest(model="qwen3", texts=["Hi"]))
        assert list(tokens.encodings[0].token_ids) == encode("qwen3", "Hi")
    finally:
        stop_server(live)


def test_list_parsers_reports_every_registered_name(server: LiveServer) -> None:
    """ListParsers: one entry per format of the registry; every name vLLM 0.33 and SGLang 0.5.23
    register (tests/data/parse_oracle/registry.json) is a canonical name, an alias or, for an SGLang
    name vLLM spells alike for another format, listed as shadowed."""
    with grpc.insecure_channel(server.tcp) as channel:
        answer = preprocessor_pb2_grpc.PreprocessorStub(channel).ListParsers(pb.ListParsersRequest())
    assert dict(answer.engines) == {"vllm": "0.33.0", "sglang": "0.5.23"}
    assert [(p.name, p.kind, p.implemented) for p in answer.parsers] == [
        (p.name, p.kind, p.implemented) for p in parsers.parsers()]
    listed = {(p.kind, p.name) for p in answer.parsers}
    listed |= {(p.kind, a.name) for p in answer.parsers for a in p.aliases}
    listed |= {(p.kind, s) for p in answer.parsers for s in p.shadowed}
    registered = json.loads((REPO / "tests/data/parse_oracle/registry.json").read_text())["names"]
    assert len(registered) == 180
    assert {(n["kind"], n["name"]) for n in registered} <= listed
    hermes = next(p for p in answer.parsers if p.name == "hermes")
    assert ("qwen25", "sglang") in {(a.name, a.engine) for a in hermes.aliases}
    assert sum(p.implemented for p in answer.parsers) >= 20


def test_open_resolves_aliases_and_refuses_unknown_or_missing_parsers(server: LiveServer) -> None:
    """An unknown name is INVALID_ARGUMENT; `beam` (as `hf`) on a model whose tokenizer_config.json
    has no response_template is FAILED_PRECONDITION saying so."""

    async def scenario() -> list[pb.ParseStreamResponse]:
        async with grpc.aio.insecure_channel(server.uds) as channel:
            call = preprocessor_pb2_grpc.PreprocessorStub(channel).ParseStream()
            answers = []
            for rid, tool, reasoning in [("u", "hemres", ""), ("m", "none", "beam"), ("a", "qwen25", "qwen3-thinking")]:
                await call.write(pb.ParseStreamRequest(open=pb.OpenRequest(
                    request_id=rid, model="qwen3", tool_parser=tool, reasoning_parser=reasoning)))
                answers.append(await call.read())
            await call.done_writing()
            return answers

    unknown, not_implemented, alias = asyncio.run(scenario())
    assert unknown.deltas[0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "close matches: hermes" in unknown.deltas[0].error.message
    assert not_implemented.deltas[0].error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert "response_template" in not_implemented.deltas[0].error.message
    assert not alias.deltas, alias


def test_hf_parses_with_the_response_template_the_model_was_loaded_with(server: LiveServer) -> None:
    """The registry reads tokenizer_config.json's response_template when it loads a model: `hf` on
    that model follows it (the prompt opened reasoning), on a model without one it is refused."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                          "properties": {"n": {"type": "integer"}}}}}]
    case = {"model": "qwen3", "served_model": "qwen3rt", "tool_parser": "hf", "reasoning_parser": "hf",
            "tools": tools, "prompt": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n",
            "output": 'plan</think>Hi <tool_call>{"name": "f", "arguments": {"n": "7"}}</tool_call>'}
    result = asyncio.run(engine(server.uds, {"rt": case}))["rt"]
    check_delta_shape(result)
    assert (result.content, result.reasoning) == ("Hi ", "plan")
    assert [(c["name"], json.loads(c["arguments"])) for c in result.calls.values()] == [("f", {"n": 7})]
    assert result.finish_reason == "tool_calls"


# ---- padded vocabularies -------------------------------------------------------------------------


def test_padded_ids_decode_to_nothing_over_grpc(server: LiveServer) -> None:
    """A model whose config.json has more output rows than its tokenizer has ids: ListModels reports
    both, and an id in the gap (one vLLM can sample) is empty text in ParseStream and Detokenize;
    past the output size it is refused as before."""
    hello, gap, world, past = 9707, 151_700, 1879, 151_936
    with grpc.insecure_channel(server.uds) as channel:
        stub = preprocessor_pb2_grpc.PreprocessorStub(channel)
        listed = {m.name: m for m in stub.ListModels(pb.ListModelsRequest()).models}
        assert (listed["qwen3pad"].vocab_size, listed["qwen3pad"].model_vocab_size) == (151_669, 151_936)
        assert (listed["qwen3"].vocab_size, listed["qwen3"].model_vocab_size) == (151_669, 0)
        texts = stub.Detokenize(pb.DetokenizeRequest(model="qwen3pad", sequences=[
            pb.TokenIds(token_ids=[hello, gap, world]), pb.TokenIds(token_ids=[gap])])).texts
        assert list(texts) == ["Hello world", ""]
        with pytest.raises(grpc.RpcError) as refused:
            stub.Detokenize(pb.DetokenizeRequest(model="qwen3pad", sequences=[pb.TokenIds(token_ids=[hello, past])]))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details() == ("sequences[0]: token_ids[1]: id 151936 is not in the vocabulary (size "
                                           "151669) nor below the model's output size (151936)")
        with pytest.raises(grpc.RpcError) as unpadded:
            stub.Detokenize(pb.DetokenizeRequest(model="qwen3", sequences=[pb.TokenIds(token_ids=[gap])]))
        assert unpadded.value.details() == "sequences[0]: token_ids[0]: id 151700 is not in the vocabulary (size 151669)"

    base = {"model": "qwen3", "served_model": "qwen3pad", "tool_parser": "none", "reasoning_parser": "none"}
    cases = {"gap": {**base, "output_ids": [hello, gap, world]},
             "past": {**base, "output_ids": [hello, past, world], "end": True}}
    results = asyncio.run(engine(server.uds, cases))
    assert (results["gap"].content, results["gap"].error, results["gap"].completion_tokens) == ("Hello world", None, 3)
    assert results["past"].content == "Hello" and results["past"].finished
    assert results["past"].error == (grpc.StatusCode.INVALID_ARGUMENT.value[0], "step.items: token_ids[0]: id 151936 "
                                     "is not in the vocabulary (size 151669) nor below the model's output size (151936)")


# ---- the model's default tool parser applies to requests with tools ------------------------------

WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
QUOTED_CALL = 'Hermes format looks like this: <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_the_default_tool_parser_runs_only_for_requests_with_tools(server: LiveServer) -> None:
    """vLLM and SGLang parse tool calls only for a request that has tools: without `tools_json`
    (or with an empty array) and no parser named, text that quotes the call syntax is content; with
    tools the model's default (hermes) reads it; a named parser reads it with or without tools.
    Reasoning is split either way."""
    no_think = {"enable_thinking": False}
    case = {"model": "qwen3", "output": QUOTED_CALL, "kwargs": no_think}
    cases = {
        "no-tools": case,
        "empty-array": {**case, "tools_json": "[ ]"},
        "tools": {**case, "tools": WEATHER},
        "named": {**case, "tool_parser": "hermes"},
        "reasoning": {"model": "qwen3", "output": "<think>hmm</think>" + QUOTED_CALL},
    }
    results = asyncio.run(engine(server.uds, {rid: c for rid, c in cases.items() if "tools_json" not in c}))
    results["empty-array"] = asyncio.run(engine_with_tools_json(server.uds, cases["empty-array"], "[ ]"))
    called = [("get_weather", {"city": "Paris"})]
    for rid in ("no-tools", "empty-array", "reasoning"):
        result = results[rid]
        assert (result.content, result.calls, result.finish_reason) == (QUOTED_CALL, {}, ""), rid
    assert results["reasoning"].reasoning == "hmm"
    for rid in ("tools", "named"):
        result = results[rid]
        assert result.content == "Hermes format looks like this: ", rid
        assert [(c["name"], json.loads(c["arguments"])) for c in result.calls.values()] == called, rid
        assert result.finish_reason == "tool_calls", rid


async def engine_with_tools_json(target: str, case: dict, tools_json: str) -> Result:
    """One case opened with `tools_json` as given (text the case's `tools` cannot spell)."""
    async with grpc.aio.insecure_channel(target) as channel:
        call = preprocessor_pb2_grpc.PreprocessorStub(channel).ParseStream()
        opened = open_request("r", case, case.get("served_model", case["model"]))
        opened.open.tools_json = tools_json
        await call.write(opened)
        assert not (await call.read()).deltas
        result = Result()
        await call.write(pb.ParseStreamRequest(step=pb.Step(items=[
            pb.StepTokens(request_id="r", token_ids=output_ids(case), finished=True)])))
        for d in (await call.read()).deltas:
            absorb(result, d)
        await call.done_writing()
        return result


def test_a_json_answer_without_tools_streams_as_it_is_generated(server: LiveServer) -> None:
    """Llama 3's default (llama3_json) reads an untagged JSON object at the start as a call, so it
    holds the object back until it closes; without tools nothing is a call and the text streams,
    however long the answer (held back, ~1 MiB was RESOURCE_EXHAUSTED)."""
    ids = encode("llama3", '{"name": "Alice", "bio": "') + encode("llama3", " lorem") * 300 + encode("llama3", '"}')

    async def scenario(tools_json: str) -> list[pb.ParseStreamResponse]:
        async with grpc.aio.insecure_channel(server.uds) as channel:
            call = preprocessor_pb2_grpc.PreprocessorStub(channel).ParseStream()
            await call.write(pb.ParseStreamRequest(open=pb.OpenRequest(request_id="r", model="llama3",
                                                                       tools_json=tools_json)))
            assert not (await call.read()).deltas
            answers = []
            for k, token in enumerate(ids):
                await call.write(pb.ParseStreamRequest(step=pb.Step(items=[
                    pb.StepTokens(request_id="r", token_ids=[token], finished=k == len(ids) - 1)])))
                answers.append(await call.read())
            await call.done_writing()
            return answers

    answers = asyncio.run(scenario(""))
    streamed = [k for k, a in enumerate(answers) if any(d.content for d in a.deltas)]
    assert streamed[0] < 10 and len(streamed) > len(ids) // 2
    assert "".join(d.content for a in answers for d in a.deltas) == hf_tokenizer("llama3").decode(ids)
    assert not any(d.tool_calls for a in answers for d in a.deltas)
    # With tools the model's parser holds the object back until it closes, as before.
    with_tools = asyncio.run(scenario(json.dumps(WEATHER)))
    assert not any(d.content or d.tool_calls for a in with_tools[:-1] for d in a.deltas)
