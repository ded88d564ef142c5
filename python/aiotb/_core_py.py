"""Pure-Python twin of the compiled ``aiotb._tokenbucket`` module: the executable spec.

``Bucket`` mirrors ``src/_tokenbucket/tokenbucket.c`` operation for operation (the
same IEEE double steps, Python ints where C has int64 nanoseconds) and the
binding's interface, so both cores give identical results."""

from __future__ import annotations

import heapq
import math
import numbers
import time
from asyncio import events
from typing import Any, Callable, Coroutine, Generator, NamedTuple, NoReturn

from ._clock import is_monotonic_loop

__all__ = ["Bucket", "READY", "IMPLEMENTATION"]

IMPLEMENTATION = "python"
MAX_SPAN = 1 << 61  # longest refill of a full bucket, ns (TB_MAX_SPAN)
MAX_RATES = 4  # TB_MAX_RATES
_HORIZON = 2.0**62  # ns: projected grants from here on read as never (tokenbucket.c: HORIZON, TB_NEVER)
LATE_CREDIT = 0.99  # of one token's time: how late a waiter may be woken and still be granted as of its turn
_FIFO, _SMALLEST_FIRST = 0, 1
_monotonic = time.monotonic
_get_running_loop = events._get_running_loop


class _Ready:
    """An awaitable that is already done: ``await READY`` returns None at once.

    It also has ``send``/``throw``/``close``, so ``asyncio.create_task`` accepts it."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return self  # type: ignore[return-value]

    def __iter__(self) -> _Ready:
        return self

    def __next__(self) -> NoReturn:
        raise StopIteration

    def send(self, value: object) -> NoReturn:
        raise StopIteration

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> NoReturn:
        if val is None:
            val = typ() if isinstance(typ, type) else typ
        raise val

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return "<aiotb ready>"


READY = _Ready()


# ---- validation, shared wording with the C binding ----

def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _positive(name: str, value: object) -> float:
    x = _real(name, value)
    if not (x > 0 and math.isfinite(x)):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return x


def to_ns(seconds: float) -> int:
    """A loop time in seconds as whole nanoseconds (round half up)."""
    if not (math.isfinite(seconds) and abs(seconds) < MAX_SPAN / 1e9):
        raise RuntimeError(f"the event loop's clock returned {seconds!r}, which is not a usable time")
    return math.floor(seconds * 1e9 + 0.5)


def to_seconds(ns: int) -> float:
    """The earliest loop time in seconds that reads as ns or later."""
    seconds = ns / 1e9
    while to_ns(seconds) < ns:
        seconds = math.nextafter(seconds, math.inf)
    return seconds


class _RateSpec(NamedTuple):
    max_rate: float
    time_period: float
    burst: float
    initial: float
    ns_per_token: float


def _parse_rate(prefix: str, max_rate: object, time_period: object = None, burst: object = None,
                initial: object = None, *, compat: bool) -> _RateSpec:
    """One rate's parameters, checked, named with prefix ("" or "rates[1] ")."""
    rate = _positive(f"{prefix}max_rate", max_rate)
    period = 60.0 if time_period is None else _positive(f"{prefix}time_period", time_period)
    if burst is None:
        capacity = rate if compat or rate >= 1 else 1.0
    else:
        capacity = _positive(f"{prefix}burst", burst)
        if capacity < 1:
            raise ValueError(f"{prefix}burst must be >= 1, the default amount, got {burst!r}")
    if initial is None:
        tokens = capacity
    else:
        tokens = _real(f"{prefix}initial", initial)
        if not (0 <= tokens <= capacity):
            raise ValueError(f"{prefix}initial must be between 0 and burst ({capacity!r}), got {initial!r}")
    ns_per_token = period * 1e9 / rate
    if not (ns_per_token > 0 and math.isfinite(ns_per_token)):
        raise ValueError(f"{prefix}max_rate / time_period is out of range: {max_rate!r} / {time_period!r}")
    if not (capacity * ns_per_token <= MAX_SPAN):
        raise ValueError(f"{prefix}burst {capacity!r} would take over 73 years to refill at {max_rate!r} "
                         f"per {time_period!r} s")
    if capacity > 2.0**50:  # amounts below burst / 2**50 cannot be counted: 1 must be countable
        raise ValueError(f"{prefix}burst must be at most 2**50, so that an amount of 1 counts exactly, "
                         f"got {capacity!r}")
    return _RateSpec(rate, period, capacity, tokens, ns_per_token)


def _window_period(seconds: float, given: object) -> int:
    ns = math.floor(seconds * 1e9 + 0.5)
    if not (1 <= ns <= MAX_SPAN):
        raise ValueError(f"time_period must be between 1 ns and 73 years, got {given!r}")
    return ns


# ---- the core: tokenbucket.c ----

class _Rate:
    __slots__ = ("ns_per_token", "burst", "burst_ns", "initial", "full_at", "full_at_frac")

    def __init__(self, ns_per_token: float, burst: float, initial: float = 0.0) -> None:
        self.ns_per_token = ns_per_token
        self.burst = burst
        self.burst_ns = burst * ns_per_token
        self.initial = initial
        self.full_at = 0
        self.full_at_frac = 0.0

    def copy(self) -> _Rate:
        twin = _Rate(self.ns_per_token, self.burst, self.initial)
        twin.full_at, twin.full_at_frac = self.full_at, self.full_at_frac
        return twin

    def tokens(self, now: int) -> float:
        owed = self.debt(now)
        if owed <= 0:
            return self.burst
        tokens = self.burst - owed / self.ns_per_token
        return tokens if tokens > 0 else 0.0

    def advance(self, span: float) -> None:
        whole = math.floor(span)
        frac = self.full_at_frac + (span - whole)
        if frac >= 1.0:
            frac -= 1.0
            whole += 1
        self.full_at += whole
        self.full_at_frac = frac

    def retreat(self, span: float) -> None:
        whole = math.floor(span)
        frac = self.full_at_frac - (span - whole)
        if frac < 0.0:
            frac += 1.0
            whole += 1
        if frac >= 1.0:  # a borrow below the fraction's precision rounds to no borrow
            frac -= 1.0
            whole -= 1
        self.full_at -= whole
        self.full_at_frac = frac

    def debt(self, now: int) -> float:
        return float(self.full_at - now) + self.full_at_frac

    def fits(self, need: float, now: int) -> bool:
        owed = self.debt(now)
        return (owed if owed > 0 else 0) + need <= self.burst_ns

    def full_before(self, now: int) -> bool:
        """Full for at least a whole nanosecond: younger refill is kept, or fractional grants would drift."""
        return self.full_at + (self.full_at_frac > 0) < now

    def consume(self, need: float, now: int) -> None:
        if self.full_before(now):
            self.full_at = now
            self.full_at_frac = 0.0
        self.advance(need)

    def fit_at(self, need: float, now: int) -> int:
        if self.fits(need, now):
            return now
        t = self.full_at + math.ceil(self.full_at_frac + need - self.burst_ns)
        if t <= now:
            t = now + 1
        while not self.fits(need, t):
            t += 1
        while t - 1 > now and self.fits(need, t - 1):
            t -= 1
        return t


NEVER = (1 << 63) - 1  # TB_NEVER
NO_PAUSE = -(1 << 63)  # INT64_MIN


class _Window:
    """tb_window: at most limit tokens granted in any [t, t + period)."""

    __slots__ = ("period", "limit", "log")

    def __init__(self, period: int = 0, limit: float = 0.0) -> None:
        self.period = period
        self.limit = limit
        self.log: list[list[Any]] = []  # [at, amount], oldest first

    def copy(self) -> _Window:
        twin = _Window(self.period, self.limit)
        twin.log = [list(grant) for grant in self.log]
        return twin

    def used(self, t: int) -> float:
        used = 0.0
        for at, amount in self.log:
            if at > t - self.period:
                used += amount
        return used

    def fits(self, amount: float, t: int) -> bool:
        return self.period == 0 or self.used(t) + amount <= self.limit

    def fit_at(self, amount: float, t: int) -> int:
        if self.fits(amount, t):
            return t
        for at, _ in self.log:
            leaves = at + self.period
            if leaves > t and self.fits(amount, leaves):
                return leaves
        return NEVER

    def forget(self, now: int) -> None:
        log = self.log
        drop = 0
        while drop < len(log) and log[drop][0] <= now - self.period:
            drop += 1
        del log[:drop]

    def record(self, amount: float, t: int) -> None:
        if self.period == 0:
            return
        self.forget(t)
        if self.log and self.log[-1][0] > t:
            t = self.log[-1][0]
        self.log.append([t, amount])

    def unrecord(self, amount: float) -> None:
        for i, (_, logged) in enumerate(self.log):
            if logged == amount:
                del self.log[i]
                return


class _Core:
    """tb_bucket: the rates, the window, a pause, and the queue of waiters."""

    __slots__ = ("rates", "window", "max_amount", "paused_until", "order", "fair", "anchored", "entries",
                 "heap", "enqueued", "with_deadline", "queued_tokens", "queued_error", "late_credit")

    def __init__(self, fair: bool, order: int) -> None:
        self.rates: list[_Rate] = []
        self.window = _Window()
        self.max_amount = math.inf
        self.paused_until = NO_PAUSE
        self.order = order
        self.fair = fair
        self.anchored = False
        self.entries: dict[int, list[Any]] = {}  # sequence -> [amount, deadline, handle]
        self.heap: list[tuple[float, int]] = []  # (order key, sequence), withdrawn ones left behind
        self.enqueued = 0
        self.with_deadline = 0
        self.queued_tokens = 0.0  # a running sum of the queued amounts...
        self.queued_error = 0.0  # ...and its compensation (Neumaier), as tokenbucket.c
        self.late_credit = 0.0

    def add_rate(self, ns_per_token: float, burst: float, initial: float) -> None:
        self.rates.append(_Rate(ns_per_token, burst, initial))
        self.max_amount = self.most_grantable()

    def set_window(self, period: int, limit: float) -> None:
        self.window.period, self.window.limit = period, limit
        self.max_amount = self.most_grantable()

    def most_grantable(self) -> float:
        most = self.window.limit if self.window.period else math.inf
        for rate in self.rates:
            if rate.burst < most:
                most = rate.burst
        return most

    # ---- every limit at once ----

    def all_fit(self, amount: float, t: int) -> bool:
        if t < self.paused_until:
            return False
        for rate in self.rates:
            if not rate.fits(amount * rate.ns_per_token, t):
                return False
        return self.window.fits(amount, t)

    def all_fit_at(self, amount: float, t: int) -> int:
        if t < self.paused_until:
            t = self.paused_until
        for rate in self.rates:
            ready = rate.fit_at(amount * rate.ns_per_token, t)
            if ready > t:
                t = ready
        opens = self.window.fit_at(amount, t)
        return opens if opens > t else t

    def take_all(self, amount: float, rates_at: int, now: int) -> None:
        for rate in self.rates:
            rate.consume(amount * rate.ns_per_token, rates_at)
        self.window.record(amount, now)

    def anchor(self, now: int) -> None:
        if not self.anchored:
            self.anchored = True
            for rate in self.rates:
                rate.full_at = now
                rate.full_at_frac = 0.0
                rate.advance((rate.burst - rate.initial) * rate.ns_per_token)

    def tokens(self, now: int) -> float:
        self.anchor(now)
        if now < self.paused_until:
            return 0.0
        tokens = self.window.limit - self.window.used(now) if self.window.period else math.inf
        for rate in self.rates:
            held = rate.tokens(now)
            if held < tokens:
                tokens = held
        return tokens if tokens > 0 else 0.0

    def must_queue(self) -> bool:
        return bool(self.entries) and (self.fair or self.with_deadline > 0)

    def can_take(self, amount: float, now: int) -> bool:
        self.anchor(now)
        return not self.must_queue() and self.all_fit(amount, now)

    def take(self, amount: float, now: int) -> bool:
        self.anchor(now)
        if self.must_queue() or not self.all_fit(amount, now):
            return False
        self.take_all(amount, now, now)
        return True

    # ---- projections ----

    def in_order(self) -> list[int]:
        """The queued sequences in grant order."""
        if self.order == _SMALLEST_FIRST:
            return sorted(self.entries, key=lambda seq: (self.entries[seq][0], seq))
        return sorted(self.entries)

    def simulated_grant(self, stop: int | None, amount: float, now: int) -> int:
        copy = _Core(self.fair, self.order)
        copy.rates = [rate.copy() for rate in self.rates]
        copy.window = self.window.copy()
        copy.paused_until = self.paused_until
        t = now
        for seq in self.in_order() + [None]:
            last = seq == stop or seq is None
            take = amount if last else self.entries[seq][0]
            t = copy.all_fit_at(take, t)
            if last or t == NEVER:
                break
            copy.take_all(take, t, t)
        return t

    def projected_behind(self, stop: int | None, ahead: float, amount: float, now: int) -> int:
        if len(self.rates) != 1 or self.window.period or self.paused_until > now:
            return self.simulated_grant(stop, amount, now)
        rate = self.rates[0]
        need = (ahead + amount) * rate.ns_per_token
        if need <= rate.burst_ns:
            return rate.fit_at(need, now)
        full = rate.copy()
        if full.full_before(now):
            full.full_at, full.full_at_frac = now, 0.0
        beyond = need - rate.burst_ns
        if not (beyond < _HORIZON and beyond < _HORIZON - float(full.full_at)):
            return NEVER  # as tokenbucket.c, where int64 nanoseconds would overflow
        full.advance(beyond)
        t = full.full_at + (full.full_at_frac > 0)
        return t if t > now else now

    def projected_grant(self, amount: float, now: int) -> int:
        self.anchor(now)
        return self.projected_behind(None, self.queued_tokens + self.queued_error, amount, now)

    # ---- the queue ----

    def enqueue(self, amount: float, now: int, deadline: int | None, handle: object) -> int | None:
        """The new waiter's sequence, or None if its grant cannot come by deadline."""
        if not (0 < amount <= self.max_amount and math.isfinite(amount)):
            raise ValueError(f"{amount!r} tokens could never be granted")
        self.anchor(now)
        if deadline is not None and self.projected_grant(amount, now) > deadline:
            return None
        self.enqueued += 1
        sequence = self.enqueued
        self.entries[sequence] = [amount, deadline, handle]
        heapq.heappush(self.heap, (amount if self.order == _SMALLEST_FIRST else 0.0, sequence))
        self.with_deadline += deadline is not None
        self._add_queued(amount)
        return sequence

    def _add_queued(self, x: float) -> None:
        total = self.queued_tokens + x
        if abs(self.queued_tokens) >= abs(x):
            self.queued_error += (self.queued_tokens - total) + x
        else:
            self.queued_error += (x - total) + self.queued_tokens
        self.queued_tokens = total

    def _head(self) -> int | None:
        heap, entries = self.heap, self.entries
        while heap and heap[0][1] not in entries:
            heapq.heappop(heap)
        return heap[0][1] if heap else None

    def _unlink(self, sequence: int) -> object:
        amount, deadline, handle = self.entries.pop(sequence)
        self.with_deadline -= deadline is not None
        if self.entries:
            self._add_queued(-amount)
        else:
            self.queued_tokens = self.queued_error = 0.0
        if len(self.heap) > 2 * len(self.entries) + 16:  # withdrawn entries must not pile up
            self.heap = [item for item in self.heap if item[1] in self.entries]
            heapq.heapify(self.heap)
        return handle

    def withdraw(self, sequence: int) -> object:
        return self._unlink(sequence) if sequence in self.entries else None

    def ready_head(self, now: int) -> object:
        self.anchor(now)
        head = self._head()
        if head is None:
            return None
        amount, _, handle = self.entries[head]
        return handle if self.all_fit(amount, now) else None

    def pop_head(self, now: int, grant: bool) -> object:
        self.anchor(now)
        head = self._head()
        assert head is not None
        if grant:
            amount = self.entries[head][0]
            ready = self.all_fit_at(amount, now - self.late_credit_ns())
            self.take_all(amount, ready if ready < now else now, now)
        return self._unlink(head)

    def late_credit_ns(self) -> int:
        fastest = math.inf
        for rate in self.rates:
            if rate.ns_per_token < fastest:
                fastest = rate.ns_per_token
        return int(self.late_credit * fastest) if self.rates else 0

    def head_ready_at(self, now: int) -> int | None:
        self.anchor(now)
        head = self._head()
        if head is None:
            return None
        return self.all_fit_at(self.entries[head][0], now)

    # ---- changes ----

    def set_rate(self, index: int, ns_per_token: float, burst: float, now: int) -> None:
        self.anchor(now)
        tokens = self.rates[index].tokens(now)
        rate = self.rates[index] = _Rate(ns_per_token, burst)
        rate.full_at = now
        rate.advance((burst - (tokens if tokens < burst else burst)) * ns_per_token)
        self.max_amount = self.most_grantable()

    def pause_until(self, until: int) -> None:
        if until > self.paused_until:
            self.paused_until = until

    def withdraw_stranded(self, now: int) -> tuple[object, bool] | None:
        self.anchor(now)
        order = self.in_order()
        for seq in order:
            if self.entries[seq][0] > self.max_amount:
                return self._unlink(seq), True
        if self.with_deadline == 0:
            return None
        ahead = 0.0
        for seq in order:
            amount, deadline, _ = self.entries[seq]
            if deadline is not None and self.projected_behind(seq, ahead, amount, now) > deadline:
                return self._unlink(seq), False
            ahead += amount
        return None

    def refund(self, amount: float, now: int) -> None:
        self.anchor(now)
        for rate in self.rates:
            rate.retreat(amount * rate.ns_per_token)
        self.window.unrecord(amount)

    def rebase(self, then: int, now: int) -> None:
        if not self.anchored:
            return
        shift = now - then
        for rate in self.rates:
            rate.full_at += shift
        for grant in self.window.log:
            grant[0] += shift
        if self.paused_until != NO_PAUSE:
            self.paused_until += shift
        for entry in self.entries.values():
            if entry[1] is not None:
                entry[1] += shift


# ---- the binding: _tokenbucketmodule.c ----

class Bucket:
    """The limiter's engine: validation, the clock, the fast path, and core calls for the asyncio glue."""

    __slots__ = ("_core", "_max_rates", "_periods", "_compat", "_domain", "_last_now",
                 "_granted_count", "_granted_tokens")

    _wait: Callable[[float, float | None], Coroutine[Any, Any, None]]  # the glue's slow path

    def __new__(cls, max_rate: float | None = None, time_period: float | None = None, burst: float | None = None,
                initial: float | None = None, fair: bool = True, compat: bool = False,
                rates: Any = None, window: bool = False) -> Bucket:
        self = object.__new__(cls)
        for name, flag in (("fair", fair), ("compat", compat), ("window", window)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {flag!r}")
        core = self._core = _Core(fair, _SMALLEST_FIRST if compat else _FIFO)
        self._max_rates: list[float] = []
        self._periods: list[float] = []
        if rates is not None:
            if max_rate is not None or time_period is not None or burst is not None or initial is not None or window:
                raise TypeError("rates= takes the place of max_rate, time_period, burst and initial")
            if not isinstance(rates, (list, tuple)):
                raise TypeError("rates must be a list or tuple of (max_rate, time_period[, burst[, initial]]) tuples")
            if not 1 <= len(rates) <= MAX_RATES:
                raise ValueError(f"rates must hold 1 to {MAX_RATES} rates, got {len(rates)}")
            for i, item in enumerate(rates):
                if not isinstance(item, tuple) or not 2 <= len(item) <= 4:
                    raise TypeError(f"rates[{i}] must be a tuple (max_rate, time_period[, burst[, initial]]), "
                                    f"got {item!r}")
                spec = _parse_rate(f"rates[{i}] ", *item, compat=compat)
                core.add_rate(spec.ns_per_token, spec.burst, spec.initial)
                self._max_rates.append(spec.max_rate)
                self._periods.append(spec.time_period)
        elif max_rate is None:
            raise TypeError("max_rate must be a real number, got None (or give rates=)")
        elif window:
            if burst is not None or initial is not None:
                raise TypeError("a window takes no burst or initial: its limit is max_rate")
            spec = _parse_rate("", max_rate, time_period, compat=True)
            core.set_window(_window_period(spec.time_period, time_period), spec.max_rate)
            self._max_rates.append(spec.max_rate)
            self._periods.append(spec.time_period)
        else:
            spec = _parse_rate("", max_rate, time_period, burst, initial, compat=compat)
            core.add_rate(spec.ns_per_token, spec.burst, spec.initial)
            self._max_rates.append(spec.max_rate)
            self._periods.append(spec.time_period)
        core.late_credit = LATE_CREDIT
        self._compat = compat
        self._domain: object = None
        self._last_now: int | None = None
        self._granted_count = 0  # grants kept (a grant given back by a cancelled waiter is not counted)
        self._granted_tokens = 0.0
        return self

    def _take_counted(self, amount: float) -> bool:
        if not self._core.take(amount, self._now()):
            return False
        self._granted_count += 1
        self._granted_tokens += amount
        return True

    # ---- the clock ----

    def _now(self) -> int:
        loop = _get_running_loop()
        if loop is None:
            domain, seconds = None, _monotonic()
        else:
            domain = None if is_monotonic_loop(loop) else loop
            seconds = loop.time()
        now = to_ns(seconds)
        if domain is not self._domain:
            if self._last_now is not None:
                self._core.rebase(self._last_now, now)
            self._domain = domain
        self._last_now = now
        return now

    # ---- arguments ----

    def _amount(self, amount: object) -> float:
        x = _real("amount", amount)
        if x > self._core.max_amount:
            if self._compat:
                raise ValueError("Can't acquire more than the maximum capacity")
            raise ValueError(f"amount must not exceed burst ({self._core.max_amount!r}), got {amount!r}")
        if not (x > 0):
            raise ValueError(f"amount must be finite and > 0, got {amount!r}")
        if x < math.ldexp(self._core.max_amount, -50):
            raise ValueError(f"amount must be at least burst / 2**50 to be counted exactly, got {amount!r}")
        return x

    def _timeout(self, timeout: object) -> float | None:
        if timeout is None:
            return None
        x = _real("timeout", timeout)
        if not (x >= 0):
            raise ValueError(f"timeout must be None or >= 0, got {timeout!r}")
        if self._compat:
            raise TypeError("AsyncLimiter.acquire() takes no timeout; use aiotb.Limiter for timeouts")
        return None if x >= MAX_SPAN / 1e9 else x

    # ---- the public surface ----

    @property
    def max_rate(self) -> float:
        return self._max_rates[0]

    @property
    def time_period(self) -> float:
        return self._periods[0]

    @property
    def burst(self) -> float:
        return self._core.max_amount

    @property
    def rate(self) -> float:
        return self._max_rates[0] / self._periods[0]

    @property
    def rates(self) -> tuple[tuple[float, float, float], ...]:
        return tuple((m, p, r.burst) for m, p, r in zip(self._max_rates, self._periods, self._core.rates))

    @property
    def fair(self) -> bool:
        return self._core.fair

    @property
    def tokens(self) -> float:
        return self._core.tokens(self._now())

    @property
    def waiting(self) -> int:
        return len(self._core.entries)

    def __aenter__(self) -> Any:
        if self._take_counted(1.0):
            return READY
        return self._wait(1.0, None)

    def __aexit__(self, *exc_info: object) -> Any:
        return READY

    def acquire(self, amount: float = 1, timeout: float | None = None) -> Coroutine[Any, Any, None]:
        x = self._amount(amount)
        limit = self._timeout(timeout)
        return self._acquisition(x, limit)

    async def _acquisition(self, amount: float, timeout: float | None) -> None:
        if not self._take_counted(amount):
            await self._wait(amount, timeout)

    def try_acquire(self, amount: float = 1) -> bool:
        return self._take_counted(self._amount(amount))

    def has_capacity(self, amount: float = 1) -> bool:
        if (self._compat and isinstance(amount, (int, float)) and not isinstance(amount, bool)
                and amount > self._core.max_amount):
            return False  # aiolimiter answers False above capacity
        return self._core.can_take(self._amount(amount), self._now())

    # ---- for the asyncio glue ----

    def _enqueue(self, amount: float, timeout: float | None, handle: object) -> int:
        now = self._now()
        deadline = None if timeout is None else now + to_ns(timeout)
        sequence = self._core.enqueue(amount, now, deadline, handle)
        if sequence is None:
            raise TimeoutError(f"{amount!r} tokens cannot be granted within {timeout!r} s")
        return sequence

    def _withdraw(self, ident: int) -> bool:
        return self._core.withdraw(ident) is not None

    def _now_at_least(self, at: float | None) -> int:
        """The clock's time, or loop time at if later: a timer the loop ran up to its resolution early."""
        now = self._now()
        if at is not None:
            due = to_ns(at)
            if due > now:
                now = due
        return now

    def _ready_head(self, at: float | None = None) -> Any:
        return self._core.ready_head(self._now_at_least(at))

    def _pop_head(self, grant: bool, at: float | None = None) -> Any:
        now = self._now_at_least(at)
        if not self._core.entries:
            raise IndexError("no waiter is queued")
        if grant:
            self._granted_count += 1
            self._granted_tokens += self._core.entries[self._core._head()][0]
        return self._core.pop_head(now, grant)

    def _head_ready_at(self) -> float | None:
        at = self._core.head_ready_at(self._now())
        return None if at is None else to_seconds(at)

    def _refund(self, amount: float) -> None:
        self._core.refund(amount, self._now())
        self._granted_count -= 1
        self._granted_tokens -= amount

    def _granted(self) -> tuple[int, float]:
        return self._granted_count, self._granted_tokens

    def _set_rate(self, index: int, max_rate: object, time_period: object, burst: object) -> None:
        core = self._core
        window = core.window.period != 0
        if not 0 <= index < (1 if window else len(core.rates)):
            raise IndexError(f"index must name one of the limiter's rates, got {index}")
        spec = _parse_rate("", max_rate, time_period, None if window else burst, compat=window or self._compat)
        now = self._now()
        if window:
            if burst is not None:
                raise TypeError("a window takes no burst: its limit is max_rate")
            core.set_window(_window_period(spec.time_period, time_period), spec.max_rate)
        else:
            core.set_rate(index, spec.ns_per_token, spec.burst, now)
        self._max_rates[index] = spec.max_rate
        self._periods[index] = spec.time_period

    def _pause_until(self, when: object) -> None:
        seconds = _real("when", when)
        if math.isnan(seconds):
            raise ValueError(f"when must be a loop time, got {when!r}")
        self._now()
        if seconds >= MAX_SPAN / 1e9:
            raise ValueError(f"when is too far ahead: {when!r}")
        if seconds > -MAX_SPAN / 1e9:
            self._core.pause_until(to_ns(seconds))

    def _withdraw_stranded(self) -> Any:
        return self._core.withdraw_stranded(self._now())

    def _reserve(self, amount: object, handle: object) -> tuple[int, float]:
        if self._compat:
            raise TypeError("AsyncLimiter has no reservations; use aiotb.Limiter")
        x = self._amount(amount)
        now = self._now()
        ready = self._core.projected_grant(x, now)
        sequence = self._core.enqueue(x, now, ready, handle)
        assert sequence is not None
        return sequence, to_seconds(ready)
