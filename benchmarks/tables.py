"""The run's figures as tables, each printable as text or Markdown."""

from __future__ import annotations

import re
import statistics
from typing import Any

import registry
from results import find, grouped, label, paired_ratio
from scenarios import LATE_CREDIT_TOKENS
from targets import targets


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


def _state(result: dict[str, Any]) -> str:
    if "error" in result:
        return " (error)"
    if not result.get("complete", True):
        return f" (unfinished: {result.get('granted', 0):,}/{result.get('n', 0):,})"
    return ""


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


def grants_table(title: str, results: dict[str, Any], scenario: str, extra: bool = False,
                 wake: bool = False) -> Table | None:
    entries = grouped(results[scenario])
    if not entries:
        return None
    headers = ["loop", "N", "R/s", "burst", "competitor", "reps", "wall s", "rate err %", "CPU µs/grant",
               "CPU % wall", "late p50 ms", "late p99 ms", "late max ms", "steady p99 ms", "steady max ms",
               "max in 1 s / bound", "peak RSS MB", "GC s (longest ms)"]
    if extra:
        headers += ["cancelled"]
    if wake:
        headers += ["steady rate err %", "wake p50 ms", "wake p99 ms", "wake max ms"]
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
        if wake:
            woke = r.get("wake_lateness_ms") or {}
            row += [fmt(r.get("steady_rate_error_pct"), 3), fmt(woke.get("p50"), 3), fmt(woke.get("p99"), 3),
                    fmt(woke.get("max"), 1)]
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


def smooth_table(results: dict[str, Any]) -> Table | None:
    configs = sorted({(e["params"]["rate"], e["params"]["n"]) for e in results["smooth"]})
    shown = ", ".join(f"N={n:,} at {rate:,.0f}/s (a grant every {1e3 / rate:g} ms)" for rate, n in configs)
    table = grants_table(f"Smooth: burst 1, {shown}, under the selector's 1 ms timer step; aiotb by default (its "
                         "precise timer where the platform has one) and with AIOTB_PRECISE_TIMER=0 (the loop's "
                         "timer only)", results, "smooth", wake=True)
    if table is not None:
        table.note = ("\"late\": every grant against its ideal instant, first grant + k / R, so time lost once "
                      "(a stall of the process) stays in every later grant's figure. \"wake\": every grant "
                      "against the instant the bucket allowed it, replayed over the grants made (one token "
                      "interval after the previous grant was booked; a late grant is booked up to "
                      f"{LATE_CREDIT_TOKENS:g} of a token early, the limiter's late credit): how late the limiter "
                      "woke it. \"steady rate err\": "
                      "the rate of the grants due 0.5 s or more after the first, once the release of every "
                      "waiter in one loop iteration is over. The smooth targets judge \"wake p99 ms\" and "
                      "the achieved rate of the whole run (\"rate err %\").")
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


def targets_table(results: dict[str, Any]) -> Table:
    table = Table("Targets", ["target", "verdict", "figures"])
    for target, verdict, evidence in targets(results):
        table.add(target, verdict.upper() if verdict == "missed" else verdict, evidence)
    return table


def all_tables(results: dict[str, Any]) -> list[Table]:
    found = [headline_table(results), targets_table(results), uncontended_table(results),
             grants_table("Contended: N waiters released at once, one token each, Limiter(R, 1) (burst = R), "
                          f"R = N/{_ratio(results)}", results, "contended"),
             smooth_table(results),
             mixed_table(results), churn_table(results),
             classic_table(results)]
    return [t for t in found if t is not None and t.rows]

