"""A short look at aiotb: ``python -m aiotb.demo [AsyncLimiter]``; ``api`` runs ``aiotb.demo_api``.

Sixty requests arrive at once at a limiter of 20 tokens per second with a burst of 5: thirty for
one token, then a big one for five, then twenty-nine more for one; then one more that will not
wait longer than half a second. Each request notes when it arrived and when it was granted, and
every figure printed is computed from those notes: where the big request ended up, the rate the
limiter kept after its first burst, and what became of the impatient request.

``Limiter`` (the default) serves in arrival order and refuses at once a request that cannot be
granted within its ``timeout``; ``AsyncLimiter``, the drop-in for aiolimiter's, lets the smallest
request go first, so it cannot tell in advance and waits the timeout out."""

from __future__ import annotations

import asyncio
import sys
from typing import Callable

from . import IMPLEMENTATION, AsyncLimiter, Limiter, demo_api

BIG = 5  # tokens the big request asks for
PATIENCE = 0.5  # seconds the impatient request is willing to wait


def fair_limiter() -> Limiter:
    return Limiter(20, 1, burst=5)


def aiolimiter_style() -> Limiter:
    return AsyncLimiter(5, 0.25)  # capacity is max_rate, as in aiolimiter: 5 at once, 20 per second


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


async def main(make_limiter: Callable[[], Limiter] = fair_limiter, *, before: int = 30, after: int = 29) -> None:
    """Runs the requests through ``make_limiter()``: ``before`` small ones, the big one, ``after`` small ones,
    then the impatient one; prints what happened."""
    limiter = make_limiter()
    loop = asyncio.get_running_loop()
    start = loop.time()
    arrived: list[str] = []
    granted: list[tuple[str, float, float]] = []  # (request, tokens, seconds since start), in grant order

    async def request(name: str, tokens: float) -> None:
        arrived.append(name)
        await limiter.acquire(tokens)
        granted.append((name, tokens, loop.time() - start))

    async def impatient() -> str:
        arrived.append("impatient")
        asked = loop.time()
        try:
            await limiter.acquire(1, timeout=PATIENCE)
        except TimeoutError:
            return f"acquire(1, timeout={PATIENCE}): TimeoutError after {(loop.time() - asked) * 1e3:.3f} ms"
        granted.append(("impatient", 1, loop.time() - start))
        return f"the impatient request was granted after {(loop.time() - asked) * 1e3:.3f} ms"

    print(f"{type(limiter).__name__}: {limiter.rate:g} tokens/s, burst {limiter.burst:g}, fair={limiter.fair}")
    print(f"{before + 1 + after} requests at once ({before} for 1 token, 1 for {BIG}, {after} for 1), "
          f"then one that will wait at most {PATIENCE} s")
    names = [f"small {i + 1}" for i in range(before + after)]
    tasks = [asyncio.create_task(request(name, 1)) for name in names[:before]]
    tasks.append(asyncio.create_task(request("big", BIG)))
    tasks += [asyncio.create_task(request(name, 1)) for name in names[before:]]
    fail_fast = asyncio.create_task(impatient())
    await asyncio.gather(*tasks)
    outcome = await fail_fast

    order = [name for name, _, _ in granted]
    place = order.index("big")
    overtook = [name for name in order[:place] if arrived.index(name) > arrived.index("big")]
    print(f"the big request arrived {ordinal(arrived.index('big') + 1)} and was granted {ordinal(place + 1)} of "
          f"{len(order)}, at {granted[place][2]:.3f} s; of the {place} granted before it, {len(overtook)} "
          "arrived after it")

    stats = limiter.stats()
    at_once = stats.granted - stats.waits  # the first grants, which did not queue
    burst_tokens = sum(tokens for _, tokens, _ in granted[:at_once])
    paced = granted[at_once:]
    if paced:
        tokens = sum(tokens for _, tokens, _ in paced)
        span = paced[-1][2] - (granted[at_once - 1][2] if at_once else 0.0)
        print(f"{burst_tokens:g} tokens granted at once, then {tokens:g} more in {span:.3f} s: "
              f"{tokens / span:.2f} tokens/s (configured: {limiter.rate:g}/s)")
    else:
        print(f"all {burst_tokens:g} tokens granted at once: none had to wait")
    print(outcome)


def cli(argv: list[str]) -> None:
    choices = {"Limiter": fair_limiter, "AsyncLimiter": aiolimiter_style}
    if argv[:1] == ["api"] and len(argv) <= 2:
        seconds = int(argv[1]) if len(argv) == 2 and argv[1].isdigit() else 0 if len(argv) == 2 else 3
        if not 1 <= seconds <= 60:
            sys.exit(f"python -m aiotb.demo api: SECONDS must be a whole number from 1 to 60, got {argv[1]!r}")
        print(f"aiotb engine: {IMPLEMENTATION}")
        asyncio.run(demo_api.main(seconds))
        return
    if len(argv) > 1 or (argv and argv[0] not in choices):
        sys.exit(f"usage: python -m aiotb.demo [{' | '.join(choices)} | api [SECONDS]]")
    print(f"aiotb engine: {IMPLEMENTATION}")
    asyncio.run(main(choices[argv[0]] if argv else fair_limiter))


if __name__ == "__main__":
    cli(sys.argv[1:])
