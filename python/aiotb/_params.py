"""The cold parameters of a limiter, checked once, here, for both engines.

A limiter's rates, window and fairness are checked when it is made or changed, and reach the
engine (``Bucket._configure``, ``_set_rate``, ``_set_window``) normalised: nanoseconds per token,
capacity, initial tokens. Only the hot parameters (``amount``, ``timeout``) are checked by the
engine itself, on every call."""

from __future__ import annotations

import datetime
import email.utils
import math
import numbers
import re
from typing import NamedTuple, Sequence, cast

from ._core import MAX_SPAN

MAX_RATES = 4  # TB_MAX_RATES
_SPAN_YEARS = f"{MAX_SPAN / 1e9 / (365.25 * 86400):.0f} years"  # the longest refill, in words


def real(name: str, value: object) -> float:
    """value as a float, or TypeError naming the parameter (bool is no number here)."""
    if type(value) is float:  # the common case, without the ABC's check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    try:
        return float(value)
    except OverflowError:  # an integer beyond the float range
        return math.inf if cast(float, value) > 0 else -math.inf


def positive(name: str, value: object) -> float:
    """A finite number > 0, or TypeError/ValueError naming the parameter."""
    x = real(name, value)
    if not (x > 0 and math.isfinite(x)):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return x


def timeout(value: object) -> float | None:
    """A timeout in seconds, None for none (also for one too long to matter), or TypeError/ValueError naming
    it: the engine's rule, for the callers that check it before the engine sees it."""
    if value is None:
        return None
    x = real("timeout", value)
    if not x >= 0:
        raise ValueError(f"timeout must be None or >= 0, got {value!r}")
    return x if x < MAX_SPAN / 1e9 else None


def flag(name: str, value: object) -> bool:
    """A bool, or TypeError naming the parameter."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return value


class Rate(NamedTuple):
    """One rate as given (max_rate per time_period, burst) and as the engine takes it."""

    max_rate: float
    time_period: float
    burst: float
    initial: float
    ns_per_token: float

    def engine(self) -> tuple[float, float, float]:
        """(ns_per_token, burst, initial): what ``Bucket._configure`` takes for a rate."""
        return (self.ns_per_token, self.burst, self.initial)


def rate(prefix: str, max_rate: object, time_period: object, burst: object = None,
         initial: object = None, *, burst_below_one: bool = False) -> Rate:
    """One rate's parameters, checked, named with prefix ("" or "rates[1] "). The default burst is
    max_rate, at least 1 (the default amount) unless burst_below_one (aiolimiter's capacity). A
    time_period of None is a TypeError, as in aiolimiter: the default (60) is the constructors'."""
    per = positive(f"{prefix}max_rate", max_rate)
    period = positive(f"{prefix}time_period", time_period)
    if burst is None:
        capacity = per if burst_below_one or per >= 1 else 1.0
    else:
        capacity = positive(f"{prefix}burst", burst)
        if capacity < 1:
            raise ValueError(f"{prefix}burst must be >= 1, the default amount, got {burst!r}")
    if initial is None:
        tokens = capacity
    else:
        tokens = real(f"{prefix}initial", initial)
        if not (0 <= tokens <= capacity):
            raise ValueError(f"{prefix}initial must be between 0 and burst ({capacity!r}), got {initial!r}")
    ns_per_token = period * 1e9 / per
    if not (ns_per_token > 0 and math.isfinite(ns_per_token)):
        raise ValueError(f"{prefix}max_rate / time_period is out of range: {max_rate!r} / {time_period!r}")
    if not (capacity * ns_per_token <= MAX_SPAN):
        raise ValueError(f"{prefix}burst {capacity!r} would take over {_SPAN_YEARS} to refill at {max_rate!r} "
                         f"per {time_period!r} s")
    if capacity > 2.0**50:  # amounts below burst / 2**50 cannot be counted: 1 must be countable
        raise ValueError(f"{prefix}burst must be at most 2**50, so that an amount of 1 counts exactly, "
                         f"got {capacity!r}")
    return Rate(per, period, capacity, tokens, ns_per_token)


def rates(given: object) -> list[Rate]:
    """``rates=[(max_rate, time_period[, burst[, initial]]), ...]``, checked."""
    if not isinstance(given, (list, tuple)):
        raise TypeError("rates must be a list or tuple of (max_rate, time_period[, burst[, initial]]) tuples")
    if not 1 <= len(given) <= MAX_RATES:
        raise ValueError(f"rates must hold 1 to {MAX_RATES} rates, got {len(given)}")
    checked = []
    for i, item in enumerate(given):
        if not isinstance(item, tuple) or not 2 <= len(item) <= 4:
            raise TypeError(f"rates[{i}] must be a tuple (max_rate, time_period[, burst[, initial]]), got {item!r}")
        checked.append(rate(f"rates[{i}] ", *item))
    return checked


def limiter_rates(max_rate: object, time_period: object, burst: object, initial: object,
                  given_rates: Sequence[tuple[float, ...]] | None) -> list[Rate]:
    """The rates of ``Limiter(max_rate, time_period, burst=, initial=)`` or ``Limiter(rates=...)``;
    with rates=, time_period must be the constructors' default, 60."""
    if given_rates is not None:
        if max_rate is not None or time_period != 60 or burst is not None or initial is not None:
            raise TypeError("rates= takes the place of max_rate, time_period, burst and initial")
        return rates(given_rates)
    if max_rate is None:
        raise TypeError("max_rate must be a real number, got None (or give rates=)")
    return [rate("", max_rate, time_period, burst, initial)]


def window(max_rate: object, time_period: object) -> tuple[Rate, int]:
    """A window's limit and period, checked: (the rate as given, the period in whole ns)."""
    spec = rate("", max_rate, time_period, burst_below_one=True)
    ns = math.floor(spec.time_period * 1e9 + 0.5)
    if not (1 <= ns <= MAX_SPAN):
        raise ValueError(f"time_period must be between 1 ns and {_SPAN_YEARS}, got {time_period!r}")
    return spec, ns


def index(value: object, count: int) -> int:
    """An index among count rates, or TypeError/IndexError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"index must be an int, got {value!r}")
    if not 0 <= value < count:
        raise IndexError(f"index must name one of the limiter's rates, got {value!r}")
    return value


def loop_time(name: str, value: object) -> float:
    """A loop time (any real number but NaN), or TypeError/ValueError."""
    when = real(name, value)
    if math.isnan(when):
        raise ValueError(f"{name} must be a loop time, got {value!r}")
    return when


def non_negative(name: str, value: object) -> float:
    """A finite number >= 0 (a span, a count), or TypeError/ValueError."""
    span = real(name, value)
    if not (span >= 0 and math.isfinite(span)):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return span


def pause(name: str, value: object, span: float | None = None) -> float:
    """The span of a pause: non_negative(name, value), or span if given, shorter than the engine's range
    (about 9 years), or TypeError/ValueError."""
    if span is None:
        span = non_negative(name, value)
    if span >= MAX_SPAN / 1e9:
        raise ValueError(f"{name} must be below {MAX_SPAN / 1e9:.0f} s (about 9 years), got {value!r}")
    return span


_DELTA_SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?")
_SHOWN = 80  # the most characters of a header value an error message repeats


def retry_after(value: object, wall_now: datetime.datetime) -> float:
    """The seconds a ``Retry-After`` value asks to wait: a header value (delta-seconds, or an HTTP
    date, taken against wall_now, 0 if past), or a number of seconds; TypeError/ValueError. A
    header value raises nothing but ValueError, whatever its text."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("latin-1")
    if not isinstance(value, str):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"value must be a Retry-After header value or a number of seconds, got {value!r}")
        return pause("value", value)
    shown = value if len(value) <= _SHOWN else value[:_SHOWN] + "..."
    text = value.strip()
    if _DELTA_SECONDS.fullmatch(text):
        return pause("value", shown, float(text))
    try:
        when = email.utils.parsedate_to_datetime(text)
        if when.tzinfo is None:  # "-0000": UTC, as HTTP dates are
            when = when.replace(tzinfo=datetime.timezone.utc)
        span = (when - wall_now).total_seconds()
    except (TypeError, ValueError, IndexError, OverflowError):  # OverflowError: a year or offset out of range
        raise ValueError(f"value must be delta-seconds or an HTTP date, got {shown!r}") from None
    return pause("value", shown, max(0.0, span))
