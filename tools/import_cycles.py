"""Fail when modules of a package import each other in a cycle.

import-linter's contracts look at module-level imports only; this check counts
every import: inside functions and under ``if TYPE_CHECKING:`` too, since a
cycle hidden behind a function-level import is still a cycle of concepts.
It parses each module with ``ast`` (nothing is imported or run), builds the
graph "module -> package modules it imports" (an import of a package counts
as an import of its ``__init__``; ``from p import name`` as an import of
``p.name`` when that is a module, else of ``p``) and prints every strongly connected
component of more than one module.

Usage: ``python tools/import_cycles.py kcompat`` (exit 1 when cycles exist).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(tree: ast.AST, name: str, is_package: bool, known: set[str]) -> set[str]:
    found: set[str] = set()
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = {f"{base}.{alias.name}" for alias in node.names}
            found |= names
            if not names <= known:  # names defined in the package's __init__
                found.add(base)
    return {m for m in found if m in known and m != name}


def graph(root: Path) -> dict[str, set[str]]:
    files = {module_name(root, p): p for p in root.rglob("*.py")}
    known = set(files)
    return {name: imports_of(ast.parse(path.read_text()), name, path.name == "__init__.py",
                             known)
            for name, path in files.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "kcompat").resolve()
    edges = graph(root)
    found = cycles(edges)
    for component in found:
        print(f"import cycle of {len(component)} modules:")
        members = set(component)
        for name in component:
            print(f"  {name} -> {', '.join(sorted(edges[name] & members))}")
    if not found:
        print(f"no import cycle among {len(edges)} modules of {root.name}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
