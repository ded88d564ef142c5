"""The raw results of a run: what the runner records, the environment it ran in, and the lookups every
later stage uses (repetitions merged, one entry found, a competitor's label). Nothing here formats or draws."""

from __future__ import annotations

import json
import math
import os
import platform
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
        # aiotb's own switches, set for the runner and so for every child; the benchmarks' own are left out
        "aiotb_variables": {name: value for name, value in sorted(os.environ.items())
                            if name.startswith("AIOTB_") and not name.startswith("AIOTB_BENCH_")},
        "aiotb_commit": _git_commit(),
        "load_before": os.getloadavg(),
    }


def describe_competitor(competitor: Competitor) -> dict[str, Any]:
    return {"label": competitor.label, "mapping": competitor.mapping, "reference": competitor.reference,
            "context_manager": competitor.context_manager, "weighted": competitor.acquire_amount is not None,
            "environment": dict(competitor.environment)}


# ---- the raw JSON the runner keeps ----

def load_raw(path: Path) -> dict[str, Any]:
    """A run's raw results, as save_raw() wrote them."""
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def save_raw(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results))


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
                               e["params"].get("n", 0), e["params"].get("rate", 0), -e["params"].get("burst", 0),
                               order.get(e["competitor"], 99)))
    return merged


def find(entries: list[dict[str, Any]], loop: str, competitor: str, **params: Any) -> dict[str, Any] | None:
    for entry in entries:
        if entry["loop"] == loop and entry["competitor"] == competitor and all(
                entry["params"].get(k) == v for k, v in params.items()):
            return entry["result"]
    return None


def wakeup_probe(results: dict[str, Any], loop: str, rate: float) -> dict[str, Any] | None:
    """How often loop woke a task sleeping 1 / rate s at a time, probed before the smooth runs at rate; None if not."""
    probes = results.get("wakeups", {}).get(loop) or []
    if isinstance(probes, dict):  # a run from before the smooth scenario had several rates: one probe per loop
        probes = [probes]
    found: list[dict[str, Any]] = [p for p in probes if p.get("period_s") and math.isclose(p["period_s"] * rate, 1.0)]
    return found[0] if found else None


def label(results: dict[str, Any], key: str) -> str:
    return results["competitors"].get(key, {}).get("label", key)


def paired_ratio(samples: dict[str, list[float]], key: str, base: str) -> float:
    """Median over the repetitions of key's ns ÷ base's ns in the same repetition.

    The two were measured moments apart, so a spell of interference from the shared machine, which
    lasts longer than one repetition, weighs on both sides of the ratio; a ratio of medians would pit
    one competitor's disturbed repetitions against the other's quiet ones."""
    return statistics.median(a / b for a, b in zip(samples[key], samples[base], strict=True))
