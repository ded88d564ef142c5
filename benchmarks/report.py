"""Turns the runner's raw results into tables, target verdicts, RESULTS.md and plots."""

from __future__ import annotations

import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import registry
from competitor import Competitor, version_of

LIBRARIES = ["aiotb", "aiolimiter", "asynciolimiter", "asyncio-throttle", "pyrate-limiter", "uvloop",
             "numpy", "matplotlib"]


# ---- environment ----

def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return None


def _git_commit() -> str:
    repository = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(repository), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repository), "status", "--porcelain", "--", "src", "python"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return commit + (" (src/ or python/ modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def environment(loops: list[str]) -> dict[str, Any]:
    import asyncio

    import aiotb

    loop = asyncio.new_event_loop()
    default_loop = f"{type(loop).__module__}.{type(loop).__name__}"
    loop.close()
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{_cpu_model()}, {os.cpu_count()} cores, {_memory_gb() or 0:.0f} GB RAM",
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()} ({sys.version.split(' (')[0]}, "
                  f"{platform.python_compiler()})",
        "loops": {"asyncio": default_loop, "uvloop": f"uvloop {version_of('uvloop')}"},
        "versions": {name: version_of(name) for name in LIBRARIES},
        "aiotb_implementation": aiotb.IMPLEMENTATION,
        "aiotb_commit": _git_commit(),
        "load_before": os.getloadavg(),
    }


def describe_competitor(competitor: Competitor) -> dict[str, Any]:
    return {"label": competitor.label, "mapping": competitor.mapping, "reference": competitor.reference,
            "context_manager": competitor.context_manager, "weighted": competitor.acquire_amount is not None}


# ---- aggregation ----

def _median(values: list[Any]) -> Any:
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) != len(values) or not numbers:
        return values[0]
    return statistics.median(numbers)


def _merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of every numeric figure over repetitions; curves from the repetition with the median CPU."""
    if len(results) == 1:
        return dict(results[0], repetitions=1)
    ordered = sorted(results, key=lambda r: r.get("cpu_us_per_grant") or float("inf"))
    merged = dict(ordered[len(ordered) // 2])
    for key, value in results[0].items():
        if isinstance(value, dict) and all(isinstance(r.get(key), dict) for r in results):
            merged[key] = {k: _median([r[key].get(k) for r in results]) for k in value}
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            merged[key] = _median([r.get(key) for r in results])
    merged["complete"] = all(r.get("complete", False) for r in results)
    merged["repetitions"] = len(results)
    merged["spread"] = {k: [min(r.get(k) or 0 for r in results), max(r.get(k) or 0 for r in results)]
                        for k in ("cpu_us_per_grant", "wall")}
    return merged


def grouped(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (loop, competitor, params), repetitions merged, in table order."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for record in records:
        key = (record["loop"], record["competitor"], tuple(sorted(record["params"].items())))
        groups.setdefault(key, []).append(record)
    merged = []
    for (loop, competitor, _), members in groups.items():
        merged.append({"loop": loop, "competitor": competitor, "params": members[0]["params"],
                       "result": _merge([m["result"] for m in members])})
    order = {k: i for i, k in enumerate(registry.ORDER)}
    merged.sort(key=lambda e: (e["loop"], e["params"].get("burst", 0) < e["params"].get("rate", 0),
                               e["params"].get("n", 0), -e["params"].get("burst", 0), order.get(e["competitor"], 99)))
    return merged


def find(entries: list[dict[str, Any]], loop: str, competitor: str, **params: Any) -> dict[str, Any] | None:
    for entry in entries:
        if entry["loop"] == loop and entry["competitor"] == competitor and all(
                entry["params"].get(k) == v for k, v in params.items()):
            return entry["result"]
    return None


# ---- tables ----

def fmt(value: Any, digits: int = 1, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}{suffix}"
    return f"{value:,.{digits}f}{suffix}"


NUMERIC = re.compile(r"^[-+]?[\d,.]+( / [\d,.]+)?( \([\d,.-]+\))?$|^-$")  # cells that line up on the right


class Table:
    def __init__(self, title: str, headers: list[str], note: str = "") -> None:
        self.title = title
        self.headers = headers
        self.rows: list[list[str]] = []
        self.note = note

    def add(self, *cells: Any) -> None:
        self.rows.append([str(c) for c in cells])

    def text(self) -> str:
        widths = [max(len(h), *(len(r[i]) for r in self.rows)) if self.rows else len(h)
                  for i, h in enumerate(self.headers)]
        line = "  ".join(h.ljust(w) for h, w in zip(self.headers, widths))
        body = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
                for r in self.rows]
        return "\n".join([self.title, line, "-" * len(line), *body])

    def markdown(self) -> str:
        head = "| " + " | ".join(self.headers) + " |"
        numeric = [i > 0 and all(NUMERIC.match(row[i]) for row in self.rows) for i in range(len(self.headers))]
        rule = "|" + "|".join("---:" if right else ":---" for right in numeric) + "|"
        body = ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join([head, rule, *body])


def label(results: dict[str, Any], key: str) -> str:
    return results["competitors"].get(key, {}).get("label", key)


def _state(result: dict[str, Any]) -> str:
    if "error" in result:
        return " (error)"
    if not result.get("complete", True):
        return f" (unfinished: {result.get('granted', 0):,}/{result.get('n', 0):,})"
    return ""


def paired_ratio(samples: dict[str, list[float]], key: str, base: str) -> float:
    """Median over the repetitions of key's ns ÷ base's ns in the same repetition.

    The two were measured moments apart, so a spell of interference from the shared machine, which
    lasts longer than one repetition, weighs on both sides of the ratio; a ratio of medians would pit
    one competitor's disturbed repetitions against the other's quiet ones."""
    return statistics.median(a / b for a, b in zip(samples[key], samples[base], strict=True))


def uncontended_table(results: dict[str, Any]) -> Table | None:
    data = results["uncontended"]
    if not data:
        return None
    loops = list(data)
    headers = ["competitor"]
    for loop in loops:
        headers += [f"{loop} ns", f"{loop} × C floor", f"{loop} aiolimiter ÷"]
    headers += ["iterations", "spread (min-max ns)"]
    table = Table("Uncontended `async with limiter:` (ns per iteration, median of repetitions; "
                  "ratios: median of the per-repetition ratios)", headers)
    keys = [k for k in registry.ORDER if any(k in data[loop]["ns"] for loop in loops)]
    for key in keys:
        row = [label(results, key)]
        spread = []
        for loop in loops:
            samples = data[loop]["ns"].get(key)
            if not samples:
                row += ["-", "-", "-"]
                continue
            ns = data[loop]["ns"]
            row += [fmt(statistics.median(samples), 1),
                    fmt(paired_ratio(ns, key, "c-noop"), 2) if "c-noop" in ns else "-",
                    fmt(paired_ratio(ns, "aiolimiter", key), 1) if "aiolimiter" in ns else "-"]
            spread.append(f"{loop}: {min(samples):,.0f}-{max(samples):,.0f}")
        iterations = {n for loop in loops for n in data[loop]["iterations"].get(key, [])}
        row += [", ".join(f"{i:,}" for i in sorted(iterations)), "; ".join(spread)]
        table.add(*row)
    return table


def grants_table(title: str, results: dict[str, Any], scenario: str, extra: bool = False) -> Table | None:
    entries = grouped(results[scenario])
    if not entries:
        return None
    headers = ["loop", "N", "R/s", "burst", "competitor", "reps", "wall s", "rate err %", "CPU µs/grant",
               "CPU % wall", "late p50 ms", "late p99 ms", "late max ms", "steady p99 ms", "steady max ms",
               "max in 1 s / bound", "peak RSS MB", "GC s (longest ms)"]
    if extra:
        headers += ["cancelled"]
    table = Table(title, headers)
    for entry in entries:
        r = entry["result"]
        p = entry["params"]
        late = r.get("lateness_ms") or {}
        steady = r.get("steady_lateness_ms") or {}
        window = (f"{r['max_in_window']:,} / {r['window_bound']:,.0f}" if "max_in_window" in r else "-")
        row = [entry["loop"], fmt(p["n"]), fmt(p["rate"], 0), fmt(p["burst"], 0),
               label(results, entry["competitor"]) + _state(r), fmt(r.get("repetitions")),
               fmt(r.get("wall"), 2), fmt(r.get("rate_error_pct"), 3), fmt(r.get("cpu_us_per_grant"), 2),
               fmt(r.get("cpu_pct"), 0), fmt(late.get("p50"), 2), fmt(late.get("p99"), 2), fmt(late.get("max"), 1),
               fmt(steady.get("p99"), 2), fmt(steady.get("max"), 1), window, fmt(r.get("rss_peak_mb"), 0),
               _collector(r)]
        if extra:
            row.append(fmt(r.get("cancelled")))
        table.add(*row)
    return table


def _collector(result: dict[str, Any]) -> str:
    collected = result.get("gc")
    if not collected:
        return "-"
    return f"{collected['total_s']:.2f} ({collected['max_ms']:.0f})"


def mixed_table(results: dict[str, Any]) -> Table | None:
    entries = grouped(results["mixed"])
    if not entries:
        return None
    p = entries[0]["params"]
    table = Table(f"Mixed sizes: {p['n']:,} waiters, every {p['every']}th asks for {p['big']} tokens, "
                  f"the rest for 1; R={p['rate']:,.0f}/s, burst {p['burst']:,.0f}",
                  ["loop", "competitor", "big wait p50 s", "big wait p99 s", "big wait max s",
                   "big vs FIFO p50 s", "small wait p50 s", "small wait max s", "bigs after last small",
                   "wall s (ideal)", "CPU µs/grant"])
    for entry in entries:
        r = entry["result"]
        big = r.get("big_wait_s") or {}
        small = r.get("small_wait_s") or {}
        table.add(entry["loop"], label(results, entry["competitor"]) + _state(r), fmt(big.get("p50"), 3),
                  fmt(big.get("p99"), 3), fmt(big.get("max"), 3), fmt(r.get("big_delay_vs_fifo_s"), 3),
                  fmt(small.get("p50"), 3), fmt(small.get("max"), 3),
                  f"{fmt(r.get('big_after_last_small'))} / {fmt(r.get('big_count'))}",
                  f"{fmt(r.get('wall'), 2)} ({fmt(r.get('ideal_span'), 2)})", fmt(r.get("cpu_us_per_grant"), 2))
    return table


def churn_table(results: dict[str, Any]) -> Table | None:
    entries = grouped(results["churn"])
    if not entries:
        return None
    p = entries[0]["params"]
    table = Table(f"Cancellation churn: {p['n']:,} waiters at R={p['rate']:,.0f}/s (burst {p['burst']:,.0f}), "
                  f"{p['share']:.0%} of the waiters beyond the burst cancelled at random times",
                  ["loop", "competitor", "granted", "cancelled", "wall s", "rate err %", "CPU µs/grant",
                   "CPU % wall", "steady p99 ms", "peak RSS MB", "RSS growth MB", "GC s (longest ms)"])
    for entry in entries:
        r = entry["result"]
        steady = r.get("steady_lateness_ms") or {}
        table.add(entry["loop"], label(results, entry["competitor"]) + _state(r), fmt(r.get("granted")),
                  fmt(r.get("cancelled")), fmt(r.get("wall"), 2), fmt(r.get("rate_error_pct"), 3),
                  fmt(r.get("cpu_us_per_grant"), 2), fmt(r.get("cpu_pct"), 0), fmt(steady.get("p99"), 2),
                  fmt(r.get("rss_peak_mb"), 0), fmt(r.get("rss_growth_mb"), 1), _collector(r))
    return table


def classic_table(results: dict[str, Any]) -> Table | None:
    entries = grouped(results["classic"])
    if not entries:
        return None
    p = entries[0]["params"]
    table = Table(f"The classic case: {p['n']} requests at {p['rate']:.0f}/s, all at once",
                  ["burst", "loop", "competitor", "achieved /s", "rate err %", "max in any 1 s", "bound",
                   "windows over", "wall s", "late p99 ms", "CPU µs/grant"])
    for entry in entries:
        r = entry["result"]
        late = r.get("lateness_ms") or {}
        table.add(fmt(entry["params"]["burst"], 0), entry["loop"], label(results, entry["competitor"]) + _state(r),
                  fmt(r.get("achieved_rate"), 2), fmt(r.get("rate_error_pct"), 3), fmt(r.get("max_in_window")),
                  fmt(r.get("window_bound"), 0), fmt(r.get("windows_over_bound")), fmt(r.get("wall"), 2),
                  fmt(late.get("p99"), 2), fmt(r.get("cpu_us_per_grant"), 2))
    return table


def _ratio(results: dict[str, Any]) -> str:
    return f"{results['meta']['profile']['contended_paced_s'] + 1:g}"


def headline_table(results: dict[str, Any]) -> Table:
    """One row per competitor: the figures the targets are about."""
    contended = grouped(results["contended"])
    unc = results["uncontended"]
    table = Table(f"Summary (contended: burst = R, R = N/{_ratio(results)}; figures are medians over repetitions)",
                  ["competitor", "uncontended ns asyncio / uvloop", "CPU µs/grant 10k / 100k / 1M (asyncio)",
                   "p99 late ms 10k asyncio (steady)", "CPU % wall 10k uvloop", "rate err % 100k asyncio"])
    sizes = sorted({e["params"]["n"] for e in contended})
    keys = [k for k in registry.ORDER if k in results["competitors"]]
    for key in keys:
        ns = []
        for loop in ("asyncio", "uvloop"):
            samples = unc.get(loop, {}).get("ns", {}).get(key)
            ns.append(fmt(statistics.median(samples), 0) if samples else "-")
        cpu = []
        for n in (10_000, 100_000, 1_000_000):
            r = find(contended, "asyncio", key, n=n) if n in sizes else None
            cpu.append(fmt(r.get("cpu_us_per_grant"), 2) + ("*" if not r.get("complete") else "") if r else "-")
        r10 = find(contended, "asyncio", key, n=10_000) or {}
        u10 = find(contended, "uvloop", key, n=10_000) or {}
        r100 = find(contended, "asyncio", key, n=100_000) or {}
        if all(c == "-" for c in ns + cpu) and not r10 and not u10:
            continue
        late = r10.get("lateness_ms") or {}
        steady = r10.get("steady_lateness_ms") or {}
        table.add(label(results, key), " / ".join(ns), " / ".join(cpu),
                  f"{fmt(late.get('p99'), 2)} ({fmt(steady.get('p99'), 2)})", fmt(u10.get("cpu_pct"), 0),
                  fmt(r100.get("rate_error_pct"), 3))
    if any("*" in cell for row in table.rows for cell in row):
        table.note = "* unfinished within its time limit"
    return table


# ---- targets ----

def _beyond_reach(results: dict[str, Any], scenario: str, entry: dict[str, Any]) -> str | None:
    """Why no limiter could pace this run on this machine, from what the run measured; None if it could."""
    res, p, loop = entry["result"], entry["params"], entry["loop"]
    if scenario == "contended" and (res.get("cpu_pct") or 0) >= 95:
        floor = find(grouped(results["contended"]), loop, "no-limiter", n=p["n"])
        if floor and floor.get("rate_error_pct") is not None and abs(floor["rate_error_pct"]) > 0.1:
            return (f"CPU-bound: aiotb used {res['cpu_pct']:.0f} % CPU and even the no-limiter floor, which only "
                    f"sleeps to each ideal instant, reached {floor['rate_error_pct']:+.3f} % at "
                    f"{floor['cpu_pct']:.0f} % CPU")
    woke = results.get("wakeups", {}).get(loop) or {}
    if scenario == "smooth" and p["burst"] <= 1 and woke.get("wakes_per_s"):
        period_ms = 1e3 * woke["period_s"]
        share = ("burst 1 lets at most two grants share one wake-up of the loop (the token, and under one token "
                 "of credit for a late wake-up)")
        if woke["cpu_pct"] >= 95:
            return (f"{share}, and {loop} cannot time a {period_ms:g} ms sleep: it runs it at once, "
                    f"{woke['wakes_per_s']:,.0f} wake-ups/s at {woke['cpu_pct']:.0f} % CPU, which is polling, "
                    "ruled out by the CPU target; its timers have whole-millisecond resolution")
        if 2 * woke["wakes_per_s"] < p["rate"]:
            return (f"{share}, and {loop} woke a task sleeping {period_ms:g} ms only {woke['wakes_per_s']:,.0f} "
                    f"times/s, so at most {2 * woke['wakes_per_s']:,.0f} grants/s: its timers have "
                    "whole-millisecond resolution, plus latency")
    return None


WINDOW_CHECK_MAX_N = 10_000  # above this, resume stamps can trail grants by more than the bound's slack


def targets(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(target, verdict, evidence) for each target of the issue that this run measured."""
    out: list[tuple[str, str, str]] = []
    unc = results["uncontended"]

    def verdict(ok: bool | None) -> str:
        return "not measured" if ok is None else ("holds" if ok else "missed")

    for loop in ("asyncio", "uvloop"):
        ns = unc.get(loop, {}).get("ns", {})
        if "aiotb" in ns and "c-noop" in ns:
            a, f = statistics.median(ns["aiotb"]), statistics.median(ns["c-noop"])
            ratio = paired_ratio(ns, "aiotb", "c-noop")
            bare = (f"; the bare C bucket {paired_ratio(ns, 'c-bucket', 'c-noop'):.2f} ×" if "c-bucket" in ns else "")
            out.append((f"Uncontended ({loop}): aiotb ≤ 1.3 × the C no-op floor", verdict(ratio <= 1.3),
                        f"aiotb {a:.1f} ns, floor {f:.1f} ns: {ratio:.2f} ×{bare}"))
        else:
            out.append((f"Uncontended ({loop}): aiotb ≤ 1.3 × the C no-op floor", verdict(None), "no data"))
        if "aiotb" in ns and "aiolimiter" in ns:
            a, b = statistics.median(ns["aiotb"]), statistics.median(ns["aiolimiter"])
            ratio = paired_ratio(ns, "aiolimiter", "aiotb")
            out.append((f"Uncontended ({loop}): aiotb ≥ 8 × faster than aiolimiter", verdict(ratio >= 8),
                        f"aiotb {a:.1f} ns, aiolimiter {b:.1f} ns: {ratio:.1f} × faster"))
        else:
            out.append((f"Uncontended ({loop}): aiotb ≥ 8 × faster than aiolimiter", verdict(None), "no data"))

    contended = grouped(results["contended"])

    def cpu(loop: str, key: str, n: int) -> float | None:
        r = find(contended, loop, key, n=n, rate=n / 4)
        return r.get("cpu_us_per_grant") if r and r.get("complete") else None

    a, b, f = cpu("asyncio", "aiotb", 100_000), cpu("asyncio", "aiolimiter", 100_000), cpu("asyncio", "no-limiter", 100_000)
    out.append(("Contended N=100k at 25k/s (asyncio): aiotb CPU/acquisition ≤ 0.5 × aiolimiter's",
                verdict(None if a is None or b is None else a <= 0.5 * b),
                "no data" if a is None or b is None else f"aiotb {a:.2f} µs, aiolimiter {b:.2f} µs: {a / b:.2f} ×"))
    out.append(("Contended N=100k at 25k/s (asyncio): aiotb CPU/acquisition ≤ 1.2 × the no-limiter floor",
                verdict(None if a is None or f is None else a <= 1.2 * f),
                "no data" if a is None or f is None else f"aiotb {a:.2f} µs, floor {f:.2f} µs: {a / f:.2f} ×"))

    r = find(contended, "asyncio", "aiotb", n=10_000, rate=2_500.0)
    q = find(contended, "asyncio", "aiolimiter", n=10_000, rate=2_500.0)
    steady = (r or {}).get("steady_lateness_ms") or {}
    out.append(("Contended N=10k at 2.5k/s (asyncio): aiotb steady-state p99 lateness ≤ 1.5 ms",
                verdict(None if not steady else steady["p99"] <= 1.5),
                "no data" if not steady else f"p99 {steady['p99']:.2f} ms (max {steady['max']:.2f} ms)"))
    overall, theirs = (r or {}).get("lateness_ms"), (q or {}).get("lateness_ms")
    out.append(("Contended N=10k at 2.5k/s (asyncio): aiotb overall p99 (start-up included) ≤ aiolimiter's",
                verdict(None if not overall or not theirs else overall["p99"] <= theirs["p99"]),
                "no data" if not overall or not theirs
                else f"aiotb {overall['p99']:.2f} ms, aiolimiter {theirs['p99']:.2f} ms"))

    u = find(contended, "uvloop", "aiotb", n=10_000, rate=2_500.0)
    ul = find(contended, "uvloop", "aiolimiter", n=10_000, rate=2_500.0)
    out.append(("uvloop N=10k at 2.5k/s: aiotb CPU ≤ 30 % of wall",
                verdict(None if not u else u["cpu_pct"] <= 30),
                "no data" if not u else f"aiotb {u['cpu_pct']:.1f} %"
                + (f", aiolimiter {ul['cpu_pct']:.1f} %" if ul and ul.get("cpu_pct") is not None else "")))

    rate_misses, window_misses, rate_checked, window_checked = [], [], 0, 0
    out_of_reach: list[str] = []
    window_unclear: list[str] = []
    for scenario in ("contended", "smooth", "churn", "classic"):
        for entry in results[scenario]:
            if entry["competitor"] != "aiotb":
                continue
            res, p = entry["result"], entry["params"]
            where = (f"{scenario} {entry['loop']} N={p['n']:,} R={p['rate']:,.0f} burst={p['burst']:,.0f}"
                     f" rep {entry['repetition'] + 1}")
            if res.get("rate_error_pct") is not None:
                rate_checked += 1
                if abs(res["rate_error_pct"]) > 0.1 or not res.get("complete"):
                    why = _beyond_reach(results, scenario, entry) if res.get("complete") else None
                    (out_of_reach if why else rate_misses).append(
                        f"{where}: {res['rate_error_pct']:+.3f} %" + (f" ({why})" if why else ""))
            if res.get("windows_over_bound") is not None:
                if p["n"] > WINDOW_CHECK_MAX_N:
                    if res["windows_over_bound"]:
                        window_unclear.append(f"{where}: {res['max_in_window']:,} > {res['window_bound']:,.0f}")
                    continue
                window_checked += 1
                if res["windows_over_bound"]:
                    window_misses.append(f"{where}: {res['max_in_window']} in 1 s > {res['window_bound']:.0f}")
    within = rate_checked - len(rate_misses) - len(out_of_reach)
    rate_verdict = verdict(None if not rate_checked else not rate_misses)
    if rate_checked and not rate_misses and out_of_reach:
        rate_verdict = f"holds in {within} of {rate_checked}; OUT OF REACH in {len(out_of_reach)}"
    out.append(("Achieved rate within ±0.1 % of configured, every aiotb run", rate_verdict,
                f"{within} of {rate_checked} runs within"
                + ("; missed: " + "; ".join(rate_misses) if rate_misses else "")
                + ("; out of reach on this machine: " + "; ".join(out_of_reach) if out_of_reach else "")))
    floor_over = [(f"{e['loop']} N={e['params']['n']:,}: {e['result']['max_in_window']:,} > "
                   f"{e['result']['window_bound']:,.0f}")
                  for e in results["contended"] if e["competitor"] == "no-limiter"
                  and e["params"]["n"] > WINDOW_CHECK_MAX_N and e["result"].get("windows_over_bound")]
    out.append(((f"Zero 1 s windows over the token-bucket bound (burst + R × 1 s), every aiotb run with "
                 f"N ≤ {WINDOW_CHECK_MAX_N:,}"),
                verdict(None if not window_checked else not window_misses),
                f"{window_checked} runs checked; " + ("; ".join(window_misses) if window_misses else "none over")
                + ("; larger runs are not judged because a grant is stamped when its task resumes, which at "
                   "100k+ waiters can be hundreds of ms after the grant (long loop iterations, GC pauses): "
                   + (f"aiotb over the bound in {'; '.join(window_unclear)}; " if window_unclear else
                      "aiotb stayed within it anyway; ")
                   + (f"the no-limiter floor, which has no bucket at all, is over it too in {'; '.join(floor_over)}"
                      if floor_over else "the no-limiter floor stayed within it")
                   if window_unclear or floor_over else "")))

    for loop in ("asyncio", "uvloop"):
        big, small = cpu(loop, "aiotb", 1_000_000), cpu(loop, "aiotb", 10_000)
        out.append((f"1M waiters ({loop}): aiotb CPU/acquisition ≤ 1.3 × the 10k figure",
                    verdict(None if big is None or small is None else big <= 1.3 * small),
                    "no data" if big is None or small is None
                    else f"1M {big:.2f} µs, 10k {small:.2f} µs: {big / small:.2f} ×"))
    return out


def targets_table(results: dict[str, Any]) -> Table:
    table = Table("Targets", ["target", "verdict", "figures"])
    for target, verdict, evidence in targets(results):
        table.add(target, verdict.upper() if verdict == "missed" else verdict, evidence)
    return table


def tables(results: dict[str, Any]) -> list[Table]:
    found = [headline_table(results), targets_table(results), uncontended_table(results),
             grants_table("Contended: N waiters released at once, one token each, Limiter(R, 1) (burst = R), "
                          f"R = N/{_ratio(results)}", results, "contended"),
             grants_table("Smooth: burst 1 at a rate faster than the selector's 1 ms timer", results, "smooth"),
             mixed_table(results), churn_table(results),
             classic_table(results)]
    return [t for t in found if t is not None and t.rows]


def render_text(results: dict[str, Any]) -> str:
    parts = []
    for table in tables(results):
        parts.append(table.text() + (f"\n{table.note}" if table.note else ""))
    for skipped in results["skipped"]:
        parts.append(f"skipped: {skipped['competitor']} on {skipped['loop']} at N="
                     f"{', '.join(f'{n:,}' for n in skipped['sizes'])}: {skipped['why']}")
    for error in results["errors"]:
        parts.append(f"error: {error}")
    return "\n\n".join(parts)


def write(results: dict[str, Any], out: Path) -> list[Path]:
    import plots
    import results_md

    pictures = plots.draw(results, out / "plots")
    path = out / "RESULTS.md"
    path.write_text(results_md.render(results, tables(results), pictures, out))
    return [path, *pictures]
