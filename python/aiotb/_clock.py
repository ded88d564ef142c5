"""Which event loops keep time on the clock aiotb's C core can read by itself; now on the running loop's, and on
this host's wall clock."""

from __future__ import annotations

import asyncio
import asyncio.base_events
import datetime
import sys
import time
from asyncio import events

_MONOTONIC = time.monotonic
_CLOCK_MONOTONIC = time.get_clock_info("monotonic").implementation == "clock_gettime(CLOCK_MONOTONIC)"


def is_monotonic_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop.time()`` provably reads ``CLOCK_MONOTONIC`` in seconds.

    True for asyncio's own loops and uvloop's, unless the instance, the class or
    ``time.monotonic`` has been patched (virtual-time loops, mocks, freezegun).
    uvloop's clock is that clock read once per loop iteration, in whole milliseconds.
    """
    if not _CLOCK_MONOTONIC or "time" in getattr(loop, "__dict__", ()):
        return False
    loop_time = getattr(type(loop), "time", None)
    if loop_time is asyncio.base_events.BaseEventLoop.time:
        return asyncio.base_events.time.monotonic is _MONOTONIC  # type: ignore[attr-defined]
    uvloop = sys.modules.get("uvloop")
    return uvloop is not None and loop_time is uvloop.Loop.time


def loop_now() -> float:
    """Now on the running loop's clock, or asyncio's default clock outside a loop."""
    loop = events._get_running_loop()
    return loop.time() if loop is not None else time.monotonic()


def wall_now() -> datetime.datetime:
    """This host's wall clock, timezone-aware: what an absolute instant is read against without a server's Date."""
    return datetime.datetime.now(datetime.timezone.utc)
