"""A client that follows what the server says of its quota: python benchmarks/server_signals.py [--quick] [--out DIR].

A local server, in a process of its own, lets through ``QUOTA`` (50) requests per fixed window of ``WINDOW`` (10) s,
counted on arrival from its first request on, and answers 429 above that. The quota is shared with a client we do
not see, which takes ``UNSEEN`` (20) of it as each window opens, so 30 are left to ours. Every response tells what is
left and when the window resets, in one header style per case:

  * ``draft``: the IETF draft's ``RateLimit: "default";r=..;t=..`` with ``RateLimit-Policy: "default";q=50;w=10``;
  * ``x-ratelimit``: ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset`` in delta seconds;
  * ``x-ratelimit epoch``: the same with ``-Reset`` an epoch instant in seconds, and the server's ``Date``, on a
    wall clock ``SKEW`` (120) s behind the client's: an absolute instant read against the server's clock;
  * ``openai``: ``x-ratelimit-limit-requests``, ``-remaining-requests`` and ``-reset-requests`` as a duration (``7.250s``);
  * ``anthropic``: ``anthropic-ratelimit-requests-limit``, ``-remaining`` and ``-reset`` as an RFC 3339 instant (on
    the same skewed clock, with the ``Date``);
  * ``none``: no such header (the contrast).

Resets in whole seconds are rounded up, as a server must so that a client waiting for them does not come early.
Our client is configured at ``Limiter(100, 1)``, far above the quota, and sends through ``aiotb.httpx.LimitedTransport``
from ``TASKS`` (8) tasks, each sending a request as soon as the one before it is answered, for ``windows`` whole
windows; it follows the headers (the transport's default, ``follow="requests"``) in every case. Per window, from the
server's record of our requests: those answered 200, and those answered 429 after the first response of the window
(its first request sets out before anything is known of the window). Targets: no 429 after the first response of
each window, and at least 90 % of the 30 left to us answered 200. Writes server_signals/RESULTS.md and raw.json
beside this file (--out to write elsewhere) and prints the same table."""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import written  # noqa: E402  (beside this file)

QUOTA, WINDOW, UNSEEN = 50, 10.0, 20  # the server's quota per fixed window (s), the unseen client's share of it
LEFT = QUOTA - UNSEEN  # what is left to our client
SKEW = 120.0  # s: how far the server's wall clock is behind the client's, in the styles with absolute instants
RATE, TASKS = 100, 8  # our client: Limiter(RATE, 1), this many tasks sending
STYLES = ("draft", "x-ratelimit", "x-ratelimit epoch", "openai", "anthropic", "none")
TARGET_SHARE = 0.90
PROFILES = {"full": {"windows": 4, "runs": 5}, "quick": {"windows": 2, "runs": 1}}


# ---- the server, in its own process ----

def headers(style: str, remaining: int, end: float, wall: float) -> dict[str, str]:
    """What a response of the window ending at end (the server's monotonic clock) says, in style; wall: the
    server's wall clock now, SKEW behind the client's for the styles with absolute instants."""
    left = end - time.monotonic()
    whole = str(max(0, math.ceil(left)))
    if style == "draft":
        return {"RateLimit": f'"default";r={remaining};t={whole}', "RateLimit-Policy": f'"default";q={QUOTA};w={WINDOW:.0f}'}
    if style == "x-ratelimit":
        return {"X-RateLimit-Limit": str(QUOTA), "X-RateLimit-Remaining": str(remaining), "X-RateLimit-Reset": whole}
    skewed = wall - SKEW
    date = email.utils.formatdate(skewed, usegmt=True)
    if style == "x-ratelimit epoch":  # the end rounded up; the Date, in whole seconds, rounded down: later, never sooner
        return {"X-RateLimit-Limit": str(QUOTA), "X-RateLimit-Remaining": str(remaining),
                "X-RateLimit-Reset": str(math.ceil(skewed + left)), "Date": date}
    if style == "openai":
        return {"x-ratelimit-limit-requests": str(QUOTA), "x-ratelimit-remaining-requests": str(remaining),
                "x-ratelimit-reset-requests": f"{max(0.0, left):.3f}s"}
    if style == "anthropic":
        reset = datetime.datetime.fromtimestamp(skewed + left, datetime.timezone.utc)
        return {"anthropic-ratelimit-requests-limit": str(QUOTA), "anthropic-ratelimit-requests-remaining": str(remaining),
                "anthropic-ratelimit-requests-reset": reset.isoformat(timespec="milliseconds"), "Date": date}
    return {}


def serve(style: str) -> None:
    """Runs the server until stdin closes; prints its URL first, then our requests (JSON: window, arrival, status)."""
    from aiohttp import web

    start: list[float] = []
    counted: dict[int, int] = {}
    arrivals: list[tuple[int, float, int]] = []

    async def handle(request: web.Request) -> web.Response:
        now = time.monotonic()
        if not start:
            start.append(now)
        window = int((now - start[0]) // WINDOW)
        count = counted.get(window, UNSEEN) + 1  # the unseen client took its share as the window opened
        counted[window] = count
        status = 200 if count <= QUOTA else 429
        arrivals.append((window, now - start[0], status))
        end = start[0] + (window + 1) * WINDOW
        return web.Response(status=status, headers=headers(style, max(0, QUOTA - count), end, time.time()))

    written.serve(handle, arrivals)


# ---- our client ----

async def send_for(url: str, seconds: float) -> None:
    """TASKS tasks sending through Limiter(RATE, 1), following the headers, for seconds."""
    import httpx

    from aiotb import Limiter
    from aiotb.httpx import LimitedTransport

    limiter = Limiter(RATE, 1)
    stop = time.monotonic() + seconds
    async with httpx.AsyncClient(transport=LimitedTransport(limiter, retries=0), timeout=None) as client:
        async def task() -> None:
            await written.send_until(stop, lambda: client.get(url))

        await asyncio.gather(*(task() for _ in range(TASKS)))


def measure(style: str, windows: int) -> dict[str, Any]:
    """One run of a style: per whole window, our requests answered 200, and 429 after the window's first."""
    _, arrivals = written.against_server(__file__, style, lambda url: asyncio.run(send_for(url, windows * WINDOW)))
    rows = []
    for window in range(windows):
        ours = sorted((at, status) for w, at, status in arrivals if w == window)
        rows.append({"ok": sum(status == 200 for _, status in ours),
                     "late_429": sum(status == 429 for _, status in ours[1:]),
                     "first_429": int(bool(ours) and ours[0][1] == 429), "sent": len(ours)})
    return {"windows": rows}


# ---- the report ----

def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A style's figures over its runs' windows."""
    windows = [row for run in runs for row in run["windows"]]
    shares = [row["ok"] / LEFT for row in windows]
    return {"windows": len(windows), "ok_median": statistics.median(row["ok"] for row in windows),
            "ok_least": min(row["ok"] for row in windows), "late_429": sum(row["late_429"] for row in windows),
            "first_429": sum(row["first_429"] for row in windows), "sent_median": statistics.median(
                row["sent"] for row in windows), "share_median": statistics.median(shares), "share_least": min(shares)}


def table(results: dict[str, Any]) -> str:
    lines = [f"Python {results.get('python', '?')}; {results['runs']} run(s) of {results['windows']} whole windows per style"
             f"{' (a quick run: indicative only)' if results['profile'] == 'quick' else ''}; the server lets "
             f"{QUOTA} requests per {WINDOW:.0f} s window through, {UNSEEN} of them to a client we do not see; ours is "
             f"`Limiter({RATE}, 1)` through `aiotb.httpx.LimitedTransport`, {TASKS} tasks.", "",
             "| headers | windows | ours answered 200 per window (median, least) | share of the 30 left (median, least) "
             "| 429 after a window's first response | 429 as a window's first | requests sent per window (median) "
             "| targets |",
             "|:--|--:|--:|--:|--:|--:|--:|:--|"]
    for style in STYLES:
        s = summary(results["styles"][style])
        if style == "none":
            verdict = "the contrast"
        else:
            met = s["late_429"] == 0 and s["share_least"] >= TARGET_SHARE
            verdict = "met" if met else "**not met**"
        lines.append(f"| {style} | {s['windows']} | {s['ok_median']:g}, {s['ok_least']} | "
                     f"{s['share_median']:.0%}, {s['share_least']:.0%} | {s['late_429']} | {s['first_429']} | "
                     f"{s['sent_median']:g} | {verdict} |")
    lines += ["", f"Targets: no 429 after the first response of each window, and at least {TARGET_SHARE:.0%} of the "
              f"{LEFT} left to us answered 200 in every window (`none` is the contrast: the same client with no "
              f"header to follow)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    started = written.begun(__doc__ or "", HERE / "server_signals", serve, PROFILES)
    if started is None:
        return
    args, results = started
    profile, results["styles"] = PROFILES[results["profile"]], {}
    for style in STYLES:
        runs = []
        for _ in range(profile["runs"]):
            runs.append(measure(style, profile["windows"]))
            print(f"{style}: {runs[-1]}", file=sys.stderr, flush=True)
        results["styles"][style] = runs
    written.write(args, __file__, "Following the server's rate-limit headers", results, table(results))


if __name__ == "__main__":
    main()
