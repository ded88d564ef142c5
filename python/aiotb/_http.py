"""What the HTTP client integrations (``aiotb.httpx``, ``aiotb.aiohttp``) share: the checked
``amount`` and ``retries`` of a limited client, and the reading of a response that asks the
client to come back later."""

from __future__ import annotations

from typing import Callable, TypeVar

from ._limiter import Limiter

RequestT = TypeVar("RequestT")

RETRY_STATUSES = frozenset({429, 503})  # Too Many Requests, Service Unavailable: the statuses Retry-After pauses


def amount(limiter: Limiter, value: float | Callable[[RequestT], float]) -> float | Callable[[RequestT], float]:
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


def pause(limiter: Limiter, status: int, retry_after: str | None) -> bool:
    """Whether a response asks to be sent again later: a 429 or 503 with a Retry-After header. If it
    does, the limiter grants nothing until the header's time has passed. A Retry-After the limiter
    cannot take (neither delta-seconds nor an HTTP date, or too far ahead) reads as none: the
    response is the answer, as one without the header would be."""
    if status not in RETRY_STATUSES or retry_after is None:
        return False
    try:
        limiter.retry_after(retry_after)
    except ValueError:
        return False
    return True
