"""The trained comparison's pages: the analysis and the docs extension on saved sets.

A synthetic saved set, without training:

:func:`fill` writes a record of the schema (``benchmarks/results/train/*.json``) for every run
of a plan, its numbers drawn from a known model (per-scheme offsets, a seed effect, a block
effect, noise), so that the analysis and the pages can be checked on a complete set, and on
any part of one, before the real runs are saved. ``stop`` leaves the plan partly saved.
"""

from __future__ import annotations

import json
import math
import sys
import zlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "_ext"))

import pytest
import train  # benchmarks/ and docs/_ext are not packages: their folders are on the path
import train_analysis as analysis
import train_method as method
import train_results as pages

# nats per byte at 1x, and the growth per doubling of the length past L_train
LEVEL = {"nope": 1.9, "sinusoid": 1.5, "learned": 1.52, "rope": 1.45, "alibi": 1.47,
         "t5": 1.44, "t5-128": 1.44, "rope+linear": 1.45, "rope+dynamic": 1.45,
         "rope+yarn": 1.45}  # fmt: skip
GROWTH = {"nope": 0.1, "sinusoid": 0.5, "learned": 0.0, "rope": 0.4, "alibi": 0.0,
          "t5": 0.05, "t5-128": 0.15, "rope+linear": 0.3, "rope+dynamic": 0.02,
          "rope+yarn": 0.01}  # fmt: skip
BLOCKS = {"small": 45, "long": 11, "passkey": 45}
ENVIRONMENT = {
    "versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "posenc": "0.1.0"},
    "machine": {
        "cpu": "Test CPU",
        "flags": ["avx", "avx2", "fma", "sse4_2"],
        "cpu_capability": "AVX2",
        "cores": 2,
        "os": "Linux",
    },
    "threads": 1,
}
DATA = {"name": "pydoc_data.topics", "sha256": "0" * 64, "bytes": 1000, "train": 900,
        "validation": 50, "test": 50}  # fmt: skip


def _losses(config: method.Config, lr_penalty: float) -> dict[str, Any]:
    rng = np.random.default_rng(zlib.crc32(config.name().encode()))
    blocks_n = BLOCKS[config.scale.name]
    block_effect = np.random.default_rng(7).normal(0, 0.2, blocks_n)
    seed_effect = 0.01 * config.seed
    scheme = config.scheme
    loss, past, blocks = {}, {}, {}
    for m in method.MULTIPLES:
        if scheme == "learned" and m > 1:
            loss[str(m)], blocks[str(m)] = None, None
            past[str(m)] = None
            continue
        mean = LEVEL[scheme] + GROWTH[scheme] * math.log2(m) + seed_effect + lr_penalty
        if config.finetune is not None:
            ft = config.finetune
            gain = {"none": 0.2, "linear": 0.4, "dynamic": 0.5, "yarn": 0.6}[ft.scaling]
            mean = 1.6 + 0.1 * math.log2(m) - gain * (1 - math.exp(-ft.steps / 200))
        values = mean + block_effect + rng.normal(0, 0.002, blocks_n)
        blocks[str(m)] = [round(float(v), 5) for v in values]
        loss[str(m)] = round(float(values.mean()), 6)
        if m > 1:
            past[str(m)] = round(float(values.mean()) + 0.01, 6)
    return {"loss": loss, "loss_past": past, "blocks": blocks}


def _record(config: method.Config) -> dict[str, Any]:
    penalty = {1e-3: 0.05, 3e-3: 0.0, 1e-2: 0.03}.get(config.lr, 0.0)
    if config.scheme == "alibi":  # a scheme whose best rate is another
        penalty = {1e-3: 0.0, 3e-3: 0.02, 1e-2: 0.05}.get(config.lr, 0.0)
    result = _losses(config, penalty)
    passkey = None
    if config.passkey:
        steps = config.finetune.steps if config.finetune is not None else 0
        scaling = config.finetune.scaling if config.finetune is not None else "none"
        reach = {"none": 64, "linear": 128, "dynamic": 256, "yarn": 256}[scaling]
        passkey = {
            str(d): round(min(1.0, 0.2 + steps / 400) if d <= reach else steps / 2000, 4)
            for d in method.PASSKEY_LENGTHS
        }
    validation = None
    if config.finetune is None and "+" not in config.scheme:
        validation = {m: (v + 0.01 if v is not None else None) for m, v in result["loss"].items()}
    return {
        "scheme": config.scheme,
        "seed": config.seed,
        "lr": config.lr,
        "role": config.role,
        "scale": config.scale.summary(),
        "finetune": None if config.finetune is None else asdict(config.finetune),
        **result,
        "passkey": passkey,
        "validation": validation,
        "refused": "past its rows" if config.scheme == "learned" else None,
        "config": train.normal(config.identity()),
        "steps": config.steps,
        "data": DATA,
        **ENVIRONMENT,
        "time": {"ms_per_step": 40.0, "seconds": 80.0, "total_s": 90.0},
    }


def fill(folder: Path, plan: train.Plan = train.FULL, stop: str | None = None) -> int:
    """Write a record for every run of ``plan`` into ``folder`` (rounds, as the harness
    runs them), stopping before the first job of kind-scale ``stop`` (``"main-long"``);
    the number of jobs written."""
    written = 0
    while True:
        found = train.jobs(plan, folder)
        todo = [j for j in found if isinstance(j, train.Job) and not train.done(folder, j)]
        if stop is not None:
            todo = [j for j in todo if f"{j.kind}-{j.config.scale.name}" != stop]
        if not todo:
            return written
        for job in todo:
            for output in job.outputs:
                train.write(folder, _record(output))
            written += 1


# -- the tests ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("full")
    assert fill(folder) == 113
    return pages.results(folder)


def test_a_complete_set_is_said_complete_and_judged_at_both_scales(full: dict[str, Any]) -> None:
    assert full["progress"]["complete"]
    assert pages.status(full).startswith("All 113 training runs")
    assert [b["name"] for b in full["findings"]] == ["small", "long"]
    small = {row["key"]: row for row in full["scales"]["small"]["results"]}
    # the synthetic model: ALiBi 0.03 below the sinusoid at 1x, the learned table 0.02 above it
    assert small["alibi-vs-sinusoid"]["verdict"] == analysis.REPRODUCED
    assert small["alibi-vs-sinusoid"]["mean"] == pytest.approx(-0.03, abs=1e-3)
    assert small["learned-as-sinusoid"]["verdict"] == analysis.NOT_REPRODUCED
    assert small["alibi-vs-sinusoid"]["seeds"] == 5
    long = {row["key"]: row for row in full["scales"]["long"]["results"]}
    assert long["alibi-vs-sinusoid"]["seeds"] == 3
    assert pages.holds(full, "verdict small alibi-vs-sinusoid reproduced") is True
    assert pages.holds(full, "verdict long learned-as-sinusoid not-separable") is False
    assert pages.holds(full, "refused small learned 2") is True
    assert pages.holds(full, "best small 8 alibi") is True
    assert pages.holds(full, "worst small 1 nope") is True
    assert pages.holds(full, "separate small 8") is True
    assert pages.holds(full, "level small 8") is False
    eight = next(row for row in full["scales"]["small"]["best"] if row["multiple"] == "8")
    assert eight["best"] == "alibi"
    assert eight["runner_up"] != "nope"
    assert pages.holds(full, f"pair small 8 {eight['runner_up']} alibi") is True  # either order
    assert pages.holds(full, "pair small 8 alibi nope") is False
    # the learned table's side of the sinusoid (the verdict "not reproduced" alone has none)
    assert pages.holds(full, "higher small learned-as-sinusoid") is True
    assert pages.holds(full, "lower small learned-as-sinusoid") is False
    assert pages.figure(full, "small", "alibi", "8", "mean") != pages.PENDING


def test_the_chosen_rate_is_marked_where_it_is_the_highest_tried(full: dict[str, Any]) -> None:
    sweep = full["sweep"]["small"]
    # the synthetic sweep (rates 1e-3, 3e-3, 1e-2): no scheme best at the grid's top
    assert not any(entry["edge"] for entry in sweep.values())
    assert full["sweep_edges"]["small"] == "none"

    def run(scheme: str, lr: float, loss: float | None) -> dict[str, Any]:
        config = {"scale": {"name": "small"}}
        return {"role": "sweep", "scheme": scheme, "lr": lr, "config": config,
                "validation": {"1": loss}}  # fmt: skip

    records = [run("alibi", 1e-3, 1.6), run("alibi", 3e-3, 1.5), run("alibi", 1e-2, 1.4)]
    records += [run("rope", 1e-3, 1.6), run("rope", 3e-3, 1.3), run("rope", 1e-2, float("nan"))]
    found = analysis.sweep_table(records)["small"]
    assert (found["alibi"]["chosen"], found["alibi"]["edge"]) == ("0.01", True)
    assert (found["rope"]["chosen"], found["rope"]["edge"]) == ("0.003", False)  # nan: diverged
    assert analysis.sweep_edges({"small": found}) == {"small": "ALiBi"}
    assert analysis.sweep_table(records[:2])["small"]["alibi"]["chosen"] is None  # a rate missing


def test_the_sweep_and_the_main_runs_agree_on_the_chosen_rate(full: dict[str, Any]) -> None:
    sweep = full["sweep"]["small"]
    # the synthetic sweep: every scheme best at 3e-3 but ALiBi, best at 1e-3
    assert sweep["alibi"]["chosen"] == "0.001"
    assert sweep["rope"]["chosen"] == "0.003"
    assert full["scales"]["small"]["table"]["alibi"]["lr"] == [1e-3]
    assert len(sweep["nope"]["rates"]) == 3


def test_fine_tuning_is_judged_from_the_seeds(full: dict[str, Any]) -> None:
    pretrained = str(train.FULL.finetune_steps)  # the synthetic fill's passkey models
    rows = {row["key"]: row for row in full["finetune_findings"][pretrained]}
    assert rows["yarn-vs-pi-50"]["verdict"] == analysis.REPRODUCED
    assert rows["yarn-vs-pi-50"]["seeds"] == 3
    # accuracy: signed so that the finding holds below 0 (yarn retrieves more than PI)
    assert rows["yarn-vs-pi-passkey"]["mean"] < 0
    assert rows["yarn-vs-pi-passkey"]["verdict"] == analysis.REPRODUCED
    table = full["finetune"][pretrained]
    assert set(table) == {"none", "linear", "dynamic", "yarn"}
    assert set(table["yarn"]) == {"0", "50", "200", "1000"}
    assert pages.holds(full, "verdict finetune yarn-vs-pi-50 reproduced") is True
    share = table["yarn"]["50"]["passkey"]["256"]["mean"]
    assert pages.holds(full, f"passkey yarn 50 256 above {share - 0.01}") is True
    assert pages.holds(full, f"passkey yarn 50 256 below {share - 0.01}") is False


def test_a_scaling_settles_at_the_first_step_count_near_its_last_loss() -> None:
    losses = {"0": 2.0, "50": 1.2, "200": 1.108, "1000": 1.1}
    found = {
        "progress": {
            "parts": {"finetune-passkey": {"done": 12, "jobs": 12}},
            "plan": {"finetune": {"pretrain_steps": 16000}},
        },
        "finetune": {"16000": {"pi": {n: {"loss_4x": {"mean": v}} for n, v in losses.items()}}},
    }
    assert pages.holds(found, "settles pi 4 200 0.01") is True
    assert pages.holds(found, "settles pi 4 1000 0.005") is True  # 1.108 is 0.008 away
    assert pages.holds(found, "settles pi 4 50 0.2") is True
    assert pages.holds(found, "settles pi 4 200 0.2") is False  # 50 was already within
    found["progress"]["parts"]["finetune-passkey"]["done"] = 11
    assert pages.holds(found, "settles pi 4 200 0.01") is None  # pending


def test_a_pending_part_prints_no_verdict(tmp_path: Path) -> None:
    fill(tmp_path, stop="main-long")
    found = pages.results(tmp_path)
    assert not found["progress"]["complete"]
    text = pages.status(found)
    assert "the main runs at the long scale (0 of 21)" in text
    assert "the main runs at the small scale" not in text  # saved parts are not listed
    assert pages.holds(found, "verdict long alibi-vs-sinusoid reproduced") is None
    assert pages.holds(found, "verdict small alibi-vs-sinusoid reproduced") is True
    assert pages.figure(found, "long", "alibi", "1", "mean") == pages.PENDING
    assert pages.holds(found, "saved main-long") is False
    # half of the small scale's main runs: the small scale is pending too
    for path in sorted(tmp_path.glob("main-small-*seed5*.json")):
        path.unlink()
    found = pages.results(tmp_path)
    assert pages.holds(found, "verdict small alibi-vs-sinusoid reproduced") is None
    assert pages.block(found, "small") is None


def test_an_empty_folder_is_all_pending(tmp_path: Path) -> None:
    found = pages.results(tmp_path / "absent")
    assert found["progress"]["done"] == 0
    assert found["progress"]["jobs"] == 113
    assert "0 of the plan's 113 training runs are saved" in pages.status(found)
    assert pages.info(found, "env.python") == pages.PENDING
    assert pages.info(found, "plan.seeds.small") == "5"
    assert pages.info(found, "plan.seeds.long") == "3"


def test_the_environment_lists_every_value_the_runs_hold(tmp_path: Path) -> None:
    fill(tmp_path, stop="sweep-long")
    path = next(tmp_path.glob("sweep-small-rope-*.json"))
    record = json.loads(path.read_text())
    record["machine"]["cpu"] = "Other CPU"
    record["machine"]["flags"] = [*record["machine"]["flags"], "avx512f"]
    path.write_text(json.dumps(record))
    env = analysis.environment(analysis.load(tmp_path))
    assert env["cpu"] == ["Test CPU", "Other CPU"]
    assert env["isa"] == ["sse4_2 avx avx2 fma", "sse4_2 avx avx2 fma avx512f"]
    assert env["python"] == ["3.11.7"]
    found = pages.results(tmp_path)
    assert pages.info(found, "env.cpu") == "Test CPU, Other CPU"


def test_a_contradicted_claim_fails_the_build(full: dict[str, Any]) -> None:
    from sphinx.errors import ExtensionError

    assert pages.holds(full, "verdict small alibi-vs-rope reproduced") is False
    with pytest.raises(ExtensionError, match="cannot read"):
        pages.holds(full, "nonsense small")
    with pytest.raises(ExtensionError, match="no finding"):
        pages.holds(full, "verdict small no-such-finding reproduced")


def test_the_tables_show_verdicts_only_where_saved(full: dict[str, Any], tmp_path: Path) -> None:
    where = ("trained.rst", 1)
    text = pages.findings_table(full, "papers", where).astext()
    assert text.count("not reproduced") == 6  # three findings, both scales (the synthetic set)
    assert "pending" not in text
    assert "Paired difference" in text
    assert "ALiBi" in pages.best_table(full, where).astext()
    assert "YaRN" in pages.passkey_table(full, where).astext()
    assert "1000 steps" in pages.finetune_table(full, "4", where).astext()
    assert "chosen" in pages.sweep_table(full, "small", where).astext()
    fill(tmp_path, stop="main-long")
    partial = pages.results(tmp_path)
    text = pages.findings_table(partial, "papers", where).astext()
    assert text.count("pending") == len(analysis.FINDINGS)  # the long scale's column
    pending = pages.loss_table(partial, "long", None, False, where).astext()
    assert "Pending: the main runs at the long scale" in pending
    assert "0 / 21" in pending
    note = "".join(node.astext() for node in pages.status_nodes(partial, where))
    assert "Part of the plan" in note
    assert "0 / 21" in note
    assert "113 / 113" not in note
    assert "refused" in pages.loss_table(partial, "small", None, False, where).astext()
