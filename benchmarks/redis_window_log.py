"""What a Redis window's decision costs as its log grows: python benchmarks/redis_window_log.py [--quick] [--out DIR].

Starts its own redis-server on a free port of 127.0.0.1 (tests/redis_server.py: no persistence). For each size, a
window of a billion tokens an hour (so that every grant fits) whose log is filled by hand with that many one-token
grants of one instant, then ``calls`` reserves of one token in a row from one client on one connection, each timed
from the client: the median and the 90th percentile, and the server's own time per call (``INFO commandstats``'
``evalsha`` line, over the reserves). Writes redis/window_log/RESULTS.md and raw.json beside this file (--out to
write elsewhere) and prints the same."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import written  # noqa: E402  (beside this file)

SIZES = [100, 4_000, 100_000]
PROFILES = {"full": {"calls": 2_000}, "quick": {"calls": 200}}


async def measure(url: str, size: int, calls: int) -> dict[str, float]:
    """µs per reserve, client's median and 90th percentile, and the server's, with size grants in the log."""
    import redis.asyncio

    from aiotb._store_redis import RedisRates, RedisStore, window_definition

    client = redis.asyncio.Redis.from_url(url)
    try:
        store = RedisStore(client, f"log-{size}")
        rates = RedisRates(store, window_definition(3600 * 10**9, 1e9))
        await rates.reserve(1.0, 0)  # the key, with its first grant
        log = store.redis_key + ":log"
        ((_, at),) = await client.zrange(log, 0, -1, withscores=True)
        for start in range(2, size + 1, 8192):
            await client.zadd(log, {f"{q}:1": at for q in range(start, min(start + 8192, size + 1))})
        await client.hset(store.redis_key, mapping={"q": size, "u": repr(float(size))})
        await client.config_resetstat()
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            await rates.reserve(1.0, 0)
            times.append((time.perf_counter() - started) * 1e6)
        server = (await client.info("commandstats"))["cmdstat_evalsha"]
        return {"median_us": statistics.median(times), "p90_us": statistics.quantiles(times, n=10)[-1],
                "server_us": float(server["usec_per_call"]), "logged": float(await client.zcard(log))}
    finally:
        await client.aclose()


def report(results: dict[str, Any]) -> str:
    quick = " (a quick run: indicative only)" if results["profile"] == "quick" else ""
    rows = "".join(f"| {size:,} | {r['logged']:,.0f} | {r['median_us']:.0f} | {r['p90_us']:.0f} | {r['server_us']:.1f} |\n"
                   for size, r in zip(SIZES, results["sizes"]))
    return (f"Python {results['python']}{quick}; {results['calls']:,} reserves of one token per size, one after "
            f"another on one connection.\n\n"
            f"| grants in the log before | after | µs per reserve, client (median) | 90th percentile | "
            f"µs per call, server |\n|--:|--:|--:|--:|--:|\n{rows}")


def main() -> None:
    args = written.arguments(__doc__ or "", HERE / "redis" / "window_log")
    results = {**written.profiled(args, PROFILES), "sizes": []}
    profile = PROFILES[results["profile"]]
    sys.path.append(str(HERE.parent / "tests"))
    from redis_server import RedisServer

    with RedisServer() as server:
        for size in SIZES:
            results["sizes"].append(asyncio.run(measure(server.url, size, profile["calls"])))
    written.write(args, __file__, "What a Redis window's decision costs as its log grows", results, report(results))


if __name__ == "__main__":
    main()
