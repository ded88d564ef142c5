"""Pure-Python twin of the binding ``src/_tokenbucket/_tokenbucketmodule.c`` (and its ``binding/``
headers): ``Bucket``, the limiter's engine, over the twin of the core (``_queue_py``, ``_limits_py``).

The Python-visible API is the C module's: an unconfigured ``Bucket`` until ``_configure``, the hot
public methods with the amount and timeout checks worded as C words them, the private methods the
limiter's dispatcher calls, ``READY``, ``MAX_SPAN`` and ``IMPLEMENTATION`` (``"python"`` here).
The clock, as in C: CLOCK_MONOTONIC (``time.monotonic``) outside a loop and on a loop whose
clock provably is that clock (uvloop's ``loop.time()`` is that clock cached in whole milliseconds),
else the running loop's ``loop.time()``, converted to nanoseconds (round half up). Where it differs:
it checks the proof on every reading; C caches it. ``acquire()`` returns a coroutine (C: an awaitable object of its own) whose name is set so
that dropping it unawaited warns as C does. Unconfigured, the error names ``type(self).__name__``
(C: the type's ``tp_name``, ``aiotb._tokenbucket.Bucket`` for the base class). Argument
conversions (C's ``PyFloat_AsDouble``, ``PyArg_ParseTuple``) are mirrored closely, not exactly:
some TypeError texts differ. An error from a waiter's ``done()`` during ``_grant_due`` reaches
``sys.unraisablehook`` through a finalizer (C: ``PyErr_WriteUnraisable``), at once on CPython and at
the next collection elsewhere. ``limiter.__aenter__`` and ``__aexit__`` are bound methods made at
each lookup (C keeps one of each per limiter, made at the first, so a limiter used in ``async with``
is freed by the cyclic GC). ``_pause_until(nan)`` does nothing (C raises SystemError; the
limiter never passes NaN). Threads: each C call is one step under the GIL (it runs no Python code
while it changes the core); here, Python code, each method that reads the clock or touches the
core holds the bucket's lock instead."""

from __future__ import annotations

import math
import operator
import threading
import time
from asyncio import Future, events
from typing import Any, Awaitable, Callable, Concatenate, Coroutine, Generator, NoReturn, ParamSpec, Self, TypeVar

from . import _queue_py
from ._clock import is_monotonic_loop
from ._conversions_py import (MAX_SECONDS, core_status, double, ns_to_seconds, real_number, seconds_to_ns,
                              write_unraisable)
from ._limits_py import ENOMEM, ETOOLATE, MAX_RATES, MAX_SPAN, NEVER, OK

__all__ = ["Bucket", "READY", "IMPLEMENTATION", "MAX_SPAN"]

IMPLEMENTATION = "python"
LATE_CREDIT_TOKENS = 0.75  # how late a woken waiter may be and still be granted as of its ready instant
MOST_AHEAD = 1_000_000  # s: the furthest _owed looks (a lease is at most 3,600 s)
_DEFAULT_AMOUNT: Any = 1.0  # an amount left out, which C does not check
CLOCK_CONFLICT = ("this limiter has waiters on an event loop with another clock: loops that share a limiter "
                  "must all keep time on the monotonic clock (a virtual or patched loop.time() cannot be shared)")
_monotonic = time.monotonic
_get_running_loop = events._get_running_loop


class _Ready:
    """An awaitable that is already done: ``await READY`` returns None at once.

    It also has ``send``/``throw``/``close``, so ``asyncio.create_task`` accepts it."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return self

    def __iter__(self) -> _Ready:
        return self

    def __next__(self) -> NoReturn:
        raise StopIteration

    def send(self, value: object) -> NoReturn:
        """Finishes at once with None."""
        raise StopIteration

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> NoReturn:
        """Raises what it is given, as a coroutine that has not started."""
        if val is None:
            val = typ() if isinstance(typ, type) else typ
        raise val

    def close(self) -> None:
        """Nothing to close."""
        return None

    def __repr__(self) -> str:
        return "<aiotb ready>"


READY = _Ready()


P = ParamSpec("P")
R = TypeVar("R")


def _locked(method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """method, holding the bucket's lock: one step for other threads, as a C call is under the GIL."""
    def locked(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._lock:
            return method(self, *args, **kwargs)
    locked.__name__, locked.__qualname__, locked.__doc__ = method.__name__, method.__qualname__, method.__doc__
    return locked


class Bucket:
    """The limiter's engine: limits, waiter queue, clock and fast path. Subclasses configure it in
    __init__ and provide the wait as _wait(amount, timeout)."""

    __slots__ = ("_core", "_configured", "_last_now", "_domain", "_lock", "_resuming_loops")

    _core: _queue_py.Bucket
    _configured: bool  # _configure ran: until then nothing is granted
    _last_now: int | None  # the latest reading of the clock
    _domain: object  # the loop whose own clock core times are on; None: the monotonic clock
    _lock: threading.RLock  # held by every method that reads the clock or touches the core
    _resuming_loops: int  # loops holding grants whose tasks have not resumed yet: fair newcomers wait behind them

    # provided by the subclass (aiotb._limiter.Limiter)
    _wait: Callable[[float, float | None], Awaitable[None]]  # the wait of a request that cannot be granted now
    _wait_to_hold: Callable[[float], Awaitable[None]]  # the same for `async with` on a window, which holds the grant
    _over_capacity: Callable[[object], BaseException]  # the error for an amount above the largest grant
    _drop_closed: Callable[[], None]  # drops the waiters of closed loops

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        """An unconfigured bucket; the subclass's __init__ configures it, whatever it takes."""
        self = object.__new__(cls)
        self._core = _queue_py.Bucket()
        self._configured = False
        self._last_now = None
        self._domain = None
        self._lock = threading.RLock()
        self._resuming_loops = 0
        return self

    @_locked
    def _configure(self, rates: tuple[tuple[float, float, float], ...], window: tuple[int, float] | None,
                   fair: object, smallest_first: object) -> None:
        """Sets the limits once, from values checked by the caller: rates ((ns_per_token, burst, initial),
        ...) or window (period_ns, limit)."""
        if self._configured:
            raise RuntimeError(f"{type(self).__name__} is configured already")
        order = _queue_py.SMALLEST_FIRST if smallest_first else _queue_py.FIFO
        core = _queue_py.Bucket()
        if window is not None:
            period, limit = window
            core_status(core.init_window(operator.index(period), double(limit), bool(fair), order))
        else:
            if not isinstance(rates, tuple) or not 1 <= len(rates) <= MAX_RATES:
                raise TypeError(f"rates must be a tuple of 1 to {MAX_RATES} rates, got {rates!r}")
            for i, rate in enumerate(rates):
                ns_per_token, burst, initial = map(double, rate)
                core_status(core.init(ns_per_token, burst, initial, bool(fair), order) if i == 0
                             else core.add_rate(ns_per_token, burst, initial))
        core.set_late_credit(LATE_CREDIT_TOKENS)
        self._core = core
        self._configured = True

    # ---- the clock ----

    def _now(self) -> int:
        """The running loop's time in ns, moving the core onto that clock if it changed."""
        loop = _get_running_loop()
        if loop is None:  # outside a loop, asyncio's default clock
            domain, now = None, seconds_to_ns(_monotonic())
        else:
            domain = None if is_monotonic_loop(loop) else loop
            now = seconds_to_ns(_monotonic() if domain is None else double(loop.time()))
        if domain is not self._domain:
            if self._configured and self._core.waiting > 0:  # their times are on the old clock
                self._drop_closed()
                if self._core.waiting > 0:
                    raise RuntimeError(CLOCK_CONFLICT)
            if self._last_now is not None:
                self._core.rebase(self._last_now, now)
            self._domain = domain
        elif self._last_now is not None and now < self._last_now:  # read by two threads in one order,
            now = self._last_now  # reaching the bucket in the other: never earlier than the last
        self._last_now = now
        return now

    def _configured_now(self) -> int:
        """The clock's reading, or RuntimeError if the bucket is unconfigured."""
        if not self._configured:
            self._not_configured()
        return self._now()

    # ---- the hot parameters ----

    def _not_configured(self) -> NoReturn:
        """RuntimeError: the bucket was never configured."""
        raise RuntimeError(f"{type(self).__name__}.__init__() was not called: the limiter has no rate yet")

    def _amount(self, value: object) -> float:
        """A valid amount for this bucket: > 0 and at most its largest request (Limits.max_request)."""
        x = value if type(value) is float else real_number("amount", value)
        if x > self._core.limits.max_request:
            if not self._configured:
                self._not_configured()
            error = self._over_capacity(value)
            if not isinstance(error, BaseException):
                raise TypeError(f"_over_capacity() must return an exception, got {error!r}")
            raise error
        if not x > 0:
            raise ValueError(f"amount must be finite and > 0, got {value!r}")
        if x < math.ldexp(self._core.limits.max_amount, -50):
            raise ValueError(f"amount must be at least burst / 2**50 to be counted exactly, got {value!r}")
        return x

    def _timeout(self, value: object) -> float | None:
        """A timeout in seconds, or None for none (also for one too long to matter)."""
        if value is None:
            return None
        x = real_number("timeout", value)
        if not x >= 0:
            raise ValueError(f"timeout must be None or >= 0, got {value!r}")
        return x if x < MAX_SECONDS else None

    def _default_amount(self) -> float:
        """The amount of a call that names none: 1, unless that is above the largest request."""
        if self._core.limits.max_request < 1.0:
            self._amount(1)  # raises the limiter's own error
        return 1.0

    def _amount_now(self, amount: object) -> tuple[float, int]:
        """try_acquire's and has_capacity's amount, and the clock's reading."""
        if not self._configured:
            self._not_configured()
        x = self._default_amount() if amount is _DEFAULT_AMOUNT else self._amount(amount)
        return x, self._now()

    # ---- the hot path ----

    def __aenter__(self) -> Awaitable[None]:
        """Takes one token: returns a done awaitable, or the wait for it; a window holds the token
        until __aexit__."""
        if not self._configured:
            self._not_configured()
        if self._take_to_hold(1.0):
            return READY
        if self._holds_grants():
            return self._wait_to_hold(self._default_amount())
        return self._wait(self._default_amount(), None)

    def _holds_grants(self) -> bool:
        """Whether the grants of `async with` are held until its block exits: a window's are."""
        return self._core.limits.window.period != 0

    @_locked
    def _take_to_hold(self, amount: float) -> bool:
        """Takes amount tokens now if a newcomer may, held if this is a window; a fair limiter's newcomer
        waits behind grants whose tasks have not resumed yet."""
        if self._resuming_loops and self._core.fair or not self._core.take(amount, self._now()):
            return False
        if self._holds_grants():
            self._core.hold(amount)
        return True

    @_locked
    def _take(self, amount: float) -> bool:
        """Takes amount tokens now if a newcomer may (on a fair limiter: no grant waits for its task to resume)."""
        return not (self._resuming_loops and self._core.fair) and self._core.take(amount, self._now())

    def __aexit__(self, *exc_info: object) -> Awaitable[None]:
        """A window's held token leaves it a period from now; else gives nothing back, as tokens pace starts."""
        if self._configured and self._holds_grants():
            self._end_hold(1.0)
        return READY

    def acquire(self, amount: float = _DEFAULT_AMOUNT, timeout: float | None = None) -> Coroutine[Any, Any, None]:
        """Waits for amount tokens, taken when awaited; TimeoutError at once if they cannot come within timeout."""
        if not self._configured:
            self._not_configured()
        x = self._default_amount() if amount is _DEFAULT_AMOUNT else self._amount(amount)
        limit = self._timeout(timeout)
        acquisition = self._acquisition(x, limit)
        # named as C names it, should it warn (a coroutine object's name, which Coroutine does not declare)
        acquisition.__qualname__ = f"{type(self).__name__}.acquire"  # type: ignore[attr-defined]
        return acquisition

    async def _acquisition(self, amount: float, timeout: float | None) -> None:
        """What acquire() returns: grants at once when awaited, or waits through the limiter."""
        if not self._take(amount):
            await self._wait(amount, timeout)

    def try_acquire(self, amount: float = _DEFAULT_AMOUNT) -> bool:
        """Takes amount tokens now if a newcomer may, else returns False."""
        with self._lock:
            x, now = self._amount_now(amount)
            return self._core.take(x, now)

    def has_capacity(self, amount: float = _DEFAULT_AMOUNT) -> bool:
        """Whether acquire(amount) would go through now; takes nothing."""
        with self._lock:
            x, now = self._amount_now(amount)
            return self._core.can_take(x, now)

    @property
    @_locked
    def tokens(self) -> float:
        """Tokens available now."""
        return self._core.tokens(self._configured_now())

    @property
    def waiting(self) -> int:
        """Number of queued waiters."""
        return self._core.waiting if self._configured else 0

    # ---- the queue, for the dispatcher ----

    @_locked
    def _enqueue(self, amount: float, timeout: float | None, handle: object, owner: object) -> int:
        """Queues a waiter of owner (who times and wakes it) and returns its id; TimeoutError if it
        cannot be granted in time."""
        x = double(amount)
        now = self._configured_now()
        deadline = NEVER if timeout is None else now + seconds_to_ns(double(timeout))
        status, ident = self._core.enqueue(x, now, deadline, handle, owner)
        if status == OK:
            return ident
        if status == ETOOLATE:
            raise TimeoutError(f"{amount!r} tokens cannot be granted within {timeout!r} s")
        raise ValueError("a deadline needs first-come-first-served order")

    @_locked
    def _withdraw(self, ident: int) -> bool:
        """Removes a waiter that was not granted; False if it is no longer queued."""
        if not isinstance(ident, int):
            raise TypeError(f"an integer is required, not {type(ident).__name__}")
        if not 0 <= ident < 1 << 64:
            raise OverflowError("int out of range for an unsigned 64-bit id")
        if not self._configured:
            return False
        return self._core.withdraw(ident) is not None

    @_locked
    def _withdraw_first_of(self, owner: object) -> Any:
        """Removes owner's first queued waiter without granting it; returns its handle, or None."""
        return self._core.withdraw_first_of(owner) if self._configured else None

    @_locked
    def _grant_due(self, at: float | None, owner: object) -> tuple[list[Any], list[float], float | None]:
        """Grants every waiter due now (or at the loop time at, if later: a timer the loop ran up to its
        clock resolution early), in order; returns them, their amounts and the loop time owner's first
        waiter is due, or None if it has none. A waiter whose asyncio future is done already leaves
        without tokens."""
        now = self._configured_now()
        if at is not None:
            due = seconds_to_ns(double(at))
            if due > now:
                now = due
        granted: list[Any] = []
        amounts: list[float] = []
        failed: list[BaseException] = []

        def decide(handle: Any, amount: float) -> int:
            try:
                gone = isinstance(handle, Future) and bool(handle.done())
            except BaseException as error:  # the pass stops at it, due at once: the caller's timer retries it
                failed.append(error)
                return _queue_py.STOP
            if gone:
                return _queue_py.SKIP
            granted.append(handle)
            amounts.append(amount)
            return _queue_py.GRANT

        head = self._core.grant_due(now, decide)
        following = NEVER if head == NEVER else self._core.first_due_of(owner, now)
        if failed:
            write_unraisable(failed[0])
        return granted, amounts, None if following == NEVER else ns_to_seconds(following)

    @_locked
    def _next_due(self) -> float | None:
        """The loop time the head waiter can be granted (now, if it can be now), None if no one waits."""
        at = self._core.grant_due(self._configured_now(), lambda handle, amount: _queue_py.STOP)
        return None if at == NEVER else ns_to_seconds(at)

    @_locked
    def _refund(self, amount: float) -> None:
        """Gives back tokens granted to a waiter that never used them."""
        x = double(amount)
        self._core.refund(x, self._configured_now())

    @_locked
    def _owed(self, ahead: float) -> float:
        """The most tokens a rate would still owe ahead seconds from now (0 when none would); ValueError unless
        ahead is from 0 to MOST_AHEAD s."""
        seconds = double(ahead)
        now = self._configured_now()
        if not 0 <= seconds <= MOST_AHEAD:
            raise ValueError(f"ahead must be from 0 to {MOST_AHEAD} s, got {ahead!r}")
        return self._core.owed(now, now + int(seconds * 1e9))

    @_locked
    def _settle_cost(self, taken: float, used: float, held: bool) -> None:
        """A grant of taken tokens cost used, as Bucket.settle says (held: a window holds it); floats checked by
        the caller. ValueError, changing nothing, for a debt beyond the engine's range."""
        x, y = double(taken), double(used)
        if self._core.settle(x, y, bool(held), self._configured_now()) != OK:
            raise ValueError(f"used is beyond the engine's range: {used!r} tokens where {taken!r} were taken "
                             f"would leave a rate empty for more than {MAX_SPAN // 10**9} s")

    @_locked
    def _reckon_late(self, amount: float) -> None:
        """Grants of amount, taken earlier, are used only now: the refill they waited through that a rate could
        not have held beside them is spent."""
        x = double(amount)
        self._core.reckon_late(x, self._configured_now())

    @_locked
    def _hold(self, amount: float) -> None:
        """Holds a grant of amount just taken until _end_hold (a window's; nothing for a bucket)."""
        if not self._configured:
            self._not_configured()
        self._core.hold(double(amount))

    @_locked
    def _end_hold(self, amount: float) -> None:
        """A held grant of amount is done with: it leaves the window a period from now."""
        x = double(amount)
        self._core.end_hold(x, self._configured_now())

    @_locked
    def _reserve(self, amount: float, handle: object, owner: object) -> tuple[int, float]:
        """Queues a waiter of owner promised its projected grant: (its id, the loop time of the grant)."""
        if not self._configured:
            self._not_configured()
        x = self._amount(amount)
        now = self._now()
        ready = self._core.projected_grant(x, now)
        if ready == NEVER:
            raise MemoryError
        status, ident = self._core.enqueue(x, now, ready, handle, owner)
        if status != OK:
            if status == ENOMEM:
                raise MemoryError
            raise SystemError("the core broke its own projection")
        return ident, ns_to_seconds(ready)

    @_locked
    def _withdraw_stranded(self) -> tuple[Any, bool] | None:
        """A waiter that can no longer be granted as promised, as (handle, never), removed; never is True
        if it can never be granted at all. None if there is none."""
        return self._core.withdraw_stranded(self._configured_now())

    # ---- changes of the limits ----

    @_locked
    def _set_rate(self, index: int, ns_per_token: float, burst: float) -> None:
        """Changes a rate as of now, from values checked by the caller."""
        slot = operator.index(index) & 0xFFFFFFFF  # C's "I": an unsigned int, unchecked
        x, b = double(ns_per_token), double(burst)
        core_status(self._core.set_rate(slot, x, b, self._configured_now()))

    @_locked
    def _set_window(self, period_ns: int, limit: float) -> None:
        """Changes the window, from values checked by the caller."""
        period, x = operator.index(period_ns), double(limit)
        if not self._configured:
            self._not_configured()
        core_status(self._core.set_window(period, x))

    @_locked
    def _pause_until(self, when: float) -> None:
        """No grant before the loop time when, in seconds (a float checked by the caller)."""
        seconds = double(when)
        self._configured_now()
        if seconds >= MAX_SECONDS:
            raise ValueError(f"when is too far ahead: {when!r}")
        if seconds > -MAX_SECONDS:  # NaN fails this: C leaves it to its caller, which excludes it
            self._core.pause_until(seconds_to_ns(seconds))

    @_locked
    def _limit_until(self, tokens: float, when: float, slack: float) -> bool:
        """Grants before the loop time when take at most tokens in all, as Bucket.limit_until says, slack in
        seconds (floats checked by the caller); what Limits.limit_until returns."""
        x, seconds, within = double(tokens), double(when), double(slack)
        now = self._configured_now()
        if seconds >= MAX_SECONDS or within >= MAX_SECONDS:
            raise ValueError(f"when or slack is too far ahead: {(tokens, when, slack)!r}")
        if seconds <= -MAX_SECONDS:
            return False  # ended long before any reading of the clock
        return self._core.limit_until(x, seconds_to_ns(seconds), seconds_to_ns(within), now)

    @_locked
    def _grant_until(self, when: float) -> None:
        """No grant at or after the loop time when, in seconds (math.inf: no end; before any reading of the
        clock: ended). TypeError or ValueError (NaN, too far ahead)."""
        seconds = real_number("when", when)
        self._configured_now()
        if math.isnan(seconds) or (seconds >= MAX_SECONDS and seconds != math.inf):
            raise ValueError(f"when must be a loop time within the engine's range or math.inf, got {when!r}")
        until = -MAX_SPAN
        if seconds == math.inf:
            until = NEVER
        elif seconds > -MAX_SECONDS:
            until = seconds_to_ns(seconds)
        self._core.grant_until(until)

    @_locked
    def _set_largest(self, amount: float) -> None:
        """Requests may ask for up to max(amount, the smallest burst); 0: the bursts alone. TypeError or
        ValueError (not 0 nor finite and > 0)."""
        x = real_number("amount", amount)
        if not self._configured:
            self._not_configured()
        if self._core.set_largest(x) != OK:
            raise ValueError(f"amount must be 0 or finite and > 0, got {amount!r}")

    @_locked
    def _credit(self, tokens: float) -> None:
        """Tokens given to every rate (> 0, never fuller than full) or taken as a debt (< 0), without a grant.
        TypeError or ValueError, changing nothing (not finite, a window, a debt beyond the engine's range)."""
        x = real_number("tokens", tokens)
        now = self._configured_now()
        if not math.isfinite(x):
            raise ValueError(f"tokens must be finite, got {tokens!r}")
        if self._core.limits.window.period:
            raise ValueError(f"tokens cannot be credited to a window, got {tokens!r}")
        if self._core.credit(x, now) != OK:
            raise ValueError(f"tokens is beyond the engine's range: {tokens!r} would leave a rate empty for more "
                             f"than {MAX_SPAN // 10**9} s")

    def _obey(self, kind: int, slack: float, headers: object, in_flight: float) -> object:
        """The C engine reads the common forms of a server's rate-limit headers itself (quota.c, for the HTTP
        adapters), answering as aiotb._signals does, and returns None (or NotImplemented for the others); here that
        reader is the only one: NotImplemented, so the adapters call it."""
        return NotImplemented

    # ---- what it can tell ----

    @_locked
    def _stats(self) -> tuple[int, float, int, float, float, int, int]:
        """(granted, granted_tokens, waits, wait_total, wait_max, cancelled, timeouts), times in seconds."""
        if not self._configured:
            self._not_configured()
        s = self._core.stats
        return (s.granted, s.granted_tokens, s.waits, s.wait_ns_total / 1e9, float(s.wait_ns_max) / 1e9,
                s.cancelled, s.timeouts)

    @_locked
    def _as_good_as_new(self) -> bool:
        """No waiter, every limit full: the same as a bucket made now."""
        return self._core.as_good_as_new(self._configured_now())

    def _running_loop(self) -> events.AbstractEventLoop | None:
        """The running loop, or None (C answers from its proof of the clock where it can)."""
        return events._get_running_loop()

    def _share(self, segment: object, error: type[Exception], /) -> None:
        """The C engine's newcomers can take from a shared segment (binding/shared.h); this engine's cannot."""
        raise RuntimeError("the pure-Python engine cannot share a segment")

    def _share_busy(self, busy: bool, /) -> None:
        """See _share."""
        raise RuntimeError("the pure-Python engine cannot share a segment")

    @_locked
    def _resuming(self, delta: int, /) -> None:
        """One loop more (1) or less (-1) holds grants whose tasks have not resumed; while any does,
        ``async with`` and acquire() on a fair limiter wait behind them instead of taking at once."""
        if isinstance(delta, bool) or delta not in (1, -1) or self._resuming_loops + delta < 0:
            raise ValueError(f"_resuming() takes 1 or -1 (and never below 0), got {delta!r}")
        self._resuming_loops += delta
