"""A local HTTP server that limits its clients as a rate-limited API does, and records what it saw.

``async with RateLimitedServer(100, 1.0) as server:`` serves ``server.url`` on 127.0.0.1 (a free
port) from the running loop until the block exits. It lets at most ``max_requests`` requests through
in any sliding window of ``window`` seconds, counted at their arrival (``time.monotonic()`` when the
handler sees the request), and answers the others 429 at once, with a ``Retry-After`` (the whole
seconds until the window has room) or without one (``retry_after_on_limit``). A request let through
is answered 200 after ``processing`` seconds plus a random ``jitter`` (uniform, seeded). For
``throttle_for`` seconds from the first request's arrival, every request is answered 429 with
``Retry-After: throttle_retry_after``, as a server that has been overrun for a while answers.
Rejected requests do not count in the window. ``server.arrivals`` holds every request's arrival
time, status and ``X-Tag`` header, in order of arrival; ``server.reset()`` forgets them (say, after opening connections)."""

from __future__ import annotations

import asyncio
import collections
import math
import random
import time
from typing import NamedTuple

from aiohttp import web


class Arrival(NamedTuple):
    """One request as the server saw it."""

    at: float               # time.monotonic() when the handler saw it
    status: int             # what it was answered
    tag: str | None = None  # its X-Tag header, for a client that names its requests


class RateLimitedServer:
    """At most ``max_requests`` in any ``window`` seconds; see the module's docstring."""

    def __init__(self, max_requests: int = 100, window: float = 1.0, *, retry_after_on_limit: bool = False,
                 processing: float = 0.0, jitter: float = 0.0, throttle_for: float = 0.0,
                 throttle_retry_after: str = "1", seed: int = 0) -> None:
        self.max_requests = max_requests
        self.window = window
        self.retry_after_on_limit = retry_after_on_limit
        self.processing = processing
        self.jitter = jitter
        self.throttle_for = throttle_for
        self.throttle_retry_after = throttle_retry_after
        self.arrivals: list[Arrival] = []
        self._random = random.Random(seed)
        self._let_through: collections.deque[float] = collections.deque()  # arrivals of the current window
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> RateLimitedServer:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        now = time.monotonic()
        tag = request.headers.get("X-Tag")
        first = self.arrivals[0].at if self.arrivals else now
        if now < first + self.throttle_for:
            self.arrivals.append(Arrival(now, 429, tag))
            return web.Response(status=429, text="throttled", headers={"Retry-After": self.throttle_retry_after})
        let_through = self._let_through
        while let_through and let_through[0] <= now - self.window:
            let_through.popleft()
        if len(let_through) >= self.max_requests:
            self.arrivals.append(Arrival(now, 429, tag))
            headers = {}
            if self.retry_after_on_limit:
                headers["Retry-After"] = str(max(1, math.ceil(let_through[0] + self.window - now)))
            return web.Response(status=429, text="over the limit", headers=headers)
        let_through.append(now)
        self.arrivals.append(Arrival(now, 200, tag))
        await asyncio.sleep(self.processing + self._random.uniform(0, self.jitter))
        return web.Response(text="ok")

    def reset(self) -> None:
        """Forgets every request so far: the window starts empty, and the throttle starts again at the next
        request."""
        self.arrivals.clear()
        self._let_through.clear()

    def count(self, status: int) -> int:
        """How many requests were answered ``status``."""
        return sum(1 for arrival in self.arrivals if arrival.status == status)

    def busiest(self, window: float | None = None) -> int:
        """The most requests answered 200 that arrived in one window of ``window`` seconds (default: the
        server's), as [t, t + window)."""
        return busiest([arrival.at for arrival in self.arrivals if arrival.status == 200],
                       self.window if window is None else window)


def busiest(times: list[float], span: float) -> int:
    """The most of times (sorted) in one window [t, t + span)."""
    most, start = 0, 0
    for end, at in enumerate(times):
        while times[start] <= at - span:
            start += 1
        most = max(most, end - start + 1)
    return most
