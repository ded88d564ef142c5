"""``Limiter(..., store=RedisStore(...))`` against a real redis-server (the session's, emptied before
each test), on real loops: the API, order, timeouts, cancellation, and one bound over several
processes, checked on the server's instants of the grants (exact) and at the instants the tasks
resumed. The script's arithmetic against the twin's is tests/test_redis_parity.py; faults are
tests/test_redis_faults.py."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import threading
import time
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, TypeVar

import aiotb
import pytest
import redis.asyncio
from redis_workers import take_for
from spawned import excess, run_workers

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]
KEY = "test-quota"


def limiter_on(lib: SimpleNamespace, url: str, *args: Any, key: str = KEY, **kwargs: Any) -> Any:
    """A Limiter of lib (an engine's namespace, or the aiotb package) over a RedisStore of url."""
    package = getattr(lib, "package", lib)
    return package.Limiter(*args, store=package.RedisStore(url, key), **kwargs)


async def trips_done(limiter: Any) -> None:
    """Returns once the limiter's round trips on their way (a reservation given back, a hold ended) are done;
    AssertionError after 30 s."""
    for _ in range(3000):
        if not getattr(limiter, "_trips", None):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{limiter!r}: round trips still on their way after 30 s")


async def closed(limiter: Any, result: T) -> T:
    """result, once the limiter's round trips on their way are done and its client is closed: the loop ends with no
    open connection, nor a task waiting on one."""
    await trips_done(limiter)
    await limiter.store.redis.aclose()
    return result


# ---- the API ----

def test_a_limiter_over_redis_is_a_redis_limiter(lib: SimpleNamespace, redis_url: str) -> None:
    limiter = limiter_on(lib, redis_url, 10, 1)
    assert isinstance(limiter, lib.package.RedisLimiter) and isinstance(limiter, lib.Limiter)
    assert limiter.store.redis_key == "aiotb:{test-quota}"
    assert (limiter.max_rate, limiter.time_period, limiter.burst) == (10, 1, 10)


def test_only_limiter_and_window_limiter_take_a_redis_store(lib: SimpleNamespace, redis_url: str) -> None:
    with pytest.raises(TypeError, match="AsyncLimiter is aiolimiter's limiter, whose has_capacity answers at once"):
        lib.AsyncLimiter(10, 1, store=lib.package.RedisStore(redis_url, KEY))

    class Own(lib.Limiter):  # type: ignore[misc, name-defined]
        pass

    with pytest.raises(TypeError, match="store= works with Limiter itself, not Own"):
        Own(10, 1, store=lib.package.RedisStore(redis_url, KEY))
    window = lib.WindowLimiter(10, 1, store=lib.package.RedisStore(redis_url, KEY))
    assert isinstance(window, lib.WindowLimiter) and isinstance(window, lib.package.RedisLimiter)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"redis": 3, "key": "k"}, TypeError, "redis must be"),
    ({"redis": "http://x", "key": "k"}, ValueError, "redis must be"),
    ({"key": b"k"}, TypeError, "key must be a str"),
    ({"key": ""}, ValueError, "key must not be empty"),
    ({"key": "k", "on_error": "ignore"}, ValueError, "on_error must be"),
])
def test_bad_store_parameters_are_refused(lib: SimpleNamespace, redis_url: str, kwargs: dict[str, Any],
                                          error: type[Exception], match: str) -> None:
    given = dict(kwargs)
    with pytest.raises(error, match=match):
        lib.package.RedisStore(given.pop("redis", redis_url), **given)


def test_on_error_takes_a_limiter_of_this_host_only(lib: SimpleNamespace, redis_url: str) -> None:
    """The fallback stands in for a Redis that cannot answer: a limiter of this process (or host) is taken, one
    over Redis is refused, and a URL given by mistake is named without its password."""
    local = lib.Limiter(5, 1)
    assert lib.package.RedisStore(redis_url, "k", on_error=local).fallback is local
    assert lib.package.RedisStore(redis_url, "k").fallback is None
    over_redis = limiter_on(lib, redis_url, 5, 1, key="other")
    with pytest.raises(ValueError, match="on_error must be 'raise', 'allow' or a Limiter of this process or host"):
        lib.package.RedisStore(redis_url, "k", on_error=over_redis)
    with pytest.raises(ValueError, match="on_error must be") as refused:
        lib.package.RedisStore(redis_url, "k", on_error="redis://user:hunter2@127.0.0.1/0")
    assert "hunter2" not in str(refused.value)


def test_a_refill_longer_than_the_script_keeps_exact_is_refused(lib: SimpleNamespace, redis_url: str) -> None:
    with pytest.raises(ValueError, match="refills its burst within 52 days"):
        limiter_on(lib, redis_url, 1, 86400 * 60)


def test_clients_must_agree_on_the_rates(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        first = limiter_on(aiotb, redis_url, 10, 1, burst=2)
        await first.acquire()
        other = limiter_on(aiotb, redis_url, 20, 1, burst=2)
        with pytest.raises(ValueError, match=r"holds a limiter of rates \[10/s burst 2 .*not rates \[20/s burst 2"):
            await other.acquire()
        assert other.stats().granted == 0
        await other.store.redis.aclose()
        await closed(first, None)

    run(main())


def on_its_loop(limiter: Any, awaitable: Awaitable[T]) -> T:
    """awaitable, run on the loop the limiter serves, from this thread."""
    return asyncio.run_coroutine_threadsafe(awaitable, limiter._loop).result(WITHIN_S)  # type: ignore[arg-type]


WITHIN_S = 30.0  # s: the longest a blocking call of these tests may take on a loaded machine


@pytest.mark.parametrize("leased", [False, True])
def test_threads_block_on_a_limiter_over_redis(redis_url: str, leased: bool) -> None:
    """Plain threads (no event loop: Flask, Django, a pool) take tokens with acquire_blocking and `with limiter:`;
    the waits run on aiotb's own loop, in one queue: 4 threads x 5 grants at 20/s, burst 2, take at least the
    18 tokens' refill. A timeout that cannot be met fails at once, a bad amount raises in the caller, and a
    thread whose loop runs is refused."""
    store = aiotb.RedisStore(redis_url, f"threads-{leased}", **({"lease": 1.0, "units": 1} if leased else {}))
    limiter = aiotb.Limiter(20, 1, burst=2, store=store)
    granted: list[float] = []
    failures: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for n in range(5):
                if (i + n) % 2:
                    limiter.acquire_blocking()
                else:
                    with limiter:
                        pass
                granted.append(time.monotonic())
        except BaseException as error:  # noqa: BLE001  (reported by the test)
            failures.append(error)

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WITHIN_S)
    assert not failures, failures
    assert len(granted) == 20
    assert time.monotonic() - started >= 18 / 20 * 0.9  # the refill of 18 tokens, less the clock's slack
    with pytest.raises(ValueError, match="amount"):
        limiter.acquire_blocking(5)  # above the burst: in this thread, taking nothing
    if not leased:
        with pytest.raises(TimeoutError):
            limiter.acquire_blocking(2, timeout=0.001)  # the bucket is empty: it cannot come in time

    async def from_a_coroutine() -> None:
        limiter.acquire_blocking()

    with pytest.raises(RuntimeError, match="would block the running event loop"):
        asyncio.run(from_a_coroutine())
    if leased:
        on_its_loop(limiter, limiter.aclose())
    on_its_loop(limiter, closed(limiter, None))


def test_threads_block_on_the_loop_a_limiter_over_redis_serves(redis_url: str) -> None:
    """A limiter used on a running loop serves it: threads' blocking calls wait on that same loop, in the queue of
    its tasks."""
    limiter = limiter_on(aiotb, redis_url, 50, 1, burst=1)
    ready, stop = threading.Event(), threading.Event()

    async def serve() -> None:
        await limiter.acquire()  # the limiter now serves this loop
        ready.set()
        while not stop.is_set():
            async with limiter:
                await asyncio.sleep(0.01)
        await closed(limiter, None)

    server = threading.Thread(target=asyncio.run, args=(serve(),))
    server.start()
    assert ready.wait(WITHIN_S)
    try:
        serving = limiter._loop
        for _ in range(5):
            limiter.acquire_blocking()
        assert limiter._loop is serving
    finally:
        stop.set()
        server.join(WITHIN_S)
    assert not server.is_alive()


@pytest.mark.parametrize("leased", [False, True])
def test_loops_of_other_threads_wait_on_the_loop_a_limiter_over_redis_serves(redis_url: str, leased: bool) -> None:
    """Three more event loops, in threads of their own, use a limiter that serves a running loop: their waits run
    there, in its queue (5 grants each at 20/s, burst 2: at least the 13 tokens' refill), and a task cancelled on
    its own loop leaves the queue of the serving one."""
    store = aiotb.RedisStore(redis_url, f"loops-{leased}", **({"lease": 1.0, "units": 1} if leased else {}))
    limiter = aiotb.Limiter(20, 1, burst=2, store=store)
    ready, stop = threading.Event(), threading.Event()
    outcomes: list[object] = []

    async def serve() -> None:
        await limiter.acquire()  # the limiter now serves this loop
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.01)
        for _ in range(3000):  # the calls forwarded here done too: a cancel may reach them after `waiting` is 0
            if len(asyncio.all_tasks()) == 1:
                break
            await asyncio.sleep(0.01)
        if leased:
            await limiter.aclose()
        await closed(limiter, None)

    async def use() -> None:
        for _ in range(5):
            async with limiter:
                pass
        assert await limiter.read_tokens() >= 0
        waiting = asyncio.ensure_future(limiter.acquire(2))  # behind the others: not granted at once
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        outcomes.append("done")

    def run_loop() -> None:
        try:
            asyncio.run(use())
        except BaseException as error:  # noqa: BLE001  (reported by the test)
            outcomes.append(error)

    server = threading.Thread(target=asyncio.run, args=(serve(),))
    server.start()
    try:
        assert ready.wait(WITHIN_S)
        started = time.monotonic()
        users = [threading.Thread(target=run_loop) for _ in range(3)]
        for user in users:
            user.start()
        for user in users:
            user.join(WITHIN_S)
        assert outcomes == ["done"] * 3, outcomes
        assert time.monotonic() - started >= 13 / 20 * 0.9  # the refill of 13 tokens, less the clock's slack
        deadline = time.monotonic() + WITHIN_S
        while limiter.waiting and time.monotonic() < deadline:  # the cancels reach the serving loop
            time.sleep(0.01)
        assert limiter.waiting == 0
    finally:
        stop.set()
        server.join(WITHIN_S)
    assert not server.is_alive()


def test_sync_calls_that_need_redis_say_what_to_await(redis_url: str) -> None:
    limiter = limiter_on(aiotb, redis_url, 10, 1)
    with pytest.raises(TypeError, match="read_tokens"):
        limiter.tokens
    with pytest.raises(TypeError, match="apause_until"):
        limiter.pause_until(1.0)


@pytest.mark.parametrize("amount, error", [(0, ValueError), (-1, ValueError), (float("nan"), ValueError),
                                           ("1", TypeError), (11, ValueError)])
def test_a_bad_amount_is_refused_taking_nothing(lib: SimpleNamespace, run: Run[None], redis_url: str,
                                                amount: Any, error: type[Exception]) -> None:
    async def main() -> None:
        limiter = limiter_on(lib, redis_url, 10, 1)
        await limiter.acquire(3)
        before = await limiter.read_tokens()
        with pytest.raises(error, match="amount"):
            await limiter.acquire(amount)
        with pytest.raises(error, match="amount"):
            await limiter.atry_acquire(amount)
        assert await limiter.read_tokens() >= before  # nothing taken: only refill since
        await closed(limiter, None)

    run(main())


def test_tokens_are_shared_by_clients_of_one_key(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        a = limiter_on(aiotb, redis_url, 1, 3600, burst=5)  # no refill to speak of within the test
        b = limiter_on(aiotb, redis_url, 1, 3600, burst=5)
        assert await a.atry_acquire(3)
        assert 1.99 < await b.read_tokens() <= 2.01
        assert not await b.atry_acquire(3)
        assert await b.atry_acquire(2)
        assert not await a.ahas_capacity(1)
        assert a.stats().granted == 1 and b.stats().granted == 1
        await b.store.redis.aclose()
        await closed(a, None)

    run(main())


def test_waiters_are_granted_at_the_rate_in_order(run: Run[None], redis_url: str) -> None:
    rate, burst, n = 100, 2, 20

    async def main() -> None:
        limiter = limiter_on(aiotb, redis_url, rate, 1, burst=burst)
        order: list[int] = []
        used: list[int] = []

        async def take(i: int) -> None:
            async with limiter:
                order.append(i)
                used.append(time.monotonic_ns())

        tasks = []
        for i in range(n):
            tasks.append(asyncio.ensure_future(take(i)))
            await asyncio.sleep(0)  # queued in the order of i
        await asyncio.gather(*tasks)
        assert order == list(range(n))
        # at use instants: within one token of the bound (all at once would be 17 over; how long the uses
        # spanned is not the measure: a first use held up by a busy loop shortens it, and did by 0.6 ms)
        assert excess(used, 1e9 / rate, burst) < 1
        stats = limiter.stats()
        assert stats.granted == n and stats.waits == n and stats.waiting == 0
        await closed(limiter, None)

    run(main())


class Trips(redis.asyncio.Redis):
    """A client that counts its EVALSHA round trips, and runs ``after[n]`` once the n-th has its reply (as
    if it happened while the script ran: the limiter reads the reply after it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trips = 0
        self.after: dict[int, Callable[[], Awaitable[None]]] = {}

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        reply = await super().execute_command(*args, **options)
        if args[0] == "EVALSHA":
            self.trips += 1
            if self.trips in self.after:
                await self.after[self.trips]()
        return reply


def counted_on(url: str, *args: Any, **kwargs: Any) -> tuple[Any, Trips]:
    """A limiter over a RedisStore whose client counts its round trips."""
    client = Trips.from_url(url)
    assert isinstance(client, Trips)
    return aiotb.Limiter(*args, store=aiotb.RedisStore(client, KEY), **kwargs), client


def test_one_round_trip_grants_every_queued_waiter_whose_tokens_are_free_now(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        limiter, client = counted_on(redis_url, rates=[(1, 3600, 12), (2, 3600, 10)])  # 10 tokens, no refill
        order: list[int] = []

        async def take(i: int) -> None:
            await limiter.acquire()
            order.append(i)

        tasks = [asyncio.ensure_future(take(i)) for i in range(14)]  # queued in one loop iteration
        while len(order) < 10:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)  # the 11th's reservation, due in half an hour, made
        # the first alone, in its own task; 9 more in one trip (and no more: the 11th is not due now), then one
        # reservation ahead
        assert order == list(range(10)) and client.trips == 3
        assert limiter.stats().granted == 10 and limiter.waiting == 4
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await trips_done(limiter)  # the reservation ahead goes back to Redis in a round trip of the limiter's loop
        assert client.trips == 4 and await limiter.read_tokens() == pytest.approx(0, abs=1e-2)
        assert await limiter._store_rates.fit_delay(1) == pytest.approx(1800e9, abs=1e9)
        await closed(limiter, None)

    run(main())


def test_tasks_that_call_again_at_once_share_one_round_trip(run: Run[None], redis_url: str) -> None:
    """16 tasks loop acquire(): each round trip grants all 16, whose tasks come back for the next one together. The
    first of them back does not ask Redis alone (its round trip would grant it only, and the 15 the next), as the
    waiters granted and not resumed yet are about to queue behind it."""
    async def main() -> None:
        limiter, client = counted_on(redis_url, 1e6, 1, burst=1e6)

        async def take() -> None:
            for _ in range(10):
                await limiter.acquire()

        await asyncio.gather(*(take() for _ in range(16)))
        # the first alone, in its own task, the 15 others in the next trip, then 16 a trip: 11, and 20 with a trip
        # of one in each round
        assert limiter.stats().granted == 160 and client.trips == 11
        await closed(limiter, None)

    run(main())


@pytest.mark.parametrize("next_amount, given_to_next", [(1, True), (2, False)])
def test_a_grant_whose_waiter_left_during_the_round_trip_goes_on_or_back(run: Run[None], redis_url: str,
                                                                       next_amount: int, given_to_next: bool) -> None:
    """A, alone, takes 1 of 3 tokens in its own task; B and C are granted in the next trip (D's amount is not due
    with them), and C leaves while it runs: its token goes to D if D asks for no more, else back to Redis (C's was the
    last reservation, so Redis restores it)."""
    async def main() -> None:
        limiter, client = counted_on(redis_url, 1, 3600, burst=3)
        tasks = [asyncio.ensure_future(limiter.acquire(amount)) for amount in (1, 1, 1, next_amount)]

        async def c_leaves() -> None:
            tasks[2].cancel()

        client.after[2] = c_leaves
        await asyncio.gather(*tasks[:2])
        with pytest.raises(asyncio.CancelledError):
            await tasks[2]
        if given_to_next:
            await tasks[3]
            assert client.trips == 2  # D took C's grant: no trip of its own
        else:
            await asyncio.sleep(0.05)
            assert not tasks[3].done()
            tasks[3].cancel()
            await asyncio.gather(tasks[3], return_exceptions=True)
            await trips_done(limiter)
            assert await limiter.read_tokens() == pytest.approx(1, abs=1e-2)  # C's token back in Redis
        assert limiter.stats().granted == 2 + given_to_next and limiter.stats().cancelled == 2 - given_to_next
        await closed(limiter, None)

    run(main())


def test_a_run_of_grants_reached_stale_is_not_used(run: Run[None], redis_url: str) -> None:
    """The process stalls 50 ms (over the 10 ms of a token) while B and C's trip runs: their grants are
    stale when it reads them and go unused, as a stale reservation does; B takes afresh, C reserves again."""
    async def main() -> None:
        limiter, client = counted_on(redis_url, 100, 1, burst=3)
        order: list[str] = []

        async def stall() -> None:
            time.sleep(0.05)

        async def take(name: str) -> None:
            await limiter.acquire()
            order.append(name)
            if name == "A":  # the next trip is B and C's (A's own took one, or two where it came back stale)
                alone.append(client.trips)
                client.after[client.trips + 1] = stall

        alone: list[int] = []
        await asyncio.gather(take("A"), take("B"), take("C"))
        # B and C's lost trip, B afresh, C again
        assert order == ["A", "B", "C"] and client.trips == alone[0] + 3
        assert limiter.stats().granted == 3
        await closed(limiter, None)

    run(main())


def test_a_timeout_that_cannot_be_met_fails_at_once_taking_nothing(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        limiter = limiter_on(aiotb, redis_url, 10, 1, burst=5)
        await limiter.acquire(5)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await limiter.acquire(5, timeout=0.2)  # needs 0.5 s
        assert time.monotonic() - started < 0.1
        assert await limiter.read_tokens() < 1  # the 5 were not taken from a refill of under one token
        await limiter.acquire(1, timeout=0.2)  # one token comes within 0.1 s
        assert limiter.stats().timeouts == 1
        await closed(limiter, None)

    run(main())


def test_a_waiter_behind_others_fails_at_once_when_its_timeout_cannot_be_met(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        limiter = limiter_on(aiotb, redis_url, 10, 1, burst=2)
        await limiter.acquire(2)
        first = asyncio.ensure_future(limiter.acquire(2))  # due in 0.2 s
        await asyncio.sleep(0.01)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await limiter.acquire(1, timeout=0.1)  # behind 2 tokens: 0.3 s at best
        assert time.monotonic() - started < 0.08
        await first
        await closed(limiter, None)

    run(main())


def test_a_waiter_with_a_timeout_keeps_its_place_while_its_timeout_is_checked(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        limiter = limiter_on(aiotb, redis_url, 20, 1, burst=1)
        await limiter.acquire()
        order: list[str] = []

        async def take(name: str, timeout: float | None) -> None:
            await limiter.acquire(1, timeout=timeout)
            order.append(name)

        head = asyncio.ensure_future(take("head", None))
        await asyncio.sleep(0.01)
        # one loop iteration: "timed" queues and checks its timeout (a round trip) as "plain" comes
        await asyncio.gather(head, take("timed", 5), take("plain", None))
        assert order == ["head", "timed", "plain"]
        await closed(limiter, None)

    run(main())


def test_a_cancelled_waiter_gives_its_reservation_back(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        limiter = limiter_on(aiotb, redis_url, 1, 3600, burst=2)  # no refill to speak of within the test
        await limiter.acquire(2)
        waiter = asyncio.ensure_future(limiter.acquire(1))  # due in an hour
        await asyncio.sleep(0.05)  # its reservation made
        other = limiter_on(aiotb, redis_url, 1, 3600, burst=2)
        assert not await other.ahas_capacity(1)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await trips_done(limiter)  # the cancel reaches Redis in a round trip of the limiter's loop
        # reserved and given back (nobody reserved after it): the next token comes in an hour, not two
        assert await other._store_rates.fit_delay(1) == pytest.approx(3600e9, abs=1e9)
        assert limiter.stats().cancelled == 1 and limiter.stats().waiting == 0
        await other.store.redis.aclose()
        await closed(limiter, None)

    run(main())


def test_apause_until_pauses_every_client_for_what_is_left_of_it(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        a = limiter_on(aiotb, redis_url, 1000, 1, burst=10)
        b = limiter_on(aiotb, redis_url, 1000, 1, burst=10)
        loop = asyncio.get_running_loop()
        await a.apause_until(loop.time() - 5)  # past: nothing is paused
        assert await b.atry_acquire()
        until = loop.time() + 0.3
        await a.apause_until(until)
        assert not await b.atry_acquire()
        await b.acquire()
        assert loop.time() >= until - 0.02  # the instant, on this host's clock (the server's TIME may differ a little)
        with pytest.raises(ValueError, match="when"):
            await a.apause_until(math.nan)
        await b.store.redis.aclose()
        await closed(a, None)

    run(main())


@pytest.mark.parametrize("call", ["apause_until", "alimit_until"])
def test_an_instant_beyond_what_redis_keeps_exact_is_refused_as_given(run: Run[None], redis_url: str,
                                                                      call: str) -> None:
    async def main() -> None:
        limiter = limiter_on(aiotb, redis_url, 10, 1)
        when = asyncio.get_running_loop().time() + 100 * 86400.0  # 100 days: beyond 26, below 9 years
        args = (when,) if call == "apause_until" else (3, when)
        with pytest.raises(ValueError, match=rf"when must be at most \d+ s from now over a RedisStore, got {when!r}"):
            await getattr(limiter, call)(*args)
        assert await limiter.read_tokens() == 10
        await closed(limiter, None)

    run(main())


def test_penalize_and_set_rate_reach_every_client(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        a = limiter_on(aiotb, redis_url, 1000, 1, burst=10)
        b = limiter_on(aiotb, redis_url, 1000, 1, burst=10)
        assert await a.atry_acquire()
        started = time.monotonic()  # before the server's 0.3 s begin: the round trips after it count in them
        await a.apenalize(0.3)
        assert not await b.atry_acquire()
        assert await b.read_tokens() == 0
        await b.acquire()
        assert time.monotonic() - started >= 0.28  # the server's 0.3 s, less its TIME's rounding
        assert await a.aretry_after("0.2") == 0.2
        assert not await b.atry_acquire()
        await asyncio.sleep(0.25)
        await a.aset_rate(1, 3600, burst=3)  # from now: 3 tokens, no refill to speak of
        assert b.rates[0][0] == 1000  # b's own parameters are its own; the key's rates rule
        assert await b.atry_acquire(3)
        assert not await b.atry_acquire(1)
        await b.store.redis.aclose()
        await closed(a, None)

    run(main())


def test_a_rate_change_outlives_a_full_bucket(run: Run[None], redis_url: str) -> None:
    """A full bucket's hash expires (nothing in it differs from a new one), but not once set_rate changed its
    rates: the next client would create it again from its own definition, and the change would be lost (the
    hash of a bucket left full by set_rate expired 1 ms later). Set back to the definition, it expires again."""
    async def main() -> None:
        a = limiter_on(aiotb, redis_url, 1000, 1, burst=10)
        await a.aset_rate(1, 3600, burst=3)  # full at the new burst: 3 tokens, no refill to speak of
        await asyncio.sleep(0.05)
        b = limiter_on(aiotb, redis_url, 1000, 1, burst=10)
        assert await b.read_tokens() == 3
        assert await b.atry_acquire(3)
        assert not await b.atry_acquire(1)
        await a.aset_rate(1000, 1, burst=10)  # the definition's rate again: the bucket fills, its hash expires
        await asyncio.sleep(0.05)
        assert await b.store.redis.exists(f"aiotb:{{{KEY}}}") == 0
        await b.store.redis.aclose()
        await closed(a, None)

    run(main())


def test_a_client_clock_off_by_seconds_changes_nothing(run: Run[None], redis_url: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        limiter = limiter_on(aiotb, redis_url, 1, 3600, burst=2)
        assert await limiter.atry_acquire()
        real = time.time_ns
        for offset in (5_000_000_000, -5_000_000_000):
            monkeypatch.setattr("aiotb._store_redis.time.time_ns", lambda offset=offset: real() + offset)
            assert await limiter.read_tokens() == pytest.approx(1, abs=1e-3)
        assert await limiter.atry_acquire()
        assert not await limiter.atry_acquire()
        await closed(limiter, None)

    run(main())


def test_a_decorated_function_takes_from_redis(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        limiter = limiter_on(aiotb, redis_url, 1, 3600, burst=3)

        @limiter.limit(2)
        async def call(x: int) -> int:
            return x * 2

        assert await call(21) == 42
        assert await limiter.read_tokens() == pytest.approx(1, abs=1e-3)
        await closed(limiter, None)

    run(main())


def test_a_second_loop_is_refused(redis_url: str) -> None:
    limiter = limiter_on(aiotb, redis_url, 10, 1)

    async def use() -> None:
        await limiter.acquire()

    loop = asyncio.new_event_loop()
    task = loop.create_task(use())
    loop.run_until_complete(task)
    with pytest.raises(RuntimeError, match="serves the event loop it is first used on.*this one is not running"):
        asyncio.run(use())
    loop.run_until_complete(limiter.store.redis.aclose())
    loop.close()


# ---- one bound over processes ----

def test_processes_share_one_bound(redis_url: str) -> None:
    rate, burst, n = 300, 5, 3
    logs = run_workers(take_for, [(redis_url, KEY, (rate, 1), {"burst": burst}, 5, 1_000_000_000)] * n)
    counted = [t for c, _ in logs for t in c]
    used = [t for _, u in logs for t in u]
    assert all(len(c) > 0 for c, _ in logs)  # every process was granted
    assert excess(counted, 1e9 / rate, burst) <= 1e-6  # exact, on the server's instants
    assert excess(used, 1e9 / rate, burst) <= n + 1e-6  # when used: one reservation per process late at most
    expected = burst + rate * (max(counted) - min(counted)) / 1e9
    assert 0.8 * expected <= len(counted) <= expected + 1e-6


def test_a_stopped_process_releases_no_backlog(redis_url: str) -> None:
    rate, burst, n = 200, 2, 3

    def stop_one(processes: list[Any]) -> None:
        time.sleep(0.4)
        os.kill(processes[0].pid, signal.SIGSTOP)
        time.sleep(0.15)
        os.kill(processes[0].pid, signal.SIGCONT)

    logs = run_workers(take_for, [(redis_url, KEY, (rate, 1), {"burst": burst}, 10, 1_200_000_000)] * n, during=stop_one)
    assert excess([t for c, _ in logs for t in c], 1e9 / rate, burst) <= 1e-6
    assert excess([t for _, u in logs for t in u], 1e9 / rate, burst) <= n + 1e-6


# ---- one limit per key ----

def test_a_keyed_limiter_keeps_one_hash_per_key(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        keyed = aiotb.KeyedLimiter(2, 1, store=aiotb.RedisStore(redis_url, "per-user"))
        other_host = aiotb.KeyedLimiter(2, 1, store=aiotb.RedisStore(redis_url, "per-user"))
        alice = keyed["alice"]
        assert isinstance(alice, aiotb.RedisLimiter)
        assert alice.store.redis_key == "aiotb:{per-user:alice}"
        assert await alice.atry_acquire(2)
        assert not await other_host["alice"].atry_acquire(1)  # the same hash, from another client
        assert await other_host["bob"].atry_acquire(2)  # another key, another hash
        await keyed.acquire(7, 1)  # int keys too
        client = alice.store.redis
        ttl = await client.pttl("aiotb:{per-user:alice}")
        assert 0 < ttl <= 1000  # it expires once the bucket is full again: 2 tokens at 2/s
        with pytest.raises(TypeError, match="str or int keys"):
            keyed[(1, 2)]
        await other_host["alice"].store.redis.aclose()
        await client.aclose()

    run(main())


# ---- a strict window ----

def window_on(url: str, limit: float, period: float, key: str = KEY) -> Any:
    return aiotb.WindowLimiter(limit, period, store=aiotb.RedisStore(url, key))


def most_in_a_window(instants: list[float], period: float) -> int:
    """The most instants in any window [t, t + period)."""
    ordered = sorted(instants)
    return max(sum(1 for u in ordered[i:] if u < t + period) for i, t in enumerate(ordered))


def test_a_window_holds_every_request_sent_inside_its_blocks(run: Run[None], redis_url: str) -> None:
    limit, period = 5, 0.3

    async def main() -> None:
        clients = [window_on(redis_url, limit, period) for _ in range(3)]
        sent: list[float] = []

        async def request(limiter: Any, i: int) -> None:
            async with limiter:
                await asyncio.sleep(0.002 * (i % 7))  # the request reaches the server anywhere in the block
                sent.append(time.monotonic())
                await asyncio.sleep(0.002 * (i % 3))

        started = time.monotonic()
        await asyncio.gather(*(request(clients[i % 3], i) for i in range(30)))
        took = time.monotonic() - started
        assert len(sent) == 30
        assert most_in_a_window(sent, period) <= limit
        assert took >= (30 / limit - 1) * period  # 6 windows' worth at least
        for c in clients[1:]:
            await c.store.redis.aclose()
        await closed(clients[0], None)

    run(main())


def test_a_held_grant_keeps_its_window_until_the_block_ends(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        holder, other = window_on(redis_url, 1, 0.2), window_on(redis_url, 1, 0.2)
        async with holder:
            entered = time.monotonic()
            assert not await other.atry_acquire()
            await asyncio.sleep(0.4)  # longer than the period: still held
            assert not await other.atry_acquire()
            with pytest.raises(TimeoutError):
                await other.acquire(1, timeout=0.1)  # not before the hold ends
            exited = time.monotonic()
        await other.acquire()
        assert time.monotonic() - exited >= 0.19  # a period after the block's end, not after its grant
        assert exited - entered >= 0.4
        await other.store.redis.aclose()
        await closed(holder, None)

    run(main())


def test_a_held_grant_reached_stale_is_not_left_held(run: Run[None], redis_url: str) -> None:
    """The process stalls 150 ms (over the 100 ms of a token of 2 per 0.2 s) while the trip of a slot's held grant
    runs: the grant is stale when it reads it, so the slot takes afresh, and the stale grant's hold ends then (it
    counts a period from then, as a stale grant is lost), rather than stay held in Redis."""
    async def main() -> None:
        client = Trips.from_url(redis_url)
        limiter = aiotb.WindowLimiter(2, 0.2, store=aiotb.RedisStore(client, KEY))
        other = window_on(redis_url, 2, 0.2)

        async def stall() -> None:
            time.sleep(0.15)

        client.after[1] = stall
        async with limiter.slot(1):
            pass
        await trips_done(limiter)
        assert client.trips == 4  # the stale grant, its hold ended, the grant afresh, its hold ended
        await asyncio.sleep(0.25)  # both grants a period old
        assert await other.read_tokens() == pytest.approx(2)
        await other.store.redis.aclose()
        await closed(limiter, None)

    run(main())


def test_a_window_slot_released_early_and_a_bare_acquire(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        limiter, other = window_on(redis_url, 2, 0.2), window_on(redis_url, 2, 0.2)
        await limiter.acquire()  # counts from its grant
        slot = limiter.slot(1)
        async with slot:
            assert slot.held
            slot.release()
            assert not slot.held
            await asyncio.sleep(0.25)  # the bare grant left; the released one is a period old too
            assert await other.read_tokens() == pytest.approx(2)
        assert await other.atry_acquire(2)
        assert not await other.atry_acquire(1)
        with pytest.raises(ValueError, match="amount"):
            await other.acquire(3)
        await other.store.redis.aclose()
        await closed(limiter, None)

    run(main())


def test_window_timeouts_cancels_and_changes(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        limiter, other = window_on(redis_url, 2, 3600), window_on(redis_url, 2, 3600)
        await limiter.acquire(2)
        with pytest.raises(TimeoutError):
            await other.acquire(1, timeout=1)  # the window frees in an hour
        waiter = asyncio.ensure_future(other.acquire(1))
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await trips_done(other)  # the cancel reaches Redis in a round trip of the limiter's loop
        await other.aset_rate(4)  # 4 in an hour from now on: 2 more
        assert await limiter.atry_acquire(2)
        assert not await limiter.atry_acquire(1)  # the cancelled one left the log: 4 in all, not 5
        await other.store.redis.aclose()
        await closed(limiter, None)

    run(main())
