"""The package's layout: no circle among the imports its modules make when they run (an import only a type
checker reads, under ``if TYPE_CHECKING:``, is left out), so that a store's module never needs a limiter's; and
the table of stores that the README and the docs show is the one the code refuses from."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "aiotb"


def runtime_imports(tree: ast.Module) -> set[str]:
    """The package's modules a module imports when it runs, at the top or inside a function."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module.split(".")[0]] if node.module else [alias.name for alias in node.names])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def test_no_module_of_the_package_imports_itself_back() -> None:
    graph = {path.stem: runtime_imports(ast.parse(path.read_text())) for path in PACKAGE.glob("*.py")}
    assert {"_limiter", "_store_redis", "_redis_limiter"} <= set(graph)  # the graph was read
    circles = []
    for start in graph:
        if start == "__init__":  # the package imports its modules; they do not import it
            continue
        seen, path = set(), [start]

        def walk(module: str) -> None:
            for imported in sorted(graph.get(module, ())):
                if imported == start:
                    circles.append(" -> ".join([*path, start]))
                elif imported in graph and imported not in seen:
                    seen.add(imported)
                    path.append(imported)
                    walk(imported)
                    path.pop()

        walk(start)
    assert not circles, circles


ROOT = PACKAGE.parent.parent
# The table of stores is on the front page and on the stores' page of the docs; the reasons on the latter.
TABLES = (ROOT / "README.md", ROOT / "docs" / "guides" / "stores.md")
REASONS = ROOT / "docs" / "guides" / "stores.md"


@pytest.mark.parametrize("page", TABLES, ids=[str(page.relative_to(ROOT)) for page in TABLES])
def test_the_table_of_stores_is_the_one_the_code_refuses_from(page: Path) -> None:
    from aiotb._capabilities import FEATURES, REFUSED, STORES

    text = page.read_text()
    header = next(line for line in text.splitlines() if line.startswith("| feature |"))
    assert [cell.strip().strip("`") for cell in header.strip().strip("|").split("|")][1:] == list(STORES)
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] in FEATURES:
            rows[cells[0]] = cells[1:]
    assert list(rows) == list(FEATURES)
    for feature, cells in rows.items():
        assert cells == ["no" if (feature, store) in REFUSED else "yes" for store in STORES], feature


def test_the_reasons_of_the_table_of_stores_are_the_ones_the_code_gives() -> None:
    from aiotb._capabilities import REFUSED

    text = REASONS.read_text()
    bullets = [" ".join(bullet.split()) for bullet in re.findall(r"^- .*(?:\n  \S.*)*", text, re.M)]
    for (feature, store), reason in REFUSED.items():
        assert any(line.startswith(f"- {feature}, over ") and f"`{store}`" in line and f": {reason}." in line
                   for line in bullets), (feature, store)
