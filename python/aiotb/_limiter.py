"""The asyncio side of a limiter: futures, the one timer, cancellation, the owning loop.

Token arithmetic and wake order live in the core (C, or its Python twin); this
module only reacts to what the core decides. ``build(core)`` makes the public
classes on top of either core, so one test suite can run against both."""

from __future__ import annotations

import asyncio
import functools
import inspect
import warnings
from types import ModuleType
from typing import Any, Awaitable, Callable, NamedTuple, TypeVar

R = TypeVar("R")

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


def build(core: ModuleType) -> tuple[type, type]:
    """The ``Limiter`` and ``AsyncLimiter`` classes on top of ``core.Bucket``."""

    class Limiter(core.Bucket):  # type: ignore[name-defined,misc]
        """Token-bucket rate limiter for asyncio: ``async with Limiter(100, 1): ...``."""

        __slots__ = ("_loop", "_timer", "_timer_at", "_waits", "_wait_total", "_wait_max", "_cancelled",
                     "_timeouts", "__weakref__")
        _warn_on_reuse = False

        def __new__(cls, max_rate: float, time_period: float = 60, *, burst: float | None = None,
                    initial: float | None = None, fair: bool = True) -> Limiter:
            return cls._create(max_rate, time_period, burst, initial, fair, False)

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
                self._dispatch()
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

        def _dispatch(self, woke_for: float | None = None) -> None:
            """Grants every waiter whose turn has come, then keeps the one timer on the next head."""
            while (head := self._ready_head()) is not None:
                wanted = not head.done()  # a cancelled waiter leaves without taking tokens
                self._pop_head(wanted)
                if wanted:
                    head.set_result(None)
            at = self._head_ready_at()
            timer = self._timer
            if at is not None and timer is not None and at == self._timer_at:
                return
            if timer is not None:
                timer.cancel()
                self._timer = self._timer_at = None
            if at is None:
                return
            loop = self._loop
            if at == woke_for:  # the loop fired early: aim as far past the time as it fell short, never poll
                now = loop.time()
                at = max(at + (at - now), now + REARM_AFTER_EARLY_WAKE)
            self._timer = loop.call_at(at, self._on_timer)
            self._timer_at = at

        def _on_timer(self) -> None:
            woke_for, self._timer, self._timer_at = self._timer_at, None, None
            self._dispatch(woke_for)

    class AsyncLimiter(Limiter):
        """Drop-in for ``aiolimiter.AsyncLimiter``: burst = max_rate, newcomers take free
        capacity ahead of waiters, and waiters wake smallest amount first."""

        __slots__ = ()
        _warn_on_reuse = True

        def __new__(cls, max_rate: float, time_period: float = 60) -> AsyncLimiter:  # type: ignore[misc]
            return cls._create(max_rate, time_period, None, None, False, True)

        def __repr__(self) -> str:
            return (f"<AsyncLimiter(max_rate={self.max_rate!r}, time_period={self.time_period!r}) "
                    f"at {id(self):#x} [tokens: {self.tokens:.6g}, waiters: {self.waiting}]>")

    return Limiter, AsyncLimiter
