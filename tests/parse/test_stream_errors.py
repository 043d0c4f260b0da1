"""Per-request failures on a ParseStream multiplexer: each bad request gets its own error and
the others go on; limits give RESOURCE_EXHAUSTED; cancel frees state."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest

from tests.conftest import require_shared_models
from tests.parse.harness import encode, parse_model
from sidecar.backend import Deferred, ParseLimits, ParseOpenConfig
from sidecar.factory import get_backend
from sidecar.errors import InvalidArgument, ResourceExhausted
from sidecar.v1 import preprocessor_pb2 as pb

CONFIG = ParseOpenConfig(tool_parser="hermes")


def deltas(answer: bytes) -> dict[str, pb.RequestDelta]:
    return {d.request_id: d for d in pb.ParseStreamResponse.FromString(answer).deltas}


def step(mux, items: list[tuple[str, list[int], bool]]) -> dict[str, pb.RequestDelta]:  # noqa: ANN001
    return deltas(mux.handle(message(items)))


@contextmanager
def mux_with(limits: ParseLimits, names: list[str]) -> Iterator:
    """A mux with `limits` and a qwen3 request open under each of `names`."""
    require_shared_models()
    mux = get_backend("native").new_parse_mux(limits)
    try:
        model = parse_model("qwen3")
        for name in names:
            mux.open(model, name, "fp", CONFIG, [])
        yield mux
    finally:
        mux.close()


@pytest.fixture
def env():  # noqa: ANN201
    require_shared_models()
    mux = get_backend("native").new_parse_mux(ParseLimits(max_requests=3))
    yield mux, parse_model("qwen3")
    mux.close()


@pytest.mark.models
def test_bad_items_fail_alone(env) -> None:  # noqa: ANN001
    mux, model = env
    mux.open(model, "good", "fp", CONFIG, [])
    mux.open(model, "bad", "fp", CONFIG, [])
    hello = encode("qwen3", "Hello")
    out = step(mux, [("good", hello, False), ("bad", [10**9], False), ("ghost", hello, False)])
    assert out["good"].content == "Hello" and not out["good"].HasField("error")
    assert out["good"].fingerprint == "fp"
    assert out["bad"].error.code == 3 and "10000000" in out["bad"].error.message and out["bad"].finished
    assert out["ghost"].error.code == 5 and "ghost" in out["ghost"].error.message
    again = step(mux, [("bad", hello, False), ("good", encode("qwen3", " world"), True)])
    assert again["bad"].error.code == 9, "a failed request is finished"
    assert again["good"].content == " world" and again["good"].finished and again["good"].fingerprint == ""
    after = step(mux, [("good", hello, False)])
    assert after["good"].error.code == 9 and "already finished" in after["good"].error.message
    assert len(mux) == 0


@pytest.mark.models
def test_too_many_ids_in_one_step_and_ids_above_32_bits_fail_their_request() -> None:
    require_shared_models()
    mux = get_backend("native").new_parse_mux(ParseLimits(max_step_ids=4))
    try:
        model = parse_model("qwen3")
        for rid in ("long", "wide", "fine"):
            mux.open(model, rid, "fp", CONFIG, [])
        hello = encode("qwen3", "Hello")
        # "wide" carries a packed varint of 2^32, which protobuf would read as id 0.
        wide = b"\x0a\x04wide\x12\x05\x80\x80\x80\x80\x10"
        items = [pb.StepTokens(request_id="long", token_ids=hello * 5).SerializeToString(), wide,
                 pb.StepTokens(request_id="fine", token_ids=hello).SerializeToString()]
        step_bytes = b"".join(b"\x0a" + bytes([len(i)]) + i for i in items)
        out = deltas(mux.handle(b"\x12" + bytes([len(step_bytes)]) + step_bytes))
        assert out["long"].error.code == 8 and "--max-token-ids" in out["long"].error.message, out["long"]
        assert out["wide"].error.code == 3 and out["wide"].error.message.startswith("step.items.token_ids[0]: 4294967296")
        assert out["fine"].content == "Hello" and len(mux) == 1
    finally:
        mux.close()


@pytest.mark.models
def test_open_errors(env) -> None:  # noqa: ANN001
    mux, model = env
    with pytest.raises(InvalidArgument, match="tool_parser"):
        mux.open(model, "a", "fp", ParseOpenConfig(tool_parser="nope"), [])
    with pytest.raises(InvalidArgument, match="reasoning_parser"):
        mux.open(model, "a", "fp", ParseOpenConfig(reasoning_parser="nope"), [])
    with pytest.raises(InvalidArgument, match="harmony"):
        mux.open(model, "a", "fp", ParseOpenConfig(tool_parser="hermes", reasoning_parser="openai"), [])
    with pytest.raises(InvalidArgument, match="tools_json"):
        mux.open(model, "a", "fp", ParseOpenConfig(tools_json="{not json"), [])
    with pytest.raises(InvalidArgument, match="chat_template_kwargs_json"):
        mux.open(model, "a", "fp", ParseOpenConfig(chat_template_kwargs_json="[1]"), [])
    with pytest.raises(InvalidArgument, match="prompt_token_ids"):
        mux.open(model, "a", "fp", ParseOpenConfig(), [1, 10**9])
    with pytest.raises(InvalidArgument, match="request_id"):
        mux.open(model, "", "fp", ParseOpenConfig(), [])
    mux.open(model, "a", "fp", ParseOpenConfig(), [])
    # The refusal is an error delta for "a", which says "a" is finished and freed: the open "a"
    # ends with it, and its id may be opened again.
    with pytest.raises(InvalidArgument, match="already open on this stream; that request is ended too"):
        mux.open(model, "a", "fp", ParseOpenConfig(), [])
    assert len(mux) == 0
    assert step(mux, [("a", encode("qwen3", "Hi"), False)])["a"].error.code == 9
    mux.open(model, "a", "fp", ParseOpenConfig(), [])
    mux.open(model, "b", "fp", ParseOpenConfig(), [])
    mux.open(model, "c", "fp", ParseOpenConfig(), [])
    with pytest.raises(ResourceExhausted, match=r"open requests, the limit \(--parse-max-requests\)"):
        mux.open(model, "d", "fp", ParseOpenConfig(), [])
    assert len(mux) == 3


@pytest.mark.models
def test_cancel_frees_and_is_idempotent(env) -> None:  # noqa: ANN001
    mux, model = env
    mux.open(model, "a", "fp", CONFIG, [])
    cancel = pb.ParseStreamRequest(cancel=pb.CancelRequest(request_id="a")).SerializeToString()
    assert mux.handle(cancel) == b""
    assert len(mux) == 0
    assert mux.handle(cancel) == b""
    assert step(mux, [("a", [1], False)])["a"].error.code == 9
    mux.open(model, "a", "fp", CONFIG, [])  # the id can be reused
    assert step(mux, [("a", encode("qwen3", "hi"), True)])["a"].content == "hi"


@pytest.mark.models
def test_held_back_limit(env) -> None:  # noqa: ANN001
    mux, model = env
    mux.open(model, "a", "fp", replace(CONFIG, max_held_bytes=64), [])
    mux.open(model, "b", "fp", CONFIG, [])
    # An undecided tool call (no name yet) is held back until it is decided.
    opening = encode("qwen3", '<tool_call>{"note": "')
    first = step(mux, [("a", opening, False), ("b", encode("qwen3", "ok"), False)])
    assert "a" not in first
    filler = encode("qwen3", "x" * 200)
    out = step(mux, [("a", filler, False), ("b", encode("qwen3", "!"), False)])
    assert out["a"].error.code == 8 and "holds back" in out["a"].error.message
    assert "--parse-max-held-kb" in out["a"].error.message
    assert out["b"].content == "!"


@pytest.mark.models
def test_tokens_with_no_text_count_toward_the_held_back_limit(env) -> None:  # noqa: ANN001
    """A skipped special token waits in the attribution ledger for the text before it to be decided;
    with none decided yet they waited without bound (40M of them took 1.5 GB, no status)."""
    mux, model = env
    end_of_text = 151643  # <|endoftext|>, skipped as a special token
    mux.open(model, "a", "fp", replace(CONFIG, reasoning_parser="qwen3", max_held_bytes=4096), [])
    out = step(mux, [("a", [end_of_text] * 10_000, False)])
    assert out["a"].error.code == 8 and "--parse-max-held-kb" in out["a"].error.message


@pytest.mark.models
def test_request_ids_are_bounded_and_shown_cut(env) -> None:  # noqa: ANN001
    """An id is kept for every recently finished request and echoed in answers and logs: 8 MB
    ones took the server from 371 to 916 MB over 40 open and cancel pairs."""
    mux, model = env
    with pytest.raises(InvalidArgument, match="open.request_id: 1025 bytes, more than 1024"):
        mux.open(model, "x" * 1025, "fp", CONFIG, [])
    ghost = "\x01" * 100_000  # escapes to 4 bytes each in a message
    message = step(mux, [(ghost, [1], False)])[ghost].error.message
    assert len(message) < 300 and "(100000 bytes)" in message


@pytest.mark.models
def test_stop_strings_cannot_name_the_parsers_marker_characters(env) -> None:  # noqa: ANN001
    """Marker tokens reach the parsers as noncharacters U+FDD0..U+FDEF: a stop string holding one
    ended a request at `</think>` (U+FDD1), reporting that string as matched."""
    mux, model = env
    with pytest.raises(InvalidArgument, match=r"stop\[1\]: holds a noncharacter"):
        mux.open(model, "a", "fp", replace(CONFIG, stop=("ok", "\ufdd1")), [])


@pytest.mark.models
def test_an_answer_over_the_message_limit_fails_its_request_alone() -> None:
    """gRPC refuses an answer over --max-message-mb by ending the stream, with every request on it
    (a 3 MB step of long tokens made a 128 MB answer); the request it comes from fails alone."""
    with mux_with(ParseLimits(max_delta_bytes=2400), ["big", "small"]) as mux:
        out = step(mux, [("big", encode("qwen3", "word " * 600), False), ("small", encode("qwen3", "ok"), False)])
        assert out["big"].error.code == 8 and "--max-message-mb" in out["big"].error.message and out["big"].finished
        assert "answer to this step is" in out["big"].error.message
        assert out["small"].content == "ok"


@pytest.mark.models
def test_answers_that_together_pass_the_message_limit_fail_the_requests_that_do_not_fit() -> None:
    """Each request's delta under the limit, their sum over it: gRPC would end the stream (a step
    finishing 100 requests of 1 MB each, as a batch of non-streaming parses does, is a 100 MB
    answer). The requests whose deltas still fit get them; the others fail, naming the flag."""
    names = [f"r{i}" for i in range(6)]
    with mux_with(ParseLimits(max_delta_bytes=6000), names) as mux:
        ids = encode("qwen3", "word " * 300)  # a 1.5 KB delta each
        message = pb.ParseStreamRequest(step=pb.Step(items=[
            pb.StepTokens(request_id=name, token_ids=ids, finished=False) for name in names]))
        raw = mux.handle(message.SerializeToString())
        assert len(raw) <= 6000
        out = deltas(raw)
        # Requests are fitted in order; a failed one's error takes less than the room kept for it,
        # so a later one may fit again.
        fit = [name for name in names if not out[name].HasField("error")]
        failed = [name for name in names if name not in fit]
        assert fit[:2] == names[:2] and failed
        assert all(out[name].content == "word " * 300 for name in fit)
        for name in failed:
            assert out[name].error.code == 8 and out[name].finished
            assert "--max-message-mb" in out[name].error.message and "leave" in out[name].error.message
        # The failed requests are gone; the ones that fit go on.
        out = step(mux, [(fit[0], encode("qwen3", " ok"), True), (failed[0], [], False)])
        assert out[fit[0]].content == " ok" and out[fit[0]].finished
        assert out[failed[0]].error.code == 9  # FAILED_PRECONDITION: it already finished


@pytest.mark.models
def test_room_kept_for_errors_is_given_back_as_requests_are_answered() -> None:
    """Room for an error to every request of a step was kept until the end of the step: 30 small
    deltas (a 7 KB answer) all failed under a 20 KB limit."""
    names = [f"r{i}" for i in range(30)]
    with mux_with(ParseLimits(max_delta_bytes=20_000), names) as mux:
        out = step(mux, [(name, encode("qwen3", "ok"), False) for name in names])
        assert {name: (out[name].content, out[name].HasField("error")) for name in names} == {
            name: ("ok", False) for name in names}


@pytest.mark.models
def test_a_step_naming_more_requests_than_a_stream_may_open_is_refused(env) -> None:  # noqa: ANN001
    """Each item may need an error answer, and those alone could pass the message limit (5 wire
    bytes for an unknown id, ~75 for its error)."""
    mux, _ = env  # max_requests=3
    message = pb.ParseStreamRequest(step=pb.Step(items=[pb.StepTokens(request_id=f"u{i}") for i in range(4)]))
    with pytest.raises(ResourceExhausted, match=r"step.items: 4 items, more than the 3 .*--parse-max-requests"):
        mux.handle(message.SerializeToString())
    assert set(step(mux, [(f"u{i}", [], False) for i in range(3)])) == {"u0", "u1", "u2"}


@pytest.mark.models
def test_a_step_whose_error_answers_alone_could_pass_the_message_limit_is_refused() -> None:
    """Room for an error answer is kept for every item (~512 bytes, its id and its fingerprint):
    under a small --max-message-mb, enough items could make an all-error answer gRPC refuses, ending
    the stream with no word of why. Such a step is refused naming the flags; one that fits is
    answered within the limit even when every item fails."""
    limit = 2000
    with mux_with(ParseLimits(max_delta_bytes=limit), ["a"]) as mux:
        ghosts = [("g" * 200 + str(i), [], False) for i in range(3)]  # 3 x ~712 bytes reserved
        message = pb.ParseStreamRequest(step=pb.Step(items=[
            pb.StepTokens(request_id=name, token_ids=ids, finished=done) for name, ids, done in ghosts]))
        with pytest.raises(ResourceExhausted, match=r"step.items: error answers to its 3 items .*--max-message-mb"):
            mux.handle(message.SerializeToString())
        message = pb.ParseStreamRequest(step=pb.Step(items=[
            pb.StepTokens(request_id=name, token_ids=ids, finished=done) for name, ids, done in ghosts[:2]]))
        raw = mux.handle(message.SerializeToString())
        assert len(raw) <= limit
        assert {name: answer.error.code for name, answer in deltas(raw).items()} == {ghosts[0][0]: 5, ghosts[1][0]: 5}
        assert step(mux, [("a", encode("qwen3", "ok"), False)])["a"].content == "ok"


@pytest.mark.models
def test_a_step_costs_the_text_held_by_the_requests_it_names() -> None:
    """The server runs a small step inline on its event loop; any step may release all a request
    holds back (the engine finishing it, a stop string its tokens complete, a closer deciding what
    a parser waits on), and reads it whole (200 requests holding 400 KB each: 0.5 s on the loop for
    a 2 KB step). Its cost counts that text."""
    with mux_with(ParseLimits(), []) as mux:
        waits = {"a": 5_000, "b": 7_000, "quiet": 0}
        held = {}
        for name, size in waits.items():
            mux.open(parse_model("qwen3"), name, "fp", replace(CONFIG, stop=("QQ",)), [])
            step(mux, [(name, encode("qwen3", "<tool_call>" + " " * size), False)])  # undecided: held
            held[name] = mux.handle(message([(name, [], False)]), within=0).cost - len(message([(name, [], False)]))
        assert held["a"] >= waits["a"] and held["b"] >= waits["b"] and held["quiet"] < 100

        def cost(items: list[tuple[str, list[int], bool]]) -> tuple[int, int]:
            """The step's cost as its deferral by a budget of 0 gives it, and its length."""
            deferred = mux.handle(message(items), within=0)
            assert isinstance(deferred, Deferred), deferred
            return deferred.cost, len(message(items))

        one = [87]
        for items in ([("a", one, False), ("b", one, False)], [("a", one, True)], [("quiet", one, False)]):
            total, size = cost(items)
            assert total == size + sum(held[name] for name, _, _ in items), items
        # Tokens that complete the stop string release what "a" and "b" hold, unfinished: priced as
        # such, and deferred by a budget under it; given its cost, handled.
        stop = [(name, encode("qwen3", "QQ"), False) for name in ("a", "b")]
        total, size = cost(stop)
        assert total == size + held["a"] + held["b"]
        assert isinstance(mux.handle(message(stop), within=total - 1), Deferred)
        answer = mux.handle(message(stop), within=total)
        assert isinstance(answer, bytes)
        out = deltas(answer)
        assert out["a"].finished and out["b"].finished and out["a"].finish_reason == "stop"
        with pytest.raises(InvalidArgument):  # not a message: refused whatever the budget
            mux.handle(b"\xff", within=0)


def message(items: list[tuple[str, list[int], bool]]) -> bytes:
    return pb.ParseStreamRequest(
        step=pb.Step(items=[pb.StepTokens(request_id=r, token_ids=ids, finished=f) for r, ids, f in items])
    ).SerializeToString()


@pytest.mark.models
def test_malformed_messages(env) -> None:  # noqa: ANN001
    mux, model = env
    with pytest.raises(InvalidArgument):
        mux.handle(b"\x12\xff\xff\xff")
    with pytest.raises(InvalidArgument):
        mux.handle(b"")
    opened = pb.ParseStreamRequest(open=pb.OpenRequest(request_id="x", model="qwen3")).SerializeToString()
    assert mux.handle(opened) is None


@pytest.mark.models
def test_non_streaming_is_one_step(env) -> None:  # noqa: ANN001
    """A whole output in one finished step gives the same result as streaming it."""
    mux, model = env
    text = 'Hi <tool_call>{"name": "f", "arguments": {"a": [1, 2]}}</tool_call> bye'
    ids = encode("qwen3", text)
    mux.open(model, "whole", "fp", CONFIG, encode("qwen3", "<think>\n\n</think>\n\n"))
    whole = step(mux, [("whole", ids, True)])["whole"]
    assert whole.content == "Hi  bye" and whole.finish_reason == "tool_calls"
    assert [(c.index, c.name, c.arguments) for c in whole.tool_calls] == [(0, "f", '{"a": [1, 2]}')]
    assert whole.completion_tokens == len(ids)


@pytest.mark.models
@pytest.mark.parametrize("name", ["hermes" + "x" * 3_000_000, "y" * 3_000_000])
def test_a_long_parser_name_is_refused_quickly_and_shown_cut(env, name: str) -> None:  # noqa: ANN001
    """The refusal quoted the whole name and looked for close matches by an edit distance costing
    the product of the lengths: a 30 MB name took seconds of a native call (here 3 MB)."""
    mux, model = env
    started = time.perf_counter()
    with pytest.raises(InvalidArgument) as refused:
        mux.open(model, "a", "fp", replace(CONFIG, tool_parser=name), [])
    elapsed = time.perf_counter() - started
    message = refused.value.message
    assert message.startswith(f'tool_parser: unknown tool parser "{name[:200]}"... ({len(name)} characters)')
    assert len(message) < 1000 and elapsed < 0.5, (len(message), elapsed)
    # A name one of the registered names begins still finds it (the distance is the difference in length).
    assert ("close matches: hermes" in message) == name.startswith("hermes")
