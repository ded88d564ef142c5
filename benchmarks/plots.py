"""The pictures: uncontended bars, cumulative grants, CPU per grant against N, lateness distribution, and burst-1
lateness with and without aiotb's precise timer."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import registry
from matplotlib.ticker import FuncFormatter
from results import find, grouped, label
from scenarios import QUANTILES
from targets import SMOOTH_P99_MS

COLOURS = {
    "aiotb": "#d62728",
    "aiotb-looptimer": "#ff7f0e",
    "aiotb-py": "#ff9896",
    "aiolimiter": "#1f77b4",
    "asynciolimiter": "#2ca02c",
    "asyncio-throttle": "#9467bd",
    "pyrate": "#8c564b",
    "no-limiter": "#7f7f7f",
    "paced-floor": "#17becf",
    "c-noop": "#000000",
    "c-bucket": "#525252",
    "c-noop-bound": "#3a3a3a",
    "c-bucket-bound": "#737373",
    "c-bucket-loop-bound": "#969696",
    "py-noop": "#bcbd22",
    "empty-loop": "#c7c7c7",
}
STYLE = {"no-limiter": "--", "aiotb-looptimer": "-."}
FOCUS_N = 10_000  # the contended size the grant and lateness pictures show
SMOOTH_KEYS = ("aiotb", "aiotb-looptimer", "aiolimiter", "no-limiter")  # the burst-1 lateness picture


def draw(results: dict[str, Any], directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    drawn = []
    for painter in (uncontended, grants_over_time, cpu_per_grant, lateness, smooth_lateness):
        path = painter(results, directory)
        if path is not None:
            drawn.append(path)
    return drawn


def _save(figure: Any, path: Path) -> Path:
    if not figure.legends:
        figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _subtitle(results: dict[str, Any]) -> str:
    meta = results["meta"]
    return f"{meta['machine']}; {meta['python'].split(' (')[0]}; {meta['date']}"


def uncontended(results: dict[str, Any], directory: Path) -> Path | None:
    data = results["uncontended"]
    if not data:
        return None
    loops = list(data)
    keys = [k for k in registry.ORDER if any(k in data[loop]["ns"] for loop in loops)]
    figure, axis = plt.subplots(figsize=(10, 0.55 * len(keys) * len(loops) + 1.8))
    height = 0.8 / len(loops)
    hatches = {"asyncio": "", "uvloop": "//"}
    for j, loop in enumerate(loops):
        for i, key in enumerate(keys):
            samples = data[loop]["ns"].get(key)
            if not samples:
                continue
            value = statistics.median(samples)
            y = i + (j - (len(loops) - 1) / 2) * height
            axis.barh(y, value, height=height * 0.92, color=COLOURS.get(key, "#333333"), hatch=hatches.get(loop, ""),
                      edgecolor="white", label=loop if i == 0 else None)
            axis.text(value * 1.04, y, f"{value:,.0f} ns ({loop})", va="center", fontsize=8)
    floors = [statistics.median(data[loop]["ns"]["c-noop"]) for loop in loops if "c-noop" in data[loop]["ns"]]
    if floors:
        axis.axvline(min(floors), color="black", linewidth=0.8, linestyle=":", label="C no-op floor")
    axis.set_yticks(range(len(keys)), [label(results, k) for k in keys], fontsize=9)
    axis.invert_yaxis()
    axis.set_xscale("log")
    axis.set_xlabel("ns per `async with limiter:` iteration (median; log scale)")
    axis.set_title(f"Uncontended acquire, tokens always available (plain bars: asyncio, hatched: uvloop)\n"
                   f"{_subtitle(results)}", fontsize=10)
    axis.set_xlim(right=axis.get_xlim()[1] * 4)
    axis.legend(loc="lower right", fontsize=8)
    axis.grid(axis="x", alpha=0.3, which="both")
    return _save(figure, directory / "uncontended.png")


def grants_over_time(results: dict[str, Any], directory: Path) -> Path | None:
    entries = grouped(results["contended"])
    loops = [loop for loop in ("asyncio", "uvloop") if find(entries, loop, "aiotb", n=FOCUS_N)]
    if not loops:
        return None
    figure, axes = plt.subplots(2, len(loops), figsize=(6.5 * len(loops), 8), squeeze=False,
                                gridspec_kw={"height_ratios": [3, 2]})
    for column, loop in enumerate(loops):
        top, bottom = axes[0][column], axes[1][column]
        rate = burst = None
        for key in ("aiotb", "aiolimiter", "no-limiter"):
            r = find(entries, loop, key, n=FOCUS_N)
            if not r or not r.get("curve"):
                continue
            rate, burst = r["rate"], r["burst"]
            t = [p[0] for p in r["curve"]]
            k = [p[1] for p in r["curve"]]
            ideal = [min(FOCUS_N, burst + rate * x) for x in t]
            style = STYLE.get(key, "-")
            top.plot(t, k, style, color=COLOURS[key], label=label(results, key), linewidth=1.3)
            bottom.plot(t, [a - b for a, b in zip(k, ideal)], style, color=COLOURS[key], linewidth=1.1,
                        label=label(results, key))
        if rate is None:
            continue
        span = (FOCUS_N - burst) / rate
        top.plot([0, span, span * 1.05], [burst, FOCUS_N, FOCUS_N], ":", color="black", linewidth=1, label="ideal")
        top.set_title(f"{loop}: N={FOCUS_N:,} waiters, R={rate:,.0f}/s, burst {burst:,.0f}", fontsize=10)
        top.set_ylabel("cumulative grants")
        top.set_xlabel("seconds since the first grant")
        top.legend(fontsize=8, loc="lower right")
        top.grid(alpha=0.3)
        bottom.axhline(0, color="black", linewidth=0.8, linestyle=":")
        bottom.set_yscale("symlog", linthresh=10)
        bottom.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        bottom.set_ylabel("grants − ideal (symlog; negative: behind)")
        bottom.set_xlabel("seconds since the first grant")
        bottom.grid(alpha=0.3)
        bottom.legend(fontsize=8)
    figure.suptitle(f"Contended: cumulative grants against the ideal bucket schedule\n{_subtitle(results)}",
                    fontsize=11)
    return _save(figure, directory / "contended_grants.png")


def cpu_per_grant(results: dict[str, Any], directory: Path) -> Path | None:
    entries = grouped(results["contended"])
    if not entries:
        return None
    loops = [loop for loop in ("asyncio", "uvloop") if any(e["loop"] == loop for e in entries)]
    figure, axes = plt.subplots(1, len(loops), figsize=(6.5 * len(loops), 6), squeeze=False, sharey=True)
    for column, loop in enumerate(loops):
        axis = axes[0][column]
        for key in registry.ORDER:
            points = [(e["params"]["n"], e["result"]) for e in entries if e["loop"] == loop and e["competitor"] == key]
            points = [(n, r) for n, r in points if r.get("cpu_us_per_grant")]
            if not points:
                continue
            points.sort(key=lambda p: p[0])
            xs = [n for n, _ in points]
            ys = [r["cpu_us_per_grant"] for _, r in points]
            axis.plot(xs, ys, STYLE.get(key, "-"), marker="o", color=COLOURS.get(key), label=label(results, key))
            for n, r in points:
                if not r.get("complete"):
                    axis.annotate("unfinished", (n, r["cpu_us_per_grant"]), fontsize=7, xytext=(4, 4),
                                  textcoords="offset points")
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ratio = entries[0]["params"]["n"] / entries[0]["params"]["rate"]
        axis.set_xlabel(f"N waiters (log scale; R = N/{ratio:g} per second, burst R)")
        axis.set_ylabel("CPU µs per acquisition (process time / N, log scale)")
        axis.set_title(f"{loop}", fontsize=10)
        axis.grid(alpha=0.3, which="both")
    _legend_below(figure, axes)
    figure.suptitle(f"Contended: CPU per acquisition against N\n{_subtitle(results)}", fontsize=11)
    return _save(figure, directory / "cpu_per_grant.png")


def _legend_below(figure: Any, axes: Any) -> None:
    """One legend for every panel, under them."""
    seen: dict[str, Any] = {}
    for axis in axes.flat:
        for handle, text in zip(*axis.get_legend_handles_labels()):
            seen.setdefault(text, handle)
    figure.legend(list(seen.values()), list(seen), loc="lower center", ncol=min(4, len(seen)), fontsize=9,
                  frameon=False)
    rows = 1 + (len(seen) - 1) // 4
    figure.tight_layout(rect=(0, (0.3 + 0.25 * rows) / figure.get_figheight(), 1,
                              1 - 0.75 / figure.get_figheight()))


def lateness(results: dict[str, Any], directory: Path) -> Path | None:
    entries = grouped(results["contended"])
    loops = [loop for loop in ("asyncio", "uvloop") if any(e["loop"] == loop and e["params"]["n"] == FOCUS_N
                                                            for e in entries)]
    if not loops:
        return None
    figure, axes = plt.subplots(len(loops), 2, figsize=(13, 4.6 * len(loops)), squeeze=False)
    for row, loop in enumerate(loops):
        for column, (field, what) in enumerate((("lateness_quantiles_ms", "all waiters, start-up included"),
                                                ("steady_quantiles_ms", "steady state (due ≥ 0.5 s after first grant)"))):
            axis = axes[row][column]
            rate = None
            for key in registry.ORDER:
                r = find(entries, loop, key, n=FOCUS_N)
                if not r or not r.get(field):
                    continue
                rate = r["rate"]
                axis.plot(r[field], QUANTILES, STYLE.get(key, "-"), color=COLOURS.get(key), label=label(results, key),
                          linewidth=1.3)
            axis.set_xscale("symlog", linthresh=0.1)
            axis.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_xlabel("wake lateness against the ideal schedule, ms (symlog)")
            axis.set_ylabel("percentile of waiters")
            axis.axhline(99, color="black", linewidth=0.6, linestyle=":")
            axis.set_ylim(0, 100.5)
            title = f"{loop}, N={FOCUS_N:,}" + (f", R={rate:,.0f}/s" if rate else "") + f": {what}"
            axis.set_title(title, fontsize=10)
            axis.grid(alpha=0.3, which="both")
    _legend_below(figure, axes)
    figure.suptitle(f"Contended: distribution of wake lateness (dotted line: p99)\n{_subtitle(results)}", fontsize=11)
    return _save(figure, directory / "lateness.png")


def smooth_lateness(results: dict[str, Any], directory: Path) -> Path | None:
    """Burst 1: the distribution of every grant's wake lateness (against the instant the bucket allowed it), aiotb
    with and without its precise timer, one panel per loop and rate."""
    entries = [e for e in grouped(results["smooth"]) if e["competitor"] in SMOOTH_KEYS
               and e["result"].get("wake_quantiles_ms")]
    loops = [loop for loop in ("asyncio", "uvloop") if any(e["loop"] == loop for e in entries)]
    if not loops:
        return None
    configs = sorted({(e["params"]["rate"], e["params"]["n"]) for e in entries})
    figure, axes = plt.subplots(len(loops), len(configs), figsize=(max(12.0, 6.5 * len(configs)), 4.6 * len(loops)),
                                squeeze=False)
    for row, loop in enumerate(loops):
        for column, (rate, n) in enumerate(configs):
            axis = axes[row][column]
            earliest = 0.0
            for key in SMOOTH_KEYS:
                r = find(entries, loop, key, n=n, rate=rate)
                if not r:
                    continue
                earliest = min(earliest, r["wake_quantiles_ms"][0])
                axis.plot(r["wake_quantiles_ms"], QUANTILES, STYLE.get(key, "-"), color=COLOURS.get(key),
                          label=label(results, key) + ("" if r.get("complete") else " (unfinished)"), linewidth=1.3)
            axis.axvline(SMOOTH_P99_MS, color="black", linewidth=0.8, linestyle=":",
                         label=f"target: p99 ≤ {SMOOTH_P99_MS:g} ms")
            axis.axhline(99, color="black", linewidth=0.6, linestyle=":")
            axis.set_xscale("symlog", linthresh=0.1)
            axis.set_xlim(left=min(-0.1, 2 * earliest))
            axis.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_xlabel("wake lateness: each grant against the instant the bucket allowed it, ms (symlog)")
            axis.set_ylabel("percentile of grants")
            axis.set_ylim(0, 100.5)
            axis.set_title(f"{loop}: N={n:,}, R={rate:,.0f}/s, burst 1 (a grant every {1e3 / rate:g} ms)", fontsize=10)
            axis.grid(alpha=0.3, which="both")
    _legend_below(figure, axes)
    figure.suptitle("Smooth (burst 1): wake lateness of every grant (dotted: p99 and its target), aiotb by default\n"
                    f"(precise timer) and with AIOTB_PRECISE_TIMER=0 (loop timer only)\n{_subtitle(results)}",
                    fontsize=11)
    return _save(figure, directory / "smooth_lateness.png")
