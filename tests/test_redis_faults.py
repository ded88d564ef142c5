"""The limiter over a RedisStore against a real redis-server under faults, on both real loops: the server killed
and restarted, a fallback while it is away, its script cache flushed, connections dropped mid-stream, latency
on the wire, the server frozen, and a key of another type.

The rule under every fault: a call is granted only from what the server recorded, or fails with a StoreError
(chained to the client's error) and is not counted; a waiter never hangs on a dead server. Most clients here
do not retry (``Retry(NoBackoff(), 0)``), so each fault reaches the limiter as it happens; where redis-py's
default retries change what a user sees, a default client is tested too. Every wait is bounded, and timings
are bounded from the safe side only: a grant no sooner than the server's instant, a wait no longer than a
generous bound."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any, Awaitable, Callable, Iterator, TypeVar

import aiotb
import aiotb._redis_limiter as redis_limiter
import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis_server import RedisServer
from redis_workers import LoggedLimiter
from tcp_proxy import TcpProxy

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]
WITHIN = 5.0  # s: the most any single wait here may take before the test fails instead of hanging
CLOSED_TRANSPORT = "the handler is closed"  # uvloop's RuntimeError for a write on a transport closed under it


def lost_connection(cause: BaseException | None) -> bool:
    """Whether cause is an error of a lost connection: redis-py's, uvloop's (MagicStack/uvloop#506), or
    asyncio's own AttributeError from a write on a transport whose connection was lost (3.13, CPython
    gh-136234)."""
    return (isinstance(cause, (redis.ConnectionError, redis.TimeoutError)) or CLOSED_TRANSPORT in str(cause)
            or (isinstance(cause, AttributeError) and "_add_writer" in str(cause)))


def client_of(port: int, *, retries: bool = False, timeout: float = WITHIN) -> redis.asyncio.Redis:
    """A client of 127.0.0.1:port; without retries, it reports every connection error and timeout at once."""
    if retries:
        return redis.asyncio.Redis(host="127.0.0.1", port=port, socket_timeout=timeout)
    return redis.asyncio.Redis(host="127.0.0.1", port=port, socket_timeout=timeout, retry=Retry(NoBackoff(), 0))


async def tokens_in(port: int, key: str, rate: float, period: float, burst: float) -> float:
    """The tokens the server holds now for key, read by a limiter of the same rates on a client of its own."""
    client = client_of(port)
    try:
        limiter = aiotb.Limiter(rate, period, burst=burst, store=aiotb.RedisStore(client, key))
        return await asyncio.wait_for(limiter.read_tokens(), WITHIN)
    finally:
        await client.aclose()


def assert_unavailable(error: BaseException | None, cause: type[BaseException] = redis.ConnectionError) -> None:
    """error is a StoreUnavailable chained to a redis-py error of type cause."""
    assert isinstance(error, aiotb.StoreUnavailable), repr(error)
    assert isinstance(error.__cause__, cause), repr(error.__cause__)


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A redis-server of this test's own, which it may kill, restart or pause: never the session's."""
    with RedisServer() as server:
        yield server


# ---- 1. the server killed, then restarted on the same port ----

def test_a_killed_server_fails_calls_and_queued_waiters_then_serves_afresh(run: Run[None],
                                                                          own_server: RedisServer) -> None:
    rate, burst = 5, 3  # a token every 200 ms

    async def main() -> None:
        client = client_of(own_server.port)
        try:
            limiter = aiotb.Limiter(rate, 1, burst=burst, store=aiotb.RedisStore(client, "killed"))
            for _ in range(burst):
                await asyncio.wait_for(limiter.acquire(), WITHIN)
            queued = [asyncio.ensure_future(limiter.acquire()) for _ in range(4)]
            await asyncio.sleep(0.03)  # the head's reservation (due in 200 ms) is made; the others wait behind it
            assert limiter.waiting == 4
            own_server.kill()

            _, pending = await asyncio.wait(queued, timeout=WITHIN)
            assert not pending, "waiters queued at the kill still wait"
            results = [task.exception() for task in queued]
            # the head holds a reservation the server made before it died: granted at its instant, with no
            # further round trip; each waiter behind it asks the dead server and fails
            assert results[0] is None
            for error in results[1:]:
                assert_unavailable(error)
            granted = limiter.stats().granted
            assert granted == burst + 1

            with pytest.raises(aiotb.StoreUnavailable) as raised:
                await asyncio.wait_for(limiter.acquire(), WITHIN)
            assert_unavailable(raised.value)
            with pytest.raises(aiotb.StoreUnavailable) as raised:
                await asyncio.wait_for(limiter.atry_acquire(), WITHIN)
            assert_unavailable(raised.value)
            with pytest.raises(aiotb.StoreUnavailable):
                await asyncio.wait_for(limiter.acquire(timeout=0.5), WITHIN)
            assert limiter.stats().granted == granted
            assert limiter.waiting == 0

            own_server.restart()  # no persistence: the key died with the server, and the script cache with it
            assert await client.exists(limiter.store.redis_key) == 0
            # a fresh key holds a full burst, where the old one owed the head's token for 200 ms more
            assert [await limiter.atry_acquire() for _ in range(burst + 1)] == [True] * burst + [False]
            await asyncio.wait_for(limiter.acquire(), WITHIN)  # waits for the refill, from the new key
            assert limiter.stats().granted == granted + burst + 1
        finally:
            await client.aclose()

    run(main())


def test_a_default_client_rides_out_a_quick_restart(run: Run[None], own_server: RedisServer) -> None:
    # redis-py's default retries (10, with a backoff of up to 1 s each) make a call wait for a server that
    # comes back within them, where a client without retries fails at once: the call is then granted from
    # the restarted server's fresh key, its script loaded again there
    async def main() -> None:
        client = client_of(own_server.port, retries=True)
        try:
            limiter = aiotb.Limiter(1, 40, burst=10, store=aiotb.RedisStore(client, "restarted"))
            for _ in range(4):
                await asyncio.wait_for(limiter.acquire(), WITHIN)
            own_server.kill()
            call = asyncio.ensure_future(limiter.acquire())
            await asyncio.sleep(0.02)
            assert not call.done()  # retrying, not failed
            await asyncio.to_thread(own_server.restart)
            await asyncio.wait_for(call, WITHIN)
            assert limiter.stats().granted == 5
            assert 9 <= await tokens_in(own_server.port, "restarted", 1, 40, 10) < 9.01  # afresh: 10 - 1
        finally:
            await client.aclose()

    run(main())


# ---- 2. on_error: "allow", or a local limiter, while the server is away ----

def test_on_error_allow_lets_calls_through_while_the_server_is_down(run: Run[None], own_server: RedisServer,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_limiter, "RETRY_AFTER", 0.2)

    async def main() -> None:
        client = client_of(own_server.port)
        try:
            store = aiotb.RedisStore(client, "allowed", on_error="allow")
            limiter = aiotb.Limiter(1, 10, burst=1, store=store)  # one token every 10 s
            await asyncio.wait_for(limiter.acquire(), WITHIN)
            assert await limiter.atry_acquire() is False
            own_server.kill()

            started = time.monotonic()
            for _ in range(20):
                await asyncio.wait_for(limiter.acquire(), WITHIN)
                assert await asyncio.wait_for(limiter.atry_acquire(), WITHIN) is True
            await asyncio.wait_for(asyncio.gather(*(limiter.acquire() for _ in range(10))), WITHIN)
            assert time.monotonic() - started < 2.0  # 50 calls that the rate would spread over 500 s

            own_server.restart()
            await asyncio.sleep(0.25)  # RETRY_AFTER since the last failure: Redis is asked again
            await asyncio.wait_for(limiter.acquire(), WITHIN)  # the fresh key's one token
            assert await limiter.atry_acquire() is False  # limited again
            assert await client.exists(store.redis_key) == 1
        finally:
            await client.aclose()

    run(main())


def test_a_fallback_limiter_paces_calls_while_the_server_is_down(run: Run[None], own_server: RedisServer,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_limiter, "RETRY_AFTER", 0.2)
    fallback_rate, calls = 50, 11

    async def main() -> None:
        client = client_of(own_server.port)
        try:
            fallback = aiotb.Limiter(fallback_rate, 1, burst=1)
            store = aiotb.RedisStore(client, "fallback", on_error=fallback)
            limiter = aiotb.Limiter(1000, 1, burst=1000, store=store)  # far faster than the fallback
            await asyncio.wait_for(limiter.acquire(), WITHIN)
            assert fallback.stats().granted == 0
            own_server.kill()

            started = time.monotonic()
            for _ in range(calls):
                await asyncio.wait_for(limiter.acquire(), WITHIN)
            elapsed = time.monotonic() - started
            assert elapsed >= (calls - 1) / fallback_rate - 0.005  # the fallback's burst, then its rate
            assert fallback.stats().granted == calls
            assert await asyncio.wait_for(limiter.atry_acquire(), WITHIN) is False  # the fallback is empty now
            await asyncio.sleep(1 / fallback_rate)
            assert await asyncio.wait_for(limiter.atry_acquire(), WITHIN) is True
            assert fallback.stats().granted == calls + 1

            own_server.restart()
            await asyncio.sleep(0.25)  # RETRY_AFTER since the last failure: Redis is asked again
            started = time.monotonic()
            for _ in range(20):  # at Redis's pace, not the fallback's (which would take 400 ms)
                await asyncio.wait_for(limiter.acquire(), WITHIN)
                assert await asyncio.wait_for(limiter.atry_acquire(), WITHIN) is True
            assert time.monotonic() - started < 2 * 20 / fallback_rate
            assert fallback.stats().granted == calls + 1
            await asyncio.wait_for(limiter.acquire(500), WITHIN)  # from Redis: half a second of debt in its key
            assert await client.exists(store.redis_key) == 1
            assert 459 < await tokens_in(own_server.port, "fallback", 1000, 1, 1000) < 600  # refilled since, a little
        finally:
            await client.aclose()

    run(main())


# ---- 3. the script cache flushed between calls ----

async def cached_scripts(client: redis.asyncio.Redis) -> int:
    """How many scripts the server holds in its cache."""
    return int((await client.info("memory"))["number_of_cached_scripts"])


def test_a_flushed_script_is_loaded_again_and_the_tokens_are_kept(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            limiter = aiotb.Limiter(1, 100, burst=10, store=aiotb.RedisStore(client, "flushed"))  # 1 per 100 s
            for _ in range(4):
                await asyncio.wait_for(limiter.acquire(), WITHIN)
            assert await cached_scripts(client) >= 1
            assert 6 <= await limiter.read_tokens() < 6.01

            await client.script_flush()
            assert await cached_scripts(client) == 0
            assert await asyncio.wait_for(limiter.atry_acquire(), WITHIN) is True  # NOSCRIPT, loaded, run again
            assert await cached_scripts(client) >= 1
            assert 5 <= await limiter.read_tokens() < 5.01  # the key's state went on: not a fresh 10

            await client.script_flush()
            await asyncio.wait_for(asyncio.gather(*(limiter.acquire() for _ in range(3))), WITHIN)  # queued
            assert 2 <= await limiter.read_tokens() < 2.01
            await client.script_flush()
            assert 2 <= await limiter.read_tokens() < 2.01
            assert limiter.stats().granted == 8
        finally:
            await client.aclose()

    run(main())


# ---- 4. connections dropped in the middle of a stream of calls ----

BURST = 5_000    # never emptied here (a run grants hundreds): the tokens taken are BURST minus the tokens read
PERIOD = 800.0   # s per token: under 0.04 tokens of refill in a run of DROPS_WITHIN, below the 0.1 checked


class Tally:
    """What the clients saw: grants and StoreUnavailable failures."""

    def __init__(self) -> None:
        self.granted = 0
        self.unavailable = 0

    async def call(self, call: Awaitable[Any]) -> None:
        """Counts one acquire or try_acquire; anything but a grant or a failure fails the test."""
        try:
            result = await asyncio.wait_for(call, WITHIN)
        except aiotb.StoreUnavailable as error:
            cause = error.__cause__
            assert lost_connection(cause), \
                repr(cause)
            self.unavailable += 1
            return
        assert result in (None, True), result  # a refusal is impossible while the burst is never emptied
        self.granted += 1


DROPS, GRANTS = 10, 30  # a run goes on until both are reached, however slow the machine...
DROPS_WITHIN = 30.0     # ...and fails at this many seconds instead of hanging


async def calls_under_drops(port: int, key: str, *, retries: bool) -> tuple[Tally, int, int]:
    """Two limiters of key stream acquires (five at once) and try_acquires through a proxy that drops every
    connection every 2 ms once two more calls were granted, until it has dropped them DROPS times and GRANTS
    calls were granted (counts, not a duration: a slow machine makes fewer calls a second); returns what they
    counted, the drops, and the tokens the server says were taken."""
    tally = Tally()
    async with TcpProxy(port) as proxy:
        clients = [client_of(proxy.port, retries=retries) for _ in range(2)]
        try:
            limiters = [aiotb.Limiter(1, PERIOD, burst=BURST, store=aiotb.RedisStore(c, key)) for c in clients]
            dropped = 0

            def done() -> bool:
                return dropped >= DROPS and tally.granted >= GRANTS

            async def acquires() -> None:
                while not done():
                    await asyncio.gather(*(tally.call(limiters[0].acquire()) for _ in range(5)))

            async def try_acquires() -> None:
                while not done():
                    await tally.call(limiters[1].atry_acquire())

            async def drops() -> None:
                nonlocal dropped
                while not done():
                    granted = tally.granted
                    await asyncio.sleep(0.002)
                    while tally.granted < granted + 2:  # calls go on between drops...
                        if done():  # ...unless the calls have stopped: the drops counted were enough
                            return
                        await asyncio.sleep(0.001)
                    proxy.drop_connections()
                    dropped += 1

            async with asyncio.timeout(DROPS_WITHIN):
                await asyncio.gather(acquires(), try_acquires(), drops())
            assert sum(limiter.stats().granted for limiter in limiters) == tally.granted
            assert all(limiter.waiting == 0 for limiter in limiters)
        finally:
            for client in clients:
                await client.aclose()
    taken = BURST - await tokens_in(port, key, 1, PERIOD, BURST)
    assert abs(taken - round(taken)) < 0.1, taken
    return tally, dropped, round(taken)


def test_dropped_connections_never_grant_what_the_server_did_not_record(run: Run[tuple[Tally, int, int]],
                                                                       redis_url: str,
                                                                       redis_server: RedisServer) -> None:
    tally, dropped, taken = run(calls_under_drops(redis_server.port, "dropped", retries=False))
    assert tally.unavailable > 0, (dropped, vars(tally))
    # each grant was recorded; each failure took at most one reservation (the script ran, its reply was lost)
    assert tally.granted <= taken <= tally.granted + tally.unavailable, (taken, vars(tally))


def test_a_default_client_retries_dropped_connections_from_the_safe_side(run: Run[tuple[Tally, int, int]],
                                                                        redis_url: str,
                                                                        redis_server: RedisServer) -> None:
    # redis-py retries a call whose connection dropped: the drops are hidden, but a script that ran before its
    # reply was lost runs again, so the server may record more than the clients were granted, never less
    tally, dropped, taken = run(calls_under_drops(redis_server.port, "retried", retries=True))
    assert tally.granted <= taken, (taken, vars(tally))


class LosesAReply(redis.asyncio.Redis):
    """A client whose n-th EVALSHA runs on the server and then loses its reply: a connection dropped after the
    script ran, at the call chosen."""

    def __init__(self, *args: Any, lose: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.evalsha, self.lose = 0, lose

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        reply = await super().execute_command(*args, **options)
        if args[0] == "EVALSHA":
            self.evalsha += 1
            if self.evalsha == self.lose:
                raise redis.ConnectionError("the reply was lost")
        return reply


def test_a_lost_run_of_grants_fails_every_waiter_it_may_have_taken_for(run: Run[None], redis_url: str,
                                                                        redis_server: RedisServer) -> None:
    """One round trip grants the head and the waiters behind it that are due; when its reply is lost, the script
    may have reserved for all of them: each fails (StoreUnavailable), so that the server never records more than
    was granted plus what the failures took (the followers were asked again, and granted, before: the lost
    trip's reservations for them were counted nowhere)."""
    async def main() -> None:
        client = LosesAReply(host="127.0.0.1", port=redis_server.port, retry=Retry(NoBackoff(), 0), lose=3)
        try:
            limiter = aiotb.Limiter(1, PERIOD, burst=BURST, store=aiotb.RedisStore(client, "lost-run"))
            await limiter.acquire()  # the first trip; then the head of the five alone, then the four behind it in one
            waiters = [asyncio.ensure_future(limiter.acquire()) for _ in range(5)]
            results = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), WITHIN)
            failed = [r for r in results if isinstance(r, aiotb.StoreUnavailable)]
            assert all(r is None or isinstance(r, aiotb.StoreUnavailable) for r in results), results
            assert client.evalsha >= 2 and failed, (client.evalsha, results)
            granted = 1 + results.count(None)
            taken = BURST - await tokens_in(redis_server.port, "lost-run", 1, PERIOD, BURST)
            assert granted <= round(taken) <= granted + len(failed), (taken, granted, len(failed))
        finally:
            await client.aclose()

    run(main())


class ResetOnceConnected(redis.asyncio.Connection):
    """A connection the network resets as soon as it is made, the loop having seen the reset: a drop that lands
    between the handshake and the first command, as a few in a hundred of the proxy's drops above do."""

    async def connect(self) -> None:
        await super().connect()
        self._writer.transport.abort()
        await asyncio.sleep(0)


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_a_connection_reset_before_its_first_command_is_store_unavailable(run_on: Callable[..., None],
                                                                           redis_url: str, redis_server: RedisServer,
                                                                           loop_kind: str) -> None:
    async def main() -> None:
        pool = redis.asyncio.ConnectionPool(connection_class=ResetOnceConnected, host="127.0.0.1",
                                            port=redis_server.port, socket_timeout=WITHIN, retry=Retry(NoBackoff(), 0))
        client = redis.asyncio.Redis(connection_pool=pool)
        try:
            limiter = aiotb.Limiter(10, 1, store=aiotb.RedisStore(client, "reset"))
            for call in (limiter.atry_acquire, limiter.acquire, limiter.read_tokens):
                with pytest.raises(aiotb.StoreUnavailable) as raised:
                    await asyncio.wait_for(call(), WITHIN)
                cause = raised.value.__cause__
                assert lost_connection(cause), repr(cause)
            queued = [asyncio.ensure_future(limiter.acquire()) for _ in range(3)]  # a serving task's round trips
            await asyncio.wait(queued, timeout=WITHIN)
            for task in queued:
                error = task.exception()
                assert isinstance(error, aiotb.StoreUnavailable), repr(error)
            assert limiter.stats().granted == 0
            allowing = aiotb.Limiter(10, 1, store=aiotb.RedisStore(client, "reset", on_error="allow"))
            await asyncio.wait_for(allowing.acquire(), WITHIN)  # let through, as for any failure to answer
            assert await asyncio.wait_for(allowing.atry_acquire(), WITHIN) is True
        finally:
            await client.aclose()

    if loop_kind == "uvloop":
        import uvloop

        run_on(uvloop.new_event_loop(), main())
    else:
        run_on(asyncio.new_event_loop(), main())


# ---- 5. latency on the wire ----

LATENCY = 0.005  # s, each way through the proxy


def most_over_bound(instants: list[int], rate: float, burst: float) -> float:
    """The most by which the grants (one token each, at int ns) of any interval exceed burst + rate * t."""
    ordered = sorted(instants)
    worst = -math.inf
    for i, first in enumerate(ordered):
        for j in range(i, len(ordered)):
            worst = max(worst, j - i + 1 - burst - rate * (ordered[j] - first) / 1e9)
    return worst


def test_latency_keeps_the_rate_and_wakes_no_sooner_than_the_server_grants(run: Run[tuple[list[int], list[int]]],
                                                                          redis_url: str,
                                                                          redis_server: RedisServer) -> None:
    rate, burst, seconds = 50, 5, 0.6  # a token every 20 ms, a round trip of 10 ms

    async def main() -> tuple[list[int], list[int]]:
        async with TcpProxy(redis_server.port) as proxy:
            proxy.latency = LATENCY
            client = client_of(proxy.port)
            try:
                limiter = LoggedLimiter(rate, 1, burst=burst, store=aiotb.RedisStore(client, "slow-wire"))
                limiter.counted = []  # the server's instant of each grant, ns since 1970 on its clock
                await limiter.read_tokens()  # connected before the first grant
                used: list[int] = []  # when each task resumed, on the same host's clock
                end = time.monotonic() + seconds

                async def user() -> None:
                    while time.monotonic() < end:
                        await asyncio.wait_for(limiter.acquire(), WITHIN)
                        used.append(time.time_ns())

                await asyncio.gather(*(user() for _ in range(3)))
                assert limiter.stats().granted == len(used)
                return limiter.counted, used
            finally:
                await client.aclose()

    counted, used = run(main())
    n = len(used)
    assert len(counted) == n
    assert n >= burst + rate * seconds / 2, n  # the rate is kept, not lost in round trips
    assert most_over_bound(counted, rate, burst) <= 1e-6  # exact, on the server's instants
    assert most_over_bound(used, rate, burst) <= 1 + 1e-6  # when used: within one token (the latency's jitter)
    late = [(u - c) / 1e9 for c, u in zip(sorted(counted), sorted(used))]
    assert min(late) >= 0, late  # no task resumed before the server's instant of its grant
    ordered = sorted(late)
    assert ordered[n // 2] <= 2 * LATENCY + 0.010, late  # the typical wake: a round trip and a few ms
    # the latest: a round trip, plus a pause of the whole process on a loaded machine (a full collection of a
    # large test process, another process's time slice), which delays whichever grants fall in it
    assert ordered[-1] <= 2 * LATENCY + 0.060, late


# ---- 6. a frozen server ----

def test_a_paused_server_fails_calls_within_the_socket_timeout(run: Run[None], own_server: RedisServer) -> None:
    timeout, pause = 0.1, 0.3

    async def main() -> None:
        client = client_of(own_server.port, timeout=timeout)
        try:
            limiter = aiotb.Limiter(1, PERIOD, burst=1000, store=aiotb.RedisStore(client, "paused"))
            await asyncio.wait_for(limiter.acquire(), WITHIN)
            paused = time.monotonic()
            own_server.pause(pause)
            for call in (limiter.acquire, limiter.atry_acquire):
                started = time.monotonic()
                with pytest.raises(aiotb.StoreUnavailable) as raised:
                    await asyncio.wait_for(call(), WITHIN)
                assert_unavailable(raised.value, redis.TimeoutError)
                assert timeout - 0.01 <= time.monotonic() - started < timeout + 0.1
            assert limiter.stats().granted == 1

            await asyncio.sleep(max(0.0, paused + pause + 0.05 - time.monotonic()))
            await asyncio.wait_for(limiter.acquire(), WITHIN)
            assert limiter.stats().granted == 2
            # a failed call granted nothing, but its script, sent before the timeout, may still have run once
            # the server woke: tokens taken, from the safe side
            taken = round(1000 - await tokens_in(own_server.port, "paused", 1, PERIOD, 1000))
            assert 2 <= taken <= 4, taken
        finally:
            await client.aclose()

    run(main())


def test_a_default_client_waits_out_a_short_pause(run: Run[None], own_server: RedisServer) -> None:
    # with redis-py's default retries, each timeout is retried: the call is granted once the server runs
    # again (not a hang, not a failure), and may have run its script more than once
    timeout, pause = 0.1, 0.3

    async def main() -> None:
        client = client_of(own_server.port, retries=True, timeout=timeout)
        try:
            limiter = aiotb.Limiter(1, PERIOD, burst=1000, store=aiotb.RedisStore(client, "waited"))
            await asyncio.wait_for(limiter.acquire(), WITHIN)
            paused = time.monotonic()
            own_server.pause(pause)
            await asyncio.wait_for(limiter.acquire(), WITHIN)
            assert pause <= time.monotonic() - paused < pause + 1.5
            assert limiter.stats().granted == 2
            taken = round(1000 - await tokens_in(own_server.port, "waited", 1, PERIOD, 1000))
            assert taken >= 2, taken
        finally:
            await client.aclose()

    run(main())


def test_a_waiter_leaving_during_a_failed_round_trip_leaves_the_others_theirs(run: Run[None],
                                                                             own_server: RedisServer) -> None:
    timeout = 0.1

    async def main() -> None:
        client = client_of(own_server.port, timeout=timeout)
        try:
            limiter = aiotb.Limiter(10, 1, store=aiotb.RedisStore(client, "left"))
            await asyncio.wait_for(limiter.acquire(), WITHIN)
            own_server.pause(1.0)
            first = asyncio.ensure_future(limiter.acquire())
            for _ in range(3):  # its round trip on its way: the two after it wait for the next one
                await asyncio.sleep(0)
            leaving, last = (asyncio.ensure_future(limiter.acquire()) for _ in range(2))
            await asyncio.wait([first], timeout=WITHIN)  # its round trip timed out; leaving's starts now
            await asyncio.sleep(timeout / 3)
            leaving.cancel()  # while its round trip is on its way to timing out
            results: list[BaseException | None] = []
            for task in (first, leaving, last):
                try:
                    await asyncio.wait_for(task, WITHIN)
                    results.append(None)
                except BaseException as error:
                    results.append(error)
            assert isinstance(results[0], aiotb.StoreUnavailable), repr(results[0])
            assert isinstance(results[1], asyncio.CancelledError), repr(results[1])
            assert isinstance(results[2], aiotb.StoreUnavailable), repr(results[2])  # the failure of its round trip
            assert limiter.stats().granted == 1
        finally:
            own_server.resume()
            await client.aclose()

    run(main())


# ---- 7. a key of another type ----

def test_a_key_of_another_type_is_corrupt_and_grants_nothing(run: Run[None], redis_url: str) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            store = aiotb.RedisStore(client, "taken")
            limiter = aiotb.Limiter(10, 1, store=store)
            await client.set(store.redis_key, "x")
            for call in (limiter.acquire, limiter.atry_acquire, limiter.read_tokens, limiter.ahas_capacity):
                with pytest.raises(aiotb.StoreCorrupt) as raised:
                    await asyncio.wait_for(call(), WITHIN)
                assert isinstance(raised.value.__cause__, redis.ResponseError), repr(raised.value.__cause__)
                assert "WRONGTYPE" in str(raised.value.__cause__)
            queued = [asyncio.ensure_future(limiter.acquire()) for _ in range(3)]
            await asyncio.wait(queued, timeout=WITHIN)
            assert all(isinstance(task.exception(), aiotb.StoreCorrupt) for task in queued)
            assert limiter.stats().granted == 0
            assert await client.get(store.redis_key) == b"x"  # left as it was

            await client.delete(store.redis_key)
            await client.hset(store.redis_key, mapping={"owner": "someone else"})
            with pytest.raises(aiotb.StoreCorrupt):
                await asyncio.wait_for(limiter.acquire(), WITHIN)
            assert limiter.stats().granted == 0
            assert await client.hgetall(store.redis_key) == {b"owner": b"someone else"}
        finally:
            await client.aclose()

    run(main())


@pytest.mark.parametrize("on_error", ["allow", "fallback"])
def test_on_error_does_not_hide_a_corrupt_key(run: Run[None], redis_url: str, on_error: str) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            fallback = aiotb.Limiter(10, 1)
            store = aiotb.RedisStore(client, "taken", on_error="allow" if on_error == "allow" else fallback)
            limiter = aiotb.Limiter(10, 1, store=store)
            await client.set(store.redis_key, "x")
            with pytest.raises(aiotb.StoreCorrupt):
                await asyncio.wait_for(limiter.acquire(), WITHIN)
            with pytest.raises(aiotb.StoreCorrupt):
                await asyncio.wait_for(limiter.atry_acquire(), WITHIN)
            assert fallback.stats().granted == 0
        finally:
            await client.aclose()

    run(main())
