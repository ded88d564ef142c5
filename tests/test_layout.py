"""The package's layout: no circle among the imports its modules make when they run (an import only a type
checker reads, under ``if TYPE_CHECKING:``, is left out), so that a store's module never needs a limiter's."""

from __future__ import annotations

import ast
from pathlib import Path

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
