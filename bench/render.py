"""Render benchmarks: chat template + tokenization, native against transformers in the same run.

(a) in-process: the native renderer (one native call, GIL released) against transformers'
    `apply_chat_template(tokenize=True)` on a short chat, an agentic request and a 100k-token
    document chat (Qwen3 tokenizer and template from ../shared/models);
(b) the same requests through the real server over a Unix socket (gRPC), p50/p99, and the peer
    vLLM Rust render server (`../shared/peers/vllm-rs.sh`) over HTTP when it starts here;
(c) a 30-turn conversation sent one turn longer per request, multi-turn cache on against off.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import replace
from pathlib import Path

from bench.common import Section, fmt_time, measure
from bench.peers import VllmRs
from bench.server import BenchServer

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SIDECAR_SHARED_MODELS", REPO.parent / "shared" / "models"))
MODEL = SHARED / "qwen3"

_WORDS = (
    "the model request server token cache prompt engine router latency throughput batch schedule memory "
    "kernel attention layer weight gradient vector matrix tensor sequence context window budget policy "
    "deploy cluster node replica shard region zone network packet socket stream buffer queue worker "
    "Paris Berlin Tokyo weather forecast rain sunny temperature celsius humidity wind pressure, and. of; to"
).split()


def prose(rng: random.Random, words: int) -> str:
    out = []
    for i in range(words):
        w = rng.choice(_WORDS)
        out.append(w.capitalize() if i % 17 == 0 else w)
        if i % 23 == 22:
            out.append("\n")
    return " ".join(out)


def tool(name: str, rng: random.Random) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": prose(rng, 25),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": prose(rng, 8)},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
                    "filters": {
                        "type": "object",
                        "properties": {"region": {"type": "string", "enum": ["eu", "us", "apac"]}, "score": {"type": "number", "minimum": 0.5}},
                    },
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["query"],
            },
        },
    }


def requests() -> dict[str, dict]:
    """The three benchmark requests as OpenAI bodies (messages, tools)."""
    rng = random.Random(1234)
    short = [
        {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
        {"role": "user", "content": prose(rng, 80)},
        {"role": "assistant", "content": prose(rng, 60)},
        {"role": "user", "content": prose(rng, 70)},
    ]
    tools = [tool(f"tool_{i}", rng) for i in range(6)]
    agentic: list[dict] = [{"role": "system", "content": prose(rng, 1400)[:8192]}]
    for turn in range(5):
        agentic.append({"role": "user", "content": prose(rng, 40)})
        call_id = f"call{turn:05d}"
        agentic.append({
            "role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": f"tool_{turn}", "arguments": json.dumps({"query": prose(rng, 6), "limit": 5})}}],
        })
        agentic.append({"role": "tool", "tool_call_id": call_id, "content": prose(rng, 120)})
    agentic = agentic[:1] + agentic[1:11]  # 10 turns after the system prompt
    agentic.append({"role": "user", "content": "Summarize what you found."})
    document = [
        {"role": "system", "content": "Answer questions about the document."},
        {"role": "user", "content": "Document:\n" + prose(rng, 78_000) + "\n\nWhat is it about?"},
    ]
    return {
        "short chat": {"messages": short},
        "agentic (8 KB system, 6 tools, 10 turns)": {"messages": agentic, "tools": tools},
        "100k-token document": {"messages": document},
    }


def grown_conversation(turns: int = 30) -> list[list[dict]]:
    """The conversation after each of `turns` requests, each one turn longer."""
    rng = random.Random(99)
    messages = [{"role": "system", "content": prose(rng, 120)}]
    out = []
    for i in range(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": prose(rng, 220)})
        out.append(list(messages))
    return out


def iterations(quick: bool, slow: bool) -> int:
    if quick:
        return 3 if slow else 10
    return 15 if slow else 200


_TOKENIZERS: dict[bool, object] = {}


def _tokenizer(fast: bool = True):  # noqa: ANN202
    """The native Qwen3 tokenizer; `fast=False` keeps the fast encoder off (the `tokenizers` crate
    encodes everything, as for models where fastokens is not proven exact)."""
    from sidecar.factory import get_backend

    if fast not in _TOKENIZERS:
        saved = os.environ.pop("SIDECAR_DISABLE_FASTOKENS", None)
        if not fast:
            os.environ["SIDECAR_DISABLE_FASTOKENS"] = "1"
        try:
            _TOKENIZERS[fast] = get_backend("native").load_tokenizer(MODEL)
        finally:
            os.environ.pop("SIDECAR_DISABLE_FASTOKENS", None)
            if saved is not None:
                os.environ["SIDECAR_DISABLE_FASTOKENS"] = saved
    return _TOKENIZERS[fast]


def _renderer(cache_mb: int, fast: bool = True):  # noqa: ANN202
    from sidecar.backend import RendererSettings
    from sidecar.factory import get_backend
    from sidecar.chat_template import renderer_inputs
    from sidecar.model_config import ModelConfig

    templates, variables = renderer_inputs(ModelConfig.from_dir(MODEL))
    return get_backend("native").load_renderer(templates, variables, _tokenizer(fast), RendererSettings(cache_bytes=cache_mb << 20))


def _options(body: dict, use_cache: bool):  # noqa: ANN202
    from sidecar.backend import RenderOptions

    return RenderOptions(
        messages_json=json.dumps(body["messages"]), tools_json=json.dumps(body["tools"]) if "tools" in body else "",
        use_cache=use_cache,
    )


def _normalized(body: dict, template: str) -> tuple[list[dict], list | None]:
    # transformers is given what vLLM hands it (tool-call arguments parsed), so both build one prompt.
    from sidecar.reference.normalize import normalize_messages
    from sidecar.reference.roles import names_developer

    messages = normalize_messages(json.loads(json.dumps(body["messages"])), "string", names_developer(template))
    return messages, body.get("tools")


def in_process(quick: bool) -> Section:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(MODEL))
    renderer = _renderer(64)
    section = Section(
        "Render in-process: native vs transformers apply_chat_template(tokenize=True)",
        ["request", "tokens", "native (no cache)", "native (cache warm)", "transformers", "speedup (no cache)"],
    )
    for name, body in requests().items():
        slow = "100k" in name
        n = iterations(quick, slow)
        cold, warm = _options(body, False), _options(body, True)
        ids = renderer.render(cold).ids
        messages, tools = _normalized(body, hf.get_chat_template())
        hf_ids = list(hf.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False))
        if hf_ids != list(ids):
            section.notes.append(f"{name}: ids differ from transformers ({len(ids)} vs {len(hf_ids)})")
        native = measure(lambda _i: renderer.render(cold), n)
        cached = measure(lambda _i: renderer.render(warm), n)
        tf = measure(lambda _i: hf.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False), n)
        section.rows.append([
            name, str(len(ids)), fmt_time(native.p50), fmt_time(cached.p50), fmt_time(tf.p50), f"{tf.p50 / native.p50:.1f}x",
        ])
    section.notes.append("p50 of repeated calls; 'no cache' tokenizes the whole prompt every time (bypass_cache), "
                         "'cache warm' repeats an identical prompt so every segment's ids come from the multi-turn cache.")
    section.notes.append(f"Qwen3 tokenizer and template; native encoder: {_tokenizer().encoder}.")
    return section


def _grpc_stub(uds: str):  # noqa: ANN202
    import grpc

    from sidecar.v1 import preprocessor_pb2_grpc

    channel = grpc.insecure_channel(uds, options=[("grpc.max_receive_message_length", 64 << 20)])
    return preprocessor_pb2_grpc.PreprocessorStub(channel)


def _pb_request(body: dict, bypass: bool):  # noqa: ANN202
    from sidecar.v1 import preprocessor_pb2 as pb

    return pb.RenderRequest(
        model="qwen3", messages_json=json.dumps(body["messages"]),
        tools_json=json.dumps(body["tools"]) if "tools" in body else "", bypass_cache=bypass,
    )


def over_grpc(quick: bool, tf_p50: dict[str, float]) -> Section:
    section = Section(
        "Render over gRPC (Unix socket) vs in-process transformers",
        ["request", "gRPC p50 (no cache)", "gRPC p99 (no cache)", "gRPC p50 (cache warm)", "transformers in-process p50",
         "vllm-rs HTTP p50", "vllm-rs HTTP p99"],
    )
    with BenchServer("--model", f"qwen3={MODEL}", "--log-level", "warning") as server, VllmRs.start_or_none() as peer:
        stub = _grpc_stub(server.uds)
        for name, body in requests().items():
            slow = "100k" in name
            n = iterations(quick, slow) * (1 if slow else 2)
            cold, warm = _pb_request(body, True), _pb_request(body, False)
            ids = list(stub.Render(cold).token_ids)
            no_cache = measure(lambda _i: stub.Render(cold), n)
            cache = measure(lambda _i: stub.Render(warm), n)
            peer_cells = ["not started", ""]
            if peer is not None:
                peer_ids = peer.render_chat(body)
                peer_stats = measure(lambda _i: peer.render_chat(body), n)
                peer_cells = [fmt_time(peer_stats.p50), fmt_time(peer_stats.p99)]
                if peer_ids != ids:
                    section.notes.append(f"{name}: vllm-rs ids differ from the sidecar's ({len(peer_ids)} vs {len(ids)})")
            section.rows.append([
                name, fmt_time(no_cache.p50), fmt_time(no_cache.p99), fmt_time(cache.p50), fmt_time(tf_p50.get(name, float("nan"))),
                *peer_cells,
            ])
    section.notes.append("Sequential unary calls on one channel; 'no cache' sets bypass_cache.")
    if peer is None:
        section.notes.append("vllm-rs (../shared/peers/vllm-rs.sh) did not start here.")
    else:
        section.notes.append("vllm-rs: vLLM 0.33.0's Rust render server on the same Qwen3 files, POST "
                             "/v1/chat/completions/render over a keep-alive HTTP/1.1 connection.")
    return section


def growing(quick: bool) -> Section:
    from sidecar.native.wire import render_response_bytes

    def packed(rendered) -> bytes:  # noqa: ANN001 - what the Render servicer encodes per request
        return render_response_bytes(rendered.text, rendered.ids, rendered.offsets)

    steps = grown_conversation(30)
    section = Section(
        "Multi-turn cache: a 30-turn conversation sent one turn longer per request (native, in-process)",
        ["encoder", "cache", "total for 30 requests", "last request", "speedup", "ids part (total - render only)",
         "ids part speedup"],
    )
    rounds = 3 if quick else 9
    # "render only" runs the same requests without asking for ids: the JSON parsing, normalization and
    # Jinja work that every request pays whatever the cache does.
    configs = (("off", 0, False, True), ("on", 64, True, True), ("render only", 0, False, False))
    for fast in (True, False):
        totals: dict[str, list[float]] = {c[0]: [] for c in configs}
        lasts: dict[str, list[float]] = {c[0]: [] for c in configs}
        for _ in range(rounds):
            # Interleaved so that load on a shared machine hits all alike.
            for label, cache_mb, use_cache, ids in configs:
                renderer = _renderer(cache_mb, fast)  # a fresh cache per round
                opts = [replace(_options({"messages": m}, use_cache), return_token_ids=ids) for m in steps]
                start = time.perf_counter()
                for o in opts[:-1]:
                    packed(renderer.render(o))
                t_last = time.perf_counter()
                packed(renderer.render(opts[-1]))
                end = time.perf_counter()
                totals[label].append(end - start)
                lasts[label].append(end - t_last)
        best = {label: (min(totals[label]), min(lasts[label])) for label in totals}
        floor = best["render only"][0]
        ids_off, ids_on = best["off"][0] - floor, best["on"][0] - floor
        encoder = _tokenizer(fast).encoder
        section.rows.append([encoder, "off", fmt_time(best["off"][0]), fmt_time(best["off"][1]), "1.0x",
                             fmt_time(ids_off), "1.0x"])
        section.rows.append([encoder, "on", fmt_time(best["on"][0]), fmt_time(best["on"][1]),
                             f"{best['off'][0] / best['on'][0]:.1f}x", fmt_time(ids_on),
                             f"{ids_off / max(ids_on, 1e-9):.1f}x"])
        section.rows.append([encoder, "render only", fmt_time(floor), fmt_time(best["render only"][1]), "", "", ""])
    tokens = len(_renderer(0).render(_options({"messages": steps[-1]}, False)).ids)
    section.notes.append(
        f"Each turn is about 250 tokens; the last prompt has {tokens} tokens. Best of {rounds} interleaved runs, each with a "
        "fresh cache. Each request's ids are packed as the server's protobuf response (the Render servicer's native "
        "encoder). The "
        "total includes JSON parsing, message normalization and the Jinja render, which the cache does not change "
        "('render only' measures them); the cache replaces tokenization of unchanged segments by a lookup, so its "
        "effect on the total is bounded by the encoder's share: large with the `tokenizers` crate, small with "
        "fastokens, which encodes this prose at roughly the cost of finding and looking up the segments."
    )
    section.notes.append("Target: cache on at least 3x faster than cache off.")
    return section


def run(quick: bool) -> list[Section]:
    if not (MODEL / "tokenizer.json").is_file():
        return [Section("Render", ["skipped"], [[f"{MODEL} not found"]])]
    first = in_process(quick)
    tf_p50 = {row[0]: _parse_time(row[4]) for row in first.rows}
    return [first, over_grpc(quick, tf_p50), growing(quick)]


def _parse_time(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"µs": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
