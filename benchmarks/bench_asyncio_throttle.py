"""asyncio-throttle: a sliding-window log that polls every retry_interval (10 ms) while full; no weights."""

from __future__ import annotations

from asyncio_throttle import Throttler
from competitor import Competitor, version_of


def make(rate: float, burst: float | None) -> Throttler:
    limit = max(1, round(rate if burst is None else burst))
    return Throttler(rate_limit=limit, period=limit / rate)


COMPETITORS = [
    Competitor(
        key="asyncio-throttle",
        label=f"asyncio-throttle {version_of('asyncio-throttle')}",
        make=make,
        acquire=lambda limiter: limiter.acquire,
        mapping="Throttler(rate_limit=burst, period=burst / rate), default retry_interval=0.01 s (no weights)",
        scenarios=frozenset({"uncontended", "contended", "smooth", "churn", "classic"}),
    )
]
