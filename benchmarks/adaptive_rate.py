"""A rate found by trying, against bare 429s: python benchmarks/adaptive_rate.py [--quick] [--out DIR].

A local server, in a process of its own, serves ``QUOTA`` (40) requests per any sliding second (those it answered
200) and answers a bare 429 above that: no header says what is left. Our client is
``AdaptiveLimiter(200, 1, min_rate=1)`` through ``aiotb.httpx.LimitedTransport`` (which feeds it every response),
``TASKS`` (8) tasks, each sending a request as soon as the one before it is answered, for ``seconds`` (60). Cases:

  * ``steady``: the quota is 40 per second all along;
  * ``changing``: 40, then 20 from a third of the run on, then 40 again from two thirds on;
  * ``fixed``: the contrast, ``Limiter(200, 1)`` (no adaptation) against the steady server.

From the server's record of our requests, after the first ``SETTLE`` (10) s: the share of them answered 429, and
the requests answered 200 against what the quota allowed in that time. For ``changing``, the share of 429s
while the quota is low, and how long after the rise the client took to recover: until the server served at
least 85 % of the quota over a second. Targets (``steady`` and ``changing``): 429s at most 2 % of
the requests, and at least 85 % of the quota served. Writes server_signals/adaptive/RESULTS.md and raw.json beside
this file (--out to write elsewhere) and prints the same table."""

from __future__ import annotations

import asyncio
import collections
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import written  # noqa: E402  (beside this file)

QUOTA, LOW, WINDOW = 40, 20, 1.0  # the server's quota per sliding window (s), and the changing case's low one
MAX_RATE, MIN_RATE, TASKS = 200, 1, 8  # our client: AdaptiveLimiter(MAX_RATE, 1, min_rate=MIN_RATE), this many tasks
SETTLE = 10.0  # s: counted from here on
CASES = ("steady", "changing", "fixed")
MAX_429_SHARE, LEAST_SERVED = 0.02, 0.85
PROFILES = {"full": {"seconds": 60.0, "runs": 5}, "quick": {"seconds": 30.0, "runs": 1}}


def quota_at(case: str, at: float, seconds: float) -> int:
    """The server's quota at ``at`` s into a run of seconds."""
    return LOW if case == "changing" and seconds / 3 <= at < 2 * seconds / 3 else QUOTA


# ---- the server, in its own process ----

def serve(options: str) -> None:
    """Runs the server until stdin closes; prints its URL first, then every request (JSON: arrival, status)."""
    from aiohttp import web

    case, seconds = options.split(":")
    span = float(seconds)
    start: list[float] = []
    served: collections.deque[float] = collections.deque()
    arrivals: list[tuple[float, int]] = []

    async def handle(request: web.Request) -> web.Response:
        now = time.monotonic()
        if not start:
            start.append(now)
        while served and served[0] <= now - WINDOW:
            served.popleft()
        at = now - start[0]
        status = 200 if len(served) < quota_at(case, at, span) else 429
        if status == 200:
            served.append(now)
        arrivals.append((at, status))
        return web.Response(status=status)

    written.serve(handle, arrivals)


# ---- our client ----

async def send_for(url: str, case: str, seconds: float) -> dict[str, Any]:
    """TASKS tasks sending through the case's limiter for seconds; the limiter's rate every half second."""
    from aiotb import AdaptiveLimiter, Limiter

    limiter = Limiter(MAX_RATE, 1) if case == "fixed" else AdaptiveLimiter(MAX_RATE, 1, min_rate=MIN_RATE)
    return await sent_through(limiter, url, seconds, TASKS)


async def sent_through(limiter: Any, url: str, seconds: float, tasks: int) -> dict[str, Any]:
    """tasks tasks sending GET url through limiter (the httpx transport) for seconds, one request after the other;
    the limiter's rate every half second, and its cuts."""
    import httpx

    from aiotb.httpx import LimitedTransport

    stop = time.monotonic() + seconds
    rates: list[float] = []
    async with httpx.AsyncClient(transport=LimitedTransport(limiter, retries=0), timeout=None) as client:
        async def task() -> None:
            await written.send_until(stop, lambda: client.get(url))

        async def watch() -> None:
            while time.monotonic() < stop:
                rates.append(round(limiter.max_rate, 2))
                await asyncio.sleep(0.5)

        await asyncio.gather(watch(), *(task() for _ in range(tasks)))
    return {"rates": rates, "cuts": getattr(limiter, "cuts", 0)}


def recovery(arrivals: list[tuple[float, int]], case: str, seconds: float) -> dict[str, float | None]:
    """For the changing case: the share of 429s while the quota is low, and the s from the rise until a second in
    which the server served at least LEAST_SERVED of the quota ends (None if it never did)."""
    drop, rise = seconds / 3, 2 * seconds / 3
    low = [status for at, status in arrivals if drop <= at < rise]
    served = [at for at, status in arrivals if status == 200 and at >= rise]
    recovered = None
    first = 0
    for last, at in enumerate(served):
        while served[first] <= at - WINDOW:
            first += 1
        if last - first + 1 >= LEAST_SERVED * QUOTA:
            recovered = at - rise
            break
    return {"low_429": low.count(429) / max(1, len(low)), "after_rise": recovered}


def measure(case: str, seconds: float) -> dict[str, Any]:
    """One run of a case: the server's record, read after SETTLE s, and the client's rates."""
    client, record = written.against_server(__file__, f"{case}:{seconds}",
                                            lambda url: asyncio.run(send_for(url, case, seconds)))
    arrivals = [(at, status) for at, status in record]
    counted = [status for at, status in arrivals if SETTLE <= at < seconds]
    allowed = sum(quota_at(case, SETTLE + i / 100, seconds) for i in range(round((seconds - SETTLE) * 100))) / 100
    return {"requests": len(counted), "rejected": counted.count(429), "served": counted.count(200),
            "allowed": allowed, "share_429": counted.count(429) / max(1, len(counted)),
            "served_share": counted.count(200) / allowed, **client,
            **(recovery(arrivals, case, seconds) if case == "changing" else {})}


# ---- the report ----

def table(results: dict[str, Any]) -> str:
    seconds = results["seconds"]
    lines = [f"Python {results['python']}; {results['runs']} run(s) of {seconds:g} s per case"
             f"{' (a quick run: indicative only)' if results['profile'] == 'quick' else ''}; the server serves "
             f"{QUOTA} requests per any sliding second ({LOW} in the middle third of `changing`), a bare 429 above; "
             f"ours is `AdaptiveLimiter({MAX_RATE}, 1, min_rate={MIN_RATE})` (`fixed`: `Limiter({MAX_RATE}, 1)`) "
             f"through `aiotb.httpx.LimitedTransport`, {TASKS} tasks. Counted from {SETTLE:g} s on; medians of the "
             f"runs (least, most).", "",
             "| case | requests | answered 429 | served, of what the quota allowed | rate at the end (req/s) "
             "| answered 429 while the quota is low | recovered after the rise (s) | targets |",
             "|:--|--:|--:|--:|--:|--:|--:|:--|"]

    for case in CASES:
        runs = results["cases"][case]
        share = [run["share_429"] for run in runs]
        served = [run["served_share"] for run in runs]
        end = [run["rates"][-1] for run in runs if run["rates"]]
        if case == "changing":
            drop = written.spread([run["low_429"] for run in runs], ".1%")
            rises = [run["after_rise"] for run in runs]
            rise = "never" if None in rises else written.spread(rises, ".1f")
        else:
            drop = rise = "-"
        if case == "fixed":
            verdict = "the contrast"
        else:
            met = statistics.median(share) <= MAX_429_SHARE and statistics.median(served) >= LEAST_SERVED
            verdict = "met" if met else "**not met**"
        requests = written.spread([run["requests"] for run in runs], ".0f")
        lines.append(f"| {case} | {requests} | {written.spread(share, '.1%')} | {written.spread(served, '.0%')} | "
                     f"{written.spread(end, '.1f')} | {drop} | {rise} | {verdict} |")
    lines += ["", f"Targets (`steady`, `changing`, medians): at most {MAX_429_SHARE:.0%} of the requests answered 429 "
              f"and at least {LEAST_SERVED:.0%} of what the quota allowed served, from {SETTLE:g} s on."]
    return "\n".join(lines) + "\n"


def main() -> None:
    started = written.begun(__doc__ or "", HERE / "server_signals" / "adaptive", serve, PROFILES)
    if started is None:
        return
    args, results = started
    profile, results["cases"] = PROFILES[results["profile"]], {}
    for case in CASES:
        runs = []
        for _ in range(1 if case == "fixed" else int(profile["runs"])):
            runs.append(measure(case, profile["seconds"]))
            shown = {key: value for key, value in runs[-1].items() if key != "rates"}
            print(f"{case}: {shown}", file=sys.stderr, flush=True)
        results["cases"][case] = runs
    written.write(args, __file__, "A rate found by trying: AdaptiveLimiter against bare 429s", results,
                  table(results))


if __name__ == "__main__":
    main()
