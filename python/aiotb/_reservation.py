"""Reservations: a place in a limiter's order, taken now, granted at an instant said in advance.

``Reservation`` is the place in the queue of a limiter whose store answers at once (in process, shared
memory); ``RedisReservation`` a place in the order of every client of a RedisStore's key, which takes a round
trip to take and one to give back. Both are awaited for their grant and given back with ``await acancel()``."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Generator

if TYPE_CHECKING:
    from ._dispatch import Dispatcher
    from ._limiter import Limiter
    from ._store import Reserved


class BaseReservation(ABC):
    """What every reservation offers: ``ready_at`` (loop time of the grant), ``delay``, ``done()``, ``await r``
    for the grant, and ``await r.acancel()`` to give it back."""

    __slots__ = ()
    _ready_at: float

    @property
    def ready_at(self) -> float:
        """Loop time of the grant, as projected when it was reserved."""
        return self._ready_at

    @property
    @abstractmethod
    def delay(self) -> float:
        """Seconds from now until the grant (0 once it is due)."""

    @abstractmethod
    def done(self) -> bool:
        """Whether it has been granted, used or given back."""

    @abstractmethod
    async def acancel(self) -> bool:
        """Gives the place (or the tokens) back; False if it was already used or given back."""

    @abstractmethod
    async def _wait(self) -> None: ...

    def __await__(self) -> Generator[Any, None, None]:
        return self._wait().__await__()


class Reservation(BaseReservation):
    """A place in the queue of a limiter whose store answers at once (in process, shared memory), taken by
    ``limiter.reserve(amount)``."""

    __slots__ = ("_limiter", "_ident", "_amount", "_granted", "_dispatcher", "_used", "_ready_at")

    def __init__(self, limiter: Limiter[Any], ident: int, amount: float, granted: asyncio.Future[None],
                 ready_at: float, dispatcher: Dispatcher) -> None:
        self._limiter = limiter
        self._ident = ident
        self._amount = amount
        self._granted = granted
        self._dispatcher = dispatcher
        self._used = False
        self._ready_at = ready_at

    @property
    def delay(self) -> float:
        """Seconds from now until the projected grant (0 once it is due)."""
        return max(0.0, self.ready_at - self._dispatcher.loop.time())

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
        elif not self._limiter._withdraw(self._ident):  # granted by another loop's pass, on its way here:
            granted.cancel()  # its delivery gives the tokens back
            return True
        granted.cancel()
        self._dispatcher.owners.retime(self._dispatcher)
        if not self._dispatcher.loop.is_closed():
            self._dispatcher.guarded()
        return True

    async def acancel(self) -> bool:
        """``cancel``, as over every store."""
        return self.cancel()

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


class RedisReservation(BaseReservation):
    """A place in the order of every client of a RedisStore's key, taken by ``await limiter.areserve(amount)``:
    behind every reservation made in Redis before it (the head of this limiter's queue included, its other
    waiters not: they reserve later). ``await r`` waits for its instant; ``await r.acancel()`` gives it back
    in one round trip, to each rate nobody reserved from since. Cancelled while awaited before its instant,
    it is given back the same way."""

    __slots__ = ("_limiter", "_reserved", "_amount", "_loop", "_used", "_wake", "_ready_at")

    def __init__(self, limiter: Any, reserved: Reserved, amount: float, loop: asyncio.AbstractEventLoop,
                 received: float) -> None:
        self._limiter = limiter  # its RedisLimiter: the calls that go to Redis run on the loop it serves
        self._reserved = reserved
        self._amount = amount
        self._loop = loop
        self._used = False  # granted to its awaiter, or given back
        self._wake: asyncio.Future[None] | None = None  # while a task awaits it: done by a give-back
        self._ready_at = received + reserved.delay / 1e9  # never before the server's instant

    @property
    def delay(self) -> float:
        """Seconds from now until the grant (0 once it is due)."""
        return max(0.0, self.ready_at - self._loop.time())

    def done(self) -> bool:
        """Whether it was awaited to its grant or given back."""
        return self._used

    async def acancel(self) -> bool:
        """Gives it back (one round trip); False if it was already used or given back. A task awaiting it
        gets CancelledError at once."""
        if self._used:
            return False
        self._used = True
        wake = self._wake
        if wake is not None:
            wake.get_loop().call_soon_threadsafe(_resolve, wake)
        await self._limiter._cancel_reservation(self._reserved.record)
        return True

    async def _wait(self) -> None:
        if self._used or self._wake is not None:
            raise RuntimeError("this reservation was already awaited or cancelled")
        self._wake = wake = asyncio.get_running_loop().create_future()
        loop, waited = self._loop, self.delay
        try:
            while (left := self.ready_at - loop.time()) > 0 and not self._used:  # a loop's timer may fire up to
                await asyncio.wait({wake}, timeout=left)                         # its resolution early
        except asyncio.CancelledError:
            _giving_back.add(task := asyncio.ensure_future(self.acancel()))
            task.add_done_callback(_given_back)
            raise
        finally:
            self._wake = None
        if self._used:  # given back by acancel() while awaited
            raise asyncio.CancelledError()
        self._used = True
        self._limiter._count_grant(self._amount, waited, self._reserved)

    def __repr__(self) -> str:
        state = "used" if self._used else f"ready in {self.delay:.6g} s"
        return f"<RedisReservation of {self._amount!r} at {self.ready_at!r}: {state}>"


_giving_back: set[asyncio.Future[bool]] = set()  # reservations given back by a cancelled waiter: kept till done


def _resolve(wake: asyncio.Future[None]) -> None:
    if not wake.done():
        wake.set_result(None)


def _given_back(task: asyncio.Future[bool]) -> None:
    _giving_back.discard(task)
    if not task.cancelled() and task.exception() is not None:
        task.get_loop().call_exception_handler({"message": "a cancelled reservation could not be given back",
                                                "exception": task.exception()})
