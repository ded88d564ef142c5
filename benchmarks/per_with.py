"""The cost of one uncontended ``async with Limiter(...)`` on the installed aiotb, for comparing builds
and Python versions (the README's clock figures).

    python benchmarks/per_with.py             median wall time per async with, over 9 runs of 300,000
    python benchmarks/per_with.py --count N   exactly N async with and nothing printed: run it under
                                              valgrind --tool=callgrind for N1 and N2 and divide the
                                              difference of the instruction counts by N2 - N1
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

import aiotb

RUNS, PER_RUN = 9, 300_000


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, help="run exactly this many async with, print nothing")
    args = parser.parse_args()
    if args.count is not None:
        asyncio.run(with_blocks(args.count))
        return
    ns = asyncio.run(median_ns())
    print(f"Python {sys.version.split()[0]}, aiotb engine {aiotb.IMPLEMENTATION}: {ns:.1f} ns per async with "
          f"(median of {RUNS} runs of {PER_RUN:,})")


if __name__ == "__main__":
    main()
