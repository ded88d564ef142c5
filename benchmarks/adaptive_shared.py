"""One rate found by trying from several processes: python benchmarks/adaptive_shared.py [--quick] [--out DIR].

The server of ``adaptive_rate.py`` (in a process of its own: ``QUOTA``, 40, requests per any sliding second, a bare
429 above), and ``PROCESSES`` (2) client processes, each ``AdaptiveLimiter(200, 1, min_rate=1)`` through
``aiotb.httpx.LimitedTransport`` with ``TASKS`` (4) tasks sending one request after the other, for ``seconds``
(60). Cases:

  * ``shared``: each limiter over ``RedisStore(url, key)``, one key: the rule runs in Redis for both (a
    redis-server of its own on 127.0.0.1, started for the run: tests/redis_server.py);
  * ``segment``: each limiter over ``SharedMemoryStore(name)``, one name: the segment's rate, which each
    process reads and changes by read, modify and write;
  * ``apart``: the contrast, each limiter in its own process, adapting alone.

From the server's record, after the first ``SETTLE`` (10) s: the share of the requests answered 429, and the
requests answered 200 against what the quota allowed. Writes server_signals/adaptive_shared/RESULTS.md and
raw.json beside this file (--out to write elsewhere) and prints the same table."""

from __future__ import annotations

import asyncio
import multiprocessing
import secrets
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import adaptive_rate  # noqa: E402  (beside this file: its server)
import written  # noqa: E402

PROCESSES, TASKS = 2, 4
CASES = ("shared", "segment", "apart")
PROFILES = {"full": {"seconds": 60.0, "runs": 3}, "quick": {"seconds": 30.0, "runs": 1}}


async def send_for(url: str, case: str, redis_url: str, key: str, seconds: float) -> dict[str, Any]:
    """TASKS tasks of this process sending for seconds; the limiter's rate every half second, and its cuts."""
    from aiotb import AdaptiveLimiter, RedisStore, SharedMemoryStore

    rule = {"min_rate": adaptive_rate.MIN_RATE}
    limiter: AdaptiveLimiter[Any]
    if case == "shared":
        limiter = AdaptiveLimiter(adaptive_rate.MAX_RATE, 1, store=RedisStore(redis_url, key), **rule)
    elif case == "segment":
        limiter = AdaptiveLimiter(adaptive_rate.MAX_RATE, 1, store=SharedMemoryStore(key), **rule)
    else:
        limiter = AdaptiveLimiter(adaptive_rate.MAX_RATE, 1, **rule)
    try:
        return await adaptive_rate.sent_through(limiter, url, seconds, TASKS)
    finally:
        if case == "shared":
            await limiter.store.redis.aclose()


def client_process(job: tuple[str, str, str, str, float]) -> dict[str, Any]:
    """One client process's run (multiprocessing's target)."""
    return asyncio.run(send_for(*job))


def clients(url: str, case: str, redis_url: str, seconds: float) -> list[dict[str, Any]]:
    """PROCESSES client processes, started together, over one key or segment (or none); what each returned."""
    from aiotb import SharedMemoryStore

    key = f"adaptive-{secrets.token_hex(4)}"
    try:
        with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
            return pool.map(client_process, [(url, case, redis_url, key, seconds)] * PROCESSES)
    finally:
        if case == "segment":
            SharedMemoryStore.unlink(key)


def measure(case: str, seconds: float, redis_url: str) -> dict[str, Any]:
    """One run of a case: the server's record after SETTLE s, and each client's rates and cuts."""
    ours, record = written.against_server(adaptive_rate.__file__, f"steady:{seconds}",
                                          lambda url: clients(url, case, redis_url, seconds))
    counted = [status for at, status in record if adaptive_rate.SETTLE <= at < seconds]
    allowed = adaptive_rate.QUOTA * (seconds - adaptive_rate.SETTLE)
    return {"requests": len(counted), "share_429": counted.count(429) / max(1, len(counted)),
            "served_share": counted.count(200) / allowed, "clients": ours}


def table(results: dict[str, Any]) -> str:
    lines = [f"Python {results['python']}; {results['runs']} run(s) of {results['seconds']:g} s per case"
             f"{' (a quick run: indicative only)' if results['profile'] == 'quick' else ''}; the server serves "
             f"{adaptive_rate.QUOTA} requests per any sliding second, a bare 429 above; {PROCESSES} processes, each "
             f"`AdaptiveLimiter({adaptive_rate.MAX_RATE}, 1, min_rate={adaptive_rate.MIN_RATE})` through "
             f"`aiotb.httpx.LimitedTransport` with {TASKS} tasks: over one `RedisStore` key (`shared`), over one "
             f"`SharedMemoryStore` name (`segment`), or each alone (`apart`). Counted from {adaptive_rate.SETTLE:g} s on; medians of the runs (least, most).", "",
             "| case | requests | answered 429 | served, of what the quota allowed | each process's rate at the end "
             "(req/s) | cuts per process |", "|:--|--:|--:|--:|--:|--:|"]
    for case in CASES:
        runs = results["cases"][case]
        ends = [[client["rates"][-1] for client in run["clients"] if client["rates"]] for run in runs]
        cuts = [[client["cuts"] for client in run["clients"]] for run in runs]
        lines.append(f"| {case} | {written.spread([run['requests'] for run in runs], '.0f')} | "
                     f"{written.spread([run['share_429'] for run in runs], '.1%')} | "
                     f"{written.spread([run['served_share'] for run in runs], '.0%')} | "
                     f"{'; '.join(' + '.join(f'{rate:.1f}' for rate in end) for end in ends)} | "
                     f"{'; '.join(' + '.join(str(count) for count in run) for run in cuts)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    started = written.begun(__doc__ or "", HERE / "server_signals" / "adaptive_shared", adaptive_rate.serve, PROFILES)
    if started is None:
        return
    args, results = started
    profile, results["cases"] = PROFILES[results["profile"]], {}
    sys.path.append(str(HERE.parent / "tests"))
    from redis_server import RedisServer

    with RedisServer() as server:
        for case in CASES:
            runs = []
            for _ in range(int(profile["runs"])):
                runs.append(measure(case, profile["seconds"], server.url))
                print(f"{case}: {[{k: v for k, v in runs[-1].items() if k != 'clients'}]}", file=sys.stderr,
                      flush=True)
            results["cases"][case] = runs
    written.write(args, __file__, "One rate found by trying from several processes: AdaptiveLimiter over Redis "
                  "and over shared memory", results, table(results))


if __name__ == "__main__":
    main()
