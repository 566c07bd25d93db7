"""The trained comparison's analysis: paired differences, bootstrap intervals, verdicts.

Two schemes of the same seed saw the same batches (the batch generator is seeded by the seed
alone), and every loss is saved per block of the test text (8 x L_train bytes, the same bytes
at every length). A comparison of two terms (a scheme at a length multiple) is therefore the
matrix ``d[seed, block]`` of paired differences; its mean is the effect. The interval is a
two-way percentile bootstrap over that matrix: seeds and blocks are resampled with replacement,
independently (a pigeonhole bootstrap, Owen 2007, "The pigeonhole bootstrap", Ann. Appl. Stat.),
so it counts both training noise and the test text's variation.

A finding claims a sign (or a bound) of such a difference. :func:`verdict` reads it off the
interval: *reproduced* when the whole interval lies on the finding's side, *not reproduced*
when the whole interval lies on the other side, *not separable* when it straddles the bound.

    python benchmarks/train_analysis.py [FOLDER]    # the verdicts of the saved runs
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FOLDER = Path(__file__).parent / "results" / "train"
RESAMPLES = 4000
LEVEL = 0.95

REPRODUCED, NOT_REPRODUCED, NOT_SEPARABLE = "reproduced", "not reproduced", "not separable"


def load(folder: Path) -> list[dict[str, Any]]:
    """Every run record in ``folder`` (sorted by file name)."""
    if not folder.is_dir():
        return []
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.json"))]


def bootstrap(
    differences: np.ndarray, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of a (seeds, blocks) matrix and its two-way percentile bootstrap interval."""
    d = np.asarray(differences, dtype=np.float64)
    if d.ndim != 2 or d.size == 0:
        raise ValueError(f"differences must be a non-empty (seeds, blocks) matrix, got {d.shape}")
    rng = np.random.default_rng(seed)
    seeds, blocks = d.shape
    rows = rng.integers(seeds, size=(resamples, seeds))
    cols = rng.integers(blocks, size=(resamples, blocks))
    means = d[rows[:, :, None], cols[:, None, :]].mean(axis=(1, 2))
    tail = (1 - level) / 2
    lo, hi = np.quantile(means, [tail, 1 - tail])
    return float(d.mean()), float(lo), float(hi)


def verdict(lo: float, hi: float, bound: float = 0.0, kind: str = "less") -> str:
    """The finding ``difference < bound`` (kind "less") or ``|difference| < bound`` ("equal"),
    judged by the interval [lo, hi]."""
    if kind == "less":
        if hi < bound:
            return REPRODUCED
        if lo > bound:
            return NOT_REPRODUCED
        return NOT_SEPARABLE
    if kind == "equal":
        if -bound < lo and hi < bound:
            return REPRODUCED
        if lo > bound or hi < -bound:
            return NOT_REPRODUCED
        return NOT_SEPARABLE
    raise ValueError(f"kind must be 'less' or 'equal', got {kind!r}")


Term = tuple[str, str]  # (scheme, multiple)


def runs_of(
    records: Sequence[dict[str, Any]], scheme: str, scale: dict[str, int]
) -> dict[int, dict[str, Any]]:
    """The main runs of ``scheme`` at ``scale`` (no fine-tuning), by seed. ``scale`` is a
    setting: the schema's scale and the steps (``setting``), so that runs of other lengths
    of training are never pooled."""
    return {
        r["seed"]: r
        for r in records
        if r["role"] == "main"
        and r["finetune"] is None
        and r["scheme"] == scheme
        and setting(r) == scale
        and not r["config"].get("passkey")
    }


def paired(
    records: Sequence[dict[str, Any]], first: Term, second: Term, scale: dict[str, int]
) -> np.ndarray | None:
    """``d[seed, block]`` = loss(first) - loss(second), over the seeds both have; None where a
    term has no loss (refused) or no seed is shared."""
    a, b = runs_of(records, first[0], scale), runs_of(records, second[0], scale)
    rows = []
    for seed in sorted(set(a) & set(b)):
        x, y = a[seed]["blocks"].get(first[1]), b[seed]["blocks"].get(second[1])
        if x is None or y is None:
            return None
        rows.append(np.asarray(x) - np.asarray(y))
    return np.stack(rows) if rows else None


@dataclass(frozen=True)
class Finding:
    """A paper's claim: loss(first) - loss(second) < bound ("less"), or |...| < bound ("equal")."""

    key: str
    text: str
    first: Term
    second: Term
    bound: float = 0.0
    kind: str = "less"


FINDINGS = (
    Finding("sinusoid-degrades", "the sinusoid degrades past L_train (Press et al. 2022, Fig. 1)",
            ("sinusoid", "1"), ("sinusoid", "4")),
    Finding("rope-degrades", "RoPE degrades past L_train (Press et al. 2022, Fig. 1)",
            ("rope", "1"), ("rope", "8")),
    Finding("alibi-flat", "ALiBi does not degrade to 8x: loss(8x) - loss(1x) < 0.03 "
            "(Press et al. 2022, Fig. 1)", ("alibi", "8"), ("alibi", "1"), 0.03),
    Finding("t5-slower", "T5's bias degrades less than the sinusoid (Press et al. 2022, Fig. 1)",
            ("t5", "8"), ("sinusoid", "8")),
    Finding("alibi-vs-sinusoid", "ALiBi is better than the sinusoid at L_train "
            "(Press et al. 2022, section 4)", ("alibi", "1"), ("sinusoid", "1")),
    Finding("alibi-vs-rope", "ALiBi is better than RoPE at L_train (Press et al. 2022, section 4)",
            ("alibi", "1"), ("rope", "1")),
    Finding("learned-as-sinusoid", "a learned table is as good as the sinusoid, within 0.01 "
            "(Vaswani et al. 2017, Table 3, row E)", ("learned", "1"), ("sinusoid", "1"),
            0.01, "equal"),
    Finding("nope-vs-rope", "NoPE extrapolates better than RoPE (Kazemnejad et al. 2023)",
            ("nope", "8"), ("rope", "8")),
    Finding("nope-vs-alibi", "NoPE extrapolates better than ALiBi (Kazemnejad et al. 2023)",
            ("nope", "8"), ("alibi", "8")),
)  # fmt: skip


def judge(
    records: Sequence[dict[str, Any]], finding: Finding, scale: dict[str, int]
) -> dict[str, Any]:
    """The finding at ``scale``: the paired mean difference, its interval and the verdict."""
    d = paired(records, finding.first, finding.second, scale)
    if d is None:
        return {"key": finding.key, "seeds": 0, "verdict": None}
    mean, lo, hi = bootstrap(d)
    return {
        "key": finding.key,
        "seeds": d.shape[0],
        "blocks": d.shape[1],
        "mean": round(mean, 4),
        "interval": [round(lo, 4), round(hi, 4)],
        "verdict": verdict(lo, hi, finding.bound, finding.kind),
    }


def setting(record: dict[str, Any]) -> dict[str, int]:
    """What a finding is judged at: the run's scale and its training steps."""
    return {**record["scale"], "steps": record["steps"]}


def scales(records: Sequence[dict[str, Any]]) -> list[dict[str, int]]:
    found: list[dict[str, int]] = []
    for r in records:
        plain = r["role"] == "main" and r["finetune"] is None and not r["config"].get("passkey")
        if plain and setting(r) not in found:
            found.append(setting(r))
    return found


Arm = tuple[str, int]  # (scaling, fine-tuning steps)


def arm_runs(
    records: Sequence[dict[str, Any]], arm: Arm, pretrained: int | None = None
) -> dict[int, dict[str, Any]]:
    """The fine-tuning runs of ``arm`` (of models pretrained ``pretrained`` steps), by seed."""
    return {
        r["seed"]: r
        for r in records
        if r["finetune"] is not None
        and (pretrained is None or r["steps"] == pretrained)
        and r["finetune"]["scaling"] == arm[0]
        and r["finetune"]["steps"] == arm[1]
    }


def compare_arms(
    records: Sequence[dict[str, Any]],
    first: Arm,
    second: Arm,
    what: tuple[str, str],
    pretrained: int | None = None,
) -> dict[str, Any] | None:
    """``first`` - ``second``, paired by seed: the loss at a multiple (``("loss", "4")``, paired
    by block too) or the passkey accuracy at a distance (``("passkey", "128")``, by seed
    alone); the mean and its bootstrap interval. None where no seed is shared."""
    a, b = arm_runs(records, first, pretrained), arm_runs(records, second, pretrained)
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    kind, key = what
    if kind == "loss":
        rows = [np.asarray(a[s]["blocks"][key]) - np.asarray(b[s]["blocks"][key]) for s in seeds]
    elif kind == "passkey":
        rows = [np.asarray([a[s]["passkey"][key] - b[s]["passkey"][key]]) for s in seeds]
    else:
        raise ValueError(f"what must be ('loss', multiple) or ('passkey', distance), got {what}")
    mean, lo, hi = bootstrap(np.stack(rows))
    return {"seeds": len(seeds), "mean": round(mean, 4), "interval": [round(lo, 4), round(hi, 4)]}


def finetune_table(records: Sequence[dict[str, Any]], pretrained: int) -> dict[str, Any]:
    """Per fine-tune scaling and steps, of models pretrained ``pretrained`` steps: the seeds'
    losses at 4x and 8x and passkey accuracy per distance (mean, min, max over seeds)."""
    table: dict[str, Any] = {}
    for r in records:
        ft = r["finetune"]
        if ft is None or r["steps"] != pretrained:
            continue
        entry = table.setdefault(ft["scaling"], {}).setdefault(str(ft["steps"]), [])
        entry.append(r)
    out: dict[str, Any] = {}
    for scaling, by_steps in table.items():
        for steps, runs in by_steps.items():
            cell: dict[str, Any] = {"seeds": sorted(r["seed"] for r in runs)}
            for m in ("4", "8"):
                values = [r["loss"][m] for r in runs]
                cell[f"loss_{m}x"] = _spread(values)
            cell["passkey"] = {
                d: _spread([r["passkey"][d] for r in runs]) for d in runs[0]["passkey"]
            }
            out.setdefault(scaling, {})[steps] = cell
    return out


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "mean": round(float(np.mean(values)), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def analyse(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the page will read: every finding at every scale, and the fine-tuning table."""
    return {
        "findings": [
            {"scale": scale, "results": [judge(records, f, scale) for f in FINDINGS]}
            for scale in scales(records)
        ],
        "finetune": {
            str(steps): finetune_table(records, steps)
            for steps in sorted({r["steps"] for r in records if r["finetune"] is not None})
        },
    }


def report(records: Sequence[dict[str, Any]]) -> str:
    """The analysis in words, a line per finding and scale."""
    result = analyse(records)
    lines = []
    texts = {f.key: f.text for f in FINDINGS}
    for block in result["findings"]:
        scale = block["scale"]
        lines.append(f"scale: {scale['layers']} layers, d_model {scale['d_model']}, "
                     f"L_train {scale['L_train']}, {scale['steps']} steps")  # fmt: skip
        for row in block["results"]:
            if row["verdict"] is None:
                lines.append(f"  {row['key']:<20} n/a")
                continue
            lo, hi = row["interval"]
            lines.append(
                f"  {row['key']:<20} {row['verdict']:<14} d = {row['mean']:+.3f} "
                f"[{lo:+.3f}, {hi:+.3f}] ({row['seeds']} seeds x {row['blocks']} blocks): "
                f"{texts[row['key']]}"
            )
    for pretrained, table in result["finetune"].items():
        lines.append(f"fine-tuning, from models pretrained {pretrained} steps:")
        for scaling, by_steps in table.items():
            for steps, cell in sorted(by_steps.items(), key=lambda item: int(item[0])):
                keys = " ".join(f"{d}:{v['mean']:.2f}" for d, v in cell["passkey"].items())
                lines.append(
                    f"  {scaling:<7} {steps:>4} steps: loss 4x {cell['loss_4x']['mean']:.3f} "
                    f"8x {cell['loss_8x']['mean']:.3f}; passkey {keys} "
                    f"({len(cell['seeds'])} seeds)"
                )
    return "\n".join(lines) if lines else "no saved runs"


if __name__ == "__main__":
    print(report(load(Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER)))
