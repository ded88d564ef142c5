"""The engine of a ``Limiter`` over a ``SharedMemoryStore``: this process's queue (``_reserving``) in front of
rates that every process of the host shares, in a segment each reservation updates by compare-and-swap.

Instants are CLOCK_MONOTONIC's, which every process of the host shares, so a limiter over the store runs
only on loops whose clock it is. A reservation whose instant falls in a pause set after it (``penalize``
from another process) is dropped when it comes due, and its waiter reserves again after the pause.
Giving back follows the segment's rule (shm.h): a cancel restores the tokens only if no later reservation
was built on them. Statistics are this process's."""

from __future__ import annotations

import asyncio
import math
from typing import Any, Callable, Coroutine, Sequence, TypeVar

from . import _params
from ._clock import is_monotonic_loop
from ._core import Bucket
from ._limiter import serve
from ._reserving import ReservingLimiter, Slot, Waiter
from ._store import StoreCorrupt
from ._store_shm import SharedMemoryStore
from ._tokenbucket import NEVER as _NEVER
from ._tokenbucket import SHM_EAGAIN as _EAGAIN
from ._tokenbucket import SHM_EINVAL as _EINVAL
from ._tokenbucket import SHM_ETOOLATE as _ETOOLATE
from ._tokenbucket import SHM_OK as _OK
from ._tokenbucket import Segment, SegmentCorrupt

T = TypeVar("T")
SET_RATE_TRIES = 1000  # set_rate overtaken by another process's set_rate of the same rate this often: give up


class SharedLimiter(ReservingLimiter[SharedMemoryStore]):
    """``Limiter(..., store=SharedMemoryStore(name))``: see the module's doc."""

    __slots__ = ("_store", "_segment", "_loop_checked")

    def __init__(self, max_rate: float | None = None, time_period: float = 60, *,
                 burst: float | None = None, initial: float | None = None, fair: bool = True,
                 rates: Sequence[tuple[float, ...]] | None = None, store: SharedMemoryStore | None = None) -> None:
        if not isinstance(store, SharedMemoryStore):
            raise TypeError(f"store must be a SharedMemoryStore, got {store!r}")
        checked = _params.limiter_rates(max_rate, time_period, burst, initial, rates)
        self._setup(checked, None, _params.flag("fair", fair), smallest_first=False)
        self._segment: Segment = store._open(tuple(r.engine() for r in checked))
        self._store = store
        self._loop_checked: asyncio.AbstractEventLoop | None = None
        self._start_queue()
        self._share(self._segment, StoreCorrupt)  # the engine's fast path takes from the segment

    @property
    def store(self) -> SharedMemoryStore:
        """Where the rates live."""
        return self._store

    # ---- the public API, on the shared rates ----

    @property
    def tokens(self) -> float:
        """Tokens available now in the shared rates (the fewest over them; 0 while paused)."""
        return self._call(self._segment.tokens, self._segment.now())

    def has_capacity(self, amount: float = 1) -> bool:
        x = self._checked_amount(amount)
        if self._fair and (self._queue or self._slot is not None):
            return False
        now = self._segment.now()
        return self._call(self._segment.fit_at, x, now) <= now

    def __repr__(self) -> str:
        return (f"<{type(self).__name__}(max_rate={self.max_rate!r}, time_period={self.time_period!r}, "
                f"burst={self.burst!r}, fair={self.fair!r}, store={self._store!r}) waiting={self.waiting} "
                f"at {id(self):#x}>")

    # ---- waiting ----

    def _wait(self, amount: float, timeout: float | None) -> Coroutine[Any, Any, None]:
        self._check_loop()
        return super()._wait(amount, timeout)

    def _check_loop(self) -> None:
        """RuntimeError on a loop whose clock is not CLOCK_MONOTONIC: processes share that clock only."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop_checked:
            if not is_monotonic_loop(loop):
                raise RuntimeError("a limiter with a SharedMemoryStore runs on CLOCK_MONOTONIC, which every "
                                   "process shares: it cannot run on a loop with a virtual or patched clock")
            self._loop_checked = loop

    def _reserve(self, amount: float, handle: Any, owner: object) -> tuple[int, float]:
        ident = self._enqueue(self._checked_amount(amount), None, handle, owner)
        now = self._segment.now()
        ahead = min(sum(w.amount for w in self._queue.values()), self.burst)
        return ident, max(self._call(self._segment.fit_at, ahead, now), now) / 1e9

    # ---- the queue's store: the segment, which answers at once ----

    def _store_now(self) -> float:
        return self._segment.now() / 1e9

    def _refuse_late(self, amount_ahead: float, deadline: float, now: float) -> bool:
        return self._call(self._segment.fit_at, amount_ahead, _ns(now)) > _ns(deadline)

    def _ask(self, ident: int, waiter: Waiter, now: float) -> None:
        status, instant, record = self._segment.reserve(waiter.amount, _ns(now), _ns(waiter.deadline))
        if status == _OK:
            self._slot = Slot(ident, instant / 1e9, instant / 1e9, record, waiter.amount, False)
        else:
            self._fail(ident, self._refusal(status, waiter))

    def _retake(self, slot: Slot, waiter: Waiter, now: float) -> None:
        if self._segment.take_now(slot.amount, _ns(now)) == _OK:
            self._slot = slot._replace(at=now, due=now)
        else:
            self._restarted = slot.ident  # no room now: it reserves again, behind the others

    def _give_back(self, record: Any) -> None:
        self._call(self._segment.cancel, record, self._segment.now())

    def _slot_stands(self, slot: Slot, now: float) -> bool:
        """Whether no pause set after slot was reserved covers its instant (else its waiter reserves again,
        after it). A segment too corrupt to say fails the waiter."""
        try:
            return self._call(self._segment.paused_until) <= _ns(now)
        except StoreCorrupt as error:
            self._fail(slot.ident, error)
            return False

    def _busy(self, busy: bool) -> None:
        self._share_busy(busy)

    def _refusal(self, status: int, waiter: Waiter) -> BaseException:
        """The error of a waiter the segment would not reserve for, by its status."""
        if status == _EINVAL:  # above a burst another process set
            return ValueError(f"the limiter's new burst (set by another process) is below this request's amount "
                              f"({waiter.amount!r})")
        if status != _ETOOLATE:
            return StoreCorrupt(f"{self._store!r} is corrupt: nothing was granted from it")
        if waiter.deadline != math.inf:
            return TimeoutError("this request can no longer be granted within its timeout")
        return TimeoutError("this request cannot be granted: the shared rates put its grant past the furthest "
                            "instant a reservation may reach (paused that far ahead, or written there by another "
                            "process)")

    def _hold(self, amount: float) -> None:
        return None

    def _end_hold(self, amount: float) -> None:
        return None

    # ---- changes ----

    def _set_rate(self, index: int, ns_per_token: float, burst: float) -> None:
        segment = self._segment
        for _ in range(SET_RATE_TRIES):
            status = segment.set_rate(index, ns_per_token, burst, segment.now())
            if status == _OK:
                Bucket._set_rate(self, index, ns_per_token, burst)  # amounts are checked against it
                return
            if status != _EAGAIN:
                raise StoreCorrupt(f"{self._store!r} is corrupt: the rate was not changed")
        raise RuntimeError(f"set_rate on {self._store!r} was overtaken by other processes' changes of the same "
                           f"rate {SET_RATE_TRIES} times: nothing was changed")

    def _set_window(self, period_ns: int, limit: float) -> None:
        raise TypeError("a limiter with a SharedMemoryStore has no window")

    def _pause_until(self, when: float) -> None:
        segment = self._segment
        self._call(segment.pause_until, min(round(when * 1e9), _NEVER))
        with self._queue_lock:
            slot = self._slot
            if slot is not None and _ns(slot.at) < self._call(segment.paused_until):  # reserve again, after it
                self._slot = None
                self._call(segment.cancel, slot.record, segment.now())

    def _stats(self) -> tuple[int, float, int, float, float, int, int]:
        at_once, at_once_tokens = Bucket._stats(self)[:2]  # the engine's fast path counts its own grants
        granted, tokens, waits, total, most, cancelled, timeouts = super()._stats()
        return granted + at_once, tokens + at_once_tokens, waits, total, most, cancelled, timeouts

    # ---- the segment ----

    def _call(self, method: Callable[..., T], *args: Any) -> T:
        """method(*args) on the segment; its corruption as StoreCorrupt."""
        try:
            return method(*args)
        except SegmentCorrupt as error:
            raise StoreCorrupt(f"{self._store!r} is corrupt: nothing was granted from it") from error


def _ns(seconds: float) -> int:
    """seconds on CLOCK_MONOTONIC as the segment's ns (inf: never)."""
    return _NEVER if seconds >= _NEVER / 1e9 else round(seconds * 1e9)


serve("shared", SharedLimiter)
