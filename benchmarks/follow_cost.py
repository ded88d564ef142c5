"""What following a server's headers costs per response: python benchmarks/follow_cost.py [--quick] [--out DIR].

``aiotb.httpx.LimitedTransport`` over ``httpx.MockTransport`` (no network: what is left is the client's and ours),
answering each request at once with ten header fields, three of them ``X-RateLimit-*``: one client with
``follow="requests"`` (the default: every response's headers read and applied to the limiter) and one with
``follow=None``, each with a limiter of its own, made once on one event loop and warmed up. Then ``blocks`` pairs of
blocks of ``REQUESTS`` requests, one request at a time, the two clients' blocks alternating (which goes first
alternates too), so that both meet the same state of the machine and the process (its collector included). Reported:
the median µs per request of each, and the median over the pairs of the difference, the cost of following. Target:
at most 5 µs per response. Writes server_signals/cost/RESULTS.md and raw.json beside this file (--out to write
elsewhere) and prints the same."""

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

REQUESTS, WARM_UP, TARGET_US = 200, 1000, 5.0
PROFILES = {"full": {"blocks": 301}, "quick": {"blocks": 31}}
COMMON = [(b"Date", b"Sun, 29 Nov 2026 01:00:00 GMT"), (b"Content-Type", b"application/json"),
          (b"Content-Length", b"2"), (b"Server", b"nginx"), (b"Connection", b"keep-alive"),
          (b"Vary", b"Accept-Encoding"), (b"Cache-Control", b"no-cache")]  # a response's other fields
Follow = Literal["requests"] | None


async def measure(blocks: int) -> tuple[list[float], list[float]]:
    """µs per request in each block, following and not, blocks interleaved."""
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

    def client(follow: Follow) -> httpx.AsyncClient:
        transport = LimitedTransport(Limiter(10**9, 1), httpx.MockTransport(respond), follow=follow)
        return httpx.AsyncClient(transport=transport, base_url="http://api.test")

    async def block(through: httpx.AsyncClient, requests: int) -> float:
        started = time.perf_counter()
        for _ in range(requests):
            await through.get("/")
        return (time.perf_counter() - started) / requests * 1e6

    times: dict[Follow, list[float]] = {"requests": [], None: []}
    async with client("requests") as following, client(None) as not_following:
        clients: dict[Follow, httpx.AsyncClient] = {"requests": following, None: not_following}
        for follow, through in clients.items():
            await block(through, WARM_UP)
        for i in range(blocks):
            order: list[Follow] = ["requests", None] if i % 2 == 0 else [None, "requests"]
            for follow in order:
                times[follow].append(await block(clients[follow], REQUESTS))
    return times["requests"], times[None]


def report(results: dict[str, Any]) -> str:
    following, off = results["following_us"], results["off_us"]
    on_median, off_median = statistics.median(following), statistics.median(off)
    added = statistics.median(a - b for a, b in zip(following, off))
    verdict = "met" if added <= TARGET_US else "**not met**"
    quick = " (a quick run: indicative only)" if results["profile"] == "quick" else ""
    return (f"Python {results['python']}{quick}; {len(off)} pairs of blocks of {REQUESTS} requests on one event "
            f"loop, the two clients' blocks alternating; each response carries ten header fields, three of them "
            f"`X-RateLimit-*`.\n\n"
            f"| `follow=` | µs per request (median of the blocks) | blocks (least, most) |\n|:--|--:|--:|\n"
            f"| `\"requests\"` | {on_median:.1f} | {min(following):.1f}, {max(following):.1f} |\n"
            f"| `None` | {off_median:.1f} | {min(off):.1f}, {max(off):.1f} |\n\n"
            f"Following adds {added:.1f} µs per response, the median over the pairs of blocks (target at most "
            f"{TARGET_US:g} µs: {verdict}).\n")


def main() -> None:
    args = written.arguments(__doc__ or "", HERE / "server_signals" / "cost")
    profile = PROFILES["quick" if args.quick else "full"]
    following, off = asyncio.run(measure(profile["blocks"]))
    results: dict[str, Any] = {"profile": "quick" if args.quick else "full", **profile,
                               "python": sys.version.split()[0], "following_us": following, "off_us": off}
    written.write(args, __file__, "What following the server's headers costs", results, report(results))


if __name__ == "__main__":
    main()
