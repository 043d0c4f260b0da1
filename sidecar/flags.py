"""Argument types of the command line: each refuses a value it cannot run with, and argparse names
the flag in the error."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be >= 1")
    return value


def seconds(text: str) -> float:
    """A duration: a finite number of seconds, at least 0 (a negative silence timeout reset every
    worker before every batch; a negative retention failed deep in the NATS client)."""
    value = float(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: must be a finite number of seconds >= 0")
    return value
