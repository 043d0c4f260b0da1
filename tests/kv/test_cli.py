"""`sidecar serve --kv-*` flags."""

from __future__ import annotations

import pytest

from sidecar.cli import build_parser, kv_config_from_args


def parse(*args: str):  # noqa: ANN202
    return kv_config_from_args(build_parser().parse_args(["serve", *args]))


def test_no_sources_means_no_router() -> None:
    assert parse() is None


def test_sources_and_engine_hash() -> None:
    config = parse(
        "--kv-events", "a=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558,model=m",
        "--kv-events", "b=tcp://127.0.0.1:5559,model=m",
        "--kv-block-size", "16", "--kv-engine-hash", "m=vllm_sha256_cbor,seed=0", "--kv-silence-timeout", "0",
    )
    assert [s.worker for s in config.sources] == ["a", "b"]
    assert config.sources[0].replay_endpoint == "tcp://127.0.0.1:5558"
    spec = config.engine_specs["m"]
    assert (spec.algorithm, spec.block_size, spec.seed) == ("vllm_sha256_cbor", 16, "0")
    assert config.silence_timeout_s == 0


def test_engine_hash_lookahead() -> None:
    # vLLM >= 0.33 with an EAGLE/MTP drafter and prefix caching.
    config = parse("--kv-events", "a=tcp://127.0.0.1:5557,model=m",
                   "--kv-engine-hash", "m=vllm_sha256,block_size=16,seed=0,lookahead=3")
    spec = config.engine_specs["m"]
    assert (spec.algorithm, spec.block_size, spec.seed, spec.lookahead) == ("vllm_sha256", 16, "0", 3)
    assert parse("--kv-events", "a=tcp://h:1", "--kv-engine-hash", "m=vllm_sha256,block_size=16").engine_specs[
        "m"].lookahead == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--kv-events", "a=nowhere"], None),
     (["--kv-events", "a=tcp://h:1", "--kv-engine-hash", "m=vllm_sha256,color=1"], "unknown option"),
     (["--kv-events", "a=tcp://h:1", "--kv-engine-hash", "m=vllm_xxhash,block_size=16"], "block_hashing.seed"),
     (["--kv-events", "a=tcp://h:1", "--kv-engine-hash", "m=vllm_sha256,block_size=16,lookahead=x"],
      "lookahead must be an integer"),
     (["--kv-events", "a=tcp://h:1", "--kv-engine-hash", "m=vllm_sha256,block_size=16,extra_keys=legacy,lookahead=1"],
      "block_hashing.vllm_lookahead: the legacy"),
     (["--kv-events", "a=tcp://h:1", "--kv-engine-hash", "m=sglang_sha256,block_size=16,lookahead=1"],
      "block_hashing.vllm_lookahead: only vLLM"),
     # Requests are hashed block by block, so engine mode cannot wait to learn the size from events.
     (["--kv-events", "a=tcp://h:1", "--kv-engine-hash", "m=vllm_sha256_cbor,seed=0"],
      r"--kv-engine-hash 'm=vllm_sha256_cbor,seed=0': needs block_size=N \(or --kv-block-size N\)")],
)
def test_bad_flags_are_refused(args: list[str], message: str | None) -> None:
    with pytest.raises(ValueError, match=message):  # InvalidSpec is a ValueError
        parse(*args)


def test_max_message_size_of_serve_and_relay() -> None:
    source = "a=tcp://127.0.0.1:5557"
    assert parse("--kv-events", source).max_message_bytes == 64 << 20
    assert parse("--kv-events", source, "--kv-max-message-size", "4096").max_message_bytes == 4096
    relay = build_parser().parse_args(["kv-relay", "--kv-events", source, "--nats", "nats://h:4222",
                                       "--max-message-size", "4096"])
    assert relay.max_message_size == 4096
    for args in (["serve", "--kv-max-message-size", "0"], ["kv-relay", "--kv-events", source, "--nats", "n",
                                                          "--max-message-size", "-1"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(args)


@pytest.mark.parametrize("backend", ["native", "reference"])
def test_kv_group_picks_the_group_each_models_index_keeps(backend: str) -> None:
    """A hybrid model's engine publishes one KV-cache group per layer type; `--kv-group` names the
    one to index (its full-attention group), per model; the others keep group 0."""
    from router_adapter.events import BlockStored
    from sidecar.config import ServerConfig
    from sidecar.factory import get_hasher, get_index_factory
    from sidecar.server import build_kv_router

    config = parse("--kv-events", "a=tcp://127.0.0.1:5557,model=hybrid", "--kv-events", "b=tcp://127.0.0.1:5559,model=m",
                   "--kv-block-size", "4", "--kv-group", "hybrid=1")
    assert config.groups == {"hybrid": 1}
    router = build_kv_router(ServerConfig(kv=config, backend=backend), get_hasher(backend), get_index_factory(backend))
    try:
        assert {name: index.group_idx for name, index in router.indexes.items()} == {"hybrid": 1, "m": 0}
        tokens = list(range(8))
        index = router.indexes["hybrid"]
        for group in (0, 1):
            index.apply("a", BlockStored([10 + group, 20 + group], None, tokens, 4, group_idx=group))
        assert index.score(tokens).workers[0].blocks == 2 and index.stats.skipped_events == 1
    finally:
        router.stop()


@pytest.mark.parametrize("value", ["hybrid", "hybrid=", "=1", "hybrid=-1", "hybrid=x", f"hybrid={1 << 31}"])
def test_bad_kv_group_is_refused_naming_the_flag(value: str) -> None:
    with pytest.raises(ValueError, match="--kv-group"):
        parse("--kv-events", "a=tcp://127.0.0.1:5557", "--kv-group", value)


@pytest.mark.parametrize("backend", ["native", "reference"])
def test_kv_lookahead_reaches_every_content_mode_index(backend: str) -> None:
    """`--kv-lookahead N` configures every content-mode model's index (ZMQ sources and `--kv-nats`
    models alike), `MODEL=N` one; engine-mode models keep their spec's. Without the flag an index
    has no lookahead until a store tells."""
    from sidecar.config import ServerConfig
    from sidecar.factory import get_hasher, get_index_factory
    from sidecar.server import build_kv_router

    def lookaheads(*flags: str) -> dict[str, int | None]:
        config = parse("--kv-events", "a=tcp://127.0.0.1:5557,model=plain", "--kv-events",
                       "b=tcp://127.0.0.1:5559,model=engine", "--kv-nats", "nats://127.0.0.1:1",
                       "--kv-nats-model", "fanned", "--kv-nats-model", "own", "--kv-block-size", "4",
                       "--kv-engine-hash", "engine=vllm_sha256,lookahead=2", *flags)
        router = build_kv_router(ServerConfig(kv=config, backend=backend), get_hasher(backend),
                                 get_index_factory(backend))
        try:
            return {name: index.lookahead for name, index in sorted(router.indexes.items())}
        finally:
            router.stop()

    assert lookaheads() == {"engine": None, "fanned": None, "own": None, "plain": None}
    assert lookaheads("--kv-lookahead", "1") == {"engine": None, "fanned": 1, "own": 1, "plain": 1}
    # Per model over the default, whichever comes first; the last of one kind wins (as --kv-group).
    assert lookaheads("--kv-lookahead", "own=0", "--kv-lookahead", "3", "--kv-lookahead", "1") == {
        "engine": None, "fanned": 1, "own": 0, "plain": 1}
    assert lookaheads("--kv-lookahead", "plain=2") == {"engine": None, "fanned": None, "own": None, "plain": 2}


@pytest.mark.parametrize(
    ("value", "message"),
    [("x", "--kv-lookahead 'x': expected N or MODEL=N"), ("=1", "--kv-lookahead '=1': expected"),
     ("m=", "--kv-lookahead 'm=': expected"), ("-1", "--kv-lookahead '-1': expected"),
     ("m=1.5", "--kv-lookahead 'm=1.5': expected"), ("\u0661", "expected N or MODEL=N"),
     ("257", r"--kv-lookahead 257: N must be in \[0, 256\]"),
     ("m=1000", r"--kv-lookahead m=1000: N must be in \[0, 256\]"),
     # Engine mode hashes requests with its spec's lookahead: two places for one value.
     ("e=1", r"--kv-lookahead e=1: e is in engine mode \(--kv-engine-hash\); give lookahead= there")],
)
def test_bad_kv_lookahead_is_refused_naming_the_flag(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse("--kv-events", "a=tcp://127.0.0.1:5557,model=m", "--kv-engine-hash", "e=vllm_sha256,block_size=16",
              "--kv-lookahead", value)


def test_kv_lookahead_bounds_are_taken() -> None:
    config = parse("--kv-events", "a=tcp://127.0.0.1:5557,model=m", "--kv-lookahead", "0",
                   "--kv-lookahead", "m=256")
    assert (config.lookahead, config.lookaheads, config.lookahead_of("m"), config.lookahead_of("other")) == (
        0, {"m": 256}, 256, 0)


def test_a_relay_without_model_is_refused_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """Without model= a relay published on `sidecar.kv._.w0`, which no replica reads (they read their
    models' subjects), and nothing said so: replicas stayed live with no worker."""
    from sidecar.cli import main

    assert main(["kv-relay", "--kv-events", "w0=tcp://127.0.0.1:1", "--nats", "nats://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sidecar: --kv-events 'w0=tcp://127.0.0.1:1': kv-relay needs model=NAME"), err


def test_relay_metrics_port_serves_its_counters() -> None:
    """`sidecar kv-relay` exported nothing: published, retried, reset and too-large batches were
    counted (RelayStats) but no operator could see them."""
    import urllib.request

    from router_adapter import Source
    from router_adapter.relay import Relay, RelayOptions
    from sidecar.kv_nats import serve_relay_metrics

    args = build_parser().parse_args(["kv-relay", "--kv-events", "w0=tcp://127.0.0.1:1,model=m", "--nats", "n",
                                      "--metrics-port", "0"])
    assert (args.metrics_port, args.metrics_host) == (0, "127.0.0.1")
    relay = Relay(Source.parse("w0=tcp://127.0.0.1:1,model=m"), RelayOptions("nats://127.0.0.1:1"))
    host, port = serve_relay_metrics(relay, "127.0.0.1", 0)
    relay.stats.published, relay.stats.retries, relay.stats.resets, relay.stats.too_large = 7, 2, 1, 1
    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
    for line in ('sidecar_kv_relay_published_total{model="m",worker="w0"} 7.0',
                 'sidecar_kv_relay_retries_total{model="m",worker="w0"} 2.0',
                 'sidecar_kv_relay_resets_total{model="m",worker="w0"} 1.0',
                 'sidecar_kv_relay_too_large_total{model="m",worker="w0"} 1.0',
                 'sidecar_kv_relay_duplicates_total{model="m",worker="w0"} 0.0'):
        assert line in text.splitlines(), line
    assert "sidecar_requests_total" not in text  # the server's metrics mean nothing for a relay


@pytest.mark.parametrize("value", ["-1", str((1 << 62) + 1)])
def test_a_bad_kv_max_blocks_is_refused_naming_the_flag(value: str) -> None:
    """Refused where the flags enter, before the models load; the index refused -1 only once it
    was made, saying `max_blocks must be >= 0` (no flag), and took any size beyond its u64."""
    with pytest.raises(ValueError, match=rf"^--kv-max-blocks {value}: must be in \[0, 2\^62\] \(0: keep no blocks\)"):
        parse("--kv-events", "a=tcp://127.0.0.1:5557,model=m", "--kv-max-blocks", value)


@pytest.mark.parametrize("value", ["0", str(1 << 62)])
def test_the_ends_of_kv_max_blocks_are_taken(value: str) -> None:
    assert parse("--kv-events", "a=tcp://127.0.0.1:5557,model=m", "--kv-max-blocks", value).max_blocks == int(value)


def test_a_bad_kv_max_blocks_stops_serve_before_the_models_load(capsys: pytest.CaptureFixture[str]) -> None:
    from sidecar.cli import main

    assert main(["serve", "--model", "m=/nonexistent/model", "--uds", "/nonexistent/never.sock", "--port", "-1",
                 "--kv-events", "a=tcp://127.0.0.1:5557,model=m", "--kv-max-blocks", "-1"]) == 2
    assert capsys.readouterr().err.startswith("sidecar: --kv-max-blocks -1: must be in [0, 2^62]")
