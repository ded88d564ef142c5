"""A limiter under httpx: ``httpx.AsyncClient(transport=LimitedTransport(limiter))``.

Every request the client sends, redirects and retries included, first takes a slot of the limiter
and holds it until its response is closed, so that a ``WindowLimiter`` counts the request in every
window it may reach the server in. What each response's rate-limit headers say is left of the server's quota
limits the limiter until its reset, and a 429 or 503 with a ``Retry-After`` pauses it and is sent again. Needs
httpx (``pip install aiotb[httpx]``)."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, AsyncIterator, Callable

import httpx

from . import _http
from ._limiter import Limiter, Slot
from ._signals import QuotaKind

__all__ = ["LimitedTransport"]


class LimitedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends each request through ``limiter``, on ``transport`` (default: a
    new ``httpx.AsyncHTTPTransport()``).

    ``amount``: the tokens of a request, a number or a callable of the ``httpx.Request`` (say, the
    tokens of an LLM prompt), evaluated once per request. Each attempt takes a slot of ``amount``
    (``limiter.slot``) and holds it until its response is closed (read to its end, ``aclose()``, or
    the client's stream block exiting) or the transport raises; a streamed response left open
    holds it, and a window's capacity with it, until it is closed.

    A 429 or 503 response with a ``Retry-After`` header pauses the limiter until then (awaited
    over a remote store), so that no request of any task is sent before then, even once this
    request has no retries left; the response is read and closed, and the request is sent again in
    a new slot, at most ``retries`` times; the last response is returned as it is. A request whose
    body is a stream cannot be sent twice (httpx raises ``StreamConsumed``). A server (or a
    redirect target) that asks more than ``max_pause`` seconds (default 300) pauses the limiter for
    ``max_pause``, with a warning on the ``aiotb.http`` logger. A ``Retry-After`` that is neither
    delta-seconds nor an HTTP date, or is too far ahead for the limiter, is taken as no
    ``Retry-After``: the response is returned, and the limiter is not paused. The wait for the
    limiter and for a ``Retry-After`` is not bounded by httpx's timeouts: wrap the call in
    ``asyncio.timeout`` to bound it.

    ``follow`` (default ``"requests"``): what every response's rate-limit headers say is left of the
    server's quota of requests (or of ``"tokens"``, ``"input_tokens"``, ``"output_tokens"``, for a limiter
    whose amounts count a language model's tokens) limits the limiter until the quota resets, for every
    task (and over a RedisStore, every client of its key), less what it granted since the request was
    (``Limiter.follow``); None follows nothing. Over a store that keeps no such limit (a
    SharedMemoryStore, a leased RedisStore) nothing is followed. An ``AdaptiveLimiter`` is fed every
    response's status (``AdaptiveLimiter.observe``): a 429 or 503 cuts its rate, a success lets it grow."""

    def __init__(self, limiter: Limiter[Any], transport: httpx.AsyncBaseTransport | None = None, *,
                 amount: float | Callable[[httpx.Request], float] = 1, retries: int = 3,
                 max_pause: float = _http.MAX_PAUSE, follow: QuotaKind | None = "requests") -> None:
        self._amount = _http.amount(limiter, amount)
        self._follow: QuotaKind | None = _http.follow(limiter, follow)
        self._flying = None if self._follow is None else _http.flying(limiter)
        self._obey_now = _http.obeyer(limiter, self._follow)
        self._retries = _http.retries(retries)
        self._max_pause = _http.max_pause(max_pause)
        self._limiter = limiter
        self._transport = httpx.AsyncHTTPTransport() if transport is None else transport

    @property
    def limiter(self) -> Limiter[Any]:
        """The limiter every request goes through."""
        return self._limiter

    @property
    def transport(self) -> httpx.AsyncBaseTransport:
        """The transport that sends the requests."""
        return self._transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Sends ``request`` in a slot of the limiter; the response holds the slot until it is closed."""
        tokens = _http.tokens(self._amount, request)
        retries = self._retries
        while True:
            response, sent_at, in_flight = await self._send(request, tokens)
            await _http.observe(self._limiter, response.status_code, sent_at, tokens, request.url.host)
            headers = response.headers.raw
            if self._obey_now is None or self._obey_now(headers, in_flight) is NotImplemented:
                await _http.obey(self._limiter, headers, self._follow, in_flight, request.url.host)
            paused = await _http.pause(self._limiter, response.status_code, response.headers.get("Retry-After"),
                                       self._max_pause, request.url.host)
            if not paused or not retries:
                return response
            retries -= 1
            try:
                await response.aread()  # read to its end, so that the connection can be used again
            finally:
                await response.aclose()

    async def _send(self, request: httpx.Request, tokens: float) -> tuple[httpx.Response, float, float]:
        """One attempt: the response of ``request`` sent in a slot of ``tokens``, which it holds, the loop time it
        was sent at, and the tokens of the other requests through the limiter in flight as it came (0 if the
        headers are not followed)."""
        slot = self._limiter.slot(tokens)
        await slot.__aenter__()
        sent_at = asyncio.get_running_loop().time()
        flying = self._flying
        if flying is not None:
            flying.sent(tokens)
        try:
            response = await self._transport.handle_async_request(request)
        except BaseException:
            slot.release()
            raise
        finally:
            in_flight = 0.0 if flying is None else flying.answered(tokens)
        stream = response.stream
        if response.is_closed or not isinstance(stream, httpx.AsyncByteStream):
            slot.release()  # read and closed already (or a stream this client cannot close): nothing to hold
        else:
            response.stream = _HeldStream(stream, slot)
        return response, sent_at, in_flight

    async def aclose(self) -> None:
        """Closes the wrapped transport."""
        await self._transport.aclose()

    async def __aenter__(self) -> LimitedTransport:
        await self._transport.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None = None, exc_value: BaseException | None = None,
                        traceback: TracebackType | None = None) -> None:
        await self._transport.__aexit__(exc_type, exc_value, traceback)

    def __repr__(self) -> str:
        return f"<LimitedTransport of {self._transport!r} through {self._limiter!r}>"


class _HeldStream(httpx.AsyncByteStream):
    """A response body that holds its request's slot until it is closed or read to its end."""

    def __init__(self, stream: httpx.AsyncByteStream, slot: Slot) -> None:
        self._stream = stream
        self._slot = slot

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk
        self._slot.release()

    async def aclose(self) -> None:
        self._slot.release()
        await self._stream.aclose()
