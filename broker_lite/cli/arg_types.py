"""Argument types the ``broker-lite`` commands share: numbers with a lower bound.

Each one turns the option's text into a number or raises
``argparse.ArgumentTypeError`` (argparse then prints usage and exits 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

__all__ = ["non_negative_seconds", "positive_float", "positive_int"]

_N = TypeVar("_N", int, float)


def _number(text: str, cast: Callable[[str], _N], what: str) -> _N:
    """``cast(text)``, or the error ``'TEXT' is not WHAT``."""
    try:
        return cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def positive_int(text: str) -> int:
    value = _number(text, int, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float, "a number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def non_negative_seconds(text: str) -> float:
    value = _number(text, float, "a number of seconds")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value
