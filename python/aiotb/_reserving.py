"""The queue of a limiter whose rates live in a store that other processes or hosts share: this process's
waiters, first come first served (smallest amount first for an AsyncLimiter), in front of reservations in the
store, and one rule for both stores.

Order across processes or hosts is the order of reservations in the store: each takes its place behind
every grant reserved before it. Order within a limiter is its queue's. A limiter holds at most one
reservation ahead: its first waiter's (the slot). The per-loop dispatchers time it, as they time an
in-process waiter: their one timer (precise where it can be) fires at its instant, and the pass it runs
grants it and reserves for the next waiter. So no process polls or wakes another, and a process stalled by
the scheduler, a collection or SIGSTOP wakes with at most that one grant due, never a backlog of grants
that came due while it slept. Nor is that one grant used as it stands: counted at its instant, it would
come on top of the grants the others made meanwhile. A reservation reached more than ``STALE_AFTER``
(5 ms, and a token's time) after its instant is stale: its waiter takes the tokens afresh if they are free
now, else reserves again behind the others (once: a waiter gives up one stale reservation at most, so that
an overloaded process does not starve), and the stale reservation's tokens are lost.

A waiter that leaves before its instant gives the reservation to the next waiter if that one asks for no
more and its deadline allows, else the reservation is given back by the store's rule (each rate nobody
reserved from since takes it back). Tokens granted to a task that is cancelled before it resumes are lost:
their instant has passed, and the others may have counted on it.

A store answers a reservation at once (shared memory: ``_ask`` settles it before it returns) or after a
round trip (Redis: ``_ask`` starts it and marks the limiter ``_asking``; its answer settles the head and
wakes the dispatchers, whose next pass goes on). Either way the answer is settled here, by ``_install``,
``_grant_now`` and ``_fail``, under the queue's lock. Statistics are this limiter's."""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
from collections import OrderedDict
from typing import Any, NamedTuple

from ._limiter import Limiter, StoreT

STALE_AFTER = 0.005  # s: a reservation reached later than this (and than a token's time) is stale


class Waiter(NamedTuple):
    handle: Any         # the future, or the blocked thread's waiter
    owner: Any          # who times and wakes it: a dispatcher, or the thread's waiter
    amount: float
    deadline: float     # s on the limiter's clock, inf for none
    enqueued_at: float
    hold: bool          # a window's grant held until its block ends
    task: Any           # the task that waits, where its grant's outcome is kept for it (None: none is)


class Slot(NamedTuple):
    ident: int          # the waiter it is for
    at: float           # its grant instant, s on the limiter's clock
    due: float          # the instant it is counted at: reached later than this by more than a stale span, stale
    record: Any         # the store's record of it, what a cancel needs; None: not a grant, the waiter asks again
    amount: float
    hold: bool


class ReservingLimiter(Limiter[StoreT]):
    """A limiter over a shared store: the queue and the rules above. A store's limiter sets ``_store`` and gives
    ``_store_now``, ``_ask``, ``_retake`` and ``_give_back``."""

    __slots__ = ("_store", "_queue", "_slot", "_queue_lock", "_idents", "_restarted", "_counts", "_stale_after",
                 "_ready", "_failed", "_most_queued")
    _store: StoreT

    @property
    def store(self) -> StoreT:
        """Where the rates live."""
        return self._store

    @property
    def _asking(self) -> bool:
        """A reservation's round trip is on its way: its answer goes on from there, with a pass of the dispatcher
        of the loop that asked (the owners' flag, so that a waiter queued meanwhile leaves the pass to it)."""
        return self._owners.asking

    @_asking.setter
    def _asking(self, asking: bool) -> None:
        self._owners.asking = asking

    def __repr__(self) -> str:
        return (f"<{type(self).__name__}(max_rate={self.max_rate!r}, time_period={self.time_period!r}, "
                f"burst={self.burst!r}, fair={self.fair!r}, store={self._store!r}) waiting={self.waiting} "
                f"at {id(self):#x}>")

    def _start_queue(self) -> None:
        """An empty queue, holding no reservation."""
        self._queue: OrderedDict[int, Waiter] = OrderedDict()
        self._slot: Slot | None = None
        self._queue_lock = threading.Lock()  # the queue and the slot: loops and threads of this process share them
        self._idents = itertools.count(1)
        self._restarted = 0  # the waiter that gave up a stale reservation last (0: none)
        self._ready: list[tuple[Waiter, Any]] = []  # grants settled (and their records), for the next pass to hand out
        self._failed: list[tuple[Any, BaseException]] = []  # waiters failed, for the next pass to fail
        self._most_queued = 0.0  # at least the largest amount queued: from it up, a new burst strands a waiter
        # granted, granted tokens, waits, wait s total, wait s max, cancelled, timeouts
        self._counts: list[float] = [0, 0.0, 0, 0.0, 0.0, 0, 0]
        self._owners.holds = True  # the dispatcher's passes fail what the engine strands

    # ---- what a store gives ----

    def _store_now(self) -> float:
        """Now, s on the limiter's clock (the one its waiters' owners time it on)."""
        raise NotImplementedError

    def _ask(self, ident: int, waiter: Waiter, now: float) -> None:
        """Reserves for the head waiter; its answer settled (at once, or after a round trip). Under the lock."""
        raise NotImplementedError

    def _retake(self, slot: Slot, waiter: Waiter, now: float) -> None:
        """A stale slot: its waiter takes the tokens afresh (granted at now) if they are free now, else
        ``_restarted`` and it reserves again. Under the lock."""
        raise NotImplementedError

    def _give_back(self, record: Any) -> None:
        """Gives a reservation nobody will use (its record) back to the store, by its rule. Under the lock."""
        raise NotImplementedError

    def _refuse_late(self, amount_ahead: float, deadline: float, now: float) -> bool:
        """Whether a waiter whose amounts up to and with its own are amount_ahead cannot be granted by deadline,
        as far as the store says at once (a store that needs a round trip says False here). Under the lock."""
        return False

    def _slot_stands(self, slot: Slot, now: float) -> bool:
        """Whether a slot reached still stands (False: its waiter reserves again, or was failed). Under the lock."""
        return True

    def _busy(self, busy: bool) -> None:
        """The queue is about to hold a waiter (True), or became empty (False). Under the lock."""

    # ---- the engine's interface, for the dispatchers and blocked threads ----

    def _enqueue(self, amount: float, timeout: float | None, handle: Any, owner: object) -> int:
        now = self._store_now()
        deadline = math.inf if timeout is None else now + timeout
        with self._queue_lock:
            if timeout is not None:
                ahead = sum(w.amount for w in self._queue.values()) + amount
                if self._refuse_late(min(ahead, self.burst), deadline, now):
                    self._counts[6] += 1
                    raise TimeoutError(f"{amount!r} tokens cannot be granted within {timeout!r} s")
            if not self._queue:
                self._busy(True)  # first: a newcomer on another thread must not take ahead of it
                self._most_queued = 0.0
            if amount > self._most_queued:
                self._most_queued = amount
            ident = next(self._idents)
            self._queue[ident] = Waiter(handle, owner, amount, deadline, now, *self._waiter_extras())
        return ident

    def _head(self) -> tuple[int, Waiter] | None:
        """The waiter the next reservation is for (None: none waits): the first queued, or for a limiter whose
        waiters wake smallest first (AsyncLimiter), the smallest amount, the first of equals."""
        queue = self._queue
        if not queue:
            return None
        if self._smallest_first:
            return min(queue.items(), key=_amount_of)
        return next(iter(queue.items()))

    def _waiter_extras(self) -> tuple[bool, Any]:
        """A new waiter's hold and task."""
        return False, None

    def _grant_due(self, at: float | None, owner: object) -> tuple[list[Any], list[float], float | None]:
        """Grants the waiters whose reservation came due (by now, or at, the instant a timer fired for),
        reserves for the next, and says when owner's first waiter is due, None if it has none at the head.
        Hands out what answers settled meanwhile too: a pass never ends with grants made and not handed
        out, or with a head that no one times."""
        woken = None
        ready: list[tuple[Any, float]] = []
        with self._queue_lock:
            now = self._store_now()
            if at is not None:
                now = max(now, at)
            queue = self._queue
            while True:
                if self._ready:
                    self._hand_out(ready, now)
                    continue
                slot = self._slot
                if slot is not None:
                    if slot.at > now:
                        break
                    self._slot = None
                    waiter = queue[slot.ident]
                    if slot.record is None:
                        self._ask(slot.ident, waiter, now)  # asked to ask again from then on
                    elif not self._slot_stands(slot, now):
                        continue
                    elif now - slot.due > self._stale_after and slot.ident != self._restarted:
                        self._retake(slot, waiter, now)  # stalled past its instant: counted then, not now
                    else:
                        self._granted(slot, now)
                    continue
                head = None if self._asking else self._head()
                if head is None:
                    break
                ident, waiter = head
                self._ask(ident, waiter, now)
                slot = self._slot
                if slot is not None and slot.at > now and waiter.owner is not owner:
                    woken = waiter.owner  # its owner times it
            slot = self._slot
            first = slot.at if slot is not None and queue[slot.ident].owner is owner else None
            failed, self._failed = self._failed, []
        if woken is not None:
            woken.wake()
        for handle, error in failed:
            self._owners.fail(handle, error)
        return [handle for handle, _ in ready], [amount for _, amount in ready], first

    def _hand_out(self, ready: list[tuple[Any, float]], now: float) -> None:
        """Moves the grants settled to ready, but for a waiter that left since: its grant goes to the head if that
        one asks for no more and has no reservation of its own, else back to the store."""
        settled, self._ready = self._ready, []
        for waiter, record in settled:
            if not (isinstance(waiter.handle, asyncio.Future) and waiter.handle.done()):
                ready.append((waiter.handle, waiter.amount))
                continue
            if record is None:
                continue  # not the store's grant: nothing to give back
            self._refund(waiter.amount)
            self._spare(waiter.amount, waiter.hold, record, now)

    def _spare(self, amount: float, hold: bool, record: Any, now: float) -> None:
        """A grant of the store's whose waiter left: to the head if that one asks for no more and has no
        reservation of its own, else back to the store."""
        head = self._head()
        if head is not None and self._slot is None and head[1].amount <= amount and head[1].hold == hold:
            self._grant_now(head[0], now, record)
        else:
            self._give_back(record)

    def _withdraw(self, ident: int) -> bool:
        with self._queue_lock:
            return self._remove(ident) is not None

    def _withdraw_first_of(self, owner: object) -> Any:
        with self._queue_lock:
            ident = next((i for i, w in self._queue.items() if w.owner is owner), None)
            waiter = None if ident is None else self._remove(ident)
        return None if waiter is None else waiter.handle

    def _withdraw_stranded(self) -> tuple[Any, bool] | None:
        with self._queue_lock:
            burst = self.burst  # after set_rate: waiters above the new burst can never be granted
            if self._most_queued <= burst:  # none is: every pass asks, and this answers without the queue
                return None
            for ident, waiter in self._queue.items():
                if waiter.amount > burst and (self._slot is None or self._slot.ident != ident):
                    self._remove(ident)
                    return waiter.handle, True
        return None

    def _refund(self, amount: float) -> None:
        """A grant its task will never use, found after it was handed out: its instant has passed, so the
        tokens are lost; it is counted as cancelled, not granted."""
        counts = self._counts
        counts[0] -= 1
        counts[1] -= amount
        counts[5] += 1

    def _reckon_late(self, amount: float) -> None:
        """Not in a store: its stale rule meets a stall before a grant; one between a grant and its task's
        resume is not reckoned there (the engine's own rates are not this limiter's)."""
        return None

    def _as_good_as_new(self) -> bool:
        """Whether it holds nothing of its own (the rates are in the store): nobody waits, nothing is on its way."""
        return not self._queue and self._slot is None and not self._asking

    def _time_precisely(self) -> None:
        """After a change of the rates: also when a reservation reached late turns stale."""
        super()._time_precisely()
        self._stale_after = max(STALE_AFTER, min(r.ns_per_token for r in self._rates) / 1e9)

    @property
    def waiting(self) -> int:
        """Waiters of this limiter queued now."""
        return len(self._queue)

    # ---- settling answers, under the lock ----

    def _install(self, slot: Slot) -> None:
        """A reservation the store made for slot.ident: its slot, or passed on if its waiter left meanwhile."""
        if slot.ident in self._queue:
            self._slot = slot
        else:
            self._pass_on(slot)

    def _granted(self, slot: Slot, now: float) -> None:
        """Grants the slot reached at now to its waiter."""
        self._grant_now(slot.ident, now, slot.record)

    def _grant_now(self, ident: int, now: float, record: Any, outcome: object = None) -> None:
        """Grants waiter ident, for the next pass to hand out: counted if the store made it (record); its task
        finds outcome (``_outcome``)."""
        waiter = self._queue.pop(ident)
        if record is not None:
            self._count_grant(waiter.amount, max(0.0, now - waiter.enqueued_at), record)
        if outcome is not None:
            self._keep_outcome(waiter.task, outcome)
        self._ready.append((waiter, record))
        if not self._queue:
            self._busy(False)

    def _keep_outcome(self, task: Any, outcome: object) -> None:
        """Keeps outcome for task, which resumes with its grant."""
        raise TypeError("this store's grants have no outcome")

    def _fail(self, ident: int, error: BaseException) -> None:
        """Fails waiter ident (if it is still queued), for the next pass: counted as a timeout or a cancel."""
        waiter = self._queue.pop(ident, None)
        if waiter is None:
            return
        self._counts[6 if isinstance(error, TimeoutError) else 5] += 1
        self._failed.append((waiter.handle, error))
        if not self._queue:
            self._busy(False)

    def _remove(self, ident: int) -> Waiter | None:
        """Takes waiter ident out of the queue, passing its reservation on; None if not queued."""
        waiter = self._queue.pop(ident, None)
        if waiter is None:
            return None
        self._counts[5] += 1
        slot = self._slot
        if slot is not None and slot.ident == ident:
            self._slot = None
            self._pass_on(slot)
        if not self._queue:
            self._busy(False)
        return waiter

    def _pass_on(self, slot: Slot) -> None:
        """A reservation its waiter left: to the next waiter if that one asks for no more (its grant comes
        no later than its own would, and within its deadline), else given back."""
        if slot.record is None:
            return
        head = self._head()
        if head is not None:
            ident, waiter = head
            if waiter.amount <= slot.amount and slot.at <= waiter.deadline and waiter.hold == slot.hold:
                self._slot = slot._replace(ident=ident)
                return
        self._give_back(slot.record)

    def _count_grant(self, amount: float, waited: float | None, record: Any) -> None:
        """Counts a grant of the store's, at once (waited None) or after a wait of waited s."""
        counts = self._counts
        counts[0] += 1
        counts[1] += amount
        if waited is not None:
            counts[2] += 1
            counts[3] += waited
            if waited > counts[4]:
                counts[4] = waited

    def _stats(self) -> tuple[int, float, int, float, float, int, int]:
        granted, tokens, waits, total, most, cancelled, timeouts = self._counts
        return (int(granted), float(tokens), int(waits), float(total), float(most), int(cancelled), int(timeouts))


def _amount_of(item: tuple[int, Waiter]) -> float:
    """A queue entry's amount."""
    return item[1].amount
