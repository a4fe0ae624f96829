"""The layout shows the architecture: which part may import which, no import cycles, small modules.

DESIGN.md's rules, checked on the source: the core never imports a front end,
`api/` is pure translation, `engine/` runs in the runner and knows no server.
A new top-level part must be added to `MAY_IMPORT`, which makes its place a decision.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "spark"
MAX_LINES = 700

_BASE = {"errors", "units", "types", "json_schema"}
# part -> the parts it may import (the package root `spark` only re-exports, so anyone may use it).
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "units": {"errors"},
    "types": {"errors"},
    "json_schema": set(),
    "trace": set(),
    "events": set(),
    "settings": {"errors", "units"},
    "config_file": {"errors", "units", "settings"},
    "collect": {"errors", "types"},
    "api": _BASE,
    "engine": _BASE | {"settings"},
    "store": _BASE | {"settings", "trace"},
    "library": _BASE | {"settings", "store", "events"},
    "placement": _BASE | {"settings", "library"},
    "runners": _BASE | {"settings", "trace", "events", "engine", "library", "placement", "store"},
    "fleet": _BASE | {"settings", "trace", "events", "library", "placement", "runners", "store", "api"},
    "embedded": _BASE | {"settings", "collect", "library", "runners"},
    # `spark doctor`'s checks read everything, the running server's address file included
    "doctor": _BASE | {"settings", "library", "placement", "runners", "embedded", "server"},
    # front ends
    "server": _BASE
    | {
        "settings",
        "config_file",
        "trace",
        "events",
        "collect",
        "api",
        "library",
        "placement",
        "runners",
        "store",
        "fleet",
    },
    "tui": _BASE | {"settings", "events", "trace", "api"},
    "cli": _BASE
    | {
        "settings",
        "trace",
        "collect",
        "api",  # pure translation, as the TUI uses it: `spark run` reads a piped PDF with api.documents
        "embedded",
        "library",
        "placement",
        "runners",
        "store",
        "server",
        "tui",
        "doctor",
    },
    "__main__": {"cli"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(path: Path, modules: dict[str, Path], *, top_level_only: bool) -> set[str]:
    """The spark modules `path` imports (with `top_level_only`, those run at import time).

    `from spark.x import y` counts as importing the module `spark.x.y` when there is one, else `spark.x`.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return {n for n in found if n.startswith("spark.")}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "spark"


def test_each_part_imports_only_what_it_may() -> None:
    wrong = []
    modules = _modules()
    for module, path in sorted(modules.items()):
        part = _part(module)
        if part == "spark":
            continue
        assert part in MAY_IMPORT, f"{part} is a new part of spark: add it to MAY_IMPORT with what it may import"
        for target in sorted(_imports(path, modules, top_level_only=False)):
            other = _part(target)
            if other != part and other not in MAY_IMPORT[part]:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "imports across the layering:\n" + "\n".join(wrong)


def test_no_import_cycles() -> None:
    modules = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        graph[module] = {t for t in _imports(path, modules, top_level_only=True) if t != module}

    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for module in sorted(modules):
        if module not in state:
            visit(module)


def test_modules_stay_small() -> None:
    big = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines (split them by what they do): {big}"
