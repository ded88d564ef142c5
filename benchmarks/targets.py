"""The targets of the issue, judged from a run's raw results: (target, verdict, evidence) triples."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from results import find, grouped, paired_ratio, wakeup_probe

# Smooth (burst 1): the achieved rate's error bound per rate, %; the p99 of every grant's wake lateness, against
# the instant the bucket allowed it (scenarios._wake_lateness; the lateness against the ideal schedule is shown
# beside it); CPU as a share of wall, bounded at SMOOTH_CPU_RATES and reported at the others
SMOOTH_RATE_ERROR_PCT = {2_500.0: 0.1, 10_000.0: 0.5}
SMOOTH_P99_MS = 0.3
SMOOTH_CPU_PCT = 30.0
SMOOTH_CPU_RATES = (2_500.0,)


def beyond_reach(results: dict[str, Any], scenario: str, entry: dict[str, Any]) -> str | None:
    """Why this run could not be paced on this machine, from what the run measured; None if it could.

    Contended: CPU-bound, and even the no-limiter floor missed. Smooth (burst 1): the loop's own timer cannot
    wake a task often enough, which bounds a limiter that times its waits with it (aiotb with the precise
    timer turned off, aiolimiter), not one woken by a precise timer."""
    res, p, loop = entry["result"], entry["params"], entry["loop"]
    if scenario == "contended" and (res.get("cpu_pct") or 0) >= 95:
        floor = find(grouped(results["contended"]), loop, "no-limiter", n=p["n"])
        if floor and floor.get("rate_error_pct") is not None and abs(floor["rate_error_pct"]) > 0.1:
            return (f"CPU-bound: aiotb used {res['cpu_pct']:.0f} % CPU and even the no-limiter floor, which only "
                    f"sleeps to each ideal instant, reached {floor['rate_error_pct']:+.3f} % at "
                    f"{floor['cpu_pct']:.0f} % CPU")
    woke = wakeup_probe(results, loop, p["rate"]) or {}
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


def _smooth_targets(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The burst-1 targets for the C engine on each loop, at each rate of the profile that has one; the same
    engine with the loop's timer only is shown beside it."""
    smooth = grouped(results["smooth"])
    planned = results["meta"]["profile"]["smooth"]
    planned = [planned] if isinstance(planned, dict) else planned  # a run from when the scenario had one rate
    configs = sorted({(c["rate"], c["n"]) for c in planned if c["burst"] == 1 and c["rate"] in SMOOTH_RATE_ERROR_PCT})
    out = []
    for loop in ("asyncio", "uvloop"):
        for rate, n in configs:
            where = f"Smooth N={n:,} at {rate:,.0f}/s, burst 1 ({loop}): aiotb"
            ours = find(smooth, loop, "aiotb", n=n, rate=rate, burst=1.0)
            theirs = find(smooth, loop, "aiotb-looptimer", n=n, rate=rate, burst=1.0)
            tolerance = SMOOTH_RATE_ERROR_PCT[rate]
            bounded = rate in SMOOTH_CPU_RATES
            names = [f"{where} achieved rate within ±{tolerance:g} %",
                     f"{where} p99 wake lateness ≤ {SMOOTH_P99_MS:g} ms (each grant against the instant the "
                     "bucket allowed it)",
                     f"{where} CPU ≤ {SMOOTH_CPU_PCT:g} % of wall" if bounded
                     else f"{where} CPU % of wall (reported; no bound at this rate)"]
            if ours is None or "error" in ours:
                out += [(name, "not measured", f"error: {ours['error']}" if ours else "no data") for name in names]
                continue
            if not ours.get("complete"):
                unfinished = f"unfinished: {ours.get('granted', 0):,} of {n:,} granted within the limit"
                verdicts = ["missed", "missed", "missed" if bounded else "reported"]
                out += list(zip(names, verdicts, [unfinished] * 3))
                continue
            late, woke = ours["lateness_ms"], ours.get("wake_lateness_ms") or {"p50": math.nan, "p99": math.nan,
                                                                              "max": math.nan}
            error, cpu = ours["rate_error_pct"], ours["cpu_pct"]
            floor = find(smooth, loop, "paced-floor", n=n, rate=rate, burst=1.0)
            out.append((names[0], _smooth_rate_verdict(error, floor, tolerance),
                        f"aiotb {error:+.3f} % ({ours['achieved_rate']:,.1f}/s{_of_runs(ours)}{_steady(ours)}; the "
                        f"latest wake-up came {woke['max']:,.2f} ms after its instant)"
                        + _floor_figure(floor)
                        + _beside(theirs, lambda r: f"{r['rate_error_pct']:+.3f} % ({r['achieved_rate']:,.1f}/s)")))
            out.append((names[1], "not measured" if math.isnan(woke["p99"]) else
                        "holds" if woke["p99"] <= SMOOTH_P99_MS else "missed",
                        f"aiotb wake p99 {woke['p99']:,.3f} ms (p50 {woke['p50']:,.3f}, max {woke['max']:,.2f}); "
                        f"against the ideal schedule p99 {late['p99']:,.2f} ms"
                        + _beside(theirs, lambda r: f"wake p99 {(r.get('wake_lateness_ms') or {}).get('p99', math.nan):,.2f} ms, against "
                                                    f"the ideal schedule p99 {r['lateness_ms']['p99']:,.2f} ms")))
            out.append((names[2], ("holds" if cpu <= SMOOTH_CPU_PCT else "missed") if bounded else "reported",
                        f"aiotb {cpu:.1f} % ({ours['cpu_us_per_grant']:.2f} µs/grant)"
                        + _beside(theirs, lambda r: f"{r['cpu_pct']:.1f} % ({r['cpu_us_per_grant']:.2f} µs/grant)")))
    return out


def _smooth_rate_verdict(error: float, floor: dict[str, Any] | None, tolerance: float) -> str:
    """holds within tolerance; out of reach when the paced floor, which does no limiter's work, missed it too
    and aiotb lost at most tolerance more than it; missed otherwise."""
    if abs(error) <= tolerance:
        return "holds"
    if floor and floor.get("complete") and floor.get("rate_error_pct") is not None:
        below = floor["rate_error_pct"]
        if abs(below) > tolerance and error >= below - tolerance:
            return "out of reach on this machine"
    return "missed"


def _of_runs(result: dict[str, Any]) -> str:
    """', median of k runs' when result merges several."""
    return f", median of {result['repetitions']} runs" if result.get("repetitions", 1) > 1 else ""


def _floor_figure(floor: dict[str, Any] | None) -> str:
    """The paced floor's rate error beside aiotb's: what the loop and the machine allow a burst-1 pacer."""
    if not floor or "error" in floor or not floor.get("complete"):
        return "; paced floor: not measured" + (f" ({floor['error']})" if floor and "error" in floor else "")
    latest = (floor.get("wake_lateness_ms") or {}).get("max", math.nan)
    return (f"; paced floor (bare futures, a timerfd, no limiter) {floor['rate_error_pct']:+.3f} % "
            f"({floor['achieved_rate']:,.1f}/s{_of_runs(floor)}{_steady(floor)}; its latest wake-up came "
            f"{latest:,.2f} ms after its instant)")


def _steady(result: dict[str, Any]) -> str:
    """'; once the release is over E %', when the run lasted long enough to tell."""
    steady = result.get("steady_rate_error_pct")
    return "" if steady is None or math.isnan(steady) else f"; once the release is over {steady:+.3f} %"


def _beside(result: dict[str, Any] | None, figure: Callable[[dict[str, Any]], str]) -> str:
    """The same figure for aiotb with the loop's timer only, when that run finished."""
    if not result or "error" in result:
        return ""
    if not result.get("complete"):
        return f"; loop timer only: unfinished ({result.get('granted', 0):,} granted)"
    return f"; loop timer only: {figure(result)}"


WINDOW_CHECK_MAX_N = 10_000  # above this, resume stamps can trail grants by more than the bound's slack


def _paired_target(ns: dict[str, list[float]], loop: str, other: str, claim: str, bound: float,
                   faster: bool, name: str) -> tuple[str, str, str]:
    """aiotb against other on the median of the per-repetition ratios: other ÷ aiotb ≥ bound when faster,
    else aiotb ÷ other ≤ bound."""
    target = f"Uncontended ({loop}): {claim}"
    if "aiotb" not in ns or other not in ns:
        return target, "not measured", "no data"
    a, b = statistics.median(ns["aiotb"]), statistics.median(ns[other])
    if faster:
        ratio = paired_ratio(ns, other, "aiotb")
        return target, "holds" if ratio >= bound else "missed", _paired(a, name, b, f"{ratio:.2f} × faster")
    ratio = paired_ratio(ns, "aiotb", other)
    return target, "holds" if ratio <= bound else "missed", _paired(a, name, b, f"{ratio:.2f} ×")


def _paired(a: float, name: str, b: float, ratio: str) -> str:
    """The evidence of a paired target: each side's median, then the ratio it is judged by, which is the median of
    the per-repetition ratios (on a noisy run it differs from the ratio of the two medians)."""
    return f"medians aiotb {a:.1f} ns, {name} {b:.1f} ns; median of the paired ratios {ratio}"


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
                        _paired(a, "floor", f, f"{ratio:.2f} ×") + bare))
        else:
            out.append((f"Uncontended ({loop}): aiotb ≤ 1.3 × the C no-op floor", verdict(None), "no data"))
        if "aiotb" in ns and "aiolimiter" in ns:
            a, b = statistics.median(ns["aiotb"]), statistics.median(ns["aiolimiter"])
            ratio = paired_ratio(ns, "aiolimiter", "aiotb")
            out.append((f"Uncontended ({loop}): aiotb ≥ 8 × faster than aiolimiter", verdict(ratio >= 8),
                        _paired(a, "aiolimiter", b, f"{ratio:.1f} × faster")))
        else:
            out.append((f"Uncontended ({loop}): aiotb ≥ 8 × faster than aiolimiter", verdict(None), "no data"))
        out.append(_paired_target(ns, loop, "c-bucket", "aiotb ≤ 1.05 × the bare C bucket", 1.05, faster=False,
                                  name="bare C bucket"))
        # aiotb binds __aenter__/__aexit__ once per limiter, which the two references above do not: the
        # same two, bound the same way, say what aiotb costs over the cheapest form of the protocol
        bound_floor = _paired_target(ns, loop, "c-noop-bound", "aiotb ≤ 1.3 × the C no-op floor, methods bound once",
                                     1.3, faster=False, name="floor bound once")
        if bound_floor[1] != "not measured" and "c-bucket-bound" in ns:
            bound_floor = (*bound_floor[:2], f"{bound_floor[2]}; the bare C bucket bound once "
                                             f"{paired_ratio(ns, 'c-bucket-bound', 'c-noop-bound'):.2f} ×")
        out.append(bound_floor)
        out.append(_paired_target(ns, loop, "c-bucket-bound", "aiotb ≤ 1.05 × the bare C bucket, methods bound once",
                                  1.05, faster=False, name="bare C bucket bound once"))
        # the least a limiter that honours the running loop's clock can do: ask asyncio for it (the public way)
        asking = _paired_target(ns, loop, "c-bucket-loop-bound", "aiotb ≤ 1.05 × the bare C bucket asking for the "
                                "running loop, methods bound once", 1.05, faster=False,
                                name="that bucket asking for the running loop")
        if asking[1] != "not measured" and "c-bucket-bound" in ns:
            asking = (*asking[:2], f"{asking[2]}; asking alone costs the bare C bucket bound once "
                                   f"{paired_ratio(ns, 'c-bucket-loop-bound', 'c-bucket-bound'):.2f} ×")
        out.append(asking)
        out.append(_paired_target(ns, loop, "asynciolimiter",
                                  "aiotb ≥ 1.25 × faster than asynciolimiter (its `await limiter.wait()`)", 1.25,
                                  faster=True, name="asynciolimiter"))

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

    out += _smooth_targets(results)

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
            if res.get("rate_error_pct") is not None and scenario != "smooth":  # judged per rate above
                rate_checked += 1
                if abs(res["rate_error_pct"]) > 0.1 or not res.get("complete"):
                    why = beyond_reach(results, scenario, entry) if res.get("complete") else None
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
    out.append(("Achieved rate within ±0.1 % of configured, every aiotb run but the smooth ones (judged above)",
                rate_verdict,
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
