"""Everyone who waits on one limiter: a dispatcher per event loop, and the threads blocked in it.

One queue (the engine's) serves them all, in one order; each waiter is queued with its owner, the
one who times and wakes it. Every owner sleeps until its own first waiter is due: a dispatcher on
its loop's timer, a blocked thread on a lock with a deadline, so no one polls and no one waits for
another owner to be on time. Whoever wakes grants everyone due, and hands each grant to its owner:
its own waiters at once, another loop's by posting them to its dispatcher (which wakes that loop
unless its timer is due already), a blocked thread's by releasing its lock. When a waiter leaves the queue or tokens come back, the waiters
behind it may be due sooner: every other owner is woken to re-time (``retime``)."""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
import weakref
from asyncio import events
from typing import TYPE_CHECKING, Any

from ._core import MAX_SPAN
from ._dispatch import Dispatcher

if TYPE_CHECKING:
    from ._core import Bucket

REUSED_ACROSS_LOOPS = (
    "This AsyncLimiter instance is being re-used across loops. Please create "
    "a new limiter per event loop as re-use can lead to undefined behaviour."
)
_LONGEST_SLEEP = min(threading.TIMEOUT_MAX, MAX_SPAN / 1e9)
_GRANTED, _ABANDONED = "granted", "abandoned"


class ThreadWaiter:
    """A blocked thread's place in the queue; its own owner. It sleeps on a lock that whoever grants
    it, or re-times it, releases."""

    __slots__ = ("_wake", "_outcome")

    def __init__(self) -> None:
        self._wake = threading.Lock()
        self._wake.acquire()
        self._outcome: dict[str, object] = {}  # "first": what came first, the grant, a failure or giving up

    def get_loop(self) -> None:
        """No event loop: the thread itself is woken."""
        return None

    def sleep(self, seconds: float | None) -> None:
        """Blocks until woken, or for seconds at most."""
        if seconds is None:
            self._wake.acquire()
        elif seconds > 0:
            self._wake.acquire(timeout=min(seconds, _LONGEST_SLEEP))

    def wake(self) -> None:
        """From any thread: ends the current or next sleep."""
        try:
            self._wake.release()
        except RuntimeError:  # awake already: a wake-up is pending
            pass

    def settle(self, outcome: object) -> object:
        """Records outcome unless another came first (one atomic step under the GIL, and in
        free-threaded builds); returns the outcome that stands."""
        return self._outcome.setdefault("first", outcome)

    @property
    def outcome(self) -> object:
        """The grant, a failure, giving up, or None while it waits."""
        return self._outcome.get("first")


class Owners:
    """The dispatchers and blocked threads of one limiter (``bucket``)."""

    __slots__ = ("_bucket", "dispatchers", "sleepers", "last", "warn_on_reuse", "queued_last", "precise", "holds",
                 "exact_use", "asking")

    def __init__(self, bucket: Bucket, warn_on_reuse: bool, queued_last: bool) -> None:
        self._bucket: weakref.ref[Bucket] = weakref.ref(bucket)  # weak: no cycle keeps a limiter alive
        self.queued_last: bool = queued_last  # a new waiter is queued behind every other (arrival order)
        self.dispatchers: dict[asyncio.AbstractEventLoop, Dispatcher] = {}
        self.sleepers: set[ThreadWaiter] = set()  # threads blocked in acquire_blocking
        self.last: Dispatcher | None = None  # the dispatcher used last: the one of the only loop, mostly
        self.warn_on_reuse: bool = warn_on_reuse
        self.precise: bool = True  # short waits want the precise timer: a late wake-up would cost the limits tokens
        self.holds: bool = False  # grants may be held in use (a window): a waiter's deadline can pass in the queue
        self.exact_use: bool = False  # every resume is reckoned, not only after a stall: rates others share too
        self.asking: bool = False  # a store's answer is on its way, and a pass of the loop that asked settles it

    @property
    def bucket(self) -> Bucket:
        """The limiter (ReferenceError once it is gone: then no one waits on it)."""
        bucket = self._bucket()
        if bucket is None:
            raise ReferenceError("the limiter is gone")
        return bucket

    # ---- event loops ----

    def dispatcher(self, loop: asyncio.AbstractEventLoop | None = None) -> Dispatcher:
        """The running loop's dispatcher (RuntimeError outside a loop); loop: the running loop, when the
        caller knows it (the engine does, from its proof of the clock: asking asyncio costs a system call
        on 3.11)."""
        if loop is None:
            loop = asyncio.get_running_loop()
        last = self.last
        if last is not None and last.loop is loop:
            return last
        found = self.dispatchers.get(loop)
        if found is None:
            if self.drop_closed() and self.warn_on_reuse:
                warnings.warn(REUSED_ACROSS_LOOPS, RuntimeWarning, stacklevel=5)
            found = self.dispatchers[loop] = Dispatcher(self, loop)
        self.last = found
        return found

    def drop_closed(self) -> bool:
        """Forgets the dispatchers of closed loops, dropping their waiters; whether there were any."""
        closed = [d for d in list(self.dispatchers.values()) if d.loop.is_closed()]
        for d in closed:
            self.drop(d)
        return bool(closed)

    def drop(self, dispatcher: Dispatcher) -> None:
        """dispatcher's loop closed: its waiters can never be woken. They leave the queue; the
        others go on."""
        if self.dispatchers.get(dispatcher.loop) is dispatcher:
            del self.dispatchers[dispatcher.loop]
        if self.last is dispatcher:
            self.last = None
        dispatcher.close()
        bucket, dropped = self.bucket, False
        while bucket._withdraw_first_of(dispatcher) is not None:
            dropped = True
        for _, amount in dispatcher.take_posted():  # granted, never to be resolved
            bucket._refund(amount)
            dropped = True
        if dropped:
            self.retime(dispatcher)

    # ---- hand-overs ----

    def deliver(self, granted: list[tuple[Any, float]]) -> bool:
        """Hands grants to their owners: a blocked thread at once, another loop's waiters posted to
        its dispatcher. Returns whether tokens came back (a waiter gave up, a loop closed)."""
        bucket, given_back = self.bucket, False
        batches: dict[asyncio.AbstractEventLoop, list[tuple[Any, float]]] = {}
        for waiter, amount in granted:
            home = waiter.get_loop()
            if home is None:
                if waiter.settle(_GRANTED) is _GRANTED:
                    waiter.wake()
                else:  # it gave up meanwhile
                    bucket._refund(amount)
                    given_back = True
            else:
                batches.setdefault(home, []).append((waiter, amount))
        for home, batch in batches.items():
            dispatcher = self.dispatchers.get(home)
            if dispatcher is None:  # dropped: its loop closed, these grants can never be used
                for _, amount in batch:
                    bucket._refund(amount)
                given_back = True
            elif not dispatcher.post(batch):  # its loop closed: dropping it gives them back
                self.drop(dispatcher)
                given_back = True
        return given_back

    def retime(self, source: object) -> None:
        """After a waiter left or tokens came back: every owner but source looks again at when its
        first waiter is due. A wake-up is never lost: a scheduled callback, a released lock."""
        for dispatcher in list(self.dispatchers.values()):
            if dispatcher is not source and not dispatcher.wake():
                self.drop(dispatcher)
        for sleeper in list(self.sleepers):
            if sleeper is not source:
                sleeper.wake()

    def fail_stranded(self) -> bool:
        """Fails every waiter the limits can no longer grant as promised: above a new burst, or past
        its deadline (after a change of the limits, or held grants that stay in use). Returns
        whether there were any."""
        bucket, failed = self.bucket, False
        while (stranded := bucket._withdraw_stranded()) is not None:
            waiter, never = stranded
            self.fail(waiter, ValueError("the limiter's new burst is below this request's amount") if never else
                      TimeoutError("this request can no longer be granted within its timeout"))
            failed = True
        return failed

    def fail_all(self, error: BaseException) -> None:
        """Fails every queued waiter with error: the limits have nothing to grant them from (a lease lost)."""
        bucket = self.bucket
        for owner in [*self.dispatchers.values(), *self.sleepers]:
            while (waiter := bucket._withdraw_first_of(owner)) is not None:
                self.fail(waiter, error)

    def fail(self, waiter: Any, error: BaseException) -> None:
        """Fails a waiter the limits stranded, on its own loop or thread."""
        home = waiter.get_loop()
        if home is None:
            if waiter.settle(error) is error:
                waiter.wake()
        elif home is events._get_running_loop():
            if not waiter.done():
                waiter.set_exception(error)
        else:
            try:
                home.call_soon_threadsafe(_fail_future, waiter, error)
            except RuntimeError:  # its loop is closed
                pass

    # ---- blocked threads ----

    def wait_blocking(self, amount: float, timeout: float | None, *, give_up_after: float | None = None) -> None:
        """Blocks this thread until amount tokens are granted to it; TimeoutError at once, taking
        nothing, if they cannot come within timeout, or once give_up_after seconds pass without them
        (an order that cannot say in advance when they come). Interrupted (KeyboardInterrupt), it
        leaves the queue, or gives the tokens back if they came."""
        bucket = self.bucket
        if timeout is not None and timeout >= MAX_SPAN / 1e9:
            timeout = None
        give_up_at = None if give_up_after is None else time.monotonic() + give_up_after
        waiter = ThreadWaiter()
        ident = bucket._enqueue(amount, timeout, waiter, waiter)
        self.sleepers.add(waiter)
        try:
            while True:
                at = self._grant_due_from(waiter)
                outcome = waiter.outcome
                if outcome is _GRANTED:
                    return
                if isinstance(outcome, BaseException):
                    raise outcome
                now = time.monotonic()
                if give_up_at is not None and now >= give_up_at:
                    raise TimeoutError(f"{amount!r} tokens were not granted within {give_up_after!r} s")
                wait = None if at is None else at - now
                if give_up_at is not None:
                    wait = give_up_at - now if wait is None else min(wait, give_up_at - now)
                waiter.sleep(wait)
        except BaseException:
            if waiter.settle(_ABANDONED) is _GRANTED:
                bucket._refund(amount)  # granted, but never to be used
                self.retime(waiter)
            elif bucket._withdraw(ident):
                self.retime(waiter)
            raise
        finally:
            self.sleepers.discard(waiter)

    def _grant_due_from(self, waiter: ThreadWaiter) -> float | None:
        """A blocked thread's pass: grants everyone due, hands the grants over, and returns when the
        thread's own waiter is due (CLOCK_MONOTONIC seconds), None if it waits no more."""
        while True:
            granted, amounts, at = self.bucket._grant_due(None, waiter)
            if not self.deliver(list(zip(granted, amounts))):
                return at
            self.retime(waiter)


def _fail_future(waiter: asyncio.Future[None], error: BaseException) -> None:
    if not waiter.done():
        waiter.set_exception(error)
