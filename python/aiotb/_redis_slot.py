"""``async with limiter.slot(amount):`` over a ``RedisStore``: a window's grant, held in Redis while
the block runs."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Self

from ._limiter import Slot

if TYPE_CHECKING:
    from ._redis_limiter import RedisLimiter
    from ._store_redis import RedisStore


class RedisSlot(Slot["RedisStore"]):
    """``async with limiter.slot(amount):`` over a RedisStore: a window's grant is held in Redis
    until the block exits or ``release()``."""

    __slots__ = ("_redis_limiter", "_record", "_ending", "_ended")

    def __init__(self, limiter: RedisLimiter, amount: float) -> None:
        super().__init__(limiter, amount)
        self._redis_limiter = limiter
        self._record: bytes | None = None
        self._ending: asyncio.Task[None] | None = None
        self._ended: bytes | None = None  # the record of a hold that ended: the grant a settle after it names

    async def __aenter__(self) -> Self:
        self._record = await self._redis_limiter._acquire(self._amount, None, hold=self._limiter._window)
        self._entered = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        record, self._record = self._record, None
        if record is not None:
            self._ended = record
            await self._redis_limiter._end_hold_of(record)
        elif self._ending is not None:
            await self._ending

    @property
    def held(self) -> bool:
        """Whether the slot holds a window's grant now: entered, and neither exited nor released."""
        return self._record is not None

    def release(self) -> None:
        """Ends the hold now, before the block exits (its round trip to Redis runs on the loop; the
        block's exit waits for it); once only."""
        record, self._record = self._record, None
        if record is not None:
            self._ended = record
            self._ending = asyncio.get_running_loop().create_task(self._redis_limiter._end_hold_of(record))

    async def asettle(self, used: float) -> None:
        """The grant's real cost, for every client of the key (one round trip), as ``Slot.settle``: inside the
        block a window's held grant counts ``used`` from its instant; after it, as ``limiter.asettle``."""
        await self._settle_once(lambda: self._settle_in_redis(used), used)

    async def _settle_in_redis(self, used: float) -> None:
        """The settle's round trip: a held grant's (or one whose hold ended) by its record, else the limiter's."""
        if self._ending is not None:  # a release's end of the hold goes first: the settle names the grant after
            await self._ending
        if self._record is not None:
            self._record = await self._redis_limiter._settle_held(self._record, self._amount, used)
        elif self._ended is not None:
            self._ended = await self._redis_limiter._settle_held(self._ended, self._amount, used)
        else:
            await self._redis_limiter.asettle(self._amount, used)

    def __repr__(self) -> str:
        return f"<RedisSlot of {self._amount!r} on {self._limiter!r}>"
