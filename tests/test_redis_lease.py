"""``Limiter(..., store=RedisStore(..., lease=seconds))`` against a real redis-server: the script's split of the
units (driven on the client's clock, exact), then limiters that hold units and grant from them on real loops:
the bound over every holder together at the instants the tasks resumed, the fair split, units handed over with
their tokens, a lease that lapses, Redis failing, pauses, timeouts and bad input."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import time
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, TypeVar, cast

import aiotb
import pytest
from aiotb import _store_redis
from aiotb._store_redis import RedisLease
from conftest import ClientClock
from redis_workers import lease_take_for
from spawned import excess, run_workers

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]
KEY = "leased"
WITHIN = 5.0  # s: the most any single wait here may take before the test fails instead of hanging


def leased(lib: Any, url: str, *args: Any, key: str = KEY, lease: float = 0.3, units: int = 16,
           on_error: Any = "raise", **kwargs: Any) -> Any:
    """A Limiter of lib (an engine's namespace, or the aiotb package) over a leased RedisStore of url."""
    package = getattr(lib, "package", lib)
    store = package.RedisStore(url, key, lease=lease, units=units, on_error=on_error)
    return package.Limiter(*args, store=store, **kwargs)


async def closed(*limiters: Any) -> None:
    """Gives every limiter's units back and closes its client."""
    for limiter in limiters:
        await limiter.aclose()
        await limiter.store.redis.aclose()


# ---- the script: the split of the units, on the client's clock ----

@pytest.fixture
def script(client_clock: ClientClock, redis_url: str) -> SimpleNamespace:
    """A leased store over 8 units of 100/s burst 8 (a unit: 12.5/s, burst 1) for 1 s, on the test's clock."""
    store = aiotb.RedisStore(redis_url, KEY, lease=1.0, units=8)
    store._client_clock = True
    definition = _store_redis.lease_definition(8, 1.0, [(1e7, 8.0, 8.0)])
    return SimpleNamespace(store=store, clock=client_clock, definition=definition)


def test_units_are_split_max_min_fairly_over_the_wants(run: Run[None], script: SimpleNamespace) -> None:
    async def main() -> None:
        s, d = script.store, script.definition
        a = await RedisLease(s, d).lease_units("a", 0, 8, 0.0, 0.0)
        assert (a.units, a.share, a.fresh, a.tokens) == (8, 8, True, 8.0)  # a new key: every unit full
        b = await RedisLease(s, d).lease_units("b", 0, 8, 0.0, 0.0)
        assert (b.units, b.share) == (0, 4)  # its share is half, but a holds every unit until it gives them back
        a = await RedisLease(s, d).lease_units("a", 8, 8, 0.0, 0.0)
        assert (a.units, a.share, a.fresh) == (8, 4, False)
        a = await RedisLease(s, d).lease_units("a", 4, 8, 0.5, 0.0)  # gives 4 back, each holding half its burst
        assert (a.units, a.share) == (4, 4)
        b = await RedisLease(s, d).lease_units("b", 0, 8, 0.0, 0.0)
        assert (b.units, b.share, b.fresh, b.tokens) == (4, 4, False, 2.0)
        c = await RedisLease(s, d).lease_units("c", 0, 1, 0.0, 0.0)  # wants one: gets it when one is free, the others split the rest
        assert (c.units, c.share) == (0, 1)
        a = await RedisLease(s, d).lease_units("a", 4, 8, 0.0, 0.0)
        assert (a.units, a.share) == (4, 3)
        await s.redis.aclose()

    run(main())


def test_free_units_refill_and_the_fullest_go_first(run: Run[None], script: SimpleNamespace) -> None:
    async def main() -> None:
        s, d, clock = script.store, script.definition, script.clock
        await RedisLease(s, d).lease_units("a", 0, 8, 0.0, 0.0)
        a = await RedisLease(s, d).lease_units("a", 8, 2, 0.0, 0.0)
        assert (a.units, a.share) == (8, 2)  # told to keep 2: it gives the rest back at its next call
        await RedisLease(s, d).lease_units("a", 2, 2, 0.0, 0.0)  # 6 back, empty, at START
        clock.us += 40_000  # 40 ms: each free unit refilled 0.5 token (12.5/s)
        a = await RedisLease(s, d).lease_units("a", 0, 0, 0.0, 0.0)  # the last 2 back, empty: a holds nothing and wants nothing
        assert (a.units, a.share) == (0, 0)
        assert b"a," not in await s.redis.hget(s.redis_key, "H")
        clock.us += 40_000
        b = await RedisLease(s, d).lease_units("b", 0, 7, 0.0, 0.0)
        assert b.units == 7
        assert b.tokens == pytest.approx(6 * 1.0 + 0.5)  # the six that refilled 80 ms (1 token, the burst), then one
        await s.redis.aclose()

    run(main())


def test_a_holder_written_before_debts_keeps_its_units(run: Run[None], script: SimpleNamespace) -> None:
    """A key an earlier script wrote names each holder without a debt: it owes none, and its units stay its own."""
    async def main() -> None:
        s, d = script.store, script.definition
        await RedisLease(s, d).lease_units("a", 0, 8, 0.0, 0.0)
        entry = (await s.redis.hget(s.redis_key, "H")).decode()
        await s.redis.hset(s.redis_key, "H", entry.rsplit(",", 1)[0])  # "id,units,want,end", as before
        b = await RedisLease(s, d).lease_units("b", 0, 8, 0.0, 0.0)
        assert b.units == 0 and b.tokens == 0  # a holds all 8 still, and no debt was charged
        a = await RedisLease(s, d).lease_units("a", 8, 8, 0.0, 0.0)
        assert (a.units, a.fresh) == (8, False)
        await s.redis.aclose()

    run(main())


def test_a_lease_not_renewed_gives_its_units_back_empty_at_its_end(run: Run[None], script: SimpleNamespace) -> None:
    async def main() -> None:
        s, d, clock = script.store, script.definition, script.clock
        await RedisLease(s, d).lease_units("a", 0, 8, 0.0, 0.0)
        clock.us += 999_999
        b = await RedisLease(s, d).lease_units("b", 0, 8, 0.0, 0.0)
        assert b.units == 0  # a's lease ends 1 s after its call: not yet
        clock.us += 1 + 40_000  # 40 ms after a's end
        b = await RedisLease(s, d).lease_units("b", 0, 8, 0.0, 0.0)
        assert (b.units, b.tokens) == (8, pytest.approx(8 * 0.5))  # empty at a's end, refilled 40 ms since
        a = await RedisLease(s, d).lease_units("a", 8, 8, 0.0, 0.0)
        assert (a.units, a.fresh) == (0, True)  # a learns its lease ended
        await s.redis.aclose()

    run(main())


def test_release_gives_every_unit_back_with_its_tokens(run: Run[None], script: SimpleNamespace) -> None:
    async def main() -> None:
        s, d = script.store, script.definition
        await RedisLease(s, d).lease_units("a", 0, 8, 0.0, 0.0)
        await RedisLease(s, d).release_units("a", 0.25, 0.0)
        b = await RedisLease(s, d).lease_units("b", 0, 8, 0.0, 0.0)
        assert (b.units, b.tokens) == (8, 8 * 0.25)
        await s.redis.aclose()

    run(main())


def test_a_pause_reaches_every_holder_as_it_renews(run: Run[None], script: SimpleNamespace) -> None:
    async def main() -> None:
        s, d, clock = script.store, script.definition, script.clock
        await RedisLease(s, d).lease_units("a", 0, 8, 0.0, 0.0)
        assert await RedisLease(s, d).pause(300_000_000) == 300_000_000
        clock.us += 100_000
        a = await RedisLease(s, d).lease_units("a", 8, 8, 0.0, 0.0)
        assert a.pause_ns == 200_000_000
        await s.redis.aclose()

    run(main())


def test_the_key_expires_once_no_unit_is_held_and_all_are_full(run: Run[None], script: SimpleNamespace) -> None:
    """On the server's clock, which the key's expiry counts (the scripts on a test's clock keep it a minute
    more, the test's clock moving apart from the server's)."""
    async def ttl_after(call: Awaitable[object]) -> tuple[int, float]:
        """The key's ms to live once call is done, and the ms from call's start until that was read (the most
        the server's clock may have moved between the two)."""
        start = time.monotonic()
        await call
        ttl = await script.store.redis.pttl(script.store.redis_key)
        return ttl, (time.monotonic() - start) * 1000

    async def main() -> None:
        s, d = script.store, script.definition
        s._client_clock = False
        try:
            ttl, spent = await ttl_after(RedisLease(s, d).lease_units("a", 0, 8, 0.0, 0.0))
            assert 1079 - spent <= ttl <= 1082, spent  # the lease's end, and the units' refill from empty then (80 ms)
            ttl, spent = await ttl_after(RedisLease(s, d).release_units("a", 0.0, 0.0))  # empty units: each full again
            assert 79 - spent <= ttl <= 82, spent                                     # 1 token / 12.5 per s later
        finally:
            await s.redis.aclose()

    run(main())


# ---- limiters over a leased store ----

def test_a_leased_store_makes_a_lease_limiter(lib: SimpleNamespace, redis_url: str) -> None:
    limiter = leased(lib, redis_url, 10, 1, burst=4)
    assert isinstance(limiter, lib.package.RedisLeaseLimiter) and isinstance(limiter, lib.Limiter)
    assert (limiter.max_rate, limiter.burst, limiter.units, limiter._engine_tokens()) == (10, 4, 0, 0)
    with pytest.raises(TypeError, match="tokens over a RedisStore: these need a round trip to Redis"):
        limiter.tokens
    assert (limiter.store.lease, limiter.store.units) == (0.3, 16)
    assert "lease=0.3, units=16" in repr(limiter.store) and "units=0" in repr(limiter)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"lease": 0.01}, ValueError, "lease must be from 0.05 to 3600 seconds, got 0.01"),
    ({"lease": math.nan}, ValueError, "lease must be from"),
    ({"lease": "1"}, TypeError, "lease must be a real number, got '1'"),
    ({"lease": 1, "units": 0}, ValueError, "units must be from 1 to 1024, got 0"),
    ({"lease": 1, "units": 2.0}, TypeError, "units must be an int, got 2.0"),
    ({"lease": 1, "units": True}, TypeError, "units must be an int, got True"),
])
def test_bad_lease_parameters_are_refused(redis_url: str, kwargs: dict[str, Any], error: type[Exception],
                                          match: str) -> None:
    with pytest.raises(error, match=match):
        aiotb.RedisStore(redis_url, KEY, **kwargs)


def test_only_limiter_takes_a_leased_store(redis_url: str) -> None:
    store = aiotb.RedisStore(redis_url, KEY, lease=1)
    with pytest.raises(TypeError, match="WindowLimiter takes no leased RedisStore"):
        aiotb.WindowLimiter(10, 1, store=store)
    with pytest.raises(TypeError, match="AsyncLimiter is aiolimiter.s limiter"):
        aiotb.AsyncLimiter(10, 1, store=store)
    with pytest.raises(TypeError, match="KeyedLimiter takes no leased RedisStore"):
        aiotb.KeyedLimiter(10, 1, store=store)["user"]
    with pytest.raises(TypeError, match="store must be a RedisStore with lease="):
        aiotb.RedisLeaseLimiter(10, 1, store=aiotb.RedisStore(redis_url, KEY))


def test_what_a_leased_limiter_cannot_do_is_refused(redis_url: str) -> None:
    limiter = leased(aiotb, redis_url, 10, 1)
    for call, match in [(lambda: limiter.set_rate(5), r"await limiter\.aset_rate"),  # type: ignore[misc]
                        (lambda: limiter.try_acquire(), r"await atry_acquire"),  # type: ignore[misc]
                        (lambda: limiter.pause_until(1.0), "apause_until"),  # type: ignore[misc]
                        (lambda: limiter.reserve(), "a reservation would outlive")]:  # type: ignore[misc]
        with pytest.raises(TypeError, match=match):
            call()
    with pytest.raises(TypeError, match="keeps the rates the key was made with"):
        asyncio.run(limiter.aset_rate(5))


def test_bad_amounts_and_timeouts_are_refused_and_take_nothing(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        limiter = leased(aiotb, redis_url, 10, 1, burst=4)
        for amount, error in [(0, ValueError), (-1, ValueError), (math.nan, ValueError), (4.5, ValueError),
                              ("1", TypeError), (True, TypeError)]:
            with pytest.raises(error, match="amount"):
                await limiter.acquire(amount)
            with pytest.raises(error, match="amount"):
                await limiter.atry_acquire(amount)
        with pytest.raises(ValueError, match="timeout must be None or >= 0, got -1"):
            await limiter.acquire(1, timeout=-1)
        assert limiter.units == 0 and limiter.stats().granted == 0 and not await limiter.store.redis.exists(
            limiter.store.redis_key)
        await closed(limiter)

    run(main())


def test_clients_must_agree_on_the_lease(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        plain = aiotb.Limiter(10, 1, store=aiotb.RedisStore(redis_url, KEY))
        await plain.acquire()
        lease = leased(aiotb, redis_url, 10, 1)
        with pytest.raises(ValueError, match=r"holds a limiter of rates \[10/s burst 10 initial 10\], not rates "
                                             r"\[10/s burst 10 initial 10\] leased in 16 units for 0.3 s"):
            await lease.acquire()
        other = leased(aiotb, redis_url, 10, 1, key="other")
        await other.acquire()
        plain_other = aiotb.Limiter(10, 1, store=aiotb.RedisStore(redis_url, "other"))
        with pytest.raises(ValueError, match=r"leased in 16 units for 0.3 s, not rates"):
            await plain_other.acquire()
        await closed(lease, other)
        await plain.store.redis.aclose()
        await plain_other.store.redis.aclose()

    run(main())


def test_a_lone_limiter_takes_every_unit_and_its_burst_at_once(lib: SimpleNamespace, run: Run[None],
                                                              redis_url: str) -> None:
    async def main() -> None:
        limiter = leased(lib, redis_url, 10, 1, burst=5)
        for _ in range(5):
            await limiter.acquire()
        # the first waited for the lease only; the burst came with the units: no grant waited for refill
        assert limiter.stats().waits == 1
        assert limiter.units == 16 and limiter.stats().granted == 5 and limiter.stats().granted_tokens == 5
        assert not await limiter.atry_acquire()
        assert await limiter.read_tokens() < 1
        await closed(limiter)

    run(main())


def test_a_first_lease_asks_for_every_unit_whichever_call_starts_it(lib: SimpleNamespace, run: Run[None],
                                                                    redis_url: str) -> None:
    async def main() -> None:
        limiter = leased(lib, redis_url, 10, 1, burst=5)
        assert not await limiter.atry_acquire()  # no lease yet: refused at once, and one asked for
        for _ in range(200):
            if limiter.units:
                break
            await asyncio.sleep(0.01)
        assert limiter.units == 16  # alone on the key: its fair share is every unit, as for a first acquire()
        assert await limiter.atry_acquire()
        await closed(limiter)

    run(main())


def test_the_bound_holds_over_every_holder_as_units_move(run: Run[None], redis_url: str) -> None:
    """Four limiters on one key, coming and going, with tasks that take a token each as fast as they may: at the
    instants the tasks resume, at most burst + rate * t in any interval, and the rate is used."""
    rate, burst = 200.0, 10.0

    async def main() -> list[int]:
        limiters = [leased(aiotb, redis_url, rate, 1, burst=burst, lease=0.3) for _ in range(4)]
        used: list[int] = []
        start = time.monotonic()

        async def take(limiter: Any, begin: float, end: float, tasks: int) -> None:
            await asyncio.sleep(begin)

            async def task() -> None:
                while time.monotonic() - start < end:
                    async with limiter:
                        used.append(time.monotonic_ns())

            await asyncio.gather(*(task() for _ in range(tasks)))
            if end < 1.5:
                await limiter.aclose()  # gives its units back, with their tokens

        await asyncio.gather(take(limiters[0], 0.0, 1.6, 5), take(limiters[1], 0.0, 0.7, 3),
                             take(limiters[2], 0.35, 1.6, 1), take(limiters[3], 0.8, 1.3, 8))
        await closed(*limiters)
        return used

    used = run(main())
    assert excess(used, 1e9 / rate, burst) <= 1e-6
    span = (max(used) - min(used)) / 1e9
    assert len(used) >= 0.8 * (burst + rate * span)  # the rate is used: units move to who asks for them


def test_two_busy_holders_end_up_with_half_the_units_each(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        a, b = (leased(aiotb, redis_url, 400, 1, burst=8, lease=0.3) for _ in range(2))
        stop = time.monotonic() + 1.0
        granted = {id(a): 0, id(b): 0}

        async def busy(limiter: Any) -> None:
            async def task() -> None:
                while time.monotonic() < stop:
                    async with limiter:
                        granted[id(limiter)] += 1

            await asyncio.gather(*(task() for _ in range(4)))

        async def late_b() -> None:
            await asyncio.sleep(0.3)
            await busy(b)

        await asyncio.gather(busy(a), late_b())
        assert (a.units, b.units) == (8, 8)
        assert granted[id(b)] > 0.25 * granted[id(a)]
        await closed(a, b)

    run(main())


def test_a_newcomer_gets_units_within_a_renewal_of_the_holder(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        a, b = (leased(aiotb, redis_url, 400, 1, burst=8, lease=0.3) for _ in range(2))
        stop = asyncio.Event()

        async def busy() -> None:
            while not stop.is_set():
                async with a:
                    pass

        hog = asyncio.ensure_future(asyncio.gather(*(busy() for _ in range(4))))
        try:
            # a renewal sizes a's lease to the demand it measured: all 16 units once its callers keep it busy
            await asyncio.wait_for(_until(lambda: a.units == 16), WITHIN)
            asked = time.monotonic()
            await asyncio.wait_for(b.acquire(), WITHIN)
            waited = time.monotonic() - asked
            assert waited < 0.6  # a renews within a third of the span and gives back; b asks again: not a's whole run
        finally:
            stop.set()
            await hog
            await closed(a, b)

    run(main())


async def _until(condition: Callable[[], bool]) -> None:
    """Returns once condition() holds, looking every 10 ms."""
    while not condition():
        await asyncio.sleep(0.01)


def test_units_given_back_carry_their_tokens(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        a = leased(aiotb, redis_url, 10, 1, burst=6, lease=0.3)
        await a.acquire()
        await a.aclose()  # 5 tokens left, given back
        b = leased(aiotb, redis_url, 10, 1, burst=6, lease=0.3)
        await b.acquire(5)
        assert b.stats().wait_time_max < 0.25  # for the lease: the 5 came with the units, no refill (0.5 s)
        assert not await b.atry_acquire()
        await closed(a, b)

    run(main())


async def _owed_in_redis(limiter: Any) -> tuple[float, dict[str, float]]:
    """What the key owes, and what each holder it keeps told it owes."""
    kept = await limiter.store.redis.hmget(limiter.store.redis_key, "o", "H")
    holders = {word.split(",")[0]: float(word.split(",")[4]) for word in (kept[1] or b"").decode().split()}
    return float(kept[0] or 0), holders


def test_settle_gives_back_to_the_units_held_and_a_debt_stays_with_the_key(lib: SimpleNamespace, run: Run[None],
                                                                          redis_url: str) -> None:
    """6 per 1,000 s (refill negligible here): a grant of 6 that cost 2 gives 4 back; a slot of 3 that cost 1 gives
    2 back (3 left); a grant of 2 that cost 8 owes 3, which the key keeps with A's lease (it outlasts it), takes over
    when A gives its units back, and charges to B, the next holder of units."""
    async def main() -> None:
        a = leased(lib, redis_url, 6, 1000, burst=6)
        await a.acquire(6)
        await a.asettle(6, 2)
        assert await a.read_tokens() == pytest.approx(4, abs=0.05)
        async with a.slot(3) as slot:
            pass
        await slot.asettle(1)
        assert await a.read_tokens() == pytest.approx(3, abs=0.05)
        with pytest.raises(TypeError, match=r"await limiter\.asettle"):
            a.settle(2, 8)  # type: ignore[misc]
        await a.asettle(2, 8)
        assert await a.read_tokens() == 0 and a._owed(0) == pytest.approx(3, abs=0.05)
        owed, holders = await _owed_in_redis(a)
        assert owed == 0 and holders[a._keeper.holder] == pytest.approx(3, abs=0.05)
        await a.aclose()  # its units back, its debt to the key
        assert a._owed(0) == 0
        owed, holders = await _owed_in_redis(a)
        assert owed == pytest.approx(3, abs=0.05) and not holders
        b = leased(lib, redis_url, 6, 1000, burst=6)
        assert not await b.atry_acquire()
        await _until(lambda: b.units > 0)
        assert b._owed(0) == pytest.approx(3, abs=0.05) and not await b.atry_acquire(0.5)
        owed, holders = await _owed_in_redis(b)
        assert owed == 0 and holders[b._keeper.holder] == pytest.approx(3, abs=0.05)
        with pytest.raises(ValueError, match="taken must not exceed burst"):
            await b.asettle(7, 1)
        assert b._owed(0) == pytest.approx(3, abs=0.05)
        await closed(a, b)

    run(main())


def test_settle_passes_the_units_burst_in_one_step(lib: SimpleNamespace, run: Run[None], redis_url: str) -> None:
    """6 per 1,000 s, two holders: A's share of the units holds a burst of less than 6, yet a grant of 6 (the
    key's burst) settles at once, on both engines: at 1, its units fill (no more); at 9, 3 more are taken from them
    (a debt for what they lack)."""
    async def main() -> None:
        a = leased(lib, redis_url, 6, 1000, burst=6)
        b = leased(lib, redis_url, 6, 1000, burst=6)
        await a.acquire(1)
        assert a.units == 16
        waiting = asyncio.create_task(b.acquire(1))
        await asyncio.wait_for(_until(lambda: 0 < a.units < 16 and waiting.done()), 5)
        units_burst = 6 * a.units / 16
        await a.asettle(6, 1)
        assert await a.read_tokens() == pytest.approx(units_burst, abs=0.05) and a._owed(0) == 0
        await a.asettle(6, 9)
        left = units_burst - 3
        assert await a.read_tokens() == pytest.approx(max(left, 0), abs=0.05)
        assert a._owed(0) == pytest.approx(max(-left, 0), abs=0.05)
        await closed(a, b)

    run(main())


def test_a_debt_outlives_a_lease_that_lapses(run: Run[None], redis_url: str) -> None:
    """A owes 3 and then cannot renew: its lease lapses at the server, which keeps A's debt for the key and
    charges it to B; A, back, leases afresh without it (the key had it)."""
    async def main() -> None:
        store = Unreachable(redis_url, KEY, lease=0.3, units=16)
        a = aiotb.Limiter(6, 1000, burst=6, store=store)
        await a.acquire(6)
        await a.asettle(6, 9)
        store.down = True
        await asyncio.sleep(0.45)  # past the lease's end at the server
        b = leased(aiotb, redis_url, 6, 1000, burst=6)
        assert not await b.atry_acquire()
        await _until(lambda: b.units > 0)
        assert b._owed(0) == pytest.approx(3, abs=0.05)
        await b.aclose()
        store.down = False
        assert not await a.atry_acquire()  # its units (16, as it last knew) are past their lease: it renews
        loop = asyncio.get_running_loop()
        await _until(lambda: a._keeper.valid_until > loop.time())
        assert a._owed(0) == pytest.approx(3, abs=0.05)  # B's debt, left to the key: charged to A, once
        owed, holders = await _owed_in_redis(a)
        assert owed == 0 and holders[a._keeper.holder] == pytest.approx(3, abs=0.05)
        await closed(a, b)

    run(main())


def test_a_lease_not_renewed_is_not_used_after_its_end(run: Run[None], redis_url: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A holder that cannot renew grants nothing past its lease's end; its waiters get StoreUnavailable."""
    async def main() -> None:
        limiter = leased(aiotb, redis_url, 100, 1, burst=5, lease=0.3)
        await limiter.acquire()
        renewed_until = limiter._keeper.valid_until

        async def down(*args: Any) -> Any:
            raise aiotb.StoreUnavailable("down")

        monkeypatch.setattr(RedisLease, "lease_units", down)
        used: list[float] = []
        with pytest.raises(aiotb.StoreUnavailable, match="down"):
            async with asyncio.timeout(WITHIN):
                while True:
                    await limiter.acquire()
                    used.append(asyncio.get_running_loop().time())
        assert used and max(used) < renewed_until
        assert asyncio.get_running_loop().time() >= renewed_until
        assert not await limiter.atry_acquire() and await limiter.read_tokens() == 0
        monkeypatch.undo()
        await closed(limiter)

    run(main())


class Unreachable(aiotb.RedisStore):
    """A leased store whose lease calls fail while ``down`` is set."""

    down = False

    def bind_lease(self, rates: Any) -> RedisLease:
        return UnreachableLease(self, super().bind_lease(rates).definition)


class UnreachableLease(RedisLease):
    """The lease of an Unreachable store: its calls fail while the store is ``down``."""

    async def lease_units(self, *args: Any) -> Any:
        if getattr(self.store, "down"):
            raise aiotb.StoreUnavailable("down")
        return await super().lease_units(*args)


def test_tokens_refilled_while_a_lease_had_lapsed_are_not_used(run: Run[None], redis_url: str) -> None:
    """A spends its burst and then cannot renew: its lease ends, B takes its units and spends them, and leaves.
    A's engine refilled meanwhile, but those tokens were B's to spend: when A leases again it starts from what
    the units bring, and the bound holds over both."""
    rate, burst = 20.0, 10.0

    async def main() -> list[int]:
        store = Unreachable(redis_url, KEY, lease=0.3)
        a = aiotb.Limiter(rate, 1, burst=burst, store=store)
        b = leased(aiotb, redis_url, rate, 1, burst=burst, lease=0.3)
        used: list[int] = []
        await a.acquire(burst)
        used += [time.monotonic_ns()] * int(burst)
        store.down = True
        start = time.monotonic()

        async def take(limiter: Any, end: float) -> None:
            while time.monotonic() - start < end:
                try:
                    async with limiter:
                        used.append(time.monotonic_ns())
                except aiotb.StoreUnavailable:
                    await asyncio.sleep(0.01)

        async def b_comes_and_goes() -> None:
            await asyncio.sleep(0.35)  # after a's lease ended
            await asyncio.gather(*(take(b, 1.1) for _ in range(3)))
            await b.aclose()
            store.down = False

        await asyncio.gather(b_comes_and_goes(), *(take(a, 1.6) for _ in range(3)))
        await closed(a, b)
        return used

    used = run(main())
    assert excess(used, 1e9 / rate, burst) <= 1e-6


def test_on_error_allow_or_a_fallback_stands_in_without_a_lease(run: Run[None], redis_url: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        fallback = aiotb.Limiter(1, 1, burst=1)
        allowing = leased(aiotb, redis_url, 10, 1, on_error="allow")
        falling = leased(aiotb, redis_url, 10, 1, on_error=fallback, key="other")

        async def down(*args: Any) -> Any:
            raise aiotb.StoreUnavailable("down")

        for limiter in (allowing, falling):
            monkeypatch.setattr(RedisLease, "lease_units", down)
            await asyncio.wait_for(limiter.acquire(), WITHIN)
            assert limiter.units == 0
        assert fallback.tokens < 1  # the fallback's token was taken
        monkeypatch.undo()
        await closed(allowing, falling)

    run(main())


def test_a_timeout_without_units_fails_at_its_deadline_and_takes_nothing(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        a, b = (leased(aiotb, redis_url, 400, 1, burst=8, lease=1.0) for _ in range(2))
        stop = time.monotonic() + 0.5

        async def busy() -> None:
            while time.monotonic() < stop:
                async with a:
                    pass

        hog = asyncio.ensure_future(asyncio.gather(*(busy() for _ in range(4))))
        await asyncio.sleep(0.05)
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            await b.acquire(1, timeout=0.05)
        assert 0.05 - 0.001 <= time.monotonic() - start < 0.05 + 0.45  # uvloop fires up to 0.5 ms early
        assert b.stats().granted == 0 and b.waiting == 0
        await hog
        await closed(a, b)

    run(main())


def test_a_cancelled_waiter_leaves_nothing_behind(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        limiter = leased(aiotb, redis_url, 2, 1, burst=1)
        await limiter.acquire()
        waiter = asyncio.ensure_future(limiter.acquire())
        await asyncio.sleep(0.05)
        assert limiter.waiting == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert limiter.waiting == 0 and limiter.stats().granted == 1
        await closed(limiter)

    run(main())


def test_penalize_pauses_here_at_once_and_other_holders_as_they_renew(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        a, b = (leased(aiotb, redis_url, 100, 1, burst=10, lease=0.3) for _ in range(2))
        await a.acquire()
        await b.acquire()
        loop = asyncio.get_running_loop()
        stop = loop.time() + 1.2
        granted: dict[int, list[float]] = {id(a): [], id(b): []}

        async def take(limiter: Any) -> None:
            while loop.time() < stop:
                async with limiter:
                    granted[id(limiter)].append(loop.time())

        takers = asyncio.ensure_future(asyncio.gather(take(a), take(b)))
        try:
            await asyncio.sleep(0.2)
            paused_at = loop.time()
            await a.apenalize(0.6)
            set_by = loop.time()  # the key is paused by now
            await takers
        finally:
            await closed(a, b)
        assert not [t for t in granted[id(a)] if paused_at < t < paused_at + 0.6]
        seen_by = set_by + 0.3 / 3 + 0.15  # b's answers grant for a third of the span after b asked
        assert not [t for t in granted[id(b)] if seen_by < t < paused_at + 0.6]
        assert [t for t in granted[id(b)] if t > paused_at + 0.6]  # and goes on after it

    run(main())


class LateReader(aiotb.RedisStore):
    """A leased store that reads one answer late: once ``then`` is set, the next renewal's answer is read
    ``late`` s after the server gave it, and ``then()`` runs between the two."""

    then: Callable[[], Awaitable[None]] | None = None
    late = 0.0

    def bind_lease(self, rates: Any) -> RedisLease:
        return LateLease(self, super().bind_lease(rates).definition)


class LateLease(RedisLease):
    """The lease of a LateReader store."""

    async def lease_units(self, *args: Any) -> Any:
        answer = await super().lease_units(*args)
        store = cast(LateReader, self.store)
        then, store.then = store.then, None
        if then is not None:
            await then()
            await asyncio.sleep(store.late)
        return answer


def test_a_pause_reaches_a_holder_that_reads_its_answer_late(run: Run[None], redis_url: str) -> None:
    """B's renewal is answered, A pauses the key, and B reads that answer 0.25 s later (as a stalled loop would):
    an answer grants for a third of the span after it was asked for, so B grants nothing in the pause past
    that, and goes on after it."""
    async def main() -> None:
        a = leased(aiotb, redis_url, 100, 1, burst=10, lease=0.3)
        store = LateReader(redis_url, KEY, lease=0.3, units=16, on_error="raise")
        b = aiotb.Limiter(100, 1, burst=10, store=store)
        await a.acquire()
        await b.acquire()
        loop = asyncio.get_running_loop()
        paused: list[float] = []

        async def pause() -> None:
            asked = loop.time()  # the pause ends 0.6 s after the server got it: after this plus 0.6
            await a.apenalize(0.6)
            paused.extend((loop.time(), asked))  # the key is paused by now; B asked before

        store.then, store.late = pause, 0.25
        stop = loop.time() + 1.2
        granted: list[float] = []
        try:
            while loop.time() < stop:
                async with b:
                    granted.append(loop.time())
        finally:
            await closed(a, b)
        assert paused
        assert not [t for t in granted if paused[0] + 0.3 / 3 + 0.05 < t < paused[1] + 0.6]
        assert [t for t in granted if t > paused[1] + 0.6]

    run(main())


def test_a_lease_holder_on_a_second_loop_starts_afresh(lib: SimpleNamespace, redis_url: str) -> None:
    limiter = leased(lib, redis_url, 10, 1, burst=2)

    async def take() -> int:
        await limiter.acquire()
        await limiter.store.redis.connection_pool.disconnect()  # its connections are this loop's
        return int(limiter.units)

    assert asyncio.run(take()) == 16
    assert asyncio.run(take()) == 16  # the first loop's keeper is gone with it; the lease is taken again
    asyncio.run(closed(limiter))


def test_the_bound_holds_over_processes_holding_leases_one_stopped(redis_url: str) -> None:
    """Three processes on one key, one of them stopped for 150 ms and then for 500 ms (longer than its lease, so
    that its units go to the others meanwhile): at the instants the tasks resumed (CLOCK_MONOTONIC, one clock
    for every process), at most burst + rate * t in any interval."""
    rate, burst, span_ns = 300.0, 10.0, 2_500_000_000

    def during(processes: list[Any]) -> None:
        time.sleep(0.6)
        for pause in (0.15, 0.5):
            os.kill(processes[0].pid, signal.SIGSTOP)
            time.sleep(pause)
            os.kill(processes[0].pid, signal.SIGCONT)
            time.sleep(0.3)

    logs = run_workers(lease_take_for, [(redis_url, KEY, (rate, 1), {"burst": burst}, 20, span_ns)] * 3, during)
    used = [t for log in logs for t in log]
    assert excess(used, 1e9 / rate, burst) <= 1e-6
    assert all(logs) and len(used) >= 0.7 * (burst + rate * span_ns / 1e9)
