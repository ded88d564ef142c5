"""MkDocs hooks: the committed benchmark runs come into the site at build time, never copied into docs/.

A page line ``<!-- run benchmarks/threads/RESULTS.md -->`` becomes that file's text, its headings one level down
and its plots pointed at their place in the site. A line ``<!-- plot benchmarks/plots/lateness.png -->`` becomes
the plot with a caption naming its run: the RESULTS.md beside its ``plots/`` folder, with the run's date and the
commit of the engine it measured where the file says them. The plots are added to the site at their paths in the
repository (``benchmarks/...``)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PLOTS = ("benchmarks/plots/*.png", "benchmarks/uncontended/python3.*/plots/*.png")
RUN = re.compile(r"^<!-- run (\S+) -->$", re.M)
PLOT = re.compile(r"^<!-- plot (\S+) -->$", re.M)


def plots() -> list[str]:
    """Every committed plot, as a path from the repository's root."""
    return sorted(path.relative_to(ROOT).as_posix() for pattern in PLOTS for path in ROOT.glob(pattern))


def run_of(plot: str) -> str:
    """The results file of the run that drew plot (``.../plots/x.png`` -> ``.../RESULTS.md``)."""
    return f"{plot.rsplit('/plots/', 1)[0]}/RESULTS.md"


def describe(results: str) -> str:
    """The run of a results file in a few words: its file, when it ran and the engine's commit, where it says."""
    text = (ROOT / results).read_text()
    words = [f"`{results}`"]
    when = re.search(r" on (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC)", text)
    if when:
        words.append(f"run on {when.group(1)}")
    commit = re.search(r"commit ([0-9a-f]{7,40})", text)
    if commit:
        words.append(f"aiotb at commit {commit.group(1)}")
    elif "commit: the one that adds this file" in text:
        words.append("aiotb at the commit that added the file")
    python = re.search(r"Python:? (?:CPython )?(3\.\d+\.\d+)", text)
    if python:
        words.append(f"Python {python.group(1)}")
    return ", ".join(words)


def figure(plot: str, page_dir: str) -> str:
    """Markdown for plot, seen from a page in page_dir, with its caption naming the run it came from."""
    name = plot.rsplit("/", 1)[1].removesuffix(".png").replace("_", " ")
    return (f"![{name}]({os.path.relpath(plot, page_dir or '.')})\n\n"
            f"*Figure: {name}, from the run of {describe(run_of(plot))}.*\n")


def include(results: str, page_dir: str) -> str:
    """A results file's text for a page: headings one level down, plots as figures that name their run."""
    text = (ROOT / results).read_text()
    folder = results.rsplit("/", 1)[0]
    text = re.sub(r"^(#+) ", r"#\1 ", text, flags=re.M)
    text = re.sub(r"^!\[[^\]]*\]\(([^)]+)\)$", lambda m: figure(f"{folder}/{m.group(1)}", page_dir), text,
                  flags=re.M)
    return f"*This page is `{results}`, as committed: {describe(results)}.*\n\n{text}"


def on_files(files: Any, config: Any) -> Any:
    """Adds every committed plot to the site, at its path in the repository."""
    from mkdocs.structure.files import File

    for plot in plots():
        files.append(File(plot, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Puts the committed runs and plots in place of their markers."""
    page_dir = os.path.dirname(page.file.src_uri)
    markdown = RUN.sub(lambda m: include(m.group(1), page_dir), markdown)
    return PLOT.sub(lambda m: figure(m.group(1), page_dir), markdown)
