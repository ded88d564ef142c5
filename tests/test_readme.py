"""Every runnable example in README.md runs, on the virtual clock."""

from __future__ import annotations

import asyncio
import contextlib
import io
import pathlib
import re

import pytest
from virtual_loop import run_virtually

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
EXAMPLES = [block for block in re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
            if "asyncio.run(main())" in block]


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_readme_example_runs(example, monkeypatch):
    monkeypatch.setattr(asyncio, "run", run_virtually)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, str(README), "exec"), {"__name__": "readme"})
    assert printed.getvalue().strip()


def test_readme_has_examples():
    assert len(EXAMPLES) >= 3
