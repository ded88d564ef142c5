"""Benchmarks aiotb against aiolimiter and its peers: python benchmarks/run.py [--quick] [--only SCENARIO].

Prints progress to stderr and the tables to stdout. The full profile writes
benchmarks/RESULTS.md and benchmarks/plots/*.png; --quick, and any run narrowed
by --only, --loops or --competitors, writes under benchmarks/.cache/ instead
unless --out says otherwise. Every contended repetition runs in a fresh child
process (worker.py), started with the competitor's own environment on top of
this one's; nothing here depends on files outside this directory."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
sys.path.insert(0, str(HERE))

import registry
from bench_reference import NOOP_DIR_ENV, NOOP_KEYS
from results import describe_competitor, environment, load_raw, save_raw

LOOPS = ["asyncio", "uvloop"]
SCENARIOS = ["uncontended", "contended", "smooth", "mixed", "churn", "classic"]
PRIMARY = {"aiotb", "aiolimiter", "no-limiter"}  # repeated in the contended scenario, and alone at 1M
MILLION = 1_000_000  # a run this large takes 20-30 s per competitor
SLOW_PREVIOUS_S = 60.0  # a competitor whose run at one size took longer skips the larger sizes


@dataclass
class Profile:
    name: str
    uncontended_iterations: int
    uncontended_processes: int  # per loop, their samples pooled
    uncontended_repetitions: int  # per process
    uncontended_budget_s: float  # at most this long per measurement; slower competitors run fewer iterations
    contended_sizes: list[int]
    contended_paced_s: float  # R = N / (paced + 1): burst R goes at once, the rest takes `paced` seconds
    contended_repetitions: int  # for PRIMARY up to 100k; the others, and 1M, run once
    smooth: list[dict[str, Any]]  # N, R, burst 1: one grant every 1 / R s, shorter than the selector's 1 ms timer
    mixed: dict[str, Any]
    churn: dict[str, Any]
    classic: dict[str, Any]
    smooth_repetitions: int = 1  # for aiotb and the paced floor, side by side; the others run once
    smooth_competitors: list[str] = field(default_factory=lambda: [
        "aiotb", "paced-floor", "aiotb-looptimer", "aiotb-py", "aiolimiter", "no-limiter"])


FULL = Profile(
    name="full",
    uncontended_iterations=1_000_000,
    uncontended_processes=3,
    uncontended_repetitions=7,
    uncontended_budget_s=0.6,
    contended_sizes=[1_000, 10_000, 100_000, 1_000_000],
    contended_paced_s=3.0,
    contended_repetitions=3,
    smooth=[{"n": 10_000, "rate": 2_500.0, "burst": 1.0}, {"n": 10_000, "rate": 10_000.0, "burst": 1.0}],
    mixed={"n": 1_000, "rate": 1_000.0, "burst": 20.0, "big": 20, "every": 10},
    churn={"n": 10_000, "rate": 2_500.0, "burst": 2_500.0, "share": 0.3, "seed": 3},
    classic={"n": 500, "rate": 100.0, "bursts": [100.0, 1.0]},
    smooth_repetitions=3,
)

QUICK = Profile(
    name="quick",
    uncontended_iterations=200_000,
    uncontended_processes=1,
    uncontended_repetitions=3,
    uncontended_budget_s=0.3,
    contended_sizes=[1_000, 10_000],
    contended_paced_s=0.5,
    contended_repetitions=1,
    smooth=[{"n": 2_500, "rate": 2_500.0, "burst": 1.0}, {"n": 5_000, "rate": 10_000.0, "burst": 1.0}],  # targets' R
    mixed={"n": 400, "rate": 1_000.0, "burst": 20.0, "big": 20, "every": 10},
    churn={"n": 2_000, "rate": 1_000.0, "burst": 1_000.0, "share": 0.3, "seed": 3},
    classic={"n": 120, "rate": 100.0, "bursts": [100.0, 1.0]},
)


PACED = ("aiotb", "paced-floor")  # smooth: repeated, side by side


def ideal_span(n: float, rate: float, burst: float) -> float:
    return max(0.0, n - burst) / rate


def limit_for(span: float, n: int) -> float:
    """How long a child waits for its grants before reporting an unfinished run."""
    return 120.0 if n >= 1_000_000 else 3 * span + 10


class Progress:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def elapsed(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"{seconds // 60}m{seconds % 60:02d}s"

    def say(self, text: str) -> None:
        print(f"[{self.elapsed():>7}] {text}", file=sys.stderr, flush=True)


def run_child(spec: dict[str, Any], timeout: float, show_stderr: bool = False,
              environment: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Runs worker.py on spec in a fresh interpreter, with environment added to this process's for that child
    alone; its JSON result, or {'error': ...}."""
    command = [sys.executable, str(HERE / "worker.py"), json.dumps(spec)]
    env = {**os.environ, **environment} if environment else None
    try:
        done = subprocess.run(command, cwd=HERE, env=env, check=False, stdout=subprocess.PIPE,
                              stderr=None if show_stderr else subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"killed after {timeout:.0f} s", "complete": False}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr or "").strip().splitlines()[-5:]
        return {"error": f"exit {done.returncode}: " + " | ".join(tail), "complete": False}
    return json.loads(lines[-1])


def build_noop(progress: Progress) -> str | None:
    """Builds the C no-op context manager into .cache; None, or why it could not be built."""
    out = CACHE / "noop"
    done = subprocess.run([sys.executable, str(HERE / "noop" / "build.py"), str(out)], check=False,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        return "building noop/_noopcm.c failed: " + " | ".join(done.stdout.strip().splitlines()[-3:])
    os.environ[NOOP_DIR_ENV] = str(out)
    progress.say(f"built {done.stdout.strip().splitlines()[-1]}")
    return None


def fmt(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


class Runner:
    def __init__(self, profile: Profile, loops: list[str], keys: list[str]) -> None:
        self.profile = profile
        self.loops = loops
        self.keys = keys
        self.competitors, self.unavailable = registry.available(keys)
        self.progress = Progress()
        self.results: dict[str, Any] = {"uncontended": {}, "contended": [], "smooth": [], "wakeups": {}, "mixed": [],
                                        "churn": [], "classic": [], "skipped": [], "errors": []}

    def runnable(self, scenario: str) -> list[str]:
        return [k for k in self.keys if k in self.competitors and scenario in self.competitors[k].scenarios]

    def record(self, scenario: str, loop: str, key: str, params: dict[str, Any], repetition: int,
               result: dict[str, Any]) -> None:
        if "error" in result:
            self.results["errors"].append({"scenario": scenario, "loop": loop, "competitor": key,
                                           "params": params, "error": result["error"]})
        self.results[scenario].append({"loop": loop, "competitor": key, "params": params,
                                       "repetition": repetition, "result": result})

    def child(self, scenario: str, loop: str, key: str, params: dict[str, Any], span: float) -> dict[str, Any]:
        n = params["n"]
        limit = limit_for(span, n)
        spec = {"scenario": scenario, "loop": loop, "competitor": key, "params": params, "limit_s": limit}
        return run_child(spec, timeout=limit + 60 + n * 3e-5, environment=self.competitors[key].environment)

    # ---- scenario 1 ----
    def uncontended(self) -> None:
        # aiotb and what its targets compare it with always run back to back, in the same spell of the
        # machine's load
        paired = [k for k in ("aiotb", "c-noop", "c-bucket", "c-noop-bound", "c-bucket-bound", "c-bucket-loop-bound",
                                 "aiolimiter") if k in self.runnable("uncontended")]
        keys = paired + [k for k in self.runnable("uncontended") if k not in paired]
        p = self.profile
        spec = {"scenario": "uncontended", "competitors": keys, "iterations": p.uncontended_iterations,
                "repetitions": p.uncontended_repetitions, "budget_s": p.uncontended_budget_s,
                "together": max(1, len(paired))}
        for loop in self.loops:
            self.progress.say(f"uncontended on {loop}: {len(keys)} competitors, {p.uncontended_processes} x "
                              f"{p.uncontended_repetitions} repetitions of {p.uncontended_iterations:,}, interleaved")
            # one process's ratios can sit a few percent off another's for its whole life (memory layout,
            # hash seed, a long spell of load): the samples of several are pooled
            merged: dict[str, Any] = {"iterations": {}, "ns": {}}
            for process in range(p.uncontended_processes):
                self.progress.say(f"uncontended on {loop}: process {process + 1}/{p.uncontended_processes}")
                result = run_child(dict(spec, loop=loop), timeout=600, show_stderr=True)
                if "error" in result:
                    self.results["errors"].append({"scenario": "uncontended", "loop": loop, "error": result["error"]})
                    self.progress.say(f"uncontended on {loop} failed: {result['error']}")
                    break
                for key in keys:
                    merged["iterations"].setdefault(key, []).append(result["iterations"][key])
                    merged["ns"].setdefault(key, []).extend(result["ns"][key])
            else:
                self.results["uncontended"][loop] = merged

    # ---- scenario 2 ----
    def contended(self) -> None:
        p = self.profile
        keys = self.runnable("contended")
        million_skipped = [k for k in keys if k not in PRIMARY]
        if MILLION in p.contended_sizes and million_skipped:
            for loop in self.loops:
                for key in million_skipped:
                    self.results["skipped"].append({
                        "scenario": "contended", "loop": loop, "competitor": key, "sizes": [MILLION],
                        "why": "only aiotb, aiolimiter and the no-limiter floor run at 1M (each such run takes "
                               "20-30 s; the time budget of the full profile)"})
        for loop in self.loops:
            stopped: dict[str, str] = {}
            for n in p.contended_sizes:
                rate = n / (p.contended_paced_s + 1)
                span = ideal_span(n, rate, rate)
                repetitions = p.contended_repetitions if n <= 100_000 else 1
                params = {"n": n, "rate": rate, "burst": rate}
                walls: dict[str, list[float]] = {}
                for repetition in range(repetitions):
                    for key in keys:
                        if key in stopped or (n >= MILLION and key not in PRIMARY):
                            continue
                        if repetition > 0 and key not in PRIMARY:
                            continue
                        self.progress.say(f"contended {loop} N={n:,} R={rate:,.0f}/s {key} "
                                          f"rep {repetition + 1}/{repetitions if key in PRIMARY else 1} ...")
                        result = self.child("contended", loop, key, params, span)
                        self.record("contended", loop, key, params, repetition, result)
                        self.progress.say("  " + self.describe(result))
                        walls.setdefault(key, []).append(result.get("wall", float("inf"))
                                                         if result.get("complete") else float("inf"))
                for key, seen in walls.items():
                    worst = max(seen)
                    if worst > SLOW_PREVIOUS_S or worst == float("inf"):
                        why = ("did not finish" if worst == float("inf") else f"took {worst:.0f} s")
                        stopped[key] = why
                        bigger = [m for m in p.contended_sizes if m > n and (m < MILLION or key in PRIMARY)]
                        if bigger:
                            self.results["skipped"].append({
                                "scenario": "contended", "loop": loop, "competitor": key,
                                "sizes": bigger, "why": f"its N={n:,} run {why} (limit {limit_for(span, n):.0f} s, "
                                                        f"skip rule: > {SLOW_PREVIOUS_S:.0f} s or unfinished)"})

    def smooth(self) -> None:
        keys = [k for k in self.profile.smooth_competitors if k in self.runnable("smooth")]
        for loop in self.loops:
            for config in self.profile.smooth:
                params = dict(config)
                span = ideal_span(params["n"], params["rate"], params["burst"])
                probe = {"period_s": 1 / params["rate"], "duration_s": 2.0}
                self.progress.say(f"smooth {loop}: how often the loop wakes a task sleeping "
                                  f"{probe['period_s'] * 1e3:g} ms ...")
                woke = run_child({"scenario": "wakeups", "loop": loop, "params": probe}, timeout=60)
                self.results["wakeups"].setdefault(loop, []).append(dict(woke, period_s=probe["period_s"]))
                self.progress.say(f"    {fmt(woke.get('wakes_per_s'), 0)} wake-ups/s at "
                                  f"{fmt(woke.get('cpu_pct'), 0)} % CPU" + self.failure(woke))
                # aiotb and the paced floor alternate, so a spell of the machine's stalls weighs on both
                paired = [k for k in keys if k in PACED]
                runs = [(k, rep) for rep in range(self.profile.smooth_repetitions) for k in paired]
                runs += [(k, 0) for k in keys if k not in PACED]
                for key, rep in runs:
                    self.progress.say(f"smooth (burst 1) {loop} N={params['n']:,} R={params['rate']:,.0f}/s "
                                      f"{key}" + (f" rep {rep + 1}" if key in PACED else "") + " ...")
                    result = self.child("contended", loop, key, params, span)
                    self.record("smooth", loop, key, params, rep, result)
                    self.progress.say("  " + self.describe(result))

    def mixed(self) -> None:
        params = dict(self.profile.mixed)
        big, every = params["big"], params["every"]
        tokens = sum(big if i % every == every - 1 else 1 for i in range(params["n"]))
        span = ideal_span(tokens, params["rate"], params["burst"])
        for loop in self.loops:
            for key in self.runnable("mixed"):
                self.progress.say(f"mixed sizes {loop} {key} ...")
                result = self.child("mixed", loop, key, params, span)
                self.record("mixed", loop, key, params, 0, result)
                big_wait = result.get("big_wait_s") or {}
                self.progress.say(f"    big requests waited p50 {fmt(big_wait.get('p50'), 2)} s, "
                                  f"max {fmt(big_wait.get('max'), 2)} s; "
                                  f"{result.get('big_after_last_small', '-')} of {result.get('big_count', '-')} "
                                  f"granted after every small one" + self.failure(result))

    def churn(self) -> None:
        params = dict(self.profile.churn)
        span = ideal_span(params["n"], params["rate"], params["burst"])
        for loop in self.loops:
            for key in self.runnable("churn"):
                self.progress.say(f"cancellation churn {loop} {key} ...")
                result = self.child("churn", loop, key, params, span)
                self.record("churn", loop, key, params, 0, result)
                self.progress.say("  " + self.describe(result) + f", {result.get('cancelled', '-')} cancelled")

    def classic(self) -> None:
        base = dict(self.profile.classic)
        for burst in base.pop("bursts"):
            params = {**base, "burst": burst}
            span = ideal_span(params["n"], params["rate"], burst)
            for loop in self.loops:
                for key in self.runnable("classic"):
                    self.progress.say(f"classic {params['n']} at {params['rate']:.0f}/s burst {burst:.0f} "
                                      f"{loop} {key} ...")
                    result = self.child("classic", loop, key, params, span)
                    self.record("classic", loop, key, params, 0, result)
                    self.progress.say("  " + self.describe(result))
                    self.progress.say(f"  at most {result.get('max_in_window', '-')} in any 1 s "
                                      f"(bound {fmt(result.get('window_bound'), 0)})")

    @staticmethod
    def failure(result: dict[str, Any]) -> str:
        if "error" in result:
            return f"  ERROR {result['error']}"
        if not result.get("complete", True):
            return f"  UNFINISHED: {result.get('granted')}/{result.get('n')} granted"
        return ""

    def describe(self, result: dict[str, Any]) -> str:
        if "error" in result:
            return self.failure(result)
        late = result.get("lateness_ms") or {}
        return (f"{fmt(result.get('wall'), 2)} s, {fmt(result.get('achieved_rate'), 1)}/s "
                f"({fmt(result.get('rate_error_pct'), 2)} %), {fmt(result.get('cpu_us_per_grant'), 1)} µs "
                f"CPU/grant ({fmt(result.get('cpu_pct'), 0)} %), p99 late {fmt(late.get('p99'), 1)} ms"
                + self.failure(result))  # at most 100 columns with the progress prefix; RESULTS.md has the rest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short smoke profile, indicative only (about 3 minutes)")
    parser.add_argument("--only", default="", help=f"comma-separated scenarios among {', '.join(SCENARIOS)}")
    parser.add_argument("--loops", default=",".join(LOOPS), help="comma-separated: asyncio, uvloop")
    parser.add_argument("--competitors", default="", help="comma-separated keys (default: all installed)")
    parser.add_argument("--out", default="", help="where RESULTS.md and plots/ go")
    parser.add_argument("--report-only", action="store_true",
                        help="measure nothing: redo the tables, RESULTS.md and plots from the last run's raw JSON")
    args = parser.parse_args(argv)

    profile = QUICK if args.quick else FULL
    only = [s for s in args.only.split(",") if s] or SCENARIOS
    unknown = set(only) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    loops = [loop for loop in args.loops.split(",") if loop]
    keys = [k for k in args.competitors.split(",") if k] or registry.ORDER
    partial = bool(args.only or args.competitors) or loops != LOOPS
    default_out = CACHE / "quick" if profile is QUICK else (CACHE / "partial" if partial else HERE)
    out = Path(args.out) if args.out else default_out
    out.mkdir(parents=True, exist_ok=True)

    import report  # imports matplotlib; kept out of the children

    raw = CACHE / f"results-{profile.name}{'-partial' if partial else ''}.json"
    if args.report_only:
        results = load_raw(raw)
        print(report.render_summary(results, report.write(results, out)))
        return 0
    runner = Runner(profile, loops, keys)
    for key, why in runner.unavailable.items():
        runner.progress.say(f"not available: {key}: {why}")
    noop_keys = [key for key in NOOP_KEYS if key in keys]
    noop_problem = build_noop(runner.progress) if noop_keys else None
    if noop_problem:
        runner.progress.say(noop_problem)
        for key in noop_keys:
            runner.unavailable[key] = noop_problem
            runner.competitors.pop(key, None)
    meta = environment(loops)
    meta.update(profile=asdict(profile), scenarios=only, started=time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    runner.progress.say(f"profile {profile.name}: {', '.join(only)} on {', '.join(loops)}")
    for scenario in only:
        getattr(runner, scenario)()
    meta["duration_s"] = time.monotonic() - runner.progress.started
    meta["load_after"] = os.getloadavg()
    results = {"meta": meta, "unavailable": runner.unavailable,
               "competitors": {k: describe_competitor(c) for k, c in runner.competitors.items()},
               **runner.results}
    save_raw(results, raw)
    written = report.write(results, out)
    runner.progress.say(f"done in {runner.progress.elapsed()}")
    print(report.render_summary(results, written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
