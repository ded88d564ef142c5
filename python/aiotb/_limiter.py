"""The asyncio side of a limiter: futures, the one timer, cancellation, the owning loop.

Token arithmetic and wake order live in the core (C, or its Python twin); this
module only reacts to what the core decides. ``build(core)`` makes the public
classes on top of either core, so one test suite can run against both."""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import numbers
import time
import warnings
from types import ModuleType
from typing import Any, Awaitable, Callable, Generator, NamedTuple, Sequence, TypeVar

R = TypeVar("R")

CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution  # asyncio's _clock_resolution
REARM_AFTER_EARLY_WAKE = 0.001  # s: uvloop rounds timer delays to whole ms, so a shorter one can fire at once
REUSED_ACROSS_LOOPS = (
    "This AsyncLimiter instance is being re-used across loops. Please create "
    "a new limiter per event loop as re-use can lead to undefined behaviour."
)


class LimiterStats(NamedTuple):
    """What a limiter has done so far (``limiter.stats()``)."""

    granted: int            # grants kept: a grant given back by a task cancelled before it resumed is not one
    granted_tokens: float
    waits: int              # grants that had to wait in the queue
    wait_time_total: float  # seconds those waited, on the loop's clock
    wait_time_max: float
    cancelled: int          # waits cancelled, before or after their grant
    timeouts: int           # acquires refused at once by their timeout
    waiting: int            # tasks queued now


class Reservation:
    """A place in a limiter's queue, taken by ``limiter.reserve(amount)``."""

    __slots__ = ("_limiter", "_ident", "_amount", "_granted", "_loop", "_used", "ready_at")

    def __init__(self, limiter: Any, ident: int, amount: float, granted: asyncio.Future[None],
                 ready_at: float, loop: asyncio.AbstractEventLoop) -> None:
        self._limiter = limiter
        self._ident = ident
        self._amount = amount
        self._granted = granted
        self._loop = loop
        self._used = False
        self.ready_at = ready_at  #: loop time of the grant, as projected when reserved

    @property
    def delay(self) -> float:
        """Seconds from now until the projected grant (0 once it is due)."""
        return max(0.0, self.ready_at - self._loop.time())

    def done(self) -> bool:
        """Whether it has been granted (or failed, or cancelled)."""
        return self._granted.done()

    def cancel(self) -> bool:
        """Gives the place back, or the tokens if it was granted and not yet awaited; the
        waiters behind it are re-timed at once. False if it was already used or cancelled."""
        if self._used:
            return False
        self._used = True
        granted = self._granted
        if granted.done() and not granted.cancelled() and granted.exception() is None:
            self._limiter._refund(self._amount)
        else:
            self._limiter._withdraw(self._ident)
            granted.cancel()
        if not self._loop.is_closed():
            self._limiter._dispatch()
        return True

    def __await__(self) -> Generator[Any, None, None]:
        return self._wait().__await__()

    async def _wait(self) -> None:
        if self._used:
            raise RuntimeError("this reservation was already awaited or cancelled")
        try:
            await asyncio.shield(self._granted)
        except asyncio.CancelledError:
            self.cancel()
            raise
        self._used = True

    def __repr__(self) -> str:
        state = "granted" if self._granted.done() else f"ready in {self.delay:.6g} s"
        return f"<Reservation of {self._amount!r} at {self.ready_at!r}: {state}>"


def window_class(limiter: type) -> type:
    """``WindowLimiter`` on top of a ``Limiter`` class from ``build``."""

    class WindowLimiter(limiter):  # type: ignore[valid-type,misc]
        """At most ``max_rate`` tokens in any window of ``time_period`` seconds, bursts included."""

        __slots__ = ()

        def __new__(cls, max_rate: float, time_period: float | None = None, *, fair: bool = True) -> Any:
            return cls._create(max_rate, time_period, None, None, fair, False, None, True)

    return WindowLimiter


def build(core: ModuleType) -> tuple[type, type]:
    """The ``Limiter`` and ``AsyncLimiter`` classes on top of ``core.Bucket``."""

    class Limiter(core.Bucket):  # type: ignore[name-defined,misc]
        """Token-bucket rate limiter for asyncio: ``async with Limiter(100, 1): ...``."""

        __slots__ = ("_loop", "_timer", "_timer_at", "_waits", "_wait_total", "_wait_max", "_cancelled",
                     "_timeouts", "__weakref__")
        _warn_on_reuse = False

        def __new__(cls, max_rate: float | None = None, time_period: float | None = None, *,
                    burst: float | None = None, initial: float | None = None, fair: bool = True,
                    rates: Sequence[tuple[float, ...]] | None = None) -> Limiter:
            return cls._create(max_rate, time_period, burst, initial, fair, False, rates)

        @classmethod
        def _create(cls, *args: Any) -> Any:
            self = super().__new__(cls, *args)
            self._loop = None
            self._timer = None
            self._timer_at = None
            self._waits = self._cancelled = self._timeouts = 0
            self._wait_total = self._wait_max = 0.0
            return self

        def stats(self) -> LimiterStats:
            """Counts of grants, waits, cancellations and timeouts since the limiter was made."""
            granted, tokens = self._granted()
            return LimiterStats(granted, tokens, self._waits, self._wait_total, self._wait_max,
                                self._cancelled, self._timeouts, self.waiting)

        def __call__(self, func: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
            """``@limiter``: every call of the decorated async function first takes one token."""
            return self.limit()(func)

        def limit(self, amount: float | Callable[..., float] = 1) -> Callable[[Callable[..., Awaitable[R]]],
                                                                             Callable[..., Awaitable[R]]]:
            """A decorator: every call takes ``amount`` tokens first, or ``amount(*args, **kwargs)``
            when amount is callable (say, the tokens of an LLM prompt)."""
            if not callable(amount):
                self.acquire(amount).close()  # checks the amount now; takes nothing

            def decorate(func: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
                if not inspect.iscoroutinefunction(func):
                    raise TypeError(f"a limiter decorates async functions, got {func!r}")

                @functools.wraps(func)
                async def limited(*args: Any, **kwargs: Any) -> R:
                    await self.acquire(amount(*args, **kwargs) if callable(amount) else amount)
                    return await func(*args, **kwargs)

                return limited

            return decorate

        def __repr__(self) -> str:
            return (f"<{type(self).__name__}(max_rate={self.max_rate!r}, time_period={self.time_period!r}, "
                    f"burst={self.burst!r}, fair={self.fair!r}) tokens={self.tokens:.6g} "
                    f"waiting={self.waiting} at {id(self):#x}>")

        async def _wait(self, amount: float, timeout: float | None) -> None:
            loop = self._own_loop()
            granted = loop.create_future()
            try:
                ident = self._enqueue(amount, timeout, granted)
            except TimeoutError:
                self._timeouts += 1
                raise
            started = loop.time()
            try:
                first = self._dispatch()
                if granted.done() and first is not granted:
                    # granted in this same pass behind others (the loop ran late): their tasks, woken
                    # first, resume first, as their grants came first
                    await asyncio.sleep(0)
                await granted
                waited = loop.time() - started
                self._waits += 1
                self._wait_total += waited
                self._wait_max = max(self._wait_max, waited)
            except BaseException:  # cancelled, interrupted, or destroyed while waiting
                self._cancelled += 1
                if granted.done() and not granted.cancelled():
                    self._refund(amount)  # granted, but its task will never use it
                else:
                    self._withdraw(ident)
                if self._loop is loop and not loop.is_closed():
                    self._dispatch()  # the next waiter may go now, or later than the timer says
                raise

        def set_rate(self, max_rate: float, time_period: float | None = None, *, burst: float | None = None,
                     index: int = 0) -> None:
            """Changes rate ``index`` from now on (``time_period``/``burst`` left out: unchanged).
            It keeps the tokens it holds, at most the new burst; queued waiters are re-timed at
            once, and those that can no longer be granted as promised are failed (see README)."""
            if isinstance(index, bool) or not isinstance(index, int):
                raise TypeError(f"index must be an int, got {index!r}")
            rates = self.rates
            if time_period is None:
                time_period = rates[index][1] if 0 <= index < len(rates) else self.time_period
            if burst is None and 0 <= index < len(rates):
                burst = rates[index][2]
            self._set_rate(index, max_rate, time_period, burst)
            self._settle()

        def pause_until(self, when: float) -> None:
            """Grants nothing before loop time ``when`` (a later call can only move it later)."""
            self._pause_until(when)
            self._settle()

        def penalize(self, seconds: float) -> None:
            """Grants nothing for ``seconds`` from now: a server's ``Retry-After``."""
            if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
                raise TypeError(f"seconds must be a real number, got {seconds!r}")
            if not (seconds >= 0 and math.isfinite(seconds)):
                raise ValueError(f"seconds must be finite and >= 0, got {seconds!r}")
            loop = asyncio.events._get_running_loop()
            self.pause_until((loop.time() if loop is not None else time.monotonic()) + float(seconds))

        def reserve(self, amount: float = 1) -> Reservation:
            """Takes a place in the queue now and says when it will be granted: ``r.delay``
            seconds from now, at loop time ``r.ready_at``. ``await r`` waits for it;
            ``r.cancel()`` gives the place (or the tokens) back."""
            loop = self._own_loop()
            granted = loop.create_future()
            ident, ready_at = self._reserve(amount, granted)
            self._dispatch()
            return Reservation(self, ident, float(amount), granted, ready_at, loop)

        def _settle(self) -> None:
            """After a change of the limits: fail the waiters it strands, re-time the rest."""
            while (stranded := self._withdraw_stranded()) is not None:
                waiter, never = stranded
                if not waiter.done():
                    waiter.set_exception(
                        ValueError("the limiter's new burst is below this request's amount") if never else
                        TimeoutError("after the limiter's change this request cannot be granted in time"))
            if self._loop is not None and not self._loop.is_closed():
                self._dispatch()

        def _own_loop(self) -> asyncio.AbstractEventLoop:
            """The running loop, which from now on owns this limiter's waiters and timer."""
            loop = asyncio.get_running_loop()
            previous = self._loop
            if previous is loop:
                return loop
            if previous is not None and not previous.is_closed():
                if self.waiting:
                    raise RuntimeError(
                        f"{type(self).__name__} has tasks waiting on another event loop; "
                        "one limiter serves one event loop at a time")
                if self._timer is not None:
                    self._timer.cancel()
            elif previous is not None:
                while self.waiting:  # their loop is closed: they can never be woken
                    self._pop_head(False)
                if self._warn_on_reuse:
                    warnings.warn(REUSED_ACROSS_LOOPS, RuntimeWarning, stacklevel=4)
            self._timer = self._timer_at = None
            self._loop = loop
            return loop

        def _dispatch(self, woke_for: float | None = None) -> asyncio.Future[None] | None:
            """Grants every waiter whose turn has come, then keeps the one timer on the next head.
            Returns the first waiter it granted, if any."""
            # asyncio runs a timer due within its clock's resolution as due now: so does the limiter
            due = woke_for if woke_for is not None and woke_for - self._loop.time() <= CLOCK_RESOLUTION else None
            first = None
            while (head := self._ready_head(due)) is not None:
                wanted = not head.done()  # a cancelled waiter leaves without taking tokens
                self._pop_head(wanted, due)
                if wanted:
                    head.set_result(None)
                    if first is None:
                        first = head
            at = self._head_ready_at()
            timer = self._timer
            if at is not None and timer is not None and at == self._timer_at:
                return first
            if timer is not None:
                timer.cancel()
                self._timer = self._timer_at = None
            if at is None:
                return first
            loop = self._loop
            if at == woke_for:  # the loop fired early: aim as far past the time as it fell short, never poll
                now = loop.time()
                at = max(at + (at - now), now + REARM_AFTER_EARLY_WAKE)
            self._timer = loop.call_at(at, self._on_timer)
            self._timer_at = at
            return first

        def _on_timer(self) -> None:
            woke_for, self._timer, self._timer_at = self._timer_at, None, None
            self._dispatch(woke_for)

    class AsyncLimiter(Limiter):
        """Drop-in for ``aiolimiter.AsyncLimiter``: burst = max_rate, newcomers take free
        capacity ahead of waiters, and waiters wake smallest amount first."""

        __slots__ = ()
        _warn_on_reuse = True

        def __new__(cls, max_rate: float, time_period: float = 60) -> AsyncLimiter:  # type: ignore[misc]
            if time_period is None:  # as aiolimiter: no default stands behind None here
                raise TypeError("time_period must be a real number, got None")
            return cls._create(max_rate, time_period, None, None, False, True)

        def __repr__(self) -> str:
            return (f"<AsyncLimiter(max_rate={self.max_rate!r}, time_period={self.time_period!r}) "
                    f"at {id(self):#x} [tokens: {self.tokens:.6g}, waiters: {self.waiting}]>")

    return Limiter, AsyncLimiter
