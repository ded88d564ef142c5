"""One limiter shared by the processes of a host: python benchmarks/shared.py [--quick] [--out DIR].

Every process builds ``Limiter(rate, 1, burst=b, store=SharedMemoryStore(name))`` with the same rates;
they share one GCRA state in a POSIX shared-memory segment. Each case runs in fresh processes
started with "spawn" (shared_workers.py holds what they run); they build their limiters, say they are
ready, and start together at one CLOCK_MONOTONIC instant. A grant's use instant is time.monotonic_ns()
when its task resumes inside ``async with limiter:`` (after a successful try_acquire() for the calls
made as fast as possible). Each process logs its instants; the parent merges and sorts them and
reports, for every merged log: the grants; the achieved rate, (grants - burst) over the time from the
first to the last, against the configured one; the most grants in any 1 s window [t, t + 1 s)
against the bound burst + rate * 1 s, and how many windows (one starting at each grant) exceed it;
and the largest excess over any interval, by GCRA virtual scheduling over the sorted instants
(f = max(f, t) + T for T ns per token; excess = (f - t) / T - burst, in tokens, above 0 when the
instants are closer together than the bucket allows).

Cases (the targets are what the product promises; each is judged from what this run measured):
  1. 8 processes x 1,000 tasks, Limiter(10_000, 1, burst=100), 30 s: the bound and the rate;
  2. 8 processes calling try_acquire() as fast as they can, on a rate they cannot reach and on one
     they exceed: calls/s and grants/s in all, the bound; beside it, pyrate-limiter's
     MultiprocessBucket (a Manager list and one lock) tried as fast as 8 processes can;
  3. uncontended ``async with`` on a shared store against the in-process Limiter, one process, on
     asyncio and uvloop: ns per block, median of 5 runs;
  4. 8 processes x 100 tasks at 2,500/s (burst 10), 20 s: CPU of every process against wall time,
     and the steady p99 lateness of each use against its ideal instant;
  5. faults: 8 processes x 50 tasks at 2,000/s (burst 20), 30 s; every second a random worker is
     killed with SIGKILL and a new one takes its place, and half-way between kills another is
     stopped with SIGSTOP for 150 ms; logs in memory-mapped files outlive the killed;
  6. a real client: 4 processes with aiohttp sessions send 600 requests through Limiter(95, 1,
     burst=5) on a shared store to a local server that answers 429 above 100 requests in any
     sliding second; then the same with an in-process limiter in each process.
Repeated cases report medians. Writes shared/RESULTS.md and shared/raw.json beside this file (--out to
write elsewhere) and prints the same tables."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import secrets
import signal
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Callable, Iterator

import shared_workers
from crew import READY_TIMEOUT, RESULT_SLACK, Worker, crew, release, results_of

HERE = Path(__file__).resolve().parent
PROCESSES = 8
WINDOW_NS = 1_000_000_000
STEADY_AFTER_S = 1.0

TARGET_RATE_ERROR_PCT = 0.1
TARGET_CALLS_PER_S = 5e6
TARGET_VS_PYRATE = 1000.0
TARGET_OVERHEAD = 1.3
TARGET_CPU_PCT = 30.0
TARGET_P99_MS = 1.5
TARGET_FAULT_RATE_PCT = 1.0
TARGET_HTTP_RATE_PCT = 97.0

SERVER = {"max_requests": 100, "window": 1.0, "processing": 0.005, "jitter": 0.005}
PROFILES = {
    "full": {"tasks_s": 30, "try_s": 5, "try_runs": 3, "with_runs": 5, "with_count": 200_000, "cpu_s": 20,
             "cpu_runs": 3, "faults_s": 30, "http_runs": 3, "http_requests": 600},
    "quick": {"tasks_s": 5, "try_s": 1, "try_runs": 1, "with_runs": 5, "with_count": 200_000, "cpu_s": 5,
              "cpu_runs": 1, "faults_s": 6, "http_runs": 1, "http_requests": 600},
}
LOGGED_CALLS_PER_CORE_S = 6e6  # what one core could log, at most, calling try_acquire as fast as it can


# ---- processes ----

def run_together(ctx: Any, specs: list[dict[str, Any]], run_s: float) -> tuple[int, list[dict[str, Any]]]:
    """Starts one worker per spec at one instant; that instant and their results."""
    with crew() as workers:
        workers.extend(Worker(ctx, spec, shared_workers.main) for spec in specs)
        start_ns = release(workers)
        return start_ns, results_of(workers, run_s)


@contextmanager
def segment(case: str) -> Iterator[str]:
    """A fresh shared-memory name for one run, unlinked before and after it."""
    from aiotb import SharedMemoryStore

    name = f"aiotb-bench-{case}-{os.getpid()}-{secrets.token_hex(4)}"
    SharedMemoryStore.unlink(name)
    try:
        yield name
    finally:
        SharedMemoryStore.unlink(name)


def log_dir() -> tempfile.TemporaryDirectory[str]:
    """A directory for the workers' logs, in memory where the system has one: writing back a file mapped
    from disk would stall the process writing to it."""
    memory = Path("/dev/shm")
    return tempfile.TemporaryDirectory(prefix="aiotb-shared-", dir=memory if memory.is_dir() else None)


# ---- what a merged log says ----

def grant_log(path: Path) -> Any:
    """The instants a GrantLog file holds (its count in slot 0)."""
    import numpy as np

    slots = np.fromfile(path, dtype=np.int64)
    return slots[1:1 + int(slots[0])] if slots.size else slots


def merged(paths: list[Path], read: Callable[[Path], Any], end_ns: int) -> Any:
    """The instants of every log, sorted, up to the end instant: what the tasks used while the
    processes tore down (cancelled their tasks, exited) is not part of the run."""
    import numpy as np

    instants = np.sort(np.concatenate([read(path) for path in paths]))
    return instants[:np.searchsorted(instants, end_ns, side="left")]


def bound_stats(instants: Any, rate: float, burst: float) -> dict[str, Any]:
    """Grants, achieved rate, busiest 1 s window against burst + rate, and the largest GCRA excess, of
    sorted instants (ns)."""
    import numpy as np

    n = int(instants.size)
    out: dict[str, Any] = {"grants": n, "rate": rate, "burst": burst, "bound": burst + rate * WINDOW_NS / 1e9}
    if n < 2:
        return out
    span_s = (instants[-1] - instants[0]) / 1e9
    achieved = (n - min(n, int(burst))) / span_s
    ends = np.searchsorted(instants, instants + WINDOW_NS, side="left")
    in_window = ends - np.arange(n)
    per_token = 1e9 / rate
    since = (instants - instants[0]).astype(np.float64)
    k = np.arange(n, dtype=np.float64)
    virtual = (k + 1) * per_token + np.maximum.accumulate(since - k * per_token)  # f after each instant
    excess = (virtual - since) / per_token - burst
    worst = int(excess.argmax())
    out.update(span_s=float(span_s), achieved_rate=float(achieved), rate_error_pct=100 * (achieved - rate) / rate,
               short=int(rate * span_s + burst) - n,  # grants fewer than the schedule from the first allows
               longest_gap_ms=float(np.diff(instants).max() / 1e6),
               max_in_window=int(in_window.max()), windows_over=int((in_window > out["bound"] + 1e-9).sum()),
               excess_tokens=float(excess[worst]), excess_at_s=float(since[worst] / 1e9),
               excess_uses=int((excess > 1e-9).sum()))
    return out


def steady_lateness_ms(instants: Any, rate: float, burst: float) -> dict[str, float] | None:
    """Each instant minus its ideal one, first + max(0, k - burst + 1) / rate, after the first second."""
    import numpy as np

    k = np.arange(instants.size)
    ideal = np.maximum(0, k - burst + 1) * (1e9 / rate)  # ns after the first
    late = (instants - instants[0]) - ideal
    steady = late[ideal >= STEADY_AFTER_S * 1e9]
    if not steady.size:
        return None
    p50, p99 = np.percentile(steady, [50, 99]) / 1e6
    return {"p50": float(p50), "p99": float(p99), "max": float(steady.max() / 1e6), "count": int(steady.size)}


def median(values: list[float]) -> float:
    return float(statistics.median(values))


# ---- the cases ----

def tasks_specs(name: str, logs: Path, rate: float, burst: float, tasks: int, seconds: float,
                count: int = PROCESSES) -> list[dict[str, Any]]:
    capacity = int((rate * seconds + burst) * 1.05) + 1000  # every process could take every grant
    return [{"role": "tasks", "segment": name, "rate": rate, "burst": burst, "tasks": tasks,
             "duration_ns": int(seconds * 1e9), "log": str(logs / f"tasks-{i}.log"), "capacity": capacity}
            for i in range(count)]


def tasks_at_rate(ctx: Any, seconds: float) -> dict[str, Any]:
    """Case 1: 8 x 1,000 tasks loop ``async with`` on Limiter(10_000, 1, burst=100)."""
    rate, burst = 10_000.0, 100.0
    with segment("tasks") as name, log_dir() as tmp:
        specs = tasks_specs(name, Path(tmp), rate, burst, 1_000, seconds)
        start_ns, done = run_together(ctx, specs, seconds)
        end_ns = start_ns + specs[0]["duration_ns"]
        instants = merged([Path(s["log"]) for s in specs], grant_log, end_ns)
        per_process = [int((grant_log(Path(s["log"])) < end_ns).sum()) for s in specs]
    stats = bound_stats(instants, rate, burst)
    stats.update(per_process=per_process, overflow=sum(d["overflow"] for d in done), seconds=seconds)
    return stats


def try_run(ctx: Any, rate: float, burst: float, seconds: float) -> dict[str, Any]:
    """8 processes call try_acquire() as fast as they can for seconds."""
    import numpy as np

    share = min(1.0, (os.cpu_count() or 1) * 2 / PROCESSES)
    capacity = min(int((rate * seconds + burst) * 1.05) + 1000, int(LOGGED_CALLS_PER_CORE_S * seconds * share))
    with segment("try") as name, log_dir() as tmp:
        specs: list[dict[str, Any]] = [
            {"role": "try", "segment": name, "rate": rate, "burst": burst, "duration_ns": int(seconds * 1e9),
             "log": str(Path(tmp) / f"try-{i}.log"), "capacity": capacity} for i in range(PROCESSES)]
        start_ns, done = run_together(ctx, specs, seconds)
        instants = merged([Path(s["log"]) for s in specs], lambda path: np.fromfile(path, dtype=np.int64),
                          start_ns + specs[0]["duration_ns"])
    wall_s = max(d["elapsed_ns"] for d in done) / 1e9
    stats = bound_stats(instants, rate, burst)
    stats.update(calls=sum(d["calls"] for d in done), all_grants=sum(d["grants"] for d in done), wall_s=wall_s,
                 unlogged=sum(d["unlogged"] for d in done))
    stats.update(calls_per_s=stats["calls"] / wall_s, grants_per_s=stats["all_grants"] / wall_s)
    return stats


def pyrate_run(ctx: Any, rate: float, seconds: float) -> dict[str, Any]:
    """8 processes try pyrate-limiter's MultiprocessBucket (non-blocking) as fast as they can."""
    from pyrate_limiter import Duration, MultiprocessBucket, Rate

    with ctx.Manager() as manager:
        bucket = MultiprocessBucket([Rate(int(rate), Duration.SECOND)], manager.list(), ctx.RLock())
        specs = [{"role": "pyrate", "bucket": bucket, "duration_ns": int(seconds * 1e9), "capacity": 1_000_000}
                 for _ in range(PROCESSES)]
        _, done = run_together(ctx, specs, seconds)
    wall_s = max(d["elapsed_ns"] for d in done) / 1e9
    calls, grants = sum(d["calls"] for d in done), sum(d["grants"] for d in done)
    return {"calls": calls, "grants": grants, "wall_s": wall_s, "calls_per_s": calls / wall_s,
            "grants_per_s": grants / wall_s}


TRY_LIMITS = {"unreachable": (10_000_000.0, 1_000.0), "exceeded": (10_000.0, 100.0)}


def try_as_fast(ctx: Any, seconds: float, runs: int) -> dict[str, Any]:
    """Case 2: aiotb's try_acquire and pyrate's, both limits, runs times, side by side."""
    out: dict[str, Any] = {}
    for label, (rate, burst) in TRY_LIMITS.items():
        aiotb_runs, pyrate_runs = [], []
        for run in range(runs):
            aiotb_runs.append(try_run(ctx, rate, burst, seconds))
            pyrate_runs.append(pyrate_run(ctx, rate, seconds))
            progress(f"case 2, {label}, run {run + 1}/{runs}: aiotb {aiotb_runs[-1]['calls_per_s']:,.0f} calls/s, "
                     f"pyrate {pyrate_runs[-1]['calls_per_s']:,.0f}")
        out[label] = {"rate": rate, "burst": burst, "seconds": seconds, "aiotb": aiotb_runs, "pyrate": pyrate_runs}
    return out


def uncontended(ctx: Any, runs: int, count: int) -> dict[str, Any]:
    """Case 3: one process per loop kind times both limiters, alternating."""
    out: dict[str, Any] = {}
    for loop in ("asyncio", "uvloop") if find_spec("uvloop") else ("asyncio",):
        with segment("with") as name:
            spec = {"role": "uncontended", "segment": name, "rate": 1e9, "burst": 1e9, "loop": loop,
                    "runs": runs, "count": count}
            _, (done,) = run_together(ctx, [spec], 60.0)
        ns = {key: median(values) for key, values in done["runs"].items()}
        out[loop] = {"runs": done["runs"], "shared_ns": ns["shared"], "in_process_ns": ns["in-process"],
                     "ratio": ns["shared"] / ns["in-process"]}
    return out


def cpu_and_lateness(ctx: Any, seconds: float, runs: int) -> dict[str, Any]:
    """Case 4: 8 x 100 tasks at 2,500/s (burst 10): CPU of all the processes, steady lateness."""
    rate, burst = 2_500.0, 10.0
    done_runs = []
    for run in range(runs):
        with segment("cpu") as name, log_dir() as tmp:
            specs = tasks_specs(name, Path(tmp), rate, burst, 100, seconds)
            start_ns, done = run_together(ctx, specs, seconds)
            instants = merged([Path(s["log"]) for s in specs], grant_log, start_ns + specs[0]["duration_ns"])
        stats = bound_stats(instants, rate, burst)
        stats.update(cpu_pct=100 * sum(d["cpu_s"] for d in done) / seconds,
                     lateness_ms=steady_lateness_ms(instants, rate, burst))
        done_runs.append(stats)
        progress(f"case 4, run {run + 1}/{runs}: CPU {stats['cpu_pct']:.1f} % of wall")
    return {"seconds": seconds, "runs": done_runs, "cpu_pct": median([r["cpu_pct"] for r in done_runs]),
            "p99_ms": median([r["lateness_ms"]["p99"] for r in done_runs if r["lateness_ms"]])}


def faults(ctx: Any, seconds: int, seed: int = 1) -> dict[str, Any]:
    """Case 5: kills with SIGKILL (a new worker takes the place) and SIGSTOP pauses while 8 x 50 tasks
    take from Limiter(2_000, 1, burst=20)."""
    rate, burst, stop_s = 2_000.0, 20.0, 0.150
    chooser = random.Random(seed)
    events: list[dict[str, Any]] = []
    with (segment("faults") as name, log_dir() as tmp,
          crew() as workers):
        logs = Path(tmp)
        specs = tasks_specs(name, logs, rate, burst, 50, seconds)
        slots = [Worker(ctx, spec, shared_workers.main) for spec in specs]
        workers.extend(slots)
        start_ns = release(slots)
        for second in range(1, seconds):
            shared_workers.spin_until(start_ns + int((second - 0.5) * 1e9))
            stopped = slots[chooser.randrange(len(slots))]
            os.kill(stopped.process.pid, signal.SIGSTOP)
            time.sleep(stop_s)
            os.kill(stopped.process.pid, signal.SIGCONT)
            events.append({"at_s": (time.monotonic_ns() - start_ns) / 1e9 - stop_s, "stopped": stopped.process.pid})
            shared_workers.spin_until(start_ns + second * 1_000_000_000)
            place = chooser.randrange(len(slots))
            killed = slots[place]
            killed.process.kill()
            spec = {**killed.spec, "start_ns": start_ns, "log": str(logs / f"tasks-{len(workers)}.log")}
            slots[place] = Worker(ctx, spec, shared_workers.main)
            workers.append(slots[place])
            events.append({"at_s": second, "killed": killed.process.pid, "by": slots[place].process.pid})
        left = max(0.0, (start_ns + seconds * 1e9 - time.monotonic_ns()) / 1e9)
        done = results_of(slots, left)
        instants = merged([Path(w.spec["log"]) for w in workers], grant_log, start_ns + specs[0]["duration_ns"])
    stats = bound_stats(instants, rate, burst)
    stats.update(seconds=seconds, kills=sum(1 for e in events if "killed" in e),
                 stops=sum(1 for e in events if "stopped" in e), workers=len(workers), events=events,
                 survivors=len(done))
    return stats


def http_run(ctx: Any, shared: bool, requests: int, seed: int) -> dict[str, Any]:
    """4 processes send requests through Limiter(95, 1, burst=5), shared or one each, to one server."""
    import numpy as np

    rate, burst, clients = 95.0, 5.0, 4
    with segment("http") as name, crew() as workers:
        server = Worker(ctx, {"role": "server", "server": {**SERVER, "seed": seed}, "timeout": 300.0}, shared_workers.main)
        workers.append(server)
        url = server.receive(READY_TIMEOUT)
        specs = [{"role": "client", "segment": name if shared else None, "rate": rate, "burst": burst,
                  "url": url, "requests": requests // clients} for _ in range(clients)]
        clients_run = [Worker(ctx, spec, shared_workers.main) for spec in specs]
        workers.extend(clients_run)
        release(clients_run)
        done = results_of(clients_run, requests / rate)
        server.conn.send("stop")
        arrivals = server.receive(RESULT_SLACK)["arrivals"]
    ok = np.array(sorted(at for at, status in arrivals if status == 200)) * 1e9
    stats = bound_stats(ok.astype(np.int64), rate, burst)
    statuses: dict[str, int] = {}
    for d in done:
        for status, count in d["statuses"].items():
            statuses[status] = statuses.get(status, 0) + count
    return {"shared": shared, "requests": requests, "statuses": statuses,
            "server_429": sum(1 for _, status in arrivals if status == 429), "ok": int(ok.size),
            "rate_of_200s": stats.get("achieved_rate"), "busiest_200s": stats.get("max_in_window"),
            "span_s": stats.get("span_s")}


def real_client(ctx: Any, requests: int, runs: int) -> dict[str, Any]:
    """Case 6: the shared store and an in-process limiter per process, runs times each."""
    out: dict[str, list[dict[str, Any]]] = {"shared": [], "in-process": []}
    for run in range(runs):
        for key in out:
            out[key].append(http_run(ctx, key == "shared", requests, seed=run + 1))
            progress(f"case 6, {key}, run {run + 1}/{runs}: {out[key][-1]['statuses']}")
    return out


# ---- the report ----

def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def ratio(a: float, b: float) -> str:
    return f"{a / b:,.0f}" if b else "–"


def fmt(value: Any, spec: str = ",.1f") -> str:
    return "–" if value is None else format(value, spec)


def target_rows(r: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(case, target, measured, met) for every target, from the results."""
    rows = []
    if "tasks" in r:
        t = r["tasks"]
        rows.append(("1. 8 × 1,000 tasks, 10,000/s", "0 windows over the bound", f"{t['windows_over']:,}",
                     t["windows_over"] == 0))
        rows.append(("1. 8 × 1,000 tasks, 10,000/s", f"rate within ±{TARGET_RATE_ERROR_PCT} %",
                     f"{t['rate_error_pct']:+.3f} %", abs(t["rate_error_pct"]) <= TARGET_RATE_ERROR_PCT))
    if "try" in r:
        for label, case in r["try"].items():
            calls = median([run["calls_per_s"] for run in case["aiotb"]])
            pyrate = median([run["calls_per_s"] for run in case["pyrate"]])
            name = f"2. try_acquire ×8, {case['rate']:,.0f}/s ({label})"
            rows.append((name, f"≥ {TARGET_CALLS_PER_S / 1e6:g} M calls/s in all", f"{calls / 1e6:.2f} M",
                         calls >= TARGET_CALLS_PER_S))
            times = calls / pyrate if pyrate else float("inf")
            rows.append((name, f"≥ {TARGET_VS_PYRATE:,.0f} × pyrate's calls/s", f"{times:,.0f} ×",
                         times >= TARGET_VS_PYRATE))
    for loop, case in r.get("uncontended", {}).items():
        rows.append((f"3. uncontended async with, {loop}", f"shared ≤ {TARGET_OVERHEAD} × in-process",
                     f"{case['ratio']:.2f} ×", case["ratio"] <= TARGET_OVERHEAD))
    if "cpu" in r:
        c = r["cpu"]
        rows.append(("4. 8 × 100 tasks, 2,500/s", f"CPU ≤ {TARGET_CPU_PCT:g} % of wall", f"{c['cpu_pct']:.1f} %",
                     c["cpu_pct"] <= TARGET_CPU_PCT))
        rows.append(("4. 8 × 100 tasks, 2,500/s", f"steady p99 lateness ≤ {TARGET_P99_MS} ms",
                     f"{c['p99_ms']:.2f} ms", c["p99_ms"] <= TARGET_P99_MS))
    if "faults" in r:
        f = r["faults"]
        rows.append(("5. faults, 2,000/s", f"rate within {TARGET_FAULT_RATE_PCT:g} %", f"{f['rate_error_pct']:+.3f} %",
                     abs(f["rate_error_pct"]) <= TARGET_FAULT_RATE_PCT))
        rows.append(("5. faults, 2,000/s", "0 windows over the bound", f"{f['windows_over']:,}",
                     f["windows_over"] == 0))
        rows.append(("5. faults, 2,000/s", "0 over-grants: no grant beyond burst + rate·t (largest GCRA excess < 1 token)",
                     f"{f['excess_tokens']:+.2f} tokens", f["excess_tokens"] < 1))
    if "http" in r:
        shared = r["http"]["shared"]
        worst = max(run["server_429"] for run in shared)
        rate = median([run["rate_of_200s"] for run in shared])
        name = "6. aiohttp ×4, shared Limiter(95, 1, burst=5)"
        rows.append((name, "0 × 429 (every run)", f"{worst}", worst == 0))
        rows.append((name, f"200s at ≥ {TARGET_HTTP_RATE_PCT:g} % of 95/s", f"{rate:.2f}/s ({100 * rate / 95:.1f} %)",
                     100 * rate / 95 >= TARGET_HTTP_RATE_PCT))
    return rows


BOUND_HEAD = ("grants | achieved /s | rate error % | longest gap ms | most in 1 s (bound) | windows over | "
              "largest excess (tokens)")


def bound_cells(s: dict[str, Any]) -> str:
    return (f"{s['grants']:,} | {s['achieved_rate']:,.1f} | {s['rate_error_pct']:+.3f} | {s['longest_gap_ms']:.2f} | "
            f"{s['max_in_window']:,} ({s['bound']:,.0f}) | {s['windows_over']:,} | {s['excess_tokens']:+.2f}")


def introduction(r: dict[str, Any], env: str) -> list[str]:
    command = "python benchmarks/shared.py" + (" --quick" if r["profile"] == "quick" else "")
    lines = ["# One limiter shared by the processes of a host (`SharedMemoryStore`)", "",
             f"Measured by `{command}` ({env}). Every case ran in fresh spawned processes started at one "
             "CLOCK_MONOTONIC instant; a grant's use instant is `time.monotonic_ns()` as its task resumes inside "
             "`async with limiter:` (for try_acquire, right after a successful call). Achieved rate: (grants − "
             "burst) over the first to the last instant of the merged log. Windows: one 1 s window [t, t + 1 s) "
             "starting at each grant, against burst + rate·1 s. Excess: GCRA virtual scheduling over the sorted "
             "instants (f = max(f, t) + T; excess = (f − t)/T − burst), the most tokens used beyond what a bucket of "
             "that rate and burst allows over any interval. Longest gap: between two grants one after the other; "
             "one longer than burst/rate lets the bucket fill, and what it would refill beyond is lost to the rate. "
             "Logs end at the end instant: uses after it, while the processes cancel their tasks and exit, are left "
             "out.",
             "", "## Targets", "", "| case | target | measured | |", "|:--|:--|--:|:--|"]
    lines += [f"| {case} | {target} | {measured} | {verdict(ok)} |" for case, target, measured, ok in target_rows(r)]
    lines += [f"| {case} | ran | failed: {error.splitlines()[-1][:120]} | **not met** |"
              for case, error in r["failed"].items()]
    return lines + [""]


def tasks_section(t: dict[str, Any]) -> list[str]:
    return [f"## 1. {PROCESSES} processes × 1,000 tasks, `Limiter(10_000, 1, burst=100)`, {t['seconds']:g} s", "",
            f"| {BOUND_HEAD} | grants per process (fewest – most) |", "|--:" * 8 + "|",
            f"| {bound_cells(t)} | {min(t['per_process']):,} – {max(t['per_process']):,} |", ""]


def try_section(cases: dict[str, Any], pyrate_version: str) -> list[str]:
    lines = [f"## 2. {PROCESSES} processes calling try_acquire() as fast as they can", "",
             "Medians of the runs; the bound columns are the worst run's (most windows over, then largest excess). "
             f"pyrate-limiter {pyrate_version}: `MultiprocessBucket([Rate(rate, Duration.SECOND)], Manager().list(), "
             f"RLock())` shared with its {PROCESSES} processes, each calling `Limiter(bucket, buffer_ms=0)"
             ".try_acquire(name, blocking=False)` (a sliding-window log: it reads no burst). That call gives up at "
             "once, False, when another process holds the bucket's lock: at the unreachable limit every refusal is "
             "one of those, and its grants/s are the decisions its bucket made. At the unreachable limit every aiotb "
             "call is granted too, so a long gap in its log is a time when none of the processes ran; at the exceeded "
             "limit a gap longer than burst/rate (10 ms) loses what the bucket would have refilled beyond its burst.",
             "",
             f"| limit | s | aiotb calls/s | aiotb grants/s | {BOUND_HEAD} | pyrate calls/s | pyrate grants/s | "
             "× pyrate calls/s | × pyrate grants/s |", "|:--|" + "--:|" * 14]
    for label, case in cases.items():
        runs = case["aiotb"]
        worst = max(runs, key=lambda run: (run["windows_over"], run["excess_tokens"]))
        calls, grants = median([run["calls_per_s"] for run in runs]), median([run["grants_per_s"] for run in runs])
        pyrate_calls = median([run["calls_per_s"] for run in case["pyrate"]])
        pyrate_grants = median([run["grants_per_s"] for run in case["pyrate"]])
        lines.append(f"| {case['rate']:,.0f}/s, burst {case['burst']:,.0f} ({label}) | {case['seconds']:g} | "
                     f"{calls:,.0f} | {grants:,.0f} | {bound_cells(worst)} | {pyrate_calls:,.0f} | "
                     f"{pyrate_grants:,.0f} | {ratio(calls, pyrate_calls)} | {ratio(grants, pyrate_grants)} |")
    return lines + [""]


def uncontended_section(loops: dict[str, Any], count: int) -> list[str]:
    runs = len(next(iter(loops.values()))["runs"]["shared"])
    lines = ["## 3. Uncontended `async with`, one process", "",
             "`Limiter(1e9, 1, burst=1e9)`, shared store against in-process, on the same loop; medians of "
             f"{runs} alternating runs of {count:,} blocks.", "",
             "| loop | shared ns | in-process ns | ratio |", "|:--|--:|--:|--:|"]
    lines += [f"| {loop} | {c['shared_ns']:.1f} | {c['in_process_ns']:.1f} | {c['ratio']:.3f} |"
              for loop, c in loops.items()]
    return lines + [""]


def cpu_section(c: dict[str, Any]) -> list[str]:
    lines = [f"## 4. {PROCESSES} processes × 100 tasks, `Limiter(2_500, 1, burst=10)`, {c['seconds']:g} s", "",
             "CPU: `time.process_time()` of every process over the run, summed, against the run's wall time. "
             "Lateness: each use minus its ideal instant in the merged log (first + max(0, k − burst + 1)/rate), "
             f"after the first {STEADY_AFTER_S:g} s. Windows and excess are counted at use instants, where a process "
             "stalled past its reservation's instant adds up to one grant (see case 5).", "",
             f"| run | CPU % of wall | steady lateness p50 / p99 / max ms | {BOUND_HEAD} |", "|--:" * 10 + "|"]
    for i, run in enumerate(c["runs"], 1):
        late = run["lateness_ms"] or {}
        lines.append(f"| {i} | {run['cpu_pct']:.1f} | {fmt(late.get('p50'), '.3f')} / {fmt(late.get('p99'), '.3f')} / "
                     f"{fmt(late.get('max'), '.2f')} | {bound_cells(run)} |")
    return lines + ["", f"Median: CPU {c['cpu_pct']:.1f} % of wall, steady p99 {c['p99_ms']:.3f} ms.", ""]


def faults_section(f: dict[str, Any]) -> list[str]:
    within = f["excess_tokens"] <= PROCESSES + 1e-9
    return [f"## 5. Faults: {PROCESSES} processes × 50 tasks, `Limiter(2_000, 1, burst=20)`, {f['seconds']} s", "",
            f"{f['kills']} workers killed with SIGKILL (one a second, each replaced by a new process that joins at "
            f"once), {f['stops']} stopped with SIGSTOP for 150 ms half-way between kills; {f['workers']} processes "
            "in all, each logging into its own memory-mapped file.", "",
            f"| {BOUND_HEAD} | excess at (s) | uses with excess > 0 | short of the schedule (kills) |",
            "|--:" * 10 + "|",
            f"| {bound_cells(f)} | {f['excess_at_s']:.3f} | {f['excess_uses']:,} | {f['short']:,} ({f['kills']}) |", "",
            "Short of the schedule: rate × (last − first) + burst, less the grants. A killed process takes the "
            "reservation it held with it, one token at most per kill; tokens are lost too if no process asks for "
            "longer than burst/rate (the longest gap says whether that happened).",
            "",
            "What the excess means. Each process holds at most one reservation in the segment, its head waiter's, "
            "and grants it on its own loop timer when its instant comes; the segment counts the grant at that "
            "instant. A process stopped past that instant (by SIGSTOP here, or by the scheduler, or with the whole "
            "machine) would use the grant when it wakes, after the other processes have used the instants that "
            "follow it. So a reservation reached more than 5 ms (and a token's time) late is stale: its waiter takes "
            "the tokens afresh if they are free, else reserves again, and the stale tokens are lost. A lateness below "
            "that can still add at most one grant per process at use instants, and only while the rates have no room "
            f"({PROCESSES} at most here; a SIGKILL loses the killed process's reservation and adds nothing). "
            "Under continuous demand the bucket never refills, so GCRA virtual scheduling carries such an excess "
            "forward until the demand pauses, and then also shows how much less late later uses are than the ones "
            "before them (a fraction of a token). A use instant is read as its task resumes, a little after its grant "
            "and by a varying amount: a fraction of a token of excess is that, not a grant beyond the bound (every "
            "grant here is one token, so one over the bound would show as an excess of 1 or more).", "",
            f"This run: the largest excess is {f['excess_tokens']:+.2f} tokens, {'within' if within else 'above'} the "
            f"{PROCESSES} grants that one reservation per process allows; the busiest window held "
            f"{f['max_in_window']:,} against {f['bound']:,.0f} + {PROCESSES}.", ""]


def http_section(runs: dict[str, list[dict[str, Any]]], requests: int) -> list[str]:
    lines = ["## 6. aiohttp, 4 processes, a server that answers 429 above 100 requests in any sliding second", "",
             f"{requests} requests in all, {requests // 4} per process started together, each sent and read inside "
             "`async with limiter:`; the server (its own process, 127.0.0.1) counts on arrival and takes "
             f"{SERVER['processing'] * 1e3:g} ms + 0–{SERVER['jitter'] * 1e3:g} ms to answer. Rate of 200s: (200s − "
             "burst) over the first to the last arrival answered 200. With a limiter in each process the four send at "
             "4 × 95/s: the server lets 100 through in its first second and more as its window slides, so the "
             "200s bunch up and their first-to-last rate can read above the server's limit while the most in any "
             "second stays at 100.", "",
             "| limiter | run | 200 | 429 | rate of 200s /s | % of 95/s | most 200s in 1 s |",
             "|:--|--:|--:|--:|--:|--:|--:|"]
    for key, label in (("shared", "shared `Limiter(95, 1, burst=5)`"),
                       ("in-process", "`Limiter(95, 1, burst=5)` in each process")):
        for i, run in enumerate(runs[key], 1):
            rate = run["rate_of_200s"]
            lines.append(f"| {label} | {i} | {run['ok']} | {run['server_429']} | {fmt(rate, '.2f')} | "
                         f"{fmt(100 * rate / 95 if rate else None, '.1f')} | {fmt(run['busiest_200s'], 'd')} |")
    return lines + [""]


def report(r: dict[str, Any], env: str) -> str:
    lines = introduction(r, env)
    if "tasks" in r:
        lines += tasks_section(r["tasks"])
    if "try" in r:
        lines += try_section(r["try"], r["pyrate_version"])
    if "uncontended" in r:
        lines += uncontended_section(r["uncontended"], r["settings"]["with_count"])
    if "cpu" in r:
        lines += cpu_section(r["cpu"])
    if "faults" in r:
        lines += faults_section(r["faults"])
    if "http" in r:
        lines += http_section(r["http"], r["settings"]["http_requests"])
    lines.append(f"The run took {r['elapsed_s']:.0f} s.")
    return "\n".join(lines) + "\n"


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs, one repetition")
    parser.add_argument("--out", type=Path, default=HERE / "shared")
    args = parser.parse_args()
    import aiotb
    from importlib.metadata import version

    began = time.monotonic()
    profile_name = "quick" if args.quick else "full"
    p = PROFILES[profile_name]
    ctx = multiprocessing.get_context("spawn")
    results: dict[str, Any] = {"profile": profile_name, "settings": p, "pyrate_version": version("pyrate-limiter"),
                               "failed": {}}
    cases: dict[str, Callable[[], Any]] = {
        "tasks": lambda: tasks_at_rate(ctx, p["tasks_s"]),
        "try": lambda: try_as_fast(ctx, p["try_s"], p["try_runs"]),
        "uncontended": lambda: uncontended(ctx, p["with_runs"], p["with_count"]),
        "cpu": lambda: cpu_and_lateness(ctx, p["cpu_s"], p["cpu_runs"]),
        "faults": lambda: faults(ctx, p["faults_s"]),
        "http": lambda: real_client(ctx, p["http_requests"], p["http_runs"]),
    }
    load = os.getloadavg()[0]
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
           f"{os.cpu_count()} CPUs, load average {load:.2f} at the start, {profile_name} profile")
    text = report(results, env)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "RESULTS.md").write_text(text)
    (args.out / "raw.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    if results["failed"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
