"""What a limiter over a RedisStore refuses, in one place: the calls that would need a round trip and are not
awaitable (a type checker rejects them over the store already; each names the coroutine to await), loop
times, threads' blocking calls and reservations."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from . import _params
from ._capabilities import refusal, refused


_AWAIT = "{call}() over a RedisStore needs a round trip to Redis: await limiter.{twin}"


class OnItsLoop:
    """The module's refusals, for RedisLimiter and RedisLeaseLimiter (before Limiter in their bases)."""

    __slots__ = ()

    def try_acquire(self, amount: float = 1) -> bool:
        """Not here: the tokens are in Redis; ``await limiter.atry_acquire(amount)``."""
        raise TypeError(_AWAIT.format(call="try_acquire", twin="atry_acquire(amount)"))

    def has_capacity(self, amount: float = 1) -> bool:
        """Not here: the tokens are in Redis; ``await limiter.ahas_capacity(amount)``."""
        raise TypeError(_AWAIT.format(call="has_capacity", twin="ahas_capacity(amount)"))

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

    async def apause_until(self, when: float) -> None:
        """Grants nothing, to any client of the key, before loop time ``when``: a pause of what is left of it
        from now, by the server's clock (one round trip; the trip's own time makes it end that much later)."""
        span = _params.loop_time("when", when) - asyncio.get_running_loop().time()
        await self.apenalize(max(0.0, span))

    if TYPE_CHECKING:
        async def apenalize(self, seconds: float) -> None: ...

    def acquire_blocking(self, amount: float = 1, timeout: float | None = None) -> None:
        """Not here: a limiter over a RedisStore waits on its event loop only."""
        raise TypeError(refusal("threads: acquire_blocking, with limiter", "RedisStore") + ": await limiter.acquire()")

    def __enter__(self) -> None:
        raise TypeError(refusal("threads: acquire_blocking, with limiter", "RedisStore") + ": use `async with limiter:`")

    def reserve(self, amount: float = 1) -> Any:
        """Not over a RedisStore: ``acquire`` with a ``timeout`` bounds a wait."""
        raise refused("reserve", "RedisStore")
