"""PyrateLimiter: its token bucket (GCRA) behind Limiter.try_acquire_async(name, weight).

Its async path takes one asyncio.Lock per limiter, then sleeps in whole
milliseconds (plus buffer_ms) and retries. The default buffer_ms=50 caps a
burst-1 limiter at about 20 grants/s, so it is built with buffer_ms=0."""

from __future__ import annotations

from competitor import Competitor, version_of
from pyrate_limiter import Duration, limiter_factory

BUCKET = "bench"


def make(rate: float, burst: float | None):
    return limiter_factory.create_token_bucket_limiter(
        rate_per_duration=max(1, round(rate)),
        duration=Duration.SECOND,
        burst=None if burst is None else max(1, round(burst)),
        buffer_ms=0,
    )


def acquire_amount(limiter):
    async def acquire(amount: int = 1) -> None:
        if not await limiter.try_acquire_async(BUCKET, amount):
            raise RuntimeError(f"pyrate-limiter refused weight {amount}")

    return acquire


COMPETITORS = [
    Competitor(
        key="pyrate",
        label=f"pyrate-limiter {version_of('pyrate-limiter')}",
        make=make,
        acquire=acquire_amount,
        context_manager=False,
        acquire_amount=acquire_amount,
        mapping="create_token_bucket_limiter(rate, Duration.SECOND, burst=burst, buffer_ms=0); "
        "`await limiter.try_acquire_async(name, weight)` (no `async with`)",
    )
]
