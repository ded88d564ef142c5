"""asynciolimiter: LeakyBucketLimiter, the variant with a capacity (burst); it has no `async with` and no weights."""

from __future__ import annotations

import asynciolimiter
from competitor import Competitor, version_of


def make(rate: float, burst: float | None) -> asynciolimiter.LeakyBucketLimiter:
    capacity = max(1, round(rate if burst is None else burst))
    return asynciolimiter.LeakyBucketLimiter(rate, capacity=capacity)


COMPETITORS = [
    Competitor(
        key="asynciolimiter",
        label=f"asynciolimiter {version_of('asynciolimiter')}",
        make=make,
        acquire=lambda limiter: limiter.wait,
        context_manager=False,
        mapping="LeakyBucketLimiter(rate, capacity=burst); `await limiter.wait()` (no `async with`, no weights)",
        scenarios=frozenset({"uncontended", "contended", "smooth", "churn", "classic"}),
    )
]
