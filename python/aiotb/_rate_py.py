"""Pure-Python twin of ``src/_tokenbucket/rate.h`` and ``rate.c``: one rate of the core, GCRA's "full again at"
instant F in ticks (C: tb_gcra, an int64; here an int), and the arithmetic of a grant on it.

Each function has its C namesake without the ``tb_`` prefix (``tb_rate_fit_at`` is ``rate_fit_at``;
``tb_rate_make`` is ``Rate(...)``) and takes the same steps, bit for bit, as ``_limits_py`` says of the twin."""

from __future__ import annotations

import math

MAX_SPAN = 1 << 58  # TB_MAX_SPAN: longest refill of a full bucket, bound of |clock readings|, ns (~9.1 years)
TICKS_PER_NS = 16  # TB_TICKS_PER_NS: the resolution of a rate's state F
INT64_MAX = (1 << 63) - 1


class Rate:
    """tb_rate: one rate's parameters: refill of one token every ns_per_token, at most burst tokens."""

    __slots__ = ("ns_per_token", "burst", "burst_ns", "initial", "burst_ticks", "token_ticks")

    def __init__(self, ns_per_token: float = 0.0, burst: float = 0.0, initial: float = 0.0) -> None:
        self.ns_per_token = ns_per_token
        self.burst = burst
        self.burst_ns = burst * ns_per_token  # the most debt the rate may carry
        self.initial = initial  # tokens at the first reading of the clock
        self.burst_ticks = ticks(self.burst_ns)  # burst_ns in ticks, rounded up like every need
        self.token_ticks = ticks(ns_per_token)  # ns_per_token in ticks, rounded up: the need of one token


def positive(x: float) -> bool:
    """Whether x is a finite number > 0."""
    return x > 0 and math.isfinite(x)


def ticks(ns: float) -> int:
    """A span of ns >= 0 in ticks, rounded up: what a grant of that span needs (INT64_MAX from 2^63 ticks)."""
    exact = ns * TICKS_PER_NS
    if not exact < 2.0**63:
        return INT64_MAX
    whole = int(exact)
    return whole + (whole < exact)


def ticks_down(ns: float) -> int:
    """A span of ns >= 0 in whole ticks, rounded down: what a refund gives back, never more than was paid
    (a grant paid its need rounded up, and a rate that filled up since kept none of the excess)."""
    exact = ns * TICKS_PER_NS
    return int(exact) if exact < 2.0**63 else INT64_MAX


def at_tick(now: int) -> int:
    """The instant now in ticks."""
    return now * TICKS_PER_NS


def ns_from(t: int) -> int:
    """The first whole nanosecond at or after tick t."""
    return -(-t // TICKS_PER_NS)  # C: t / 16 + (t % 16 > 0), truncating division: the same ceiling


def full_since(now: int) -> int:
    """The latest F a rate full at now may keep: a fuller one is just as full, and F stays in range."""
    return at_tick(now) - TICKS_PER_NS


def gcra_debt(f: int, now: int) -> int:
    """F - now in ticks: how long until the rate is full again (negative: full since then)."""
    return f - at_tick(now)


def rate_fits(r: Rate, f: int, need: int, now: int) -> bool:
    """Whether need ticks of tokens fit in the rate at now."""
    owed = gcra_debt(f, now)
    return (owed if owed > 0 else 0) <= r.burst_ticks - need


def full_before(f: int, now: int) -> bool:
    """Whether the rate has been full for at least a whole nanosecond at now (F <= now - 1 ns)."""
    return f <= full_since(now)


def gcra_take(f: int, need: int, now: int) -> int:
    """F after taking need ticks of tokens at now: max(F, now) + need, except that a rate full for
    less than a nanosecond keeps its F."""
    if full_before(f, now):
        f = at_tick(now)
    return f + need


def rate_ok(ns_per_token: float, burst: float, initial: float) -> bool:
    """Whether a rate's parameters are usable."""
    return (positive(ns_per_token) and positive(burst) and initial >= 0 and initial <= burst
            and burst * ns_per_token <= float(MAX_SPAN))


def rate_fit_at(r: Rate, f: int, need: int, now: int) -> int:
    """First instant >= now at which need (<= burst_ticks) ticks of tokens fit: F - t <= burst - need."""
    return now if rate_fits(r, f, need, now) else ns_from(f - (r.burst_ticks - need))


def rate_balance(r: Rate, f: int, now: int) -> float:
    """Tokens one rate holds at now, below 0 when F is more than a burst ahead (tokens reserved ahead)."""
    owed = gcra_debt(f, now)
    return r.burst if owed <= 0 else r.burst - float(owed) / TICKS_PER_NS / r.ns_per_token


def rate_tokens(r: Rate, f: int, now: int) -> float:
    """Tokens one rate holds at now: its balance, but never below 0."""
    tokens = rate_balance(r, f, now)
    return tokens if tokens > 0 else 0.0


def rate_holding(r: Rate, tokens: float, now: int) -> int:
    """F for a rate that holds tokens at now (at most its burst; below 0, a debt: full again at most MAX_SPAN
    after now)."""
    owed_ns = (r.burst - (tokens if tokens < r.burst else r.burst)) * r.ns_per_token
    return at_tick(now) + ticks(owed_ns if owed_ns < MAX_SPAN else float(MAX_SPAN))
