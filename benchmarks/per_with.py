"""The cost of one uncontended ``async with Limiter(...)`` on the installed aiotb, for comparing builds
and Python versions (the README's clock figures).

    python benchmarks/per_with.py             median wall time per async with, over 9 runs of 300,000
    python benchmarks/per_with.py --count N   exactly N async with and nothing printed: run it under
                                              valgrind --tool=callgrind for N1 and N2 and divide the
                                              difference of the instruction counts by N2 - N1
    python benchmarks/per_with.py --steps     one async with per task step instead: 10,000 tasks released
                                              at once, each entering once, beside the same tasks doing
                                              nothing (median wall time per task step over 9 releases each)
    python benchmarks/per_with.py --subject S the same for a reference of noop/_noopcm.c (built on first use
                                              under benchmarks/.cache/noop) instead of aiotb: noop, bare (the
                                              bare C bucket), noop-bound, bare-bound (the same two with methods
                                              bound once) or loop-bare-bound (the bare C bucket bound once,
                                              asking asyncio for the running loop first)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import statistics
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiotb

RUNS, PER_RUN = 9, 300_000
TASKS = 10_000
# --subject: None for aiotb, else the name of the reference's type in noop/_noopcm.c
SUBJECTS = {"aiotb": None, "noop": "NoopContext", "bare": "BareBucket", "noop-bound": "BoundNoopContext",
            "bare-bound": "BoundBareBucket", "loop-bare-bound": "BoundLoopBareBucket"}


def noop_type(name: str) -> Any:
    """The type called name in noop/_noopcm.c, built first if need be."""
    here = Path(__file__).resolve().parent
    out = here / ".cache" / "noop"
    spec = importlib.util.spec_from_file_location("noop_build", here / "noop" / "build.py")
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    builder.build(out)
    path = out / f"_noopcm{sysconfig.get_config_var('EXT_SUFFIX')}"
    spec = importlib.util.spec_from_file_location("_noopcm", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def maker(key: str) -> Callable[[], Any]:
    """What --subject key enters: a new uncontended limiter, or reference, at each call."""
    name = SUBJECTS[key]
    if name is None:
        return lambda: aiotb.Limiter(1e12, 1)
    kind = noop_type(name)
    return kind if name.endswith("NoopContext") else lambda: kind(1e12)


make_limiter = maker("aiotb")  # what the functions below enter; main() sets it from --subject


async def with_blocks(count: int) -> float:
    """Enters and leaves an uncontended limiter count times; the wall time per block, in ns."""
    limiter = make_limiter()
    start = time.perf_counter_ns()
    for _ in range(count):
        async with limiter:
            pass
    return (time.perf_counter_ns() - start) / count


async def median_ns() -> float:
    return statistics.median([await with_blocks(PER_RUN) for _ in range(RUNS)])


async def release(enter: bool) -> float:
    """Releases TASKS waiting tasks in one loop iteration, each entering an uncontended limiter once (or doing
    nothing); the wall time of that iteration per task, in ns, with the cyclic GC off."""
    limiter, go = make_limiter(), asyncio.Event()

    async def task() -> None:
        await go.wait()
        if enter:
            async with limiter:
                pass

    tasks = [asyncio.create_task(task()) for _ in range(TASKS)]
    await asyncio.sleep(0)  # every task waits on go
    gc.disable()
    start = time.perf_counter_ns()
    go.set()
    await asyncio.sleep(0)  # runs after each released task's step
    elapsed = time.perf_counter_ns() - start
    gc.enable()
    await asyncio.gather(*tasks)
    return elapsed / TASKS


def per_step() -> tuple[float, float]:
    """Median ns per task step entering the limiter, and doing nothing, over RUNS alternating releases."""
    entering, idle = [], []
    for _ in range(RUNS):
        entering.append(asyncio.run(release(True)))
        idle.append(asyncio.run(release(False)))
    return statistics.median(entering), statistics.median(idle)


def subject(key: str) -> str:
    return f"aiotb engine {aiotb.IMPLEMENTATION}" if key == "aiotb" else f"_noopcm.{SUBJECTS[key]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, help="run exactly this many async with, print nothing")
    parser.add_argument("--steps", action="store_true", help="one async with per task step (see above)")
    parser.add_argument("--subject", choices=SUBJECTS, default="aiotb", help="what to enter (see above)")
    args = parser.parse_args()
    global make_limiter
    make_limiter = maker(args.subject)
    if args.count is not None:
        asyncio.run(with_blocks(args.count))
        return
    if args.steps:
        entering, idle = per_step()
        print(f"Python {sys.version.split()[0]}, {subject(args.subject)}: {entering:.0f} ns per task step "
              f"that enters an uncontended limiter once, {idle:.0f} ns per task step that does nothing (medians of "
              f"{RUNS} releases of {TASKS:,} tasks each)")
        return
    ns = asyncio.run(median_ns())
    print(f"Python {sys.version.split()[0]}, {subject(args.subject)}: {ns:.1f} ns per async with "
          f"(median of {RUNS} runs of {PER_RUN:,})")


if __name__ == "__main__":
    main()
