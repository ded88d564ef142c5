"""Pure-Python twin of ``src/_tokenbucket/queue.c``: the waiter queue in front of the limits.

Every function of queue.c has its namesake here (``tb_enqueue(b, ...)`` is ``b.enqueue(...)``)
and takes the same steps, so ids, grant order, deadlines, the compensated queued sum and the
statistics come out the same. It reaches the limits (``_limits_py``) only through the calls
queue.c makes. The slab is mirrored as a list of slots with the same free list (last freed,
first reused; grown by doubling from 16; dropped once the queue empties), so a waiter's id
``(sequence << 32) | slot`` is the one C gives. Where it differs: out-parameters are return
values (``enqueue`` returns ``(status, id)``, ``withdraw_stranded`` returns ``(handle, never)``
or None); ``decide`` is a callable of the handle and its amount (C passes a context first); a handle must
not be None, the "not queued" answer of ``withdraw`` (C: NULL); the slab never runs out of
memory; statistics are Python ints (C: uint64, which a refund without a grant would wrap);
``check()`` runs after each mutating operation only when ``_limits_py.DEBUG_CHECKS`` is set."""

from __future__ import annotations

from typing import Callable, Iterator

from . import _limits_py
from ._limits_py import EINVAL, ETOOLATE, NEVER, OK, Ahead, Limits
from ._rate_py import positive

__all__ = ["FIFO", "SMALLEST_FIRST", "SKIP", "GRANT", "STOP", "NIL", "Waiter", "Stats", "Bucket"]

FIFO, SMALLEST_FIRST = 0, 1  # tb_order
SKIP, GRANT, STOP = 0, 1, -1  # tb_verdict: what grant_due does with a waiter that can be granted now
NIL = 0xFFFFFFFF  # TB_NIL: no slot
MIN_SLOTS = 16  # slots of the first slab
_UINT32 = 0xFFFFFFFF


def _debug_check(b: Bucket) -> None:
    """Asserts b.check() == 0 when _limits_py.DEBUG_CHECKS is set."""
    if _limits_py.DEBUG_CHECKS:
        broken = b.check()
        assert broken == 0, f"tb_check() returned {broken}"


class Waiter:
    """tb_waiter: a queued request, in its slot of the slab."""

    __slots__ = ("amount", "deadline", "enqueued_at", "handle", "owner", "sequence", "prev", "next")

    def __init__(self, amount: float, deadline: int, enqueued_at: int, handle: object, owner: object,
                 sequence: int) -> None:
        self.amount = amount  # tokens asked for
        self.deadline = deadline  # latest acceptable grant, NEVER if none
        self.enqueued_at = enqueued_at  # when it was queued, for the wait statistics
        self.handle = handle  # the caller's object for this waiter; never looked into
        self.owner = owner  # who times and wakes it (say, one event loop's dispatcher); compared only
        self.sequence = sequence  # low bits of the enqueue count; never 0
        self.prev = NIL  # queue links
        self.next = NIL


class Stats:
    """tb_stats: what the bucket has done, counted once, here."""

    __slots__ = ("granted", "granted_tokens", "waits", "wait_ns_total", "wait_ns_max", "cancelled", "timeouts")

    def __init__(self) -> None:
        self.granted = 0  # grants kept: a refunded grant is taken back out
        self.granted_tokens = 0.0  # their tokens
        self.waits = 0  # grants that had to queue first (counted at grant)
        self.wait_ns_total = 0.0  # their waits, ns from enqueue to the grant instant
        self.wait_ns_max = 0  # the longest of them
        self.cancelled = 0  # waiters withdrawn or skipped before their grant, grants refunded, waiters stranded
        self.timeouts = 0  # enqueues refused with ETOOLATE

    def as_tuple(self) -> tuple[int, float, int, float, int, int, int]:
        """The counts in the order of the fields."""
        return (self.granted, self.granted_tokens, self.waits, self.wait_ns_total, self.wait_ns_max,
                self.cancelled, self.timeouts)


class Bucket:
    """tb_bucket: limits with a queue of waiters in front of them. Made empty; init() or init_window()
    sets it up."""

    __slots__ = ("limits", "order", "fair", "slots", "free", "head", "tail", "enqueued", "waiting",
                 "with_deadline", "queued_tokens", "queued_error", "stats")

    def __init__(self) -> None:
        self.limits = Limits()  # what every grant must satisfy
        self._reset_queue(False, FIFO)

    # ---- set-up ----

    def _init_queue(self, fair: bool, order: int) -> None:
        """Sets up the empty queue of a bucket whose limits are set up already."""
        self._reset_queue(fair, order)
        _debug_check(self)

    def _reset_queue(self, fair: bool, order: int) -> None:
        """Empties the queue and its statistics (C: the zeroed struct)."""
        self.order = order
        self.fair = fair  # newcomers queue behind waiters even when tokens are free
        self.slots: list[Waiter | None] = []  # the slab: capacity is its length, None marks a free slot
        self.free: list[int] = []  # free slots, the next one to claim last (C: the free list's head)
        self.head = self.tail = NIL  # ends of the queue
        self.enqueued = 0  # enqueue count, wrapping at 2^32; never 0 in a live slot
        self.waiting = 0  # waiters in the queue
        self.with_deadline = 0  # of which have a deadline
        self.queued_tokens = 0.0  # sum of their amounts: a running sum...
        self.queued_error = 0.0  # ...and its compensation (Neumaier)
        self.stats = Stats()

    def init(self, ns_per_token: float, burst: float, initial: float, fair: bool, order: int) -> int:
        """Sets up an empty bucket with one rate; OK, or EINVAL if a parameter is out of range."""
        if order not in (FIFO, SMALLEST_FIRST):
            return EINVAL
        status = self.limits.init(ns_per_token, burst, initial)
        if status == OK:
            self._init_queue(fair, order)
        return status

    def init_window(self, period: int, limit: float, fair: bool, order: int) -> int:
        """Sets up an empty bucket limited only by a strict sliding window; OK or EINVAL."""
        if order not in (FIFO, SMALLEST_FIRST):
            return EINVAL
        status = self.limits.init_window(period, limit)
        if status == OK:
            self._init_queue(fair, order)
        return status

    def add_rate(self, ns_per_token: float, burst: float, initial: float) -> int:
        """Adds a rate that every grant must also satisfy (before any use); OK or EINVAL."""
        status = self.limits.add_rate(ns_per_token, burst, initial)
        _debug_check(self)
        return status

    def release(self) -> None:
        """Frees the bucket's memory; handles still queued are forgotten, not released."""
        self.limits.release()
        self.slots, self.free = [], []
        self.head = self.tail = NIL
        self.waiting = self.with_deadline = 0
        self.queued_tokens = self.queued_error = 0.0

    # ---- newcomers ----

    def tokens(self, now: int) -> float:
        """Tokens available at now (never negative, at most burst)."""
        return self.limits.tokens(now)

    def owed(self, now: int, t: int) -> float:
        """The most tokens a rate would still owe at t >= now (Limits.owed)."""
        return self.limits.owed(now, t)

    def _must_queue(self) -> bool:
        """Whether a newcomer must queue behind the waiters regardless of free tokens."""
        return self.waiting > 0 and (self.fair or self.with_deadline > 0)

    def can_take(self, amount: float, now: int) -> bool:
        """Whether a newcomer asking for amount at now would be granted without waiting."""
        return not self._must_queue() and self.limits.fits(amount, now)

    def take(self, amount: float, now: int) -> bool:
        """Grants amount at now if a newcomer may have it without waiting, counting the grant; returns whether it did."""
        if self._must_queue() or not self.limits.take_now(amount, now):
            return False
        self.stats.granted += 1
        self.stats.granted_tokens += amount
        _debug_check(self)
        return True

    # ---- the queue ----

    def _add_queued(self, x: float) -> None:
        """Adds x to the queue's summed amount, compensated, so past amounts leave no rounding behind."""
        total = self.queued_tokens + x
        if abs(self.queued_tokens) >= abs(x):
            self.queued_error += (self.queued_tokens - total) + x
        else:
            self.queued_error += (x - total) + self.queued_tokens
        self.queued_tokens = total

    def _claim_slot(self) -> int:
        """Takes a slot off the free list, growing the slab if needed."""
        if not self.free:
            capacity = len(self.slots)
            grown = capacity * 2 if capacity else MIN_SLOTS
            self.slots.extend([None] * (grown - capacity))
            self.free = list(range(grown - 1, capacity - 1, -1))  # the lowest new slot is claimed first
        return self.free.pop()

    def _waiter(self, slot: int) -> Waiter:
        """The waiter in a live slot."""
        w = self.slots[slot]
        assert w is not None
        return w

    def _link_waiter(self, slot: int) -> None:
        """Links slot into the queue at its place for the bucket's order."""
        w = self._waiter(slot)
        after = self.tail
        if self.order == SMALLEST_FIRST:
            while after != NIL and self._waiter(after).amount > w.amount:
                after = self._waiter(after).prev
        w.prev = after
        w.next = self.head if after == NIL else self._waiter(after).next
        if w.next == NIL:
            self.tail = slot
        else:
            self._waiter(w.next).prev = slot
        if after == NIL:
            self.head = slot
        else:
            self._waiter(after).next = slot

    def _unlink_waiter(self, slot: int) -> object:
        """Unlinks a queued slot, frees it and returns its handle; frees the slab once the queue is empty."""
        w = self._waiter(slot)
        if w.prev == NIL:
            self.head = w.next
        else:
            self._waiter(w.prev).next = w.next
        if w.next == NIL:
            self.tail = w.prev
        else:
            self._waiter(w.next).prev = w.prev
        self.waiting -= 1
        self.with_deadline -= w.deadline != NEVER
        if self.waiting:
            self._add_queued(-w.amount)
        else:
            self.queued_tokens = self.queued_error = 0.0
        self.slots[slot] = None
        self.free.append(slot)
        if self.waiting == 0 and len(self.slots) > MIN_SLOTS:  # memory follows the live waiters back down
            self.slots, self.free = [], []
        return w.handle

    def _cancel_waiter(self, slot: int) -> object:
        """Unlinks a waiter that leaves without its grant, counting it cancelled; returns its handle."""
        self.stats.cancelled += 1
        handle = self._unlink_waiter(slot)
        _debug_check(self)
        return handle

    def _queued_amounts(self, stop: int) -> Iterator[float]:
        """The queue's amounts from the head up to (not including) slot stop: the limits' projection cursor."""
        slot = self.head
        while slot != stop:
            w = self._waiter(slot)
            yield w.amount
            slot = w.next

    def _projected_behind(self, stop: int, count: int, ahead: float, amount: float, now: int) -> int:
        """Grant instant of a waiter for amount queued right behind the count waiters before slot stop
        (NIL: all of them), who ask for ahead tokens in all, if nothing changes."""
        return self.limits.projection(Ahead(ahead, count, self._queued_amounts(stop)), amount, now)

    def projected_grant(self, amount: float, now: int) -> int:
        """The instant a waiter for amount queued now would be granted, if nothing ahead changes; NEVER
        if that is at 2^62 ns or later, or 2^62 ns or more after a full bucket."""
        at = self._projected_behind(NIL, self.waiting, self.queued_tokens + self.queued_error, amount, now)
        _debug_check(self)
        return at

    def enqueue(self, amount: float, now: int, deadline: int, handle: object, owner: object = None) -> tuple[int, int]:
        """Queues a waiter of owner: (OK, id); (ETOOLATE, 0) if its grant cannot come by deadline (nothing queued,
        a timeout counted); (EINVAL, 0) for an amount outside (0, max_request] or a deadline in
        smallest-first order."""
        if not positive(amount) or amount > self.limits.max_request:
            return EINVAL, 0  # it could never be granted: it would block the queue for good
        self.limits.anchor(now)
        if deadline != NEVER:
            if self.order != FIFO:
                return EINVAL, 0
            if self.projected_grant(amount, now) > deadline:
                self.stats.timeouts += 1
                return ETOOLATE, 0
        slot = self._claim_slot()
        self.enqueued = (self.enqueued + 1) & _UINT32 or 1
        self.slots[slot] = Waiter(amount, deadline, now, handle, owner, self.enqueued)
        self._link_waiter(slot)
        self.waiting += 1
        self.with_deadline += deadline != NEVER
        self._add_queued(amount)
        _debug_check(self)
        return OK, self.enqueued << 32 | slot

    def withdraw(self, ident: int) -> object:
        """Removes a queued waiter without granting it, counting it cancelled; returns its handle, or None
        if ident is not queued."""
        slot = ident & _UINT32
        sequence = (ident >> 32) & _UINT32
        if slot >= len(self.slots) or sequence == 0:
            return None
        w = self.slots[slot]
        if w is None or w.sequence != sequence:
            return None
        return self._cancel_waiter(slot)

    def withdraw_head(self) -> object:
        """Removes the head waiter without granting it, counting it cancelled; returns its handle, or None
        if none waits."""
        return None if self.head == NIL else self._cancel_waiter(self.head)

    def _first_of(self, owner: object) -> tuple[int, int, float]:
        """The first queued slot of owner (NIL if it has none), the count of waiters before it and their amounts."""
        count, ahead, slot = 0, 0.0, self.head
        while slot != NIL:
            w = self._waiter(slot)
            if w.owner is owner:
                return slot, count, ahead
            ahead += w.amount
            slot = w.next
            count += 1
        return NIL, count, ahead

    def withdraw_first_of(self, owner: object) -> object:
        """Removes owner's first queued waiter without granting it, counting it cancelled; returns its
        handle, or None if owner has none queued."""
        slot = self._first_of(owner)[0]
        return None if slot == NIL else self._cancel_waiter(slot)

    def first_due_of(self, owner: object, now: int) -> int:
        """The instant owner's first queued waiter can be granted, if nothing ahead of it changes, never
        earlier: the head's is exact; the head's instant instead should the projection be out of its range
        (the owner then wakes early and asks again); NEVER if owner has none queued."""
        slot, count, ahead = self._first_of(owner)
        if slot == NIL:
            return NEVER
        self.limits.anchor(now)
        head = self.limits.fit_at(self._waiter(self.head).amount, now)
        if slot == self.head:
            return head
        at = self._projected_behind(slot, count, ahead, self._waiter(slot).amount, now)
        return at if at != NEVER else head  # beyond the projection's range: woken with the head, it looks again

    def _grant_head(self, now: int) -> None:
        """Grants the head waiter at now, as of the instant it became ready (within the late credit), and counts it."""
        w = self._waiter(self.head)
        self.limits.take(w.amount, self.limits.credited_at(w.amount, now), now)
        wait = now - w.enqueued_at
        self.stats.granted += 1
        self.stats.granted_tokens += w.amount
        self.stats.waits += 1
        self.stats.wait_ns_total += float(wait)
        if wait > self.stats.wait_ns_max:
            self.stats.wait_ns_max = wait
        self._unlink_waiter(self.head)
        _debug_check(self)

    def grant_due(self, now: int, decide: Callable[[object, float], int]) -> int:
        """Removes, in queue order, every waiter that can be granted at now, asking decide about each (a
        granted one takes its tokens as of its ready instant, or late_credit before now if later, and is
        counted); returns the first instant >= now at which the new head can be granted, NEVER if none
        waits (now after STOP). decide(handle, amount) must not call into the bucket."""
        self.limits.anchor(now)
        while self.head != NIL:
            w = self._waiter(self.head)
            ready = self.limits.fit_at(w.amount, now)
            if ready > now:
                return ready
            verdict = decide(w.handle, w.amount)
            if verdict == GRANT:
                self._grant_head(now)
            elif verdict == SKIP:
                self._cancel_waiter(self.head)
            elif verdict == STOP:
                return now
        return NEVER

    def withdraw_stranded(self, now: int) -> tuple[object, bool] | None:
        """Removes one queued waiter that can no longer be granted as promised, counting it cancelled:
        (its handle, True) if its amount is above the largest request, (its handle, False) if its projected
        grant misses its deadline; None if there is none."""
        self.limits.anchor(now)
        slot = self.head
        while slot != NIL:
            w = self._waiter(slot)
            if w.amount > self.limits.max_request:
                return self._cancel_waiter(slot), True
            slot = w.next
        if self.with_deadline == 0:
            return None
        ahead = 0.0
        count = 0
        slot = self.head
        while slot != NIL:
            w = self._waiter(slot)
            if w.deadline != NEVER and self._projected_behind(slot, count, ahead, w.amount, now) > w.deadline:
                return self._cancel_waiter(slot), False
            ahead += w.amount
            slot = w.next
            count += 1
        return None

    def refund(self, amount: float, now: int) -> None:
        """Gives back amount tokens of a grant never used, taking the grant out of the statistics."""
        self.limits.refund(amount, now)
        self.stats.granted -= 1
        self.stats.granted_tokens -= amount
        self.stats.cancelled += 1
        _debug_check(self)

    def settle(self, taken: float, used: float, held: bool, now: int) -> int:
        """Settles a grant of taken tokens whose real cost is used, as Limits.settle (held: the grant is held in
        the window), counting used instead of taken in the statistics; OK, or EINVAL changing nothing.
        Queued waiters keep their place: their grants come later after a debt, earlier after a refund."""
        status = self.limits.settle(taken, used, held, now)
        if status == OK:
            self.stats.granted_tokens += used - taken
        _debug_check(self)
        return status

    def reckon_late(self, amount: float, now: int) -> None:
        """Grants of amount, taken earlier, are used only now (see Limits.reckon_late)."""
        self.limits.reckon_late(amount, now)
        _debug_check(self)

    def hold(self, amount: float) -> None:
        """Holds a grant of amount just taken while it is in use (see Limits.hold)."""
        self.limits.hold(amount)

    def end_hold(self, amount: float, now: int) -> None:
        """Ends the hold of a grant of amount at now (see Limits.end_hold)."""
        self.limits.end_hold(amount, now)

    # ---- changes ----

    def set_late_credit(self, tokens: float) -> None:
        """Sets how much of a late wake-up a head's grant is credited for, in time of one token of the fastest rate."""
        self.limits.set_late_credit(tokens)

    def set_rate(self, index: int, ns_per_token: float, burst: float, now: int) -> int:
        """Changes rate index to a new refill and capacity as of now, keeping the tokens it holds (at most
        the new burst; a debt, owed at the new refill); OK, or EINVAL. Queued waiters keep their place."""
        status = self.limits.set_rate(index, ns_per_token, burst, now)
        _debug_check(self)
        return status

    def set_window(self, period: int, limit: float) -> int:
        """Changes the window's period and limit, keeping its log of grants; OK or EINVAL."""
        status = self.limits.set_window(period, limit)
        _debug_check(self)
        return status

    def pause_until(self, until: int) -> None:
        """No grant before until (a later call can only move it later)."""
        self.limits.pause_until(until)

    def limit_until(self, tokens: float, until: int, slack: int, now: int) -> bool:
        """Grants before until take at most tokens in all, as Limits.limit_until (and what it returns).
        Queued waiters keep their place."""
        return self.limits.limit_until(tokens, until, slack, now)

    def grant_until(self, until: int) -> None:
        """No grant at or after until (Limits.grant_until). Queued waiters keep their place; the caller times
        them again, as after a pause."""
        self.limits.grant_until(until)

    def set_largest(self, amount: float) -> int:
        """Requests may ask for up to max(amount, the smallest burst) (Limits.set_largest); OK or EINVAL."""
        status = self.limits.set_largest(amount)
        _debug_check(self)
        return status

    def credit(self, tokens: float, now: int) -> int:
        """Credits tokens to every rate without a grant (Limits.credit), counting nothing in the statistics;
        OK, or EINVAL changing nothing. Queued waiters keep their place."""
        status = self.limits.credit(tokens, now)
        _debug_check(self)
        return status

    def rebase(self, then: int, now: int) -> None:
        """Moves the bucket onto another clock, on which the old clock's then reads now."""
        self.limits.rebase(then, now)
        shift = now - then
        slot = self.head
        while slot != NIL:
            w = self._waiter(slot)
            w.enqueued_at += shift
            if w.deadline != NEVER:
                w.deadline += shift
            slot = w.next
        _debug_check(self)

    def as_good_as_new(self, now: int) -> bool:
        """Whether the bucket is as good as new at now: no waiter, and its limits full."""
        return self.waiting == 0 and self.limits.full(now)

    def check(self) -> int:
        """0 if every invariant of the bucket holds, else the number of the broken one."""
        broken = self.limits.check()
        if broken:
            return broken
        count = deadlines = 0
        tokens = 0.0
        prev = NIL
        slot = self.head
        while slot != NIL:
            w = self.slots[slot] if slot < len(self.slots) else None
            count += 1
            if w is None or w.sequence == 0 or w.prev != prev or count > self.waiting:
                return 3
            if not positive(w.amount):
                return 4
            if self.order == SMALLEST_FIRST and prev != NIL and self._waiter(prev).amount > w.amount:
                return 5
            deadlines += w.deadline != NEVER
            tokens += w.amount
            prev, slot = slot, w.next
        if count != self.waiting or prev != self.tail or deadlines != self.with_deadline:
            return 6
        if abs(tokens - (self.queued_tokens + self.queued_error)) > 1e-9 * (tokens + 1):
            return 7
        if len(set(self.free)) != len(self.free) or any(s >= len(self.slots) or self.slots[s] is not None
                                                        for s in self.free):
            return 8
        if len(self.free) + self.waiting != len(self.slots):
            return 9
        return 0
