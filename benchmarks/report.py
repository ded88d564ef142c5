"""The top of the reporting chain: the tables as text, and RESULTS.md with its plots.

results (raw results, lookups) -> targets -> tables -> plots, results_md (RESULTS.md) -> report"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plots
import results_md
from tables import all_tables


def render_text(results: dict[str, Any]) -> str:
    parts = []
    for table in all_tables(results):
        parts.append(table.text() + (f"\n{table.note}" if table.note else ""))
    for skipped in results["skipped"]:
        parts.append(f"skipped: {skipped['competitor']} on {skipped['loop']} at N="
                     f"{', '.join(f'{n:,}' for n in skipped['sizes'])}: {skipped['why']}")
    for error in results["errors"]:
        parts.append(f"error: {error}")
    return "\n\n".join(parts)


def write(results: dict[str, Any], out: Path) -> list[Path]:
    pictures = plots.draw(results, out / "plots")
    path = out / "RESULTS.md"
    path.write_text(results_md.render(results, all_tables(results), pictures, out))
    return [path, *pictures]
