"""aiolimiter: a leaky bucket whose capacity is max_rate, so burst b at rate r is AsyncLimiter(b, b / r)."""

from __future__ import annotations

from aiolimiter import AsyncLimiter
from competitor import Competitor, version_of


def make(rate: float, burst: float | None) -> AsyncLimiter:
    if burst is None:
        return AsyncLimiter(rate, 1)
    return AsyncLimiter(burst, burst / rate)


COMPETITORS = [
    Competitor(
        key="aiolimiter",
        label=f"aiolimiter {version_of('aiolimiter')}",
        make=make,
        acquire=lambda limiter: limiter.acquire,
        acquire_amount=lambda limiter: limiter.acquire,
        mapping="AsyncLimiter(burst, burst / rate) (capacity = max_rate); default burst: AsyncLimiter(rate, 1)",
    )
]
