"""Waiting on one event loop: futures, the one timer, cancellation and resume order.

A ``Dispatcher`` serves the waiters one limiter has on one loop; a limiter used from several loops
has one per loop, over one queue. It knows nothing of token arithmetic: the engine (``Bucket``: the
C core or its twin) decides, in one call, who is granted and when this loop's first waiter is due
(``_grant_due``); the dispatcher resolves those and keeps a single timer on that instant. Every
loop times its own first waiter, so a loop that stalls or closes holds up no other: whichever
owner's timer fires grants everyone due, and a grant that belongs to another loop or to a blocked
thread is handed over to it (``Owners.deliver``). Another loop's grants are posted to its dispatcher,
whose next pass resolves them; its loop is woken across threads only if its timer, which is aimed
at its first waiter, is not due already, and once for any number of posts and re-timings. Every
store shares it: only the engine behind ``_grant_due`` changes.

The one timer is the loop's own (``call_at``), whose millisecond resolution makes a short wait up
to a millisecond late, except for a wait shorter than ``PRECISE_WITHIN`` on a loop whose clock is
CLOCK_MONOTONIC and that watches file descriptors (asyncio's selector loops, uvloop): a Linux
timerfd armed at the instant (``PreciseTimer``), watched with ``add_reader`` while armed, wakes
the loop within tens of microseconds of it. Only for limits that a late wake-up would cost
tokens (``Owners.precise``): a bucket that fills from empty within ``PRECISE_REFILL``, or a window.
A bigger bucket keeps what a millisecond's lateness accrues, and one wake-up of the loop's timer
grants it all at once, for far less CPU than a wake-up per grant. A virtual or patched clock, a loop without
``add_reader``, a missing timerfd or ``AIOTB_PRECISE_TIMER=0``: the loop's timer serves.

Grants are reckoned where they are used: tasks that resume more than ``STALLED_AFTER`` after this loop last
ran a pass or a resume of the limiter's (a stall), and grants another thread posted as long ago, are used
later than they were granted, while the rates refilled; each rate then keeps no more than it would hold had
they been taken now (``_reckon_late``), so that no task resumes beside them with the refill a full rate
could not have held."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from asyncio import events
from typing import TYPE_CHECKING, Any, Callable, cast

from ._clock import is_monotonic_loop
from ._core import PRECISE_TIMER
from ._store import StoreError

if TYPE_CHECKING:
    from ._core import Bucket
    from ._owners import Owners
    from ._tokenbucket import PreciseTimer

CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution  # asyncio's _clock_resolution
REARM_AFTER_EARLY_WAKE = 0.001  # s: uvloop rounds timer delays to whole ms, so a shorter one can fire at once
PRECISE_WITHIN = 0.02  # s: a wait shorter than this is timed by the precise timer, where there is one...
PRECISE_REFILL = 0.02  # s: ...if its bucket fills from empty faster than this (a late wake-up would cost it tokens)
STALLED_AFTER = 0.001  # s: a loop that ran none of its granted tasks for longer stalled, and they are used late


class Dispatcher:
    """The waiters of one limiter on ``loop``, and the timer that wakes the first of them."""

    __slots__ = ("owners", "loop", "_timer", "_timer_at", "_wake_pending", "_posted", "_posted_lock", "_posted_at",
                 "_precise", "_precise_tried", "_unresumed", "_unresumed_tokens", "_last_seen", "_clock")

    def __init__(self, owners: Owners, loop: asyncio.AbstractEventLoop) -> None:
        self.owners: Owners = owners
        self.loop: asyncio.AbstractEventLoop = loop
        self._timer: asyncio.TimerHandle | PreciseTimer | None = None  # the armed one
        self._timer_at: float | None = None  # set with _posted_lock held: post() reads it
        self._wake_pending = False  # a re-dispatch is scheduled on the loop from another thread
        self._posted: list[tuple[asyncio.Future[None], float]] = []  # grants made elsewhere, to resolve here
        self._posted_lock = threading.Lock()
        self._posted_at = 0.0  # when the oldest of them was posted (CLOCK_MONOTONIC)
        self._precise: PreciseTimer | None = None  # opened at the first short wait, if this loop can watch it
        self._precise_tried = False
        self._unresumed = 0  # grants resolved here whose tasks have not resumed: their wake-ups are queued
        self._unresumed_tokens = 0.0  # their tokens (more, not less: a reservation's are counted till all resume)
        self._last_seen = 0.0  # when this loop last ran a pass that resolved grants, or resumed one of them
        self._clock: Callable[[], float] = time.monotonic if is_monotonic_loop(loop) else loop.time

    async def wait(self, bucket: Bucket, amount: float, timeout: float | None) -> None:
        """Queues a request for amount tokens of bucket (the limiter: its caller holds it, where the
        owners hold it weakly) and returns once it is granted. TimeoutError at once,
        taking nothing, if it cannot be granted within timeout. Cancelled (or interrupted) while
        queued, it leaves the queue; cancelled after its grant, it gives the tokens back.

        A newcomer queued behind a waiter of this loop runs no grant pass: the timer does, when the
        loop gets to it, or the pass that settles a store's answer on its way (``owners.asking``).
        Were newcomers to grant an overdue timer's waiters while the loop is busy
        (thousands arriving in one iteration), those tasks could resume only after that iteration,
        all together: a burst over the bound where the server sees it."""
        owners, loop = self.owners, self.loop
        granted: asyncio.Future[None] = loop.create_future()
        ahead = self._unresumed  # granted before this request came, and not resumed yet
        ident = bucket._enqueue(amount, timeout, granted, self)
        try:
            if self._timer_at is None and not owners.asking or not owners.queued_last:
                first = self.guarded()
            else:  # queued last, behind a waiter of this loop: its timer stands, even overdue (the loop busy), or
                first = None  # the store's answer for it is on its way, and its pass comes with it
            if granted.done() and (ahead or first is not granted):
                # granted at once, behind grants whose tasks have not resumed (the loop ran late): their
                # tasks, woken first, resume first, as their grants came first
                await asyncio.sleep(0)
            await granted
            self._resumed_at_use(amount)
        except BaseException:  # cancelled, interrupted, failed by a change of the limits, or destroyed
            # destroyed with the limiter, in one garbage cycle: the collector cleared the owners' weak
            # reference first, and the queue goes with the limiter (ReferenceError: nothing to give back)
            with contextlib.suppress(ReferenceError):
                self._leave(bucket, amount, ident, granted)
            raise

    def _leave(self, bucket: Bucket, amount: float, ident: int, granted: asyncio.Future[None]) -> None:
        """A waiter's task leaves wait before using its grant: its tokens go back, or its place in the queue."""
        owners = self.owners
        if granted.done() and not granted.cancelled() and granted.exception() is None:
            self._unresumed_tokens -= amount
            self.resumed()
            bucket._refund(amount)  # granted, but its task will never use it
            owners.retime(self)
        elif bucket._withdraw(ident):
            owners.retime(self)
        # else granted by another owner's pass and posted here: the pass below gives the tokens back
        if not self.loop.is_closed():
            self.guarded()  # the next waiter may go now, or later than the timer says

    def dispatch(self, woke_for: float | None = None, reached: bool = False) -> asyncio.Future[None] | None:
        """Resolves the grants posted here, grants every waiter whose turn has come, then keeps the
        one timer on this loop's first waiter. Returns the first waiter of this loop it resolved.
        woke_for: the instant a timer fired for; reached: the kernel saw that instant come."""
        loop = self.loop
        # asyncio runs a timer due within its clock's resolution as due now: so does the limiter
        due = woke_for if woke_for is not None and (reached or woke_for - loop.time() <= CLOCK_RESOLUTION) else None
        owners, first = self.owners, None
        bucket = owners.bucket
        if self._unresumed:
            self._seen()
        while True:
            first_posted, given_back = self._resolve_posted() if self._posted else (None, False)
            granted, amounts, at = bucket._grant_due(due, self)
            here: list[tuple[asyncio.Future[None], float]] = []
            elsewhere: list[tuple[Any, float]] = []  # another loop's, or a blocked thread's
            for grant in zip(granted, amounts):
                (here if grant[0].get_loop() is loop else elsewhere).append(grant)
            first_here, came_back = self._resolve(here)
            for resolved in (first_posted, first_here):
                if first is None:
                    first = resolved
            if elsewhere and owners.deliver(elsewhere):
                came_back = True
            if came_back or given_back:
                owners.retime(self)
                continue
            if owners.holds and owners.fail_stranded():  # deadlines that held grants made unreachable
                owners.retime(self)
                continue
            with self._posted_lock:
                if not self._posted:  # else posted during this pass, by a thread that saw the old timer
                    self._arm(at, woke_for)
                    return first

    def post(self, batch: list[tuple[asyncio.Future[None], float]]) -> bool:
        """From another thread: grants it made of this loop's waiters, for this loop's next pass to
        resolve. Wakes the loop for it unless its timer is due already. False if the loop is closed
        (the grants stay posted until ``take_posted``)."""
        loop = self.loop
        with self._posted_lock:
            if not self._posted:
                self._posted_at = time.monotonic()
            self._posted.extend(batch)
            at = self._timer_at
            if at is not None and at <= time.monotonic() and not loop.is_closed():
                return True  # the timer fires at once, or is firing: its pass resolves them
        return self.wake()

    def take_posted(self) -> list[tuple[asyncio.Future[None], float]]:
        """The grants posted here and not resolved yet; none are left."""
        with self._posted_lock:
            posted, self._posted = self._posted, []
        return posted

    def _resolve_posted(self) -> tuple[asyncio.Future[None] | None, bool]:
        """_resolve of the grants posted here. Posted more than STALLED_AFTER ago (this loop stalled, or was
        slow to get the interpreter), they are used later than they were made, as a stall's are (see _seen)."""
        posted_at = self._posted_at  # read before the grants: a post after them is newer
        resolved = self._resolve(self.take_posted())
        if resolved[0] is not None and time.monotonic() - posted_at > STALLED_AFTER:
            self.owners.bucket._reckon_late(self._unresumed_tokens)
        return resolved

    def _resolve(self, grants: list[tuple[asyncio.Future[None], float]]) -> tuple[asyncio.Future[None] | None, bool]:
        """On this loop: resolves grants of its waiters, in order; a waiter cancelled meanwhile (by
        code an earlier grant ran, or before a grant posted here arrived) gives its tokens back.
        Returns the first it resolved, and whether tokens came back."""
        bucket, first, given_back = self.owners.bucket, None, False
        for waiter, amount in grants:
            if waiter.done():
                bucket._refund(amount)
                given_back = True
            else:
                if not self._unresumed:
                    bucket._resuming(1)
                    self._unresumed_tokens = 0.0
                self._unresumed += 1
                self._unresumed_tokens += amount
                waiter.set_result(None)
                if first is None:
                    first = waiter
        if first is not None:
            self._last_seen = self._clock()  # their tasks may resume from now on
        return first, given_back

    def not_resuming(self, granted: asyncio.Future[None]) -> None:
        """A reservation's grant, resolved here: no task is queued to resume with it."""
        if not granted.cancelled() and granted.exception() is None and not self.loop.is_closed():
            with contextlib.suppress(ReferenceError):  # the limiter is gone, and its count with it
                self.resumed()

    def _resumed_at_use(self, amount: float) -> None:
        """resumed, for a task that resumed with its grant of amount, to use it now."""
        self._seen()
        self._unresumed_tokens -= amount
        self.resumed()

    def _seen(self) -> None:
        """This loop runs the limiter's code (a pass, a task's resume) while grants it resolved wait for their
        tasks. If it ran none for more than STALLED_AFTER before (a stall: the interpreter given to another
        thread, a collection, a callback that blocked), those tasks use their grants later than they were
        made: the refill they waited through is spent first, so that no interval sees both their use and
        that refill used by grants made from now on, as far as a full rate could not have held it beside them.
        With owners.exact_use (a lease's units, which other holders of the key refill after it), at every resume."""
        now = self._clock()
        if now - self._last_seen > STALLED_AFTER or self.owners.exact_use:
            self.owners.bucket._reckon_late(self._unresumed_tokens)
        self._last_seen = now

    @property
    def resuming(self) -> bool:
        """Tasks whose grants this loop resolved have not resumed yet: their wake-ups are queued."""
        return self._unresumed > 0

    def resumed(self) -> None:
        """A task whose grant this loop resolved has resumed (or never will): newcomers need not wait
        behind it."""
        self._unresumed -= 1
        if not self._unresumed:
            self.owners.bucket._resuming(-1)

    def _arm(self, at: float | None, woke_for: float | None) -> None:
        """Keeps the one timer on at (None: no timer): the precise timer for a short wait, if this
        loop can use it, else the loop's own."""
        timer = self._timer
        if at is not None and timer is not None and at == self._timer_at:
            return
        precise = self._precise_for(at) if at is not None else None
        if timer is not None and timer is not precise:
            self._stop(timer)
        self._timer = self._timer_at = None
        if at is None:
            return
        if precise is not None and (timer is precise or self._watch(precise)):
            precise.arm(at)
            self._timer = precise
        else:
            if at == woke_for:  # the loop fired early: aim as far past the time as it fell short, never poll
                now = self.loop.time()
                at = max(at + (at - now), now + REARM_AFTER_EARLY_WAKE)
            self._timer = self.loop.call_at(at, self._on_timer)
        self._timer_at = at

    def _precise_for(self, at: float) -> PreciseTimer | None:
        """The precise timer, if at is too soon for the loop's own timer and this loop can use it
        (opened on first use)."""
        precise = self._precise
        if (precise is None and self._precise_tried) or not self.owners.precise:
            return None
        loop = self.loop
        if not is_monotonic_loop(loop) or at - time.monotonic() >= PRECISE_WITHIN:
            return None
        if precise is None:
            self._precise_tried = True
            if PRECISE_TIMER is None:
                return None
            try:
                precise = self._precise = PRECISE_TIMER()
            except OSError:  # out of descriptors, say: the loop's timer serves
                return None
        return precise

    def _watch(self, precise: PreciseTimer) -> bool:
        """Has the loop watch the precise timer; False (and never again) if it cannot."""
        try:
            self.loop.add_reader(precise.fileno(), self._on_precise)
        except (NotImplementedError, RuntimeError, OSError, ValueError):  # a proactor loop, a closed one
            self._precise = None
            precise.close()
            return False
        return True

    def _stop(self, timer: asyncio.TimerHandle | PreciseTimer) -> None:
        """Stops timer; the loop stops watching the precise one."""
        precise = self._precise
        if precise is not None and timer is precise:
            precise.disarm()
            try:
                self.loop.remove_reader(precise.fileno())
            except RuntimeError:  # the loop is closed
                pass
        else:
            cast("asyncio.TimerHandle", timer).cancel()

    def wake(self) -> bool:
        """From any thread: dispatches again on this loop soon (once for any number of calls before
        it runs), because this loop's first waiter may be due sooner than its timer says. False if
        the loop is closed."""
        if self._wake_pending:
            return True
        self._wake_pending = True
        loop = self.loop
        try:
            if events._get_running_loop() is loop:
                loop.call_soon(self._on_wake)
            else:
                loop.call_soon_threadsafe(self._on_wake)
        except RuntimeError:  # the loop is closed
            self._wake_pending = False
            return False
        return True

    def close(self) -> None:
        """Stops the timer and closes the precise one: the loop closed, and no grant of it will resume."""
        if self._unresumed:
            self._unresumed = 0
            with contextlib.suppress(ReferenceError):  # the limiter is gone
                self.owners.bucket._resuming(-1)
        if self._timer is not None:
            self._stop(self._timer)
        self._timer = self._timer_at = None
        if self._precise is not None:
            self._precise.close()
            self._precise = None

    def guarded(self, woke_for: float | None = None, reached: bool = False) -> asyncio.Future[None] | None:
        """dispatch, where a store that cannot answer or be trusted fails every waiter of this loop with its
        error, rather than leave them to a pass that would fail again, and the other owners look again (their
        passes meet the store in turn). Raises nothing but ReferenceError (the limiter is gone)."""
        try:
            return self.dispatch(woke_for, reached)
        except StoreError as error:
            owners = self.owners
            while (waiter := owners.bucket._withdraw_first_of(self)) is not None:
                if not waiter.done():
                    waiter.set_exception(error)
            owners.retime(self)
            return None

    def _loop_pass(self, woke_for: float | None = None, reached: bool = False) -> bool:
        """A pass run by the loop itself (a timer, a wake-up), not by a waiter's own task. False if the
        limiter is gone, and its waiters with it."""
        try:
            self.guarded(woke_for, reached)
        except ReferenceError:
            return False
        return True

    def _on_timer(self) -> None:
        woke_for, self._timer, self._timer_at = self._timer_at, None, None
        self._loop_pass(woke_for)

    def _on_precise(self) -> None:
        precise = self._precise
        if precise is None or self._timer is not precise or not precise.expired():
            return  # seen readable before it was armed again, or stopped: no instant came
        woke_for, self._timer_at = self._timer_at, None  # still watched: the pass re-arms it or stops it
        if not self._loop_pass(woke_for, reached=True):  # the loop stops watching, the descriptor closes
            self.close()

    def _on_wake(self) -> None:
        self._wake_pending = False
        self._loop_pass()
