"""The top of the reporting chain: a short summary for the terminal, and RESULTS.md (every table) with its plots.

results (raw results, lookups) -> targets -> tables -> plots, results_md (RESULTS.md) -> report"""

from __future__ import annotations

import statistics
import textwrap
from pathlib import Path
from typing import Any

import plots
import results_md
from results import find, grouped, paired_ratio
from tables import Table, all_tables, fmt
from targets import targets

WIDTH = 100  # columns the terminal's summary fits in
PEERS = ("aiolimiter", "asynciolimiter", "asyncio-throttle", "pyrate")  # the libraries aiotb replaces
QUICK_NOTE = ("A quick run: one short repetition of each figure, on a shared machine, so its figures and "
              "verdicts are indicative only; `./run bench` measures the full profile.")


def render_summary(results: dict[str, Any], written: list[Path]) -> str:
    """What the terminal shows (at most 100 columns): aiotb against each peer, the targets' verdicts in a line,
    what was skipped or failed, and where every table went."""
    parts = [QUICK_NOTE] if results["meta"]["profile"]["name"] == "quick" else []
    parts.append(peer_table(results).text())
    verdicts = [verdict for _, verdict, _ in targets(results)]
    parts.append(f"Targets: {verdicts.count('holds')} hold, {verdicts.count('missed')} missed, "
                 f"{len(verdicts) - verdicts.count('holds') - verdicts.count('missed')} not measured.")
    for skipped in results["skipped"]:
        parts.append(f"skipped: {skipped['competitor']} on {skipped['loop']} at N="
                     f"{', '.join(f'{n:,}' for n in skipped['sizes'])}: {skipped['why']}")
    parts += [f"error: {error}" for error in results["errors"]]
    parts.append(f"Every table and target: {shown(written[0])}; the plots: {shown(written[0].parent / 'plots')}/")
    return "\n\n".join(textwrap.fill(part, WIDTH) if "\n" not in part else part for part in parts)


def shown(path: Path) -> str:
    """path as the terminal shows it: from the working directory where it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def peer_table(results: dict[str, Any]) -> Table:
    """aiotb and each peer on asyncio: ns per uncontended ``async with`` and CPU per grant with 10,000 waiters,
    each beside the peer's ÷ aiotb's (the uncontended one paired by repetition)."""
    ns = results["uncontended"].get("asyncio", {}).get("ns", {})
    contended = grouped(results["contended"])
    table = Table("aiotb against each peer (asyncio; x aiotb: the peer's figure / aiotb's)",
                  ["", "async with, ns", "x aiotb", "CPU us a grant, 10k waiting", "x aiotb"])
    ours = find(contended, "asyncio", "aiotb", n=10_000) or {}
    for key in ("aiotb", *PEERS):
        if key != "aiotb" and key not in results["competitors"]:
            continue
        samples, cpu = ns.get(key), (find(contended, "asyncio", key, n=10_000) or {}).get("cpu_us_per_grant")
        faster = paired_ratio(ns, key, "aiotb") if samples and ns.get("aiotb") and key != "aiotb" else None
        cpu_ratio = cpu / ours["cpu_us_per_grant"] if cpu and ours.get("cpu_us_per_grant") and key != "aiotb" else None
        table.add(key, fmt(statistics.median(samples), 0) if samples else "-", fmt(faster, 1),
                  fmt(cpu, 2), fmt(cpu_ratio, 1))
    return table


def write(results: dict[str, Any], out: Path) -> list[Path]:
    pictures = plots.draw(results, out / "plots")
    path = out / "RESULTS.md"
    path.write_text(results_md.render(results, all_tables(results), pictures, out))
    return [path, *pictures]
