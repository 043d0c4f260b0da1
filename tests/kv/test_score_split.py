"""`split_score` (the native split of a KvRouter ScoreRequest's token ids) against the server's own
protobuf parser on seeded random and mutated messages: requests concatenated so that the oneof
changes hands and `token_ids` occurrences merge, ids packed and unpacked, members with a wire type
they cannot have, unknown fields and groups, ids of 2^32 and more."""

from __future__ import annotations

import random

import pytest
from google.protobuf.message import DecodeError

from sidecar.errors import InvalidArgument
from sidecar.v1 import kv_router_pb2 as kv
from sidecar.v1 import preprocessor_pb2 as pb

split_score = pytest.importorskip("sidecar.native.kv_index").split_score


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number: int, wire: int, payload: bytes) -> bytes:
    """A field's key and payload; a length-delimited payload gets its length."""
    return varint(number << 3 | wire) + (varint(len(payload)) + payload if wire == 2 else payload)


def token_id(rng: random.Random, wide: bool = False) -> int:
    top = 64 if wide and rng.random() < 0.5 else 32
    return rng.choice([0, 1, 127, 128, 2**32 - 1, rng.getrandbits(rng.randrange(1, top + 1))])


def raw_token_ids(rng: random.Random) -> bytes:
    """A `token_ids` member written by hand: ids packed and unpacked (some above 2^32-1), an
    unknown field or an id of the wrong wire type among them."""
    inner = b""
    for _ in range(rng.randrange(4)):
        kind = rng.randrange(4)
        if kind == 0:
            inner += field(1, 2, b"".join(varint(token_id(rng, True)) for _ in range(rng.randrange(5))))
        elif kind == 1:
            inner += field(1, 0, varint(token_id(rng, True)))
        elif kind == 2:
            inner += field(1, 5, bytes(4))
        else:
            inner += field(rng.choice([2, 99]), 0, varint(rng.randrange(300)))
    return field(4, 2, inner)


def oddity(rng: random.Random) -> bytes:
    """A field the generated types do not write: a member with the wrong wire type, an unknown
    field or group."""
    return rng.choice([
        field(4, 0, varint(5)), field(2, 5, bytes(4)), field(3, 1, bytes(8)), field(15, 0, varint(2)),
        field(99, 2, b"xy"), varint(4 << 3 | 3) + field(1, 0, b"\x01") + varint(4 << 3 | 4),
        varint(20 << 3 | 3) + varint(20 << 3 | 4),
    ])


def random_request(rng: random.Random) -> bytes:
    request = kv.ScoreRequest(
        model=rng.choice(["", "m", "qwen3"]), lora_name=rng.choice(["", "l"]), cache_salt=rng.choice(["", "s"]),
        tools_json=rng.choice(["", "[]"]), chat_template_kwargs_json=rng.choice(["", "{}"]),
    )
    if rng.random() < 0.3:
        request.add_special_tokens = rng.random() < 0.5
    for _ in range(rng.randrange(2)):
        request.mm_items.add(identifier=rng.choice(["", "img"]), offset=rng.randrange(100), length=rng.randrange(100))
    kind = rng.randrange(4)
    if kind == 1:
        request.text = rng.choice(["", "hi", "é漢🤔"])
    elif kind == 2:
        request.messages_json = rng.choice(["", "[]"])
    elif kind == 3:
        request.token_ids.CopyFrom(pb.TokenIds(token_ids=[token_id(rng) for _ in range(rng.randrange(20))]))
    return request.SerializeToString()


def random_message(rng: random.Random) -> bytes:
    parts = [rng.choice([random_request, random_request, raw_token_ids, oddity])(rng) for _ in range(rng.randrange(1, 5))]
    message = bytearray(b"".join(parts))
    for _ in range(rng.choice([0, 0, 1, 2])):
        kind = rng.randrange(3)
        if kind == 0 and message:
            message[rng.randrange(len(message))] = rng.randrange(256)
        elif kind == 1:
            del message[rng.randrange(len(message) + 1):]
        else:
            message.append(rng.randrange(256))
    return bytes(message)


def test_split_score_reads_what_protobuf_reads() -> None:
    rng = random.Random(0x5C02E)
    counts = {"token_ids": 0, "other": 0, "refused": 0, "malformed": 0}
    for case in range(6000):
        message = random_message(rng)
        try:
            whole = kv.ScoreRequest.FromString(message)
        except DecodeError:
            whole = None
        try:
            split = split_score(message)
        except InvalidArgument as e:
            assert whole is None, f"case {case}: protobuf reads {message!r}, the split refused it: {e}"
            counts["malformed"] += 1
            continue
        if whole is None:
            # Not refused by the split (a malformed field it copies as is): then the rest it gives
            # does not decode either, and the server answers from the whole message.
            if split is not None:
                with pytest.raises(DecodeError):
                    kv.ScoreRequest.FromString(split[0])
            counts["malformed"] += 1
            continue
        if whole.WhichOneof("input") != "token_ids":
            assert split is None, f"case {case}: {message!r}"
            counts["other"] += 1
            continue
        assert split is not None, f"case {case}: {message!r}"
        rest, ids, refused = split
        read = list(whole.token_ids.token_ids)
        whole.ClearField("input")
        assert kv.ScoreRequest.FromString(rest).SerializeToString(deterministic=True) == \
            whole.SerializeToString(deterministic=True), f"case {case}: {message!r}"
        if refused is None:
            assert ids.tolist() == read, f"case {case}: {message!r}"
            counts["token_ids"] += 1
            continue
        # Protobuf truncates the id the split refuses by its position: the same position.
        at, value = refused.message.split("token_ids.token_ids[", 1)[1].split("]: ", 1)
        value = int(value.split(" ", 1)[0])
        assert value >= 2**32 and read[int(at)] == value & 0xFFFFFFFF, f"case {case}: {message!r}"
        assert all(i < 2**32 for i in read[: int(at)])
        counts["refused"] += 1
    assert min(counts.values()) > 50, counts


def test_the_oneof_is_read_as_protobuf_reads_it() -> None:
    def ids(*values: int) -> bytes:
        return kv.ScoreRequest(token_ids=pb.TokenIds(token_ids=values)).SerializeToString()

    text = kv.ScoreRequest(text="a").SerializeToString()
    messages = kv.ScoreRequest(messages_json="[]").SerializeToString()
    model = kv.ScoreRequest(model="m").SerializeToString()
    assert split_score(ids(1, 2) + text) is None
    assert split_score(ids(1, 2) + messages) is None
    assert split_score(model) is None
    rest, read, refused = split_score(ids(1) + text + model + ids(2) + ids() + ids(3, 4))
    assert (rest, read.tolist(), refused) == (model, [2, 3, 4], None)
    assert read.readonly and read.format == "I"
    # Unpacked ids merge with packed ones; a member of the wrong wire type is an unknown field.
    rest, read, _ = split_score(field(4, 0, varint(5)) + field(4, 2, field(1, 0, varint(7)) + field(1, 2, varint(300))))
    assert (rest, read.tolist()) == (field(4, 0, varint(5)), [7, 300])
    # An id protobuf would truncate is refused by its position in the merged ids.
    _, read, refused = split_score(ids(1) + field(4, 2, field(1, 2, varint(9) + varint(2**32))))
    assert len(read) == 0 and isinstance(refused, InvalidArgument)
    assert refused.message == "token_ids.token_ids[2]: 4294967296 is not a token id (token ids are below 2^32)"
    with pytest.raises(InvalidArgument, match="malformed ScoreRequest"):
        split_score(field(4, 2, b"\x0a\x01\x80"))
