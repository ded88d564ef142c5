"""How fast one decision in Redis can be, one call at a time: python benchmarks/redis_floor.py [--quick] [--out DIR].

Starts its own redis-server on a free port of 127.0.0.1 (tests/redis_server.py: no persistence). Each row is a call
made one after another on one connection of its own client (redis-py's redis.asyncio), on a key of its own, with a
rate that never binds: a bare ``INCR``; the least GCRA of benchmarks/redis_store.py (``TIME``, ``GET``, ``SET PX``,
one number in and out); the least reserve (below); aiotb's script, sent as its store sends it; the store's
``reserve(1.0, 0)``; and ``Limiter.acquire()``. The rows take turns (the order rotated by one each run), after
warm-up calls; medians of the runs. The server's time per call is its ``INFO commandstats`` for the row's command
over the run.

What the least reserve is: WHAT_LEAST_RESERVE_IS, below, which the report prints with its script.
Writes redis/floor/RESULTS.md and raw.json beside this file (--out to write elsewhere) and prints the same."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import written  # noqa: E402  (beside this file)
from redis_store_workers import LEAST_GCRA  # noqa: E402

PROFILES = {"full": {"runs": 9, "calls": 4_000, "warmup": 300}, "quick": {"runs": 3, "calls": 500, "warmup": 50}}
TARGET = 0.90  # acquire() against the least GCRA, the target of benchmarks/redis_store.py's case 1
WHAT_LEAST_RESERVE_IS = (
    "The least reserve is what a reserve of aiotb's must do in one round trip beyond the least GCRA, and nothing "
    "else: take the limits' definition, an amount and a wait as three arguments; keep the state in one string key "
    "(the definition, the epoch and F: `GET`, `SET PX`, no hash); refuse a key made with other limits; count in "
    "integer ns after the epoch (exact below 2^53, which the server's µs since 1970 are not, in ns); and answer the "
    "record a cancel needs (the delay, the instant, the epoch, F before and after) in one string. It leaves out all "
    "else aiotb's script does: checking its arguments, the pause, more rates than one, set_rate, a server's limit, "
    "moving the epoch, a run of amounts in one call. It is the floor of a script that could serve aiotb's reserve, "
    "not one that does.")
LEAST_RESERVE = """\
local definition, amount, wait = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local clock = redis.call('TIME')
local now_us = clock[1] * 1000000 + clock[2]
local state = redis.call('GET', KEYS[1]) or string.format('%s %d 0', definition, now_us)
if string.find(state, definition, 1, true) ~= 1 then
    return '5'
end
local ns, burst, epoch, f = string.match(state, '^([^,]+),([^,]+),%S* (%d+) (%d+)$')
ns, burst, epoch, f = tonumber(ns), tonumber(burst), tonumber(epoch), tonumber(f)
local now = (now_us - epoch) * 1000
local need = math.ceil(amount * ns)
local at = math.max(now, f - (math.ceil(burst * ns) - need))
if wait >= 0 and at - now > wait then
    return string.format('3 %d', at - now)
end
local after = math.max(f, at) + need
redis.call('SET', KEYS[1], string.format('%s %d %d', definition, epoch, after), 'PX',
           math.max(1, math.ceil((after - now) / 1e6)))
return string.format('0 %d %d %d %d %d', at - now, at, epoch, f, after)
"""  # one rate's GCRA, "ns_per_token,burst,initial" as aiotb's definition; the state "<definition> <epoch> <F>"

Call = Callable[[], Awaitable[Any]]
ROWS = {  # name: (what it is, the command INFO commandstats counts it under, whether an answer is a grant)
    "incr": ("`INCR` (redis-py sends `INCRBY`)", "incrby", lambda reply: isinstance(reply, int)),
    "least_gcra": ("EVALSHA of the least GCRA (`TIME`, `GET`, `SET PX`)", "evalsha", lambda reply: reply == 0),
    "least_reserve": ("EVALSHA of the least reserve (below)", "evalsha", lambda reply: reply.startswith(b"0 0 ")),
    "aiotb_script": ("EVALSHA of aiotb's script, as its store sends it", "evalsha",
                     lambda reply: reply.startswith(b"0 0 ")),
    "aiotb_reserve": ("aiotb `await rates.reserve(1.0, 0)` (the store call)", "evalsha",
                      lambda reply: reply is not None and reply.delay == 0),
    "aiotb_acquire": ("aiotb `await limiter.acquire()`", "evalsha", lambda reply: reply is None),
}


async def contenders(url: str) -> tuple[dict[str, Call], list[Any]]:
    """Each row's call, on a client of its own; and the clients."""
    import redis.asyncio

    from aiotb import Limiter, RedisStore
    from aiotb._redis_limiter import RedisLimiter

    clients = [redis.asyncio.Redis.from_url(url) for _ in ROWS]
    incr, gcra, least, script, reserve, acquire = clients
    limiter = Limiter(1e6, 1, burst=1e6, store=RedisStore(acquire, "floor-acquire"))
    rates = Limiter(1e6, 1, burst=1e6, store=RedisStore(reserve, "floor-reserve"))
    assert isinstance(limiter, RedisLimiter) and isinstance(rates, RedisLimiter)
    bound = rates._store_rates  # what try_acquire calls
    store = RedisStore(script, "floor-script")
    text, head = store._head(bound.definition)
    await script.script_load(text.text)
    gcra_sha, least_sha = await gcra.script_load(LEAST_GCRA), await least.script_load(LEAST_RESERVE)
    calls: dict[str, Call] = {
        "incr": lambda: incr.incr("floor:incr"),
        "least_gcra": lambda: gcra.execute_command("EVALSHA", gcra_sha, 1, "floor:least_gcra", 1),
        "least_reserve": lambda: least.execute_command("EVALSHA", least_sha, 1, "floor:least_reserve",
                                                       bound.definition, "1.0", "0"),
        "aiotb_script": lambda: script.execute_command(*head, "reserve 1.0 0 0"),
        "aiotb_reserve": lambda: bound.reserve(1.0, 0),
        "aiotb_acquire": limiter.acquire,
    }
    return calls, clients


async def measure(url: str, runs: int, calls: int, warmup: int) -> tuple[str, dict[str, Any]]:
    """The server's version; each row's calls/s and server µs per call, run by run, and the answers that were
    not grants."""
    import redis.asyncio

    admin = redis.asyncio.Redis.from_url(url)
    made, clients = await contenders(url)
    names = list(made)
    found: dict[str, dict[str, Any]] = {name: {"rates": [], "server_us": [], "refused": 0} for name in names}
    try:
        for name in names:
            for _ in range(warmup):
                found[name]["refused"] += not ROWS[name][2](await made[name]())
        for run in range(runs):
            for name in names[run % len(names):] + names[:run % len(names)]:
                call, granted, row = made[name], ROWS[name][2], found[name]
                await admin.config_resetstat()
                started = time.perf_counter()
                for _ in range(calls):
                    row["refused"] += not granted(await call())
                row["rates"].append(calls / (time.perf_counter() - started))
                stats = (await admin.info("commandstats"))[f"cmdstat_{ROWS[name][1]}"]
                row["server_us"].append(float(stats["usec"]) / float(stats["calls"]))
        version = str((await admin.info("server"))["redis_version"])
    finally:
        for client in (admin, *clients):
            await client.aclose()
    return version, found


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The medians, and what they say of the target."""
    rows = {name: {"rate": statistics.median(r["rates"]), "server_us": statistics.median(r["server_us"]),
                   "runs": (min(r["rates"]), max(r["rates"])), "refused": r["refused"]}
            for name, r in results["rows"].items()}
    least = rows["least_gcra"]["rate"]
    client_us = 1e6 / rows["aiotb_acquire"]["rate"] - 1e6 / rows["aiotb_script"]["rate"]
    floor_us = 1e6 / rows["least_reserve"]["rate"] + client_us
    return {"rows": rows, "least": least, "client_us": client_us, "floor_ratio": 1e6 / floor_us / least,
            "least_reserve_ratio": rows["least_reserve"]["rate"] / least}


def report(results: dict[str, Any]) -> str:
    s = summary(results)
    rows, least = s["rows"], s["least"]
    quick = " (a quick run: indicative only)" if results["profile"] == "quick" else ""
    table = "".join(f"| {ROWS[name][0]} | {r['rate']:,.0f} | {1e6 / r['rate']:.1f} | {r['runs'][0]:,.0f} – "
                    f"{r['runs'][1]:,.0f} | {r['rate'] / least:.2f} | {r['server_us']:.1f} | {r['refused']} |\n"
                    for name, r in rows.items())
    reach = "reaches" if s["least_reserve_ratio"] >= TARGET else "stays below"
    floor = "reaches" if s["floor_ratio"] >= TARGET else "stays below"
    return (f"Python {results['python']}{quick}, redis-py {results['redis_py']}, redis-server "
            f"{results['server']}, {os.cpu_count()} CPUs, load average {results['load'][0]:.2f} at the start and "
            f"{results['load'][1]:.2f} at the end; {results['runs']} runs of {results['calls']:,} calls per row, one "
            f"after another on one connection, after {results['warmup']} warm-up calls; medians.\n\n"
            f"| call | calls/s | µs per call | runs (min – max) | × the least GCRA | server µs per call | "
            f"refused |\n|:--|--:|--:|--:|--:|--:|--:|\n{table}\n"
            f"The least reserve {reach} {TARGET:.2f} × the least GCRA before any work of the limiter in the "
            f"process: {s['least_reserve_ratio']:.2f} ×. The limiter and its store add "
            f"{s['client_us']:.1f} µs a call on this client (`acquire()` less aiotb's script sent bare, by the "
            f"medians); the least reserve with that work added would make {s['floor_ratio']:.2f} × the least GCRA "
            f"(computed from the medians above, not measured as such), which {floor} {TARGET:.2f} ×.\n\n"
            f"{WHAT_LEAST_RESERVE_IS}\n\n```lua\n{LEAST_RESERVE}```\n")


def main() -> None:
    import redis

    args = written.arguments(__doc__ or "", HERE / "redis" / "floor")
    results = {**written.profiled(args, PROFILES), "redis_py": redis.__version__}
    profile = PROFILES[results["profile"]]
    sys.path.append(str(HERE.parent / "tests"))
    from redis_server import RedisServer

    with RedisServer() as server:
        results["load"] = [os.getloadavg()[0]]
        results["server"], results["rows"] = asyncio.run(measure(server.url, profile["runs"], profile["calls"],
                                                                 profile["warmup"]))
        results["load"].append(os.getloadavg()[0])
    written.write(args, __file__, "How fast one decision in Redis can be, one call at a time", results,
                  report(results))


if __name__ == "__main__":
    main()
