"""aiotb: the C core, and the same package on its pure-Python engine (see twin.py)."""

from __future__ import annotations

import aiotb
import twin
from competitor import Competitor, version_of

MAPPING = "Limiter(rate, 1, burst=burst); `async with limiter` takes one token, acquire(n) takes n"


def _competitor(key: str, label: str, limiter_class: type) -> Competitor:
    return Competitor(
        key=key,
        label=label,
        make=lambda rate, burst: limiter_class(rate, 1, burst=burst),
        acquire=lambda limiter: limiter.acquire,
        acquire_amount=lambda limiter: limiter.acquire,
        mapping=MAPPING,
    )


COMPETITORS = [
    _competitor("aiotb", f"aiotb {version_of('aiotb')} ({aiotb.IMPLEMENTATION} core)", aiotb.Limiter),
    _competitor("aiotb-py", f"aiotb {version_of('aiotb')} (pure-Python twin)", twin.package().Limiter),
]
