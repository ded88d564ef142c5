"""Pure-Python twin of the binding's conversions between Python values and the core's: loop times and
nanoseconds (``binding/clock.h``), real numbers as the C API reads them (``binding/params.h``), the core's
statuses as exceptions and errors reported to ``sys.unraisablehook`` (``_tokenbucketmodule.c``)."""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

from ._limits_py import ENOMEM, MAX_SPAN, OK

MAX_SECONDS = MAX_SPAN / 1e9  # (double)TB_MAX_SPAN / 1e9


def seconds_to_ns(seconds: float) -> int:
    """A loop time in seconds as whole nanoseconds (round half up), or RuntimeError if unusable."""
    if not (math.isfinite(seconds) and abs(seconds) < MAX_SECONDS):
        raise RuntimeError(f"the event loop's clock returned {seconds!r}, which is not a usable time")
    return math.floor(seconds * 1e9 + 0.5)


def ns_to_seconds(ns: int) -> float:
    """The earliest loop time in seconds that reads as ns or later."""
    seconds = ns / 1e9  # C: (double)ns / 1e9, one rounding as here
    while math.floor(seconds * 1e9 + 0.5) < ns:
        seconds = math.nextafter(seconds, math.inf)
    return seconds


def double(value: Any) -> float:
    """value as a C double, as PyFloat_AsDouble converts it (a float, __float__ or __index__)."""
    if isinstance(value, float):
        return value
    if hasattr(type(value), "__float__"):
        return float(value)
    return float(operator.index(value))


def real_number(name: str, value: object) -> float:
    """A real number (not bool) as a float, overflowing to +-inf; TypeError naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    try:
        return float(value)
    except OverflowError:
        return -math.inf if value < 0 else math.inf


class _Unraisable:
    """Raises its error when dropped: Python reports it to sys.unraisablehook, as C's PyErr_WriteUnraisable."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __del__(self) -> None:
        raise self.error


def write_unraisable(error: BaseException) -> None:
    """Reports error to sys.unraisablehook and goes on."""
    _Unraisable(error)  # dropped at once (CPython; elsewhere at the next collection)


def core_status(status: int) -> None:
    """Nothing for OK after a checked call, else MemoryError or SystemError."""
    if status == OK:
        return
    if status == ENOMEM:
        raise MemoryError
    raise SystemError(f"the core rejected checked parameters (status {status})")
