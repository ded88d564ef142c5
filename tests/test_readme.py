"""README.md, the front page and the package's description on PyPI: every runnable example runs, on the virtual
clock; its benchmark table and chart are those of the committed benchmarks/RESULTS.md; nothing in it breaks where
PyPI renders it (no relative link, no image)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import pathlib
import re

import pytest
from virtual_loop import run_virtually

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
EXAMPLES = [block for block in re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
            if "asyncio.run(main())" in block]
CHART_WIDTH = 50  # characters of the longest bar


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_readme_example_runs(example, monkeypatch):
    monkeypatch.setattr(asyncio, "run", run_virtually)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, str(README), "exec"), {"__name__": "readme"})
    assert printed.getvalue().strip()


def test_readme_has_examples():
    """Three run here (one limiter, aiolimiter's drop-in, an HTTP client); the processes' and the hosts' examples need
    a shared clock or a server, and are type-checked (tests/test_typing.py). Together they show each store."""
    assert len(EXAMPLES) >= 3
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 4
    for store in ("SharedMemoryStore(", "RedisStore(", "lease="):
        assert any(store in block for block in blocks), store


def table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def test_the_benchmark_table_is_the_committed_runs():
    """Every row of the README's benchmark table, its header included, is a row of RESULTS.md's summary."""
    results = RESULTS.read_text()
    summary = table_rows(results[results.index("## Summary"):])
    readme = README.read_text()
    section = readme[readme.index("## Benchmarks"):readme.index("```text")]
    rows = table_rows(section)
    assert len(rows) >= 5 and rows[0] == summary[0]
    missing = [row for row in rows if row not in summary]
    assert not missing, missing


def chart(names: list[str]) -> list[str]:
    """The bar chart of the uncontended ns on asyncio of names, from RESULTS.md's uncontended table."""
    rows = table_rows(RESULTS.read_text())
    start = next(i for i, row in enumerate(rows) if row.startswith("| competitor | asyncio ns |"))
    ns = {}
    for row in rows[start + 2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if not re.fullmatch(r"[\d,.]+", cells[1]):
            break
        ns[cells[0]] = cells[1]
    value = {name: float(ns[name].replace(",", "")) for name in names}
    longest = max(value.values())
    return [f"{name:<31} {ns[name]:>8} ns {'█' * max(1, round(CHART_WIDTH * value[name] / longest))}" for name in names]


def test_the_benchmark_chart_is_the_committed_runs():
    readme = README.read_text()
    drawn = re.search(r"^```text\n(.*?)^```", readme, re.S | re.M)
    assert drawn
    lines = drawn.group(1).rstrip("\n").split("\n")
    names = [re.split(r"\s{2,}", line, maxsplit=1)[0] for line in lines]
    assert "aiotb 0.1.0 (c core)" in names and "aiolimiter 1.2.1" in names
    assert lines == chart(names)


def test_nothing_breaks_on_pypi():
    """PyPI renders the README with no site beside it: every link is absolute, and there is no image."""
    readme = README.read_text()
    assert not re.search(r"!\[[^\]]*\]\(", readme), "an image"
    assert "<img" not in readme.lower()
    links = re.findall(r"(?<!!)\[[^\]]*\]\(([^)]*)\)", readme)
    relative = [link for link in links if not re.match(r"https?://", link)]
    assert not relative, relative
