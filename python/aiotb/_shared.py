"""The engine of a ``Limiter`` over a ``SharedMemoryStore``: this process's queue in front of rates
that every process of the host shares.

Order across processes is the order of reservations in the shared segment (each takes its place
behind every grant reserved before it, by compare-and-swap); order within a process is this queue's,
first come first served. Each process holds at most one reservation ahead: its first waiter's. That
waiter's loop times it (the dispatcher's one timer, precise where it can be); when its instant comes
it is granted and the next waiter reserves. So no process polls or wakes another, and a process
stalled by the scheduler, a GC pause or SIGSTOP wakes with at most that one grant due, never a
backlog of slots that came due while it slept. Nor is that one grant used as it stands: counted at its
instant, it would come on top of the grants the other processes made meanwhile. A reservation reached
more than ``STALE_AFTER`` (5 ms, and a token's time) after its instant is stale: its waiter takes the
tokens afresh if they are free now, else reserves again behind the others (once: a waiter gives up
one stale reservation at most, so that an overloaded process does not starve), and the stale
reservation's tokens are lost. So the bound holds where grants are used, less what a lateness below
that allows (at most one grant per process, and only while the rates have no room). A reservation
whose instant falls in a pause set after it (``penalize`` from another process) is dropped when it
comes due, and its waiter reserves again after the pause.

Giving back follows the segment's rule (shm.h): a waiter that leaves before its instant gives the
reservation to the next waiter of this process if that one asks for no more, else cancels it, which
restores the tokens only if no later reservation was built on them. Tokens granted to a task that is
cancelled before it resumes are lost: their instant has passed, and the other processes may have
counted on it. Statistics are this process's."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import OrderedDict
from typing import Any, Callable, Coroutine, NamedTuple, Sequence, TypeVar

from . import _params
from ._clock import is_monotonic_loop
from ._core import Bucket
from ._limiter import Limiter, serve
from ._store import StoreCorrupt
from ._store_shm import SharedMemoryStore
from ._tokenbucket import NEVER as _NEVER
from ._tokenbucket import SHM_EAGAIN as _EAGAIN
from ._tokenbucket import SHM_EINVAL as _EINVAL
from ._tokenbucket import SHM_ETOOLATE as _ETOOLATE
from ._tokenbucket import SHM_OK as _OK
from ._tokenbucket import Segment, SegmentCorrupt

T = TypeVar("T")
STALE_AFTER = 5_000_000  # ns: a reservation reached later than this (and than a token's time) is stale
SET_RATE_TRIES = 1000  # set_rate overtaken by another process's set_rate of the same rate this often: give up


class _Waiter(NamedTuple):
    handle: Any         # the future, or the blocked thread's waiter
    owner: Any          # who times and wakes it: a dispatcher, or the thread's waiter
    amount: float
    deadline: int       # ns on CLOCK_MONOTONIC, NEVER for none
    enqueued_at: int


class _Slot(NamedTuple):
    ident: int          # the waiter it is for
    at: int             # its grant instant, ns on CLOCK_MONOTONIC
    record: bytes       # what a cancel needs
    amount: float


class SharedLimiter(Limiter[SharedMemoryStore]):
    """``Limiter(..., store=SharedMemoryStore(name))``: see the module's doc."""

    __slots__ = ("_store", "_segment", "_queue", "_slot", "_queue_lock", "_idents", "_loop_checked",
                 "_counts", "_stale_after", "_restarted")

    def __init__(self, max_rate: float | None = None, time_period: float = 60, *,
                 burst: float | None = None, initial: float | None = None, fair: bool = True,
                 rates: Sequence[tuple[float, ...]] | None = None, store: SharedMemoryStore | None = None) -> None:
        if not isinstance(store, SharedMemoryStore):
            raise TypeError(f"store must be a SharedMemoryStore, got {store!r}")
        checked = _params.limiter_rates(max_rate, time_period, burst, initial, rates)
        self._setup(checked, None, _params.flag("fair", fair), smallest_first=False)
        self._segment: Segment = store._open(tuple(r.engine() for r in checked))
        self._store = store
        self._queue: OrderedDict[int, _Waiter] = OrderedDict()
        self._slot: _Slot | None = None
        self._queue_lock = threading.Lock()  # the queue and the slot: loops and threads of this process share them
        self._idents = itertools.count(1)
        self._restarted = 0  # the waiter that gave up a stale reservation last (0: none)
        self._loop_checked: asyncio.AbstractEventLoop | None = None
        # granted, granted tokens, waits, wait ns total, wait ns max, cancelled, timeouts
        self._counts = [0, 0.0, 0, 0, 0, 0, 0]
        self._owners.holds = True  # the dispatcher's passes fail what the engine strands
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

    @property
    def waiting(self) -> int:
        """Waiters of this process queued now."""
        return len(self._queue)

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

    def _time_precisely(self) -> None:
        """After a change of the rates: also when a reservation reached late turns stale."""
        super()._time_precisely()
        self._stale_after = max(STALE_AFTER, min(r.ns_per_token for r in self._rates))

    def _enqueue(self, amount: float, timeout: float | None, handle: Any, owner: object) -> int:
        segment = self._segment
        now = segment.now()
        deadline = _NEVER if timeout is None else now + round(timeout * 1e9)
        with self._queue_lock:
            if timeout is not None:
                ahead = sum(w.amount for w in self._queue.values()) + amount
                first = self._call(segment.fit_at, min(ahead, self.burst), now)
                if first > deadline:
                    self._counts[6] += 1
                    raise TimeoutError(f"{amount!r} tokens cannot be granted within {timeout!r} s")
            self._share_busy(True)  # first: a newcomer on another thread must not take ahead of it
            ident = next(self._idents)
            self._queue[ident] = _Waiter(handle, owner, amount, min(deadline, _NEVER), now)
        return ident

    def _reserve(self, amount: float, handle: Any, owner: object) -> tuple[int, float]:
        ident = self._enqueue(self._checked_amount(amount), None, handle, owner)
        now = self._segment.now()
        ahead = min(sum(w.amount for w in self._queue.values()), self.burst)
        return ident, max(self._call(self._segment.fit_at, ahead, now), now) / 1e9

    def _grant_due(self, at: float | None, owner: object) -> tuple[list[Any], list[float], float | None]:
        """Grants the waiters whose reservation came due (by now, or at, the instant a timer fired
        for), reserves for the next, and says when owner's first waiter is due (loop time), None if
        it has none at the head. A waiter the segment cannot reserve for is failed, on its own loop
        or thread, and the next one reserves: a pass never ends with grants made and not handed out,
        or with a head that no one times."""
        segment = self._segment
        granted: list[Any] = []
        amounts: list[float] = []
        failed: list[tuple[Any, BaseException]] = []
        woken = None
        with self._queue_lock:
            now = segment.now()
            if at is not None:
                now = max(now, round(at * 1e9))
            queue = self._queue
            while True:
                slot = self._slot
                if slot is not None:
                    if slot.at > now:
                        break
                    self._slot = None
                    if self._paused_past(slot, now, failed):  # a pause set after it was reserved: it waits again
                        continue
                    if now - slot.at > self._stale_after and slot.ident != self._restarted:
                        # stalled past its instant: counted then, not now (once per waiter: none starves)
                        if segment.take_now(slot.amount, now) != _OK:
                            self._restarted = slot.ident
                            continue  # no room now: it reserves again, behind the others
                        slot = slot._replace(at=now)
                    waiter = queue.pop(slot.ident)
                    granted.append(waiter.handle)
                    amounts.append(waiter.amount)
                    self._count_wait(waiter, slot, now)
                    continue
                if not queue:
                    break
                ident, waiter = next(iter(queue.items()))
                status, instant, record = segment.reserve(waiter.amount, now, waiter.deadline)
                if status == _OK:
                    self._slot = _Slot(ident, instant, record, waiter.amount)
                    if waiter.owner is not owner and instant > now:
                        woken = waiter.owner  # its owner times it
                    continue
                del queue[ident]
                self._counts[5] += 1
                failed.append((waiter.handle, self._refusal(status, waiter)))
            slot = self._slot
            first = slot.at / 1e9 if slot is not None and queue[slot.ident].owner is owner else None
            self._share_busy(bool(queue))
        if woken is not None:
            woken.wake()
        for handle, error in failed:
            self._owners.fail(handle, error)
        return granted, amounts, first

    def _paused_past(self, slot: _Slot, now: int, failed: list[tuple[Any, BaseException]]) -> bool:
        """Whether a pause set after slot was reserved covers its instant (its waiter reserves again,
        after it). A segment too corrupt to say fails the waiter. Under the lock."""
        try:
            return self._call(self._segment.paused_until) > now
        except StoreCorrupt as error:
            self._counts[5] += 1
            failed.append((self._queue.pop(slot.ident).handle, error))
            return True

    def _refusal(self, status: int, waiter: _Waiter) -> BaseException:
        """The error of a waiter the segment would not reserve for, by its status."""
        if status == _EINVAL:  # above a burst another process set
            return ValueError(f"the limiter's new burst (set by another process) is below this request's amount "
                              f"({waiter.amount!r})")
        if status != _ETOOLATE:
            return StoreCorrupt(f"{self._store!r} is corrupt: nothing was granted from it")
        if waiter.deadline < _NEVER:
            return TimeoutError("this request can no longer be granted within its timeout")
        return TimeoutError("this request cannot be granted: the shared rates put its grant past the furthest "
                            "instant a reservation may reach (paused that far ahead, or written there by another "
                            "process)")

    def _count_wait(self, waiter: _Waiter, slot: _Slot, now: int) -> None:
        """Counts a grant that waited: reserved at slot.at, made at now."""
        counts = self._counts
        waited = max(0, slot.at - waiter.enqueued_at)
        counts[0] += 1
        counts[1] += waiter.amount
        counts[2] += 1
        counts[3] += waited
        counts[4] = max(counts[4], waited)

    def _withdraw(self, ident: int) -> bool:
        with self._queue_lock:
            return self._remove(ident) is not None

    def _remove(self, ident: int) -> _Waiter | None:
        """Takes waiter ident out of the queue, passing its reservation on; None if not queued.
        Under the lock."""
        waiter = self._queue.pop(ident, None)
        if waiter is None:
            return None
        self._counts[5] += 1
        slot = self._slot
        if slot is not None and slot.ident == ident:
            self._slot = None
            self._pass_on(slot)
        self._share_busy(bool(self._queue))
        return waiter

    def _pass_on(self, slot: _Slot) -> None:
        """A reservation its waiter left: to the next waiter of this process if that one asks for no
        more (its grant comes no later than its own would), else cancelled. Under the lock."""
        for ident, waiter in self._queue.items():
            if waiter.amount <= slot.amount and slot.at <= waiter.deadline:
                self._slot = slot._replace(ident=ident)
                return
            break
        self._call(self._segment.cancel, slot.record, self._segment.now())

    def _withdraw_first_of(self, owner: object) -> Any:
        with self._queue_lock:
            ident = next((i for i, w in self._queue.items() if w.owner is owner), None)
            waiter = None if ident is None else self._remove(ident)
        return None if waiter is None else waiter.handle

    def _withdraw_stranded(self) -> tuple[Any, bool] | None:
        with self._queue_lock:
            burst = self.burst  # after set_rate: waiters above the new burst can never be granted
            for ident, waiter in self._queue.items():
                if waiter.amount > burst and (self._slot is None or self._slot.ident != ident):
                    del self._queue[ident]
                    self._counts[5] += 1
                    self._share_busy(bool(self._queue))
                    return waiter.handle, True
        return None

    def _refund(self, amount: float) -> None:
        """A grant its task will never use: its instant has passed, so the tokens are lost; it is
        counted as cancelled, not granted."""
        counts = self._counts
        counts[0] -= 1
        counts[1] -= amount
        counts[5] += 1

    def _reckon_late(self, amount: float) -> None:
        """Not in the segment: its stale rule meets a stall before a grant; one between a grant and its
        task's resume is not reckoned there (the engine's own rates are not this limiter's)."""
        return None

    def _hold(self, amount: float) -> None:
        return None

    def _end_hold(self, amount: float) -> None:
        return None

    def _as_good_as_new(self) -> bool:
        return False

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
            if slot is not None and slot.at < self._call(segment.paused_until):  # reserve again, after it
                self._slot = None
                self._call(segment.cancel, slot.record, segment.now())

    def _stats(self) -> tuple[int, float, int, float, float, int, int]:
        at_once, at_once_tokens = Bucket._stats(self)[:2]  # the engine's fast path counts its own grants
        granted, tokens, waits, total, most, cancelled, timeouts = self._counts
        return (int(granted) + at_once, float(tokens) + at_once_tokens, int(waits), total / 1e9, most / 1e9,
                int(cancelled), int(timeouts))

    # ---- the segment ----

    def _call(self, method: Callable[..., T], *args: Any) -> T:
        """method(*args) on the segment; its corruption as StoreCorrupt."""
        try:
            return method(*args)
        except SegmentCorrupt as error:
            raise StoreCorrupt(f"{self._store!r} is corrupt: nothing was granted from it") from error


serve("shared", SharedLimiter)
