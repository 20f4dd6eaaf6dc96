"""The layout of tuner/ keeps its shape: one import style, packages that import each other in one
direction only (lazy imports inside functions count too), and few enough rooms to read in minutes."""

from __future__ import annotations

import ast
from pathlib import Path

from ..conftest import ROOT

TUNER = ROOT / "tuner"
MAX_ROOMS = 18  # top-level packages and modules besides __init__.py (issue 28: "never more than 18")


def _imports(path: Path) -> list[tuple[int, list[str], bool]]:
    """(line, the imported module's dotted parts, written absolutely) of every import of the tuner."""
    rel = path.relative_to(ROOT).with_suffix("").parts
    package = list(rel[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            if node.module:
                found.append((node.lineno, base + node.module.split("."), False))
            else:  # from . import a, b: each name may be a module
                found += [(node.lineno, base + [a.name], False) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tuner":
            found.append((node.lineno, node.module.split("."), True))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split("."), True) for a in node.names if a.name.split(".")[0] == "tuner"]
    return found


def _room(path: Path) -> str:
    parts = path.relative_to(TUNER).parts
    return parts[0] if len(parts) > 1 else path.stem


def _graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in TUNER.rglob("*.py"):
        src = _room(path)
        for _, target, _ in _imports(path):
            if len(target) > 1 and target[1] != src:
                edges.setdefault(src, set()).add(target[1])
    return edges


def test_the_tuner_imports_itself_relatively():
    absolute = [f"{p.relative_to(ROOT)}:{line}" for p in TUNER.rglob("*.py") for line, _, is_abs in _imports(p)
                if is_abs and p.name != "__main__.py"]
    assert not absolute, f"write these as relative imports (one style in tuner/): {absolute}"


def test_packages_import_each_other_in_one_direction():
    edges = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(room: str) -> None:
        state[room] = 1
        stack.append(room)
        for nxt in sorted(edges.get(room, ())):
            if state.get(nxt) == 1:
                circles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[room] = 2

    for room in sorted(edges):
        if room not in state:
            visit(room)
    assert not circles, "import circles between packages: " + "; ".join(" -> ".join(c) for c in circles)
    assert edges.get("vocabulary", set()) == set()  # the leaf (its errors/ included)


def test_the_house_has_few_rooms():
    rooms = sorted(p.name for p in TUNER.iterdir()
                   if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.name != "__init__.py"))
    assert len(rooms) <= MAX_ROOMS, rooms
    for room in rooms:
        init = TUNER / room / "__init__.py"
        if init.exists():  # each package opens with its map
            assert ast.get_docstring(ast.parse(init.read_text())), f"tuner/{room}/__init__.py has no package map"
