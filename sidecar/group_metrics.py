"""One /metrics for `sidecar serve --processes N`, served by the parent: each scrape reads every
process's own endpoint (loopback, a free port each, found in the group state) and adds the samples
up, so counters and histograms are the server's totals. Gauges are added up as well (requests in
flight, queue depth and memory are per-process amounts whose sum is the server's); a process that
does not answer (restarting) is left out of that scrape and counted in `sidecar_processes_scraped`.
"""

from __future__ import annotations

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.parser import text_string_to_metric_families

from sidecar.group import GroupState

_SCRAPE_TIMEOUT_S = 2.0


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=_SCRAPE_TIMEOUT_S) as response:
        return response.read().decode()


def summed(texts: list[str]) -> str:
    """The text exposition of `texts` (each a process's /metrics) with equal samples (name and
    labels) added up, in the order first seen (`_created` timestamps are left out)."""
    families: dict[str, tuple[str, str]] = {}
    samples: dict[str, dict[tuple, float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            families.setdefault(family.name, (family.type, family.documentation))
            into = samples.setdefault(family.name, {})
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue  # a process's start time, not an amount
                key = (sample.name, tuple(sorted(sample.labels.items())))
                into[key] = into.get(key, 0.0) + sample.value
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
            texts = []
            for i in range(group.processes):
                process_port = group.metrics_port(i)
                if not process_port:
                    continue
                try:
                    texts.append(scrape(process_port))
                except OSError:
                    continue  # dead or restarting: left out of this scrape
            body = summed(texts) + (
                "# HELP sidecar_processes_scraped Server processes whose metrics this scrape adds up.\n"
                "# TYPE sidecar_processes_scraped gauge\n"
                f"sidecar_processes_scraped {len(texts)}\n"
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
