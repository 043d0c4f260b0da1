"""Argument types of the command line (each refuses a value it cannot run with, and argparse names
the flag in the error) and the help formatter its commands share."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be >= 1")
    return value


#: The highest TCP port: a larger one was bound modulo 65536 (`--port 70000` listened on 4464) or
#: failed the start with a traceback (`--metrics-port 70000`: OverflowError from bind).
MAX_PORT = 65535


def port(text: str) -> int:
    """A TCP port to listen on: 0 to 65535, 0 picking a free one (`--metrics-port`)."""
    value = int(text)
    if not 0 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{text}: must be a port in [0, {MAX_PORT}] (0: any free port)")
    return value


def port_or_off(text: str) -> int:
    """`port`, or -1 for none (`--port -1`: no TCP listener); another negative value was taken as
    -1 without a word."""
    value = int(text)
    if not -1 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(
            f"{text}: must be a port in [0, {MAX_PORT}] (0: any free port) or -1 (no TCP)")
    return value


#: The largest value of a proto `uint32` field (a token id, `max_length`): protobuf refused a
#: larger one (and a negative one) with a ValueError traceback in the client commands.
MAX_UINT32 = (1 << 32) - 1


def uint32(text: str) -> int:
    """An integer in [0, 2^32 - 1] (`tokenize --max-length`)."""
    value = int(text)
    if not 0 <= value <= MAX_UINT32:
        raise argparse.ArgumentTypeError(f"{text}: must be in [0, {MAX_UINT32}]")
    return value


def token_ids(text: str) -> list[int]:
    """One argument of `detokenize`: token ids separated by spaces or commas, each in [0, 2^32 - 1]."""
    ids = []
    for part in text.replace(",", " ").split():
        try:
            value = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: not a token id (an integer in [0, {MAX_UINT32}])") from None
        if not 0 <= value <= MAX_UINT32:
            raise argparse.ArgumentTypeError(f"{part}: not a token id (an integer in [0, {MAX_UINT32}])")
        ids.append(value)
    return ids


def seconds(text: str) -> float:
    """A duration: a finite number of seconds, at least 0 (a negative silence timeout reset every
    worker before every batch; a negative retention failed deep in the NATS client)."""
    value = float(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: must be a finite number of seconds >= 0")
    return value


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """`--help` that shows each flag's default, so the command documents itself rather than leaving
    the reader to find the value in the README or the code: "(default: X)" is appended to a help
    text that does not already speak of a default, when there is one to show (not None, False, an
    empty list or suppressed)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text.lower()
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or default == []
            or not action.option_strings
        ):
            return text
        if isinstance(default, float) and default.is_integer():
            default = int(default)
        # Help strings are %-formatted by argparse: a literal % in the value must survive that.
        return f"{text} (default: {str(default).replace('%', '%%')})"


class DefaultsRawDescriptionHelpFormatter(argparse.RawDescriptionHelpFormatter, DefaultsHelpFormatter):
    """The same, keeping the line breaks of a description or epilog written as a block (`serve`'s
    fan-out example)."""
