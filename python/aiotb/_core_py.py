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
from typing import Any, Callable, Coroutine, Generator, NoReturn

from ._clock import is_monotonic_loop

__all__ = ["Bucket", "READY", "IMPLEMENTATION"]

IMPLEMENTATION = "python"
MAX_SPAN = 1 << 61  # longest refill of a full bucket, ns (TB_MAX_SPAN)
LATE_CREDIT = 2_000_000  # ns of a late wake-up a waiter is still granted for: more than timer granularity
_FIFO, _SMALLEST_FIRST = 0, 1
_HORIZON = 2.0**62  # ns: projected grants from here on read as never (tokenbucket.c: HORIZON, TB_NEVER)
_NEVER = (1 << 63) - 1  # TB_NEVER
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


# ---- the core: tokenbucket.c ----

class _Rate:
    __slots__ = ("ns_per_token", "burst", "burst_ns", "full_at", "full_at_frac")

    def __init__(self, ns_per_token: float, burst: float) -> None:
        self.ns_per_token = ns_per_token
        self.burst = burst
        self.burst_ns = burst * ns_per_token
        self.full_at = 0
        self.full_at_frac = 0.0

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


class _Core:
    """tb_bucket: one rate and the queue of waiters."""

    __slots__ = ("rate", "order", "fair", "anchored", "initial", "entries", "heap",
                 "enqueued", "with_deadline", "queued_tokens", "queued_error", "late_credit")

    def __init__(self, ns_per_token: float, burst: float, initial: float, fair: bool, order: int) -> None:
        self.rate = _Rate(ns_per_token, burst)
        self.order = order
        self.fair = fair
        self.anchored = False
        self.initial = initial
        self.entries: dict[int, list[Any]] = {}  # sequence -> [amount, deadline, handle]
        self.heap: list[tuple[float, int]] = []  # (order key, sequence), withdrawn ones left behind
        self.enqueued = 0
        self.with_deadline = 0
        self.queued_tokens = 0.0  # a running sum of the queued amounts...
        self.queued_error = 0.0  # ...and its compensation (Neumaier), as tokenbucket.c
        self.late_credit = 0

    def anchor(self, now: int) -> None:
        if not self.anchored:
            self.anchored = True
            self.rate.full_at = now
            self.rate.full_at_frac = 0.0
            self.rate.advance((self.rate.burst - self.initial) * self.rate.ns_per_token)

    def tokens(self, now: int) -> float:
        self.anchor(now)
        owed = self.rate.debt(now)
        if owed <= 0:
            return self.rate.burst
        tokens = self.rate.burst - owed / self.rate.ns_per_token
        return tokens if tokens > 0 else 0.0

    def must_queue(self) -> bool:
        return bool(self.entries) and (self.fair or self.with_deadline > 0)

    def can_take(self, amount: float, now: int) -> bool:
        self.anchor(now)
        return not self.must_queue() and self.rate.fits(amount * self.rate.ns_per_token, now)

    def take(self, amount: float, now: int) -> bool:
        self.anchor(now)
        need = amount * self.rate.ns_per_token
        if self.must_queue() or not self.rate.fits(need, now):
            return False
        self.rate.consume(need, now)
        return True

    def projected_grant(self, amount: float, now: int) -> int:
        self.anchor(now)
        rate = self.rate
        need = (self.queued_tokens + self.queued_error + amount) * rate.ns_per_token
        if need <= rate.burst_ns:
            return rate.fit_at(need, now)
        full = _Rate(rate.ns_per_token, rate.burst)
        full.full_at, full.full_at_frac = (now, 0.0) if rate.full_before(now) else (rate.full_at, rate.full_at_frac)
        beyond = need - rate.burst_ns
        if not (beyond < _HORIZON and beyond < _HORIZON - float(full.full_at)):
            return _NEVER  # as tokenbucket.c, where int64 nanoseconds would overflow
        full.advance(beyond)
        t = full.full_at + (full.full_at_frac > 0)
        return t if t > now else now

    def enqueue(self, amount: float, now: int, deadline: int | None, handle: object) -> int | None:
        """The new waiter's sequence, or None if its grant cannot come by deadline."""
        if not (0 < amount <= self.rate.burst and math.isfinite(amount)):
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
        return handle if self.rate.fits(amount * self.rate.ns_per_token, now) else None

    def pop_head(self, now: int, grant: bool) -> object:
        self.anchor(now)
        head = self._head()
        assert head is not None
        if grant:
            need = self.entries[head][0] * self.rate.ns_per_token
            ready = self.rate.fit_at(need, now - self.late_credit)
            self.rate.consume(need, ready if ready < now else now)
        return self._unlink(head)

    def head_ready_at(self, now: int) -> int | None:
        self.anchor(now)
        head = self._head()
        if head is None:
            return None
        return self.rate.fit_at(self.entries[head][0] * self.rate.ns_per_token, now)

    def refund(self, amount: float, now: int) -> None:
        self.anchor(now)
        self.rate.retreat(amount * self.rate.ns_per_token)

    def rebase(self, then: int, now: int) -> None:
        if not self.anchored:
            return
        shift = now - then
        self.rate.full_at += shift
        for entry in self.entries.values():
            if entry[1] is not None:
                entry[1] += shift


# ---- the binding: _tokenbucketmodule.c ----

class Bucket:
    """The limiter's engine: validation, the clock, the fast path, and core calls for the asyncio glue."""

    __slots__ = ("_core", "_max_rate", "_time_period", "_compat", "_domain", "_last_now",
                 "_granted_count", "_granted_tokens")

    _wait: Callable[[float, float | None], Coroutine[Any, Any, None]]  # the glue's slow path

    def __new__(cls, max_rate: float, time_period: float = 60, burst: float | None = None,
                initial: float | None = None, fair: bool = True, compat: bool = False) -> Bucket:
        self = object.__new__(cls)
        rate = _positive("max_rate", max_rate)
        period = _positive("time_period", time_period)
        if not isinstance(fair, bool):
            raise TypeError(f"fair must be a bool, got {fair!r}")
        if not isinstance(compat, bool):
            raise TypeError(f"compat must be a bool, got {compat!r}")
        if burst is None:
            capacity = rate if compat or rate >= 1 else 1.0
        else:
            capacity = _positive("burst", burst)
            if capacity < 1:
                raise ValueError(f"burst must be >= 1, the default amount, got {burst!r}")
        if initial is None:
            tokens = capacity
        else:
            tokens = _real("initial", initial)
            if not (0 <= tokens <= capacity):
                raise ValueError(f"initial must be between 0 and burst ({capacity!r}), got {initial!r}")
        ns_per_token = period * 1e9 / rate
        if not (ns_per_token > 0 and math.isfinite(ns_per_token)):
            raise ValueError(f"max_rate / time_period is out of range: {max_rate!r} / {time_period!r}")
        if not (capacity * ns_per_token <= MAX_SPAN):
            raise ValueError(f"burst {capacity!r} would take over 73 years to refill at {max_rate!r} per {time_period!r} s")
        self._core = _Core(ns_per_token, capacity, tokens, fair, _SMALLEST_FIRST if compat else _FIFO)
        self._core.late_credit = LATE_CREDIT
        self._max_rate = rate
        self._time_period = period
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
        if x > self._core.rate.burst:
            if self._compat:
                raise ValueError("Can't acquire more than the maximum capacity")
            raise ValueError(f"amount must not exceed burst ({self._core.rate.burst!r}), got {amount!r}")
        if not (x > 0):
            raise ValueError(f"amount must be finite and > 0, got {amount!r}")
        if x < math.ldexp(self._core.rate.burst, -50):
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
        return self._max_rate

    @property
    def time_period(self) -> float:
        return self._time_period

    @property
    def burst(self) -> float:
        return self._core.rate.burst

    @property
    def rate(self) -> float:
        return self._max_rate / self._time_period

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
                and amount > self._core.rate.burst):
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

    def _ready_head(self) -> Any:
        return self._core.ready_head(self._now())

    def _pop_head(self, grant: bool) -> Any:
        now = self._now()
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
