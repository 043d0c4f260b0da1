"""One /metrics for `sidecar serve --processes N`, served by the parent: each scrape reads every
process's own endpoint (loopback, a free port each, found in the group state), all at the same time,
and merges the samples:

- counters, histograms and summaries are added up: the server's totals; except the KV index's
  and KV feed's counters (`sidecar_kv_*`): every process applies every engine's events to an index
  of its own (the whole index), so each counts the same stream and the sum was N times the
  events, gaps and evictions there were: the highest value any process reports is taken (one
  process's view; after a restart the others still hold the whole count);
- gauges in `SUMMED_GAUGES` are added up too: amounts each process holds (calls in flight, queue
  depth, memory, open files) whose sum is the server's;
- every other gauge (and info) takes the highest value any process reports: it states a fact each
  process knows about the same server (models loaded, the KV index each keeps whole, python_info)
  or about itself where the sum means nothing (process_start_time_seconds: the newest start, i.e.
  the last restart; process_max_fds).

Merged counters never go down, since Prometheus reads a counter that goes down as a reset (rate()
then counts the whole remaining total as new, a spike of everything every other process counted):
- a process with an endpoint that does not answer (hung, stopping), or whose answer is cut short or
  does not parse, is counted in `sidecar_processes_unscraped`, and its last good scrape is merged in
  its place;
- a process that has been restarted (its endpoint's port changed, or is 0 while it restarts, or
  its `process_start_time_seconds` changed on the same port) counts
  from 0 again: the counters, histograms and summaries of its last scrape before the restart are
  carried (added up, or the highest kept, as above) into every later merge, as prometheus_client's
  multiprocess mode keeps a dead process's counters. What it counted after its last scrape is lost.
`sidecar_processes_scraped` counts the processes that answered this scrape.
"""

from __future__ import annotations

import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
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
#: Families that only grow: a restarted process's last values of these are carried.
_CARRIED_TYPES = frozenset({"counter", "histogram", "summary"})
#: Counters of what every process counts alike (the KV events stream each applies whole): the
#: highest is kept, not the sum.
SHARED_COUNTER_PREFIX = "sidecar_kv_"


def _added_up(family: Metric) -> bool:
    """Whether the processes' samples of `family` are added up (else the highest is kept)."""
    if family.type == "counter" and family.name.startswith(SHARED_COUNTER_PREFIX):
        return False
    return family.type in _SUMMED_TYPES or family.name in SUMMED_GAUGES
_log = get_logger("sidecar.group_metrics")


def scrape(port: int) -> list[Metric]:
    """The families of one process's /metrics; raises whatever a bad answer raises (OSError,
    http.client.HTTPException such as IncompleteRead, ValueError from decoding or parsing)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=_SCRAPE_TIMEOUT_S) as response:
        text = response.read().decode()
    # Parsed here, whole: a parse error half way must not leave half a process in the sums.
    return list(text_string_to_metric_families(text))


def scrape_all(ports: dict[int, int]) -> dict[int, list[Metric] | None]:
    """Scrapes process index -> port all at once (a hung process costs the timeout once, not once
    each, one after another); returns process index -> its families, or None if it did not answer
    (or answered badly)."""
    if not ports:
        return {}

    def one(index: int) -> list[Metric] | None:
        try:
            return scrape(ports[index])
        except Exception as e:  # noqa: BLE001 - one process's bad answer must not fail the others'
            _log.warning("process_metrics_unscraped", scraped_process=index, error=f"{type(e).__name__}: {e}")
            return None

    with ThreadPoolExecutor(max_workers=len(ports), thread_name_prefix="group-scrape") as pool:
        return dict(zip(ports, pool.map(one, ports)))


class LastScrapes:
    """Each process's last good scrape, kept while the process lives (same metrics port), so that a
    process left out of a scrape is merged with its last values; and the counters of restarted
    processes' last scrapes, folded into one set of families merged into every later scrape. So the
    merged counters never go down (thread-safe: scrapes may overlap)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scrapes = 0
        #: process index -> (its metrics port, the scrape number, its families)
        self._last: dict[int, tuple[int, int, list[Metric]]] = {}
        #: What restarted processes had counted, folded into one process's worth of families (its
        #: size stays that of one scrape however many restarts there are).
        self._carried: list[Metric] = []

    def collect(self, ports: dict[int, int]) -> tuple[list[list[Metric]], int, int]:
        """Scrapes the processes (index -> port); returns the families to add up (this scrape's,
        or the last good one's for a process that did not answer), how many processes answered and
        how many did not."""
        with self._lock:
            self._scrapes += 1
            number = self._scrapes
        results = scrape_all(ports)
        processes = []
        with self._lock:
            for index in list(self._last):
                if ports.get(index) != self._last[index][0]:
                    self._carry(self._last.pop(index)[2])  # restarted, or restarting
            for index, families in results.items():
                last = self._last.get(index)
                if families is not None:
                    if last is None or last[1] < number:  # an overlapping, later scrape is newer
                        if last is not None and _start_time(last[2]) not in (None, _start_time(families)):
                            self._carry(last[2])  # restarted on the port its last run had
                        self._last[index] = (ports[index], number, families)
                    processes.append(families)
                elif last is not None:
                    processes.append(last[2])
            if self._carried:
                processes.append(self._carried)
        answered = sum(families is not None for families in results.values())
        return processes, answered, len(results) - answered

    def _carry(self, ended: list[Metric]) -> None:
        """Folds the last scrape of a process that has restarted (its counters begin again from 0)
        into what is carried (lock held)."""
        counted = [f for f in ended if f.type in _CARRIED_TYPES]
        self._carried = merged_families([self._carried, counted])


def _start_time(families: list[Metric]) -> float | None:
    """A process's `process_start_time_seconds`, None when it has none."""
    for family in families:
        if family.name == "process_start_time_seconds" and family.samples:
            return family.samples[0].value
    return None


def merged(processes: list[list[Metric]]) -> str:
    """The text exposition of `merged_families(processes)`, written as one process writes its own
    (`prometheus_client.generate_latest`: a counter's HELP and TYPE name it with `_total`, as its
    samples do)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(merged_families(processes)))
    return generate_latest(registry).decode()


def merged_families(processes: list[list[Metric]]) -> list[Metric]:
    """The processes' families with equal samples (name and labels) merged (added up, or the
    highest kept: see the module's docstring), in the order first seen. `_created` timestamps are
    left out, with the gauge families the text format puts them in."""
    families: dict[str, Metric] = {}
    samples: dict[str, dict[tuple, list]] = {}
    for process in processes:
        for family in process:
            if family.name.endswith("_created"):
                continue  # the `_created` samples of a counter or histogram: each process's start time
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type)
            add = _added_up(family)
            into = samples.setdefault(family.name, {})
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue  # a process's start time, not an amount
                key = (sample.name, tuple(sorted(sample.labels.items())))
                seen = into.get(key)
                if seen is None:
                    into[key] = [sample.labels, sample.value]
                elif add:
                    seen[1] += sample.value
                else:
                    seen[1] = max(seen[1], sample.value)
    for name, family in families.items():
        for (sample_name, _), (labels, value) in samples[name].items():
            family.add_sample(sample_name, labels, value)
    return list(families.values())


class _Families:
    """A collector of given families, for `generate_latest`."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def serve(group: GroupState, host: str, port: int) -> ThreadingHTTPServer:
    """Starts the summing endpoint on a daemon thread; returns its server (`.server_address`)."""
    last_scrapes = LastScrapes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            if self.path.split("?")[0] not in ("/", "/metrics"):
                self.send_error(404)
                return
            # A process restarting has no port yet (0): not asked, not counted as unscraped.
            ports = {i: port for i in range(group.processes) if (port := group.metrics_port(i))}
            processes, scraped, unscraped = last_scrapes.collect(ports)
            body = merged(processes) + (
                "# HELP sidecar_processes_scraped Server processes that answered this scrape.\n"
                "# TYPE sidecar_processes_scraped gauge\n"
                f"sidecar_processes_scraped {scraped}\n"
                "# HELP sidecar_processes_unscraped Server processes with a metrics endpoint that did not answer this "
                "scrape (no answer in time, cut short, or not parsed): their last good scrape is added up instead.\n"
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
