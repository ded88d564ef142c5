"""What the HTTP client integrations (``aiotb.httpx``, ``aiotb.aiohttp``) share: the checked
``amount``, ``retries``, ``max_pause`` and ``follow`` of a limited client, the reading of a response
that asks the client to come back later, and of what a response says is left of the server's quota."""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from typing import Any, Callable, TypeVar

from . import _params
from ._adaptive import AdaptiveLimiter
from ._capabilities import refusal
from ._clock import wall_now
from ._limiter import LIMIT_SLACK, Limiter
from ._signals import QUOTAS, Headers, QuotaKind, quota_left
from ._store import StoreError

RequestT = TypeVar("RequestT")

RETRY_STATUSES = frozenset({429, 503})  # Too Many Requests, Service Unavailable: the statuses Retry-After pauses
MAX_PAUSE = 300.0  # s: the longest pause a server may ask by default, aiohttp's default total timeout

log = logging.getLogger("aiotb.http")
FOLLOWED = "limit_until, follow / alimit_until, afollow"  # the row of the table of stores that follow obeys
_QUOTA_NAMED: dict[str, QuotaKind] = {quota: quota for quota in QUOTAS}


class Flying:
    """The tokens of the requests that one limiter let out through the clients and that are not answered yet:
    one per limiter (``flying``), shared by every client of it. Loops in threads may share a limiter: each count
    is read and written under a lock."""

    __slots__ = ("_tokens", "_lock")

    def __init__(self) -> None:
        self._tokens = 0.0
        self._lock = threading.Lock()

    def sent(self, tokens: float) -> None:
        """A request of tokens set out: in flight until ``answered``."""
        with self._lock:
            self._tokens += tokens

    def answered(self, tokens: float) -> float:
        """A request of tokens came back (answered, or failed): the tokens of the others still in flight."""
        with self._lock:
            left = self._tokens = max(0.0, self._tokens - tokens)
        return left


_flying: weakref.WeakKeyDictionary[Limiter[Any], Flying] = weakref.WeakKeyDictionary()
_flying_lock = threading.Lock()  # clients made in several threads find one Flying per limiter


def amount(limiter: Limiter[Any], value: float | Callable[[RequestT], float]) -> float | Callable[[RequestT], float]:
    """A client's amount per request: a number, checked now against the limiter (TypeError or
    ValueError, as ``limiter.slot``), or a callable of the request, checked on every request."""
    if not callable(value):
        limiter.slot(value)  # checks the amount; takes nothing
    return value


def tokens(value: float | Callable[[RequestT], float], request: RequestT) -> float:
    """The tokens one request takes."""
    return value(request) if callable(value) else value


def retries(value: object) -> int:
    """How many times a client may send a request again after a Retry-After: an int >= 0, or
    TypeError/ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"retries must be an int, got {value!r}")
    if value < 0:
        raise ValueError(f"retries must be >= 0, got {value!r}")
    return value


def max_pause(value: object) -> float:
    """The longest pause a server may ask of a client: seconds > 0, below the engine's range (about 9
    years), or TypeError/ValueError naming max_pause."""
    return _params.pause("max_pause", value, _params.positive("max_pause", value))


def follow(limiter: Limiter[Any], value: object) -> QuotaKind | None:
    """The quota of the server's whose headers a client follows (``Limiter.follow``): value, checked
    (ValueError); None for None, or where the limiter's store keeps no limit of a server's quota (a leased
    RedisStore: see the table of stores), which then follows none."""
    if value is None:
        return None
    quota = _QUOTA_NAMED.get(value) if isinstance(value, str) else None
    if quota is None:
        raise ValueError(f"follow must be None or one of {', '.join(map(repr, QUOTAS))}, got {value!r}")
    store = getattr(limiter, "store", None)
    return None if refusal(FOLLOWED, "in process" if store is None else store.capabilities.kind) else quota


def flying(limiter: Limiter[Any]) -> Flying:
    """The requests limiter let out and that are not answered yet, as every client of it counts them."""
    with _flying_lock:
        counter = _flying.get(limiter)
        if counter is None:
            counter = _flying[limiter] = Flying()
    return counter


async def observe(limiter: Limiter[Any], status: int, sent_at: float, tokens: float, host: str | None) -> None:
    """Feeds an AdaptiveLimiter's rule with a response's status (its request sent at loop time sent_at); other
    limiters take nothing from it, nor the rule a status that is not HTTP's (100 to 599: a proxy's 0 or 999, say).
    A store that cannot take it now (Redis away) is logged as a warning: the response is the answer all the same."""
    if isinstance(limiter, AdaptiveLimiter) and 100 <= status <= 599:
        try:
            await limiter.aobserve(status, sent_at=sent_at, amount=tokens)
        except StoreError as error:
            log.warning("the answer %d of %s could not adapt the rate: %s", status, host or "a server", error)


def obeyer(limiter: Limiter[Any], quota: QuotaKind | None) -> Callable[[Headers, float], object] | None:
    """What follows a response's headers at once for limiter (``obey`` without its coroutine): for a limiter in
    process whose ``limit_until`` is Limiter's, its engine's ``_obey`` for quota, called with the headers and the
    tokens in flight. It returns NotImplemented, having changed nothing, for what ``obey`` must read (the C engine
    reads the common forms itself, the twin none). None where there is nothing to follow, or ``obey`` must."""
    kind = type(limiter)
    if (quota is None or getattr(limiter, "store", None) is not None or kind.limit_until is not Limiter.limit_until
            or kind.alimit_until is not Limiter.alimit_until):
        return None
    return functools.partial(limiter._obey, QUOTAS.index(quota), LIMIT_SLACK)


async def obey(limiter: Limiter[Any], headers: Headers, quota: QuotaKind | None, in_flight: float,
               host: str | None) -> None:
    """Follows what a response's headers say is left of the quota (none if quota is None), less the tokens of
    the other requests in flight, which the server may not have counted. A store that cannot take it now (Redis
    away) is logged as a warning: the response is the answer all the same."""
    if quota is None:
        return
    left = quota_left(headers, quota, in_flight)  # afollow's limit, without reading what else the headers say
    if left is None:
        return
    try:
        await limiter.alimit_until(*left)
    except StoreError as error:
        log.warning("the limit %s told could not be kept: %s", host or "a server", error)


async def pause(limiter: Limiter[Any], status: int, retry_after: str | None, most: float, host: str | None) -> bool:
    """Whether a response of ``host`` asks to be sent again later: a 429 or 503 with a Retry-After
    header. If it does, the limiter grants nothing until the header's time has passed, or for
    ``most`` seconds if it asks more (logged as a warning). A Retry-After that is neither
    delta-seconds nor an HTTP date, or that the limiter cannot take, reads as none: the response is
    the answer, as one without the header would be. Over any store (a RedisStore's pause is one round
    trip)."""
    if status not in RETRY_STATUSES or retry_after is None:
        return False
    try:
        asked = _params.retry_after(retry_after, wall_now())
    except ValueError:
        return False
    if asked > most:
        log.warning("%s answered %d with Retry-After %r, a pause of %.6g s: paused for max_pause, %.6g s",
                    host or "a server", status, retry_after[:80], asked, most)
    try:
        await limiter.apenalize(min(asked, most))
    except ValueError:  # beyond what the store can hold
        return False
    return True
