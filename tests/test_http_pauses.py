"""The pause a server asks of the HTTP adapters (``aiotb.httpx.LimitedTransport``,
``aiotb.aiohttp.limiter_middleware``): kept over every kind of limiter (in-process, shared memory,
Redis, Redis leases), against a real local server and a real redis-server; capped at ``max_pause``,
with a warning that names no secret of the URL; and a ``max_pause`` that is not a span refused."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import math
import uuid
from types import SimpleNamespace
from typing import Any, AsyncIterator, Callable

import aiohttp
import httpx
import pytest
from http_server import RateLimitedServer

THROTTLE_FOR = 0.3   # s: the server answers 429 with a Retry-After for its first 0.3 s
ASKED = 1.0          # s: the pause the server asks (or, capped, the pause it gets)
EARLY = 0.02         # s: a retry may arrive this much before the pause's end (clocks' rounding, a timer's slack)
RUN_WITHIN = 30      # s: a request never sent again (a pause of years) fails its case instead of hanging
STORES = ["process", "shared memory", "redis", "redis lease"]
CLIENTS = ["httpx", "aiohttp"]


def integration(lib: SimpleNamespace, name: str) -> Any:
    """aiotb.httpx or aiotb.aiohttp on lib's engine."""
    return importlib.import_module(f"{lib.package.__name__}.{name}")


@contextlib.asynccontextmanager
async def limiter_over(lib: SimpleNamespace, store: str, request: pytest.FixtureRequest,
                       key: str = "http") -> AsyncIterator[Any]:
    """A Limiter(100, 1) of lib over a new store of kind store (a Redis store's at key), closed (or unlinked) on
    exit."""
    package = lib.package
    if store == "process":
        yield lib.Limiter(100, 1)
    elif store == "shared memory":
        if lib.name != "c":
            pytest.skip("a SharedMemoryStore needs the C engine (test_bad_input.test_only_the_c_engine_shares_a_store)")
        shared = package.SharedMemoryStore(f"aiotb-test-{uuid.uuid4().hex[:16]}")
        try:
            yield lib.Limiter(100, 1, store=shared)
        finally:
            shared.unlink(shared.name)
    else:
        url = request.getfixturevalue("redis_url")
        limiter = lib.Limiter(100, 1, store=package.RedisStore(url, key, lease=1.0 if store == "redis lease"
                                                                else None))
        try:
            yield limiter
        finally:
            if store == "redis lease":
                await limiter.aclose()
            await limiter.store.redis.aclose()


async def get(lib: SimpleNamespace, client: str, limiter: Any, url: str, **options: Any) -> int:
    """One GET of url through the client's adapter over limiter: the final status."""
    if client == "httpx":
        transport = integration(lib, "httpx").LimitedTransport(limiter, **options)
        async with httpx.AsyncClient(transport=transport) as session:
            return (await session.get(url)).status_code
    middleware = integration(lib, "aiohttp").limiter_middleware(limiter, **options)
    async with aiohttp.ClientSession(middlewares=(middleware,)) as session, session.get(url) as response:
        await response.read()
        return response.status


async def throttled_get(lib: SimpleNamespace, client: str, store: str, request: pytest.FixtureRequest,
                        retry_after: str, **options: Any) -> tuple[int, list[tuple[float, int]]]:
    """One GET through a new limiter over store, to a server that answers 429 with retry_after for
    THROTTLE_FOR: the final status and every arrival at the server (time, status)."""
    async with RateLimitedServer(throttle_for=THROTTLE_FOR, throttle_retry_after=retry_after) as server, \
            limiter_over(lib, store, request) as limiter:
        async with asyncio.timeout(RUN_WITHIN):
            status = await get(lib, client, limiter, server.url, **options)
    return status, [(arrival.at, arrival.status) for arrival in server.arrivals]


def check_paused(status: int, arrivals: list[tuple[float, int]], pause: float) -> None:
    """One 429, then the retry, answered 200, no sooner than pause after it."""
    assert status == 200 and [seen for _, seen in arrivals] == [429, 200], arrivals
    (throttled, _), (retried, _) = arrivals
    assert retried - throttled >= pause - EARLY, f"sent again {retried - throttled:.4f} s after the 429"


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("client", CLIENTS)
def test_retry_after_pauses_over_every_store(lib, run_on, request, client, store):
    status, arrivals = run_on(asyncio.new_event_loop(), throttled_get(lib, client, store, request, "1"))
    check_paused(status, arrivals, ASKED)


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("client", CLIENTS)
def test_a_pause_of_years_is_capped_over_every_store(lib, run_on, request, caplog, client, store):
    caplog.set_level(logging.WARNING, logger="aiotb.http")
    status, arrivals = run_on(asyncio.new_event_loop(),
                              throttled_get(lib, client, store, request, "287000000", max_pause=ASKED))
    check_paused(status, arrivals, ASKED)
    [warning] = [record for record in caplog.records if record.name == "aiotb.http"]
    assert warning.levelno == logging.WARNING
    assert warning.getMessage() == ("127.0.0.1 answered 429 with Retry-After '287000000', a pause of 2.87e+08 s: "
                                    "paused for max_pause, 1 s")


# ---- on the virtual clock: httpx's mock transport ----

def mock_client(lib: SimpleNamespace, limiter: Any, answers: list[httpx.Response], sent: list[float],
                **options: Any) -> httpx.AsyncClient:
    """A client of base url http://user:secret@api.test whose transport answers answers in turn, recording the
    loop time of each request in sent."""
    loop = asyncio.get_running_loop()

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(loop.time())
        return answers[len(sent) - 1]

    transport = integration(lib, "httpx").LimitedTransport(limiter, httpx.MockTransport(handler), **options)
    return httpx.AsyncClient(transport=transport, base_url="http://user:secret@api.test/?token=secret")


@pytest.mark.parametrize("retry_after, max_pause, paused", [
    ("3600", None, 300.0),                            # the default cap: 5 minutes
    ("3600", 3600, 3600.0),                           # a cap the server's ask fits in
    ("287000000", 10, 10.0),                          # 9 years, the engine's range
    ("Fri, 31 Dec 2032 23:59:59 GMT", 10, 10.0),      # an HTTP date years ahead
    ("9.5", 10, 9.5),                                 # within the cap: as asked
], ids=["default", "raised", "years", "date", "within"])
def test_max_pause_caps_what_a_server_asks(lib, vrun, caplog, retry_after, max_pause, paused):
    async def main() -> tuple[list[float], float]:
        limiter = lib.Limiter(100, 1)
        sent: list[float] = []
        options = {} if max_pause is None else {"max_pause": max_pause}
        answers = [httpx.Response(429, headers={"Retry-After": retry_after}), httpx.Response(200)]
        async with asyncio.timeout(7200), mock_client(lib, limiter, answers, sent, **options) as client:
            assert (await client.get("/")).status_code == 200
            await limiter.acquire()
        return sent, asyncio.get_running_loop().time()

    caplog.set_level(logging.WARNING, logger="aiotb.http")
    sent, acquired_at = vrun(main())
    assert sent == [0.0, pytest.approx(paused)] and acquired_at == pytest.approx(paused)
    warnings = [record.getMessage() for record in caplog.records if record.name == "aiotb.http"]
    if paused == float(retry_after if retry_after[0].isdigit() else "nan"):
        assert warnings == []
    else:
        [warning] = warnings
        assert warning.startswith(f"api.test answered 429 with Retry-After {retry_after!r}, a pause of ")
        assert warning.endswith(f" s: paused for max_pause, {paused:g} s")
        assert "secret" not in warning and "user" not in warning


def test_a_direct_retry_after_is_not_capped(lib, vrun):
    """The cap is on what a server asks an adapter: a caller's own ``retry_after`` pauses as long as it asks."""
    async def main() -> tuple[float, float]:
        limiter = lib.Limiter(100, 1)
        span = limiter.retry_after("3600")
        await limiter.acquire()
        return span, asyncio.get_running_loop().time()

    assert vrun(main()) == (3600.0, pytest.approx(3600.0))


@pytest.mark.parametrize("value, error, shown", [
    (0, ValueError, "0"), (-1, ValueError, "-1"), (math.nan, ValueError, "nan"), (math.inf, ValueError, "inf"),
    (10.0**9, ValueError, "1000000000.0"), (True, TypeError, "True"), ("300", TypeError, "'300'"),
    (None, TypeError, "None"),
])
def test_bad_max_pause(lib, value, error, shown):
    limiter = lib.Limiter(10, 1)
    pattern = rf"^max_pause must be .*, got {shown}$"
    with pytest.raises(error, match=pattern):
        integration(lib, "aiohttp").limiter_middleware(limiter, max_pause=value)
    with pytest.raises(error, match=pattern):
        integration(lib, "httpx").LimitedTransport(limiter, httpx.MockTransport(lambda request: httpx.Response(200)),
                                                   max_pause=value)
