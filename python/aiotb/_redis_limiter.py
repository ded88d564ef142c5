"""The engine of a ``Limiter`` over a ``RedisStore``: this process's queue in front of rates kept
in Redis, which every client of the key shares.

Order across clients is the order of reservations in Redis: the script reserves each grant behind
every one reserved before it. Order within a limiter is its queue's, first come first served. A
limiter holds at most one reservation ahead: its first waiter's. One task of the limiter's loop (the
server) reserves for the head, sleeps on the loop's timer until the instant the script returned,
grants it, and reserves for the next. No polling, and no host wakes another. The instant is taken
as the reply's arrival plus the script's delay, never earlier than the server's own instant. When
the head's grant is due now, the same round trip grants each waiter behind it, in order, while their
tokens are free now too (``RUN_MOST`` in all): never one ahead, so the rule above holds.

A host stalled by the scheduler, a GC pause or SIGSTOP wakes with at most that one grant due. Nor
is it used as it stands: counted at its instant, it would come on top of the grants the other clients
made meanwhile. A reservation reached more than ``STALE_AFTER`` (5 ms, and a token's time) after its
instant (reckoned from when it was asked for, so that a stall while the script ran counts too) is
stale: its waiter takes the tokens afresh if they are free now, else reserves again behind the others
(once per waiter, so that an overloaded host does not starve), and the stale tokens are lost.

A waiter that leaves before its instant gives the reservation to the next waiter if that one asks
for no more, else cancels it, in one round trip, by the script's rule: each rate nobody reserved
from since takes it back. Tokens granted to a task cancelled before it resumes are lost: their
instant has passed, and the other clients may have counted on it.

When Redis cannot answer, the store's ``on_error`` decides: ``StoreUnavailable`` for the waiter
(``"raise"``), a grant the quota does not see (``"allow"``), or a grant of the fallback limiter. With
a fallback, Redis is asked again ``RETRY_AFTER`` seconds after it last failed. Statistics are this
limiter's."""

from __future__ import annotations

import asyncio
import collections
import datetime
import itertools
import time
from typing import Any, Coroutine, Sequence, cast

from . import _params
from ._capabilities import OTHER_LOOP
from ._core import Bucket
from ._limiter import Limiter, serve
from ._remote import OnItsLoop, on_its_loop
from ._redis_slot import RedisSlot
from ._reservation import RedisReservation
from ._store import StoreCorrupt, StoreError
from ._store_redis import MAX_PAUSE_NS, MAX_REFILL_NS, RedisStore, Reserved, definition

STALE_AFTER = 0.005  # s: a reservation reached later than this (and than a token's time) is stale
RUN_MOST = 64  # the most grants one round trip makes: the head's and those due with it
RETRY_AFTER = 1.0  # s: with on_error "allow" or a fallback, how long Redis is left alone after it failed
_FALLBACK = object()  # a waiter's result: take from the fallback limiter


class _Waiter:
    """One task waiting in the limiter's queue."""

    __slots__ = ("future", "amount", "hold", "deadline", "enqueued", "expiry", "restarted")

    def __init__(self, future: asyncio.Future[object], amount: float, hold: bool, deadline: float | None,
                 now: float) -> None:
        self.future = future  # its result: the Reserved it was granted, None (let through), or _FALLBACK
        self.amount = amount
        self.hold = hold  # a window's grant held until its block ends
        self.deadline = deadline  # loop time, None for none
        self.enqueued = now
        self.expiry: asyncio.TimerHandle | None = None  # fails it at its deadline while it waits behind others
        self.restarted = False  # gave up a stale reservation already


class _Slot:
    """The one reservation the limiter holds: for the head waiter, granted at loop time ``at``."""

    __slots__ = ("reserved", "at", "due", "amount", "hold")

    def __init__(self, reserved: Reserved, sent: float, received: float, amount: float, hold: bool) -> None:
        self.reserved = reserved
        self.at = received + reserved.delay / 1e9  # granted then: never before the server's instant
        self.due = sent + reserved.delay / 1e9  # never after it: a stall while the script ran makes it late too
        self.amount = amount
        self.hold = hold


class RedisLimiter(OnItsLoop, Limiter[RedisStore]):
    """``Limiter(..., store=RedisStore(redis, key))``: see the module's doc. Made directly, its type
    shows the methods that talk to Redis as the coroutines they are here: ``await
    limiter.try_acquire()``, ``has_capacity``, ``read_tokens``, ``set_rate``, ``penalize``,
    ``retry_after``."""

    __slots__ = ("_store", "_definition", "_queue", "_server", "_loop", "_counts", "_down_until", "_stale_after",
                 "_held")

    def __init__(self, max_rate: float | None = None, time_period: float = 60, *,
                 burst: float | None = None, initial: float | None = None, fair: bool = True,
                 rates: Sequence[tuple[float, ...]] | None = None, store: RedisStore | None = None) -> None:
        if not isinstance(store, RedisStore):
            raise TypeError(f"store must be a RedisStore, got {store!r}")
        checked = _params.limiter_rates(max_rate, time_period, burst, initial, rates)
        for r in checked:
            check_refill(r.burst, r.ns_per_token)
        self._setup(checked, None, _params.flag("fair", fair), smallest_first=False)
        self._over(store, definition([r.engine() for r in checked]))

    def _over(self, store: RedisStore, definition: str) -> None:
        """Serves the limits of definition in store."""
        self._store = store
        self._definition = definition
        self._held: list[bytes] = []  # records of grants held by `async with` blocks (a window's)
        self._queue: collections.deque[_Waiter] = collections.deque()
        self._server: asyncio.Task[Any] | None = None  # the task serving the queue's head
        self._loop: asyncio.AbstractEventLoop | None = None
        # granted, granted tokens, waits, wait s total, wait s max, cancelled, timeouts
        self._counts: list[float] = [0, 0.0, 0, 0.0, 0.0, 0, 0]
        self._down_until = -1.0

    @property
    def store(self) -> RedisStore:
        """Where the rates live."""
        return self._store

    # ---- the public API, on the rates in Redis ----

    async def __aenter__(self) -> None:
        record = await self._acquire(1.0, None, hold=self._window)
        if record is not None:
            self._held.append(record)

    async def __aexit__(self, *exc_info: object) -> None:
        if self._held:
            await self._end_hold_of(self._held.pop())

    def slot(self, amount: float = 1) -> RedisSlot:
        """``async with limiter.slot(amount):`` as ``Limiter.slot``: a window's grant is held in
        Redis until the block exits (one more round trip then)."""
        return RedisSlot(self, self._checked_amount(amount))

    def acquire(self, amount: float = 1, timeout: float | None = None) -> Coroutine[Any, Any, None]:
        """Waits for ``amount`` tokens from Redis; with ``timeout``, TimeoutError at once, taking
        nothing, if they cannot come within it."""
        Bucket.acquire(self, amount, timeout).close()  # the amount and the timeout, checked by the engine
        return cast(Coroutine[Any, Any, None], self._acquire(float(amount), None if timeout is None else float(timeout)))

    @on_its_loop
    async def atry_acquire(self, amount: float = 1) -> bool:
        """Takes ``amount`` tokens if every rate has them now (one round trip); False if not, or if
        others wait in this limiter's queue (fair)."""
        x = self._checked_amount(amount)
        self._check_loop()
        if self._fair and self._queue:
            return False
        if self._store_down():
            return await self._without_store(x, blocking=False)
        try:
            reserved = await self._store.reserve(self._definition, x, 0)
        except StoreError as error:
            return await self._without_store(x, blocking=False, error=error)
        if not isinstance(reserved, Reserved):
            return False  # not now, or only once held grants end
        self._count_grant(x, None, reserved)
        return True

    @on_its_loop
    async def areserve(self, amount: float = 1) -> RedisReservation:
        """Takes a place in the order of every client of the key now (one round trip) and says when it
        will be granted (``RedisReservation``). When Redis cannot answer, StoreUnavailable, whatever the
        store's ``on_error``: a reservation promises an instant only Redis can keep."""
        x = self._checked_amount(amount)
        loop = self._check_loop()
        while True:
            reserved = await self._store.reserve(self._definition, x, -1)  # whenever it comes
            if isinstance(reserved, Reserved):
                return RedisReservation(self, reserved, x, loop, loop.time())
            if reserved is None:  # "not within the wait": no answer of aiotb's script to a wait of whenever
                raise StoreCorrupt(f"Redis answered a reservation of whenever with 'too late' ({self._store!r})")
            await asyncio.sleep(reserved / 1e9)  # a window's held grants must end first: ask again then

    @on_its_loop
    async def _cancel_reservation(self, record: bytes) -> None:
        """Gives a reservation back, by the script's rule (one round trip)."""
        await self._store.cancel(self._definition, record)

    @on_its_loop
    async def ahas_capacity(self, amount: float = 1) -> bool:
        """Whether ``try_acquire(amount)`` would take the tokens now (one round trip; takes nothing)."""
        x = self._checked_amount(amount)
        if self._fair and self._queue:
            return False
        return await self._store.fit_delay(self._definition, x) <= 0

    @on_its_loop
    async def read_tokens(self) -> float:
        """Tokens available now in Redis (the fewest over the rates; 0 while paused)."""
        return await self._store.tokens(self._definition)

    @property
    def tokens(self) -> float:
        """Not here: the tokens live in Redis; ``await limiter.read_tokens()`` reads them."""
        raise TypeError("the tokens of a limiter over a RedisStore live in Redis: await limiter.read_tokens()")

    @property
    def waiting(self) -> int:
        """Waiters of this limiter queued now."""
        return sum(1 for w in self._queue if not w.future.done())

    @on_its_loop
    async def aset_rate(self, max_rate: float, time_period: float | None = None, *,
                        burst: float | None = None, index: int = 0) -> None:
        """Changes rate ``index`` for every client of the key (one round trip), keeping the tokens
        held now, at most the new burst. Clients that join later must still give the rates the key
        was created with."""
        i, spec, window_ns = self._changed_rate(max_rate, time_period, burst, index)
        if window_ns is not None:
            check_refill(1, window_ns)
            await self._store.set_window(self._definition, window_ns, spec.max_rate)
            Bucket._set_window(self, window_ns, spec.max_rate)  # amounts are checked against it
        else:
            check_refill(spec.burst, spec.ns_per_token)
            await self._store.set_rate(self._definition, i, spec.ns_per_token, spec.burst)
            Bucket._set_rate(self, i, spec.ns_per_token, spec.burst)  # amounts are checked against it
        self._rates = [*self._rates[:i], spec, *self._rates[i + 1:]]

    @on_its_loop
    async def apenalize(self, seconds: float) -> None:
        """Grants nothing, to any client of the key, for ``seconds`` from the server's now: a
        server's ``Retry-After`` (one round trip)."""
        span = _params.pause("seconds", seconds)
        if span * 1e9 > MAX_PAUSE_NS:
            raise ValueError(f"seconds must be at most {MAX_PAUSE_NS / 1e9:.0f} over a RedisStore, got {seconds!r}")
        await self._store.pause(self._definition, round(span * 1e9))

    async def aretry_after(self, value: str | bytes | float) -> float:
        """Grants nothing, to any client of the key, until a server's ``Retry-After`` has passed
        (see ``Limiter.retry_after``); returns the seconds paused."""
        span = _params.retry_after(value, datetime.datetime.now(datetime.timezone.utc))
        await self.apenalize(span)
        return span

    def __repr__(self) -> str:
        return (f"<{type(self).__name__}(max_rate={self.max_rate!r}, time_period={self.time_period!r}, "
                f"burst={self.burst!r}, fair={self.fair!r}, store={self._store!r}) waiting={self.waiting} "
                f"at {id(self):#x}>")

    # ---- waiting ----

    @on_its_loop
    async def _acquire(self, amount: float, timeout: float | None, hold: bool = False) -> bytes | None:
        """Waits for amount; the record of the grant if Redis made it and it is held, else None."""
        loop = self._check_loop()
        now = loop.time()
        waiter = _Waiter(loop.create_future(), amount, hold, None if timeout is None else now + timeout, now)
        behind = bool(self._queue)
        self._queue.append(waiter)  # first: its place is taken as it comes, whatever the check below awaits
        try:
            if behind and timeout is not None:
                waiter.expiry = loop.call_at(now + timeout, self._expire, waiter)  # until it is the head
                await self._refuse_if_late(waiter, timeout)
            if self._server is None:
                if len(self._queue) == 1 and not waiter.future.done():
                    await self._serve_alone(waiter, loop)
                else:
                    self._server = loop.create_task(self._serve(None))
            result = await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():  # granted, never used: lost
                self._count_lost(amount)
            else:
                self._counts[5] += 1
                if waiter.expiry is not None:
                    waiter.expiry.cancel()
            raise
        fallback = self._store.fallback
        if result is _FALLBACK and fallback is not None:
            await fallback.acquire(amount)
        return result.record if hold and isinstance(result, Reserved) else None

    @on_its_loop
    async def _end_hold_of(self, record: bytes) -> None:
        """Ends a held grant's hold in Redis; should Redis not answer, it ends by itself later (stricter)."""
        try:
            await self._store.end_hold(self._definition, record)
        except StoreError:
            pass

    async def _refuse_if_late(self, waiter: _Waiter, timeout: float) -> None:
        """For a waiter queued behind others: TimeoutError (its future's) at once, taking nothing, if even
        the amounts up to and with its own could not come within timeout. Where Redis does not answer,
        its reservation will meet that."""
        if self._store_down():
            return
        ahead = min(sum(w.amount for w in self._queue if not w.future.done()), self.burst)
        try:
            delay = await self._store.fit_delay(self._definition, ahead, timeout)
        except StoreError:
            return
        except TimeoutError:  # no answer by its deadline: its expiry has failed it, or is about to
            return
        if delay > timeout * 1e9 and not waiter.future.done():
            self._counts[6] += 1
            waiter.future.set_exception(TimeoutError(f"{waiter.amount!r} tokens cannot be granted within "
                                                     f"{timeout!r} s"))

    def _expire(self, waiter: _Waiter) -> None:
        """A waiter's deadline passed while it waited behind others."""
        if not waiter.future.done():
            self._counts[6] += 1
            waiter.future.set_exception(TimeoutError(f"{waiter.amount!r} tokens were not granted in time"))

    async def _serve_alone(self, waiter: _Waiter, loop: asyncio.AbstractEventLoop) -> None:
        """The caller, alone in the queue, reserves for itself and is granted here if its grant is
        due now (no task, no extra hop); a serving task takes over the rest: a wait, and whoever
        queued meanwhile. loop: the running one, this limiter's (asking asyncio costs a system call
        on 3.11)."""
        self._server = asyncio.current_task()  # newcomers queue behind it and start no task of their own
        slot = None
        try:
            slot = await self._reserve_for(waiter, loop)
            if slot is not None and slot.at <= loop.time() and not waiter.future.done():
                slot = await self._grant(waiter, slot, loop)
        except BaseException:
            if not waiter.future.done():
                waiter.future.cancel()  # the caller is cancelled: what it reserved is lost, never granted twice
            raise
        finally:
            self._server = None
            if self._queue:
                self._server = loop.create_task(self._serve(slot))

    async def _serve(self, slot: _Slot | None) -> None:
        """Serves the queue's head until the queue is empty, starting with the head's slot if it has
        one: reserve, sleep, grant."""
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                waiter = self._queue[0]
                if waiter.future.done():
                    self._queue.popleft()
                    if slot is not None:
                        slot = await self._pass_on(slot)
                    continue
                if slot is None:
                    slot = await self._reserve_for(waiter, loop)
                    if slot is None:
                        continue
                await self._sleep_until(slot.at, waiter.future)
                if waiter.future.done():
                    continue  # left before its instant: the slot passes on at the top
                slot = await self._grant(waiter, slot, loop)
        except BaseException as error:  # its loop closing, or a reply it did not expect: nobody waits forever
            for waiter in self._queue:
                if not waiter.future.done():
                    if isinstance(error, asyncio.CancelledError):
                        waiter.future.cancel()
                    else:
                        waiter.future.set_exception(error)
            self._queue.clear()
            if not isinstance(error, Exception):
                raise  # cancelled, or KeyboardInterrupt: not for the waiters to carry
        finally:
            self._server = None

    async def _reserve_for(self, waiter: _Waiter, loop: asyncio.AbstractEventLoop) -> _Slot | None:
        """A reservation for the head waiter; None once it is answered otherwise (granted without
        Redis, failed, or left)."""
        if waiter.expiry is not None:
            waiter.expiry.cancel()  # Redis decides its deadline from here on
        if self._store_down():
            self._settle_without_store(waiter, None)
            return None
        sent = loop.time()
        within = None if waiter.deadline is None else waiter.deadline - sent
        wait = -1 if within is None else max(0, round(within * 1e9))
        followers = self._followers()
        reserved: Reserved | int | None
        more: list[Reserved] = []
        try:
            if followers:
                reserved, more = await self._store.reserve_run(self._definition, waiter.amount, wait,
                                                               [f.amount for f in followers], within)
            else:
                reserved = await self._store.reserve(self._definition, waiter.amount, wait, waiter.hold, within)
        except (StoreError, ValueError) as error:
            self._settle_without_store(waiter, error)
            if isinstance(error, StoreError):  # the lost trip may have taken the followers' tokens too: each is
                for follower in followers:     # answered as its head was, so that no failure hides a reservation
                    self._settle_without_store(follower, error)
            return None
        except TimeoutError as error:  # no answer by the head's deadline: it fails, the others go on
            self._queue.popleft()
            if not waiter.future.done():
                self._counts[6] += 1
                waiter.future.set_exception(error)
            return None
        if isinstance(reserved, int):  # it fits only once held grants end: ask again when it would, were they to end now
            await self._sleep_until(loop.time() + reserved / 1e9, waiter.future)
            return None
        slot = None if reserved is None else _Slot(reserved, sent, loop.time(), waiter.amount, waiter.hold)
        if more:
            assert slot is not None
            if loop.time() - slot.due <= self._stale_after:
                await self._grant_run(list(zip([waiter, *followers], [slot.reserved, *more])))
                return None
            # reached stale: the followers' grants are lost, as stale ones are; the head's is taken afresh
        if waiter.future.done():  # left while the script ran
            if slot is not None:
                self._queue.popleft()
                return await self._pass_on(slot)
            return None
        if slot is None:
            self._queue.popleft()
            self._counts[6] += 1
            waiter.future.set_exception(TimeoutError(f"{waiter.amount!r} tokens cannot be granted within the timeout"))
        return slot

    def _followers(self) -> list[_Waiter]:
        """The waiters behind the head whose grants the head's round trip may make too, if they are due
        now: up to RUN_MOST - 1, in queue order; none for a window, whose grants are held one by one."""
        followers: list[_Waiter] = []
        if self._window:
            return followers
        for waiter in itertools.islice(self._queue, 1, None):
            if len(followers) == RUN_MOST - 1:
                break
            if not waiter.future.done():
                followers.append(waiter)
        return followers

    async def _grant_run(self, grants: list[tuple[_Waiter, Reserved]]) -> None:
        """Grants a run of reservations due now, each to its waiter in queue order. A grant whose waiter
        left goes to the first waiter still queued if that one asks for no more, else back to Redis."""
        loop = asyncio.get_running_loop()
        spare: list[tuple[float, Reserved]] = []
        for waiter, reserved in grants:
            if waiter.future.done():
                spare.append((waiter.amount, reserved))
            else:
                self._grant_now(waiter, reserved, loop)
        for amount, reserved in spare:
            self._pop_done()
            if self._queue and self._queue[0].amount <= amount:
                self._grant_now(self._queue[0], reserved, loop)
            else:
                await self._give_back(reserved)
        self._pop_done()

    def _grant_now(self, waiter: _Waiter, reserved: Reserved, loop: asyncio.AbstractEventLoop) -> None:
        """Hands a waiter its grant (it stays queued until popped)."""
        if waiter.expiry is not None:
            waiter.expiry.cancel()
        self._count_grant(waiter.amount, max(0.0, loop.time() - waiter.enqueued), reserved)
        waiter.future.set_result(reserved)

    def _pop_done(self) -> None:
        """Drops the waiters at the queue's front that have their answer or left."""
        queue = self._queue
        while queue and queue[0].future.done():
            queue.popleft()

    async def _grant(self, waiter: _Waiter, slot: _Slot, loop: asyncio.AbstractEventLoop) -> _Slot | None:
        """Grants the head its reservation, or, if it was reached stale, takes afresh or reserves again."""
        late = loop.time() - slot.due
        if late > self._stale_after and not waiter.restarted:
            sent = loop.time()
            try:
                fresh = await self._store.reserve(self._definition, waiter.amount, 0, waiter.hold)
            except (StoreError, ValueError) as error:
                self._settle_without_store(waiter, error)
                return None
            if waiter.future.done():
                if isinstance(fresh, Reserved):
                    self._queue.popleft()
                    return await self._pass_on(_Slot(fresh, sent, loop.time(), waiter.amount, waiter.hold))
                return None
            if not isinstance(fresh, Reserved):
                waiter.restarted = True
                return None  # no room now: it reserves again, behind the others
            slot = _Slot(fresh, sent, loop.time(), waiter.amount, waiter.hold)
        self._queue.popleft()
        self._count_grant(waiter.amount, max(0.0, loop.time() - waiter.enqueued), slot.reserved)
        waiter.future.set_result(slot.reserved)
        return None

    async def _pass_on(self, slot: _Slot) -> _Slot | None:
        """A reservation its waiter left: to the next waiter if it asks for no more and its deadline
        allows, else cancelled in Redis."""
        for waiter in self._queue:
            if waiter.future.done():
                continue
            if (waiter.amount <= slot.amount and waiter.hold == slot.hold
                    and (waiter.deadline is None or slot.at <= waiter.deadline)):
                if waiter.expiry is not None:
                    waiter.expiry.cancel()
                return slot
            break
        await self._give_back(slot.reserved)
        return None

    async def _give_back(self, reserved: Reserved) -> None:
        """Cancels a reservation in Redis, by the script's rule."""
        try:
            await self._store.cancel(self._definition, reserved.record)
        except (StoreError, ValueError):
            pass  # the tokens stay taken: stricter, never looser

    @staticmethod
    async def _sleep_until(at: float, leaves: asyncio.Future[object]) -> None:
        """Sleeps until loop time at, or until the waiter leaves."""
        loop = asyncio.get_running_loop()
        if at <= loop.time() or leaves.done():
            return
        woken = loop.create_future()

        def wake(_: object = None) -> None:
            if not woken.done():
                woken.set_result(None)

        timer = loop.call_at(at, wake)
        leaves.add_done_callback(wake)
        try:
            await woken
        finally:
            timer.cancel()
            leaves.remove_done_callback(wake)

    # ---- when Redis cannot answer ----

    def _store_down(self) -> bool:
        """Whether Redis failed lately and a fallback (or "allow") stands in for it now."""
        return self._store.on_error != "raise" and time.monotonic() < self._down_until

    def _settle_without_store(self, waiter: _Waiter, error: Exception | None) -> None:
        """Answers a queued waiter (the head, or a follower of its lost trip) without Redis: the amount's ValueError,
        StoreCorrupt, StoreUnavailable, or on_error's grant (on_error stands in for a Redis that cannot answer, not
        for one whose state is wrong)."""
        self._queue.remove(waiter)
        if waiter.future.done():  # it left while the script failed
            return
        if isinstance(error, (ValueError, StoreCorrupt)) or (error is not None and self._store.on_error == "raise"):
            self._counts[5] += 1
            waiter.future.set_exception(error)
            return
        if error is not None:
            self._down_until = time.monotonic() + RETRY_AFTER
        waiter.future.set_result(None if self._store.on_error == "allow" else _FALLBACK)

    async def _without_store(self, amount: float, *, blocking: bool, error: StoreError | None = None) -> bool:
        """on_error's answer for a call that Redis did not answer (or is not asked now)."""
        on_error = self._store.on_error
        if on_error == "raise" or isinstance(error, StoreCorrupt):
            assert error is not None
            raise error
        if error is not None:
            self._down_until = time.monotonic() + RETRY_AFTER
        fallback = self._store.fallback
        if fallback is None:  # "allow"
            return True
        if blocking:
            await fallback.acquire(amount)
            return True
        return fallback.try_acquire(amount)

    # ---- bookkeeping ----

    def _check_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, the one this limiter serves; RuntimeError on another (its Redis client is bound to one)."""
        loop = asyncio.get_running_loop()
        if self._loop is None or self._loop.is_closed() and self._server is None:
            self._loop = loop
        elif loop is not self._loop:
            raise RuntimeError(OTHER_LOOP)
        return loop

    def _as_good_as_new(self) -> bool:
        """Whether it holds nothing of its own (the rates are in Redis): nobody waits, nothing is on its way."""
        return not self._queue and self._server is None

    def _time_precisely(self) -> None:
        super()._time_precisely()
        self._stale_after = max(STALE_AFTER, min(r.ns_per_token for r in self._rates) / 1e9)

    def _count_grant(self, amount: float, waited: float | None, reserved: Reserved) -> None:
        """Counts a grant of reserved, at once (waited None) or after a wait of waited s."""
        counts = self._counts
        counts[0] += 1
        counts[1] += amount
        if waited is not None:
            counts[2] += 1
            counts[3] += waited
            counts[4] = max(counts[4], waited)

    def _count_lost(self, amount: float) -> None:
        """Uncounts a grant its task never used."""
        counts = self._counts
        counts[0] -= 1
        counts[1] -= amount
        counts[5] += 1

    def _stats(self) -> tuple[int, float, int, float, float, int, int]:
        granted, tokens, waits, total, most, cancelled, timeouts = self._counts
        return (int(granted), float(tokens), int(waits), float(total), float(most), int(cancelled), int(timeouts))


serve("redis", RedisLimiter)


def check_refill(burst: float, ns_per_token: float) -> None:
    """ValueError for a rate whose full refill Redis's script cannot keep exact."""
    if burst * ns_per_token > MAX_REFILL_NS:
        raise ValueError(f"a rate over a RedisStore refills its burst within {MAX_REFILL_NS / 86400e9:.0f} days, "
                         f"got burst {burst!r} at {1e9 / ns_per_token:.6g}/s")
