"""``AsyncLimiter``: the drop-in for aiolimiter's, a ``Limiter`` with aiolimiter 1.3.0's capacity, order and words."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, ClassVar, Coroutine, cast, overload

from . import _params
from ._limiter import Flavour, Limiter, StoreT
from ._reservation import Reservation
from ._store_shm import SharedMemoryStore

if TYPE_CHECKING:
    from ._limiter import LocalLimiter


OUT_OF_RANGE = "Amount must be a number between 0 and the maximum capacity"  # aiolimiter 1.3.0's ValueError


def aiolimiter_rate(max_rate: float, time_period: float) -> _params.Rate:
    """aiolimiter's capacity: max_rate, refilled over time_period (below one token allowed)."""
    return _params.rate("", max_rate, time_period, burst_below_one=True)


def _granted_nothing(amount: object, error: ValueError) -> None:
    """For Limiter's ``error`` about ``amount``, aiolimiter 1.3.0's answer: returns for 0, which it grants at
    once; raises its ValueError for an amount below 0 or NaN, and ``error`` itself for any other."""
    if isinstance(amount, (int, float)) and not isinstance(amount, bool) and not amount > 0:
        if amount == 0:
            return
        raise ValueError(OUT_OF_RANGE) from None
    raise error


async def _nothing_to_take() -> None:
    """What ``AsyncLimiter.acquire(0)`` returns: done at once, as aiolimiter's."""


class AsyncLimiter(Limiter[StoreT]):
    """Drop-in for ``aiolimiter.AsyncLimiter`` 1.3.0: capacity max_rate, newcomers take free capacity
    ahead of waiters, waiters wake smallest amount first, and an amount of 0 goes through at once.
    Subclass it as aiolimiter users do: an ``__init__`` of your own that calls
    ``super().__init__(max_rate, time_period)``. With ``store=SharedMemoryStore(name)``, one capacity for
    every process of the host that uses the name (each process's waiters wake smallest first)."""

    __slots__ = ()
    _flavour: ClassVar[Flavour] = "AsyncLimiter"
    _warn_on_reuse = True
    _capacity_is_max_rate = True
    _smallest_first = True

    @overload
    def __init__(self: AsyncLimiter[None], max_rate: float, time_period: float = 60, *,
                 store: None = None) -> None: ...
    @overload
    def __init__(self: AsyncLimiter[SharedMemoryStore], max_rate: float, time_period: float = 60, *,
                 store: SharedMemoryStore) -> None: ...
    def __init__(self, max_rate: float, time_period: float = 60, *, store: SharedMemoryStore | None = None) -> None:
        if store is not None:  # a subclass that let store= through: its instance has no store behind it
            raise TypeError(f"store= works with AsyncLimiter itself, not {type(self).__name__}")
        self._setup([aiolimiter_rate(max_rate, time_period)], None, fair=False, smallest_first=True)

    def acquire(self, amount: float = 1, timeout: float | None = None) -> Coroutine[Any, Any, None]:
        """Waits for ``amount`` tokens (aiolimiter's ``acquire``). With ``timeout`` (aiotb's, not in
        aiolimiter), TimeoutError once that many seconds pass without the grant, taking nothing:
        smallest-first order cannot tell in advance when a request will come, so the wait runs out
        its timeout where ``Limiter`` refuses at once."""
        try:
            acquisition = super().acquire(amount)  # the amount, checked as Limiter does; nothing taken yet
        except ValueError as error:
            _granted_nothing(amount, error)
            _params.timeout(timeout)
            return _nothing_to_take()
        try:
            limit = _params.timeout(timeout)
        except (TypeError, ValueError):
            acquisition.close()
            raise
        if limit is None:
            return acquisition
        acquisition.close()
        return self._acquire_within(float(amount), limit)

    async def _acquire_within(self, amount: float, limit: float) -> None:
        """acquire(amount), given up once limit seconds pass (leaving the queue, or giving the grant back)."""
        try:
            async with asyncio.timeout(limit):
                await super().acquire(amount)
        except TimeoutError:
            raise TimeoutError(f"{amount!r} tokens were not granted within {limit!r} s") from None

    def acquire_blocking(self, amount: float = 1, timeout: float | None = None) -> None:
        """Blocks the calling thread until ``amount`` tokens are granted; with ``timeout``, TimeoutError
        once that many seconds pass without the grant, taking nothing (as ``acquire``)."""
        try:
            super().acquire_blocking(amount, timeout)
        except ValueError as error:
            _granted_nothing(amount, error)

    def has_capacity(self, amount: float = 1) -> bool:
        """Whether ``acquire(amount)`` would go through now; False above the capacity, as aiolimiter."""
        if isinstance(amount, (int, float)) and not isinstance(amount, bool) and amount > self.max_rate:
            return False
        try:
            return cast("LocalLimiter", super()).has_capacity(amount)  # its store answers at once
        except ValueError as error:
            _granted_nothing(amount, error)
            return True

    def reserve(self, amount: float = 1) -> Reservation:
        """Not in aiolimiter's API: use ``aiotb.Limiter`` for reservations."""
        raise TypeError("AsyncLimiter has no reservations; use aiotb.Limiter")

    def _over_capacity(self, amount: object) -> Exception:
        return ValueError(OUT_OF_RANGE)

    def __repr__(self) -> str:
        return (f"<{type(self).__name__}(max_rate={self.max_rate!r}, time_period={self.time_period!r}) "
                f"at {id(self):#x} [tokens: {cast('LocalLimiter', self).tokens:.6g}, waiters: {self.waiting}]>")
