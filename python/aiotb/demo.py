"""A short look at aiotb: ``python -m aiotb.demo``.

Sixty requests through Limiter(20, 1, burst=5): five go at once, then exactly
one every 50 ms; a big request keeps its place in the queue; a task that gives
up waiting takes nothing with it."""

from __future__ import annotations

import asyncio

from . import IMPLEMENTATION, Limiter


async def main() -> None:
    limiter = Limiter(20, 1, burst=5)
    loop = asyncio.get_running_loop()
    start = loop.time()
    grants: list[float] = []

    async def request(amount: float = 1) -> None:
        await limiter.acquire(amount)
        grants.append(loop.time() - start)

    print(f"aiotb engine: {IMPLEMENTATION}; {limiter!r}")
    small = [asyncio.create_task(request()) for _ in range(30)]
    big = asyncio.create_task(request(5))
    more = [asyncio.create_task(request()) for _ in range(29)]
    impatient = asyncio.create_task(limiter.acquire(1, timeout=0.5))
    await asyncio.gather(*small, big, *more)
    try:
        await impatient
    except TimeoutError as error:
        print(f"fail-fast acquire: TimeoutError at once ({error})")
    tokens = 59 * 1 + 5  # the 59 small requests and the big one
    last = max(grants)
    print(f"{len(grants)} grants; the big request was number {sorted(grants).index(grants[30]) + 1} "
          f"in line, right behind the 30 that came before it")
    print(f"{tokens - 5} tokens after the first burst of 5, the last at {last:.3f} s: "
          f"{(tokens - 5) / last:.2f} tokens/s (configured: 20/s)")

if __name__ == "__main__":
    asyncio.run(main())
