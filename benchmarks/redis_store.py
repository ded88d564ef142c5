"""One quota in Redis: python benchmarks/redis_store.py [--quick] [--out DIR].

Starts its own redis-server on a free port of 127.0.0.1 (tests/redis_server.py: no persistence) and
measures, against that server and with one client library (redis-py's redis.asyncio):

  1. round trips per second on one connection, sequential awaits, alternating runs (the order
     rotates each run), medians: a bare INCR; aiotb's ``await limiter.acquire()`` and ``await
     limiter.atry_acquire()`` on ``Limiter(1e6, 1, burst=1e6, store=RedisStore(client, key))``,
     whose rate never binds, and the store call they make (``store.reserve``); pyrate-limiter's two
     Redis buckets; limits' async Redis storage with its moving and fixed windows, each ``hit()``.
     Two reference scripts show what any one-EVALSHA limiter pays on this client: one that returns 1
     and one that returns aiotb's reply to a reserve as a constant, both sent aiotb's arguments; a
     third, the least GCRA (TIME, GET, the arithmetic, SET PX), what any GCRA on the server's clock
     pays in one round trip. For information, limits on coredis, its default client. Beside the
     server's CPU time, its time executing each row's commands (INFO commandstats);
 1b. C concurrent tasks (16, then 64) on one connection, each client made with
     ``single_connection_client=True``: a bare INCR; aiotb's ``await limiter.acquire()`` on one
     shared limiter as in case 1; case 1's faster pyrate-limiter bucket; limits' moving and fixed
     windows; as case 1, with the commands the server ran per call (for aiotb, per acquire);
  2. 4 spawned processes x 50 tasks looping ``async with limiter:`` on one key at 1,000/s (burst
     10), started together at one CLOCK_MONOTONIC instant (redis_store_workers.py holds what they
     run); then the same with each process's clock (as the store reads it) 5 s off, two ahead and
     two behind. Each grant is logged at the server's instant the script returned (ns since 1970 on
     the server's clock) and at its use instant (``time.monotonic_ns()`` as its task resumes); the
     store logs every reservation the script made;
  3. the same 4 processes, one of them stopped with SIGSTOP for 150 ms every 2 s, in turn;
  4. a real client: 4 spawned processes, each an aiohttp session sending 150 requests through
     ``Limiter(95, 1, burst=5, store=RedisStore(url, key))`` on one key, each request sent and read
     inside ``async with limiter:``, to a local HTTP server in its own process that answers 429
     above 100 requests in any sliding second (shared_workers.py's server role, with shared.py's
     settings); then the same with an in-process ``Limiter(95, 1, burst=5)`` in each process;
  5. the lease mode, ``RedisStore(..., lease=1.0, units=16)``, whose limiter grants from units of
     the key's rates that it leases, with no round trip per grant: (a) one process, sequential
     awaits, rates that never bind: ``async with`` and ``await try_acquire()`` on a leased store
     against the same store without lease= (one round trip a grant), alternating runs as case 1,
     medians, with the EVALSHA calls the server counted during them; (b) 4 processes x 50 tasks
     looping ``async with limiter:`` on one key at 1,000/s (burst 20), their use instants merged
     and checked against burst + rate * t; (c) 3 such processes, then a 4th starting later: how
     long it waits for its first grant and for a fifth of the rate, and the shares after.

What a merged log says: the grants; the achieved rate, (grants - burst) over the first to the last
instant; the most grants in any 1 s window [t, t + 1 s) against the bound burst + rate * 1 s, and how
many windows (one starting at each grant) exceed it; and the largest GCRA excess, by virtual
scheduling in integer ns over the sorted instants (f = max(f, t) + T, T the script's ns per token;
excess = (f - t) / T - burst tokens), above 0 when the instants are closer than the bucket allows.
Order: within a process, a grant's request number (taken as its task asks) against the one before
it; across processes, the script's records (each reservation's F before and after) must form one
chain, F before = the previous F after (or a hash made anew, full, after the old one expired full),
and the server's instants must increase strictly along it from one round trip to the next (the grants
one round trip makes share its instant).
Wake lateness: a use instant minus the local instant the limiter set its timer for. Writes
redis/RESULTS.md and redis/raw.json beside this file (--out to write elsewhere) and prints the same
tables."""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import secrets
import signal
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import shared_workers
from crew import READY_TIMEOUT, RESULT_SLACK, Worker, crew, release, results_of

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
PROCESSES = 4
TASKS = 50
RATE, BURST = 1_000.0, 10.0
WINDOW_NS = 1_000_000_000
STEADY_AFTER_NS = 1_000_000_000  # lateness counts from 1 s after the start
OFFSET_NS = 5_000_000_000  # the clocks of the second run of case 2: +5 s, -5 s, +5 s, -5 s
STOP_NS, STOP_EVERY_NS = 150_000_000, 2_000_000_000
STALE_NS = 5_000_000  # the limiter's rule: a reservation reached this late (and a token's time) is stale

TARGET_VS_INCR = 0.90
TARGET_VS_PYRATE = 3.0
TARGET_VS_LEAST = 0.90  # case 1: acquire() against the least GCRA script's EVALSHA in the same run
TARGET_VS_LIMITS = 1.0
TARGET_EXACT = 1e-6  # tokens of GCRA excess at the server's instants (the script's instants are exact ns)
TARGET_SLACK_MS = 2.0  # steady p99 wake lateness <= one round trip + this
TARGET_HTTP_RATE_PCT = 97.0  # case 4: the 200s' rate, in every run, against the limiter's rate
LEASE_SPAN, LEASE_UNITS = 1.0, 16  # case 5: RedisStore(..., lease=LEASE_SPAN, units=LEASE_UNITS)
LEASE_BURST = 20.0  # cases 5b and 5c: Limiter(1_000, 1, burst=20), 1.25 tokens of burst a unit
TARGET_LEASE_VS_ONE = 20.0  # case 5a: a leased limiter's grants/s against those of one round trip a grant
TARGET_LEASE_RATE_PCT = 99.0  # case 5b: the rate after the first second, against the limiter's rate
NEWCOMER_SHARE = 0.20  # case 5c: the part of the rate a late process's grants in a sliding 1 s window reach
SERVER_FIGURES = ("Server CPU: the server's user + system CPU time over the run (INFO cpu), per call, median. Server "
                  "execution: the server's time executing the row's commands over the run (INFO commandstats, reset "
                  "before it: EVALSHA's for a script, whose commands run inside it; else every command's, INCRBY for "
                  "redis-py's `incr()`), per call, median.")

HTTP_CLIENTS = 4
HTTP_RATE, HTTP_BURST = 95.0, 5.0
HTTP_REQUESTS = 600  # in all, HTTP_REQUESTS // HTTP_CLIENTS per process

PROFILES: dict[str, dict[str, Any]] = {
    "full": {"rt_runs": 9, "rt_calls": 4_000, "together_runs": 5, "together_calls": 3_200, "together_tasks": [16, 64],
             "shared_s": 30, "stopped_s": 20, "http_runs": 5, "lease_runs": 7, "lease_calls": 1_000_000,
             "lease_shared_s": 30, "join_after_s": 3, "joined_s": 6, "share_last_s": 3},
    "quick": {"rt_runs": 5, "rt_calls": 1_000, "together_runs": 3, "together_calls": 1_024,
              "together_tasks": [16, 64], "shared_s": 5, "stopped_s": 6, "http_runs": 1, "lease_runs": 3,
              "lease_calls": 200_000, "lease_shared_s": 5, "join_after_s": 2, "joined_s": 4, "share_last_s": 2},
}


# ---- the server and the processes ----

@contextmanager
def redis_server() -> Iterator[Any]:
    """tests/redis_server.py's RedisServer, started for the run."""
    if str(TESTS) not in sys.path:
        sys.path.append(str(TESTS))
    from redis_server import RedisServer

    with RedisServer() as server:
        yield server


@contextmanager
def started(ctx: Any, specs: list[dict[str, Any]]) -> Iterator[list[Worker]]:
    """One worker per spec (redis_store_workers.main), each killed and reaped when the case ends."""
    import redis_store_workers

    with crew() as workers:
        workers.extend(Worker(ctx, spec, redis_store_workers.main) for spec in specs)
        yield workers


# ---- case 1: round trips on one connection ----

def round_trips(ctx: Any, url: str, port: int, runs: int, count: int) -> dict[str, Any]:
    """Case 1, in one fresh process (redis_store_workers.round_trips)."""
    spec = {"role": "round_trips", "url": url, "port": port, "runs": runs, "calls": count}
    with started(ctx, [spec]) as (worker,):
        return dict(worker.receive(READY_TIMEOUT + 60 * runs))


def concurrent(ctx: Any, url: str, port: int, runs: int, count: int, levels: list[int],
               case_1: dict[str, Any] | None) -> dict[str, Any]:
    """Case 1b, in one fresh process (redis_store_workers.concurrent), with case 1's faster
    pyrate-limiter bucket."""
    if case_1 is None:
        raise RuntimeError("case 1, which names pyrate-limiter's faster Redis bucket, did not run")
    pyrate, _ = pyrate_best(case_1)
    spec = {"role": "concurrent", "url": url, "port": port, "runs": runs, "calls": count, "tasks": levels,
            "contenders": ["incr", "aiotb_acquire", pyrate, "limits_moving", "limits_fixed"]}
    with started(ctx, [spec]) as (worker,):
        return dict(worker.receive(READY_TIMEOUT + 30 * runs * len(levels)))


def pyrate_best(r: dict[str, Any]) -> tuple[str, float]:
    """pyrate-limiter's faster Redis bucket of those in r: its key and median."""
    rows = r["contenders"]
    key = max((k for k in ("pyrate_log", "pyrate_gcra") if k in rows), key=lambda k: rows[k]["median"])
    return key, rows[key]["median"]


def round_trip_ratios(r: dict[str, Any], mines: tuple[str, ...] = ("aiotb_acquire", "aiotb_try")
                      ) -> list[tuple[str, str, float, float]]:
    """(aiotb call, against, ratio, target) for every ratio the targets name."""
    rows = r["contenders"]
    best_key, best = pyrate_best(r)
    out = []
    for mine in mines:
        ours = rows[mine]["median"]
        out.append((mine, "incr", ours / rows["incr"]["median"], TARGET_VS_INCR))
        out.append((mine, best_key, ours / best, TARGET_VS_PYRATE))
        out.append((mine, "limits_moving", ours / rows["limits_moving"]["median"], TARGET_VS_LIMITS))
        out.append((mine, "limits_fixed", ours / rows["limits_fixed"]["median"], TARGET_VS_LIMITS))
    return out


# ---- cases 2 and 3: processes sharing one key ----

def specs_for(url: str, seconds: float, offsets: list[int]) -> list[dict[str, Any]]:
    key = f"bench-{secrets.token_hex(4)}"
    return [{"role": "tasks", "url": url, "key": key, "rate": RATE, "burst": BURST, "tasks": TASKS,
             "duration_ns": int(seconds * 1e9), "offset_ns": offset} for offset in offsets]


def run_shared(ctx: Any, url: str, seconds: float, offsets: list[int],
               stops: list[tuple[int, int]] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The workers of one run, started together; stops: (ns after the start, worker index) at which
    that worker is stopped for STOP_NS. Their results, and the stops as made."""
    specs = specs_for(url, seconds, offsets)
    made: list[dict[str, Any]] = []
    with started(ctx, specs) as workers:
        start_ns = release(workers)
        for after_ns, index in stops or []:
            pid = workers[index].process.pid
            shared_workers.spin_until(start_ns + after_ns)
            stopped = time.monotonic_ns()
            os.kill(pid, signal.SIGSTOP)
            time.sleep(STOP_NS / 1e9)
            os.kill(pid, signal.SIGCONT)
            made.append({"worker": index, "pid": pid, "at_s": (stopped - start_ns) / 1e9,
                         "stopped_ms": (time.monotonic_ns() - stopped) / 1e6})
        left = max(0.0, (start_ns + seconds * 1e9 - time.monotonic_ns()) / 1e9)
        return results_of(workers, left), made


def ns_per_token(rate: float) -> int:
    """A token's ns as the script counts it: rounded up to a whole ns."""
    return math.ceil(1e9 / rate)


def bound_stats(instants: Any, rate: float, burst: float) -> dict[str, Any]:
    """Grants, achieved rate, busiest 1 s window against burst + rate, and the largest GCRA excess
    (integer ns, exact), of sorted int64 instants (ns)."""
    import numpy as np

    n = int(instants.size)
    bound = burst + rate * WINDOW_NS / 1e9
    out: dict[str, Any] = {"grants": n, "bound": bound}
    if n < 2:
        return out
    per_token = ns_per_token(rate)
    since = instants - instants[0]
    k = np.arange(n, dtype=np.int64)
    virtual = (k + 1) * per_token + np.maximum.accumulate(since - k * per_token)  # f after each grant
    excess = virtual - since - math.ceil(burst * per_token)  # ns beyond the burst
    worst = int(excess.argmax())
    in_window = np.searchsorted(instants, instants + WINDOW_NS, side="left") - k
    span_s = float(since[-1]) / 1e9
    achieved = (n - min(n, int(burst))) / span_s
    out.update(span_s=span_s, achieved_rate=achieved, rate_error_pct=100 * (achieved - rate) / rate,
               longest_gap_ms=float(np.diff(instants).max() / 1e6), max_in_window=int(in_window.max()),
               windows_over=int((in_window > bound + 1e-9).sum()), excess_tokens=float(excess[worst] / per_token),
               excess_at_s=float(since[worst] / 1e9), uses_with_excess=int((excess > 0).sum()))
    return out


def percentiles_ms(values: Any) -> dict[str, float] | None:
    import numpy as np

    if not values.size:
        return None
    p50, p99 = np.percentile(values, [50, 99]) / 1e6
    return {"p50": float(p50), "p99": float(p99), "max": float(values.max() / 1e6), "count": int(values.size)}


def analyse(done: list[dict[str, Any]], rate: float, burst: float) -> dict[str, Any]:
    """What the logs of one run say: the bound at the server's and at the use instants, order, lateness."""
    import numpy as np

    start_ns, end_ns = done[0]["start_ns"], done[0]["end_ns"]
    server, used, late, trips, after_used, behind, process_rows = [], [], [], [], [], [], []
    out_of_order = 0
    for d in done:
        use_at = np.array(d["use_at"], dtype=np.int64)
        n = int(np.searchsorted(use_at, end_ns, side="left"))  # the uses of the run; teardown's left out
        if len(d["grant_at"]) < n:
            raise RuntimeError(f"worker {d['pid']}: {n} uses but {len(d['grant_at'])} grants logged")
        requests = np.array(d["use_request"][:n], dtype=np.int64)
        out_of_order += int((np.diff(requests) < 0).sum())
        grant_at = np.array(d["grant_at"][:n], dtype=np.int64)
        target = np.array(d["grant_target"][:n], dtype=np.int64)
        lateness = use_at[:n] - target
        late.append(lateness[use_at[:n] >= start_ns + STEADY_AFTER_NS])
        server.append(grant_at)
        used.append(use_at[:n])
        after_used.append(np.array(d["grant_after"][:n], dtype=np.int64))
        reservations = np.array(d["reservations"], dtype=np.int64).reshape(-1, 6)
        _, first_of_trip = np.unique(reservations[:, 5], return_index=True)  # a round trip's reservations share it
        trips.append(reservations[first_of_trip][reservations[first_of_trip, 5] < end_ns, 4])
        wall = np.array(d["grant_wall"][:n], dtype=np.int64)
        behind.append(wall - grant_at)
        process_rows.append({"pid": d["pid"], "offset_s": d["offset_ns"] / 1e9, "offset_reads": d["offset_reads"],
                             "grants": n, "afresh": d["afresh"], "cancels": d["cancels"],
                             "reservations": len(d["reservations"]),
                             # a reservation no waiter was granted (one passed on from a waiter that left is
                             # logged at each grant: counted once here)
                             "not_granted": len({r[2] for r in d["reservations"]} - set(d["grant_after"])),
                             "server_minus_wall_ms": float(np.median(grant_at - wall) / 1e6) if n else None})
    behind_all = np.concatenate(behind)
    out: dict[str, Any] = {"server": bound_stats(np.sort(np.concatenate(server)), rate, burst),
                           "use": bound_stats(np.sort(np.concatenate(used)), rate, burst),
                           "processes": process_rows, "out_of_order_within": out_of_order,
                           "lateness_ms": percentiles_ms(np.concatenate(late)),
                           "round_trip_ms": percentiles_ms(np.concatenate(trips)),
                           "granted_after_server_ms": percentiles_ms(behind_all),
                           "granted_over_5ms_after": int((behind_all > STALE_NS).sum())}
    out.update(chain(done, np.concatenate(after_used), np.concatenate(used)))
    return out


def chain(done: list[dict[str, Any]], after_used: Any, used: Any) -> dict[str, Any]:
    """The script's reservations, every process's, in the order the script made them (by F after,
    which each one moves forward): whether each one's F before is the F after of the one before it,
    up to the last grant used in the run; whether the server's instants increase strictly along
    them from one round trip to the next (the reservations one round trip made, one after another,
    share its instant: counted apart); and how many uses, in the order they were made, came out of
    that order across processes.
    Where nobody reserved until the bucket was full again, the hash expired and the next
    reservation made a new one (a new epoch, full): that link is counted apart, not as a break."""
    import numpy as np

    logs = [np.array(d["reservations"], dtype=np.int64).reshape(-1, 6) for d in done]
    order = np.argsort(np.concatenate([log[:, 2] for log in logs]), kind="stable")
    every = np.concatenate(logs)[order]
    process = np.concatenate([np.full(len(log), i) for i, log in enumerate(logs)])[order]
    epoch, before, after, at, replied = every[:, 0], every[:, 1], every[:, 2], every[:, 3], every[:, 5]
    position = np.searchsorted(after, after_used)
    found = (position < after.size) & (after[np.minimum(position, after.size - 1)] == after_used)
    last = int(position[found].max()) if found.any() else -1
    unlinked = before[1:last + 1] != after[:last]
    remade = unlinked & (epoch[1:last + 1] != epoch[:last]) & (after[:last] <= at[1:last + 1])
    steps = np.diff(at[:last + 1])
    one_trip = (process[1:last + 1] == process[:last]) & (replied[1:last + 1] == replied[:last])
    by_use = position[np.argsort(used, kind="stable")]
    return {"chain": {"reservations": int(every.shape[0]), "checked": last + 1,
                      "breaks": int((unlinked & ~remade).sum()), "remade_full": int(remade.sum()),
                      "unmatched_grants": int((~found).sum()), "in_one_trip": int(one_trip.sum()),
                      "equal_instants": int(((steps == 0) & ~one_trip).sum()),
                      "decreasing_instants": int((steps < 0).sum()),
                      "uses_out_of_order_across": int((np.diff(by_use) < 0).sum())}}


def chain_ok(run: dict[str, Any]) -> bool:
    c = run["chain"]
    return bool(c["breaks"] == c["unmatched_grants"] == c["equal_instants"] == c["decreasing_instants"] == 0)


def shared_key(ctx: Any, url: str, seconds: float) -> dict[str, Any]:
    """Case 2: the clocks right, then 5 s off (two ahead, two behind)."""
    out: dict[str, Any] = {"seconds": seconds}
    for label, offsets in (("right", [0] * PROCESSES),
                           ("off", [OFFSET_NS if i % 2 == 0 else -OFFSET_NS for i in range(PROCESSES)])):
        done, _ = run_shared(ctx, url, seconds, offsets)
        out[label] = analyse(done, RATE, BURST)
        s = out[label]["server"]
        progress(f"case 2, clocks {label}: {s['grants']:,} grants, {s['achieved_rate']:,.1f}/s, "
                 f"excess {s['excess_tokens']:+.6f} at the server's instants")
    return out


def stopped(ctx: Any, url: str, seconds: float) -> dict[str, Any]:
    """Case 3: one process stopped for STOP_NS every STOP_EVERY_NS, in turn."""
    stops = [(after, i % PROCESSES) for i, after in enumerate(range(STOP_EVERY_NS, int(seconds * 1e9) - 500_000_000,
                                                                     STOP_EVERY_NS))]
    done, made = run_shared(ctx, url, seconds, [0] * PROCESSES, stops)
    out = analyse(done, RATE, BURST)
    out.update(seconds=seconds, stops=made)
    progress(f"case 3: {len(made)} stops, excess {out['server']['excess_tokens']:+.6f} at the server's instants, "
             f"{out['use']['excess_tokens']:+.3f} at use instants")
    return out


# ---- case 4: an HTTP client ----

def http_run(ctx: Any, redis_url: str, in_redis: bool, seed: int) -> dict[str, Any]:
    """4 processes send HTTP_REQUESTS through Limiter(95, 1, burst=5), over one key in Redis or one
    in each process, to one strict server; what the server answered, and when."""
    import numpy as np
    from shared import SERVER

    key = f"bench-http-{secrets.token_hex(4)}" if in_redis else None
    server_spec = {"role": "server", "server": {**SERVER, "seed": seed}, "timeout": 300.0}
    specs = [{"role": "client", "redis_url": redis_url, "key": key, "rate": HTTP_RATE, "burst": HTTP_BURST,
              "requests": HTTP_REQUESTS // HTTP_CLIENTS} for _ in range(HTTP_CLIENTS)]
    with started(ctx, [server_spec] + specs) as (server, *clients):
        url = server.receive(READY_TIMEOUT)
        for client in clients:
            client.conn.send(url)
        release(clients)
        done = results_of(clients, HTTP_REQUESTS / HTTP_RATE)
        server.conn.send("stop")
        arrivals = server.receive(RESULT_SLACK)["arrivals"]
    ok = np.array(sorted(round(at * 1e9) for at, status in arrivals if status == 200), dtype=np.int64)
    every = np.array(sorted(round(at * 1e9) for at, _ in arrivals), dtype=np.int64)
    stats = bound_stats(ok, HTTP_RATE, HTTP_BURST)
    statuses: dict[str, int] = {}
    for d in done:
        for status, count in d["statuses"].items():
            statuses[status] = statuses.get(status, 0) + count
    busiest_all = int((np.searchsorted(every, every + WINDOW_NS, side="left") - np.arange(every.size)).max())
    return {"in_redis": in_redis, "requests": HTTP_REQUESTS, "statuses": statuses, "arrivals": len(arrivals),
            "server_429": sum(1 for _, status in arrivals if status == 429), "ok": int(ok.size),
            "rate_of_200s": stats.get("achieved_rate"), "busiest_200s": stats.get("max_in_window"),
            "busiest_arrivals": busiest_all, "span_s": stats.get("span_s")}


def real_client(ctx: Any, redis_url: str, runs: int) -> dict[str, Any]:
    """Case 4: one key in Redis and an in-process limiter per process, runs times each, alternating."""
    from shared import SERVER

    out: dict[str, Any] = {"server": SERVER, "redis": [], "in-process": []}
    for run in range(runs):
        for key in ("redis", "in-process"):
            started = time.monotonic()
            out[key].append(http_run(ctx, redis_url, key == "redis", seed=run + 1))
            out[key][-1]["elapsed_s"] = time.monotonic() - started
            r = out[key][-1]
            progress(f"case 4, {key}, run {run + 1}/{runs}: {r['statuses']}, server: {r['ok']} x 200, "
                     f"{r['server_429']} x 429, 200s at {fmt(r['rate_of_200s'], '.2f')}/s ({r['elapsed_s']:.1f} s)")
    return out


# ---- case 5: the lease mode ----

def lease_throughput(ctx: Any, url: str, runs: int, calls: int, lease_calls: int) -> dict[str, Any]:
    """Case 5a, in one fresh process (redis_store_workers.time_leased)."""
    spec = {"role": "lease_throughput", "url": url, "runs": runs, "calls": calls, "lease_calls": lease_calls,
            "lease": LEASE_SPAN, "units": LEASE_UNITS}
    with started(ctx, [spec]) as (worker,):
        return dict(worker.receive(READY_TIMEOUT + 60 * runs))


def run_leased(ctx: Any, url: str, seconds: float, delays_s: list[float]) -> list[dict[str, Any]]:
    """One lease_tasks worker per delay on one new key, started together, each process's tasks
    starting that long after the start; their results."""
    key = f"bench-lease-{secrets.token_hex(4)}"
    specs = [{"role": "lease_tasks", "url": url, "key": key, "rate": RATE, "burst": LEASE_BURST, "lease": LEASE_SPAN,
              "units": LEASE_UNITS, "tasks": TASKS, "duration_ns": int(seconds * 1e9), "delay_ns": int(delay * 1e9)}
             for delay in delays_s]
    with started(ctx, specs) as workers:
        release(workers)
        return results_of(workers, seconds)


def leased_uses(done: list[dict[str, Any]]) -> list[Any]:
    """Each process's use instants within the run (its start to its end instant), sorted."""
    import numpy as np

    out = []
    for d in done:
        used = np.sort(np.array(d["use_at"], dtype=np.int64))
        out.append(used[(used >= d["start_ns"]) & (used < d["end_ns"])])
    return out


def count_within(instants: Any, since_ns: int, until_ns: int) -> int:
    """How many of sorted instants are in [since_ns, until_ns)."""
    import numpy as np

    return int(np.searchsorted(instants, until_ns, side="left") - np.searchsorted(instants, since_ns, side="left"))


def first_units_ms(d: dict[str, Any], at_least: int) -> float | None:
    """ms from the process's first call to the answer of its first lease call that left it at_least units."""
    replied = [lease[1] for lease in d["leases"] if lease[4] >= at_least]
    return (min(replied) - d["first_call_ns"]) / 1e6 if replied else None


def units_held(d: dict[str, Any], since_ns: int, until_ns: int) -> dict[str, float]:
    """The units a process held over [since_ns, until_ns), as its lease calls answered (none before
    the first answer): their time-weighted mean, the fewest and the most."""
    steps = sorted((lease[1], lease[4]) for lease in d["leases"])
    held, at = 0, since_ns
    for replied, units in steps:
        if replied > since_ns:
            break
        held = units
    seen, weighted = [held], 0.0
    for replied, units in steps:
        if since_ns < replied < until_ns:
            weighted += held * (replied - at)
            held, at = units, replied
            seen.append(held)
    weighted += held * (until_ns - at)
    return {"mean": weighted / (until_ns - since_ns), "fewest": min(seen), "most": max(seen)}


def asked_fewer(d: dict[str, Any], since_ns: int, until_ns: int) -> int:
    """The process's lease calls sent in [since_ns, until_ns) that asked for fewer units than it held
    (as the call before answered): with its tasks always waiting, its demand never fell."""
    leases = sorted(d["leases"])
    return sum(1 for before, lease in zip(leases, leases[1:])
               if since_ns <= lease[0] < until_ns and lease[3] < before[4])


def lease_process_rows(done: list[dict[str, Any]], uses: list[Any], since_ns: int, until_ns: int
                       ) -> list[dict[str, Any]]:
    """Each process's grants, its grants in [since_ns, until_ns) and their share of all there, the
    units it held then, and its lease calls."""
    within = [count_within(used, since_ns, until_ns) for used in uses]
    total = max(1, sum(within))
    return [{"pid": d["pid"], "started_s": (d["first_call_ns"] - d["start_ns"]) / 1e9, "grants": int(used.size),
             "window_grants": n, "share_pct": 100 * n / total, "units": units_held(d, since_ns, until_ns),
             "asked_fewer": asked_fewer(d, since_ns, until_ns),
             "lease_calls": len(d["leases"]), "releases": d["releases"], "units_at_end": d["units_at_end"],
             "first_units_ms": first_units_ms(d, 1)}
            for d, used, n in zip(done, uses, within)]


def lease_shared(ctx: Any, url: str, seconds: float) -> dict[str, Any]:
    """Case 5b: 4 processes on one leased key from the start: the bound at the use instants, the
    rate after the first second, and each process's share."""
    import numpy as np

    done = run_leased(ctx, url, seconds, [0.0] * PROCESSES)
    uses = leased_uses(done)
    every = np.sort(np.concatenate(uses))
    start_ns, end_ns = done[0]["start_ns"], done[0]["end_ns"]
    steady_s = (end_ns - start_ns - STEADY_AFTER_NS) / 1e9
    out: dict[str, Any] = {"seconds": seconds, "burst": LEASE_BURST, "use": bound_stats(every, RATE, LEASE_BURST),
                           "steady_rate": count_within(every, start_ns + STEADY_AFTER_NS, end_ns) / steady_s,
                           "processes": lease_process_rows(done, uses, start_ns, end_ns),
                           "steady_processes": lease_process_rows(done, uses, start_ns + STEADY_AFTER_NS, end_ns)}
    u = out["use"]
    progress(f"case 5b: {u['grants']:,} grants, {out['steady_rate']:,.1f}/s after the first second, excess "
             f"{u['excess_tokens']:+.6f} at use instants, {u['windows_over']} windows over")
    return out


def lease_join(ctx: Any, url: str, join_s: float, joined_s: float, last_s: float) -> dict[str, Any]:
    """Case 5c: 3 processes on one leased key, a 4th from join_s on, joined_s more seconds: how long
    the 4th waits for units, a grant and NEWCOMER_SHARE of the rate, and the shares before and after."""
    import numpy as np

    done = run_leased(ctx, url, join_s + joined_s, [0.0] * (PROCESSES - 1) + [join_s])
    uses = leased_uses(done)
    start_ns, end_ns = done[0]["start_ns"], done[0]["end_ns"]
    late, late_uses = done[-1], uses[-1]
    first_call = late["first_call_ns"]
    in_window = np.arange(1, late_uses.size + 1) - np.searchsorted(late_uses, late_uses - WINDOW_NS, side="right")
    reached = np.flatnonzero(in_window >= NEWCOMER_SHARE * RATE * WINDOW_NS / 1e9)
    last_window = count_within(late_uses, end_ns - WINDOW_NS, end_ns)
    out: dict[str, Any] = {
        "join_s": join_s, "joined_s": joined_s, "last_s": last_s, "burst": LEASE_BURST,
        "use": bound_stats(np.sort(np.concatenate(uses)), RATE, LEASE_BURST),
        "before": lease_process_rows(done[:-1], uses[:-1], start_ns + STEADY_AFTER_NS, first_call),
        "last": lease_process_rows(done, uses, end_ns - int(last_s * 1e9), end_ns),
        "first_units_ms": first_units_ms(late, 1),
        "fair_units_ms": first_units_ms(late, LEASE_UNITS // PROCESSES),
        "first_grant_ms": (int(late_uses[0]) - first_call) / 1e6 if late_uses.size else None,
        "share_reached_ms": (int(late_uses[reached[0]]) - first_call) / 1e6 if reached.size else None,
        "most_in_window": int(in_window.max()) if in_window.size else 0,
        "last_window_pct": 100 * last_window / (RATE * WINDOW_NS / 1e9)}
    progress(f"case 5c: first grant {fmt(out['first_grant_ms'], '.1f')} ms after the first call, "
             f"{NEWCOMER_SHARE:.0%} of the rate in 1 s after {fmt(out['share_reached_ms'], '.1f')} ms")
    return out


# ---- the report ----

def median(values: list[float]) -> float:
    return float(statistics.median(values))


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def fmt(value: Any, spec: str = ",.1f") -> str:
    return "–" if value is None else format(value, spec)


def p99_target_ms(run: dict[str, Any]) -> float:
    return float(run["round_trip_ms"]["p50"]) + TARGET_SLACK_MS


def shared_targets(name: str, run: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    s, late = run["server"], run["lateness_ms"]
    c = run["chain"]
    return [
        (name, f"server's instants: largest GCRA excess < {TARGET_EXACT:.6f} tokens", f"{s['excess_tokens']:+.6f}",
         s["excess_tokens"] < TARGET_EXACT),
        (name, "server's instants: 0 windows over burst + rate·1 s", f"{s['windows_over']:,}", s["windows_over"] == 0),
        (name, "FIFO within each process: uses in request order", f"{run['out_of_order_within']:,} out of order",
         run["out_of_order_within"] == 0),
        (name, "FIFO across processes: one chain of reservations, the server's instants strictly increasing along it "
         "from one round trip to the next",
         f"{c['checked']:,} reservations, {c['breaks']} breaks, {c['equal_instants'] + c['decreasing_instants']} "
         "not increasing", chain_ok(run)),
        (name, f"steady p99 wake lateness ≤ round trip (median) + {TARGET_SLACK_MS:g} ms",
         f"{late['p99']:.3f} ms (≤ {p99_target_ms(run):.3f})", late["p99"] <= p99_target_ms(run)),
    ]


def ratio_targets(case: str, r: dict[str, Any], mines: tuple[str, ...]) -> list[tuple[str, str, str, bool]]:
    """The target rows of case 1's ratios (or 1b's), for the aiotb calls mines."""
    rows = r["contenders"]
    out = []
    for mine, against, ratio, target in round_trip_ratios(r, mines):
        what = {"incr": f"≥ {TARGET_VS_INCR:.0%} of INCR", "limits_moving": "≥ limits' moving window",
                "limits_fixed": "≥ limits' fixed window"}.get(
                    against, f"≥ {TARGET_VS_PYRATE:g} × pyrate's Redis bucket ({rows[against]['label']})")
        call = "acquire()" if mine == "aiotb_acquire" else "try_acquire()"
        out.append((f"{case}, {call}", what,
                    f"{rows[mine]['median']:,.0f} / {rows[against]['median']:,.0f} = {ratio:.2f} ×", ratio >= target))
    return out


def target_rows(r: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(case, target, measured, met) for every target, from the results."""
    rows: list[tuple[str, str, str, bool]] = []
    if "round_trips" in r:
        rows += ratio_targets("1. round trips", r["round_trips"], ("aiotb_acquire", "aiotb_try"))
        ours, least = (r["round_trips"]["contenders"][key]["median"] for key in ("aiotb_acquire", "least_gcra"))
        rows.append(("1. round trips, acquire()", f"≥ {TARGET_VS_LEAST:.2f} × the least GCRA script (`TIME`, `GET`, "
                     "`SET PX`)", f"{ours:,.0f} / {least:,.0f} = {ours / least:.2f} ×", ours / least >= TARGET_VS_LEAST))
    if "concurrent" in r:
        for level in r["concurrent"]["levels"]:
            rows += ratio_targets(f"1b. {level['tasks']} concurrent tasks on one connection", level,
                                  ("aiotb_acquire",))
    if "shared" in r:
        rows += shared_targets("2. 4 processes, 1,000/s, clocks right", r["shared"]["right"])
        off = r["shared"]["off"]
        rows += shared_targets("2. 4 processes, 1,000/s, clocks ±5 s", off)
        drift = max(abs(p["server_minus_wall_ms"]) for p in off["processes"])
        rows.append(("2. 4 processes, 1,000/s, clocks ±5 s",
                     "the server's clock decides: each process's grants within 1 s of its real wall clock (median "
                     "of server's instant − wall clock at the grant; the most off process)", f"{drift:.3f} ms",
                     drift < 1000))
    if "stopped" in r:
        s, u = r["stopped"]["server"], r["stopped"]["use"]
        name = f"3. one process stopped 150 ms ({len(r['stopped']['stops'])} times)"
        rows.append((name, f"server's instants: largest GCRA excess < {TARGET_EXACT:.6f} tokens (0 over the bound)",
                     f"{s['excess_tokens']:+.6f}", s["excess_tokens"] < TARGET_EXACT))
        rows.append((name, "server's instants: 0 windows over burst + rate·1 s", f"{s['windows_over']:,}",
                     s["windows_over"] == 0))
        rows.append((name, f"use instants: at most one grant over per process (excess ≤ {PROCESSES} tokens)",
                     f"{u['excess_tokens']:+.3f} tokens", u["excess_tokens"] <= PROCESSES))
        rows.append((name, "FIFO within each process", f"{r['stopped']['out_of_order_within']:,} out of order",
                     r["stopped"]["out_of_order_within"] == 0))
    if "http" in r:
        runs = r["http"]["redis"]
        name = "4. aiohttp ×4, Limiter(95, 1, burst=5) over one key in Redis"
        worst_429 = max(run["server_429"] for run in runs)
        rows.append((name, f"0 × 429 (every run; the worst of {len(runs)})", f"{worst_429}", worst_429 == 0))
        worst_rate = min(run["rate_of_200s"] or 0.0 for run in runs)
        rows.append((name, f"200s at ≥ {TARGET_HTTP_RATE_PCT:g} % of 95/s (every run; the worst of {len(runs)})",
                     f"{worst_rate:.2f}/s ({100 * worst_rate / HTTP_RATE:.1f} %)",
                     100 * worst_rate / HTTP_RATE >= TARGET_HTTP_RATE_PCT))
    if "lease_throughput" in r:
        rows += lease_ratio_targets(r["lease_throughput"])
    if "lease_shared" in r:
        b = r["lease_shared"]
        u = b["use"]
        name = f"5b. lease mode, {PROCESSES} processes, 1,000/s, burst {LEASE_BURST:g}"
        rows.append((name, f"use instants: largest excess over burst + rate·t < {TARGET_EXACT:.6f} tokens (0 over "
                     "the bound)", f"{u['excess_tokens']:+.6f}", u["excess_tokens"] < TARGET_EXACT))
        rows.append((name, "use instants: 0 windows over burst + rate·1 s", f"{u['windows_over']:,}",
                     u["windows_over"] == 0))
        pct = 100 * b["steady_rate"] / RATE
        rows.append((name, f"rate after the first second ≥ {TARGET_LEASE_RATE_PCT:g} % of 1,000/s",
                     f"{b['steady_rate']:,.2f}/s ({pct:.2f} %)", pct >= TARGET_LEASE_RATE_PCT))
    return rows


def lease_ratio_targets(a: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """Case 5a's target rows: each leased call against the same call with one round trip a grant."""
    rows = a["rows"]
    out = []
    for call, leased, one in (("`async with`", "lease_enter", "one_enter"),
                              ("`await try_acquire()`", "lease_try", "one_try")):
        ratio = rows[leased]["grants_median"] / rows[one]["grants_median"]
        out.append((f"5a. lease mode, one process, {call}",
                    f"grants/s ≥ {TARGET_LEASE_VS_ONE:g} × one round trip a grant's (the same store without lease=)",
                    f"{rows[leased]['grants_median']:,.0f} / {rows[one]['grants_median']:,.0f} = {ratio:.1f} ×",
                    ratio >= TARGET_LEASE_VS_ONE))
    return out


def introduction(r: dict[str, Any], env: str) -> list[str]:
    command = "python benchmarks/redis_store.py" + (" --quick" if r["profile"] == "quick" else "")
    lines = ["# One quota in Redis (`RedisStore`)", "",
             f"Measured by `{command}` ({env}). One redis-server on 127.0.0.1 (no persistence), started by the "
             "benchmark; every client is redis-py's redis.asyncio unless a row says otherwise.", "",
             "## Targets", "", "| case | target | measured | |", "|:--|:--|--:|:--|"]
    lines += [f"| {case} | {target} | {measured} | {verdict(ok)} |" for case, target, measured, ok in target_rows(r)]
    lines += [f"| {case} | ran | failed: {error.splitlines()[-1][:120]} | **not met** |"
              for case, error in r["failed"].items()]
    return lines + [""]


def round_trip_section(rt: dict[str, Any], versions: dict[str, str]) -> list[str]:
    rows = rt["contenders"]
    incr = rows["incr"]["median"]
    best_key, _ = pyrate_best(rt)
    lines = ["## 1. Round trips per second, one connection, sequential awaits", "",
             f"Each row is its own client (its connections counted by the server's CLIENT LIST at the end) and its "
             f"own key; {rt['runs']} runs of {rt['calls']:,} calls each, the order of the rows rotated by one each "
             f"run, after {rt['warmup']} warm-up calls; medians. The rates never bind: aiotb `Limiter(1e6, 1, "
             "burst=1e6)`; pyrate-limiter `Rate(1_000_000, Duration.SECOND)` (burst 1,000,000 for GCRA), each "
             "bucket behind `Limiter(bucket, buffer_ms=0)` called as `await limiter.try_acquire(\"bench\", 1, "
             "blocking=False)`, its lightest call (no asyncio.Lock, no retry loop); limits "
             "`RateLimitItemPerSecond(1_000_000)`, `await strategy.hit(item, key)`. Refused: answers that were not "
             f"grants during the runs. {SERVER_FIGURES} pyrate-limiter {versions['pyrate-limiter']}, limits "
             f"{versions['limits']}, coredis {versions['coredis']}, redis-py {versions['redis']} "
             f"(hiredis {'installed' if versions['hiredis'] else 'not installed: replies are parsed in Python'}), "
             f"redis-server {rt['redis_server']}.", "",
             "| call | | round trips/s | µs per call | runs (min – max) | × INCR | server CPU µs per call | "
             "server execution µs per call | connections | refused |", "|:--|:--|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for row in rows.values():
        runs = row["runs"]
        lines.append(f"| {row['label']} | {row['group']} | {row['median']:,.0f} | {1e6 / row['median']:.1f} | "
                     f"{min(runs):,.0f} – {max(runs):,.0f} | {row['median'] / incr:.2f} | {row['server_us']:.1f} | "
                     f"{row['exec_us']:.1f} | {row['connections']} | {row['refused']:,} |")
    best = rows[best_key]["median"]
    lines += ["", f"pyrate-limiter's faster Redis bucket in this run: {rows[best_key]['label']}. Three times its "
              f"rate would be {3 * best:,.0f} round trips/s, {3 * best / incr:.2f} × a bare INCR on the same "
              "connection.", "",
              "| aiotb call | × INCR (target ≥ 0.90) | × pyrate's faster bucket (≥ 3) | "
              "× limits moving window (≥ 1) | × limits fixed window (≥ 1) |", "|:--|--:|--:|--:|--:|"]
    ratios = round_trip_ratios(rt)
    for mine in ("aiotb_acquire", "aiotb_try"):
        cells = [f"{ratio:.2f} ({verdict(ratio >= target)})" for m, _, ratio, target in ratios if m == mine]
        lines.append(f"| {rows[mine]['label']} | " + " | ".join(cells) + " |")
    shaped, ones = rows["aiotb_shaped"]["median"], rows["returns_1"]["median"]
    reserve = rows["aiotb_reserve"]["median"]
    server = {key: row["server_us"] for key, row in rows.items()}
    lines += ["", "Where a decision's time goes, from the medians above (µs per call): "
              f"INCR {1e6 / incr:.1f}; the same arguments as aiotb's to a script that returns 1: "
              f"{1e6 / ones - 1e6 / incr:+.1f}; aiotb's reply in place of 1: {1e6 / shaped - 1e6 / ones:+.1f}; "
              f"aiotb's script and the store's handling of its reply: {1e6 / reserve - 1e6 / shaped:+.1f} (of which "
              f"the server's CPU: {server['aiotb_reserve'] - server['aiotb_shaped']:+.1f}); the limiter around the "
              f"store call: try_acquire {1e6 / rows['aiotb_try']['median'] - 1e6 / reserve:+.1f}, acquire "
              f"{1e6 / rows['aiotb_acquire']['median'] - 1e6 / reserve:+.1f}.", ""]
    return lines + least_gcra_lines(rows)


def least_gcra_lines(rows: dict[str, Any]) -> list[str]:
    """What the least GCRA script says of the ceiling of a one-round-trip limiter on this client."""
    incr, least, reserve = rows["incr"], rows["least_gcra"], rows["aiotb_reserve"]
    share = least["median"] / incr["median"]
    if share < TARGET_VS_INCR:
        reach = (f"below {TARGET_VS_INCR:.2f}: a script that reads TIME and keeps state does at least this much, so "
                 f"by the medians none reaches {TARGET_VS_INCR:.2f} × INCR in one round trip per acquire on this "
                 "client; the target is out of reach of any such limiter here.")
    else:
        reach = (f"at least {TARGET_VS_INCR:.2f}: by the medians a script that reads TIME and keeps state can reach "
                 f"{TARGET_VS_INCR:.2f} × INCR in one round trip per acquire on this client.")
    return [f"The least GCRA script does only what any GCRA on the server's clock does in one round trip: `TIME`, "
            "`GET` of its key, the arithmetic (the theoretical arrival time in µs, at least now, plus the emission "
            "interval, ARGV[1]), `SET key value PX ttl`; it returns the delay. In this run it reaches "
            f"{share:.2f} × INCR (its runs {min(least['runs']) / incr['median']:.2f} – "
            f"{max(least['runs']) / incr['median']:.2f} × INCR's median; {1e6 / least['median']:.1f} µs per call "
            f"against {1e6 / incr['median']:.1f}), {reach} The server executes it in {least['exec_us']:.1f} µs, "
            f"aiotb's script in {reserve['exec_us']:.1f}; aiotb's store call is {reserve['median'] / least['median']:.2f}"
            f" × the least GCRA's rate, {1e6 / reserve['median'] - 1e6 / least['median']:+.1f} µs per call, of which "
            f"the server's execution {reserve['exec_us'] - least['exec_us']:+.1f}.", ""]


def concurrent_section(c: dict[str, Any]) -> list[str]:
    levels = c["levels"]
    pyrate, _ = pyrate_best(levels[0])
    lines = [f"## 1b. {' and '.join(str(level['tasks']) for level in levels)} concurrent tasks on one connection",
             "", "Not case 1's sequential awaits: C tasks call together, all through one client made with "
             "`single_connection_client=True`, on which redis-py sends one command at a time, the other callers "
             "waiting for the connection under a lock (the server's CLIENT LIST after each C's runs counts the "
             "client's connections). Each row is its own client and its own key; each of the C tasks loops the "
             "call, a run making " + " and ".join(f"{level['tasks']} × {level['calls'] // level['tasks']:,}"
                                                  for level in levels) + f" calls; {c['runs']} runs per C, the "
             f"order of the rows rotated by one each run, after {c['warmup']} sequential warm-up calls; medians. aiotb: "
             "the C tasks share one `Limiter(1e6, 1, burst=1e6, store=RedisStore(client, key))` and each awaits "
             f"`limiter.acquire()`; pyrate-limiter: case 1's faster Redis bucket ({levels[0]['contenders'][pyrate]['label']}), "
             "called as there; limits: as in case 1. × INCR: against INCR at the same C. Server commands per call: the "
             "commands the server ran for the row (INFO commandstats: EVALSHA for a script, else every command) per "
             "call; for aiotb, EVALSHA round trips per acquire. The server's CPU and execution time as in case 1.",
             "", "| tasks | call | calls/s | µs per call | runs (min – max) | × INCR | server CPU µs per call | "
             "server execution µs per call | server commands per call | connections | refused |",
             "|--:|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for level in levels:
        rows = level["contenders"]
        for row in rows.values():
            runs = row["runs"]
            lines.append(f"| {level['tasks']} | {row['label']} | {row['median']:,.0f} | {1e6 / row['median']:.1f} | "
                         f"{min(runs):,.0f} – {max(runs):,.0f} | {row['median'] / rows['incr']['median']:.2f} | "
                         f"{row['server_us']:.1f} | {row['exec_us']:.1f} | {row['commands']:.3f} | "
                         f"{row['connections']} | {row['refused']:,} |")
    lines += ["", "| tasks on one connection | aiotb call | × INCR (target ≥ 0.90) | × pyrate's faster bucket (≥ 3) | "
              "× limits moving window (≥ 1) | × limits fixed window (≥ 1) |", "|--:|:--|--:|--:|--:|--:|"]
    for level in levels:
        cells = [f"{ratio:.2f} ({verdict(ratio >= target)})"
                 for _, _, ratio, target in round_trip_ratios(level, ("aiotb_acquire",))]
        lines.append(f"| {level['tasks']} | {level['contenders']['aiotb_acquire']['label']} | " + " | ".join(cells) + " |")
    per_trip = "; ".join(f"{1 / level['contenders']['aiotb_acquire']['commands']:.2f} at {level['tasks']} tasks"
                         for level in levels)
    return lines + ["", f"aiotb's acquires per EVALSHA round trip (the acquires over the EVALSHA calls the server "
                    f"counted): {per_trip}.", ""]


BOUND_HEAD = "grants | achieved /s | most in 1 s (bound) | windows over | largest excess (tokens) | longest gap ms"


def bound_cells(s: dict[str, Any], digits: int) -> str:
    return (f"{s['grants']:,} | {s['achieved_rate']:,.2f} | {s['max_in_window']:,} ({s['bound']:,.0f}) | "
            f"{s['windows_over']:,} | {s['excess_tokens']:+.{digits}f} | {s['longest_gap_ms']:.2f}")


def run_tables(runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = [f"| run | instants | {BOUND_HEAD} |", "|:--|:--|" + "--:|" * 6]
    for label, run in runs:
        lines.append(f"| {label} | server's | {bound_cells(run['server'], 6)} |")
        lines.append(f"| {label} | use | {bound_cells(run['use'], 3)} |")
    lines += ["", "| run | out of order within a process | reservations (in the chain up to the last use) | chain "
              "breaks | hash made anew once full | grants not in it | made in the round trip of the one before | "
              "server's instants equal / decreasing along it, between round trips | uses out of that order across "
              "processes (adjacent pairs) |", "|:--|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for label, run in runs:
        c = run["chain"]
        lines.append(f"| {label} | {run['out_of_order_within']:,} | {c['reservations']:,} ({c['checked']:,}) | "
                     f"{c['breaks']} | {c['remade_full']} | {c['unmatched_grants']} | {c['in_one_trip']:,} | "
                     f"{c['equal_instants']} / {c['decreasing_instants']} | {c['uses_out_of_order_across']:,} |")
    lines += ["", "| run | steady wake lateness p50 / p99 / max ms | reserve round trip p50 / p99 / max ms | p99 "
              "target ms | granted after the server's instant p50 / p99 / max ms | granted > 5 ms after |",
              "|:--|--:|--:|--:|--:|--:|"]
    for label, run in runs:
        late, trip, behind = run["lateness_ms"], run["round_trip_ms"], run["granted_after_server_ms"]
        lines.append(f"| {label} | {late['p50']:.3f} / {late['p99']:.3f} / {late['max']:.2f} | "
                     f"{trip['p50']:.3f} / {trip['p99']:.3f} / {trip['max']:.2f} | {p99_target_ms(run):.3f} | "
                     f"{behind['p50']:.3f} / {behind['p99']:.3f} / {behind['max']:.2f} | "
                     f"{run['granted_over_5ms_after']:,} |")
    lines += ["", "| run | process | clock offset s | offset clock reads | grants (taken afresh) | reservations "
              "(not granted) | cancels | server's instant − real wall clock at the grant, median ms |",
              "|:--|--:|--:|--:|--:|--:|--:|--:|"]
    for label, run in runs:
        for i, p in enumerate(run["processes"], 1):
            lines.append(f"| {label} | {i} | {p['offset_s']:+g} | {fmt(p['offset_reads'], ',d')} | {p['grants']:,} "
                         f"({p['afresh']}) | {p['reservations']:,} ({p['not_granted']}) | {p['cancels']} | "
                         f"{fmt(p['server_minus_wall_ms'], '+.3f')} |")
    return lines + [""]


def shared_section(s: dict[str, Any]) -> list[str]:
    lines = [f"## 2. {PROCESSES} processes × {TASKS} tasks, one key, `Limiter(1_000, 1, burst=10)`, "
             f"{s['seconds']:g} s a run", "",
             "Spawned processes started together; each task loops `async with limiter:` and logs its use instant "
             "(`time.monotonic_ns()`) as it resumes, with the request number it took as it asked. Each grant is "
             "also logged at the instant the script returned for it, on the server's clock. Uses after the end "
             "instant, while the processes cancel their tasks, are left out (with their grants). Wake lateness: "
             "the use instant minus the local instant the limiter set its timer for (the reply's arrival plus the "
             "script's delay), from 1 s after the start; the round trip: each reserving call to the store, sent to "
             "answered, as the limiter awaited it in the same run. Granted after the server's instant: the real wall "
             "clock as the limiter grants (`time.time_ns()`) minus the grant's instant on the server's clock, one "
             "clock on one host. Not granted: reservations the limiter gave up (a stale one, or its last, given back "
             "as the process stopped its tasks). The second run sets each process's clock, as the "
             "store reads it (`aiotb._store_redis.time.time_ns`), 5 s ahead (processes 1 and 3) or behind "
             "(2 and 4); the script reads the server's TIME, so the clients' clocks do not enter.", ""]
    return lines + run_tables([("clocks right", s["right"]), ("clocks ±5 s", s["off"])])


def stopped_section(s: dict[str, Any]) -> list[str]:
    stops = ", ".join(f"{stop['at_s']:.2f} s (process {stop['worker'] + 1}, {stop['stopped_ms']:.0f} ms)"
                      for stop in s["stops"])
    lines = [f"## 3. One process stopped for 150 ms, {len(s['stops'])} times in {s['seconds']:g} s", "",
             f"As case 2 with the clocks right; SIGSTOP, then SIGCONT 150 ms later, at {stops}. A stopped process "
             "holds at most one reservation, its first waiter's. Reached more than 5 ms (and a token's time) after "
             "its instant as reckoned from when it was asked for (the request's sending plus the script's delay, so "
             "a stall while the script ran counts too), it is stale: the waiter takes the tokens afresh if they are "
             "free, else reserves again behind the others, and the stale tokens are lost. A grant counted at its "
             "instant but used a little later can still put a process's use one grant ahead at use instants.", "",
             f"This run: {s['granted_over_5ms_after']} grant(s) made more than 5 ms after the server's instant (the "
             f"latest {s['granted_after_server_ms']['max']:.1f} ms after); the reserve round trips took up to "
             f"{s['round_trip_ms']['max']:.1f} ms; {sum(p['afresh'] for p in s['processes'])} grant(s) taken afresh; "
             f"{sum(p['not_granted'] for p in s['processes'])} reservation(s) not granted, of which "
             f"{sum(p['cancels'] for p in s['processes'])} cancelled as the processes stopped their tasks.", ""]
    return lines + run_tables([("stops", s)])


def http_section(h: dict[str, Any]) -> list[str]:
    server = h["server"]
    lines = [f"## 4. aiohttp, {HTTP_CLIENTS} processes, a server that answers 429 above "
             f"{server['max_requests']} requests in any sliding second", "",
             f"{HTTP_REQUESTS} requests in all, {HTTP_REQUESTS // HTTP_CLIENTS} per process started together, each "
             "sent and read inside `async with limiter:` (one aiohttp session per process); the server (its own "
             f"process, 127.0.0.1) counts on arrival and takes {server['processing'] * 1e3:g} ms + "
             f"0–{server['jitter'] * 1e3:g} ms to answer a request it lets through. Over Redis every process "
             "builds `Limiter(95, 1, burst=5, store=RedisStore(url, key))` on one key (a new key each run), "
             "connected before the start. Rate of 200s: (200s − burst) over the first to the last arrival answered "
             "200. With a limiter in each process the four send at 4 × 95/s: the server lets 100 through in its "
             "first second and more as its window slides, so the 200s bunch up and their first-to-last rate can "
             "read above the server's limit; the most 200s in any second is what the server let through. The runs "
             "alternate, one over Redis then one in-process; each starts its own processes (a run's time includes "
             "starting them).", "",
             "| limiter | run | 200 | 429 | rate of 200s /s | % of 95/s | most 200s in 1 s | most arrivals in 1 s | "
             "run s |", "|:--|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for key, label in (("redis", "`Limiter(95, 1, burst=5, store=RedisStore(url, key))`, one key"),
                       ("in-process", "`Limiter(95, 1, burst=5)` in each process")):
        for i, run in enumerate(h[key], 1):
            rate = run["rate_of_200s"]
            lines.append(f"| {label} | {i} | {run['ok']} | {run['server_429']} | {fmt(rate, '.2f')} | "
                         f"{fmt(100 * rate / HTTP_RATE if rate else None, '.1f')} | {fmt(run['busiest_200s'], 'd')} | "
                         f"{run['busiest_arrivals']} | {run['elapsed_s']:.1f} |")
    redis_runs = h["redis"]
    worst = min(redis_runs, key=lambda run: run["rate_of_200s"] or 0.0)
    runs = f"{len(redis_runs)} run{'s' if len(redis_runs) != 1 else ''}"
    lines += ["", f"Over Redis, the worst of {runs}: {max(run['server_429'] for run in redis_runs)} × 429 at most, "
              f"200s at {fmt(worst['rate_of_200s'], '.2f')}/s at least.", ""]
    return lines


def lease_section(r: dict[str, Any]) -> list[str]:
    lines = [f"## 5. Lease mode: `RedisStore(client, key, lease={LEASE_SPAN:g}, units={LEASE_UNITS})`", "",
             f"A limiter over a leased store holds some of the key's rates, counted in {LEASE_UNITS} units (each "
             f"1/{LEASE_UNITS} of every rate and of every burst); it grants from its units in its own engine, with no "
             "round trip a grant, and renews its lease every third of the span, asking for its demand. The script "
             "splits the units max-min fairly over the holders' wants; a holder gives units back (with their tokens) "
             "or takes free ones only as it renews.", ""]
    if "lease_throughput" in r:
        lines += lease_throughput_lines(r["lease_throughput"])
    if "lease_shared" in r:
        lines += lease_shared_lines(r["lease_shared"])
    if "lease_join" in r:
        lines += lease_join_lines(r["lease_join"])
    return lines


def units_cell(u: dict[str, float]) -> str:
    return f"{u['mean']:.2f} ({u['fewest']} – {u['most']})"


def lease_throughput_lines(a: dict[str, Any]) -> list[str]:
    from aiotb._store_lease import RENEW_EVERY

    rows = a["rows"]
    span = a["lease"]
    lines = ["### 5a. One process, sequential awaits, rates that never bind", "",
             f"`Limiter(1e6, 1, burst=1e6)` over `RedisStore(client, key, lease={span:g}, units={a['units']})` and "
             "over `RedisStore(client, key)` (one round trip a grant), each row its own client and key; "
             f"{a['runs']} runs, the order of the rows rotated by one each run, of {a['lease_calls']:,} calls on a "
             f"leased limiter and {a['calls']:,} on the other, after {a['warmup']} warm-up calls; medians. Before "
             "each run every leased limiter gives its units back (`await limiter.aclose()`): each leased run starts "
             "with no units, its first call leasing them (one round trip, inside the run), and no other limiter's "
             "keeper runs during a run. Grants/s: calls answered with a grant per second (`try_acquire()` answers "
             "False while the units held have no token for it). EVALSHA calls: the server's count over each run "
             "(INFO commandstats, reset before it); a leased limiter's are its lease calls. Server execution as in "
             "case 1.", "",
             "| call | calls/s | grants/s | µs per call | runs, calls/s (min – max) | calls a run | run s | "
             "EVALSHA calls a run (min – max) | grants per EVALSHA | server execution µs per call | connections | "
             "refused |", "|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for row in rows.values():
        runs, evalsha = row["runs"], row["evalsha_runs"]
        grants = sum(row["calls"] - refused for refused in row["refused_runs"])
        lines.append(f"| {row['label']} | {row['median']:,.0f} | {row['grants_median']:,.0f} | "
                     f"{1e6 / row['median']:.3f} | {min(runs):,.0f} – {max(runs):,.0f} | {row['calls']:,} | "
                     f"{row['calls'] / row['median']:.3f} | {min(evalsha):,} – {max(evalsha):,} | "
                     f"{grants / max(1, sum(evalsha)):,.0f} | {row['exec_us']:.3f} | {row['connections']} | "
                     f"{row['refused']:,} |")
    lines += ["", "| call | leased, grants/s | one round trip a grant, grants/s | leased ÷ one round trip "
              f"(target ≥ {TARGET_LEASE_VS_ONE:g}) |", "|:--|--:|--:|--:|"]
    for call, leased, one in (("`async with`", "lease_enter", "one_enter"),
                              ("`await try_acquire()`", "lease_try", "one_try")):
        ratio = rows[leased]["grants_median"] / rows[one]["grants_median"]
        lines.append(f"| {call} | {rows[leased]['grants_median']:,.0f} | {rows[one]['grants_median']:,.0f} | "
                     f"{ratio:.1f} ({verdict(ratio >= TARGET_LEASE_VS_ONE)}) |")
    notes = []
    for key, call in (("lease_enter", "`async with`"), ("lease_try", "`try_acquire()`")):
        row = rows[key]
        firsts = sorted({(leases[0][3], leases[0][4]) for leases in row["leases_runs"] if leases})
        asked = "; ".join(f"asked for {want}, got {units}" for want, units in firsts)
        on_time = int(row["calls"] / row["median"] / (span * RENEW_EVERY))  # renewals in a median run, on time
        calls = median(row["evalsha_runs"])
        text = (f"{call}: the first lease call of each run {asked} (of {a['units']} units); {calls:g} EVALSHA "
                f"call(s) in a median run of {row['calls'] / row['median']:.3f} s")
        if calls - 1 < on_time:
            text += (f", fewer than the {on_time} renewal(s) a keeper renewing every third of the span would have "
                     "made after the first lease")
        notes.append(text + ".")
    refused = rows["lease_try"]["refused"]
    if refused:
        notes.append(f"`try_acquire()` on the leased limiter was refused {refused:,} times in all "
                     f"({refused / (a['runs'] * a['lease_calls']):.1%} of its calls) although the rates never bind.")
    return lines + [""] + notes + [""]


def lease_shared_lines(b: dict[str, Any]) -> list[str]:
    shares = [p["share_pct"] for p in b["steady_processes"]]
    lines = [f"### 5b. {PROCESSES} processes × {TASKS} tasks, one key, `Limiter(1_000, 1, burst={b['burst']:g}, "
             f"store=RedisStore(url, key, lease={LEASE_SPAN:g}))`, {b['seconds']:g} s", "",
             f"Spawned processes started together, their lease calls racing for the units; each task loops `async "
             "with limiter:` and logs its use instant (`time.monotonic_ns()`, one clock for every process on this "
             f"host) as it resumes; uses after the end instant are left out. Burst {b['burst']:g}: "
             f"{b['burst'] / LEASE_UNITS:g} tokens a unit, so a holder of one unit may grant one token. The bound is "
             "checked on the merged use instants as in case 2 (windows of 1 s from each use; the largest excess "
             "over burst + rate·t over every interval). Rate after the first second: uses from 1 s after the start "
             "to the end, over that time. Units held: as the process's lease calls answered, weighted by time. "
             "Asked for fewer: lease calls that asked for fewer units than the process held, although its tasks "
             "always waited.", "",
             f"| instants | {BOUND_HEAD} | rate after the first second /s |", "|:--|" + "--:|" * 7,
             f"| use | {bound_cells(b['use'], 6)} | {b['steady_rate']:,.2f} |", "",
             "| process | grants | share % | after the first second: share % | units held, mean (fewest – most) | "
             "asked for fewer | first units, ms after the start | lease calls |", "|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for i, (p, steady) in enumerate(zip(b["processes"], b["steady_processes"]), 1):
        lines.append(f"| {i} | {p['grants']:,} | {p['share_pct']:.2f} | {steady['share_pct']:.2f} | "
                     f"{units_cell(steady['units'])} | {steady['asked_fewer']} | {fmt(p['first_units_ms'], '.1f')} | "
                     f"{p['lease_calls']} |")
    return lines + ["", f"Shares after the first second: {min(shares):.2f} % to {max(shares):.2f} % (a fair quarter is "
                    "25 %).", ""]


def lease_join_lines(c: dict[str, Any]) -> list[str]:
    u = c["use"]
    quarter = LEASE_UNITS // PROCESSES
    lines = ["### 5c. A process that starts late: what the lease mode costs in fairness", "",
             f"{PROCESSES - 1} processes as in 5b from the start; a {PROCESSES}th starts its {TASKS} tasks "
             f"{c['join_s']:g} s later, and all stop {c['joined_s']:g} s after that, every process wanting all the "
             "units. No target: this is reported as what the lease mode costs in fairness. Units move only as "
             "their holders renew, so a newcomer gets units as the others give theirs back at their renewals, "
             "where one round trip a grant would serve it in the key's one order. Units held and asked for "
             "fewer as in 5b.", "",
             f"The late process, from its first call (`async with`): its first units after "
             f"{fmt(c['first_units_ms'], ',.1f')} ms, its first grant after {fmt(c['first_grant_ms'], ',.1f')} ms, "
             f"a fair quarter of the units ({quarter}) after {fmt(c['fair_units_ms'], ',.1f')} ms; its grants in a "
             f"sliding 1 s window reached {NEWCOMER_SHARE:.0%} of the rate after "
             f"{fmt(c['share_reached_ms'], ',.1f')} ms" + ("" if c["share_reached_ms"] is not None else
                                                           " (never, in this run)") +
             f" (the most in any 1 s window: {c['most_in_window']:,}, {c['most_in_window'] / RATE:.1%} of the rate); "
             f"in the last second of the run, {c['last_window_pct']:.1f} % of the rate (a fair quarter is 25 %).",
             "", f"| process | started s | from 1 s to the late start: share % | units held, mean (fewest – most) | "
             f"last {c['last_s']:g} s: share % | units held, mean (fewest – most) | asked for fewer | lease calls |",
             "|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for i, last in enumerate(c["last"]):
        before = c["before"][i] if i < len(c["before"]) else None
        lines.append(f"| {i + 1} | {last['started_s']:.3f} | {fmt(before and before['share_pct'], '.2f')} | "
                     f"{units_cell(before['units']) if before else '–'} | {last['share_pct']:.2f} | "
                     f"{units_cell(last['units'])} | {last['asked_fewer']} | {last['lease_calls']} |")
    return lines + ["", f"The bound over the run, at the merged use instants: {u['windows_over']:,} windows over "
                    f"burst + rate·1 s (the most in 1 s: {u['max_in_window']:,} of {u['bound']:,.0f}), largest "
                    f"excess {u['excess_tokens']:+.6f} tokens.", ""]


def report(r: dict[str, Any], env: str) -> str:
    lines = introduction(r, env)
    if "round_trips" in r:
        lines += round_trip_section(r["round_trips"], r["versions"])
    if "concurrent" in r:
        lines += concurrent_section(r["concurrent"])
    if "shared" in r:
        lines += shared_section(r["shared"])
    if "stopped" in r:
        lines += stopped_section(r["stopped"])
    if "http" in r:
        lines += http_section(r["http"])
    if any(key in r for key in ("lease_throughput", "lease_shared", "lease_join")):
        lines += lease_section(r)
    lines.append(f"The run took {r['elapsed_s']:.0f} s.")
    return "\n".join(lines) + "\n"


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def versions() -> dict[str, Any]:
    from importlib.metadata import version
    from importlib.util import find_spec

    return {name: version(name) for name in ("redis", "pyrate-limiter", "limits", "coredis", "numpy", "aiohttp")} | {
        "hiredis": find_spec("hiredis") is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs, fewer repetitions")
    parser.add_argument("--out", type=Path, default=HERE / "redis")
    args = parser.parse_args()
    import aiotb

    began = time.monotonic()
    profile_name = "quick" if args.quick else "full"
    p = PROFILES[profile_name]
    ctx = multiprocessing.get_context("spawn")
    results: dict[str, Any] = {"profile": profile_name, "settings": p, "versions": versions(), "failed": {}}
    load = os.getloadavg()[0]
    with redis_server() as server:
        cases: dict[str, Callable[[], Any]] = {
            "round_trips": lambda: round_trips(ctx, server.url, server.port, p["rt_runs"], p["rt_calls"]),
            "concurrent": lambda: concurrent(ctx, server.url, server.port, p["together_runs"], p["together_calls"],
                                             p["together_tasks"], results.get("round_trips")),
            "shared": lambda: shared_key(ctx, server.url, p["shared_s"]),
            "stopped": lambda: stopped(ctx, server.url, p["stopped_s"]),
            "http": lambda: real_client(ctx, server.url, p["http_runs"]),
            "lease_throughput": lambda: lease_throughput(ctx, server.url, p["lease_runs"], p["rt_calls"],
                                                         p["lease_calls"]),
            "lease_shared": lambda: lease_shared(ctx, server.url, p["lease_shared_s"]),
            "lease_join": lambda: lease_join(ctx, server.url, p["join_after_s"], p["joined_s"], p["share_last_s"]),
        }
        for key, run in cases.items():
            started = time.monotonic()
            try:
                results[key] = run()
            except Exception as error:  # noqa: BLE001 - a failed case is reported, the others still run
                results["failed"][key] = f"{type(error).__name__}: {error}"
            progress(f"{key}: {time.monotonic() - started:.1f} s"
                     + (f", FAILED: {results['failed'][key]}" if key in results["failed"] else ""))
    results["elapsed_s"] = time.monotonic() - began
    env = (f"Python {sys.version.split()[0]}, aiotb {aiotb.__version__} engine {aiotb.IMPLEMENTATION}, "
           f"{os.cpu_count()} CPUs, load average {load:.2f} at the start and {os.getloadavg()[0]:.2f} at the end, "
           f"{profile_name} profile")
    text = report(results, env)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "RESULTS.md").write_text(text)
    (args.out / "raw.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    if results["failed"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
