"""What a limiter over a RedisStore does differently, in one place: it refuses the calls that would need a round
trip and are not awaitable (a type checker rejects them over the store already; each names the coroutine to
await) and reservations, and runs the waits of threads' blocking calls on its event loop."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Coroutine, Protocol, TypeVar, cast

from . import _params
from ._capabilities import refusal
from ._clock import wall_now
from ._signals import Headers, QuotaKind, Signals
from ._store_redis import MAX_PAUSE_NS


class Serving(Protocol):
    """A limiter over a RedisStore: it serves one event loop, which its Redis client belongs to."""

    _loop: asyncio.AbstractEventLoop | None


F = TypeVar("F", bound=Callable[..., Coroutine[Any, Any, Any]])
STOPPED_CHECK = 0.25  # s: how often a call waiting on the loop a limiter serves checks that the loop still runs
STOPPED = ("the event loop this limiter over a RedisStore serves stopped before this call, which waited there, "
           "was done; it was cancelled there")


def on_its_loop(method: F) -> F:
    """method (a coroutine function of a Serving limiter), run on the event loop the limiter serves when called
    from another loop while that one runs: the caller awaits it on its own loop, and cancelling the caller
    cancels it there. RuntimeError (and the call cancelled there) if that loop stops before it is done."""
    @functools.wraps(method)
    async def forwarded(self: Serving, /, *args: Any, **kwargs: Any) -> Any:
        serving = self._loop
        if serving is None or not serving.is_running() or serving is asyncio.get_running_loop():
            return await method(self, *args, **kwargs)
        there = asyncio.run_coroutine_threadsafe(method(self, *args, **kwargs), serving)
        waiting = asyncio.wrap_future(there)
        stopped = False  # seen stopped at the last check
        try:
            while True:
                done, _ = await asyncio.wait({waiting}, timeout=STOPPED_CHECK)
                if done:
                    return waiting.result()
                stopped = _seen_stopped(serving, stopped)
        except BaseException:
            there.cancel()
            raise

    return cast(F, forwarded)


def _seen_stopped(loop: asyncio.AbstractEventLoop, before: bool) -> bool:
    """A check of the loop a call waits on: whether it is stopped now. RuntimeError if it was at the check before
    too (a gap between two runs of a loop is shorter than STOPPED_CHECK)."""
    if loop.is_running():
        return False
    if before:
        raise RuntimeError(STOPPED)
    return True


_AWAIT = "{call}() over a RedisStore needs a round trip to Redis: await limiter.{twin}"


class OnItsLoop:
    """The module's refusals and blocking calls, for RedisLimiter and RedisLeaseLimiter (before Limiter in their
    bases)."""

    __slots__ = ()

    def try_acquire(self, amount: float = 1) -> bool:
        """Not here: the tokens are in Redis; ``await limiter.atry_acquire(amount)``."""
        raise round_trip("try_acquire()")

    def has_capacity(self, amount: float = 1) -> bool:
        """Not here: the tokens are in Redis; ``await limiter.ahas_capacity(amount)``."""
        raise round_trip("has_capacity()")

    @property
    def tokens(self) -> float:
        """Not here: the tokens are in Redis; ``await limiter.read_tokens()``."""
        raise round_trip("tokens")

    def set_rate(self, max_rate: float, time_period: float | None = None, *, burst: float | None = None,
                 index: int = 0) -> None:
        """Not here: the rates are in Redis; ``await limiter.aset_rate(...)``."""
        raise TypeError(_AWAIT.format(call="set_rate", twin="aset_rate(...)"))

    def penalize(self, seconds: float) -> None:
        """Not here: the pause is in Redis; ``await limiter.apenalize(seconds)``."""
        raise TypeError(_AWAIT.format(call="penalize", twin="apenalize(seconds)"))

    def retry_after(self, value: str | bytes | float) -> float:
        """Not here: the pause is in Redis; ``await limiter.aretry_after(value)``."""
        raise TypeError(_AWAIT.format(call="retry_after", twin="aretry_after(value)"))

    def pause_until(self, when: float) -> None:
        """Not here: the pause is in Redis; ``await limiter.apause_until(when)``."""
        raise TypeError(_AWAIT.format(call="pause_until", twin="apause_until(when)"))

    def limit_until(self, tokens: float, when: float) -> None:
        """Not here: the limit is in Redis; ``await limiter.alimit_until(tokens, when)``."""
        raise TypeError(_AWAIT.format(call="limit_until", twin="alimit_until(tokens, when)"))

    def follow(self, headers: Headers, *, quota: QuotaKind = "requests", in_flight: float = 0) -> Signals:
        """Not here: the limit is in Redis; ``await limiter.afollow(headers)``."""
        raise TypeError(_AWAIT.format(call="follow", twin="afollow(headers)"))

    async def aretry_after(self, value: str | bytes | float) -> float:
        """Grants nothing, to any client of the key, until a server's ``Retry-After`` has passed (see
        ``Limiter.retry_after``); returns the seconds paused."""
        span = _params.retry_after(value, wall_now())
        await self.apenalize(span)
        return span

    async def apause_until(self, when: float) -> None:
        """Grants nothing, to any client of the key, before loop time ``when``: a pause of what is left of it
        from now, by the server's clock (one round trip; the trip's own time makes it end that much later)."""
        span = max(0.0, _params.loop_time("when", when) - asyncio.get_running_loop().time())
        pause_ns(span, "when", when)  # errors name when, as given
        await self.apenalize(span)

    def acquire_blocking(self, amount: float = 1, timeout: float | None = None) -> None:
        """Blocks the calling thread until ``amount`` tokens are granted, as ``acquire`` (same queue, same
        timeout): the wait runs on the limiter's event loop (see _block_on)."""
        self._block_on(lambda: self.acquire(amount, timeout), "acquire_blocking()")

    def __enter__(self) -> None:
        """``with limiter:`` in a thread: ``async with limiter:``'s entry, run on the limiter's event loop."""
        self._block_on(self.__aenter__, "`with limiter:`")

    def __exit__(self, *exc_info: object) -> None:
        if getattr(self, "_window", False):  # only a window's grant is held until the block exits
            self._block_on(lambda: self.__aexit__(*exc_info), "`with limiter:`")

    def _block_on(self, call: Callable[[], Awaitable[None]], what: str) -> None:
        """Runs call() (made here: a bad argument raises in this thread) on the event loop the limiter serves,
        while it runs, else on aiotb's own loop, and waits for it. Interrupted, it cancels the wait, which
        gives back what it was granted as a cancelled task does; RuntimeError (the call cancelled there) if
        that loop stops before the call is done."""
        if asyncio.events._get_running_loop() is not None:
            raise RuntimeError(f"{what} would block the running event loop; use await limiter.acquire() or "
                               "`async with limiter:` in a coroutine")
        serving = self._loop
        loop = serving if serving is not None and serving.is_running() else blocking_loop()
        future = asyncio.run_coroutine_threadsafe(_awaited(call()), loop)
        stopped = False  # as on_its_loop's
        try:
            while True:
                try:
                    return future.result(STOPPED_CHECK)
                except TimeoutError:
                    if future.done():  # the call's own TimeoutError
                        raise
                stopped = _seen_stopped(loop, stopped)
        except BaseException:
            future.cancel()
            raise

    if TYPE_CHECKING:
        _loop: asyncio.AbstractEventLoop | None

        async def apenalize(self, seconds: float) -> None: ...

        def acquire(self, amount: float = 1, timeout: float | None = None) -> Coroutine[Any, Any, None]: ...

        async def __aenter__(self) -> None: ...

        async def __aexit__(self, *exc_info: object) -> None: ...

    def reserve(self, amount: float = 1) -> Any:
        """Not here: a place in Redis takes a round trip; ``await limiter.areserve(amount)``."""
        raise TypeError(_AWAIT.format(call="reserve", twin="areserve(amount)"))


def pause_ns(seconds: float, name: str = "seconds", shown: object = None) -> int:
    """seconds (checked) as the ns of a pause (or a limit) in Redis; ValueError, naming name and showing shown (by
    default seconds: the value the caller gave), beyond the longest one the script keeps exact."""
    given = seconds if shown is None else shown
    span = _params.pause(name, given, _params.non_negative(name, seconds))
    if span * 1e9 > MAX_PAUSE_NS:
        raise ValueError(f"{name} must be at most {MAX_PAUSE_NS / 1e9:.0f} s from now over a RedisStore, got "
                         f"{given!r}")
    return round(span * 1e9)


def round_trip(call: str) -> TypeError:
    """The error of a call that would need a round trip to Redis and is not awaitable (its row of the table)."""
    return TypeError(f"{call} over a RedisStore: {refusal('try_acquire, has_capacity, tokens', 'RedisStore')}")


_own_lock = threading.Lock()
_own_loop: asyncio.AbstractEventLoop | None = None


def blocking_loop() -> asyncio.AbstractEventLoop:
    """aiotb's own event loop, running in a daemon thread of its own from the first call on: where the blocking
    calls of threads wait on a limiter over a RedisStore that serves no running loop (its Redis client then
    belongs to this loop)."""
    global _own_loop
    with _own_lock:
        if _own_loop is None:
            loop = asyncio.new_event_loop()
            running = threading.Event()
            threading.Thread(target=_run_forever, args=(loop, running), name="aiotb blocking calls",
                             daemon=True).start()
            running.wait()
            _own_loop = loop
        return _own_loop


def _run_forever(loop: asyncio.AbstractEventLoop, running: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(running.set)
    loop.run_forever()


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable
