"""Writes the seed corpora of the fuzz targets (native/fuzz/corpus/<target>/) from the project's
own test data, so every target starts from real cases: tests/data/parse (the hand-written parser
cases), tests/data/render (the conversation set and normalization cases), tests/data/tokenize
(the tokenizer corpus), tests/data/kv/events (recorded engine KV-event payloads) and the chat
templates of ../shared/models.

Run from the repository root with the project's venv: `.venv/bin/python native/fuzz/make_seeds.py`
(optionally followed by target names: only their folders are rewritten).
The layouts are documented in native/fuzz/src/<target>.rs; the parser and model lists are read
from the Rust sources so that the index bytes stay right when a list grows. Re-running replaces
the seed folders (libFuzzer's own finds go to target/fuzz-corpus/, never here). The parser lists
are the implemented rows of the registry (sidecar/parsers.json).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.conftest import require_shared_models  # noqa: E402

CORPUS = REPO / "native" / "fuzz" / "corpus"
DATA = REPO / "tests" / "data"


def rust_list(path: Path, name: str) -> list[str]:
    """The string items of `const NAME: &[&str] = &[...]` in a Rust file."""
    text = path.read_text()
    body = re.search(rf"{name}: &\[&str\] = &\[(.*?)\];", text, re.S)
    assert body, f"{name} not found in {path}"
    return re.findall(r'"([^"]*)"', body.group(1))


def implemented(kind: str) -> list[str]:
    """Canonical names of the implemented parsers of a kind, in registry order (the fuzz target's
    `registry::implemented`), from the registry's export."""
    rows = json.loads((REPO / "sidecar/parsers.json").read_text())["parsers"]
    return [r["name"] for r in rows if r["kind"] == kind and r["implemented"]]


def canonical(kind: str, name: str | None) -> str | None:
    """A case's parser name as the canonical name of its registry row."""
    if name in (None, "", "none"):
        return name
    rows = json.loads((REPO / "sidecar/parsers.json").read_text())["parsers"]
    return next(r["name"] for r in rows if r["kind"] == kind and (r["name"] == name or name in r["aliases"]))


TOOL_PARSERS = implemented("tool")
REASONING_PARSERS = implemented("reasoning")
PARSE_MODELS = rust_list(REPO / "native/fuzz/src/models.rs", "PARSE_MODELS")
_TEMPLATES_BLOCK = re.search(r"pub const TEMPLATES.*?\n\];", (REPO / "native/fuzz/src/render.rs").read_text(), re.S)
RENDER_TEMPLATES = len(re.findall(r'"(?:shared:|sidecar/)[^"]+"', _TEMPLATES_BLOCK.group(0)))


def parser_byte(names: list[str], name: str | None) -> int:
    return 0 if name in (None, "", "none") else names.index(name) + 1


def write(target: str, seeds: list[bytes]) -> None:
    folder = CORPUS / target
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for data in dict.fromkeys(seeds):
        (folder / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)
    print(f"{target}: {len(list(folder.iterdir()))} seeds")


def parse_cases() -> list[dict]:
    cases = []
    for path in sorted((DATA / "parse").glob("*/cases.json")):
        cases.extend(json.loads(path.read_text()))
    return cases


def session_seed(case: dict, chunk_seed: int) -> bytes | None:
    if case["model"] not in PARSE_MODELS or not isinstance(case.get("output"), str) or not isinstance(case.get("prompt"), str):
        return None
    flags = 0
    flags |= 1 if case.get("skip_special_tokens") is False else 0
    flags |= 2 if case.get("include_stop") else 0
    thinking = (case.get("kwargs") or {}).get("enable_thinking")
    flags |= {False: 4, True: 8}.get(thinking, 0)
    flags |= 0x20 if chunk_seed % 3 == 1 and case["model"] in ("qwen3", "gpt2") else 0
    header = bytes([
        parser_byte(TOOL_PARSERS, canonical("tool", case.get("tool_parser"))),
        parser_byte(REASONING_PARSERS, canonical("reasoning", case.get("reasoning_parser"))),
        flags,
        chunk_seed,
        PARSE_MODELS.index(case["model"]),
    ])
    stop = (case.get("stop") or [""])[0]
    tools = json.dumps(case["tools"]) if case.get("tools") else ""
    fields = [case["output"], case["prompt"], stop, tools]
    return header + b"\0".join(f.encode() for f in fields)


def wire_seeds(cases: list[dict]) -> list[bytes]:
    """Open + steps (3 tokens each) + a cancel, as length-prefixed ParseStreamRequest messages."""
    from tokenizers import Tokenizer

    from sidecar.v1 import preprocessor_pb2 as pb

    tok = Tokenizer.from_file(str(require_shared_models() / "qwen3" / "tokenizer.json"))
    seeds = []
    for n, case in enumerate(c for c in cases if c["model"] == "qwen3" and isinstance(c.get("output"), str)
                                 and isinstance(c.get("prompt"), str)):
        rid = f"r{n % 3}"
        prompt = tok.encode(case["prompt"], add_special_tokens=False).ids
        ids = tok.encode(case["output"], add_special_tokens=False).ids
        open_ = pb.OpenRequest(request_id=rid, model="qwen3", tool_parser=case.get("tool_parser", ""),
                               reasoning_parser=case.get("reasoning_parser", ""), prompt_token_ids=prompt[-40:],
                               tools_json=json.dumps(case["tools"]) if case.get("tools") else "",
                               stop=case.get("stop") or [])
        messages = [pb.ParseStreamRequest(open=open_)]
        for i in range(0, len(ids), 3):
            last = i + 3 >= len(ids)
            items = [pb.StepTokens(request_id=rid, token_ids=ids[i:i + 3], finished=last)]
            if n % 4 == 0:
                items.append(pb.StepTokens(request_id="other", token_ids=ids[i:i + 1]))
            messages.append(pb.ParseStreamRequest(step=pb.Step(items=items)))
        messages.append(pb.ParseStreamRequest(cancel=pb.CancelRequest(request_id=rid)))
        data = b""
        for m in messages:
            raw = m.SerializeToString()
            if len(raw) >= 255:
                break
            data += bytes([len(raw)]) + raw
        seeds.append(data)
    return seeds


def json_seeds(cases: list[dict]) -> list[bytes]:
    values = []
    for case in cases:
        for call in case["expect"].get("tool_calls", []):
            values.append(json.dumps(call["arguments"]))
    for path in sorted((DATA / "render" / "conversations").glob("*.json")):
        conv = json.loads(path.read_text())
        for tool in conv.get("tools") or []:
            values.append(json.dumps(tool.get("function", {}).get("parameters", {})))
    values += ['{"n": 123456789012345678901234567890, "f": 1E+100, "g": -0.0, "s": "\\ud83d\\ude00\\n"}',
               '{"a": [1, 2, {"b": null}], "a": true}', '{"x": NaN}', "[1, 2]", '"text"']
    seeds = []
    for i, v in enumerate(dict.fromkeys(values)):
        seeds.append(bytes([i % 4, i % 2]) + v.encode())
    return seeds


def render_seeds() -> list[bytes]:
    seeds = []
    for i, path in enumerate(sorted((DATA / "render" / "conversations").glob("*.json"))):
        conv = json.loads(path.read_text())
        flags = (1 if conv.get("add_generation_prompt", True) else 0) | (2 if conv.get("continue_final_message") else 0)
        if flags & 2:
            flags &= ~1
        fields = [json.dumps(conv["messages"]), json.dumps(conv["tools"]) if conv.get("tools") else "",
                  json.dumps(conv["documents"]) if conv.get("documents") else "",
                  json.dumps(conv["chat_template_kwargs"]) if conv.get("chat_template_kwargs") else ""]
        for template in (0, i % RENDER_TEMPLATES):
            seeds.append(bytes([template, flags]) + b"\0".join(f.encode() for f in fields))
    for case in json.loads((DATA / "render" / "normalize" / "cases.json").read_text()):
        raw = case["messages_raw"] if "messages_raw" in case else json.dumps(case["messages"])
        seeds.append(bytes([0, 1]) + raw.encode())
    return seeds


def template_seeds() -> list[bytes]:
    shared = require_shared_models()
    sources = [REPO / "sidecar/embedded/qwen3/chat_template.jinja", shared / "qwen3/chat_template.qwen3-coder.jinja",
               shared / "llama3/chat_template.jinja", shared / "gpt-oss/chat_template.jinja",
               shared / "mistral-nemo/chat_template.jinja", shared / "deepseek-v3/chat_template.jinja"]
    messages = json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Again"}])
    seeds = [p.read_bytes() + b"\0" + messages.encode() for p in sources]
    seeds += [b"{{ messages | tojson }}", b"{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
              b"{% set x = 'ab' %}{% for i in range(30) %}{% set x = x ~ x %}{% endfor %}{{ x }}",
              b"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", b"{{ raise_exception('no') }}",
              b"{{ strftime_now('%Y-%m-%d') }} {{ bos_token }}{{ (messages[0].content * 3).strip() }}"]
    return seeds


def detok_seeds() -> list[bytes]:
    corpus = json.loads((DATA / "tokenize" / "corpus.json").read_text())["cases"]
    seeds = []
    n = 0
    for texts in corpus.values():
        for text in texts:
            if not text:
                continue
            seeds.append(bytes([n % len(PARSE_MODELS), 0x10 | (n % 2) | (2 if n % 5 == 0 else 0), n % 7]) + text.encode())
            n += 1
    return seeds


KV_SEP = b"\xc1|\xc1"  # kv_events.rs SEP


def kv_event_seeds() -> list[bytes]:
    """kv_events: `flags snapshot_at` then payloads separated by KV_SEP (see kv_events.rs). Every
    recording alone under a few flag sets, all of them in one sequence (two and four workers,
    snapshot midway), and the same in the normalized encoding (flags bit 3) as router_adapter
    writes it."""
    import msgspec

    from router_adapter import events

    recordings = [p.read_bytes() for p in sorted((DATA / "kv" / "events").glob("*.msgpack"))]
    normalized = [msgspec.msgpack.encode(events.decode_batch(r)) for r in recordings]
    seeds = []
    for n, payload in enumerate(recordings):
        # Block size 16 (as recorded) with 1 and 2 workers, learned, eviction, 4-token blocks.
        for flags in (0x00, 0x10, 0x01, 0x04, 0x02):
            alg = (n % 4) << 6
            seeds.append(bytes([flags | alg, n]) + payload)
        seeds.append(bytes([0x08, n]) + normalized[n])
        # A payload twice: re-stores, and a snapshot between them.
        seeds.append(bytes([0x10, 1]) + payload + KV_SEP + payload)
    for flags, batches in ((0x10, recordings), (0x34, recordings), (0x18, normalized)):
        seeds.append(bytes([flags, len(batches) // 2]) + KV_SEP.join(batches))
    return seeds


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def score_split_seeds() -> list[bytes]:
    """score_split: raw KvRouter ScoreRequest bodies (see score_split.rs): token ids of every varint
    width, over several 64-byte windows, with the other fields; the other inputs; messages that
    merge (the oneof changing hands, ids concatenating); and hand-written ids protobuf's encoder
    never writes (padded varints, ids past 2^28 and past 2^32-1)."""
    import random

    from sidecar.v1 import kv_router_pb2 as kv
    from sidecar.v1 import preprocessor_pb2 as pb

    rng = random.Random(12)

    def ids_request(ids: list[int], **fields) -> bytes:
        return kv.ScoreRequest(model="qwen3", token_ids=pb.TokenIds(token_ids=ids), **fields).SerializeToString()

    def packed(*varints: bytes) -> bytes:
        body = b"".join(varints)
        inner = b"\x0a" + _varint(len(body)) + body
        return b"\x22" + _varint(len(inner)) + inner

    seeds = [
        ids_request([rng.randrange(151_000) for _ in range(20)]),
        ids_request([rng.randrange(151_000) for _ in range(120)], lora_name="a", cache_salt="s"),
        ids_request([rng.choice((0, 127, 128, 16_383, 16_384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**32 - 1))
                     for _ in range(80)]),
        ids_request([]),
        kv.ScoreRequest(model="m", text="hello world").SerializeToString(),
        kv.ScoreRequest(messages_json='[{"role": "user", "content": "hi"}]').SerializeToString(),
        kv.ScoreRequest(model="m", mm_items=[pb.MultimodalItem(identifier="img", offset=3, length=9)]).SerializeToString(),
        ids_request([5, 6, 7]) + kv.ScoreRequest(text="t").SerializeToString() + ids_request([8]),
        ids_request(list(range(0, 151_000, 997))) + ids_request([1, 2, 3]),
        packed(*(_varint(rng.randrange(151_000)) for _ in range(40)), b"\x81\x80\x80\x80\x00", _varint(9)),
        packed(*(_varint(rng.randrange(151_000)) for _ in range(30)), _varint(2**32), _varint(4)),
        packed(*(_varint(rng.randrange(128)) for _ in range(70)), b"\xff" * 9 + b"\x01"),
    ]
    return seeds


def main() -> None:
    """Every target's seeds, or only those of the targets named on the command line."""
    only = set(sys.argv[1:])
    cases = parse_cases() if not only or only & {"parse_session", "parse_wire", "json_args"} else []
    writers = {
        "parse_session": lambda: [s for i, c in enumerate(cases) if (s := session_seed(c, i % 256))],
        "parse_wire": lambda: wire_seeds(cases),
        "json_args": lambda: json_seeds(cases),
        "detok": detok_seeds,
        "render": render_seeds,
        "template_source": template_seeds,
        "kv_events": kv_event_seeds,
        "score_split": score_split_seeds,
    }
    unknown = only - writers.keys()
    assert not unknown, f"unknown targets: {sorted(unknown)}"
    for target, seeds in writers.items():
        if not only or target in only:
            write(target, seeds())


if __name__ == "__main__":
    main()
