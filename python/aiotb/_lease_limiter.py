"""The engine of a ``Limiter`` over a ``RedisStore(..., lease=seconds)``: this process grants from a
share of the rates that it leases from Redis, with no round trip per grant.

The key's rates are counted in ``units`` equal parts, each 1/units of every rate and of every burst
(``_redis_lease.lua``). A limiter holds some of them: its own engine is set to their sum, and grants
from it as an in-process ``Limiter`` does (its queue, order, timeouts, cancellation). What the
holders hold sums to at most the whole, and units move between holders without making a token, so
the bound ``burst + rate * t`` holds over every holder of the key together.

A task of the limiter's loop (the keeper) renews the lease every third of its span, asking for the
units its demand needs (its grants and refusals since the last renewal, with a quarter more; all it
may get while its callers wait for more than it holds). The script answers with a max-min fair
split of the units over the holders' wants: a holder above its share gives the rest back at its
next call, a holder below it takes free units. A holder uses its units only until its lease ends by
its own clock, a span after it sent the call that renewed it (less a thousandth, for clocks that
run at different rates), which is never after the server's end of it: a grant its task resumes
with later than that is not used, and the task waits for the lease again. A holder that misses its
renewal (a stall, Redis away) loses its units at the server's end, empty.

A grant settled for more than it took (``asettle``) is a debt of the units held, which delays their
next grants. The key keeps what a holder owes (told with each renewal, and at once by a settle whose
debt would outlast the lease): a holder that lets go of its last unit, or whose lease lapses, leaves
its debt to the key, which charges it to the next holder of units as it renews.

What it costs against one round trip a grant: order is first come first served within a limiter
only; units move only when their holders renew, so a newcomer may wait up to a third of a span
for units that others hold, and an idle holder's share of the burst is not anyone else's until it
gives it back; a grant must fit in the holder's share of the burst, so a large amount waits until
its holder holds enough units; a pause (``penalize``) reaches the other holders as they renew."""

from __future__ import annotations

import asyncio
import collections
import math
import secrets
from typing import Any, Coroutine, Sequence

from . import _params
from ._capabilities import OTHER_LOOP, refused
from ._core import Bucket
from ._limiter import Limiter, serve
from ._store import StoreCorrupt, StoreError
from ._remote import OnItsLoop, on_its_loop, pause_ns
from ._reservation import BaseReservation
from ._store_redis import Lease, RedisStore

RENEW_EVERY = 1 / 3  # of a span: how often a holder renews its lease
STARVED_EVERY = 1 / 10  # of a span: how often a holder asks again while its callers need units it does not hold
MARGIN = 1e-3  # of a span: how much sooner than the server's a holder takes its lease to end
HEADROOM = 1.25  # the units a holder asks for: its demand, and this much more
_EMPTY = 2.0 ** -40  # of a burst: an engine's rate is set to a burst this small, and back, to empty it


class RedisLeaseLimiter(OnItsLoop, Limiter[RedisStore]):
    """``Limiter(..., store=RedisStore(redis, key, lease=seconds))``: see the module's doc. Its
    methods that may talk to Redis are coroutines, as ``RedisLimiter``'s: ``await
    limiter.try_acquire()``, ``has_capacity``, ``read_tokens``, ``penalize``, ``retry_after``;
    ``await limiter.aclose()`` gives its units back at once (else they come back as its lease ends)."""

    __slots__ = ("_store", "_store_rates", "_holder", "_units", "_fair_units", "_share_burst", "_valid_until", "_loop",
                 "_keeper", "_news", "_asking", "_refused", "_demand_mark", "_renewed_at", "_renew_at", "_credits", "_credited",
                 "_trip", "_told")

    def __init__(self, max_rate: float | None = None, time_period: float = 60, *,
                 burst: float | None = None, initial: float | None = None, fair: bool = True,
                 rates: Sequence[tuple[float, ...]] | None = None, store: RedisStore | None = None) -> None:
        if not isinstance(store, RedisStore) or store.lease is None:
            raise TypeError(f"store must be a RedisStore with lease=, got {store!r}")
        checked = _params.limiter_rates(max_rate, time_period, burst, initial, rates)
        self._setup(checked, None, _params.flag("fair", fair), smallest_first=False)
        self._store = store
        self._store_rates = store.bind_lease([r.engine() for r in checked])
        self._holder = secrets.token_hex(8)  # this limiter's name among the key's holders
        self._units = 0  # units held
        self._fair_units = 0  # the most units the script lets it keep
        self._share_burst = 0.0  # the most one grant from the units held may take
        self._valid_until = -math.inf  # loop time: the units held are used only before it
        self._loop: asyncio.AbstractEventLoop | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._news: asyncio.Future[Exception | None] | None = None  # set when the units held change, or Redis failed
        self._asking: collections.Counter[float] = collections.Counter()  # amounts of the callers waiting now
        self._refused = 0.0  # tokens try_acquire refused
        self._demand_mark = 0.0  # tokens granted and refused at the last renewal
        self._renewed_at = 0.0  # loop time of the last renewal
        self._renew_at = -math.inf  # loop time of the next: a caller that finds it past lets the keeper run first
        self._credits, self._credited = 0, 0.0  # how often, and how many tokens, units taken brought to the engine
        self._trip = asyncio.Lock()  # one call that moves units or a debt at a time, its answer applied in it
        self._told = 0.0  # what the key keeps of this limiter's debt, at least: it takes that if the lease lapses
        self._hold_units(0, empty=True)

    @property
    def store(self) -> RedisStore:
        """Where the rates are leased from."""
        return self._store

    @property
    def units(self) -> int:
        """The units of the rates this limiter holds now (of ``store.units``)."""
        return self._units

    # ---- the public API, on the units held ----

    async def __aenter__(self) -> None:
        loop = self._loop
        if (loop is not None and not self._asking and loop.time() < min(self._valid_until, self._renew_at)
                and self._share_burst >= 1.0 and asyncio.events._get_running_loop() is loop
                and Bucket.try_acquire(self, 1.0)):
            return
        await self._acquire(1.0, None)

    def acquire(self, amount: float = 1, timeout: float | None = None) -> Coroutine[Any, Any, None]:
        """Waits for ``amount`` tokens from the units held, leasing them first if need be; with
        ``timeout``, TimeoutError at once if the units held cannot grant them within it, or at the
        timeout if no units come."""
        x = self._amount(amount)
        return self._acquire(x, None if timeout is None else _params.non_negative("timeout", timeout))

    @on_its_loop
    async def atry_acquire(self, amount: float = 1) -> bool:
        """Takes ``amount`` tokens now if the units held have them (no round trip); False if not,
        or if others wait in this limiter's queue (fair)."""
        x = self._amount(amount)
        loop = self._check_loop()
        await self._renewal_turn(loop)
        if not self._asking and loop.time() < self._valid_until and x <= self._share_burst:
            if Bucket.try_acquire(self, x):
                return True
        self._keep()
        self._refused += x
        await asyncio.sleep(0)  # a caller that tries again at once lets the keeper run
        return False

    @on_its_loop
    async def ahas_capacity(self, amount: float = 1) -> bool:
        """Whether ``try_acquire(amount)`` would take the tokens now (takes nothing)."""
        x = self._amount(amount)
        loop = self._check_loop()
        return (not self._asking and loop.time() < self._valid_until and x <= self._share_burst
                and Bucket.has_capacity(self, x))

    @on_its_loop
    async def read_tokens(self) -> float:
        """Tokens the units held have now (0 without a lease)."""
        return self._held_tokens()

    def _held_tokens(self) -> float:
        """Tokens the units held have now (0 without a lease)."""
        loop = self._loop
        if loop is None or loop.time() >= self._valid_until:
            return 0.0
        return float(self._engine_tokens())

    @property
    def waiting(self) -> int:
        """Callers of this limiter waiting now."""
        return sum(self._asking.values())

    @on_its_loop
    async def apenalize(self, seconds: float) -> None:
        """Grants nothing for ``seconds``: here at once, and at every other holder of the key from
        its next renewal on (one round trip)."""
        span_ns = pause_ns(seconds)
        loop = self._check_loop()
        Limiter.pause_until(self._here(), loop.time() + span_ns / 1e9)  # its own units, at once
        await self._store_rates.pause(span_ns)

    @on_its_loop
    async def aclose(self) -> None:
        """Gives every unit back now, with the tokens they hold; the next call leases again."""
        keeper, self._keeper = self._keeper, None
        if keeper is not None and not keeper.done():
            keeper.cancel()
            try:
                await keeper
            except asyncio.CancelledError:
                pass
        await self._release()

    async def aset_rate(self, max_rate: float, time_period: float | None = None, *,
                        burst: float | None = None, index: int = 0) -> None:
        """Not here: the rates are the key's, split among its holders."""
        raise refused("set_rate / aset_rate", "RedisStore(lease=)")

    def _settle_cost(self, taken: float, used: float, held: bool) -> None:
        raise TypeError("settle() over a RedisStore may need a round trip to Redis: await limiter.asettle(taken, "
                        "used), or await slot.asettle(used)")

    @on_its_loop
    async def asettle(self, taken: float, used: float) -> None:
        """A grant of ``taken`` tokens cost ``used``, as ``Limiter.settle``, on the units held: less, given back
        to them; more, taken from them now as debt. A debt they would not have refilled by the end of the lease
        is told to the key (one round trip), which keeps it should the lease lapse; without a lease, the key
        takes it over and charges it to the next holder of units."""
        x, y = self._settle_amounts(taken, used)
        loop = self._check_loop()
        self._settle_engine(x, y)
        if self.waiting:
            self._settle()
        if y > x and self._owed(max(0.0, self._valid_until - loop.time())) > 0:
            async with self._trip:
                owed = self._owed(0)
                if await self._store_rates.owe(self._holder, owed):
                    self._drop_debt()
                else:
                    self._told = owed

    async def alimit_until(self, tokens: float, when: float) -> None:
        """Not over a leased RedisStore (see the table of stores, docs/guides/stores.md)."""
        raise refused("limit_until, follow / alimit_until, afollow", "RedisStore(lease=)")

    def reserve(self, amount: float = 1) -> Any:
        """Not over a leased RedisStore (see the table of stores, docs/guides/stores.md)."""
        raise refused("reserve / areserve", "RedisStore(lease=)")

    async def areserve(self, amount: float = 1) -> BaseReservation:
        """Not over a leased RedisStore (see the table of stores, docs/guides/stores.md)."""
        raise refused("reserve / areserve", "RedisStore(lease=)")

    def __repr__(self) -> str:
        return (f"<{type(self).__name__}(max_rate={self.max_rate!r}, time_period={self.time_period!r}, "
                f"burst={self.burst!r}, fair={self.fair!r}, store={self._store!r}) units={self._units} "
                f"waiting={self.waiting} at {id(self):#x}>")

    # ---- waiting ----

    @on_its_loop
    async def _acquire(self, amount: float, timeout: float | None) -> None:
        """Waits for amount from the units held; for units first while it holds too few, or none."""
        loop = self._check_loop()
        deadline = None if timeout is None else loop.time() + timeout
        self._asking[amount] += 1
        try:
            await self._renewal_turn(loop)
            while True:
                now = loop.time()
                if now < self._valid_until and amount <= self._share_burst:
                    try:
                        await Bucket.acquire(self, amount, None if deadline is None else max(0.0, deadline - now))
                    except ValueError:  # above the burst of the units held, since a lease was lost: wait for units
                        continue
                    if loop.time() < self._valid_until:
                        return
                    continue  # granted once the lease had ended: not used
                error = await self._lease_news(loop, deadline)
                if error is not None and (self._store.on_error == "raise" or not isinstance(error, StoreError)
                                          or isinstance(error, StoreCorrupt)):
                    raise error  # on_error stands in for a Redis that cannot answer, not for another definition
                if error is not None:
                    fallback = self._store.fallback
                    if fallback is not None:
                        await fallback.acquire(amount)
                    return
        finally:
            self._asking[amount] -= 1
            if not self._asking[amount]:
                del self._asking[amount]

    async def _renewal_turn(self, loop: asyncio.AbstractEventLoop) -> None:
        """Lets the keeper run once its renewal is due: callers granted at once never suspend, and would
        keep it from renewing."""
        if loop.time() >= self._renew_at and self._units:
            self._keep()
            await asyncio.sleep(0)

    async def _lease_news(self, loop: asyncio.AbstractEventLoop, deadline: float | None) -> Exception | None:
        """Waits until the units held change (None) or the store fails (its error); TimeoutError at deadline."""
        self._keep()
        if self._news is None or self._news.done():
            self._news = loop.create_future()
        news = asyncio.shield(self._news)
        if deadline is None:
            return await news
        async with asyncio.timeout_at(deadline):
            return await news

    def _tell(self, error: Exception | None) -> None:
        """Wakes the callers waiting for units."""
        if self._news is not None and not self._news.done():
            self._news.set_result(error)

    # ---- the lease ----

    def _keep(self) -> None:
        """Starts the keeper, unless it runs."""
        if self._keeper is None or self._keeper.done():
            assert self._loop is not None
            self._renewed_at = self._loop.time()
            self._demand_mark = self._demand()
            self._keeper = self._loop.create_task(self._keep_lease())
            self._keeper.add_done_callback(self._keeper_done)

    def _keeper_done(self, keeper: asyncio.Task[None]) -> None:
        """Tells the callers waiting for units of a keeper that failed, so that none waits for it forever."""
        error = None if keeper.cancelled() else keeper.exception()
        if isinstance(error, Exception):
            self._tell(error)

    async def _keep_lease(self) -> None:
        """Renews the lease while this limiter is used; gives the units back once it is not."""
        loop = self._loop
        assert loop is not None
        span = self._store.lease
        assert span is not None
        want = max(1, self._want(loop.time()))  # started by a caller
        while True:
            have = min(self._units, max(self._fair_units, self._least_units()))
            give_back = self._give_back(have) if have < self._units else 0.0
            try:
                lease = await self._renew(have, want, give_back)
            except Exception as error:  # StoreError, or ValueError for another definition: the callers' to raise
                self._tell(error)
                await self._sleep(span * STARVED_EVERY)
                want = self._want(loop.time())
                continue
            self._tell(None)
            if max(lease.share, self._least_units()) < lease.units:
                continue  # units to give back: at once, asking as before
            starved = self._asking and (lease.units < want or lease.units < self._least_units())
            await self._sleep(span * (STARVED_EVERY if starved else RENEW_EVERY))
            want = self._want(loop.time())
            if not want:
                await self._release_idle()
                if not self._asking:  # nobody came while the units went back: the keeper ends (no await
                    self._keeper = None  # between this check and its end, so a newcomer starts another)
                    return
                want = self._want(loop.time())

    async def _sleep(self, delay: float) -> None:
        """The keeper's wait until its next call."""
        assert self._loop is not None
        self._renew_at = self._loop.time() + delay
        await asyncio.sleep(delay)

    async def _release_idle(self) -> None:
        """Gives the units back, once the limiter is not used."""
        try:
            await self._release()
        except StoreError:
            pass  # they come back as the lease ends

    async def _release(self) -> None:
        """Gives every unit back, with their tokens, and a debt to the key (nothing to do with neither)."""
        async with self._trip:
            owed = self._owed(0)
            if self._units or owed:
                await self._store_rates.release_units(self._holder, self._give_back(0), owed)
                self._drop_debt()

    async def _renew(self, have: int, want: int, give_back: float) -> Lease:
        """One renewal: keeps have units, gives the others back with give_back of their bursts, asks for want,
        tells what this limiter owes (keeping no unit, the key takes it over), and holds what the script
        answered."""
        assert self._loop is not None
        async with self._trip:
            sent = self._loop.time()
            owed = self._owed(0)
            lease = await self._store_rates.lease_units(self._holder, have, want, give_back, owed)
            if lease.fresh:  # the key took what it was told this limiter owed, as the lease it had lapsed
                self._drop_debt(self._told)
            elif have == 0:  # given to the key with the last unit
                self._drop_debt()
            self._told = 0.0 if lease.fresh or have == 0 else owed
            self._hold_lease(lease, sent, self._loop.time())
        return lease

    def _hold_lease(self, lease: Lease, sent: float, received: float) -> None:
        """Sets the engine to the units the script answered, with the tokens they brought (below 0, the key's
        debt, charged to them); the lease ends a span after it was sent."""
        span = self._store.lease
        assert span is not None
        self._hold_units(lease.units, empty=lease.fresh or self._units == 0)
        if lease.units and lease.tokens > 0:
            self._credit(lease.tokens * (1 - 1e-12))  # less what doubles may have rounded up
        elif lease.tokens < 0:
            self._settle_engine(0.0, -lease.tokens)  # the key's debt, taken now
            self._told -= lease.tokens
            self._credited += lease.tokens  # which the engine counts as tokens granted: _stats() takes them out
        self._units, self._fair_units = lease.units, lease.share
        self._valid_until = sent + span * (1 - MARGIN) if lease.units else -math.inf
        if lease.pause_ns:
            Bucket._pause_until(self, received + lease.pause_ns / 1e9)
        self._settle()

    def _hold_units(self, units: int, *, empty: bool) -> None:
        """Sets the engine to units of every rate (to one, idle, for none), keeping its tokens (at most
        the new bursts) unless empty."""
        n = self._store.units
        k = max(1, units)
        for i, r in enumerate(self._rates):
            ns, burst = r.ns_per_token * n / k, r.burst * k / n
            if empty:
                Bucket._set_rate(self, i, ns, burst * _EMPTY)
            Bucket._set_rate(self, i, ns, burst)
        self._share_burst = min(r.burst for r in self._rates) * units / n
        self._units = units

    def _credit(self, tokens: float) -> None:
        """Gives tokens to the engine (which counts them as a grant given back: _stats() adds it back)."""
        Bucket._refund(self, tokens)
        self._credits += 1
        self._credited += tokens

    def _drop_debt(self, most: float = math.inf) -> None:
        """Forgets what the units held owe, up to most: the key has taken it over."""
        owed = min(most, self._owed(0))
        if owed > 0:
            self._credit(owed)
        self._told = 0.0

    def _settle_engine(self, taken: float, used: float) -> None:
        """Settles a grant of taken that cost used on the engine, whose grants may take less than taken now
        (units given back since): in steps of half what one may take. ValueError for a debt past the engine's
        range, nothing changed."""
        step = min(r.burst for r in self._rates) * max(1, self._units) / self._store.units / 2
        change = used - taken
        while change < 0:
            part = max(change, -step)
            Bucket._settle_cost(self, step, step + part, False)
            change -= part
        if change > 0:
            Bucket._settle_cost(self, step, step + change, False)

    def _give_back(self, keep: int) -> float:
        """Keeps keep units of those held, and returns what the others hold, as a share of a unit's burst
        (0 for several rates, whose tokens differ)."""
        held, tokens = self._units, float(self._engine_tokens())
        self._hold_units(keep, empty=keep == 0)
        if keep == 0:
            self._valid_until = -math.inf
        if len(self._rates) > 1 or held == keep:
            return 0.0
        unit_burst = self._rates[0].burst / self._store.units
        return max(0.0, min(1.0, (tokens - keep * unit_burst) / (held - keep) / unit_burst))

    def _want(self, now: float) -> int:
        """The units to ask for: the demand since the last renewal, with headroom; all there are while
        callers wait on the units held; 0 when nothing was asked since and nobody waits."""
        n = self._store.units
        demand = self._demand()
        used = (demand - self._demand_mark) / max(now - self._renewed_at, 1e-3)
        self._demand_mark, self._renewed_at = demand, now
        if used == 0 and not self._asking:
            return 0
        if self._units == 0:
            return n  # a first lease: whatever the fair split gives; the next renewal sizes it to the demand
        unit_rate = min(1e9 / (r.ns_per_token * n) for r in self._rates)
        want = max(self._least_units(), math.ceil(used * HEADROOM / unit_rate))
        if self._asking and used >= 0.9 * self._units * unit_rate:
            want = n
        return min(n, max(want, 1))

    def _demand(self) -> float:
        """Tokens granted and refused so far."""
        return float(self._stats()[1]) + self._refused

    def _least_units(self) -> int:
        """The units whose burst the largest amount waiting now needs (0 if none waits)."""
        if not self._asking:
            return 0
        most = max(self._asking)
        return min(self._store.units, math.ceil(most * self._store.units / min(r.burst for r in self._rates) - 1e-9))

    # ---- bookkeeping ----

    def _stats(self) -> tuple[int, float, int, float, float, int, int]:
        """The engine's statistics, but for the tokens that units brought (which it took for refunds)."""
        granted, tokens, waits, total, most, cancelled, timeouts = super()._stats()
        return ((granted + self._credits) % 2 ** 64, tokens + self._credited, waits, total, most,
                cancelled - self._credits, timeouts)  # the C engine's count wraps as an unsigned 64-bit integer

    def _amount(self, value: object) -> float:
        """value as an amount one grant of the key's rates may take, or TypeError/ValueError."""
        x = _params.positive("amount", value)
        if x > min(r.burst for r in self._rates):
            raise self._over_capacity(value)
        return x

    def _check_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, the one this limiter serves; RuntimeError on another."""
        loop = asyncio.get_running_loop()
        if self._loop is None or self._loop.is_closed():
            if self._loop is not None:  # its lease lapsed with its loop: its units and callers are not this loop's
                self._keeper, self._news, self._valid_until = None, None, -math.inf
                self._asking.clear()
                self._hold_units(0, empty=True)
            self._loop = loop
        elif loop is not self._loop:
            raise RuntimeError(OTHER_LOOP)
        return loop


serve("RedisStore(lease=)", "Limiter", RedisLeaseLimiter)
