"""What following a server's headers costs per response: python benchmarks/follow_cost.py [--quick] [--out DIR].

``aiotb.httpx.LimitedTransport`` over ``httpx.MockTransport`` (no network: what is left is the client's and ours),
answering each request at once with ten header fields, three of them ``X-RateLimit-*``, once with
``follow="requests"`` (the default: every response's headers read and applied to the limiter) and once with
``follow=None``; ``rounds`` rounds of ``REQUESTS`` requests each, the two interleaved, one request at a time. The
median per request of each, and their difference. Target: at most 5 µs per response. Writes
server_signals/cost/RESULTS.md and raw.json beside this file (--out to write elsewhere) and prints the same."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Literal

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import written  # noqa: E402  (beside this file)

REQUESTS, TARGET_US = 3000, 5.0
PROFILES = {"full": {"rounds": 9}, "quick": {"rounds": 3}}
COMMON = [(b"Date", b"Sun, 29 Nov 2026 01:00:00 GMT"), (b"Content-Type", b"application/json"),
          (b"Content-Length", b"2"), (b"Server", b"nginx"), (b"Connection", b"keep-alive"),
          (b"Vary", b"Accept-Encoding"), (b"Cache-Control", b"no-cache")]  # a response's other fields
Follow = Literal["requests"] | None


async def one_round(follow: Follow) -> float:
    """s per request through the transport, following (or not) the headers of each response."""
    import httpx

    from aiotb import Limiter
    from aiotb.httpx import LimitedTransport

    count = 0

    def respond(request: httpx.Request) -> httpx.Response:
        nonlocal count
        count += 1
        quota = [(b"X-RateLimit-Limit", b"1000000000"), (b"X-RateLimit-Remaining", str(10**9 - count).encode()),
                 (b"X-RateLimit-Reset", b"30")]
        return httpx.Response(200, headers=COMMON + quota, content=b"{}")

    transport = LimitedTransport(Limiter(10**9, 1), httpx.MockTransport(respond), follow=follow)
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as client:
        started = time.perf_counter()
        for _ in range(REQUESTS):
            await client.get("/")
        return (time.perf_counter() - started) / REQUESTS


def report(results: dict[str, Any]) -> str:
    on, off = statistics.median(results["following_us"]), statistics.median(results["off_us"])
    added = on - off
    verdict = "met" if added <= TARGET_US else "**not met**"
    quick = " (a quick run: indicative only)" if results["profile"] == "quick" else ""
    return (f"Python {results['python']}{quick}; medians of {len(results['off_us'])} interleaved rounds of {REQUESTS} "
            f"requests, each answered with ten header fields, three of them `X-RateLimit-*`.\n\n"
            f"| `follow=` | µs per request (median) | rounds (least, most) |\n|:--|--:|--:|\n"
            f"| `\"requests\"` | {on:.1f} | {min(results['following_us']):.1f}, {max(results['following_us']):.1f} |\n"
            f"| `None` | {off:.1f} | {min(results['off_us']):.1f}, {max(results['off_us']):.1f} |\n\n"
            f"Following adds {added:.1f} µs per response (target at most {TARGET_US:g} µs: {verdict}).\n")


def main() -> None:
    args = written.arguments(__doc__ or "", HERE / "server_signals" / "cost")
    profile = PROFILES["quick" if args.quick else "full"]
    results: dict[str, Any] = {"profile": "quick" if args.quick else "full", **profile,
                               "python": sys.version.split()[0], "following_us": [], "off_us": []}
    styles: tuple[Follow, ...] = ("requests", None)
    for _ in range(profile["rounds"]):
        for follow in styles:
            results["following_us" if follow else "off_us"].append(asyncio.run(one_round(follow)) * 1e6)
    written.write(args, __file__, "What following the server's headers costs", results, report(results))


if __name__ == "__main__":
    main()
