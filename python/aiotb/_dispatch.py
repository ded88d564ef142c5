"""Waiting on one event loop: futures, the one timer, cancellation and resume order.

A ``Dispatcher`` serves the waiters one limiter has on one loop. It knows nothing of token
arithmetic: the engine (``Bucket``: the C core or its twin) decides, in one call, who is granted
and when the next waiter is due (``_grant_due``); the dispatcher wakes those and keeps a single
timer on that instant. Every store shares it: only the engine behind ``_grant_due`` changes."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._core import Bucket

CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution  # asyncio's _clock_resolution
REARM_AFTER_EARLY_WAKE = 0.001  # s: uvloop rounds timer delays to whole ms, so a shorter one can fire at once


class Dispatcher:
    """The waiters of ``bucket`` on ``loop``, and the timer that wakes the next of them."""

    __slots__ = ("bucket", "loop", "_timer", "_timer_at")

    def __init__(self, bucket: Bucket, loop: asyncio.AbstractEventLoop) -> None:
        self.bucket: Bucket = bucket
        self.loop: asyncio.AbstractEventLoop = loop
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None

    async def wait(self, amount: float, timeout: float | None) -> None:
        """Queues a request for amount tokens and returns once it is granted. TimeoutError at once,
        taking nothing, if it cannot be granted within timeout. Cancelled (or interrupted) while
        queued, it leaves the queue; cancelled after its grant, it gives the tokens back."""
        bucket, loop = self.bucket, self.loop
        granted: asyncio.Future[None] = loop.create_future()
        ident = bucket._enqueue(amount, timeout, granted)
        try:
            first = self.dispatch()
            if granted.done() and first is not granted:
                # granted in this same pass behind others (the loop ran late): their tasks, woken
                # first, resume first, as their grants came first
                await asyncio.sleep(0)
            await granted
        except BaseException:  # cancelled, interrupted, failed by a change of the limits, or destroyed
            if granted.done() and not granted.cancelled() and granted.exception() is None:
                bucket._refund(amount)  # granted, but its task will never use it
            else:
                bucket._withdraw(ident)
            if not loop.is_closed():
                self.dispatch()  # the next waiter may go now, or later than the timer says
            raise

    def dispatch(self, woke_for: float | None = None) -> asyncio.Future[None] | None:
        """Grants every waiter whose turn has come, then keeps the one timer on the next head.
        Returns the first waiter it granted, if any."""
        loop = self.loop
        # asyncio runs a timer due within its clock's resolution as due now: so does the limiter
        due = woke_for if woke_for is not None and woke_for - loop.time() <= CLOCK_RESOLUTION else None
        bucket, first = self.bucket, None
        while True:
            granted, amounts, at = bucket._grant_due(due)
            given_back = False
            for waiter, amount in zip(granted, amounts):
                if waiter.done():  # cancelled by code an earlier grant of this pass ran: its tokens come back
                    bucket._refund(amount)
                    given_back = True
                    continue
                waiter.set_result(None)
                if first is None:
                    first = waiter
            if not given_back:
                break
        timer = self._timer
        if at is not None and timer is not None and at == self._timer_at:
            return first
        if timer is not None:
            timer.cancel()
            self._timer = self._timer_at = None
        if at is None:
            return first
        if at == woke_for:  # the loop fired early: aim as far past the time as it fell short, never poll
            now = loop.time()
            at = max(at + (at - now), now + REARM_AFTER_EARLY_WAKE)
        self._timer = loop.call_at(at, self._on_timer)
        self._timer_at = at
        return first

    def close(self) -> None:
        """Stops the timer: the limiter moves to another loop."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_at = None

    def _on_timer(self) -> None:
        woke_for, self._timer, self._timer_at = self._timer_at, None, None
        self.dispatch(woke_for)
