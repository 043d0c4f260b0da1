"""Quick A/B of the Multiplex rows of bench/rust_client.py only (Tokenize 500 B, Render chat, 8
clients, interleaved rounds) against vllm-rs, ~2 min instead of the whole section's 4-8.

    .venv/bin/python -m bench.multiplex_ab [--main-repo DIR] [--out-dir DIR] ROUNDS NAME[:STREAMS] ...

Each distinct NAME is one server: `main` runs the tree at --main-repo (default: the repo this
script is in) with that tree's venv, or this Python when it has none (a before/after pair in the
same run, given another checkout); `pin...` is this tree's server with every thread pinned to
CPU 1 (`taskset -a`); `pinloop...` is this tree's server with `--pin-loop-cpu 1`; any other NAME
is this tree's server with SIDECAR_MUX_VARIANT=NAME in its environment (for experiments that read
it). STREAMS: the client's Multiplex streams (default 4).
Env: SECS (seconds per run, 2), CLIENTS ("8" or "1,8"), WORKLOADS (names, comma-separated; default
the two small ones), SIDECAR_BENCH_NO_PEERS=1 (no vllm-rs).
Raw rows go to OUT_DIR/last.json (--out-dir; default a new temporary directory, printed). Not part
of `make bench`."""
import argparse
import tempfile
from pathlib import Path
import json, os, sys, statistics, contextlib
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench.rust_client import workloads, load, SHARED_QWEN3, SMALL
from bench.server import BenchServer
from bench.peers import VllmRs

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("rounds", type=int)
parser.add_argument("variants", nargs="+", metavar="NAME[:STREAMS]")
parser.add_argument("--main-repo", type=Path, default=REPO, help="the tree the `main` server runs (default: %(default)s)")
parser.add_argument("--out-dir", type=Path, default=None, help="where last.json goes (default: a new temporary directory)")
options = parser.parse_args()
rounds, variants = options.rounds, options.variants
main_repo = options.main_repo.resolve()
main_python = main_repo / ".venv" / "bin" / "python"
out_dir = options.out_dir or Path(tempfile.mkdtemp(prefix="multiplex_ab-"))
args = ("--model", f"qwen3={SHARED_QWEN3}")
work = [w for w in workloads(True) if w["name"] in os.environ.get("WORKLOADS", ",".join(SMALL)).split(",")]
with contextlib.ExitStack() as stack:
    servers = {}
    for v in variants:
        name, _, _ = v.partition(":")
        if name not in servers:
            os.environ["SIDECAR_MUX_VARIANT"] = name
            if name == "main":
                import bench.server as bs
                class MainServer(BenchServer):
                    def __enter__(self):
                        old, oldexe = bs._REPO, bs.sys.executable
                        bs._REPO = main_repo
                        bs.sys.executable = str(main_python) if main_python.exists() else sys.executable
                        try:
                            return super().__enter__()
                        finally:
                            bs._REPO, bs.sys.executable = old, oldexe
                servers[name] = stack.enter_context(MainServer(*args))
            elif name.startswith("pinloop"):  # the server's own flag: loop + gRPC threads on CPU 1, workers free
                servers[name] = stack.enter_context(BenchServer(*args, "--pin-loop-cpu", "1"))
            else:
                servers[name] = stack.enter_context(BenchServer(*args))
    os.environ.pop("SIDECAR_MUX_VARIANT", None)
    import subprocess as sp2
    for name, srv in servers.items():
        if name.startswith("pin") and not name.startswith("pinloop"):
            sp2.run(["taskset", "-a", "-cp", "1", str(srv._process.pid)], check=True, capture_output=True)
    peer = stack.enter_context(VllmRs.start_or_none())
    targets = []
    for v in variants:
        name, _, streams = v.partition(":")
        targets.append({"name": v, "kind": "grpc", "address": servers[name].uds, "mode": "multiplex", "streams": int(streams or 4)})
    if peer:
        targets.append({"name": "vllm-rs", "kind": "http", "address": f"127.0.0.1:{peer.port}"})
    spec = {"seconds": float(os.environ.get("SECS", 2.0)), "warmup_seconds": 0.3, "rounds": rounds, "clients": [int(c) for c in os.environ.get("CLIENTS", "8").split(",")],
            "targets": targets, "http_model": peer.model if peer else "", "workloads": [{**w, "model": "qwen3"} for w in work]}
    res = load(spec)
for r in res:
    if "check" in r and not r["same"]:
        print("MISMATCH", r)
rows = [r for r in res if "round" in r]
out_dir.mkdir(parents=True, exist_ok=True)
with open(out_dir / "last.json", "w") as f:
    json.dump(rows, f)
print(f"raw rows: {out_dir / 'last.json'}")
for w in [w["name"] for w in work]:
    print(w)
    ref = {r["round"]: r["per_second"] for r in rows if r["workload"] == w and r["target"] == "vllm-rs" and r["clients"] == 8}
    for t in [x["name"] for x in targets]:
        rs = [r for r in rows if r["workload"] == w and r["target"] == t and r["clients"] == 8]
        rates = [r["per_second"] for r in rs]
        ratios = [r["per_second"] / ref[r["round"]] for r in rs if r["round"] in ref]
        errs = sum(r["errors"] for r in rs)
        print(f"  {t:24s} {' '.join(f'{x:7.0f}' for x in rates)}  med {statistics.median(rates):7.0f}  vs vllm-rs {' '.join(f'{x:.2f}' for x in ratios)}  p50us {statistics.median(r['p50_us'] for r in rs):.0f} errs {errs}")
