"""Property-based tests of every RPC's fields against one real server (hypothesis).

Each RPC gets random requests: strings of every kind (empty, huge, control characters, markers,
random JSON and non-JSON text where JSON is expected), random ids (out of the vocabulary and up to
2^32-1), random flags and optional fields left unset. Every answer must be OK or one of the
documented codes (INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, FAILED_PRECONDITION,
DEADLINE_EXCEEDED), never UNKNOWN or INTERNAL; an error's message must name a field of the request
(or the server flag that sets the limit); and after every test the server still runs and answers
health checks. Lone surrogates cannot be sent through protobuf's Python API (it refuses them), so
they go as raw request bodies whose string fields hold surrogate code points in UTF-8 form.

Bounded: `SIDECAR_PROPERTY_EXAMPLES` examples per RPC (default 150), derandomized (the same inputs
every run, so CI is reproducible), each call with a deadline.
"""

from __future__ import annotations

import json
import os
from typing import Callable, Iterator

import grpc
import pytest

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from tests.kv.publisher import FakeEnginePublisher, stored  # noqa: E402
from sidecar import parsers  # noqa: E402
from sidecar.v1 import kv_router_pb2 as kv  # noqa: E402
from sidecar.v1 import kv_router_pb2_grpc as kv_grpc  # noqa: E402
from sidecar.v1 import preprocessor_pb2 as pb  # noqa: E402
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc  # noqa: E402
from tests.conftest import LiveServer, start_server, stop_server  # noqa: E402

pytestmark = pytest.mark.e2e

EXAMPLES = int(os.environ.get("SIDECAR_PROPERTY_EXAMPLES", "150"))
CALL_TIMEOUT = 30.0
BLOCK_SIZE = 16
VOCAB = 151_669  # the embedded Qwen3 vocabulary (ids 0..151668)

C = grpc.StatusCode
ALLOWED = {C.OK, C.INVALID_ARGUMENT, C.NOT_FOUND, C.RESOURCE_EXHAUSTED, C.FAILED_PRECONDITION, C.DEADLINE_EXCEEDED}
PROPERTY_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


# ---- the server ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine() -> Iterator[FakeEnginePublisher]:
    import zmq

    ctx = zmq.Context()
    pub = FakeEnginePublisher(ctx)
    yield pub
    pub.close()
    ctx.term()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, engine: FakeEnginePublisher) -> Iterator[LiveServer]:
    live = start_server(
        tmp_path_factory.mktemp("properties"),
        "--kv-events", f"worker-a={engine.endpoint},replay={engine.replay_endpoint},model=qwen3",
        "--kv-block-size", str(BLOCK_SIZE),
    )
    engine.wait_for_subscriber(30)
    ids = list(range(1000, 1000 + 4 * BLOCK_SIZE))
    engine.publish([stored([11, 12, 13, 14], ids, BLOCK_SIZE)])
    yield live
    stop_server(live)


@pytest.fixture(scope="module")
def channel(server: LiveServer) -> Iterator[grpc.Channel]:
    limit = 128 << 20
    ch = grpc.insecure_channel(server.tcp, options=[("grpc.max_send_message_length", limit),
                                                     ("grpc.max_receive_message_length", limit)])
    yield ch
    ch.close()


@pytest.fixture(autouse=True)
def still_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """After every test: the process runs and health says SERVING within 2 s."""
    yield
    if "server" not in request.fixturenames:
        return
    live: LiveServer = request.getfixturevalue("server")
    assert live.process.poll() is None, f"the server died:\n{live.log_path.read_text()[-4000:]}"
    with grpc.insecure_channel(live.uds) as ch:
        answer = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=2)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def field_names(descriptor) -> set[str]:  # noqa: ANN001 - a protobuf Descriptor
    """Every field name of a message type and of the message types inside it, and those types' names
    (a body that does not decode is refused by naming the message it should have been)."""
    names: set[str] = set()
    stack, seen = [descriptor], set()
    while stack:
        d = stack.pop()
        if d.full_name in seen:
            continue
        seen.add(d.full_name)
        names.add(d.name)
        for f in d.fields:
            names.add(f.name)
            names.add(f.name.removesuffix("_json"))  # `messages[0]: ...` names a JSON field's element
            if f.message_type is not None:
                stack.append(f.message_type)
    return names


def check_status(rpc: str, code: grpc.StatusCode, details: str, fields: set[str] | None) -> None:
    """The documented codes only; a server-made error names a field or the flag of its limit
    (`fields` None: any message)."""
    assert code in ALLOWED, f"{rpc}: {code.name} {details!r}"
    if code in (C.OK, C.DEADLINE_EXCEEDED) or fields is None:
        return
    if code == C.RESOURCE_EXHAUSTED and "max" in details.lower() and "message" in details.lower():
        return  # gRPC's own message-size limit, before the servicer runs
    assert "--" in details or any(name in details for name in fields), f"{rpc}: {code.name} names no field: {details!r}"


def call_unary(rpc: str, fn: Callable, request, fields: set[str]):  # noqa: ANN001, ANN201
    try:
        response = fn(request, timeout=CALL_TIMEOUT)
    except grpc.RpcError as e:
        check_status(rpc, e.code(), e.details() or "", fields)
        return None
    return response


# ---- strategies ----------------------------------------------------------------------------------

MARKERS = ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<|endoftext|>"]


def huge_text() -> st.SearchStrategy[str]:
    return st.builds(lambda piece, n: piece * n, st.sampled_from(["a", "é", "漢", "🙂", " ", "\n", "<|im_end|>", "ab "]),
                     st.sampled_from([1_000, 50_000, 400_000]))


def any_text(max_size: int = 200) -> st.SearchStrategy[str]:
    """Short text of any code point protobuf can carry, markers mixed in, and now and then huge."""
    plain = st.text(max_size=max_size)
    marked = st.lists(st.one_of(st.sampled_from(MARKERS), st.text(max_size=12)), max_size=8).map("".join)
    return st.one_of(plain, marked, st.just(""), st.just("\x00"), huge_text())


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                         st.floats(allow_nan=False), st.text(max_size=30))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                 st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                           max_leaves=12)


def message_objects() -> st.SearchStrategy[dict]:
    content = st.one_of(st.none(), any_text(80), st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url", "weird"]), "text": st.text(max_size=20)}), max_size=3), json_values)
    return st.fixed_dictionaries(
        {"role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool", "developer"]), st.text(max_size=8)),
         "content": content},
        optional={"tool_calls": st.lists(st.fixed_dictionaries({"id": st.text(max_size=9), "type": st.just("function"), "function": st.fixed_dictionaries(
            {"name": st.text(max_size=10), "arguments": st.one_of(st.text(max_size=20), json_values)})}), max_size=2),
            "reasoning_content": st.text(max_size=20), "name": st.text(max_size=8), "tool_call_id": st.text(max_size=9)})


def json_text(valid: st.SearchStrategy) -> st.SearchStrategy[str]:
    """JSON of the expected shape, JSON of any shape, or text that is not JSON at all."""
    return st.one_of(valid.map(json.dumps), json_values.map(json.dumps), any_text(60), st.just(""), st.just("{"),
                     st.just("[" * 300 + "]" * 300), st.just('{"a": NaN}'))


messages_json = json_text(st.lists(message_objects(), max_size=5))
tools_json = json_text(st.lists(st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": st.text(max_size=12), "parameters": json_values})}), max_size=3))
kwargs_json = json_text(st.dictionaries(st.sampled_from(["enable_thinking", "thinking", "tools", "x", "messages"]), json_values,
                                        max_size=3))
token_id = st.one_of(st.integers(0, VOCAB - 1), st.integers(0, 2**32 - 1), st.sampled_from([VOCAB, VOCAB - 1, 2**32 - 1, 0]))
token_ids = st.one_of(st.lists(token_id, max_size=64), st.builds(lambda n, i: [i] * n, st.sampled_from([10_000, 200_000]),
                                                                 st.integers(0, VOCAB - 1)))
models = st.one_of(st.sampled_from(["qwen3", "", "nope", "QWEN3", "qwen3 "]), st.text(max_size=12))
optional_bool = st.one_of(st.none(), st.booleans())
uint32 = st.one_of(st.integers(0, 64), st.integers(0, 2**32 - 1))


def set_optional(message, **fields) -> None:  # noqa: ANN001
    for name, value in fields.items():
        if value is not None:
            setattr(message, name, value)


block_hashing = st.one_of(st.none(), st.builds(
    lambda algorithm, block_size, seed, salt, lora, extra, mm: pb.BlockHashing(
        algorithm=algorithm, block_size=block_size, cache_salt=salt, lora_name=lora, vllm_extra_keys=extra,
        mm_items=mm, **({} if seed is None else {"seed": seed})),
    st.one_of(st.sampled_from(["vllm_sha256_cbor", "vllm_sha256", "vllm_xxhash", "sglang", "dynamo", ""]), st.text(max_size=10)),
    uint32, st.one_of(st.none(), st.text(max_size=10)), st.text(max_size=10), st.text(max_size=10),
    st.one_of(st.just(""), json_text(st.lists(json_values, max_size=2))),
    st.lists(st.builds(pb.MultimodalItem, identifier=st.text(max_size=10), offset=st.integers(0, 2**64 - 1),
                       length=st.integers(0, 2**64 - 1)), max_size=2)))


# ---- unary RPCs ----------------------------------------------------------------------------------

TOKENIZE_FIELDS = field_names(pb.TokenizeRequest.DESCRIPTOR)
DETOKENIZE_FIELDS = field_names(pb.DetokenizeRequest.DESCRIPTOR)
RENDER_FIELDS = field_names(pb.RenderRequest.DESCRIPTOR)
SCORE_FIELDS = field_names(kv.ScoreRequest.DESCRIPTOR)


def test_tokenize_fields(channel: grpc.Channel) -> None:
    stub = pb_grpc.PreprocessorStub(channel)

    @PROPERTY_SETTINGS
    @given(model=models, texts=st.lists(any_text(), max_size=4), add_special=optional_bool, offsets=st.booleans(),
           tokens=st.booleans(), max_length=uint32, hashing=block_hashing)
    def check(model, texts, add_special, offsets, tokens, max_length, hashing) -> None:  # noqa: ANN001
        request = pb.TokenizeRequest(model=model, texts=texts, return_offsets=offsets, return_tokens=tokens,
                                     max_length=max_length)
        set_optional(request, add_special_tokens=add_special)
        if hashing is not None:
            request.block_hashing.CopyFrom(hashing)
        response = call_unary("Tokenize", stub.Tokenize, request, TOKENIZE_FIELDS)
        if response is not None:
            assert len(response.encodings) == len(texts)
            for e in response.encodings:
                assert all(i < VOCAB for i in e.token_ids)
                assert max_length == 0 or len(e.token_ids) <= max_length

    check()


def test_detokenize_fields(channel: grpc.Channel) -> None:
    stub = pb_grpc.PreprocessorStub(channel)

    @PROPERTY_SETTINGS
    @given(model=models, sequences=st.lists(token_ids, max_size=4), skip=optional_bool)
    def check(model, sequences, skip) -> None:  # noqa: ANN001
        request = pb.DetokenizeRequest(model=model, sequences=[pb.TokenIds(token_ids=s) for s in sequences])
        set_optional(request, skip_special_tokens=skip)
        response = call_unary("Detokenize", stub.Detokenize, request, DETOKENIZE_FIELDS)
        if response is not None:
            assert len(response.texts) == len(sequences)
            assert all(i < VOCAB for s in sequences for i in s), "an id outside the vocabulary was accepted"

    check()


def test_render_fields(channel: grpc.Channel) -> None:
    stub = pb_grpc.PreprocessorStub(channel)

    @PROPERTY_SETTINGS
    @given(model=models, messages=messages_json, tools=tools_json, documents=json_text(st.lists(json_values, max_size=2)),
           kwargs=kwargs_json, template=st.one_of(st.none(), st.sampled_from(["default", "tool_use", "nope"]),
                                                  st.just("{{ messages }}"), st.text(max_size=10)),
           gen=optional_bool, cont=st.booleans(), add_special=optional_bool, text=st.booleans(), ids=optional_bool,
           offsets=st.booleans(), bypass=st.booleans(), hashing=block_hashing)
    def check(model, messages, tools, documents, kwargs, template, gen, cont, add_special, text, ids, offsets, bypass,
              hashing) -> None:  # noqa: ANN001
        request = pb.RenderRequest(model=model, messages_json=messages, tools_json=tools, documents_json=documents,
                                   chat_template_kwargs_json=kwargs, continue_final_message=cont, return_text=text,
                                   return_offsets=offsets, bypass_cache=bypass)
        set_optional(request, chat_template=template, add_generation_prompt=gen, add_special_tokens=add_special,
                     return_token_ids=ids)
        if hashing is not None:
            request.block_hashing.CopyFrom(hashing)
        call_unary("Render", stub.Render, request, RENDER_FIELDS)

    check()


def test_list_models(channel: grpc.Channel) -> None:
    stub = pb_grpc.PreprocessorStub(channel)

    @PROPERTY_SETTINGS
    @given(st.binary(max_size=64))
    def check(unknown_fields: bytes) -> None:
        # ListModelsRequest has no fields: anything that decodes as unknown fields must be ignored.
        raw = b"\xfa\x3f" + len(unknown_fields).to_bytes(1, "big") + unknown_fields if len(unknown_fields) < 128 else b""
        call = channel.unary_unary("/sidecar.v1.Preprocessor/ListModels")
        try:
            answer = pb.ListModelsResponse.FromString(call(raw, timeout=CALL_TIMEOUT))
        except grpc.RpcError as e:
            check_status("ListModels", e.code(), e.details() or "", {"ListModelsRequest"})
            return
        assert [m.name for m in answer.models] == ["qwen3"]

    check()
    assert [m.name for m in stub.ListModels(pb.ListModelsRequest(), timeout=CALL_TIMEOUT).models] == ["qwen3"]


def test_score_fields(channel: grpc.Channel) -> None:
    stub = kv_grpc.KvRouterStub(channel)
    inputs = st.one_of(st.none(), st.tuples(st.just("text"), any_text()), st.tuples(st.just("messages_json"), messages_json),
                       st.tuples(st.just("token_ids"), token_ids))

    @PROPERTY_SETTINGS
    @given(model=models, which=inputs, lora=st.text(max_size=10), lora_path=st.text(max_size=10), salt=st.text(max_size=10),
           mm=st.lists(st.builds(pb.MultimodalItem, identifier=st.text(max_size=10), offset=st.integers(0, 2**64 - 1),
                                 length=st.integers(0, 2**64 - 1)), max_size=3),
           add_special=optional_bool, tools=tools_json, kwargs=kwargs_json)
    def check(model, which, lora, lora_path, salt, mm, add_special, tools, kwargs) -> None:  # noqa: ANN001
        request = kv.ScoreRequest(model=model, lora_name=lora, lora_path=lora_path, cache_salt=salt, mm_items=mm,
                                  tools_json=tools, chat_template_kwargs_json=kwargs)
        set_optional(request, add_special_tokens=add_special)
        if which is not None:
            kind, value = which
            if kind == "token_ids":
                request.token_ids.CopyFrom(pb.TokenIds(token_ids=value))
            else:
                setattr(request, kind, value)
        response = call_unary("Score", stub.Score, request, SCORE_FIELDS)
        if response is not None:
            assert all(w.blocks <= len(response.block_hashes) for w in response.workers), response

    check()
    status = stub.KvStatus(kv.KvStatusRequest(), timeout=CALL_TIMEOUT)
    assert [m.model for m in status.models] == ["qwen3"]


# ---- ParseStream ---------------------------------------------------------------------------------

PARSE_FIELDS = field_names(pb.ParseStreamRequest.DESCRIPTOR)
REQUEST_IDS = st.sampled_from(["a", "b", "c", "", "a" * 300])
#: Every registered name (implemented or not: the latter are FAILED_PRECONDITION), and some that are not.
PARSERS = st.one_of(st.sampled_from(["", "none", "nope", *sorted({n for p in parsers.parsers() for n in p.names})]),
                    st.text(max_size=8))

open_messages = st.builds(
    lambda rid, model, tool, reasoning, tools, prompt, kwargs, skip, stop, include: pb.ParseStreamRequest(open=pb.OpenRequest(
        request_id=rid, model=model, tool_parser=tool, reasoning_parser=reasoning, tools_json=tools, prompt_token_ids=prompt,
        chat_template_kwargs_json=kwargs, stop=stop, include_stop_str_in_output=include,
        **({} if skip is None else {"skip_special_tokens": skip}))),
    REQUEST_IDS, st.one_of(st.just("qwen3"), models), PARSERS, PARSERS, tools_json, token_ids, kwargs_json, optional_bool,
    st.lists(any_text(20), max_size=3), st.booleans())
step_messages = st.builds(lambda items: pb.ParseStreamRequest(step=pb.Step(items=items)), st.lists(st.builds(
    lambda rid, ids, finished: pb.StepTokens(request_id=rid, token_ids=ids, finished=finished),
    REQUEST_IDS, token_ids, st.booleans()), max_size=4))
cancel_messages = st.builds(lambda rid: pb.ParseStreamRequest(cancel=pb.CancelRequest(request_id=rid)), REQUEST_IDS)
stream_messages = st.lists(st.one_of(open_messages, step_messages, cancel_messages, st.just(pb.ParseStreamRequest())),
                           min_size=1, max_size=8)


def run_stream(channel: grpc.Channel, messages: list[bytes]) -> tuple[list[pb.ParseStreamResponse], grpc.RpcError | None]:
    call = channel.stream_stream("/sidecar.v1.Preprocessor/ParseStream", response_deserializer=pb.ParseStreamResponse.FromString)
    answers = []
    try:
        for answer in call(iter(messages), timeout=CALL_TIMEOUT):
            answers.append(answer)
    except grpc.RpcError as e:
        return answers, e
    return answers, None


def check_stream(messages: list[bytes], answers: list[pb.ParseStreamResponse], error: grpc.RpcError | None) -> None:
    if error is not None:
        check_status("ParseStream", error.code(), error.details() or "", PARSE_FIELDS)
    else:
        assert len(answers) == len(messages), "every message gets exactly one answer"
    for answer in answers:
        for d in answer.deltas:
            if d.HasField("error"):
                assert d.finished, d
                assert d.error.code in {s.value[0] for s in ALLOWED if s != C.OK}, f"request error {d.error}"
                assert any(name in d.error.message for name in PARSE_FIELDS), f"names no field: {d.error.message!r}"


def test_parse_stream_sequences(channel: grpc.Channel) -> None:
    @PROPERTY_SETTINGS
    @given(stream_messages)
    def check(messages: list[pb.ParseStreamRequest]) -> None:
        raw = [m.SerializeToString() for m in messages]
        check_stream(raw, *run_stream(channel, raw))

    check()


# ---- raw bodies: lone surrogates and undecodable bytes --------------------------------------------


def surrogate_utf8(code: int) -> bytes:
    """A surrogate code point in UTF-8 form (what a client that does not validate would send)."""
    return bytes([0xED, 0xA0 | ((code >> 6) & 0x1F), 0x80 | (code & 0x3F)])


def string_field(number: int, value: bytes) -> bytes:
    assert len(value) < 128
    return bytes([(number << 3) | 2, len(value)]) + value


surrogate_strings = st.builds(lambda head, code, tail: head.encode() + surrogate_utf8(code) + tail.encode(),
                              st.text(max_size=10), st.integers(0xD800, 0xDFFF), st.text(max_size=10))

#: (RPC path, a string field number of its request).
UNARY_STRING_FIELDS = [
    ("/sidecar.v1.Preprocessor/Tokenize", 2),
    ("/sidecar.v1.Preprocessor/Detokenize", 1),
    ("/sidecar.v1.Preprocessor/Render", 2),
    ("/sidecar.v1.KvRouter/Score", 2),
]


def test_lone_surrogates_in_unary_requests(channel: grpc.Channel) -> None:
    @PROPERTY_SETTINGS
    @given(st.sampled_from(UNARY_STRING_FIELDS), surrogate_strings)
    def check(target: tuple[str, int], value: bytes) -> None:
        path, number = target
        try:
            channel.unary_unary(path)(string_field(number, value), timeout=CALL_TIMEOUT)
        except grpc.RpcError as e:
            check_status(path, e.code(), e.details() or "", None)

    check()


def test_lone_surrogates_in_parse_stream(channel: grpc.Channel) -> None:
    @PROPERTY_SETTINGS
    @given(surrogate_strings, st.sampled_from(["step", "cancel", "open"]))
    def check(value: bytes, kind: str) -> None:
        if kind == "step":
            body = string_field(2, string_field(1, string_field(1, value)))
        elif kind == "cancel":
            body = string_field(3, string_field(1, value))
        else:
            body = string_field(1, string_field(1, value))
        answers, error = run_stream(channel, [body])
        check_stream([body], answers, error)

    check()


def test_arbitrary_parse_stream_bytes(channel: grpc.Channel) -> None:
    @PROPERTY_SETTINGS
    @given(st.lists(st.binary(max_size=64), min_size=1, max_size=4))
    def check(bodies: list[bytes]) -> None:
        answers, error = run_stream(channel, bodies)
        check_stream(bodies, answers, error)

    check()
