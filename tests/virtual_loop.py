"""An asyncio event loop whose clock is virtual: it jumps to the next timer instead of sleeping.

Times are exact: the clock is set to the due timer's own ``when``, never to a sum
of floats. I/O still works (polled without blocking). A loop that would wait
forever, with nothing ready and no timer, raises instead of hanging."""

from __future__ import annotations

import asyncio
import selectors
from typing import Any


class _VirtualSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)
        if events or timeout == 0:
            return events
        if timeout is None:
            raise RuntimeError("deadlock: nothing is ready and no timer is scheduled")
        self._loop.advance_to_next_timer()
        return events


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        super().__init__(selector=_VirtualSelector(self))

    def time(self) -> float:
        return self._now

    def advance_to_next_timer(self) -> None:
        scheduled = self._scheduled  # asyncio keeps its timers in this heap
        if scheduled and scheduled[0].when() > self._now:
            self._now = scheduled[0].when()


def run_virtually(main: Any) -> Any:
    """Runs a coroutine to completion on a fresh virtual-clock loop, then closes the loop."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.close()
