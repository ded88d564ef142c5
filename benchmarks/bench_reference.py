"""References that are not rate limiters: the floors every limiter is measured against.

- empty loop: `for _ in range(n): pass` inside the same coroutine;
- Python no-op: `async with` on a class whose async __aenter__/__aexit__ do nothing;
- C no-op: `async with` on noop/_noopcm.c, whose methods return an awaitable that is
  already finished: the cost of the `async with` protocol itself;
- bare C bucket: the same, plus a read of CLOCK_MONOTONIC and one token taken from a
  GCRA bucket: the least an exact limiter can cost;
- bare C bucket asking for the running loop: the same, after asking asyncio for the
  running loop the public way aiotb asks (and dropping the answer): the least a limiter
  that honours the running loop's clock can cost;
- no limiter: each waiter sleeps until its own slot in the ideal schedule (one
  asyncio.sleep, hence one timer, per waiter), with nothing deciding anything;
- paced floor: each waiter awaits a bare future, and a Linux timerfd that the loop
  watches resolves the first one at each instant the bucket allows, booked with
  aiotb's late credit: at burst 1, the least a limiter woken by a precise timer
  loses on this loop and this machine, with no limiter's own work.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib.util
import math
import os
import sys
import sysconfig
import time
from collections import deque
from pathlib import Path

from competitor import Competitor
from scenarios import LATE_CREDIT_TOKENS

NOOP_DIR_ENV = "AIOTB_BENCH_NOOP_DIR"  # where the runner built _noopcm


class PythonNoop:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc_info: object) -> None:
        return None


class IdealSchedule:
    """Hands out the token-bucket schedule's slots in arrival order and sleeps until them.

    A bucket of `burst` tokens, full at the first request, refilled at `rate` per
    second: the request that brings the total taken to `taken` tokens is due
    `max(0, taken - burst) / rate` after the first request.
    """

    __slots__ = ("burst", "rate", "start", "taken")

    def __init__(self, rate: float, burst: float | None) -> None:
        self.rate = rate
        self.burst = rate if burst is None else burst
        self.start: float | None = None
        self.taken = 0.0

    async def acquire(self, amount: float = 1) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self.start is None:
            self.start = now
        self.taken += amount
        due = self.start + max(0.0, self.taken - self.burst) / self.rate
        if due > now:
            await asyncio.sleep(due - now)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class PacedFloor:
    """Bare futures resolved one at a time, at the instants a bucket of `burst` (default: rate) allows.

    A newcomer is granted at once, and booked then, only when nobody waits and its instant has come; a
    waiter is booked at its instant, or up to LATE_CREDIT_TOKENS of a token before its grant if that
    came later (aiotb's rule).
    The instants are timed by a timerfd on CLOCK_MONOTONIC (time.monotonic()) armed at the absolute
    instant and watched with loop.add_reader while someone waits: no polling, one wake-up per grant."""

    _CLOCK_MONOTONIC, _TFD_NONBLOCK, _TFD_CLOEXEC, _TFD_TIMER_ABSTIME = 1, 0o4000, 0o2000000, 1

    def __init__(self, rate: float, burst: float | None) -> None:
        if not sys.platform.startswith("linux"):
            raise RuntimeError("the paced floor needs a Linux timerfd")
        self._libc = ctypes.CDLL(None, use_errno=True)
        fd = self._libc.timerfd_create(self._CLOCK_MONOTONIC, self._TFD_NONBLOCK | self._TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._fd = fd
        self._interval = 1 / rate
        self._credit = LATE_CREDIT_TOKENS / rate
        self._slack = ((rate if burst is None else burst) - 1) / rate  # how far ahead of _full a grant may go
        self._full = -math.inf  # GCRA: the instant the bucket is full again
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _due(self) -> float:
        """The instant the next token is there."""
        return self._full - self._slack

    def _book(self, at: float) -> None:
        self._full = max(self._full, at) + self._interval

    def _arm(self) -> None:
        ns = math.ceil(self._due() * 1e9)  # never before the instant
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(ns // 1_000_000_000, ns % 1_000_000_000))
        if self._libc.timerfd_settime(self._fd, self._TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    async def acquire(self) -> None:
        now = time.monotonic()
        if not self._waiters and now >= self._due():
            self._book(now)
            return
        loop = asyncio.get_running_loop()
        granted = loop.create_future()
        self._waiters.append(granted)
        if len(self._waiters) == 1:
            self._loop = loop
            loop.add_reader(self._fd, self._on_timer)
            self._arm()
        await granted

    def _on_timer(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # re-armed after the loop saw it readable
            return
        now = time.monotonic()
        while self._waiters and now >= self._due():
            granted = self._waiters.popleft()
            if not granted.done():
                self._book(now - self._credit)  # a late wake-up costs the rate only beyond the credit
                granted.set_result(None)
        if self._waiters:
            self._arm()
        elif self._loop is not None:
            self._loop.remove_reader(self._fd)


def load_noop():
    """The built _noopcm module, from the directory the runner put in the environment."""
    directory = os.environ.get(NOOP_DIR_ENV)
    if not directory:
        raise RuntimeError(f"{NOOP_DIR_ENV} is not set: the runner builds _noopcm first")
    path = Path(directory) / f"_noopcm{sysconfig.get_config_var('EXT_SUFFIX')}"
    spec = importlib.util.spec_from_file_location("_noopcm", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["_noopcm"] = module
    return module


def _noop_context(rate: float, burst: float | None):
    return load_noop().NoopContext()


def _bare_bucket(rate: float, burst: float | None):
    return load_noop().BareBucket(rate)


def _bound_noop_context(rate: float, burst: float | None):
    return load_noop().BoundNoopContext()


def _bound_bare_bucket(rate: float, burst: float | None):
    return load_noop().BoundBareBucket(rate)


def _bound_loop_bare_bucket(rate: float, burst: float | None):
    return load_noop().BoundLoopBareBucket(rate)


EMPTY_LOOP = Competitor(
    key="empty-loop",
    label="empty loop (reference)",
    make=lambda rate, burst: None,
    acquire=None,
    context_manager=False,
    reference=True,
    empty_body=True,
    mapping="`for _ in range(n): pass`",
    scenarios=frozenset({"uncontended"}),
)

PYTHON_NOOP = Competitor(
    key="py-noop",
    label="Python no-op async CM (reference)",
    make=lambda rate, burst: PythonNoop(),
    acquire=None,
    reference=True,
    mapping="class with `async def __aenter__/__aexit__: return None`",
    scenarios=frozenset({"uncontended"}),
)

C_NOOP = Competitor(
    key="c-noop",
    label="C no-op async CM (floor)",
    make=_noop_context,
    acquire=None,
    reference=True,
    mapping="noop/_noopcm.c: __aenter__/__aexit__ return one finished awaitable",
    scenarios=frozenset({"uncontended"}),
)

BARE_BUCKET = Competitor(
    key="c-bucket",
    label="bare C bucket (reference)",
    make=_bare_bucket,
    acquire=None,
    reference=True,
    mapping="noop/_noopcm.c: the C no-op plus a CLOCK_MONOTONIC read and a GCRA check; never waits",
    scenarios=frozenset({"uncontended"}),
)

BOUND_NOOP = Competitor(
    key="c-noop-bound",
    label="C no-op async CM, methods bound once (floor)",
    make=_bound_noop_context,
    acquire=None,
    reference=True,
    mapping="noop/_noopcm.c: the C no-op with __aenter__/__aexit__ bound once per instance, as aiotb binds them "
            "before Python 3.14",
    scenarios=frozenset({"uncontended"}),
)

BOUND_BARE_BUCKET = Competitor(
    key="c-bucket-bound",
    label="bare C bucket, methods bound once (reference)",
    make=_bound_bare_bucket,
    acquire=None,
    reference=True,
    mapping="noop/_noopcm.c: the bare C bucket with __aenter__/__aexit__ bound once per instance",
    scenarios=frozenset({"uncontended"}),
)

BOUND_LOOP_BARE_BUCKET = Competitor(
    key="c-bucket-loop-bound",
    label="bare C bucket asking for the running loop, methods bound once (reference)",
    make=_bound_loop_bare_bucket,
    acquire=None,
    reference=True,
    mapping="noop/_noopcm.c: the bare C bucket bound once, asking asyncio for the running loop (_asyncio's C "
            "function called directly, as aiotb calls it) before it reads the clock",
    scenarios=frozenset({"uncontended"}),
)

NO_LIMITER = Competitor(
    key="no-limiter",
    label="no limiter: sleep to ideal slot (floor)",
    make=IdealSchedule,
    acquire=lambda schedule: schedule.acquire,
    context_manager=False,
    acquire_amount=lambda schedule: schedule.acquire,
    reference=True,
    mapping="each waiter takes the next slot of the ideal schedule and asyncio.sleep()s until it",
    scenarios=frozenset({"contended", "smooth", "mixed", "classic"}),
)

PACED_FLOOR = Competitor(
    key="paced-floor",
    label="no limiter: bare futures paced by a timerfd (floor)",
    make=PacedFloor,
    acquire=lambda floor: floor.acquire,
    context_manager=False,
    reference=True,
    mapping="a timerfd watched by the loop resolves a bare future at each instant the bucket allows, booked "
            "with aiotb's late credit",
    scenarios=frozenset({"smooth"}),
)

COMPETITORS = [EMPTY_LOOP, PYTHON_NOOP, C_NOOP, BARE_BUCKET, BOUND_NOOP, BOUND_BARE_BUCKET, BOUND_LOOP_BARE_BUCKET,
               NO_LIMITER, PACED_FLOOR]
# the ones that need noop/_noopcm.c built
NOOP_KEYS = (C_NOOP.key, BARE_BUCKET.key, BOUND_NOOP.key, BOUND_BARE_BUCKET.key, BOUND_LOOP_BARE_BUCKET.key)
