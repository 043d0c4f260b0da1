"""One /metrics for `sidecar serve --processes N`, served by the parent: each scrape reads every
process's own endpoint (loopback, a free port each, found in the group state), all at the same time,
and merges the samples:

- counters, histograms and summaries are added up: the server's totals;
- gauges in `SUMMED_GAUGES` are added up too: amounts each process holds (calls in flight, queue
  depth, memory, open files) whose sum is the server's;
- every other gauge (and info) takes the highest value any process reports: it states a fact each
  process knows about the same server (models loaded, the KV index each keeps whole, python_info)
  or about itself where the sum means nothing (process_start_time_seconds: the newest start, i.e.
  the last restart; process_max_fds).

A process that does not answer (restarting, hung), or whose answer is cut short or does not parse,
is left out of that scrape: `sidecar_processes_scraped` counts the processes added up,
`sidecar_processes_unscraped` those with an endpoint that were left out.
"""

from __future__ import annotations

import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from sidecar.group import GroupState
from sidecar.logs import get_logger

_SCRAPE_TIMEOUT_S = 2.0
#: Gauges that are amounts held by each process: the server's value is their sum.
SUMMED_GAUGES = frozenset({
    "sidecar_inflight_requests", "sidecar_native_queue_depth",
    "process_resident_memory_bytes", "process_virtual_memory_bytes", "process_open_fds",
})
_SUMMED_TYPES = frozenset({"counter", "histogram", "summary", "gaugehistogram"})
_log = get_logger("sidecar.group_metrics")


def scrape(port: int) -> list[Metric]:
    """The families of one process's /metrics; raises whatever a bad answer raises (OSError,
    http.client.HTTPException such as IncompleteRead, ValueError from decoding or parsing)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=_SCRAPE_TIMEOUT_S) as response:
        text = response.read().decode()
    # Parsed here, whole: a parse error half way must not leave half a process in the sums.
    return list(text_string_to_metric_families(text))


def scrape_all(ports: dict[int, int]) -> tuple[list[list[Metric]], int]:
    """Scrapes process index -> port all at once (a hung process costs the timeout once, not once
    each, one after another); returns the families of those that answered and how many did not."""
    if not ports:
        return [], 0

    def one(index: int) -> list[Metric] | None:
        try:
            return scrape(ports[index])
        except Exception as e:  # noqa: BLE001 - one process's bad answer must not fail the others'
            _log.warning("process_metrics_unscraped", scraped_process=index, error=f"{type(e).__name__}: {e}")
            return None

    with ThreadPoolExecutor(max_workers=len(ports), thread_name_prefix="group-scrape") as pool:
        results = list(pool.map(one, ports))
    answered = [r for r in results if r is not None]
    return answered, len(results) - len(answered)


def merged(processes: list[list[Metric]]) -> str:
    """The text exposition of the processes' families with equal samples (name and labels) merged
    (added up, or the highest kept: see the module's docstring), in the order first seen
    (`_created` timestamps are left out)."""
    families: dict[str, tuple[str, str]] = {}
    samples: dict[str, dict[tuple, float]] = {}
    for process in processes:
        for family in process:
            families.setdefault(family.name, (family.type, family.documentation))
            add = family.type in _SUMMED_TYPES or family.name in SUMMED_GAUGES
            into = samples.setdefault(family.name, {})
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue  # a process's start time, not an amount
                key = (sample.name, tuple(sorted(sample.labels.items())))
                seen = into.get(key)
                if seen is None:
                    into[key] = sample.value
                elif add:
                    into[key] = seen + sample.value
                else:
                    into[key] = max(seen, sample.value)
    lines = []
    for name, (kind, documentation) in families.items():
        help_text = documentation.replace("\\", "\\\\").replace("\n", "\\n")
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for (sample_name, labels), value in samples[name].items():
            rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            lines.append(f"{sample_name}{{{rendered}}} {value!r}" if rendered else f"{sample_name} {value!r}")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def serve(group: GroupState, host: str, port: int) -> ThreadingHTTPServer:
    """Starts the summing endpoint on a daemon thread; returns its server (`.server_address`)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            if self.path.split("?")[0] not in ("/", "/metrics"):
                self.send_error(404)
                return
            # A process restarting has no port yet (0): not asked, not counted as unscraped.
            ports = {i: port for i in range(group.processes) if (port := group.metrics_port(i))}
            processes, unscraped = scrape_all(ports)
            body = merged(processes) + (
                "# HELP sidecar_processes_scraped Server processes whose metrics this scrape adds up.\n"
                "# TYPE sidecar_processes_scraped gauge\n"
                f"sidecar_processes_scraped {len(processes)}\n"
                "# HELP sidecar_processes_unscraped Server processes with a metrics endpoint left out of this scrape "
                "(no answer in time, cut short, or not parsed).\n"
                "# TYPE sidecar_processes_unscraped gauge\n"
                f"sidecar_processes_unscraped {unscraped}\n"
            )
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="group-metrics", daemon=True).start()
    return server
