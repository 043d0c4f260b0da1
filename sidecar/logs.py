"""Structured JSON logs (structlog), one line per event, with the request id bound per call."""

from __future__ import annotations

import datetime
import logging
import sys
import time

import msgspec
import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure(level: str = "info", stream=sys.stdout) -> None:  # noqa: ANN001 - a text stream
    """JSON lines to `stream`; `level` is debug, info, warning or error."""
    global _info_stream
    _info_stream = stream if _LEVELS[level] <= logging.INFO else None
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            _add_process,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            # msgspec encodes an event in about a third of the time json.dumps takes; one line is
            # written per RPC, so this is on every request's path.
            structlog.processors.JSONRenderer(serializer=_encode),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        cache_logger_on_first_use=True,
    )
    # The router adapter is a library (usable without the server) and logs through the standard
    # library; without a handler its warnings went to stderr as bare text and its info lines
    # nowhere. Under the server and the relay they are the same JSON lines as the rest.
    # The NATS client (`nats`) logs what reaches no callback of ours (the fan-out passes its own,
    # router_adapter.nats_status) with a traceback: as a JSON line too, not bare text on stderr.
    for name, handler in (("router_adapter", _StdlibToJson()), ("nats", _StdlibToJson(event="nats_client"))):
        library = logging.getLogger(name)
        for old in [h for h in library.handlers if isinstance(h, _StdlibToJson)]:
            library.removeHandler(old)
        library.addHandler(handler)
        library.setLevel(_LEVELS[level])


class _StdlibToJson(logging.Handler):
    """Writes a standard-library record through structlog: the router adapter's messages start
    with their event name (`kv_events_disconnected worker=w0 ...`), so that is `event`, the rest
    `detail`, and the logger's name `logger`. With `event` (another library's records), that is
    the event, the whole message the detail, and an exception only its text (`error`): the line
    says what failed; the library's own stack says nothing an operator acts on."""

    def __init__(self, event: str | None = None) -> None:
        super().__init__()
        self._event = event

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self._event is None:
                event, _, detail = record.getMessage().partition(" ")
            else:
                event, detail = self._event, record.getMessage()
            fields: dict[str, object] = {"logger": record.name}
            if detail:
                fields["detail"] = detail
            if record.exc_info and self._event is not None:
                fields["error"] = repr(record.exc_info[1])
            elif record.exc_info:
                fields["exc_info"] = record.exc_info
            get_logger(record.name).log(record.levelno, event, **fields)
        except Exception:  # noqa: BLE001 - logging must not raise into the caller
            self.handleError(record)


#: Where `info_line` writes (None: info lines are filtered out); set by `configure`.
_info_stream = None
#: (second, its ISO text): the date and time part changes once a second, so it is formatted once.
_second_text: tuple[int, str] = (-1, "")


def _timestamp() -> str:
    """Now as structlog's `TimeStamper(fmt="iso", utc=True)` writes it (`...T10:38:45.724133Z`,
    no fraction at a whole second), in a fraction of its 3-4 us."""
    global _second_text
    now = time.time()
    second = int(now)
    cached, text = _second_text
    if cached != second:
        text = datetime.datetime.fromtimestamp(second, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        _second_text = (second, text)
    micro = int((now - second) * 1e6)
    return f"{text}.{micro:06d}Z" if micro else text + "Z"


def info_line(event: str, fields: dict) -> None:
    """One info line with exactly what the configured structlog chain writes for
    `logger.info(event, **fields)` with no context bound (the fields, `process`, `level`,
    `timestamp`, `event`), without running the chain: the per-call `rpc` line is on every
    request's path, and the chain's processors cost about 20 us a line."""
    stream = _info_stream
    if stream is None:
        if not structlog.is_configured():
            get_logger("sidecar.rpc").info(event, **fields)
        return
    fields["event"] = event
    if _process is not None:
        fields["process"] = _process
    fields["level"] = "info"
    fields["timestamp"] = _timestamp()
    stream.write(msgspec.json.encode(fields, enc_hook=str).decode() + "\n")
    stream.flush()


def _encode(event: dict, **_: object) -> str:
    return msgspec.json.encode(event, enc_hook=str).decode()


#: This process's index among `--processes N` servers, or None.
_process: int | None = None


def bind_process(index: int) -> None:
    """Every later log line of this process carries `process: index` (one of `--processes N`)."""
    global _process
    _process = index


def _add_process(_logger: object, _method: str, event: dict) -> dict:
    if _process is not None:
        event["process"] = _process
    return event


def get_logger(name: str = "sidecar") -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger(name)
