"""The Redis scripts against words no aiotb client sends, as any client with script rights could send them: each
malformed argument fails the script (StoreCorrupt on the client) and changes nothing; the scripts every client
loads take no time from a client; a window's log is capped, and the sum of its grants that the script keeps
follows every change of it."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, TypeVar

import aiotb
import pytest
import redis.asyncio
from aiotb import _store_redis
from aiotb._store_redis import RedisLease, RedisRates, RedisStore, definition, lease_definition, window_definition
from conftest import ClientClock

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]
RunOn = Callable[[asyncio.AbstractEventLoop, Awaitable[T]], T]
RATES = definition([(1e9, 10.0, 10.0)])  # 1 per second, burst 10
DAY_US = 86_400 * 10**6


async def refused(call: Awaitable[object]) -> str:
    """The message of the StoreCorrupt that call raised; fails if it raised nothing else."""
    with pytest.raises(aiotb.StoreCorrupt) as raised:
        await call
    assert "aiotb: " in str(raised.value)
    return str(raised.value)


@pytest.mark.parametrize("amount", [-5.0, 0.0, float("nan"), float("inf"), float("-inf")])
def test_reserve_and_fit_refuse_an_amount_that_is_not_positive_and_finite(run: Run[None], redis_url: str,
                                                                         client_clock: ClientClock, amount: float) -> None:
    async def main() -> None:
        store = RedisStore(redis_url, "amounts")
        store._client_clock = True  # the test's clock, which stands still: no refill between the calls
        try:
            await RedisRates(store, RATES).reserve(4.0, 0)
            for call in (lambda: RedisRates(store, RATES).reserve(amount, 0), lambda: RedisRates(store, RATES).reserve(amount, -1),
                         lambda: RedisRates(store, RATES).reserve_run(1.0, 0, [amount]), lambda: RedisRates(store, RATES).fit_delay(amount)):
                assert "an amount must be a finite number > 0" in await refused(call())
            assert await RedisRates(store, RATES).tokens() == 6  # unchanged: no token taken or made
            window = window_definition(10**9, 5.0)
            windowed = store.for_key("window")
            for call in (lambda: RedisRates(windowed, window).reserve(amount, 0), lambda: RedisRates(windowed, window).fit_delay(amount)):
                await refused(call())
        finally:
            await store.redis.aclose()

    run(main())


def test_cancel_refuses_a_record_of_another_shape(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        store = RedisStore(redis_url, "records")
        try:
            started = time.monotonic()
            reserved = await RedisRates(store, RATES).reserve(10.0, 0)
            assert isinstance(reserved, _store_redis.Reserved)
            epoch, before, after = reserved.record.split()
            for record in (b"", epoch, epoch + b" x " + after, epoch + b" " + before + b" " + after + b" 1 2",
                           epoch + b" -1 " + after, epoch + b" " + after + b" " + before + b"0"):
                await refused(RedisRates(store, RATES).cancel(record))
            refilled = await RedisRates(store, RATES).tokens()
            assert 0 <= refilled <= (time.monotonic() - started) * 1.0 + 1e-6  # 1 a second since the burst was taken
            assert await RedisRates(store, RATES).cancel(reserved.record) == 1  # the real one still gives it back
            assert await RedisRates(store, RATES).tokens() == pytest.approx(10, abs=0.01)
        finally:
            await store.redis.aclose()

    run(main())


def test_set_rate_and_pause_refuse_malformed_words(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        store = RedisStore(redis_url, "admin")
        try:
            started = time.monotonic()
            await RedisRates(store, RATES).reserve(1.0, 0)
            for index, ns, burst in ((1, -1e9, 5.0), (0, 1e9, float("nan")), (5, 1e9, 5.0), (0, 1e9, -2.0)):
                await refused(RedisRates(store, RATES).set_rate(index, ns, burst))
            await refused(RedisRates(store, RATES).pause(-10**9))
            left = await RedisRates(store, RATES).tokens()
            assert 9 - 1e-6 <= left <= 9 + (time.monotonic() - started) * 1.0 + 1e-6  # 1 a second since the grant
            await refused(RedisRates(store.for_key("new"), definition([(1e9, -10.0, 0.0)])).reserve(1.0, 0))  # a bad definition
        finally:
            await store.redis.aclose()

    run(main())


def test_adapt_refuses_malformed_words_and_changes_nothing(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        store = RedisStore(redis_url, "adapted")
        rates = RedisRates(store, RATES)
        good = _store_redis.AdaptRule(0.1, 1.0, 0.8, 0.01, 1e9, "ab12")  # rates per second, as RATES's 1/s
        try:
            for rule, kind, age, served in (
                    (good, "trim", 0, 0.0), (good, "cut", -1, 0.0), (good, "cut", 0, float("nan")),
                    (good._replace(least=2.0), "cut", 0, 0.0), (good._replace(decrease=1.0), "cut", 0, 0.0),
                    (good._replace(increase=float("inf")), "grow", 0, 0.0), (good._replace(client="xyz"), "cut", 0, 0.0),
                    (good._replace(client="a" * 33), "grow", 0, 0.0), (good._replace(least=1e-9), "cut", 0, 0.0)):
                await refused(rates.adapt(kind, age, rule, served))
            assert await store.redis.exists(store.redis_key) == 0  # not even a report of what a client served
            started = time.monotonic()
            await rates.reserve(1.0, 0)
            before = await store.redis.hgetall(store.redis_key)
            await refused(rates.adapt("cut", 0, good._replace(client=""), 0.0))
            assert await store.redis.hgetall(store.redis_key) == before
            answer = await rates.adapt("grow", 0, good, 0.0)  # at max_rate: no step; the key stays a limiter's
            assert (answer.acted, answer.since_cut_us) == (False, None)
            left = await rates.tokens()
            assert 9 - 1e-6 <= left <= 9 + (time.monotonic() - started) * 1.0 + 1e-6  # 1 a second since the grant
            fresh = RedisRates(store.for_key("adapted-fresh"), RATES)
            await fresh.adapt("grow", 0, good, 0.0)  # a first call that only reports: the key is a limiter's
            assert isinstance(await fresh.reserve(1.0, 0), _store_redis.Reserved)
        finally:
            await store.redis.aclose()

    run(main())


def test_the_lease_script_refuses_a_negative_give_back_a_bad_debt_and_a_forged_holder(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        store = RedisStore(redis_url, "leased", lease=1.0, units=4)
        leased = lease_definition(4, 1.0, [(1e9, 8.0, 8.0)])
        try:
            lease = await RedisLease(store, leased).lease_units("a", 0, 4, 1.0, 0.0)
            assert lease.units == 4
            await refused(RedisLease(store, leased).lease_units("a", -100, 4, 1.0, 0.0))  # would hand 104 units back
            await refused(RedisLease(store, leased).lease_units("b,4,4,99999999999999999", 0, 4, 1.0, 0.0))
            await refused(RedisLease(store, leased).lease_units("b", 0, 4, float("nan"), 0.0))
            await refused(RedisLease(store, leased).lease_units("b", 0, 4, 1.0, -1.0))  # a debt below 0
            await refused(RedisLease(store, leased).release_units("b", 1.0, float("nan")))
            await refused(RedisLease(store, leased).owe("b", float("inf")))
            again = await RedisLease(store, leased).lease_units("c", 0, 4, 1.0, 0.0)
            assert again.units == 0  # a holds every unit still: none was made
        finally:
            await store.redis.aclose()

    run(main())


def test_the_scripts_every_client_loads_take_no_time_from_a_client(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        store = RedisStore(redis_url, "clock")
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            await RedisRates(store, RATES).reserve(10.0, 0)  # empty: 10 s to refill on the server's clock
            script = _store_redis._SCRIPTS["gcra"]
            now_us = int((await client.time())[0]) * 10**6
            reply = await client.execute_command("EVALSHA", script.sha, 1, store.redis_key, RATES, "tokens",
                                                 str(now_us + DAY_US), "1")  # a day ahead, "use it"
            assert float(reply.split()[1]) < 0.5, reply
        finally:
            await client.aclose()
            await store.redis.aclose()

    run(main())


MOST_GRANTS = 131_072  # _redis_window.lua's cap on the grants its log keeps


def test_a_window_keeps_at_most_its_cap_of_grants_in_its_log(run_on: RunOn[None], redis_url: str) -> None:
    """The script is the subject, not the loop: one stock asyncio loop; the log filled by hand to one grant short
    of the cap (that many round trips would take minutes), as grants of the key made in the same instant."""

    async def main() -> None:
        store = RedisStore(redis_url, "crowded")
        window = window_definition(3600 * 10**9, 1e6)  # room for a million tokens an hour
        log = store.redis_key + ":log"
        try:
            first = await RedisRates(store, window).reserve(1e-3, 0)
            assert isinstance(first, _store_redis.Reserved)
            ((_, at),) = await store.redis.zrange(log, 0, -1, withscores=True)
            for start in range(2, MOST_GRANTS - 1, 8192):
                await store.redis.zadd(log, {f"{q}:0.001": at for q in range(start, min(start + 8192, MOST_GRANTS - 1))})
            await store.redis.hset(store.redis_key, mapping={"q": MOST_GRANTS - 2, "u": repr((MOST_GRANTS - 2) * 1e-3)})
            assert await store.redis.zcard(log) == MOST_GRANTS - 2
            for _ in range(2):  # the last two the cap lets in
                assert isinstance(await RedisRates(store, window).reserve(1e-3, 0), _store_redis.Reserved)
            assert not isinstance(await RedisRates(store, window).reserve(1e-3, 0), _store_redis.Reserved)
            assert await store.redis.zcard(log) == MOST_GRANTS
            assert await RedisRates(store, window).fit_delay(1e-3) > 0  # until the oldest grant leaves its window
        finally:
            await store.redis.aclose()

    run_on(asyncio.new_event_loop(), main())


async def kept_and_logged(store: RedisStore) -> tuple[bytes | None, float]:
    """The sum the script keeps for a window's log, and the tokens of the grants in the log summed here from its
    members, read together (the key may expire between two reads apart)."""
    async with store.redis.pipeline(transaction=True) as both:
        kept, members = await both.hget(store.redis_key, "u").zrange(store.redis_key + ":log", 0, -1).execute()
    return kept, sum(float(member.split(b":")[1]) for member in members)


def test_a_windows_sum_of_its_log_follows_every_change_of_the_log(run: Run[None], redis_url: str) -> None:
    """The script keeps the tokens of its log in the hash (``u``), so that a decision does not read the log:
    after every operation, on a window whose grants leave it as the test runs, it is the log's sum."""
    import random

    async def main() -> None:
        store = RedisStore(redis_url, "summed")
        rates = RedisRates(store, window_definition(50 * 10**6, 10.0))  # 10 tokens in any 50 ms
        rng = random.Random(20261129)
        held: list[bytes] = []
        made: list[bytes] = []
        checked = 0
        try:
            for _ in range(400):
                step = rng.randrange(8)
                if step < 3:
                    hold = rng.random() < 0.3
                    got = await rates.reserve(rng.choice([0.25, 1.0, 2.0, 0.1]), 0, hold)
                    if isinstance(got, _store_redis.Reserved):
                        (held if hold else made).append(got.record)
                elif step == 3 and made:
                    await rates.cancel(made.pop(rng.randrange(len(made))))
                elif step == 4 and held:
                    await rates.end_hold(held.pop(rng.randrange(len(held))))
                elif step == 5 and held:
                    record, used = held.pop(rng.randrange(len(held))), rng.choice([0.0, 0.5, 3.0])
                    settled = await rates.settle(float(record.split(b":")[-2 if record.endswith(b":h") else -1]), used,
                                                 record)
                    assert settled is not None
                    if used:  # else it left the log
                        held.append(settled)
                elif step == 6:
                    await rates.settle(1.0, rng.choice([0.0, 0.5, 3.0]))
                else:
                    await rates.tokens()
                kept, logged = await kept_and_logged(store)
                if kept is not None:
                    assert float(kept) == pytest.approx(logged, abs=1e-9)
                    checked += 1
                await asyncio.sleep(rng.choice([0, 0, 0, 0.005, 0.02]))
            assert checked >= 300
        finally:
            await store.redis.aclose()

    run(main())


def test_a_windows_grants_stay_in_it_as_its_epoch_moves(run: Run[None], redis_url: str,
                                                        client_clock: ClientClock) -> None:
    """Instants are kept after an epoch that moves once 2^50 ns (13 days) have passed: whatever call meets that
    moment, the log's instants and the hash's epoch move together, and a month's window keeps its grants."""

    async def main() -> None:
        store = RedisStore(redis_url, "rebased")
        store._client_clock = True  # the test's clock: it moves the 13 days
        rates = RedisRates(store, window_definition(30 * 86_400 * 10**9, 10.0))  # 10 in any 30 days
        try:
            for _ in range(4):
                assert isinstance(await rates.reserve(1.0, 0), _store_redis.Reserved)
            client_clock.us += 2**50 // 1000 + 10**6  # a second past the epoch's move
            for _ in range(3):
                assert await rates.tokens() == 6.0  # the four grants are still inside the window, at every call
            assert isinstance(await rates.reserve(6.0, 0), _store_redis.Reserved)
            assert not isinstance(await rates.reserve(1.0, 0), _store_redis.Reserved)
        finally:
            await store.redis.aclose()

    run(main())


def test_a_window_key_without_its_sum_has_it_summed_from_its_log(run: Run[None], redis_url: str) -> None:
    """A key an earlier script wrote keeps no sum: its first call sums the log, and decides by it."""

    async def main() -> None:
        store = RedisStore(redis_url, "unsummed")
        rates = RedisRates(store, window_definition(3600 * 10**9, 10.0))
        try:
            for amount in (2.0, 3.0, 1.5):
                assert isinstance(await rates.reserve(amount, 0), _store_redis.Reserved)
            await store.redis.hdel(store.redis_key, "u")
            assert await rates.tokens() == 10.0 - 6.5
            assert not isinstance(await rates.reserve(4.0, 0), _store_redis.Reserved)
            assert isinstance(await rates.reserve(3.5, 0), _store_redis.Reserved)
            assert float(await store.redis.hget(store.redis_key, "u")) == 10.0
        finally:
            await store.redis.aclose()

    run(main())
