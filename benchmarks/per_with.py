"""The cost of one uncontended ``async with Limiter(...)`` on the installed aiotb, for comparing builds
and Python versions (the README's clock figures).

    python benchmarks/per_with.py             median wall time per async with, over 9 runs of 300,000
    python benchmarks/per_with.py --count N   exactly N async with and nothing printed: run it under
                                              valgrind --tool=callgrind for N1 and N2 and divide the
                                              difference of the instruction counts by N2 - N1
    python benchmarks/per_with.py --steps     one async with per task step instead: 10,000 tasks released
                                              at once, each entering once, beside the same tasks doing
                                              nothing (median wall time per task step over 9 releases each)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time

import aiotb

RUNS, PER_RUN = 9, 300_000
TASKS = 10_000


async def with_blocks(count: int) -> float:
    """Enters and leaves an uncontended limiter count times; the wall time per block, in ns."""
    limiter = aiotb.Limiter(1e12, 1)
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
    limiter, go = aiotb.Limiter(1e12, 1), asyncio.Event()

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, help="run exactly this many async with, print nothing")
    parser.add_argument("--steps", action="store_true", help="one async with per task step (see above)")
    args = parser.parse_args()
    if args.count is not None:
        asyncio.run(with_blocks(args.count))
        return
    if args.steps:
        entering, idle = per_step()
        print(f"Python {sys.version.split()[0]}, aiotb engine {aiotb.IMPLEMENTATION}: {entering:.0f} ns per task step "
              f"that enters an uncontended limiter once, {idle:.0f} ns per task step that does nothing (medians of "
              f"{RUNS} releases of {TASKS:,} tasks each)")
        return
    ns = asyncio.run(median_ns())
    print(f"Python {sys.version.split()[0]}, aiotb engine {aiotb.IMPLEMENTATION}: {ns:.1f} ns per async with "
          f"(median of {RUNS} runs of {PER_RUN:,})")


if __name__ == "__main__":
    main()
