"""The Redis store's round trips against a real redis-server that stops answering, fails over or asks for a
password: every round trip ends by the caller's deadline or the store's timeout, redis-py's errors are sorted
by their classes into StoreUnavailable (then on_error) and StoreCorrupt, and credentials appear in no repr and
no message.

Timings are bounded from the safe side with a margin that holds on a loaded machine: a call that must end by
a deadline ends no later than ``MARGIN`` after it (measured over 30 cut calls on 2 cores at a load average
of 5: 7 ms after the deadline at the median, 28 ms at worst; ``MARGIN`` is nine times that worst)."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, Iterator, TypeVar

import aiotb
import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis_server import RedisServer

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]
WITHIN = 10.0  # s: the most any single wait here may take before the test fails instead of hanging
MARGIN = 0.25  # s: how long after its deadline a call cut short may end
DEADLINE = 0.5  # s: the callers' timeout here
PERIOD = 40.0  # s per token: no refill to speak of within a test
USER, PASSWORD = "quota-owner", "s3cret-Pw0rd"


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A redis-server of this test's own, which it may stop or reconfigure, with DEBUG allowed from loopback."""
    with RedisServer("--enable-debug-command", "local") as server:
        yield server


def default_client(port: int) -> redis.asyncio.Redis:
    """redis-py's default client of 127.0.0.1:port: its socket timeout (5 s in redis-py 8), its own retries."""
    return redis.asyncio.Redis(host="127.0.0.1", port=port)


async def tokens_in(port: int, key: str) -> float:
    """The tokens the server holds now for key (rates 1 per PERIOD, burst 1000), read on a client of its own."""
    client = redis.asyncio.Redis(host="127.0.0.1", port=port, socket_timeout=WITHIN)
    try:
        limiter = aiotb.Limiter(1, PERIOD, burst=1000, store=aiotb.RedisStore(client, key))
        return await asyncio.wait_for(limiter.read_tokens(), WITHIN)
    finally:
        await client.aclose()


async def ends_within(call: Awaitable[object], bound: float) -> tuple[BaseException | None, float]:
    """What call raised (None if it returned) and the seconds it took; fails if it took longer than bound."""
    started = time.monotonic()
    try:
        await asyncio.wait_for(call, WITHIN)
        error = None
    except Exception as raised:
        error = raised
    took = time.monotonic() - started
    assert took <= bound, f"{took:.3f} s > {bound:.3f} s: {error!r}"
    return error, took


# ---- 1. a server that stops answering, its connection open ----

@pytest.mark.parametrize("stall", ["SIGSTOP", "DEBUG SLEEP"])
def test_a_stalled_server_ends_each_call_by_its_deadline_or_the_store_timeout(run: Run[None],
                                                                             own_server: RedisServer,
                                                                             stall: str) -> None:
    async def main() -> None:
        client = default_client(own_server.port)
        sleeper = redis.asyncio.Redis(host="127.0.0.1", port=own_server.port, socket_timeout=WITHIN,
                                      retry=Retry(NoBackoff(), 0))  # its DEBUG SLEEP is sent once
        store = aiotb.RedisStore(client, "stalled", timeout=DEADLINE)
        limiter = aiotb.Limiter(1, PERIOD, burst=1000, store=store)
        patient = aiotb.Limiter(1, PERIOD, burst=1000, store=aiotb.RedisStore(client, "stalled", timeout=WITHIN))
        allowing = aiotb.Limiter(1, PERIOD, burst=1000,
                                 store=aiotb.RedisStore(client, "stalled", on_error="allow", timeout=DEADLINE))
        sleeping: asyncio.Task[object] | None = None
        try:
            await asyncio.wait_for(limiter.acquire(), WITHIN)
            await sleeper.ping()
            if stall == "SIGSTOP":
                own_server.pause()
            else:
                sleeping = asyncio.ensure_future(sleeper.execute_command("DEBUG", "SLEEP", 5))
                await asyncio.sleep(0.1)  # the server runs the sleep: it reads no other command meanwhile
            # a caller's deadline ends the call, whatever the store's timeout: TimeoutError, taking nothing
            for call in (patient.acquire(timeout=DEADLINE), limiter.acquire(timeout=DEADLINE / 2),
                         allowing.acquire(timeout=DEADLINE / 2)):
                error, took = await ends_within(call, DEADLINE + MARGIN)
                assert isinstance(error, TimeoutError) and not isinstance(error, aiotb.StoreError), repr(error)
            # no deadline: the store's timeout, then StoreUnavailable (on_error's to answer)
            for unanswered in (limiter.acquire(), limiter.atry_acquire(), limiter.read_tokens()):
                error, took = await ends_within(unanswered, DEADLINE + MARGIN)
                assert isinstance(error, aiotb.StoreUnavailable), repr(error)
                assert took >= DEADLINE - 0.01
            error, _ = await ends_within(allowing.acquire(), DEADLINE + MARGIN)
            assert error is None  # let through: Redis did not answer within the store's timeout
            assert limiter.stats().granted == 1 and patient.stats().granted == 0
        finally:
            if stall == "SIGSTOP":
                own_server.resume()
        if sleeping is not None:
            await asyncio.wait_for(sleeping, WITHIN)
        # the calls cut short were never answered on their connections (dropped): what their scripts took stays
        # taken, and every later call reads its own reply
        taken = 1000 - await tokens_in(own_server.port, "stalled")
        assert 1 <= round(taken) <= 1 + 3 + 3, taken
        assert await asyncio.wait_for(limiter.read_tokens(), WITHIN) == pytest.approx(1000 - taken, abs=0.01)
        await asyncio.wait_for(limiter.acquire(timeout=DEADLINE), WITHIN)
        assert await asyncio.wait_for(limiter.read_tokens(), WITHIN) == pytest.approx(999 - taken, abs=0.01)
        await client.aclose()
        await sleeper.aclose()

    run(main())


def test_waiters_queued_behind_a_stalled_head_end_by_their_own_deadlines(run: Run[None],
                                                                         own_server: RedisServer) -> None:
    async def main() -> None:
        client = default_client(own_server.port)
        limiter = aiotb.Limiter(1, PERIOD, burst=1000, store=aiotb.RedisStore(client, "queued", timeout=WITHIN))
        try:
            await asyncio.wait_for(limiter.acquire(), WITHIN)
            own_server.pause()
            deadlines = [0.2, 0.4, 0.6]
            results = await asyncio.gather(*(ends_within(limiter.acquire(timeout=d), d + MARGIN)
                                             for d in deadlines))
            for error, _ in results:
                assert isinstance(error, TimeoutError), repr(error)
            assert limiter.waiting == 0 and limiter.stats().granted == 1
        finally:
            own_server.resume()
        await asyncio.wait_for(limiter.acquire(), WITHIN)
        assert limiter.stats().granted == 2
        await client.aclose()

    run(main())


def test_the_store_timeout_is_checked_and_shown(redis_url: str) -> None:
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"timeout must be finite and > 0, got"):
            aiotb.RedisStore(redis_url, "k", timeout=bad)
    with pytest.raises(TypeError, match="timeout must be a real number, got '1'"):
        aiotb.RedisStore(redis_url, "k", timeout="1")  # type: ignore[arg-type]
    assert aiotb.RedisStore(redis_url, "k").timeout == 2.0
    assert repr(aiotb.RedisStore(redis_url, "k", timeout=0.5)).endswith("'k', timeout=0.5)")


# ---- 2. a server that cannot take writes now: StoreUnavailable, and on_error ----

def test_a_read_only_replica_is_unavailable_not_corrupt(run: Run[None], own_server: RedisServer) -> None:
    async def main() -> None:
        with RedisServer() as replica:
            client = default_client(replica.port)
            try:
                await client.execute_command("REPLICAOF", "127.0.0.1", own_server.port)  # as after a failover
                raising = aiotb.Limiter(10, 1, store=aiotb.RedisStore(client, "replica"))
                with pytest.raises(aiotb.StoreUnavailable) as raised:
                    await asyncio.wait_for(raising.acquire(), WITHIN)
                assert isinstance(raised.value.__cause__, redis.ReadOnlyError), repr(raised.value.__cause__)
                allowing = aiotb.Limiter(10, 1, store=aiotb.RedisStore(client, "replica", on_error="allow"))
                assert await asyncio.wait_for(allowing.atry_acquire(), WITHIN) is True
                fallback = aiotb.Limiter(1, PERIOD, burst=1)
                falling = aiotb.Limiter(10, 1, store=aiotb.RedisStore(client, "replica", on_error=fallback))
                await asyncio.wait_for(falling.acquire(), WITHIN)
                assert fallback.stats().granted == 1
            finally:
                await client.aclose()

    run(main())


def test_a_replica_whose_master_is_down_is_unavailable(run: Run[None], own_server: RedisServer) -> None:
    async def main() -> None:
        with RedisServer("--replica-serve-stale-data", "no") as replica:
            client = default_client(replica.port)
            try:
                await client.execute_command("REPLICAOF", "127.0.0.1", own_server.port)
                own_server.kill()
                limiter = aiotb.Limiter(10, 1, store=aiotb.RedisStore(client, "masterless"))
                with pytest.raises(aiotb.StoreUnavailable) as raised:
                    await asyncio.wait_for(limiter.acquire(), WITHIN)
                assert isinstance(raised.value.__cause__, redis.exceptions.MasterDownError), \
                    repr(raised.value.__cause__)
            finally:
                await client.aclose()

    run(main())


def test_a_server_out_of_memory_is_unavailable(run: Run[None], own_server: RedisServer) -> None:
    async def main() -> None:
        client = default_client(own_server.port)
        try:
            await client.config_set("maxmemory", 1)
            limiter = aiotb.Limiter(10, 1, store=aiotb.RedisStore(client, "full"))
            with pytest.raises(aiotb.StoreUnavailable) as raised:
                await asyncio.wait_for(limiter.atry_acquire(), WITHIN)
            assert isinstance(raised.value.__cause__, redis.exceptions.OutOfMemoryError), repr(raised.value.__cause__)
            await client.config_set("maxmemory", 0)
            assert await asyncio.wait_for(limiter.atry_acquire(), WITHIN) is True
        finally:
            await client.aclose()

    run(main())


# ---- 3. credentials ----

def all_text(error: BaseException | None) -> str:
    """The str and repr of error and of every error chained to it."""
    text = []
    while error is not None:
        text += [str(error), repr(error)]
        error = error.__cause__ or error.__context__
    return "\n".join(text)


def test_credentials_appear_in_no_repr_and_no_message(run: Run[None]) -> None:
    async def main() -> None:
        with RedisServer("--requirepass", "another-" + PASSWORD) as server:
            admin = redis.asyncio.Redis(host="127.0.0.1", port=server.port, password="another-" + PASSWORD)
            await admin.execute_command("ACL", "SETUSER", USER, "on", ">" + PASSWORD, "~*", "&*", "+@all")
            url = f"redis://{USER}:{PASSWORD}@127.0.0.1:{server.port}/0?password={PASSWORD}"
            seen: list[str] = []
            stores: list[aiotb.RedisStore] = []

            def store_of(url: str, key: str, timeout: float = 2.0) -> aiotb.RedisStore:
                stores.append(aiotb.RedisStore(url, key, timeout=timeout))
                return stores[-1]

            store = store_of(url, "secret")
            limiter = aiotb.Limiter(10, 1, store=store)
            window = aiotb.WindowLimiter(10, 1, store=store_of(url, "secret-window"))
            seen += [repr(store), repr(limiter), repr(window), repr(store.for_key("k"))]
            assert await asyncio.wait_for(limiter.atry_acquire(), WITHIN) is True  # the credentials work
            other = aiotb.Limiter(5, 1, store=store)
            with pytest.raises(ValueError) as mismatch:
                await asyncio.wait_for(other.acquire(), WITHIN)
            await admin.set("aiotb:{taken}", "x")
            with pytest.raises(aiotb.StoreCorrupt) as corrupt:
                await asyncio.wait_for(aiotb.Limiter(10, 1, store=store_of(url, "taken")).acquire(), WITHIN)
            wrong = url.replace(PASSWORD, "not-" + PASSWORD)
            with pytest.raises(aiotb.StoreUnavailable) as refused:
                await asyncio.wait_for(aiotb.Limiter(10, 1, store=store_of(wrong, "k")).acquire(), WITHIN)
            with pytest.raises(TypeError) as not_a_store:
                aiotb.Limiter(10, 1, store=url)  # type: ignore[arg-type]
            with pytest.raises(ValueError) as not_a_url:
                aiotb.RedisStore(url.replace("redis://", "http://"), "k")
            server.pause()
            try:
                with pytest.raises(TimeoutError) as late:
                    await asyncio.wait_for(limiter.acquire(timeout=0.1), WITHIN)
                cut = aiotb.Limiter(10, 1, store=store_of(url, "secret", timeout=0.1))
                with pytest.raises(aiotb.StoreUnavailable) as unanswered:
                    await asyncio.wait_for(cut.acquire(), WITHIN)
            finally:
                server.resume()
            await admin.aclose()
            for raised in (mismatch, corrupt, refused, not_a_store, not_a_url, late, unanswered):
                seen.append(all_text(raised.value))
            for each in stores:
                await each.redis.aclose()
        for text in seen:
            assert PASSWORD not in text and USER not in text, text
        assert "redis://***@127.0.0.1" in seen[0] and "password=***" in seen[0]
        assert "RedisStore(url, key)" in seen[-4] and "SharedMemoryStore(name)" in seen[-4]

    run(main())
