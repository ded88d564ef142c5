"""Costs known after the fact: python benchmarks/settled_costs.py [--quick] [--out DIR].

A local server, in a process of its own, serves ``TOKEN_QUOTA`` (1,000) tokens and ``REQUEST_QUOTA`` (20) requests
per any sliding second. Each request costs a number of tokens drawn on its arrival, uniformly from ``LEAST_COST``
to ``MOST_COST`` (10 to 200: a language model's answer, whose length no one knows before), and is answered 429
(counting nothing) if it would take the last second's requests or tokens over the quota; else 200, with the cost
in an ``X-Cost`` field. Our client sends from ``TASKS`` (8) tasks, each a request as soon as the one before it is
answered, for ``seconds``, through two ``WindowLimiter``: one of 20 requests and one of 1,000 tokens per second,
each request in a slot of each (held until its response is read). Its token slot takes an estimate, and in the
settled cases ``slot.settle(cost)`` says the real cost once the response tells it (0 for a 429, which cost
nothing):

  * ``most, settled``: the estimate is the most a request can cost (200);
  * ``mean, settled``: the mean cost (105), settled up (debt, which delays the next grants) or down;
  * ``most``, ``mean``: the same estimates never settled (the contrast);
  * ``150, settled`` to ``196, settled``: estimates between the two, settled (the frontier): where a client that
    sends once its window holds the estimate meets the server's 429s. A request costing more than the room the
    server has left is refused whatever is settled after it; at the edge of the quota the room is below the
    estimate's cost's upper range unless the estimate is near the most (196: 2 % of costs lie above it).

From the server's record, after the first ``SETTLE`` (2) s: the share of the requests answered 429, and the
tokens served against the quota of that time. Targets: ``most, settled``, no 429 and at least 85 % of the token
quota used; ``mean, settled``, at most 2 % answered 429 and at least 85 % used. Writes
server_signals/settled/RESULTS.md and raw.json beside this file (--out to write elsewhere) and prints the same."""

from __future__ import annotations

import asyncio
import collections
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import written  # noqa: E402  (beside this file)

TOKEN_QUOTA, REQUEST_QUOTA, WINDOW = 1000, 20, 1.0
LEAST_COST, MOST_COST = 10, 200
MEAN_COST = (LEAST_COST + MOST_COST) / 2
TASKS, SETTLE = 8, 2.0
CASES = {"most, settled": (MOST_COST, True), "mean, settled": (MEAN_COST, True),
         "most": (MOST_COST, False), "mean": (MEAN_COST, False),
         "150, settled": (150, True), "180, settled": (180, True),
         "196, settled": (196, True)}  # case: (the estimate, whether it is settled)
FRONTIER = ("150, settled", "180, settled", "196, settled")  # estimates between the mean and the most: no target
LEAST_USED, MOST_429_MEAN = 0.85, 0.02
PROFILES = {"full": {"seconds": 20.0, "runs": 5}, "quick": {"seconds": 8.0, "runs": 1}}


# ---- the server, in its own process ----

def serve(seed: str) -> None:
    """Runs the server until stdin closes; prints its URL first, then every request (JSON: arrival, status, cost)."""
    from aiohttp import web

    costs = random.Random(int(seed))
    start: list[float] = []
    served: collections.deque[tuple[float, int]] = collections.deque()
    tokens = [0]
    arrivals: list[tuple[float, int, int]] = []

    async def handle(request: web.Request) -> web.Response:
        now = time.monotonic()
        if not start:
            start.append(now)
        while served and served[0][0] <= now - WINDOW:
            tokens[0] -= served.popleft()[1]
        cost = costs.randint(LEAST_COST, MOST_COST)
        fits = len(served) < REQUEST_QUOTA and tokens[0] + cost <= TOKEN_QUOTA
        if fits:
            served.append((now, cost))
            tokens[0] += cost
        arrivals.append((now - start[0], 200 if fits else 429, cost if fits else 0))
        return web.Response(status=200, headers={"X-Cost": str(cost)}) if fits else web.Response(status=429)

    written.serve(handle, arrivals)


# ---- our client ----

async def send_for(url: str, estimate: float, settled: bool, seconds: float) -> None:
    """TASKS tasks sending through a window of requests and one of tokens for seconds, the token slot taken at the
    estimate and, if settled, settled at each response's cost."""
    import httpx

    from aiotb import WindowLimiter

    requests, tokens = WindowLimiter(REQUEST_QUOTA, WINDOW), WindowLimiter(TOKEN_QUOTA, WINDOW)
    stop = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=None) as client:
        async def send() -> None:
            async with requests.slot(1), tokens.slot(estimate) as slot:
                response = await client.get(url)
                if settled:
                    slot.settle(int(response.headers.get("X-Cost", 0)) if response.status_code == 200 else 0)

        async def task() -> None:
            await written.send_until(stop, send)

        await asyncio.gather(*(task() for _ in range(TASKS)))


def measure(case: str, seconds: float, seed: int) -> dict[str, Any]:
    """One run of a case: the server's record, read after SETTLE s."""
    estimate, settled = CASES[case]
    _, record = written.against_server(__file__, str(seed),
                                       lambda url: asyncio.run(send_for(url, estimate, settled, seconds)))
    counted = [(status, cost) for at, status, cost in record if SETTLE <= at < seconds]
    rejected = sum(status == 429 for status, _ in counted)
    used = sum(cost for _, cost in counted) / (TOKEN_QUOTA * (seconds - SETTLE) / WINDOW)
    return {"requests": len(counted), "rejected": rejected, "share_429": rejected / max(1, len(counted)),
            "used": used}


# ---- the report ----

def table(results: dict[str, Any]) -> str:
    lines = [f"Python {results['python']}; {results['runs']} run(s) of {results['seconds']:g} s per case"
             f"{' (a quick run: indicative only)' if results['profile'] == 'quick' else ''}; the server serves "
             f"{TOKEN_QUOTA} tokens and {REQUEST_QUOTA} requests per any sliding second, each request costing "
             f"{LEAST_COST} to {MOST_COST} tokens (uniform, drawn on arrival); ours sends through "
             f"`WindowLimiter({REQUEST_QUOTA}, 1)` and `WindowLimiter({TOKEN_QUOTA}, 1)`, {TASKS} tasks. Counted "
             f"from {SETTLE:g} s on; medians of the runs (least, most).", "",
             "| estimate | settled | requests | answered 429 | token quota used | targets |",
             "|:--|:--|--:|--:|--:|:--|"]

    for case, (estimate, settled) in CASES.items():
        runs = results["cases"][case]
        share = [run["share_429"] for run in runs]
        used = [run["used"] for run in runs]
        if not settled:
            verdict = "the contrast"
        elif case in FRONTIER:
            verdict = "the frontier"
        else:
            most_429 = 0.0 if estimate == MOST_COST else MOST_429_MEAN
            met = statistics.median(share) <= most_429 and statistics.median(used) >= LEAST_USED
            verdict = "met" if met else "**not met**"
        lines.append(f"| {estimate:g} | {'yes' if settled else 'no'} | "
                     f"{written.spread([run['requests'] for run in runs], '.0f')} | {written.spread(share, '.1%')} | "
                     f"{written.spread(used, '.0%')} | {verdict} |")
    lines += ["", f"Targets (medians): estimated at {MOST_COST} and settled, no 429 and at least {LEAST_USED:.0%} of "
              f"the token quota used; at {MEAN_COST:g} and settled, at most {MOST_429_MEAN:.0%} answered 429 and "
              f"at least {LEAST_USED:.0%} used.", "", frontier(results)]
    return "\n".join(lines) + "\n"


def frontier(results: dict[str, Any]) -> str:
    """What the settled estimates say of the 429 target: the least estimate that met it, by the medians."""
    settled = sorted((estimate, case) for case, (estimate, is_settled) in CASES.items() if is_settled)
    met = [estimate for estimate, case in settled
           if statistics.median(run["share_429"] for run in results["cases"][case]) <= MOST_429_MEAN]
    least = f"{min(met):g}" if met else "none of them"
    return (f"Settled, the least estimate with at most {MOST_429_MEAN:.0%} answered 429 (medians) was {least}, of "
            f"the estimates {', '.join(f'{estimate:g}' for estimate, _ in settled)}.")


def main() -> None:
    started = written.begun(__doc__ or "", HERE / "server_signals" / "settled", serve, PROFILES)
    if started is None:
        return
    args, results = started
    profile, results["cases"] = PROFILES[results["profile"]], {}
    for case in CASES:
        runs = []
        for seed in range(int(profile["runs"])):  # the same costs, in the same order, for every case
            runs.append(measure(case, profile["seconds"], seed))
            print(f"{case}: {runs[-1]}", file=sys.stderr, flush=True)
        results["cases"][case] = runs
    written.write(args, __file__, "Costs known after the fact: estimated, then settled", results, table(results))


if __name__ == "__main__":
    main()
