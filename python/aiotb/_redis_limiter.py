"""The engine of a ``Limiter`` over a ``RedisStore``: this process's queue (``_reserving``) in front of rates kept
in Redis, which every client of the key shares, and timed by the dispatcher of the loop the limiter serves.

A caller that finds the limiter idle (nobody queued, no reservation held, nothing on its way) asks in its own
task, with no round-trip task or pass to wake it: granted when the reply comes if its tokens were free then,
else first in the queue with that answer. Otherwise the store answers in round trips, each a task of that
loop that settles its own answer and wakes the loop's next pass: a reservation for the head, taken as the
reply's arrival plus the script's delay (never earlier than the server's own instant; its stale span counted
from when it was asked for, so that a stall while the script ran counts too). When the head's grant is due
now, the same round trip grants each waiter behind it, in order, while their tokens are free now too
(``RUN_MOST`` in all): never one ahead, so the queue's rule holds. A timed waiter behind others is refused at
once, in a round trip of its own, when even the amounts up to its own could not come within its timeout, and
fails at its deadline in any case.

When Redis cannot answer, the store's ``on_error`` decides: ``StoreUnavailable`` for the waiter
(``"raise"``), a grant the quota does not see (``"allow"``), or a grant of the fallback limiter. With
a fallback, Redis is asked again ``RETRY_AFTER`` seconds after it last failed. Statistics are this
limiter's."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
import weakref
from typing import Any, Callable, Coroutine, Sequence, TypeVar, cast

from . import _params
from ._capabilities import OTHER_LOOP, refused
from ._core import Bucket
from ._limiter import LIMIT_SLACK, serve
from ._remote import OnItsLoop, on_its_loop, pause_ns
from ._redis_slot import RedisSlot
from ._reservation import RedisReservation
from ._reserving import ReservingLimiter, Slot, Waiter
from ._store import Reserved, StoreCorrupt, StoreError, StoreUnavailable
from ._store_redis import MAX_REFILL_NS, RedisRates, RedisStore

T = TypeVar("T")
RUN_MOST = 64  # the most grants one round trip makes: the head's and those due with it
RETRY_AFTER = 1.0  # s: with on_error "allow" or a fallback, how long Redis is left alone after it failed
_FALLBACK = object()  # a grant's outcome: take from the fallback limiter
_NOT_HOLDING = (False, None)  # RedisLimiter._holding between waits: no hold, no task


class RedisLimiter(OnItsLoop, ReservingLimiter[RedisStore]):
    """``Limiter(..., store=RedisStore(redis, key))``: see the module's doc. Made directly, its type
    shows the methods that talk to Redis as the coroutines they are here: ``await
    limiter.try_acquire()``, ``has_capacity``, ``read_tokens``, ``set_rate``, ``penalize``,
    ``retry_after``."""

    __slots__ = ("_store_rates", "_loop", "_down_until", "_held", "_holding", "_outcomes", "_trips", "_front",
                 "_lone")

    def __init__(self, max_rate: float | None = None, time_period: float = 60, *,
                 burst: float | None = None, initial: float | None = None, fair: bool = True,
                 rates: Sequence[tuple[float, ...]] | None = None, store: RedisStore | None = None) -> None:
        if not isinstance(store, RedisStore):
            raise TypeError(f"store must be a RedisStore, got {store!r}")
        checked = _params.limiter_rates(max_rate, time_period, burst, initial, rates)
        for r in checked:
            check_refill(r.burst, r.ns_per_token)
        self._setup(checked, None, _params.flag("fair", fair), smallest_first=False)
        self._over(store, store.bind([r.engine() for r in checked]))

    def _over(self, store: RedisStore, rates: RedisRates) -> None:
        """Serves the limits of rates, in store."""
        self._store = store
        self._store_rates = rates
        self._held: list[bytes] = []  # records of grants held by `async with` blocks (a window's)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._down_until = -1.0
        self._holding: tuple[bool, Any] = _NOT_HOLDING  # the waiter being queued: its hold, its task
        self._outcomes: weakref.WeakKeyDictionary[asyncio.Task[Any], object] | None = None  # made at the first kept
        self._trips: set[asyncio.Task[None]] = set()  # round trips on their way, each settling its answer
        self._front: tuple[Reserved | int, float, float] | None = None  # the lone caller's answer, sent, received
        self._lone = 0  # 1 while the caller of an idle limiter asks Redis in its own task
        self._start_queue()

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
        seconds = None if timeout is None else float(timeout)
        return cast("Coroutine[Any, Any, None]", self._acquire(float(amount), seconds))

    async def atry_acquire(self, amount: float = 1) -> bool:
        """Takes ``amount`` tokens if every rate has them now (one round trip); False if not, or if
        others wait in this limiter's queue (fair)."""
        x = self._checked_amount(amount)
        if asyncio.get_running_loop() is not self._loop:
            return await self._on_its_loop(self.atry_acquire, x)
        if self._fair and (self._queue or self._asking):
            return False
        if self._store_down():
            return await self._without_store(x, blocking=False)
        try:
            reserved = await self._store_rates.reserve(x, 0)
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
            reserved = await self._store_rates.reserve(x, -1)  # whenever it comes
            if isinstance(reserved, Reserved):
                return RedisReservation(self, reserved, x, loop, loop.time())
            if reserved is None:  # "not within the wait": no answer of aiotb's script to a wait of whenever
                raise StoreCorrupt(f"Redis answered a reservation of whenever with 'too late' ({self._store!r})")
            await asyncio.sleep(reserved / 1e9)  # a window's held grants must end first: ask again then

    @on_its_loop
    async def _cancel_reservation(self, record: bytes) -> None:
        """Gives a reservation back, by the script's rule (one round trip)."""
        await self._store_rates.cancel(record)

    @on_its_loop
    async def ahas_capacity(self, amount: float = 1) -> bool:
        """Whether ``try_acquire(amount)`` would take the tokens now (one round trip; takes nothing)."""
        x = self._checked_amount(amount)
        if self._fair and (self._queue or self._asking):
            return False
        return await self._store_rates.fit_delay(x) <= 0

    @on_its_loop
    async def read_tokens(self) -> float:
        """Tokens available now in Redis (the fewest over the rates; 0 while paused)."""
        return await self._store_rates.tokens()

    @on_its_loop
    async def aset_rate(self, max_rate: float, time_period: float | None = None, *,
                        burst: float | None = None, index: int = 0) -> None:
        """Changes rate ``index`` for every client of the key (one round trip), keeping the tokens
        held now, at most the new burst. Clients that join later must still give the rates the key
        was created with."""
        i, spec, window_ns = self._changed_rate(max_rate, time_period, burst, index)
        if window_ns is not None:
            check_refill(1, window_ns)
            await self._store_rates.set_window(window_ns, spec.max_rate)
            Bucket._set_window(self, window_ns, spec.max_rate)  # amounts are checked against it
        else:
            check_refill(spec.burst, spec.ns_per_token)
            await self._store_rates.set_rate(i, spec.ns_per_token, spec.burst)
            Bucket._set_rate(self, i, spec.ns_per_token, spec.burst)  # amounts are checked against it
        self._rates = [*self._rates[:i], spec, *self._rates[i + 1:]]

    def _settle_cost(self, taken: float, used: float, held: bool) -> None:
        raise TypeError("settle() over a RedisStore needs a round trip to Redis: await limiter.asettle(taken, used), "
                        "or await slot.asettle(used)")

    @on_its_loop
    async def asettle(self, taken: float, used: float) -> None:
        """A grant of ``taken`` tokens cost ``used``, for every client of the key (one round trip), as
        ``Limiter.settle``: less, given back to each rate (a window's log keeps ``used`` for its first grant of
        ``taken``); more, taken now as debt that delays every later grant. A reservation Redis made already keeps
        its instant."""
        x, y = self._settle_amounts(taken, used)
        await self._store_rates.settle(x, y)

    async def _settle_held(self, record: bytes, taken: float, used: float) -> bytes | None:
        """Settles a window's grant held by record (a slot's): the record its hold ends with from now on."""
        x, y = self._settle_amounts(taken, used)
        return await self._store_rates.settle(x, y, record)

    @on_its_loop
    async def alimit_until(self, tokens: float, when: float) -> None:
        """At most ``tokens`` more granted, to any client of the key, before loop time ``when``: what is left of
        it from now, by the server's clock (one round trip), as ``Limiter.limit_until``."""
        x = _params.non_negative("tokens", tokens)
        span = _params.loop_time("when", when) - self._check_loop().time()
        if span > 0:
            await self._store_rates.limit(x, pause_ns(span, "when", when), round(LIMIT_SLACK * 1e9))

    @on_its_loop
    async def apenalize(self, seconds: float) -> None:
        """Grants nothing, to any client of the key, for ``seconds`` from the server's now: a
        server's ``Retry-After`` (one round trip)."""
        await self._store_rates.pause(pause_ns(seconds))

    # ---- waiting ----

    async def _acquire(self, amount: float, timeout: float | None, hold: bool = False) -> bytes | None:
        """Waits for amount; the record of the grant if Redis made it and it is held, else None. Ends by its
        deadline: TimeoutError. The caller of a limiter nobody else waits on (none queued or asking, and no task
        granted here still to resume: those come back at once, and share a round trip in the queue) asks Redis in
        its own task (no round trip task, no pass to wake it), granted if its tokens were free when the reply came;
        else that answer, in _front, goes with it to the head of the queue the dispatcher of the limiter's loop
        serves, where the waiters that came meanwhile wait behind it."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            return await self._on_its_loop(self._acquire, amount, timeout, hold)
        here = self._owners.dispatchers.get(loop)
        if not (self._queue or self._slot or self._asking or (here and here.resuming) or self._store_down()):
            self._asking, self._lone = True, 1
            sent, wait = loop.time(), -1 if timeout is None else max(0, round(timeout * 1e9))
            try:
                reserved = await self._store_rates.reserve(amount, wait, hold, timeout)
            except BaseException as error:
                self._lone = 0
                self._asked()
                if isinstance(error, StoreUnavailable) and self._store.on_error != "raise":
                    await self._without_store(amount, blocking=True, error=error)
                    return None
                self._counts[6 if isinstance(error, TimeoutError) else 5] += 1
                raise
            received = loop.time()
            self._lone = 0
            if isinstance(reserved, Reserved) and reserved.delay <= 0 and received - sent <= self._stale_after:
                self._count_grant(amount, received - sent, reserved)
                self._asked()
                return reserved.record if hold else None
            if reserved is None:
                self._asked()
                self._counts[6] += 1
                raise TimeoutError(f"{amount!r} tokens cannot be granted within {timeout!r} s")
            self._front = (reserved, sent, received)
            timeout = None if timeout is None else max(0.0, timeout - (received - sent))
        dispatcher = here if here is not None else self._owners.dispatcher(loop)
        task = asyncio.current_task(loop)  # each look-up of the running loop asks getpid() on 3.11: given here
        self._holding = (hold, task)  # read by _enqueue, which the wait below runs before it first suspends
        if timeout is None:
            await dispatcher.wait(self, amount, None)
        else:
            deadline = asyncio.timeout(timeout)
            try:
                async with deadline:
                    await dispatcher.wait(self, amount, timeout)
            except TimeoutError:
                if deadline.expired():  # it left at its deadline: a timeout, not the cancel its leaving counted
                    self._counts[5] -= 1
                    self._counts[6] += 1
                raise
        outcome = self._outcomes.pop(task, None) if self._outcomes is not None and task is not None else None
        if outcome is _FALLBACK and (fallback := self._store.fallback) is not None:
            await fallback.acquire(amount)
        return outcome if hold and isinstance(outcome, bytes) else None

    @property
    def waiting(self) -> int:
        """Callers of this limiter waiting now: those queued, and one asking Redis alone."""
        return len(self._queue) + self._lone

    def _asked(self) -> None:
        """The lone caller's round trip is back: the waiters that came meanwhile, if any, may ask now. No lock: the
        queue of a limiter over Redis is touched on its loop's thread only, where every call that waits runs."""
        self._asking = False
        if self._queue:
            self._pass_here()

    @on_its_loop
    async def _end_hold_of(self, record: bytes) -> None:
        """Ends a held grant's hold in Redis; should Redis not answer, it ends by itself later (stricter)."""
        with contextlib.suppress(StoreError):
            await self._store_rates.end_hold(record)

    # ---- the queue's store: round trips to Redis, on the limiter's loop ----

    def _store_now(self) -> float:
        loop = self._loop
        assert loop is not None
        return loop.time()

    def _waiter_extras(self) -> tuple[bool, Any]:
        return self._holding

    def _enqueue(self, amount: float, timeout: float | None, handle: Any, owner: object) -> int:
        ident = super()._enqueue(amount, timeout, handle, owner)
        self._holding = _NOT_HOLDING  # the task is the waiter's now, not the limiter's
        front, self._front = self._front, None
        if front is not None:  # the lone caller's answer came: it goes first, with it
            with self._queue_lock:
                self._queue.move_to_end(ident, last=False)
                self._asking = False
                self._answered(ident, self._queue[ident], [], front[0], [], front[1], front[2])
            return ident
        if timeout is not None and len(self._queue) > 1 and not self._store_down():
            ahead = min(sum(w.amount for w in self._queue.values()), self.burst)
            self._start(self._refuse_if_late(ident, ahead, timeout))
        return ident

    async def _refuse_if_late(self, ident: int, ahead: float, timeout: float) -> None:
        """For a waiter queued behind others: TimeoutError at once, taking nothing, if even the amounts up to
        and with its own (ahead) could not come within timeout. Where Redis does not answer, its
        reservation will meet that."""
        try:
            delay = await self._store_rates.fit_delay(ahead, timeout)
        except (StoreError, TimeoutError):  # its deadline keeps it
            return
        if delay > timeout * 1e9:
            self._settled(self._fail, ident, TimeoutError(f"{ahead!r} tokens cannot be granted within {timeout!r} s"))

    def _ask(self, ident: int, waiter: Waiter, now: float) -> None:
        if self._store_down():
            self._settle_without_store(ident, None)
            return
        self._asking = True
        self._start(self._reserve_for(ident, waiter))

    def _retake(self, slot: Slot, waiter: Waiter, now: float) -> None:
        if slot.hold and isinstance(slot.record, Reserved):  # lost as a stale grant is: held no longer, it counts
            self._start(self._end_hold_of(slot.record.record))  # a period from now
        self._asking = True
        self._start(self._take_afresh(slot, waiter))

    def _give_back(self, record: Reserved) -> None:
        self._start(self._cancel(record.record))

    def _start(self, trip: Coroutine[Any, Any, None]) -> None:
        """Runs a round trip on the limiter's loop; it settles its own answer."""
        assert self._loop is not None
        self._trips.add(task := self._loop.create_task(trip))
        task.add_done_callback(self._trips.discard)

    def _settled(self, settle: Callable[..., None], *args: Any) -> None:
        """settle(*args) under the lock, then a pass of this loop's dispatcher, here, hands out what was settled
        (and any other looks again)."""
        with self._queue_lock:
            settle(*args)
        self._pass_here()

    def _pass_here(self) -> None:
        """A pass of this loop's dispatcher, here: it hands out what was settled, and the other owners look again."""
        here = self._owners.dispatchers.get(asyncio.get_running_loop())
        if here is not None:
            here.guarded()
        self._owners.retime(here)

    async def _reserve_for(self, ident: int, waiter: Waiter) -> None:
        """A reservation for the head waiter, and, when its grant is due now, the grants of the waiters behind
        it whose tokens are free now too (one round trip)."""
        sent = self._store_now()
        within = None if waiter.deadline == math.inf else waiter.deadline - sent
        wait = -1 if within is None else max(0, round(within * 1e9))
        # up to RUN_MOST - 1 waiters behind it, in queue order; none for a window, whose grants are held one by one
        followers = [] if self._window else list(itertools.islice(self._queue.items(), 1, RUN_MOST))
        reserved: Reserved | int | None | Exception
        more: list[Reserved] = []
        try:
            if followers:
                reserved, more = await self._store_rates.reserve_run(waiter.amount, wait,
                                                               [f.amount for _, f in followers], within)
            else:
                reserved = await self._store_rates.reserve(waiter.amount, wait, waiter.hold, within)
        except Exception as error:  # StoreError, TimeoutError, ValueError, or a reply it did not expect
            reserved = error
        finally:
            self._asking = False
        self._settled(self._answered, ident, waiter, followers, reserved, more, sent, self._store_now())

    def _answered(self, ident: int, waiter: Waiter, followers: list[tuple[int, Waiter]],
                  reserved: Reserved | int | None | Exception, more: list[Reserved], sent: float,
                  now: float) -> None:
        """Settles the answer to a reservation for the head waiter ident (sent at sent, received at now)."""
        if isinstance(reserved, TimeoutError):  # no answer by the head's deadline: it fails, the others go on
            self._fail(ident, reserved)
        elif isinstance(reserved, Exception):
            self._settle_without_store(ident, reserved)
            if isinstance(reserved, StoreError):  # the lost trip may have taken the followers' tokens too: each is
                for follower, _ in followers:     # answered as its head was, so that no failure hides a grant
                    self._settle_without_store(follower, reserved)
        elif isinstance(reserved, int):  # it fits only once held grants end: ask again when it would, were they to
            if ident in self._queue:     # end now
                self._slot = Slot(ident, now + reserved / 1e9, math.inf, None, waiter.amount, waiter.hold)
        elif reserved is None:
            self._fail(ident, TimeoutError(f"{waiter.amount!r} tokens cannot be granted within the timeout"))
        else:
            slot = Slot(ident, now + reserved.delay / 1e9, sent + reserved.delay / 1e9, reserved, waiter.amount,
                        waiter.hold)
            if more and now - slot.due <= self._stale_after:
                self._grant_run([(ident, waiter), *followers], [reserved, *more], now)
            else:  # reached stale, a run's followers' grants are lost, as stale ones are; the head's is retaken
                self._install(slot)

    def _grant_run(self, run: list[tuple[int, Waiter]], grants: list[Reserved], now: float) -> None:
        """Grants a run of reservations due now, each to its waiter of run in queue order; one whose waiter left
        is spare (``_spare``), once the grants before it are made."""
        spare: list[tuple[float, Reserved]] = []
        for (ident, waiter), reserved in zip(run, grants):
            if ident in self._queue:
                self._grant_now(ident, now, reserved)
            else:
                spare.append((waiter.amount, reserved))
        for amount, reserved in spare:
            self._spare(amount, False, reserved, now)

    async def _take_afresh(self, slot: Slot, waiter: Waiter) -> None:
        """A stale slot's waiter takes the tokens afresh if they are free now (one round trip), else reserves
        again behind the others."""
        try:
            fresh: Reserved | int | None | Exception = await self._store_rates.reserve(waiter.amount, 0, waiter.hold)
        except Exception as error:
            fresh = error
        finally:
            self._asking = False
        self._settled(self._retaken, slot.ident, fresh, self._store_now())

    def _retaken(self, ident: int, fresh: Reserved | int | None | Exception, now: float) -> None:
        if isinstance(fresh, Exception):
            self._settle_without_store(ident, fresh)
        elif isinstance(fresh, Reserved):  # a slot granted now, which takes its waiter's amount and hold
            waiter = self._queue.get(ident)
            amount, hold = (0.0, False) if waiter is None else (waiter.amount, waiter.hold)
            self._install(Slot(ident, now, now, fresh, amount, hold))
        elif ident in self._queue:
            self._restarted = ident  # no room now: it reserves again, behind the others

    async def _cancel(self, record: bytes) -> None:
        """Cancels a reservation in Redis, by the script's rule; should it fail, the tokens stay taken (stricter)."""
        with contextlib.suppress(StoreError, ValueError):
            await self._store_rates.cancel(record)

    def _grant_now(self, ident: int, now: float, record: Any, outcome: object = None) -> None:
        """As the queue's, where a held grant's outcome is its record, for the end of its hold."""
        if outcome is None and isinstance(record, Reserved) and self._queue[ident].hold:
            outcome = record.record
        super()._grant_now(ident, now, record, outcome)

    def _keep_outcome(self, task: Any, outcome: object) -> None:
        if self._outcomes is None:
            self._outcomes = weakref.WeakKeyDictionary()
        self._outcomes[task] = outcome

    # ---- when Redis cannot answer ----

    def _store_down(self) -> bool:
        """Whether Redis failed lately and a fallback (or "allow") stands in for it now."""
        return self._store.on_error != "raise" and time.monotonic() < self._down_until

    def _settle_without_store(self, ident: int, error: Exception | None) -> None:
        """Answers a queued waiter (the head, or a follower of its lost trip) without Redis: with error (the
        amount's ValueError, StoreCorrupt, StoreUnavailable, or a reply it did not expect), or with on_error's
        grant, which stands in for a Redis that cannot answer (error None: not asked), not for one whose state
        is wrong. Under the lock."""
        if ident not in self._queue:  # it left while the script failed
            return
        if error is not None and (not isinstance(error, StoreUnavailable) or self._store.on_error == "raise"):
            self._fail(ident, error)
            return
        if error is not None:
            self._down_until = time.monotonic() + RETRY_AFTER
        # on_error "allow": no outcome, let through unlimited
        self._grant_now(ident, self._store_now(), None, None if self._store.on_error == "allow" else _FALLBACK)

    async def _without_store(self, amount: float, *, blocking: bool, error: StoreError | None = None) -> bool:
        """on_error's answer for a call that Redis did not answer (or is not asked now)."""
        if self._store.on_error == "raise" or isinstance(error, StoreCorrupt):
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

    @on_its_loop
    async def _on_its_loop(self, call: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        """call(*args), a call made on a loop other than the one this limiter serves (or before it serves one), on
        the one it serves, else on this one if it may serve it (_check_loop). The calls that run most (acquire,
        atry_acquire) take this way only then, so that on the loop they serve they go through one coroutine less."""
        self._check_loop()
        return await call(*args)

    def _check_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, the one this limiter serves; RuntimeError on another (its Redis client is bound to
        one). After the loop it served closed, the next one: the waiters and round trips of the closed one are
        gone, and a reservation it held is lost."""
        loop, served = asyncio.get_running_loop(), self._loop
        if served is None or served.is_closed():
            self._loop = loop
            if served is not None:
                with self._queue_lock:
                    self._slot, self._asking = None, False
                self._front, self._lone = None, 0
                self._trips.clear()
                self._drop_closed()
        elif loop is not served:
            raise RuntimeError(OTHER_LOOP)
        return loop


serve("RedisStore", "Limiter", RedisLimiter)


def check_refill(burst: float, ns_per_token: float) -> None:
    """ValueError for a rate whose full refill Redis's script cannot keep exact."""
    if burst * ns_per_token > MAX_REFILL_NS:
        raise ValueError(f"a rate over a RedisStore refills its burst within {MAX_REFILL_NS / 86400e9:.0f} days, "
                         f"got burst {burst!r} at {1e9 / ns_per_token:.6g}/s")
