"""The structure of src/posenc: no import cycle among its modules.

Every ``import`` statement of every module is read from the source (with :mod:`ast`,
so that imports inside functions and under ``TYPE_CHECKING`` count too, as they are
cycles that only wait for a call or a type checker), resolved to the posenc module it
names, and the graph of those edges must have no cycle. The implicit import of a
module's parent package (``posenc.positions`` before ``posenc.positions._resolve``)
is not an edge: a package's ``__init__`` that re-exports its submodules is not a
cycle with them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import posenc

SOURCE = Path(posenc.__file__).resolve().parent


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module under ``root`` (the directory of ``package``), by dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join([package, *parts])] = path
    return found


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def imports(name: str, path: Path, known: Mapping[str, Path]) -> Iterator[str]:
    """The modules of ``known`` that the module ``name`` (at ``path``) imports, anywhere."""
    here = name if _is_package(path) else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                # `import a.b.c` imports a, a.b and a.b.c; the deepest known one counts.
                parts = alias.name.split(".")
                for depth in range(len(parts), 0, -1):
                    if ".".join(parts[:depth]) in known:
                        yield ".".join(parts[:depth])
                        break
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target not in known:
                continue
            submodules = [
                f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known
            ]
            names = [a.name for a in node.names if f"{target}.{a.name}" not in known]
            yield from submodules
            if names or not submodules:
                yield target  # names from the module itself (its __init__ for a package)


def graph(root: Path, package: str) -> dict[str, set[str]]:
    known = modules(root, package)
    return {
        name: {t for t in imports(name, path, known) if t != name} for name, path in known.items()
    }


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_among_posencs_modules() -> None:
    edges = graph(SOURCE, "posenc")
    assert "posenc.rotary" in edges
    assert "posenc.positions" in edges["posenc.rotary"]  # the reader sees real edges
    assert cycles(edges) == []


def _write(root: Path, files: Mapping[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        # The cycle posenc had (_angles <-> sinusoid), through a TYPE_CHECKING import.
        (
            {
                "__init__.py": "",
                "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from .b import X\n",
                "b.py": "from . import a\nX = 1\n",
            },
            [["pkg.a", "pkg.b"]],
        ),
        # Through a function-level import and an absolute one, over three modules.
        (
            {
                "__init__.py": "",
                "a.py": "def f():\n    from pkg.b import g\n",
                "b.py": "from .c import h\ndef g(): ...\n",
                "c.py": "import pkg.a\ndef h(): ...\n",
            },
            [["pkg.a", "pkg.b", "pkg.c"]],
        ),
        # A subpackage's module importing a sibling of its package (`..`), and back.
        (
            {
                "__init__.py": "",
                "x.py": "from .sub import _m\n",
                "sub/__init__.py": "from ._m import thing\n",
                "sub/_m.py": "from .. import x\nthing = 1\n",
            },
            [["pkg.sub._m", "pkg.x"]],
        ),
        # No cycle: a package re-exporting its submodules, which import a sibling module.
        (
            {
                "__init__.py": "from .sub import thing\n",
                "x.py": "import math\n",
                "sub/__init__.py": "from ._m import thing\n",
                "sub/_m.py": "from .. import x\nthing = 1\n",
            },
            [],
        ),
    ],
    ids=["type-checking", "function-level", "subpackage", "none"],
)
def test_the_cycle_finder_finds_cycles(
    tmp_path: Path, files: dict[str, str], expected: list[list[str]]
) -> None:
    _write(tmp_path / "pkg", files)
    assert cycles(graph(tmp_path / "pkg", "pkg")) == expected
