"""The engine of a ``Limiter`` over a ``SharedMemoryStore``: this process's queue (``_reserving``) in front of
rates that every process of the host shares, in a segment each reservation updates by compare-and-swap
(``_shm_rates``, which answers every call at once).

Instants are CLOCK_MONOTONIC's, which every process of the host shares, so a limiter over the store runs
only on loops whose clock it is. A reservation whose instant falls in a pause set after it (``penalize``
from another process) is dropped when it comes due, and its waiter reserves again after the pause.
Giving back follows the segment's rule (shm.h): a cancel restores the tokens only if no later reservation
was built on them. Statistics are this process's."""

from __future__ import annotations

import asyncio
import math
from typing import Any, Coroutine, Sequence

from . import _params
from ._clock import is_monotonic_loop
from ._core import Bucket
from ._async_limiter import AsyncLimiter, aiolimiter_rate
from ._limiter import serve
from ._reserving import ReservingLimiter, Slot, Waiter
from ._shm_rates import SharedRates
from ._store import Reserved, StoreCorrupt, at_once
from ._store_shm import SharedMemoryStore
from ._tokenbucket import NEVER as _NEVER

MOST_AHEAD_NS = 2 ** 56  # how far ahead a limit of the segment may end (shm.h's TB_SHM_HORIZON)


class SharedLimiter(ReservingLimiter[SharedMemoryStore]):
    """``Limiter(..., store=SharedMemoryStore(name))``: see the module's doc."""

    __slots__ = ("_store_rates", "_segment", "_loop_checked")

    def __init__(self, max_rate: float | None = None, time_period: float = 60, *,
                 burst: float | None = None, initial: float | None = None, fair: bool = True,
                 rates: Sequence[tuple[float, ...]] | None = None, store: SharedMemoryStore | None = None) -> None:
        checked = _params.limiter_rates(max_rate, time_period, burst, initial, rates)
        self._over(store, checked, _params.flag("fair", fair), smallest_first=False)

    def _over(self, store: object, rates: list[_params.Rate], fair: bool, smallest_first: bool) -> None:
        """Serves rates (checked) in store, joined or created there."""
        if not isinstance(store, SharedMemoryStore):
            raise TypeError(f"store must be a SharedMemoryStore, got {store!r}")
        self._setup(rates, None, fair, smallest_first)
        self._store_rates: SharedRates = store.bind([r.engine() for r in rates])
        self._segment = self._store_rates.segment  # the engine's fast path takes from it
        self._store = store
        self._loop_checked: asyncio.AbstractEventLoop | None = None
        self._start_queue()
        self._share(self._segment, StoreCorrupt)

    # ---- the public API, on the shared rates ----

    @property
    def tokens(self) -> float:
        """Tokens available now in the shared rates (the fewest over them; 0 while paused)."""
        return at_once(self._store_rates.tokens())

    def has_capacity(self, amount: float = 1) -> bool:
        x = self._checked_amount(amount)
        if self._fair and (self._queue or self._slot is not None):
            return False
        try:
            return at_once(self._store_rates.fit_delay(x)) <= 0
        except ValueError:  # above a burst another process set
            return False

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
        ahead = min(sum(w.amount for w in self._queue.values()), self.burst)
        return ident, self._fits_at(ahead)

    # ---- the queue's store: the segment, which answers at once ----

    def _store_now(self) -> float:
        return self._store_rates.now() / 1e9

    def _refuse_late(self, amount_ahead: float, deadline: float, now: float) -> bool:
        return self._fits_at(amount_ahead) > deadline

    def _ask(self, ident: int, waiter: Waiter, now: float) -> None:
        wait = -1 if waiter.deadline == math.inf else max(0, round((waiter.deadline - now) * 1e9))
        try:
            reserved = at_once(self._store_rates.reserve(waiter.amount, wait))
        except (ValueError, StoreCorrupt) as error:  # above a burst another process set; a corrupt segment
            self._fail(ident, error)
            return
        if isinstance(reserved, Reserved):
            self._slot = Slot(ident, reserved.at / 1e9, reserved.at / 1e9, reserved.record, waiter.amount, False)
        elif waiter.deadline != math.inf:
            self._fail(ident, TimeoutError("this request can no longer be granted within its timeout"))
        else:
            self._fail(ident, TimeoutError("this request cannot be granted: the shared rates put its grant past the "
                                           "furthest instant a reservation may reach (paused that far ahead, or "
                                           "written there by another process)"))

    def _retake(self, slot: Slot, waiter: Waiter, now: float) -> None:
        try:
            fresh = at_once(self._store_rates.reserve(slot.amount, 0))
        except (ValueError, StoreCorrupt) as error:
            self._fail(slot.ident, error)
            return
        if isinstance(fresh, Reserved):
            self._slot = slot._replace(at=now, due=now, record=fresh.record)
        else:
            self._restarted = slot.ident  # no room now: it reserves again, behind the others

    def _give_back(self, record: bytes) -> None:
        at_once(self._store_rates.cancel(record))

    def _slot_stands(self, slot: Slot, now: float) -> bool:
        """Whether no pause set after slot was reserved covers its instant (else its waiter reserves again,
        after it). A segment too corrupt to say fails the waiter."""
        try:
            return self._store_rates.paused_until() <= _ns(now)
        except StoreCorrupt as error:
            self._fail(slot.ident, error)
            return False

    def _busy(self, busy: bool) -> None:
        self._share_busy(busy)

    def _fits_at(self, amount: float) -> float:
        """The instant amount would be granted at, s (inf above a burst another process set)."""
        rates = self._store_rates
        now = rates.now()
        try:
            return (now + at_once(rates.fit_delay(amount))) / 1e9
        except ValueError:
            return math.inf

    # ---- changes ----

    def _set_rate(self, index: int, ns_per_token: float, burst: float) -> None:
        at_once(self._store_rates.set_rate(index, ns_per_token, burst))
        Bucket._set_rate(self, index, ns_per_token, burst)  # amounts are checked against it

    def _set_window(self, period_ns: int, limit: float) -> None:
        raise TypeError("a limiter with a SharedMemoryStore has no window")

    def _limit_until(self, tokens: float, when: float, slack: float) -> bool:
        """A limit for every process of the host; a reservation made before it keeps its instant."""
        rates = self._store_rates
        span = _ns(when) - rates.now()
        if span > MOST_AHEAD_NS:
            raise ValueError(f"when must be at most 2**56 ns (2.28 years) from now over a SharedMemoryStore, got "
                             f"{when!r}")
        if span > 0:
            at_once(rates.limit(tokens, span, round(slack * 1e9)))
        return span > 0

    def _settle_cost(self, taken: float, used: float, held: bool) -> None:
        at_once(self._store_rates.settle(taken, used))

    def _pause_until(self, when: float) -> None:
        rates = self._store_rates
        at_once(rates.pause(max(0, _ns(when) - rates.now())))
        with self._queue_lock:
            slot = self._slot
            if slot is not None and _ns(slot.at) < rates.paused_until():  # reserve again, after it
                self._slot = None
                at_once(rates.cancel(slot.record))

    def _stats(self) -> tuple[int, float, int, float, float, int, int]:
        fast, fast_tokens = Bucket._stats(self)[:2]  # the engine's fast path counts its own grants
        granted, tokens, waits, total, most, cancelled, timeouts = super()._stats()
        return granted + fast, tokens + fast_tokens, waits, total, most, cancelled, timeouts


class SharedAsyncLimiter(AsyncLimiter[SharedMemoryStore], SharedLimiter):
    """``AsyncLimiter(max_rate, time_period, store=SharedMemoryStore(name))``: aiolimiter's capacity, shared by
    every process of the host that uses the name. As aiolimiter's, a waiter holds nothing ahead: newcomers take
    free capacity before it, and this process's waiters wake smallest amount first. So its queue reserves nothing:
    its head is timed for the instant its amount fits, and takes it then if it still does, else is timed again."""

    __slots__ = ()

    def __init__(self, max_rate: float, time_period: float = 60, *, store: SharedMemoryStore | None = None) -> None:
        self._over(store, [aiolimiter_rate(max_rate, time_period)], fair=False, smallest_first=True)

    def _enqueue(self, amount: float, timeout: float | None, handle: Any, owner: object) -> int:
        """As the queue's; a newcomer smaller than the head timed now takes its turn at the next pass."""
        ident = super()._enqueue(amount, timeout, handle, owner)
        with self._queue_lock:
            slot = self._slot
            if slot is not None and slot.record is None and amount < slot.amount:
                self._slot = None
        return ident

    def _ask(self, ident: int, waiter: Waiter, now: float) -> None:
        """Takes the head's amount if it fits now, else times the head for the instant it will (asking again
        then: a slot with no record)."""
        rates = self._store_rates
        try:
            taken = at_once(rates.reserve(waiter.amount, 0))
            delay = 0 if taken is not None else at_once(rates.fit_delay(waiter.amount))
        except (ValueError, StoreCorrupt) as error:  # above a burst another process set; a corrupt segment
            self._fail(ident, error)
            return
        if isinstance(taken, Reserved):
            self._slot = Slot(ident, now, now, taken.record, waiter.amount, False)
        else:  # taken by others since it was timed: a nanosecond at least, so that a pass never spins on it
            self._slot = Slot(ident, now + max(delay, 1) / 1e9, math.inf, None, waiter.amount, False)


def _ns(seconds: float) -> int:
    """seconds on CLOCK_MONOTONIC as the segment's ns (inf: never)."""
    return _NEVER if seconds >= _NEVER / 1e9 else round(seconds * 1e9)


serve("SharedMemoryStore", "Limiter", SharedLimiter)
serve("SharedMemoryStore", "AsyncLimiter", SharedAsyncLimiter)
