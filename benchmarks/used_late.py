"""The bound where grants are used, with several loops in several threads: python benchmarks/used_late.py [--runs N]

Each run: one ``Limiter(1000, 1, burst=20)`` of the installed aiotb, 4 threads each running its own event loop
with 1,000 tasks that acquire once and take ``time.monotonic()`` as they resume (the use instant). Prints, per
run, the largest excess of the uses of any interval over ``burst + rate * its length`` (0: the bound held where
the grants were used), then the median and the largest over the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time

import aiotb

RATE, BURST, THREADS, TASKS = 1000.0, 20.0, 4, 1000
SPAN = 400  # uses: an interval with more than burst + rate * t of them is at most this long here


def one_loop(limiter: aiotb.Limiter, uses: list[float]) -> None:
    async def main() -> None:
        async def task() -> None:
            await limiter.acquire()
            uses.append(time.monotonic())

        await asyncio.gather(*(task() for _ in range(TASKS)))

    asyncio.run(main())


def largest_excess(uses: list[float]) -> float:
    """max over intervals [uses[i], uses[k]] of (k - i + 1) - burst - rate * (uses[k] - uses[i]), and 0."""
    uses = sorted(uses)
    worst = 0.0
    for k in range(len(uses)):
        for i in range(max(0, k - SPAN), k + 1):
            worst = max(worst, (k - i + 1) - BURST - RATE * (uses[k] - uses[i]))
    return worst


def one_run() -> float:
    limiter = aiotb.Limiter(RATE, 1, burst=BURST)
    uses: list[float] = []
    threads = [threading.Thread(target=one_loop, args=(limiter, uses)) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(uses) == THREADS * TASKS
    return largest_excess(uses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=14)
    runs = parser.parse_args().runs
    excesses = []
    for n in range(runs):
        excesses.append(one_run())
        print(f"run {n + 1}: {excesses[-1]:.2f} tokens over burst + rate * t", flush=True)
    print(f"aiotb {aiotb.__version__} engine {aiotb.IMPLEMENTATION}, {THREADS} loops in {THREADS} threads x {TASKS} "
          f"tasks, Limiter({RATE:g}, 1, burst={BURST:g}): largest excess median {statistics.median(excesses):.2f}, "
          f"most {max(excesses):.2f} tokens over {runs} runs")


if __name__ == "__main__":
    main()
