"""aiotb: the C core, the same core with every wait timed by the loop's own timer, and the same package
on its pure-Python engine (see twin.py)."""

from __future__ import annotations

from collections.abc import Mapping

import aiotb
import twin
from competitor import SCENARIOS, Competitor, version_of

MAPPING = "Limiter(rate, 1, burst=burst); `async with limiter` takes one token, acquire(n) takes n"
LOOP_TIMER_ONLY = {"AIOTB_PRECISE_TIMER": "0"}  # read when aiotb is imported: no precise timer, the loop's only


def _competitor(key: str, label: str, limiter_class: type, environment: Mapping[str, str] | None = None,
                scenarios: frozenset[str] = SCENARIOS) -> Competitor:
    settings = " ".join(f"{name}={value}" for name, value in (environment or {}).items())
    return Competitor(
        key=key,
        label=label,
        make=lambda rate, burst: limiter_class(rate, 1, burst=burst),
        acquire=lambda limiter: limiter.acquire,
        acquire_amount=lambda limiter: limiter.acquire,
        mapping=MAPPING + (f"; run in a child process started with {settings}" if settings else ""),
        environment=dict(environment or {}),
        scenarios=scenarios,
    )


COMPETITORS = [
    _competitor("aiotb", f"aiotb {version_of('aiotb')} ({aiotb.IMPLEMENTATION} core)", aiotb.Limiter),
    # the C core again, its child started with the precise timer turned off: the smooth scenario's comparison
    _competitor("aiotb-looptimer", f"aiotb {version_of('aiotb')} ({aiotb.IMPLEMENTATION} core), loop timer only",
                aiotb.Limiter, environment=LOOP_TIMER_ONLY, scenarios=frozenset({"smooth"})),
    _competitor("aiotb-py", f"aiotb {version_of('aiotb')} (pure-Python twin)", twin.package().Limiter),
]
