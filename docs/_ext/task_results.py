"""Render the saved task runs (``benchmarks/results/tasks/*.json``), at build time.

Every number of the "Length generalization on tasks" page comes from the files that
``nox -s tasks`` writes, one a run; the page holds none of them. Markups:

- ``.. task-status::`` — a note: how many of the set's runs are saved, or that the runs
  are pending (no file yet);
- ``.. task-table:: TASK`` — per-token accuracy (``:exact:``: exact-match) of each scheme at
  1, 2 and 4 x n: the seeds' mean, and below it the 95% t-interval of the mean over
  the seeds; nothing while the task has no run;
- ``.. task-findings::`` — the papers' findings, one a line, ``PAPER | CLAIM | WORDS``,
  as a table with this run's figures and a verdict computed from them (never typed):
  *reproduced*, *not reproduced* (the interval of the difference lies the other way),
  *not separable* (it holds 0), or *pending* (fewer than 3 seeds of either scheme);
- ``:task-info:`key``` — a value of the runs' shared config (``steps``, ``n``, ``layers``),
  or, while no run is saved, of the harness's defaults;
- ``.. task-check::`` — claims of the prose, one a line, checked against the runs; the
  build fails if the runs contradict one, or lack it (write claims once the runs are
  saved). It renders nothing.

The claims (accuracy is per-token, or exact-match where a comparison ends in ``exact``;
M is the multiple of n, 1, 2 or 4):

  ``better A B TASK M``      the 95% Welch t-interval of mean(A) - mean(B) lies above 0
  ``separable A B TASK M``   that interval does not hold 0 (either way)
  ``inseparable A B TASK M`` that interval holds 0
  ``above A TASK M X``       every seed of A is above X (e.g. chance)

The folder is ``task_results_folder`` in conf.py, relative to the docs directory, or
the environment variable ``POSENC_TASK_RESULTS`` (a test's folder of short runs).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective, SphinxRole

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

from train_analysis import t_quantile  # noqa: E402  (one t quantile for both pages)

MULTIPLES = ("1", "2", "4")
MIN_SEEDS = 3  # a verdict needs at least this many seeds of each scheme
LABELS = {
    "nope": "NoPE",
    "sinusoid": "sinusoid",
    "learned": "learned table",
    "rope": "RoPE",
    "alibi": "ALiBi",
    "t5": "T5 buckets",
    "kerple": "KERPLE",
    "fire": "FIRE",
    "xpos": "xPos",
    "cope": "CoPE",
    "rope+random": "RoPE, randomized positions",
    "sinusoid+random": "sinusoid, randomized positions",
}


def harness() -> Any:
    """benchmarks/tasks.py, the harness: its tasks, schemes, seeds and default config."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    import tasks  # benchmarks/ is not a package: its folder is on the path

    return tasks


def folder_of(confdir: str | Path, configured: str) -> Path:
    """The results folder: ``POSENC_TASK_RESULTS`` if set, else the configured one."""
    given = os.environ.get("POSENC_TASK_RESULTS")
    return Path(given) if given else (Path(confdir) / configured).resolve()


def load(folder: Path) -> list[dict[str, Any]]:
    """Every saved run in ``folder`` (none if it does not exist); one config for all.

    >>> load(Path("/nonexistent"))
    []
    """
    runs = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.json"))]
    shared = {_size(run) for run in runs}
    if len(shared) > 1:
        raise ExtensionError(
            f"task results: the runs in {folder} have {len(shared)} configs (model, steps, "
            f"lengths); one set at a time: {sorted(shared)[:2]}"
        )
    return runs


def _size(run: dict[str, Any]) -> str:
    """A run's config without its task, scheme and seed: what all runs must share."""
    config = {k: v for k, v in run["config"].items() if k not in ("task", "scheme", "seed")}
    return json.dumps(config, sort_keys=True)


def values(
    runs: list[dict[str, Any]], scheme: str, task: str, multiple: str, key: str = "accuracy"
) -> list[float | None]:
    """The accuracy of each seed's run of ``scheme`` on ``task`` at ``multiple`` (None: n/a)."""
    if multiple not in MULTIPLES:
        raise ExtensionError(f"task results: multiple {multiple!r} is not one of {MULTIPLES}")
    chosen = sorted(
        (r for r in runs if r["scheme"] == scheme and r["task"] == task), key=lambda r: r["seed"]
    )
    return [r[key][multiple] for r in chosen]


def interval(found: list[float]) -> tuple[float, float]:
    """The 95% t-interval of the mean over the seeds, clipped to [0, 1] (accuracies).

    ``mean ± t(0.975, n - 1) · s / √n``: with 3 seeds t is 4.30, an interval far wider
    than the seeds' range, as three seeds warrant.

    >>> interval([0.5, 0.5, 0.5])
    (0.5, 0.5)
    >>> low, high = interval([0.2, 0.4, 0.9])
    >>> 0.0 <= low < 0.2 and high == 1.0
    True
    """
    mean, n = statistics.fmean(found), len(found)
    spread = statistics.stdev(found) if n > 1 else 0.0
    if spread == 0.0:
        return mean, mean
    half = t_quantile(0.975, n - 1) * spread / math.sqrt(n)
    return max(0.0, mean - half), min(1.0, mean + half)


def difference(a: list[float], b: list[float]) -> tuple[float, float]:
    """The 95% Welch t-interval of mean(a) - mean(b).

    Welch's interval does not assume the two schemes' seeds are paired: the seeds share
    their test instances, but randomized positions draw from the same generator as the
    training batches, so the pairs are not the same batches for every scheme.

    >>> difference([0.9, 0.8, 0.85], [0.1, 0.2, 0.15])[0] > 0
    True
    >>> low, high = difference([0.6, 0.7, 0.9], [0.5, 0.6, 0.65])
    >>> low < 0 < high  # three seeds each: a 0.15 difference is not separable here
    True
    """
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    d, se = statistics.fmean(a) - statistics.fmean(b), math.sqrt(va + vb)
    if se == 0.0:
        return d, d
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_quantile(0.975, df) * se
    return d - half, d + half


def verdict(runs: list[dict[str, Any]], claim: str) -> tuple[str, str]:
    """``better A B TASK M``: the verdict and the figures it rests on.

    The figures are numbers only (the two means, then the difference's interval), or a
    reason in words that do not change as runs are saved: the page translates its words
    once, and never a number.

    >>> verdict([], "better nope rope copy 2")
    ('pending', 'no runs yet')
    """
    kind, *args = claim.split()
    key = "exact" if args[-1:] == ["exact"] else "accuracy"
    args = args[:4] if key == "exact" else args
    if kind != "better" or len(args) != 4:
        raise ExtensionError(f"task-findings: cannot read the claim {claim!r}")
    first, second, task, multiple = args
    a = values(runs, first, task, multiple, key)
    b = values(runs, second, task, multiple, key)
    if not runs:
        return "pending", "no runs yet"
    if len(a) < MIN_SEEDS or len(b) < MIN_SEEDS:
        return "pending", f"fewer than {MIN_SEEDS} seeds saved"
    if None in a or None in b:
        return "n/a", "a scheme is refused at this length"
    low, high = difference([float(x) for x in a], [float(y) for y in b])
    means = f"{statistics.fmean(a):.2f} / {statistics.fmean(b):.2f}"  # type: ignore[arg-type]
    figures = f"{means}; [{low:+.2f}, {high:+.2f}]"
    if low > 0:
        return "reproduced", figures
    if high < 0:
        return "not reproduced", figures
    return "not separable", figures


def check(runs: list[dict[str, Any]], claim: str) -> None:
    """Raise if the runs lack or contradict ``claim`` (see the module's docstring)."""
    kind, *args = claim.split()
    compared = len(args) == 4 or (len(args) == 5 and args[-1] == "exact")
    if kind in ("better", "separable", "inseparable") and compared:
        found, figures = verdict(runs, "better " + " ".join(args))
        if found in ("pending", "n/a"):
            raise ExtensionError(f"task-check: the runs cannot decide {claim!r}: {figures}")
        holds = {
            "better": found == "reproduced",
            "separable": found != "not separable",
            "inseparable": found == "not separable",
        }[kind]
    elif kind == "above" and len(args) == 4:
        scheme, task, multiple, bound = args
        seeds = values(runs, scheme, task, multiple)
        if not seeds or None in seeds:
            raise ExtensionError(f"task-check: no accuracy for {claim!r}: {seeds}")
        holds = all(float(v) > float(bound) for v in seeds)  # type: ignore[arg-type]
        figures = ", ".join(f"{v:.3f}" for v in seeds)  # type: ignore[str-format]
    else:
        raise ExtensionError(f"task-check: cannot read the claim {claim!r}")
    if not holds:
        raise ExtensionError(f"task-check: the saved runs contradict {claim!r}: {figures}")


def status(runs: list[dict[str, Any]]) -> tuple[str, str]:
    """How much of the set is saved: a sentence that stays the same as runs are saved (a
    message of the page, translated), and the counts (numbers only, or '' when none is)."""
    tasks = harness()
    wanted = len(tasks.TASKS) * len(tasks.SCHEMES) * len(tasks.SEEDS)
    if not runs:
        return (
            f"The runs are pending: no run of the set ({wanted} runs: "
            f"{len(tasks.TASKS)} tasks, {len(tasks.SCHEMES)} schemes, "
            f"{len(tasks.SEEDS)} seeds) is saved yet, so this page shows no result and "
            f"marks no finding; nox -s tasks builds the set (hours, resumable).",
            "",
        )
    default = json.dumps(
        {
            k: v
            for k, v in tasks.Config("copy", "nope", 0).identity().items()
            if k not in ("task", "scheme", "seed")
        },
        sort_keys=True,
    )
    which = "the harness's" if _size(runs[0]) == default else "another (a short run's)"
    seeds = sorted({r["seed"] for r in runs})
    counts = f"{len(runs)} / {wanted}; {', '.join(map(str, seeds))}"
    if len(runs) >= wanted:
        return (
            f"The set is saved whole (below: the runs saved / the set; the seeds), with "
            f"{which} config.",
            counts,
        )
    return (
        f"Part of the set's {wanted} runs is saved (below: the runs saved / the set; the "
        f"seeds), with {which} config. A finding with fewer than {MIN_SEEDS} seeds of "
        f"either scheme stays pending.",
        counts,
    )


TIMES = {
    # the saved runs' own clocks (each run on one thread): their sum, and the extremes
    "cpu_hours": lambda seconds: round(sum(seconds) / 3600, 1),
    "slowest_run_minutes": lambda seconds: round(max(seconds) / 60, 1),
    "fastest_run_minutes": lambda seconds: round(min(seconds) / 60, 1),
}


def config_value(runs: list[dict[str, Any]], key: str) -> Any:
    """``key`` of the runs' shared config, or of the harness's default config; or one of
    ``TIMES``, read from the runs' clocks (an error while no run is saved).

    >>> config_value([{"time": {"total_s": 5400.0}}, {"time": {"total_s": 1800.0}}], "cpu_hours")
    2.0
    """
    if key in TIMES:
        if not runs:
            raise ExtensionError(f":task-info: {key!r} needs saved runs")
        return TIMES[key]([float(r["time"]["total_s"]) for r in runs])
    config = runs[0]["config"] if runs else harness().Config("copy", "nope", 0).identity()
    if key not in config:
        raise ExtensionError(f":task-info: no {key!r} in the config ({sorted(config)})")
    return config[key]


# -- docutils ----------------------------------------------------------------------------------
def _runs(env: Any) -> list[dict[str, Any]]:
    folder = folder_of(env.app.confdir, env.config.task_results_folder)
    if folder.is_dir():
        env.note_dependency(str(folder))
        for path in folder.glob("*.json"):
            env.note_dependency(str(path))
    return load(folder)


Where = tuple[str, int]  # the page (source file) and line a directive stands on


def _words(node: nodes.TextElement, where: Where | None) -> nodes.TextElement:
    """``node``'s text made a message of its page (Korean and Japanese translate it).

    Sphinx translates a text node only when it knows the node's source; numbers and
    ranges are left as they are. Without ``where`` (a test) the node is left alone.
    """
    if where is not None:
        node.rawsource = node.astext()
        node.source, node.line = where
    return node


def _cell(*lines: str, where: Where | None = None) -> nodes.entry:
    entry = nodes.entry()
    for i, line in enumerate(lines):
        para = nodes.paragraph()
        para += nodes.inline(line, line, classes=["bench-range"]) if i else nodes.Text(line)
        entry += _words(para, where)
    return entry


def _table(
    heads: list[str],
    widths: list[int],
    rows: list[list[nodes.entry]],
    title: str,
    where: Where | None = None,
) -> nodes.table:
    out = nodes.table(classes=["bench-table"])
    out += _words(nodes.title(title, title), where)
    group = nodes.tgroup(cols=len(heads))
    out += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    thead, row = nodes.thead(), nodes.row()
    for head in heads:
        row += _cell(head, where=where)
    thead += row
    group += thead
    body = nodes.tbody()
    for cells in rows:
        row = nodes.row()
        for entry in cells:
            row += entry
        body += row
    group += body
    return out


def accuracy_table(
    runs: list[dict[str, Any]], task: str, key: str, where: Where | None = None
) -> nodes.table | None:
    """The task's table, or None while it has no run."""
    mine = [r for r in runs if r["task"] == task]
    if not mine:
        return None
    n = mine[0]["train_length"]
    order = [s for s in LABELS if any(r["scheme"] == s for r in mine)]
    rows = []
    for scheme in order:
        cells = [
            _cell(LABELS[scheme], where=where),
            _cell(str(len(values(runs, scheme, task, "1")))),
        ]
        for m in MULTIPLES:
            found = values(runs, scheme, task, m, key)
            if None in found:
                cells.append(_cell("n/a", "refused", where=where))
                continue
            low, high = interval([float(v) for v in found])  # type: ignore[arg-type]
            mean = statistics.fmean(found)  # type: ignore[arg-type]
            cells.append(_cell(f"{mean:.2f}", f"{low:.2f}–{high:.2f}"))
        rows.append(cells)
    what = "exact-match" if key == "exact" else "per-token"
    heads = ["scheme", "seeds", *(f"{m}× ({int(m) * n})" for m in MULTIPLES)]
    title = f"{task}: {what} accuracy, the seeds' mean and 95% t-interval"
    return _table(heads, [30, 6, 12, 12, 12], rows, title, where)


def findings_table(
    runs: list[dict[str, Any]], lines: list[str], where: Where | None = None
) -> nodes.table:
    rows = []
    for line in lines:
        parts = [part.strip() for part in line.split("|")]
        if len(parts) != 3:
            raise ExtensionError(f"task-findings: want 'PAPER | CLAIM | WORDS', got {line!r}")
        paper, claim, words = parts
        found, figures = verdict(runs, claim)
        _, first, second, task, multiple = claim.split()
        tested = f"{LABELS[first]} over {LABELS[second]}, {task} at {multiple}×"
        if found in ("reproduced", "not reproduced", "not separable"):
            figure = _cell(*figures.split("; "))  # numbers: never a message
        else:
            figure = _cell(figures, where=where)  # a reason in words
        rows.append(
            [
                _cell(paper, where=where),
                _cell(words, tested, where=where),
                _cell(found, where=where),
                figure,
            ]
        )
    heads = [
        "paper",
        "finding, and where this run tests it",
        "this run",
        "means (first / second); the difference's 95% interval",
    ]
    title = "The papers' findings and this run's verdicts, computed from the saved runs"
    return _table(heads, [18, 40, 14, 28], rows, title, where)


class TaskStatus(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        sentence, counts = status(_runs(self.env))
        note = nodes.note()
        note += _words(nodes.paragraph(sentence, sentence), self.get_source_info())
        if counts:
            note += nodes.paragraph(counts, counts)
        return [note]


class TaskTable(SphinxDirective):
    required_arguments = 1
    option_spec = {"exact": directives.flag}  # noqa: RUF012

    def run(self) -> list[nodes.Node]:
        task = self.arguments[0]
        if task not in harness().TASKS:
            raise ExtensionError(f"task-table: unknown task {task!r}")
        key = "exact" if "exact" in self.options else "accuracy"
        table = accuracy_table(_runs(self.env), task, key, self.get_source_info())
        return [] if table is None else [table]


class TaskFindings(SphinxDirective):
    has_content = True

    def run(self) -> list[nodes.Node]:
        lines = [line for line in self.content if line.strip()]
        return [findings_table(_runs(self.env), lines, self.get_source_info())]


class TaskCheck(SphinxDirective):
    has_content = True

    def run(self) -> list[nodes.Node]:
        runs = _runs(self.env)
        for line in self.content:
            if line.strip():
                check(runs, line.strip())
        return []


class TaskInfo(SphinxRole):
    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        value = config_value(_runs(self.env), self.text.strip())
        text = f"{value:,}" if isinstance(value, int) else f"{value:g}"
        return [nodes.literal(text, text)], []


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("task_results_folder", "../benchmarks/results/tasks", "env")
    app.add_directive("task-status", TaskStatus)
    app.add_directive("task-table", TaskTable)
    app.add_directive("task-findings", TaskFindings)
    app.add_directive("task-check", TaskCheck)
    app.add_role("task-info", TaskInfo())
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
