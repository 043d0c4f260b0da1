"""The parent's /metrics for `sidecar serve --processes N` (sidecar.group_metrics), against fake
process endpoints: it asks the processes at the same time (one that hangs costs a scrape its
timeout once, not once per hung process), a process whose answer is cut short or does not parse is
left out and counted while the others are still added up, and gauges that state a fact about the
server (models loaded, start time) are not multiplied by the number of processes."""

from __future__ import annotations

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from contextlib import contextmanager
from typing import Callable, Iterator

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sidecar import group_metrics
from sidecar.group import GroupState


def exposition(requests: int, start_time: float, inflight: int) -> str:
    """What one process's /metrics says (text format), in the families the merge treats apart."""
    return (
        "# HELP sidecar_requests_total RPCs handled, by RPC and status code\n"
        "# TYPE sidecar_requests_total counter\n"
        f'sidecar_requests_total{{rpc="Tokenize",code="OK"}} {requests}.0\n'
        "# HELP sidecar_inflight_requests RPCs being handled\n"
        "# TYPE sidecar_inflight_requests gauge\n"
        f'sidecar_inflight_requests{{rpc="Tokenize"}} {inflight}.0\n'
        "# HELP sidecar_models_loaded Models this server hosts\n"
        "# TYPE sidecar_models_loaded gauge\n"
        "sidecar_models_loaded 1.0\n"
        "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
        "# TYPE process_start_time_seconds gauge\n"
        f"process_start_time_seconds {start_time}\n"
        "# HELP python_info Python platform information\n"
        "# TYPE python_info gauge\n"
        'python_info{implementation="CPython",major="3",minor="11",patchlevel="7",version="3.11.7"} 1.0\n'
    )


Respond = Callable[[BaseHTTPRequestHandler], None]


def answer(text: str) -> Respond:
    def respond(handler: BaseHTTPRequestHandler) -> None:
        data = text.encode()
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    return respond


@pytest.fixture
def endpoints() -> Iterator[Callable[[Respond], int]]:
    """Starts a fake process endpoint answering with a given function; returns its port."""
    servers: list[ThreadingHTTPServer] = []

    def start(respond: Respond) -> int:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                respond(self)

            def log_message(self, *_args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@contextmanager
def parent_metrics(tmp_path: Path, ports: list[int]) -> Iterator[tuple[GroupState, Callable[[], dict[tuple[str, tuple], float]]]]:
    """The parent's /metrics over processes listening on `ports`: the group state (to restart a
    process: set its port) and a scrape, which returns sample (name, labels) -> value."""
    group = GroupState.create(str(tmp_path / "state"), len(ports))
    for i, port in enumerate(ports):
        group.set_metrics_port(i, port)
    server = group_metrics.serve(group, "127.0.0.1", 0)

    def scrape() -> dict[tuple[str, tuple], float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=30) as response:
            text = response.read().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    try:
        yield group, scrape
    finally:
        server.shutdown()
        server.server_close()
        group.close()


def group_scrape(tmp_path: Path, ports: list[int]) -> dict[tuple[str, tuple], float]:
    """One scrape of the parent's /metrics over processes listening on `ports`."""
    with parent_metrics(tmp_path, ports) as (_, scrape):
        return scrape()


TOKENIZE_OK = ("sidecar_requests_total", (("code", "OK"), ("rpc", "Tokenize")))
INFLIGHT = ("sidecar_inflight_requests", (("rpc", "Tokenize"),))


def test_processes_are_asked_at_the_same_time(tmp_path: Path, endpoints) -> None:  # noqa: ANN001
    """Each fake process answers only once every process has been asked (or gives up after 1 s, half
    the scrape timeout): asked one after another, the first would give up unanswered; asked at the
    same time, both are added up. (A stopped process used to cost every scrape 2 s, each.)"""
    everyone_asked = threading.Barrier(2, timeout=1.0)

    def after_everyone(text: str) -> Respond:
        def respond(handler: BaseHTTPRequestHandler) -> None:
            try:
                everyone_asked.wait()
            except threading.BrokenBarrierError:
                handler.send_error(503)
                return
            answer(text)(handler)
        return respond

    ports = [endpoints(after_everyone(exposition(3, 100.0, 1))), endpoints(after_everyone(exposition(4, 200.0, 1)))]
    samples = group_scrape(tmp_path, ports)
    assert samples[("sidecar_processes_scraped", ())] == 2
    assert samples[TOKENIZE_OK] == 7


@pytest.mark.parametrize("broken", ["cut short", "not the text format"])
def test_a_process_with_a_broken_answer_is_left_out_and_counted(tmp_path: Path, endpoints, broken: str) -> None:  # noqa: ANN001
    """A response cut short (IncompleteRead: fewer bytes than its Content-Length) or one that does
    not parse is that process's problem: the scrape adds up the others and counts it in
    `sidecar_processes_unscraped` (before, the exception ended the whole scrape with no answer)."""
    def cut_short(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "1000")
        handler.end_headers()
        handler.wfile.write(b"# TYPE sidecar_requests_total counter\n")
        handler.close_connection = True

    bad = cut_short if broken == "cut short" else answer('sidecar_requests_total{rpc="Tokenize" 3\n')
    samples = group_scrape(tmp_path, [endpoints(answer(exposition(3, 100.0, 1))), endpoints(bad)])
    assert samples[TOKENIZE_OK] == 3
    assert samples[("sidecar_processes_scraped", ())] == 1
    assert samples[("sidecar_processes_unscraped", ())] == 1


def test_counters_and_amounts_add_up_facts_about_the_server_do_not(tmp_path: Path, endpoints) -> None:  # noqa: ANN001
    """Requests and calls in flight are the sum over processes; one model loaded in each of two
    processes is one model, not two; the start time is the newest process's (the latest restart,
    when part of the summed counters began again); `python_info` stays 1."""
    ports = [endpoints(answer(exposition(3, 100.0, 1))), endpoints(answer(exposition(4, 200.0, 2)))]
    samples = group_scrape(tmp_path, ports)
    assert samples[TOKENIZE_OK] == 7
    assert samples[INFLIGHT] == 3
    assert samples[("sidecar_models_loaded", ())] == 1
    assert samples[("process_start_time_seconds", ())] == 200.0
    assert [v for (name, _), v in samples.items() if name == "python_info"] == [1.0]


def test_merged_counters_never_go_down_through_bad_answers_and_restarts(tmp_path: Path, endpoints) -> None:  # noqa: ANN001
    """Prometheus reads a counter that goes down as a reset, and rate() then counts the whole
    remaining total as new. A process that answers badly (or not at all) is added up with its last
    good scrape, and still counted in `sidecar_processes_unscraped` (before, its requests left the
    sum: 7, then 3). A restarted process counts from 0 again: its last scrape's counters are carried
    into every later merge, through any number of restarts (before, the sum fell from 9 to 5, which
    rate() read as 5 new requests), while its gauges (calls in flight) leave with it."""
    answers = {0: answer(exposition(3, 100.0, 1)), 1: answer(exposition(4, 200.0, 1))}
    ports = [endpoints(lambda handler, i=i: answers[i](handler)) for i in range(2)]
    with parent_metrics(tmp_path, ports) as (group, scrape):
        assert scrape()[TOKENIZE_OK] == 7
        answers[0] = answer(exposition(5, 100.0, 1))
        answers[1] = answer('sidecar_requests_total{rpc="Tokenize" 3\n')  # does not parse
        samples = scrape()
        assert samples[TOKENIZE_OK] == 9  # 5 + process 1's last 4
        assert samples[("sidecar_processes_scraped", ())] == 1
        assert samples[("sidecar_processes_unscraped", ())] == 1
        # Process 1 restarting (no endpoint yet): its last 4 requests stay in the sum, its one
        # call in flight does not.
        group.set_metrics_port(1, 0)
        samples = scrape()
        assert samples[TOKENIZE_OK] == 9
        assert samples[INFLIGHT] == 1
        # Back on a new endpoint, counting from 0 again: 5 + 4 carried + 1 new.
        answers[1] = answer(exposition(1, 300.0, 0))
        group.set_metrics_port(1, endpoints(lambda handler: answers[1](handler)))
        samples = scrape()
        assert samples[TOKENIZE_OK] == 10
        assert samples[("sidecar_processes_unscraped", ())] == 0
        # Restarted again after counting 2: both ended runs are carried (5 + 4 + 2 + 0 new).
        answers[1] = answer(exposition(2, 300.0, 0))
        assert scrape()[TOKENIZE_OK] == 11
        answers[1] = answer(exposition(0, 400.0, 0))
        group.set_metrics_port(1, endpoints(lambda handler: answers[1](handler)))
        samples = scrape()
        assert samples[TOKENIZE_OK] == 11
        assert samples[INFLIGHT] == 1
        # Restarted once more, on the port its last run had: its new start time tells.
        answers[1] = answer(exposition(3, 400.0, 0))
        assert scrape()[TOKENIZE_OK] == 14
        answers[1] = answer(exposition(1, 500.0, 0))
        assert scrape()[TOKENIZE_OK] == 15  # 5 + 4 + 2 + 3 carried + 1 new


def headers(text: str) -> dict[str, list[str]]:
    """The HELP and TYPE lines of a text exposition, by the family name they give."""
    families: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith(("# HELP ", "# TYPE ")):
            families.setdefault(line.split(" ", 3)[2], []).append(line)
    return families


def without_created(text: str) -> str:
    """An exposition without its `_created` families (HELP, TYPE and samples)."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not (line.split(" ", 3)[2] if line.startswith("# ") else line).split("{")[0].endswith("_created"))


def test_the_merge_writes_every_family_as_one_process_writes_it() -> None:
    """The parent's /metrics is served as `text/plain; version=0.0.4` like a process's own, so a
    counter's HELP and TYPE must name it with `_total`, as its samples do: they named the parsed
    family (`# TYPE sidecar_requests counter` above `sidecar_requests_total` samples, and the same
    for process_cpu_seconds and python_gc_*), and the `_created` gauge families, left out, were
    still written empty. One process merged alone is its own exposition, `_created` families aside;
    two processes merged have the same families, written the same way."""
    import importlib

    from sidecar import metrics

    importlib.import_module("sidecar.server")  # registers every metric the server has

    metrics.REQUESTS.labels("Tokenize", "OK").inc()
    metrics.LATENCY.labels("Tokenize").observe(0.001)
    single = generate_latest(REGISTRY).decode()
    one = list(text_string_to_metric_families(single))
    assert "# TYPE sidecar_requests_total counter" in single and "sidecar_requests_created" in single
    expected = without_created(single)
    assert group_metrics.merged([one]) == expected
    merged_two = headers(group_metrics.merged([one, one]))
    for name, lines in headers(expected).items():
        assert merged_two.pop(name) == lines, name
    assert merged_two == {}


@pytest.mark.parametrize("host_in_use", ["in use", "bogus.invalid"])
def test_a_metrics_listener_that_cannot_be_made_is_an_argument_error(
    host_in_use: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """As one process says it (`sidecar: --metrics-host/--metrics-port ...`, exit 2), not a traceback
    and exit 1, and before any process starts."""
    import socket

    from sidecar.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        host = "127.0.0.1" if host_in_use == "in use" else host_in_use
        assert main(["serve", "--processes", "2", "--port", "0", "--metrics-host", host,
                     "--metrics-port", str(port if host_in_use == "in use" else 0)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sidecar: --metrics-host/--metrics-port {host}:"), err
    assert "Traceback" not in err and err.count("\n") == 1, err


def kv_exposition(events: int, gaps: int, blocks: int) -> str:
    """One process's KV metrics: every process applies every engine's events to its own index."""
    return (
        "# HELP sidecar_kv_events_total KV events applied\n"
        "# TYPE sidecar_kv_events_total counter\n"
        f'sidecar_kv_events_total{{model="m"}} {events}.0\n'
        "# HELP sidecar_kv_sequence_gaps_total KV-event sequence gaps\n"
        "# TYPE sidecar_kv_sequence_gaps_total counter\n"
        f'sidecar_kv_sequence_gaps_total{{worker="w0"}} {gaps}.0\n'
        "# HELP sidecar_kv_blocks Blocks in the KV prefix index\n"
        "# TYPE sidecar_kv_blocks gauge\n"
        f'sidecar_kv_blocks{{model="m"}} {blocks}.0\n'
    ) + exposition(3, 100.0, 1)


def test_kv_counters_are_one_processs_view_not_n_times_it() -> None:
    """Each of N processes counts the same events stream: summed, `sidecar_kv_events_total` was N
    times the events the engines published (and gaps, evictions alike). The highest is kept, as
    for the KV gauges; the server's own counters still add up."""
    processes = [list(text_string_to_metric_families(kv_exposition(1000, 2, 50))),
                 list(text_string_to_metric_families(kv_exposition(998, 2, 49)))]
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(group_metrics.merged(processes))
               for s in family.samples}
    assert samples[("sidecar_kv_events_total", (("model", "m"),))] == 1000
    assert samples[("sidecar_kv_sequence_gaps_total", (("worker", "w0"),))] == 2
    assert samples[("sidecar_kv_blocks", (("model", "m"),))] == 50
    assert samples[TOKENIZE_OK] == 6


def test_kv_counters_keep_their_highest_when_the_highest_process_restarts(tmp_path: Path, endpoints) -> None:  # noqa: ANN001
    """The KV counters take the highest value any process reports; when the process that reported
    it restarts and counts from 0 again, the highest it had reached is carried, so the merged value
    does not fall to the next process's (1000 -> 998 was read as a reset: 998 new events)."""
    answers = {0: answer(kv_exposition(1000, 2, 50)), 1: answer(kv_exposition(998, 2, 49))}
    ports = [endpoints(lambda handler, i=i: answers[i](handler)) for i in range(2)]
    events = ("sidecar_kv_events_total", (("model", "m"),))
    with parent_metrics(tmp_path, ports) as (group, scrape):
        assert scrape()[events] == 1000
        answers[0] = answer(kv_exposition(5, 0, 3))
        group.set_metrics_port(0, endpoints(lambda handler: answers[0](handler)))
        samples = scrape()
        assert samples[events] == 1000
        assert samples[("sidecar_kv_blocks", (("model", "m"),))] == 49  # a gauge: not carried
        answers[1] = answer(kv_exposition(1003, 2, 51))
        assert scrape()[events] == 1003
