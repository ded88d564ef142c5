"""What is left of a server's quota, as its responses say (``X-RateLimit-Remaining`` and ``-Reset``), followed by
the HTTP adapters (``aiotb.httpx.LimitedTransport``, ``aiotb.aiohttp.limiter_middleware``) over every kind of
limiter, against a real local server and a real redis-server: where the store keeps a limit of the quota, the
request the quota has no room for waits for its reset; over a leased RedisStore, which keeps none (the table of
stores), nothing is followed and the server refuses it."""

from __future__ import annotations

import asyncio
import math
import time
import uuid

import pytest
from aiohttp import web
from test_http_pauses import CLIENTS, RUN_WITHIN, STORES, get, limiter_over

QUOTA, WINDOW = 2, 1.0  # requests per fixed window of s, from the first request


async def quota_server(statuses: list[int]) -> web.AppRunner:
    """A server of QUOTA requests per WINDOW s that tells what is left and when it resets (whole seconds, rounded
    up), and answers 429 above the quota; each status it answers goes into statuses."""
    window = {"start": -math.inf, "count": 0}

    async def handle(request: web.Request) -> web.Response:
        now = time.monotonic()
        if now >= window["start"] + WINDOW:
            window.update(start=now, count=0)
        window["count"] += 1
        status = 200 if window["count"] <= QUOTA else 429
        statuses.append(status)
        reset = math.ceil(window["start"] + WINDOW - now - 1e-9)
        return web.Response(status=status, headers={"X-RateLimit-Remaining": str(max(0, QUOTA - window["count"])),
                                                    "X-RateLimit-Reset": str(reset)})

    app = web.Application()
    app.router.add_get("/", handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("client", CLIENTS)
def test_the_quota_is_followed_over_every_store_that_keeps_a_limit(lib, run_on, request, client, store):
    async def main() -> tuple[list[int], float]:
        statuses: list[int] = []
        runner = await quota_server(statuses)
        host, port = runner.addresses[0][:2]
        try:
            async with limiter_over(lib, store, request, key=f"follow-{uuid.uuid4().hex[:12]}") as limiter:
                async with asyncio.timeout(RUN_WITHIN):
                    started = time.monotonic()
                    for _ in range(QUOTA + 1):
                        await get(lib, client, limiter, f"http://{host}:{port}/")
                    return statuses, time.monotonic() - started
        finally:
            await runner.cleanup()

    statuses, took = run_on(asyncio.new_event_loop(), main())
    if store == "redis lease":  # keeps no limit of the quota: nothing followed, the third refused at once
        assert statuses == [200, 200, 429] and took < WINDOW
    else:  # the third once the window is over (whole seconds: at most 1 s on); not much later on a loaded machine
        assert statuses == [200] * (QUOTA + 1) and WINDOW - 0.1 <= took < 5.0
