"""The lease of a ``RedisStore(..., lease=seconds)``: a process grants from a share of the key's rates that it
leases from Redis, with no round trip per grant, on an ordinary engine that this module's ``LeaseKeeper`` sets to
the share it holds. It never imports a limiter: the engine is the ``Engine`` it is given.

The key's rates are counted in ``units`` equal parts, each 1/units of every rate and of every burst
(``_redis_lease.lua``). A limiter holds some of them: its engine is set to their sum, and grants from it as an
in-process ``Limiter`` does (its queue, order, cancellation, the dispatcher of its loop). What the holders hold
sums to at most the whole, and units move between holders without making a token, so the bound
``burst + rate * t`` holds over every holder of the key together.

A task of the limiter's loop (the keeper) renews the lease every third of its span, a round trip early: an answer
grants for a third of a span after its call, so that a pause the key got meanwhile reaches every holder by then,
however late it reads the answer. It asks for the units its demand needs (its grants and refusals since the last
renewal, with a quarter more; all it may get while its callers wait for more than it holds). The script answers
with a max-min fair split of the units over the holders' wants: a holder above its share gives the rest back at its
next call, a holder below it takes free units. The engine grants from the units only until the lease ends by the
holder's own clock, a span after it sent the call that renewed it (less a thousandth, for clocks that run at
different rates), which is never after the server's end of it: from then on it grants nothing (its waiters wait for
the next lease), and a grant whose task resumes only after that end is not used (its caller waits again). A holder
that misses its renewal (a stall, Redis away) loses its units at the server's end, empty: another holder refills
them from then, so the tokens this holder kept from before its end were its own.

A grant settled for more than it took (``asettle``) is a debt of the units held, which delays their next grants.
The key keeps what a holder owes (told with each renewal, and at once by a settle whose debt would outlast the
lease): a holder that lets go of its last unit, or whose lease lapses, leaves its debt to the key, which charges
it to the next holder of units as it renews.

What it costs against one round trip a grant: order is first come first served within a limiter only; units move
only when their holders renew, so a newcomer may wait up to a third of a span for units that others hold, and an
idle holder's share of the burst is not anyone else's until it gives it back; a grant must fit in the holder's
share of the burst, so a large amount waits until its holder holds enough units; a pause (``penalize``) reaches
the other holders as they renew, within a third of a span; a timeout is waited out (when units come is not
known in advance)."""

from __future__ import annotations

import asyncio
import collections
import math
import secrets
from typing import Awaitable, Callable, Protocol, Sequence

from ._capabilities import OTHER_LOOP
from ._store import StoreCorrupt, StoreError
from ._store_redis import Lease, RedisLease, RedisStore

RENEW_EVERY = 1 / 3  # of a span: how often a holder renews its lease
STARVED_EVERY = 1 / 10  # of a span: how often a holder asks again while its callers need units it does not hold
MARGIN = 1e-3  # of a span: how much sooner than the server's a holder takes its lease to end
HEADROOM = 1.25  # the units a holder asks for: its demand, and this much more
_EMPTY = 2.0 ** -40  # of a burst: an engine's rate is set to a burst this small, and back, to empty it


class Engine(Protocol):
    """The engine that grants from the units a keeper holds: a limiter's own calls of its core."""

    def _set_rate(self, index: int, ns_per_token: float, burst: float, /) -> None: ...

    def _grant_until(self, when: float, /) -> None: ...

    def _credit(self, tokens: float, /) -> None: ...

    def _pause_until(self, when: float, /) -> None: ...

    def _owed(self, ahead: float, /) -> float: ...

    def _engine_tokens(self) -> float: ...

    def _stats(self) -> tuple[int, float, int, float, float, int, int]: ...

    def _settle(self) -> None: ...

    def _fail_waiting(self, error: BaseException) -> None: ...


class LeaseKeeper:
    """Holds units of a key's rates for one limiter (its engine), on the event loop it serves: see the module's
    doc."""

    __slots__ = ("_store", "_lease", "_engine", "_rates", "holder", "units", "_fair_units", "valid_until", "loop",
                 "_task", "_news", "_asking", "_refused", "_demand_mark", "_renewed_at", "_trip", "_told",
                 "_asked_at")

    def __init__(self, store: RedisStore, rates: Sequence[tuple[float, float, float]], engine: Engine) -> None:
        self._store = store
        self._lease: RedisLease = store.bind_lease(rates)
        self._engine = engine
        self._rates = [(ns, burst) for ns, burst, _ in rates]  # the key's, each (ns per token, burst)
        self.holder = secrets.token_hex(8)  # this limiter's name among the key's holders
        self.units = 0  # units held
        self._fair_units = 0  # the most units the script lets it keep
        self.valid_until = -math.inf  # loop time: the units held grant only before it
        self.loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._news: asyncio.Future[Exception | None] | None = None  # the keeper's next answer, for callers
        self._asking: collections.Counter[float] = collections.Counter()  # amounts of the callers waiting now
        self._refused = 0.0  # tokens atry_acquire refused
        self._demand_mark = 0.0  # tokens granted and refused at the last renewal
        self._renewed_at = 0.0  # loop time of the last renewal
        self._trip = asyncio.Lock()  # one call that moves units or a debt at a time, its answer applied in it
        self._told = 0.0  # what the key keeps of this limiter's debt, at least: it takes that if the lease lapses
        self._asked_at = 0.0  # loop time the last answer applied was asked for

    @property
    def lease(self) -> RedisLease:
        """The rates' lease in the store."""
        return self._lease

    # ---- the limiter's callers ----

    async def serve(self, amount: float, timeout: float | None, wait: Callable[[], Awaitable[None]]) -> None:
        """Waits for a grant of amount from the units (wait(): the engine's queue), keeping the lease meanwhile;
        TimeoutError once timeout s pass without it. While the store fails, its on_error stands in."""
        loop = self.check_loop()
        self._asking[amount] += 1
        try:
            self.keep()
            async with asyncio.timeout(timeout):
                while True:
                    if loop.time() >= self.valid_until:  # no lease: waits for the next, taking nothing meanwhile
                        error = await self._lease_news(loop)
                    else:
                        try:
                            await wait()
                        except StoreError as failed:  # the lease lapsed and its renewal failed
                            error = failed
                        else:
                            if loop.time() < self.valid_until:
                                return
                            continue  # granted, but resumed past the lease's end: not used
                    if error is not None:
                        await self._stand_in(amount, error)
                        return
        except TimeoutError:
            raise TimeoutError(f"{amount!r} tokens were not granted within {timeout!r} s") from None
        finally:
            self._asking[amount] -= 1
            if not self._asking[amount]:
                del self._asking[amount]

    async def _lease_news(self, loop: asyncio.AbstractEventLoop) -> Exception | None:
        """Waits for the keeper's next answer: None once a renewal was applied, the error if it failed."""
        if self._news is None or self._news.done():
            self._news = loop.create_future()
        return await asyncio.shield(self._news)

    def _tell(self, error: Exception | None) -> None:
        """Wakes the callers waiting for a lease."""
        if self._news is not None and not self._news.done():
            self._news.set_result(error)

    def refused(self, amount: float) -> None:
        """A caller was refused amount at once (a demand the next renewal counts)."""
        self._refused += amount
        self.keep()

    async def _stand_in(self, amount: float, error: Exception) -> None:
        """What the store's on_error does while it fails: raise error, allow the grant, or take it from the
        fallback limiter."""
        if self._store.on_error == "raise" or not isinstance(error, StoreError) or isinstance(error, StoreCorrupt):
            raise error  # on_error stands in for a Redis that cannot answer, not for another definition
        fallback = self._store.fallback
        if fallback is not None:
            await fallback.acquire(amount)

    def check_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, which the lease serves from its first call on; on a loop after the first closed, the
        lease starts afresh there. RuntimeError on another loop while the first is open."""
        loop = asyncio.get_running_loop()
        if self.loop is None or self.loop.is_closed():
            if self.loop is not None:  # its lease lapsed with its loop: its units are not this loop's
                self._task, self.valid_until = None, loop.time()
                self._asking.clear()
                self._hold_units(0, empty=True)
                self._engine._grant_until(self.valid_until)
            self.loop = loop
        elif loop is not self.loop:
            raise RuntimeError(OTHER_LOOP)
        return loop

    # ---- the lease ----

    def keep(self) -> None:
        """Starts the keeper, unless it runs."""
        if self._task is None or self._task.done():
            assert self.loop is not None
            self._renewed_at = self.loop.time()
            self._demand_mark = self._demand()
            self._task = self.loop.create_task(self._keep_lease())
            self._task.add_done_callback(self._keeper_done)

    def _keeper_done(self, task: asyncio.Task[None]) -> None:
        """Tells the callers waiting for a lease of a keeper that failed, so that none waits for it forever."""
        error = None if task.cancelled() else task.exception()
        if isinstance(error, Exception):
            self._tell(error)

    async def close(self) -> None:
        """Stops the keeper and gives every unit back now, with the tokens they hold."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            async with self._trip:  # a renewal on its way ends first: the units it moved are applied
                task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        await self._release()

    async def _keep_lease(self) -> None:
        """Renews the lease while the limiter is used; gives the units back once it is not."""
        loop = self.loop
        span = self._store.lease
        assert loop is not None and span is not None
        # a first lease, started by a caller: whatever the fair split gives (the caller's demand was counted when
        # it started the keeper, so none is new here); the next renewal sizes it to the demand
        want = self._store.units
        while True:
            have = min(self.units, max(self._fair_units, self._least_units()))
            give_back = self._give_back(have) if have < self.units else 0.0
            try:
                lease = await self._renew(have, want, give_back)
            except Exception as error:  # StoreError, or ValueError for another definition: the callers' to raise
                self._tell(error)  # to the callers without a lease; those queued get it once theirs lapsed
                if loop.time() >= self.valid_until:
                    self._engine._fail_waiting(error)
                await asyncio.sleep(span * STARVED_EVERY)
                want = self._want(loop.time())
                continue
            if max(lease.share, self._least_units()) < lease.units:
                continue  # units to give back: at once, asking as before
            starved = self._asking and (lease.units < want or lease.units < self._least_units())
            delay = span * (STARVED_EVERY if starved else RENEW_EVERY)
            trip = loop.time() - self._asked_at
            await asyncio.sleep(max(0.0, delay - 2 * trip))  # the next answer is due as this one stops granting
            want = self._want(loop.time())
            if not want:
                await self._release_idle()
                if not self._asking:  # nobody came while the units went back: the keeper ends (no await
                    self._task = None  # between this check and its end, so a newcomer starts another)
                    return
                want = self._want(loop.time())

    async def _release_idle(self) -> None:
        """Gives the units back, once the limiter is not used."""
        try:
            await self._release()
        except StoreError:
            pass  # they come back as the lease ends

    async def _release(self) -> None:
        """Gives every unit back, with their tokens, and a debt to the key (nothing to do with neither)."""
        async with self._trip:
            owed = self._engine._owed(0)
            if self.units or owed:
                await self._lease.release_units(self.holder, self._give_back(0), owed)
                self._drop_debt()

    async def _renew(self, have: int, want: int, give_back: float) -> Lease:
        """One renewal: keeps have units, gives the others back with give_back of their bursts, asks for want,
        tells what the limiter owes (keeping no unit, the key takes it over), and holds what the script
        answered."""
        assert self.loop is not None
        async with self._trip:
            sent = self.loop.time()
            owed = self._engine._owed(0)
            lease = await self._lease.lease_units(self.holder, have, want, give_back, owed)
            if lease.fresh:  # the key took what it was told this limiter owed, as the lease it had lapsed
                self._drop_debt(self._told)
            elif have == 0:  # given to the key with the last unit
                self._drop_debt()
            self._told = 0.0 if lease.fresh or have == 0 else owed
            self._hold_lease(lease, sent, self.loop.time())
        return lease

    async def tell_debt(self) -> None:
        """After a settle that cost more than it took: a debt the units held would not have refilled by the end
        of the lease is told to the key (one round trip), which keeps it should the lease lapse; without a lease,
        the key takes it over and charges it to the next holder of units."""
        assert self.loop is not None
        if self._engine._owed(max(0.0, self.valid_until - self.loop.time())) > 0:
            async with self._trip:
                owed = self._engine._owed(0)
                if await self._lease.owe(self.holder, owed):
                    self._drop_debt()
                else:
                    self._told = owed

    def _hold_lease(self, lease: Lease, sent: float, received: float) -> None:
        """Sets the engine to the units the script answered, with the tokens they brought (below 0, the key's
        debt, charged to them); the lease ends a span after it was sent."""
        span = self._store.lease
        assert span is not None
        engine = self._engine
        self._hold_units(lease.units, empty=lease.fresh or self.units == 0)
        if lease.units and lease.tokens > 0:
            engine._credit(lease.tokens * (1 - 1e-12))  # less what doubles may have rounded up
        elif lease.tokens < 0:
            engine._credit(lease.tokens)  # the key's debt, taken now
            self._told -= lease.tokens
        self.units, self._fair_units = lease.units, lease.share
        self.valid_until = sent + span * (1 - MARGIN) if lease.units else received
        self._asked_at = sent
        # an answer grants for a third of a span after its call, however late it was read: a pause the key got
        # meanwhile reaches this holder by then
        engine._grant_until(min(self.valid_until, sent + span * RENEW_EVERY))
        if lease.pause_ns:
            engine._pause_until(received + lease.pause_ns / 1e9)
        engine._settle()
        self._tell(None)

    def _hold_units(self, units: int, *, empty: bool) -> None:
        """Sets the engine to units of every rate (to one, idle, for none), keeping its tokens (at most the new
        bursts) unless empty."""
        n = self._store.units
        k = max(1, units)
        for i, (ns, burst) in enumerate(self._rates):
            if empty:
                self._engine._set_rate(i, ns * n / k, burst * k / n * _EMPTY)
            self._engine._set_rate(i, ns * n / k, burst * k / n)
        self.units = units

    def _drop_debt(self, most: float = math.inf) -> None:
        """Forgets what the units held owe, up to most: the key has taken it over."""
        owed = min(most, self._engine._owed(0))
        if owed > 0:
            self._engine._credit(owed)
        self._told = 0.0

    def _give_back(self, keep: int) -> float:
        """Keeps keep units of those held, and returns what the others hold, as a share of a unit's burst (0 for
        several rates, whose tokens differ)."""
        held, tokens = self.units, float(self._engine._engine_tokens())
        self._hold_units(keep, empty=keep == 0)
        if keep == 0 and self.loop is not None:
            self.valid_until = self.loop.time()
            self._engine._grant_until(self.valid_until)
        if len(self._rates) > 1 or held == keep:
            return 0.0
        unit_burst = self._rates[0][1] / self._store.units
        return max(0.0, min(1.0, (tokens - keep * unit_burst) / (held - keep) / unit_burst))

    def _want(self, now: float) -> int:
        """The units to ask for: the demand since the last renewal, with headroom; all there are while callers
        wait on the units held; 0 when nothing was asked since and nobody waits."""
        n = self._store.units
        demand = self._demand()
        used = (demand - self._demand_mark) / max(now - self._renewed_at, 1e-3)
        self._demand_mark, self._renewed_at = demand, now
        if used == 0 and not self._asking:
            return 0
        if self.units == 0:
            return n  # a first lease: whatever the fair split gives; the next renewal sizes it to the demand
        unit_rate = min(1e9 / (ns * n) for ns, _ in self._rates)
        want = max(self._least_units(), math.ceil(used * HEADROOM / unit_rate))
        if self._asking and used >= 0.9 * self.units * unit_rate:
            want = n
        return min(n, max(want, 1))

    def _demand(self) -> float:
        """Tokens granted and refused so far."""
        return float(self._engine._stats()[1]) + self._refused

    def _least_units(self) -> int:
        """The units whose burst the largest amount waiting now needs (0 if none waits)."""
        if not self._asking:
            return 0
        n = self._store.units
        return min(n, math.ceil(max(self._asking) * n / min(burst for _, burst in self._rates) - 1e-9))

