"""One limiter across event loops and threads: python benchmarks/threads.py [--quick] [--out DIR].

Side by side in one run, on both loops (stock asyncio and uvloop):
  * one loop in one thread, 10,000 waiters at 2,500/s (burst 25): the single-loop figures;
  * K = 2, 4 and 8 loops in K threads, 10,000 waiters in all, the same limiter;
  * 8 threads blocked in acquire_blocking, 2,000 acquires in all at 1,000/s (burst 10);
  * 4 loops and 4 blocking threads, 30 % of the requests cancelled or timed out at random;
  * for reference, 1 and 8 loops whose tasks arrive interleaved over time (5,000/s in all, task i of
    loop k at (i*K + k) / 5,000 s, from 0.25 s after the release, once every task has started), beside a no-limiter floor: the same tasks sleeping until their
    ideal grant instants, each woken by its own loop.
Each run is a fresh child process, repeated; medians are reported. A waiter's grant time is
time.monotonic() when it resumes (the merged log of all loops and threads); the bound, the rate
and the lateness are computed from that log as in the contended scenario (scenarios._grant_stats),
CPU is the whole process's. FIFO is read from the engine itself in a separate run of each case: a
limiter that logs, in the engine's order, what it queues and what it grants. Writes
threads/RESULTS.md beside this file (--out to write elsewhere) and prints the same tables."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from array import array
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

ARRIVALS_AFTER = 0.25  # s after the release: every task of every loop has started before the first arrives
TARGET_CPU_RATIO = 1.5  # K loops: CPU per grant at most this times the single-loop figure
TARGET_RATE_ERROR_PCT = 0.1
TARGET_P99_MS = 2.0
TARGET_BLOCKING_CPU_PCT = 10.0


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def make_limiter(rate: float, burst: float, logged: bool) -> Any:
    import aiotb

    if not logged:
        return aiotb.Limiter(rate, 1, burst=burst)

    class Logged(aiotb.Limiter):
        __slots__ = ("queued", "granted", "granted_at", "log_lock")

        def _enqueue(self, amount: float, timeout: float | None, handle: Any, owner: object) -> int:
            with self.log_lock:
                ident = super()._enqueue(amount, timeout, handle, owner)
                self.queued.append(handle)
            return ident

        def _grant_due(self, at: float | None, owner: object) -> Any:
            with self.log_lock:
                result = super()._grant_due(at, owner)
                if result[0]:
                    self.granted.extend(result[0])
                    self.granted_at.extend([time.monotonic()] * len(result[0]))
            return result

    limiter = Logged(rate, 1, burst=burst)
    limiter.queued, limiter.granted, limiter.granted_at, limiter.log_lock = [], [], [], threading.Lock()
    return limiter


def in_threads(jobs: list[Callable[[threading.Barrier, threading.Event], None]]) -> float:
    """Runs each job in a thread of its own; a job sets itself up, waits on the barrier, then on the
    release. Returns the release instant, once every job has ended."""
    release = threading.Event()
    ready = threading.Barrier(len(jobs) + 1)
    errors: list[BaseException] = []

    def run(job: Callable[[threading.Barrier, threading.Event], None]) -> None:
        try:
            job(ready, release)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
            ready.abort()

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        pass
    released = time.monotonic()
    release.at = released  # type: ignore[attr-defined]  # the common origin of arrival times
    release.set()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return released


def loop_job(kind: str, limiter: Any, count: int, grants: array, offset: int,
             cancel: Callable[[int], float | None] | None = None,
             arrive: Callable[[int], float] | None = None,
             floor: Callable[[int], float] | None = None) -> Callable[[threading.Barrier, threading.Event], None]:
    """count tasks on a fresh loop of kind, parked until the release; each writes its grant time
    into grants[offset + i]. cancel(i), if given, says after how many seconds task i gives up
    (by cancellation for even i, by timeout= for odd i), None to wait. arrive(i): task i comes that
    many seconds after the release and ARRIVALS_AFTER (default: at once, after the release). floor(i): no
    limiter, task i sleeps until that many seconds after the same origin instead."""
    def job(ready: threading.Barrier, release: threading.Event) -> None:
        loop = new_loop(kind)
        clock = time.monotonic

        async def waiter(i: int, go: asyncio.Event) -> None:
            await go.wait()
            if arrive is not None:
                await asyncio.sleep(max(0.0, origin[0] + arrive(i) - clock()))
            if floor is not None:
                await asyncio.sleep(max(0.0, origin[0] + floor(i) - clock()))
                grants[offset + i] = clock()
                return
            after = cancel(i) if cancel else None
            try:
                if after is None:
                    await limiter.acquire()
                elif i % 2:
                    await limiter.acquire(timeout=after)
                else:
                    await asyncio.wait_for(limiter.acquire(), after)
            except (TimeoutError, asyncio.TimeoutError):
                return
            grants[offset + i] = clock()

        origin: list[float] = []  # arrivals count from here: the release, plus time for every task to start

        async def main() -> None:
            go = asyncio.Event()
            tasks = [asyncio.ensure_future(waiter(i, go)) for i in range(count)]
            await asyncio.sleep(0)
            await loop.run_in_executor(None, lambda: (ready.wait(), release.wait()))
            origin.append(release.at + ARRIVALS_AFTER)  # type: ignore[attr-defined]
            go.set()
            await asyncio.gather(*tasks)

        try:
            loop.run_until_complete(main())
        finally:
            loop.close()
    return job


def thread_job(limiter: Any, count: int, grants: array, offset: int,
               timeout_of: Callable[[int], float | None] | None = None) -> Callable[[threading.Barrier, threading.Event], None]:
    """count acquire_blocking calls in one thread after the release; grant times as loop_job."""
    def job(ready: threading.Barrier, release: threading.Event) -> None:
        ready.wait()
        release.wait()
        clock = time.monotonic
        for i in range(count):
            timeout = timeout_of(i) if timeout_of else None
            try:
                limiter.acquire_blocking(timeout=timeout)
            except TimeoutError:
                continue
            grants[offset + i] = clock()
    return job


def case(spec: dict[str, Any]) -> dict[str, Any]:
    """One run, in this process: spec names the loops, threads, sizes and whether to log."""
    import math

    from scenarios import WINDOW, _grant_stats

    rate, burst = spec["rate"], spec["burst"]
    limiter = make_limiter(rate, burst, spec["logged"])
    loops, threads, n = spec["loops"], spec["threads"], spec["n"]
    owners = loops + threads
    per = n // owners
    grants = array("d", [math.nan]) * (per * owners)
    rng = random.Random(spec.get("seed", 0))
    leave_share = spec.get("leave_share", 0.0)
    leave = [rng.random() * 0.5 if rng.random() < leave_share else None for _ in range(per * owners)]
    jobs: list[Callable[[threading.Barrier, threading.Event], None]] = []
    arrival_rate, floor = spec.get("arrival_rate"), spec.get("floor", False)
    for k in range(loops):
        # the global arrival order of task i of loop k, when arrivals interleave
        order: Callable[[int], int] = lambda i, k=k: i * loops + k  # noqa: E731
        jobs.append(loop_job(spec["kind"], limiter, per, grants, k * per,
                             (lambda i, base=k * per: leave[base + i]) if leave_share else None,
                             (lambda i, o=order: o(i) / arrival_rate) if arrival_rate else None,
                             (lambda i, o=order: max(o(i) / arrival_rate, (o(i) + 1 - burst) / rate))
                             if floor else None))
    for t in range(threads):
        base = (loops + t) * per
        jobs.append(thread_job(limiter, per, grants, base,
                               (lambda i, base=base: leave[base + i]) if leave_share else None))
    cpu_start = time.process_time()
    released = in_threads(jobs)
    finished = time.monotonic()
    cpu = time.process_time() - cpu_start
    run = {"complete": True, "n": per * owners, "grants": grants, "released": released,
           "wall": finished - released, "cpu": cpu, "setup_s": 0.0, "rss_base_mb": 0.0, "rss_peak_mb": 0.0,
           "gc": {}}
    stats = limiter.stats()
    used = sum(1 for g in grants if not math.isnan(g))
    out = _grant_stats(run, rate, burst)
    out.pop("curve", None)
    out.pop("lateness_quantiles_ms", None)
    out.pop("steady_quantiles_ms", None)
    out.update({"used": used, "stats_granted": stats.granted, "stats_cancelled": stats.cancelled,
                "stats_timeouts": stats.timeouts, "waiting_after": limiter.waiting,
                "cpu_pct_of_wall": 100 * cpu / (finished - released)})
    if spec["logged"]:
        granted = set(limiter.granted)  # a waiter that left before its grant is not in the order
        out["fifo"] = limiter.granted == [h for h in limiter.queued if h in granted]
        # the bound over the engine's grant instants: those of its passes, and for the grants taken at
        # once (the first burst) the instants their tasks resumed, the earliest of the resume times
        import numpy as np

        resumed = np.sort(np.frombuffer(grants, dtype=float))
        resumed = resumed[~np.isnan(resumed)]
        at_once = max(0, stats.granted - len(limiter.granted))
        instants = np.sort(np.concatenate([np.array(limiter.granted_at), resumed[:at_once]]))
        ends = np.searchsorted(instants, instants + WINDOW, side="left")
        in_window = ends - np.arange(instants.size)
        out["engine_max_in_window"] = int(in_window.max()) if instants.size else 0
        out["engine_windows_over_bound"] = int((in_window > burst + rate * WINDOW + 1e-9).sum())
        out["fifo_checked"] = len(limiter.granted)
    return out


def child(spec: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--case", json.dumps(spec)], capture_output=True, text=True,
                          check=False, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"case {spec} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def median_of(runs: list[dict[str, Any]], key: str, sub: str | None = None) -> float | None:
    values = [(r[key][sub] if sub else r[key]) for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def measure(specs: list[dict[str, Any]], repetitions: int) -> list[dict[str, Any]]:
    rows = []
    for spec in specs:
        runs = []
        for r in range(repetitions):
            runs.append(child({**spec, "logged": False, "seed": r}))
            print(f"  {spec['label']} {spec['kind']} run {r + 1}/{repetitions}", file=sys.stderr)
        fifo = {} if spec.get("floor") else child({**spec, "logged": True, "seed": 99})
        rows.append({"spec": spec, "runs": runs, "fifo": fifo})
    return rows


def summarize(row: dict[str, Any], single_cpu: float | None, floor_cpu: float | None = None) -> dict[str, Any]:
    runs = row["runs"]
    cpu = median_of(runs, "cpu_us_per_grant")
    spec = row["spec"]
    return {
        "case": spec["label"],
        "table": "arrivals" if spec.get("arrival_rate") else "loops" if spec["threads"] == 0 else "threads",
        "floor": bool(spec.get("floor")),
        "floor_ratio": cpu / floor_cpu if cpu and floor_cpu else None,
        "k_loops": row["spec"]["loops"] if row["spec"]["threads"] == 0 else 0,
        "mixed": bool(row["spec"].get("leave_share")),
        "loop": row["spec"]["kind"],
        "rate_error_pct": median_of(runs, "rate_error_pct"),
        "over_bound": row["fifo"].get("engine_windows_over_bound"),
        "max_in_window": row["fifo"].get("engine_max_in_window"),
        "resumed_over_bound": max(r.get("windows_over_bound", 0) for r in runs),
        "window_bound": runs[0].get("window_bound"),
        "cpu_us": cpu,
        "cpu_ratio": cpu / single_cpu if cpu and single_cpu else None,
        "cpu_pct": median_of(runs, "cpu_pct_of_wall"),
        "p99_steady_ms": median_of(runs, "steady_lateness_ms", "p99"),
        "lost": max(r["stats_granted"] - r["used"] for r in runs),
        "waiting_after": max(r["waiting_after"] for r in runs),
        "fifo": row["fifo"].get("fifo"),
        "fifo_checked": row["fifo"].get("fifo_checked"),
        "left": max(r["n"] - r["used"] for r in runs),
    }


def fmt(x: Any, spec: str = ".2f") -> str:
    return "–" if x is None else format(x, spec)


def verdict(ok: bool) -> str:
    return "holds" if ok else "**MISSED**"


def report(rows: list[dict[str, Any]], env: str) -> str:
    lines = ["# One limiter across loops and threads", "",
             "Measured by `python benchmarks/threads.py` (" + env + "). Medians of the repetitions; "
             "over-bound counts and losses are the worst run. Targets are judged from these figures.", ""]
    for table, title in (("loops", "Tasks on K loops in K threads, 10,000 waiters at 2,500/s (burst 25)"),
                         ("threads", "Blocked threads, and loops with threads mixed")):
        lines += [f"## {title}", "",
                  "| case | loop | rate error % | most in a window (bound) | over | CPU µs/grant | × 1 loop | "
                  "CPU % wall | steady p99 ms | FIFO | lost | targets |",
                  "|:--|:--|--:|--:|--:|--:|--:|--:|--:|:--|--:|:--|"]
        for s in rows:
            if s["table"] != table:
                continue
            checks = [s["over_bound"] == 0, s["fifo"] is True, s["lost"] == 0, s["waiting_after"] == 0]
            if not s["mixed"]:
                checks.append(s["rate_error_pct"] is not None and abs(s["rate_error_pct"]) <= TARGET_RATE_ERROR_PCT)
                checks.append(s["p99_steady_ms"] is not None and s["p99_steady_ms"] <= TARGET_P99_MS)
            if s["k_loops"] > 1:
                checks.append(s["cpu_ratio"] is not None and s["cpu_ratio"] <= TARGET_CPU_RATIO)
            if s["table"] == "threads" and not s["mixed"]:
                checks.append(s["cpu_pct"] is not None and s["cpu_pct"] <= TARGET_BLOCKING_CPU_PCT)
            lines.append(f"| {s['case']} | {s['loop']} | {fmt(s['rate_error_pct'], '+.3f')} | "
                         f"{s['max_in_window']} ({fmt(s['window_bound'], '.0f')}) | {s['over_bound']} | "
                         f"{fmt(s['cpu_us'], '.1f')} | {fmt(s['cpu_ratio'])} | {fmt(s['cpu_pct'], '.1f')} | "
                         f"{fmt(s['p99_steady_ms'])} | {'yes' if s['fifo'] else 'NO'} ({s['fifo_checked']}) | "
                         f"{s['lost']} | {verdict(all(checks))} |")
        lines.append("")
    lines += ["## For reference: tasks arriving interleaved over time, beside a no-limiter floor", "",
              "10,000 tasks at 2,500/s (burst 25), arriving at 5,000/s in all, task i of loop k at (i·K + k) / "
              f"5,000 s after an origin {ARRIVALS_AFTER} s after the release (by then every task has started). The floor has no limiter: each task sleeps until its ideal grant instant "
              "(the same schedule), woken by its own loop; only its CPU is shown. × 1 loop: against the 1-loop case of this table; "
              "× floor: against the floor with as many loops.", "",
              "| case | loop | rate error % | most in a window (bound) | over | CPU µs/grant | × 1 loop | × floor | "
              "steady p99 ms | FIFO |",
              "|:--|:--|--:|--:|--:|--:|--:|--:|--:|:--|"]
    for s in rows:
        if s["table"] != "arrivals":
            continue
        engine_only = ["–"] * 3 if s["floor"] else [
            f"{s['max_in_window']}", f"{s['over_bound']}",
            f"{'yes' if s['fifo'] else 'NO'} ({s['fifo_checked']})"]
        # the floor's rate and lateness say nothing of a limiter: its tasks keep a fixed schedule
        rate_error = None if s["floor"] else s["rate_error_pct"]
        p99 = None if s["floor"] else s["p99_steady_ms"]
        lines.append(f"| {s['case']} | {s['loop']} | {fmt(rate_error, '+.3f')} | "
                     f"{engine_only[0]} ({fmt(s['window_bound'], '.0f')}) | {engine_only[1]} | "
                     f"{fmt(s['cpu_us'], '.1f')} | {fmt(s['cpu_ratio'])} | "
                     f"{'–' if s['floor'] else fmt(s['floor_ratio'])} | {fmt(p99)} | "
                     f"{engine_only[2]} |")
    lines.append("")
    lines += ["Targets: 0 windows over the bound (burst + rate·1 s) in the merged log of the engine's grant "
              "instants (read as each pass returns; the first burst, taken at once, at its resume times); FIFO in "
              "the engine's own "
              f"order; rate within ±{TARGET_RATE_ERROR_PCT} %; steady p99 lateness ≤ {TARGET_P99_MS} ms; K loops: "
              f"CPU per grant ≤ {TARGET_CPU_RATIO} × the single-loop figure of the same loop kind; blocked threads: "
              f"CPU ≤ {TARGET_BLOCKING_CPU_PCT} % of wall; mixed: nothing lost (every grant used or given back: "
              "the engine's count of kept grants equals the grants the tasks and threads used) and no waiter left.",
              ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repetition, smaller runs")
    parser.add_argument("--out", type=Path, default=HERE / "threads")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(case(json.loads(args.case))))
        return
    reps = 1 if args.quick else 3
    n = 2_000 if args.quick else 10_000
    specs = []
    for kind in ("asyncio", "uvloop"):
        for k in (1, 2, 4, 8):
            specs.append({"label": "1 loop" if k == 1 else f"{k} loops", "kind": kind, "loops": k, "threads": 0,
                          "n": n, "rate": 2500.0, "burst": 25.0})
        specs.append({"label": "4 loops + 4 threads, 30 % leave", "kind": kind, "loops": 4, "threads": 4,
                      "n": n // 2, "rate": 2500.0, "burst": 25.0, "leave_share": 0.3})
    specs.append({"label": "8 threads, 2,000 at 1,000/s", "kind": "threads", "loops": 0, "threads": 8,
                  "n": 2_000, "rate": 1000.0, "burst": 10.0})
    for kind in ("asyncio", "uvloop"):
        for floor in (False, True):
            for k in (1, 8):
                label = ("1 loop" if k == 1 else f"{k} loops") + (", no limiter" if floor else "")
                specs.append({"label": label, "kind": kind, "loops": k, "threads": 0, "n": n, "rate": 2500.0,
                              "burst": 25.0, "arrival_rate": 5000.0, "floor": floor})
    rows = measure(specs, reps)

    def cpu_of(kind: str, loops: int, arrivals: bool, floor: bool) -> float | None:
        for r in rows:
            spec = r["spec"]
            if (spec["kind"], spec["loops"], spec["threads"], bool(spec.get("arrival_rate")),
                    bool(spec.get("floor"))) == (kind, loops, 0, arrivals, floor):
                return median_of(r["runs"], "cpu_us_per_grant")
        return None

    summaries = []
    for r in rows:
        spec = r["spec"]
        arrivals, floor = bool(spec.get("arrival_rate")), bool(spec.get("floor"))
        summaries.append(summarize(r, cpu_of(spec["kind"], 1, arrivals, floor),
                                   None if floor else cpu_of(spec["kind"], spec["loops"], arrivals, True)))
    import aiotb
    env = (f"Python {sys.version.split()[0]}, aiotb engine {aiotb.IMPLEMENTATION}, {os.cpu_count()} CPUs, "
           f"{reps} repetition(s) per case")
    text = report(summaries, env)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "RESULTS.md").write_text(text)
    (args.out / "raw.json").write_text(json.dumps({"summaries": summaries, "rows": [
        {"spec": r["spec"], "runs": r["runs"], "fifo": r["fifo"]} for r in rows]}, indent=1, default=str))


if __name__ == "__main__":
    main()
