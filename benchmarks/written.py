"""A benchmark with a server of its own: its command line, and where its run goes (its raw results and its
report, side by side in one folder)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def write(args: argparse.Namespace, script: str, title: str, results: dict[str, Any], report: str) -> None:
    """Prints report, and writes args.out/raw.json (results) and args.out/RESULTS.md: title, the command that wrote
    it (script, the benchmark's file, run as args say), then report."""
    print(report)
    out = args.out
    command = f"python benchmarks/{Path(script).name}{' --quick' if args.quick else ''}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "raw.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "RESULTS.md").write_text(f"# {title}\n\nWritten by `{command}`.\n\n{report}")


def arguments(doc: str, out: Path) -> argparse.Namespace:
    """The command line: --quick, --out (default out), and --serve (given to the server's own process: its options)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short run: indicative only")
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    return parser.parse_args()
