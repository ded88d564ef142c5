"""References that are not rate limiters: the floors every limiter is measured against.

- empty loop: `for _ in range(n): pass` inside the same coroutine;
- Python no-op: `async with` on a class whose async __aenter__/__aexit__ do nothing;
- C no-op: `async with` on noop/_noopcm.c, whose methods return an awaitable that is
  already finished: the cost of the `async with` protocol itself;
- bare C bucket: the same, plus a read of CLOCK_MONOTONIC and one token taken from a
  GCRA bucket: the least an exact limiter can cost;
- no limiter: each waiter sleeps until its own slot in the ideal schedule (one
  asyncio.sleep, hence one timer, per waiter), with nothing deciding anything.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path

from competitor import Competitor

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

COMPETITORS = [EMPTY_LOOP, PYTHON_NOOP, C_NOOP, BARE_BUCKET, NO_LIMITER]
NOOP_KEYS = (C_NOOP.key, BARE_BUCKET.key)  # the ones that need noop/_noopcm.c built
