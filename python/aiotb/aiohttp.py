"""A limiter under aiohttp: ``aiohttp.ClientSession(middlewares=(limiter_middleware(limiter),))``.

Every request the session sends, redirects and retries included, first takes a slot of the limiter
and holds it until its response is released, so that a ``WindowLimiter`` counts the request in
every window it may reach the server in. What each response's rate-limit headers say is left of the
server's quota limits the limiter until its reset, and a 429 or 503 with a ``Retry-After`` pauses it and
is sent again. Needs aiohttp 3.12 or later, for client middlewares (``pip install aiotb[aiohttp]``)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import aiohttp

from . import _http
from ._limiter import Limiter
from ._signals import QuotaKind

__all__ = ["limiter_middleware"]


def limiter_middleware(limiter: Limiter[Any], *, amount: float | Callable[[aiohttp.ClientRequest], float] = 1,
                       retries: int = 3, max_pause: float = _http.MAX_PAUSE,
                       follow: QuotaKind | None = "requests") -> aiohttp.ClientMiddlewareType:
    """An aiohttp client middleware that sends each request through ``limiter``.

    ``amount``: the tokens of a request, a number or a callable of the ``aiohttp.ClientRequest``,
    evaluated once per request. Each attempt takes a slot of ``amount`` (``limiter.slot``) and holds
    it until the response's connection is released: once its body is read to the end, or it is
    released or closed (``async with session.get(...)`` does it on exit), or the handler raises. A
    response left unread and unreleased holds the slot, and a window's capacity with it, until
    aiohttp releases it (at the latest when it is collected); an upgraded connection (a WebSocket)
    holds it until it is closed.

    A 429 or 503 response with a ``Retry-After`` header pauses the limiter until then (awaited
    over a remote store), so that no request of any task is sent before then, even once this
    request has no retries left; the response is read and released, and the request is sent again
    in a new slot, at most ``retries`` times; the last response is returned as it is. A server (or
    a redirect target) that asks more than ``max_pause`` seconds (default 300) pauses the limiter
    for ``max_pause``, with a warning on the ``aiotb.http`` logger. A ``Retry-After`` that is
    neither delta-seconds nor an HTTP date, or is too far ahead for the limiter, is taken as no
    ``Retry-After``: the response is returned, and the limiter is not paused. aiohttp's ``ClientTimeout.total`` (5 minutes by default) counts the wait for the
    limiter and for a ``Retry-After`` too: a long queue ends in ``TimeoutError`` unless it is
    raised or set to None.

    ``follow`` (default ``"requests"``): what every response's rate-limit headers say is left of the
    server's quota of requests (or of ``"tokens"``, ``"input_tokens"``, ``"output_tokens"``, for a limiter
    whose amounts count a language model's tokens) limits the limiter until the quota resets, for every
    task (and over a RedisStore, every client of its key), less what it granted since the request was
    (``Limiter.follow``); None follows nothing. Over a store that keeps no such limit (a
    SharedMemoryStore, a leased RedisStore) nothing is followed. An ``AdaptiveLimiter`` is fed every
    response's status (``AdaptiveLimiter.observe``): a 429 or 503 cuts its rate, a success lets it grow.

    Put it first in ``middlewares`` so that the middlewares after it run once per attempt."""
    tokens_of = _http.amount(limiter, amount)
    quota = _http.follow(limiter, follow)
    flying = None if quota is None else _http.flying(limiter)
    obey_now = _http.obeyer(limiter, quota)
    most_retries = _http.retries(retries)
    longest = _http.max_pause(max_pause)

    async def limited(request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType) -> aiohttp.ClientResponse:
        tokens = _http.tokens(tokens_of, request)
        retries_left = most_retries
        while True:
            slot = limiter.slot(tokens)
            await slot.__aenter__()
            sent_at = asyncio.get_running_loop().time()
            if flying is not None:
                flying.sent(tokens)
            try:
                response = await handler(request)
            except BaseException:
                slot.release()
                raise
            finally:
                in_flight = 0.0 if flying is None else flying.answered(tokens)
            # A response holds its connection until its body has been read or it is released or closed;
            # the connection calls back then (aiohttp's own total timeout ends the same way). No
            # connection: the body was read with the head, the response is complete.
            connection = response.connection
            if connection is None:
                slot.release()
            else:
                connection.add_callback(slot.release)
            await _http.observe(limiter, response.status, sent_at, tokens, request.url.host)
            if obey_now is None or obey_now(response.raw_headers, in_flight) is NotImplemented:
                await _http.obey(limiter, response.raw_headers, quota, in_flight, request.url.host)
            paused = await _http.pause(limiter, response.status, response.headers.get("Retry-After"), longest,
                                       request.url.host)
            if not paused or not retries_left:
                return response
            retries_left -= 1
            try:
                await response.read()  # read to its end, so that the connection can be used again
            finally:
                response.release()

    return limited
