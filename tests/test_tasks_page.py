"""The task page's extension (docs/_ext/task_results.py): verdicts, checks and the page.

The runs here are written by the tests (a few JSON files in a temporary folder); the
extension is pointed at them through ``POSENC_TASK_RESULTS``, as the page would read
``benchmarks/results/tasks/``.
"""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from sphinx.errors import ExtensionError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import task_results  # noqa: E402 (docs/_ext is on the path)
import tasks  # noqa: E402 (benchmarks/ is on the path)


def _run(task: str, scheme: str, seed: int, acc: dict[str, float | None], **config: object):
    identity = replace(tasks.Config(task, scheme, seed), **config).identity()  # type: ignore[arg-type]
    return {
        "task": task,
        "scheme": scheme,
        "seed": seed,
        "train_length": identity["n"],
        "accuracy": acc,
        "exact": {k: (None if v is None else v / 2) for k, v in acc.items()},
        "config": identity,
    }


def _acc(one: float, two: float, four: float | None) -> dict[str, float | None]:
    return {"1": one, "2": two, "4": four}


def _save(folder: Path, runs: list[dict[str, object]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for run in runs:
        name = f"{run['task']}-{run['scheme']}-{run['seed']}.json"
        (folder / name).write_text(json.dumps(run))
    return folder


RUNS = [
    *(_run("copy", "rope+random", s, _acc(0.9, 0.6 + 0.01 * s, 0.5)) for s in range(3)),
    *(_run("copy", "rope", s, _acc(0.95, 0.3 + 0.01 * s, 0.2)) for s in range(3)),
    *(_run("copy", "nope", s, _acc(0.4, 0.2 + 0.2 * s, 0.1)) for s in range(3)),
    *(_run("copy", "learned", s, _acc(0.5, None, None)) for s in range(3)),
    *(_run("count", "cope", s, _acc(0.9, 0.5, 0.3)) for s in range(2)),
    *(_run("count", "rope", s, _acc(0.9, 0.5, 0.3)) for s in range(3)),
]


def test_the_modules_examples() -> None:
    assert doctest.testmod(task_results).failed == 0


def test_verdicts_come_from_the_interval_of_the_difference() -> None:
    assert task_results.verdict(RUNS, "better rope+random rope copy 2")[0] == "reproduced"
    assert task_results.verdict(RUNS, "better rope rope+random copy 2")[0] == "not reproduced"
    # NoPE's seeds spread over RoPE's: the interval holds 0
    assert task_results.verdict(RUNS, "better nope rope copy 2")[0] == "not separable"
    # two seeds of CoPE: pending, whatever the figures
    found, why = task_results.verdict(RUNS, "better cope rope count 2")
    assert found == "pending"
    assert why == "fewer than 3 seeds saved"  # words that stay the same as runs are saved
    assert task_results.verdict(RUNS, "better learned rope copy 2")[0] == "n/a"
    assert task_results.verdict([], "better nope rope copy 2")[0] == "pending"


def test_checks_pass_fail_and_refuse_what_the_runs_cannot_decide() -> None:
    task_results.check(RUNS, "better rope+random rope copy 4")
    task_results.check(RUNS, "separable rope rope+random copy 2")
    task_results.check(RUNS, "inseparable nope rope copy 2")
    task_results.check(RUNS, "above nope copy 1 0.125")
    with pytest.raises(ExtensionError, match="contradict "):
        task_results.check(RUNS, "better rope rope+random copy 2")
    with pytest.raises(ExtensionError, match="contradict "):
        task_results.check(RUNS, "above nope copy 1 0.45")
    with pytest.raises(ExtensionError, match="cannot decide"):
        task_results.check(RUNS, "better cope rope count 2")
    with pytest.raises(ExtensionError, match="cannot decide"):
        task_results.check([], "better nope rope copy 2")
    with pytest.raises(ExtensionError, match="cannot read"):
        task_results.check(RUNS, "best nope copy 2")
    # exact match: the runs' exact accuracy is half their per-token one (see _run)
    assert task_results.verdict(RUNS, "better rope+random rope copy 2 exact")[1].startswith(
        "0.30 / 0.15"
    )
    task_results.check(RUNS, "better rope+random rope copy 4 exact")
    with pytest.raises(ExtensionError, match="cannot read"):
        task_results.check(RUNS, "better rope+random rope copy 4 nearly")


def test_one_config_at_a_time(tmp_path: Path) -> None:
    assert len(task_results.load(_save(tmp_path / "a", RUNS))) == len(RUNS)
    mixed = [*RUNS, _run("copy", "t5", 0, _acc(0.5, 0.5, 0.5), steps=300)]
    with pytest.raises(ExtensionError, match="2 configs"):
        task_results.load(_save(tmp_path / "b", mixed))


def test_status_says_pending_without_runs_and_counts_them_with() -> None:
    pending, counts = task_results.status([])
    assert pending.startswith("The runs are pending")
    wanted = len(tasks.TASKS) * len(tasks.SCHEMES) * len(tasks.SEEDS)
    assert f"({wanted} runs" in pending
    assert counts == ""
    saved, counts = task_results.status(RUNS)
    assert saved.startswith(f"Part of the set's {wanted} runs is saved")
    assert "the harness's config" in saved
    seeds = sorted({r["seed"] for r in RUNS})
    assert counts == f"{len(RUNS)} / {wanted}; {', '.join(map(str, seeds))}"
    # The sentence is the page's message: it must not change as more runs are saved.
    assert task_results.status(RUNS[:1])[0] == saved
    short = [_run("copy", "rope", 0, _acc(1, 1, 1), steps=300)]
    assert "another" in task_results.status(short)[0]


PAGE = """\
Tasks
=====

.. task-status::

Steps :task-info:`steps`, n = :task-info:`n`.

.. task-table:: copy

.. task-table:: count
   :exact:

.. task-findings::

   Ruoss et al. | better rope+random rope copy 2 | randomized positions help RoPE
   Kazemnejad et al. | better nope rope copy 2 | NoPE generalizes better than RoPE
"""


def _build(tmp_path: Path, folder: Path) -> str:
    """A one-page site with the extension, built as text in a process of its own."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'docs' / '_ext')!r})\n"
        "extensions = ['task_results']\n"
    )
    (source / "index.rst").write_text(PAGE)
    out = tmp_path / "out"
    env = {**os.environ, "POSENC_TASK_RESULTS": str(folder)}
    command = [sys.executable, "-m", "sphinx", "-b", "text", "-W", "-q", str(source), str(out)]
    subprocess.run(command, check=True, env=env)
    return (out / "index.txt").read_text(encoding="utf-8")


def test_the_page_without_runs_says_pending_and_marks_nothing(tmp_path: Path) -> None:
    text = _build(tmp_path, tmp_path / "none")
    assert "The runs are pending" in text
    steps = tasks.Config("copy", "nope", 0).steps
    assert f'Steps "{steps:,}"' in text  # the harness's defaults (literals)
    for word in ("reproduced", "not separable"):
        assert word not in text
    assert text.count("pending") == 3  # the status and the two findings
    assert "accuracy, the seeds' mean" not in text  # no table


def test_the_page_with_runs_shows_them_and_their_verdicts(tmp_path: Path) -> None:
    text = _build(tmp_path, _save(tmp_path / "runs", RUNS))
    assert "copy: per-token accuracy" in text
    assert "count: exact-match accuracy" in text
    assert "RoPE, randomized positions" in text
    assert "0.61" in text  # rope+random's mean at 2x
    assert "refused" in text  # the learned table past its rows
    assert "reproduced" in text
    assert "not separable" in text
    assert "0.61 / 0.31" in text  # the means at 2x, numbers only


def test_the_task_figure_names_each_scheme_as_the_tables_do() -> None:
    # plot_28 runs alone as a download, so it keeps its own copy of the labels
    import ast

    script = Path(__file__).parents[1] / "examples" / "schemes" / "plot_28_tasks.py"
    tree = ast.parse(script.read_text(encoding="utf-8"))
    found = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "LABELS"
    )
    assert ast.literal_eval(found) == task_results.LABELS
