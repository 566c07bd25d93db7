"""Each docs page's blocks print what the page shows whatever the random state before them.

``nox -s docs`` runs the pages' ``.. doctest::`` blocks in one process, page after page,
so a block that prints random numbers it did not seed prints what the blocks before it
left in the generator: right in the build, wrong for a reader who runs the block alone.
Here each page runs in a fresh interpreter (``tests/page_blocks.py``), its blocks in
order and grouped as ``sphinx.ext.doctest`` groups them, with the flags and the global
setup of ``docs/conf.py``, and torch's, NumPy's and Python's generators draw a different
number of values before every block. A failure names the page, the line and the
difference.
"""

from __future__ import annotations

import ast
import doctest
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import posenc

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RUNNER = Path(__file__).resolve().parent / "page_blocks.py"
GENERATED = ("_build", "auto_examples", "gen_modules", "locales", "_ext", "_templates")

DIRECTIVE = re.compile(
    r"^(?P<indent>[ \t]*)\.\. (?P<type>doctest|testsetup|testcode|testoutput|testcleanup)::"
    r"[ \t]*(?P<groups>.*)$"
)
OPTION = re.compile(r"^[ \t]*:(?P<name>[\w-]+):[ \t]*(?P<value>.*)$")
# What sphinx.ext.doctest's directives take that only changes how a block is shown.
SHOWN_ONLY = {"hide", "trim-doctest-flags", "no-trim-doctest-flags"}


def conf_values() -> dict[str, Any]:
    """``doctest_default_flags``, ``doctest_global_setup`` and ``_cleanup`` of docs/conf.py.

    Read from its syntax tree: importing conf.py needs the docs' own packages.
    """
    values: dict[str, Any] = {
        "doctest_default_flags": doctest.ELLIPSIS
        | doctest.IGNORE_EXCEPTION_DETAIL
        | doctest.DONT_ACCEPT_TRUE_FOR_1,  # sphinx.ext.doctest's default
        "doctest_global_setup": "",
        "doctest_global_cleanup": "",
        "doctest_test_doctest_blocks": "default",
    }
    tree = ast.parse((DOCS / "conf.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in values:
                    expression = ast.Expression(node.value)  # type: ignore[arg-type]
                    code = compile(expression, "conf.py", "eval")
                    values[target.id] = eval(code, {"doctest": doctest})
    return values


def option_flags(value: str) -> dict[str, bool]:
    flags = {}
    for option in value.replace(",", " ").split():
        assert option[0] in "+-", option
        assert option[1:] in doctest.OPTIONFLAGS_BY_NAME, option
        flags[option[1:]] = option[0] == "+"
    return flags


def blocks(path: Path) -> list[dict[str, Any]]:
    """The page's test blocks in order: type, groups, options, source, first line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    i = 0
    while i < len(lines):
        match = DIRECTIVE.match(lines[i])
        i += 1
        if match is None:
            continue
        indent = len(match["indent"])
        groups = [g.strip() for g in match["groups"].split(",")] if match["groups"] else []
        options: dict[str, bool] = {}
        while i < len(lines) and (option := OPTION.match(lines[i])):
            name, value = option["name"], option["value"]
            if name == "options":
                options.update(option_flags(value))
            else:  # :skipif:, :pyversion:: not used by the pages, so not read here
                assert name in SHOWN_ONLY, f"{path.name}:{i + 1}: :{name}: is not read here"
            i += 1
        body = []
        start = None
        while i < len(lines):
            line = lines[i]
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                break
            if start is None and line.strip():
                start = i + 1  # 1-based line of the block's first line of code
            if start is not None:
                body.append(line)
            i += 1
        source = textwrap.dedent("\n".join(body)).strip("\n") + "\n"
        found.append(
            {
                "type": match["type"],
                "groups": groups or ["default"],
                "options": options,
                "source": source,
                "line": start or i,
            }
        )
    return found


def page_groups(path: Path, conf: dict[str, Any]) -> list[dict[str, Any]]:
    """The groups as sphinx.ext.doctest's ``test_doc`` forms them, in the same order."""
    groups: dict[str, dict[str, Any]] = {}
    to_all = []
    for block in blocks(path):
        if "*" in block["groups"]:
            to_all.append(block)
            continue
        for name in block["groups"]:
            empty = {"name": name, "setup": [], "tests": [], "cleanup": []}
            group = groups.setdefault(name, empty)
            add(group, block)
    for block in to_all:
        for group in groups.values():
            add(group, block)
    for group in groups.values():
        if conf["doctest_global_setup"]:
            group["setup"].insert(0, {"source": conf["doctest_global_setup"], "line": 0})
        if conf["doctest_global_cleanup"]:
            group["cleanup"].append({"source": conf["doctest_global_cleanup"], "line": 0})
    return list(groups.values())


def add(group: dict[str, Any], block: dict[str, Any]) -> None:
    kind = block["type"]
    if kind == "testsetup":
        group["setup"].append(block)
    elif kind == "testcleanup":
        group["cleanup"].append(block)
    elif kind in ("doctest", "testcode"):
        group["tests"].append([block])
    elif group["tests"] and group["tests"][-1][0]["type"] == "testcode":  # testoutput
        group["tests"][-1][1:] = [block]


def pages() -> list[Path]:
    found = []
    for path in sorted(DOCS.rglob("*.rst")):
        if set(path.relative_to(DOCS).parts) & set(GENERATED):
            continue
        if any(block["type"] != "testoutput" for block in blocks(path)):
            found.append(path)
    return found


PAGES = pages()


def test_the_pages_are_found() -> None:
    names = {str(path.relative_to(DOCS)) for path in PAGES}
    assert {"seeds.rst", "guide/rotary.rst", "guide/hf.rst", "guide/bias.rst"} <= names
    # the parser sees every block the pages have
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        directives = re.findall(r"^\s*\.\. (?:test\w+|doctest)::", text, re.M)
        assert len(blocks(path)) == len(directives), path


def run(path: Path, tmp_path: Path) -> list[dict[str, Any]]:
    conf = conf_values()
    assert conf["doctest_test_doctest_blocks"] == "", "plain >>> blocks are tested too: read them"
    page = {
        "name": str(path.relative_to(ROOT)),
        "flags": conf["doctest_default_flags"],
        "groups": page_groups(path, conf),
    }
    return run_groups(page, tmp_path)


def run_groups(page: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    """Run ``page``'s groups in a fresh interpreter (``tests/page_blocks.py``)."""
    (tmp_path / "page.json").write_text(json.dumps(page), encoding="utf-8")
    result = tmp_path / "result.json"
    env = dict(os.environ)
    # the posenc under test, wherever the suite imports it from
    src = str(Path(posenc.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(tmp_path / "page.json"), str(result)],
        cwd=ROOT,  # where `nox -s docs` runs sphinx-build
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    failures: list[dict[str, Any]] = json.loads(result.read_text(encoding="utf-8"))
    return failures


def report(path: Path, failures: list[dict[str, Any]]) -> str:
    name = path.relative_to(ROOT)
    return "\n".join(
        f"{name}:{f['line']}: {f['source'].strip()}\n{textwrap.indent(f['diff'], '    ')}"
        for f in failures
    )


@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_page_blocks_print_what_the_page_shows(path: Path, tmp_path: Path) -> None:
    failures = run(path, tmp_path)
    assert not failures, report(path, failures)


def readme_sections() -> list[dict[str, Any]]:
    """The README's ``python`` blocks with prompts, one group per ``###`` section."""
    groups: list[dict[str, Any]] = []
    name = "top"
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("#"):
            name = line.lstrip("#").strip()
        if line != "```python":
            continue
        start, body = i + 1, []
        while lines[i] != "```":
            body.append(lines[i])
            i += 1
        if not groups or groups[-1]["name"] != name:
            groups.append({"name": name, "setup": [], "tests": [], "cleanup": []})
        block = {"type": "doctest", "options": {}, "source": "\n".join(body) + "\n"}
        groups[-1]["tests"].append([{**block, "line": start}])
    return groups


def test_readme_sections_each_run_alone(tmp_path: Path) -> None:
    """Each section of the README in a namespace of its own, the random state disturbed.

    pytest runs the README as one doctest (``--doctest-glob``), from a fixed seed; here
    each ``###`` section must run without the others, whatever was drawn before.
    """
    groups = readme_sections()
    assert len(groups) >= 4, [group["name"] for group in groups]
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE  # pyproject's, less pytest's NUMBER
    page = {"name": "README.md", "flags": flags, "groups": groups}
    failures = run_groups(page, tmp_path)
    assert not failures, report(ROOT / "README.md", failures)


SYNTHETIC = """\
A page
======

.. doctest::

   >>> import torch
   >>> _ = torch.manual_seed(0)
   >>> print(f"{torch.rand(1).item():.4f}")
   0.4963

.. doctest::

   >>> print(f"{torch.rand(1).item():.4f}")  # not seeded: what the first block left
   0.7682

.. testcode:: other

   import random
   random.seed(1)
   print(random.random())

.. testoutput:: other
   :options: +ELLIPSIS

   0.1343...
"""


def test_an_unseeded_block_fails_with_its_line(tmp_path: Path) -> None:
    """Run in order without disturbance the page passes; the runner finds its one flaw."""
    page_file = tmp_path / "page.rst"
    page_file.write_text(SYNTHETIC, encoding="utf-8")
    groups = page_groups(page_file, conf_values())
    assert [(g["name"], len(g["tests"])) for g in groups] == [("default", 2), ("other", 1)]
    assert [len(test) for test in groups[1]["tests"]] == [2]  # testcode with its output
    page = {"name": "page.rst", "flags": conf_values()["doctest_default_flags"], "groups": groups}
    failures = run_groups(page, tmp_path)
    assert [f["line"] for f in failures] == [13], failures
    assert "Expected:\n    0.7682\nGot:" in failures[0]["diff"]
