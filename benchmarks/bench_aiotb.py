"""aiotb: the C core, and its pure-Python twin built on the same glue."""

from __future__ import annotations

import aiotb
from aiotb import _core_py
from aiotb._limiter import build
from competitor import Competitor, version_of

TwinLimiter, _ = build(_core_py)

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
    _competitor("aiotb-py", f"aiotb {version_of('aiotb')} (pure-Python twin)", TwinLimiter),
]
