"""Render the saved trained comparison (``benchmarks/results/train-cpu.json``), at build time.

Every number of the "What the schemes do when trained" page comes from the JSON file that
``nox -s train`` writes; the page holds none of them. Five markups:

- ``.. train-status::`` — a note saying whether the file holds the whole run or part;
- ``.. train-table::`` — the loss of each scheme at 1, 2, 4 and 8 x L_train: the mean over
  the seeds, the seeds' range (min–max) below it; ``:past:`` for the loss over the tokens
  past L_train only; ``:schemes:`` to choose and order the rows;
- ``:train:`SCHEME MULTIPLE STAT``` — one figure inline: STAT is ``mean``, ``range``,
  ``past`` (the mean over the tokens past L_train) or ``spread`` (max - min over seeds);
- ``:train-info:`dotted.key``` — a value of the run (``training.steps``, ``data.sha256``);
- ``.. train-check::`` — claims of the prose, one a line, checked against the file; the
  build fails if the file contradicts one. It renders nothing. The claims:

  ``flat S A B TOL``     every seed of S: ``|loss[B] - loss[A]| <= TOL``
  ``worse S A B MIN``    every seed of S: ``loss[B] - loss[A] >= MIN``
  ``below S T M``        at M, the seeds' ranges separate, S's under T's
  ``overlap S T M``      at M, the seeds' ranges of S and T overlap
  ``near S T M TOL``     at M, the means of S and T within TOL
  ``refused S M``        S has no loss at M (null in every run)

The file is ``train_results_file`` in conf.py, relative to the docs directory.
"""

from __future__ import annotations

import json
import statistics
from functools import reduce
from pathlib import Path
from typing import Any

from bench_results import cell  # _ext/ is on the path (docs/conf.py)
from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective, SphinxRole

MULTIPLES = ("1", "2", "4", "8")


def _load(env: Any) -> dict[str, Any]:
    path = (Path(env.app.confdir) / env.config.train_results_file).resolve()
    env.note_dependency(str(path))
    results: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return results


def losses(results: dict[str, Any], scheme: str, multiple: str, key: str = "loss") -> list[Any]:
    """The loss of every seed's run of ``scheme`` at ``multiple`` (None where refused)."""
    runs = [run for run in results["runs"] if run["scheme"] == scheme]
    if not runs:
        raise ExtensionError(f"train results: no run of scheme {scheme!r}")
    if multiple not in MULTIPLES:
        raise ExtensionError(f"train results: multiple {multiple!r} is not one of {MULTIPLES}")
    return [run[key].get(multiple) for run in runs]


def _finite(values: list[Any], what: str) -> list[float]:
    if any(value is None for value in values):
        raise ExtensionError(f"train results: {what} has no loss (null)")
    return [float(value) for value in values]


def figure(results: dict[str, Any], scheme: str, multiple: str, stat: str) -> str:
    key = "loss_past" if stat == "past" else "loss"
    values = losses(results, scheme, multiple, key)
    if all(value is None for value in values):
        return "n/a"
    found = _finite(values, f"{scheme} at {multiple}x")
    if stat in ("mean", "past"):
        return f"{statistics.fmean(found):.3f}"
    if stat == "range":
        return f"{min(found):.3f}–{max(found):.3f}"
    if stat == "spread":
        return f"{max(found) - min(found):.3f}"
    raise ExtensionError(f"train results: unknown figure {stat!r}: mean, range, past, spread")


def check(results: dict[str, Any], claim: str) -> None:
    """Raise if the run contradicts ``claim`` (see the module's docstring)."""
    kind, *args = claim.split()

    def loss(scheme: str, multiple: str) -> list[float]:
        return _finite(losses(results, scheme, multiple), f"{scheme} at {multiple}x")

    if kind in ("flat", "worse") and len(args) == 4:
        scheme, a, b, bound = args
        gaps = [y - x for x, y in zip(loss(scheme, a), loss(scheme, b), strict=True)]
        holds = (
            all(abs(gap) <= float(bound) for gap in gaps)
            if kind == "flat"
            else all(gap >= float(bound) for gap in gaps)
        )
        found = ", ".join(f"{gap:+.3f}" for gap in gaps)
    elif kind in ("below", "overlap") and len(args) == 3:
        first, second, multiple = args
        x, y = loss(first, multiple), loss(second, multiple)
        separate = max(x) < min(y)
        apart = max(x) < min(y) or max(y) < min(x)
        holds = separate if kind == "below" else not apart
        found = f"{min(x):.3f}–{max(x):.3f} and {min(y):.3f}–{max(y):.3f}"
    elif kind == "near" and len(args) == 4:
        first, second, multiple, bound = args
        x, y = statistics.fmean(loss(first, multiple)), statistics.fmean(loss(second, multiple))
        holds = abs(x - y) <= float(bound)
        found = f"means {x:.3f} and {y:.3f}"
    elif kind == "refused" and len(args) == 2:
        values = losses(results, *args)
        holds = all(value is None for value in values)
        found = repr(values)
    else:
        raise ExtensionError(f"train-check: cannot read the claim {claim!r}")
    if not holds:
        raise ExtensionError(f"train-check: the saved run contradicts {claim!r}: {found}")


Where = tuple[str, int]  # the page (source file) and line a directive stands on


def words(node: nodes.TextElement, where: Where) -> nodes.TextElement:
    """``node``'s text made a message of its page: translated in Korean and Japanese.

    Sphinx translates a text node only when it knows the node's source; a number or a
    range is left as it is.
    """
    node.rawsource = node.astext()
    node.source, node.line = where
    return node


def text_cell(text: str, where: Where) -> nodes.entry:
    entry = nodes.entry()
    entry += words(nodes.paragraph(text, text), where)
    return entry


def table(results: dict[str, Any], schemes: list[str], past: bool, where: Where) -> nodes.table:
    l_train = results["training"]["L_train"]
    multiples = MULTIPLES[1:] if past else MULTIPLES
    heads = [f"{m}× ({int(m) * l_train})" for m in multiples]
    out = nodes.table(classes=["bench-table"])
    what = "past L_train only" if past else "all tokens"
    title = f"Validation loss, nats per byte, {what}: the seeds' mean and range"
    out += words(nodes.title(title, title), where)
    group = nodes.tgroup(cols=len(heads))
    out += group
    for width in [34, 6] + [12] * len(multiples):
        group += nodes.colspec(colwidth=width)
    thead = nodes.thead()
    row = nodes.row()
    row += text_cell("scheme", where)
    row += text_cell("seeds", where)
    for head in heads:
        row += cell(head)
    thead += row
    group += thead
    body = nodes.tbody()
    for scheme in schemes:
        row = nodes.row()
        row += text_cell(results["labels"][scheme], where)
        row += cell(str(len(seeds_of(results, scheme))))
        for m in multiples:
            key = "loss_past" if past else "loss"
            values = losses(results, scheme, m, key)
            if all(value is None for value in values):
                refused = text_cell("n/a", where)
                refused += words(nodes.paragraph("refused", "refused"), where)
                row += refused
                continue
            found = _finite(values, f"{scheme} at {m}x")
            row += cell(f"{statistics.fmean(found):.3f}", f"{min(found):.3f}–{max(found):.3f}")
        body += row
    group += body
    return out


def seeds_of(results: dict[str, Any], scheme: str) -> list[int]:
    return sorted(run["seed"] for run in results["runs"] if run["scheme"] == scheme)


def status(results: dict[str, Any]) -> str:
    """One sentence on how much of the run the file holds."""
    wanted, seeds = results["time"]["runs"], results["seeds"]
    done = sum("+" not in run["scheme"] for run in results["runs"])
    steps = results["training"]["steps"]
    if results.get("complete"):
        return (
            f"The file holds the whole run: {done} training runs, seeds "
            f"{', '.join(map(str, seeds))} of every scheme, {steps:,} steps each."
        )
    held = "; ".join(
        f"{label} {', '.join(map(str, seeds_of(results, scheme)))}"
        for scheme, label in results["labels"].items()
        if "+" not in scheme
    )
    return (
        f"The file holds part of a run: {done} of its {wanted} training runs "
        f"({steps:,} steps each) had finished when it was saved. Seeds per scheme: "
        f"{held}. Where a scheme has one seed, its range is a single value and no "
        "difference to it is established; rerun nox -s train for the rest."
    )


class TrainStatus(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        text = status(_load(self.env))
        note = nodes.note()
        note += words(nodes.paragraph(text, text), self.get_source_info())
        return [note]


class TrainTable(SphinxDirective):
    option_spec = {"past": directives.flag, "schemes": directives.unchanged}  # noqa: RUF012

    def run(self) -> list[nodes.Node]:
        results = _load(self.env)
        chosen = self.options.get("schemes")
        schemes = chosen.split() if chosen else list(results["labels"])
        return [table(results, schemes, "past" in self.options, self.get_source_info())]


class TrainCheck(SphinxDirective):
    has_content = True

    def run(self) -> list[nodes.Node]:
        results = _load(self.env)
        for line in self.content:
            if line.strip():
                check(results, line.strip())
        return []


class TrainFigure(SphinxRole):
    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        parts = self.text.split()
        if len(parts) != 3:
            raise ExtensionError(f":train: takes 'SCHEME MULTIPLE STAT', got {self.text!r}")
        text = figure(_load(self.env), *parts)
        return [nodes.Text(text)], []


class TrainInfo(SphinxRole):
    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        try:
            value = reduce(lambda node, key: node[key], self.text.split("."), _load(self.env))
        except (KeyError, TypeError) as error:
            raise ExtensionError(f":train-info: no {self.text!r} in the run") from error
        if isinstance(value, float):
            value = f"{value:,.0f}" if value >= 100 else f"{value:g}"
        elif isinstance(value, int):
            value = f"{value:,}"
        return [nodes.literal(str(value), str(value))], []


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("train_results_file", "../benchmarks/results/train-cpu.json", "env")
    app.add_directive("train-table", TrainTable)
    app.add_directive("train-check", TrainCheck)
    app.add_directive("train-status", TrainStatus)
    app.add_role("train", TrainFigure())
    app.add_role("train-info", TrainInfo())
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
