"""The trained comparison's analysis: paired differences, t-intervals, verdicts.

Two schemes of the same seed saw the same batches (the batch generator is seeded by the seed
alone), and every loss is saved per block of the test text (8 x L_train bytes, the same bytes
at every length). A comparison of two terms (a scheme at a length multiple) is therefore the
matrix ``d[seed, block]`` of paired differences; its mean is the effect. Its interval
(:func:`interval`) counts two sources of variation: the seeds (training noise), from the
spread of the seeds' means, and the test text, from the spread of the means of its stretches
of :data:`TEXT_STRETCH` bytes (neighbouring blocks of one help topic vary together, so single
blocks would pass for more independent evidence than the text holds). The two variances are
added, and the mean's interval is Student's t with Welch-Satterthwaite's degrees of
freedom. With 3-5 seeds a percentile bootstrap over seeds would cover far less than 95%
(three values resampled give their range); t's quantile (4.30 at 2 degrees of freedom) pays
for the few seeds.

A finding claims a sign (or a bound) of such a difference. :func:`verdict` reads it off the
interval: *reproduced* when the whole interval lies on the finding's side, *not reproduced*
when the whole interval lies on the other side, *not separable* when it straddles the bound.

:func:`analyse` is everything the pages read (``docs/_ext/train_results.py`` and gallery
examples 19 and 26): the findings and this run's own observations at each scale, the losses,
the learning-rate sweep, the best scheme at each length, the fine-tuning table and its
findings, and the environment the runs were measured on. :func:`progress` says how much of the
plan (``train.FULL``) a folder holds; a part not all saved is shown as pending, never judged.
Neither trains anything.

    python benchmarks/train_analysis.py [FOLDER] [--quick]   # the verdicts of the saved runs
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

FOLDER = Path(__file__).parent / "results" / "train"
LEVEL = 0.95
# The test text's unit of variation, in bytes. Neighbouring blocks vary together: for the
# findings whose difference varies along the text, the lag-1 correlation of the block means is
# 0.6-0.8 at 512-byte blocks and about 0.2 at 2,048 bytes. Stretches of 4,096 bytes (5 in the
# test half) kept the interval's coverage at 92-95% in simulations of this design (3 or 5 seeds,
# 45 blocks whose neighbours correlate up to 0.7; tests/test_train.py checks one such case).
TEXT_STRETCH = 4096

REPRODUCED, NOT_REPRODUCED, NOT_SEPARABLE = "reproduced", "not reproduced", "not separable"


def load(folder: Path) -> list[dict[str, Any]]:
    """Every run record in ``folder`` (sorted by file name)."""
    if not folder.is_dir():
        return []
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.json"))]


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile: the ``t`` with ``P(T <= t) = p``, for ``p`` in (0.5, 1).

    The density integrated by Simpson's rule from 0 (where the CDF is 1/2), the quantile
    found by bisection; no scipy in the docs' environment.

    >>> round(t_quantile(0.975, 2), 3), round(t_quantile(0.975, 4), 3)
    (4.303, 2.776)
    >>> round(t_quantile(0.975, 1e6), 3)
    1.96
    """
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(t: float, steps: int = 2000) -> float:
        h = t / steps
        f = scale * (1 + (np.arange(steps + 1) * h) ** 2 / df) ** (-(df + 1) / 2)
        odd, even = f[1:-1:2].sum(), f[2:-1:2].sum()
        return float(0.5 + h / 3 * (f[0] + 4 * odd + 2 * even + f[-1]))

    low, high = 0.0, 1.0
    while cdf(high) < p:
        low, high = high, 2 * high
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if cdf(middle) < p else (low, middle)
    return (low + high) / 2


def interval(
    differences: np.ndarray, per_stretch: int = 1, level: float = LEVEL
) -> tuple[float, float, float]:
    """Mean of a (seeds, blocks) matrix and its t-interval over seeds and stretches of text.

    ``per_stretch`` consecutive blocks make one stretch of the text. The variance of the mean
    is ``var(seed means) / seeds + var(stretch means) / stretches`` (each part 0 where there is
    only one), and the interval ``mean +- t * sqrt(variance)`` with Welch-Satterthwaite's
    degrees of freedom. A (seeds, 1) matrix (a passkey accuracy per seed) is the one-sample
    t-interval over the seeds.

    >>> mean, lo, hi = interval(np.array([[0.1], [0.2], [0.3]]))
    >>> round(mean, 3), round(hi - mean, 3)  # t(0.975, 2) * 0.1 / sqrt(3)
    (0.2, 0.248)
    """
    d = np.asarray(differences, dtype=np.float64)
    if d.ndim != 2 or d.size == 0:
        raise ValueError(f"differences must be a non-empty (seeds, blocks) matrix, got {d.shape}")
    blocks = d.shape[1]
    stretches = np.array_split(d.mean(axis=0), max(1, blocks // per_stretch))
    parts = [
        (float(np.var(values, ddof=1)) / len(values), len(values) - 1)
        for values in (d.mean(axis=1), np.array([x.mean() for x in stretches]))
        if len(values) > 1
    ]
    mean, variance = float(d.mean()), sum(v for v, _ in parts)
    if variance == 0.0:
        return mean, mean, mean
    df = variance**2 / sum(v**2 / k for v, k in parts if v > 0)
    half = t_quantile(1 - (1 - level) / 2, df) * math.sqrt(variance)
    return mean, mean - half, mean + half


def stretch_blocks(l_train: int) -> int:
    """Blocks (of 8 x ``l_train`` bytes) to one stretch of :data:`TEXT_STRETCH` bytes."""
    return max(1, TEXT_STRETCH // (8 * l_train))


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
            ("sinusoid", "1"), ("sinusoid", "8")),
    Finding("rope-degrades", "RoPE degrades past L_train (Press et al. 2022, Fig. 1)",
            ("rope", "1"), ("rope", "8")),
    Finding("alibi-flat", "ALiBi does not degrade to 8x: loss(8x) - loss(1x) < 0.03 "
            "(Press et al. 2022, Fig. 1)", ("alibi", "8"), ("alibi", "1"), 0.03),
    Finding("t5-slower", "T5's bias has a lower loss than the sinusoid at 8x (Press et al. 2022, "
            "Fig. 1: it degrades more slowly)", ("t5", "8"), ("sinusoid", "8")),
    Finding("alibi-vs-sinusoid", "ALiBi is better than the sinusoid at L_train "
            "(Press et al. 2022, section 4)", ("alibi", "1"), ("sinusoid", "1")),
    Finding("alibi-vs-rope", "ALiBi is better than RoPE at L_train (Press et al. 2022, section 4)",
            ("alibi", "1"), ("rope", "1")),
    Finding("learned-as-sinusoid", "a learned table is as good as the sinusoid, within 0.01 "
            "(Vaswani et al. 2017, Table 3, row E)", ("learned", "1"), ("sinusoid", "1"),
            0.01, "equal"),
    Finding("nope-vs-rope", "NoPE has a lower loss than RoPE at 8x (Kazemnejad et al. 2023: it "
            "extrapolates better)", ("nope", "8"), ("rope", "8")),
    Finding("nope-vs-alibi", "NoPE has a lower loss than ALiBi at 8x (Kazemnejad et al. 2023: it "
            "extrapolates better)", ("nope", "8"), ("alibi", "8")),
    Finding("t5-vs-rope", "T5's bias has a lower loss than RoPE at 8x (Press et al. 2022, Fig. 1: "
            "it degrades more slowly)", ("t5", "8"), ("rope", "8")),
)  # fmt: skip

# This run's own questions, not a paper's claim: RoPE run longer with a scaling and no training
# (``rope+linear`` ...), and T5's default ``max_distance`` (128) against L_train.
OBSERVATIONS = (
    Finding("linear-untrained", "RoPE is better unscaled than with linear interpolation at 2x, "
            "without training", ("rope", "2"), ("rope+linear", "2")),
    Finding("dynamic-holds", "dynamic NTK (fixed factor) holds the 1x loss at 2x, within 0.05",
            ("rope+dynamic", "2"), ("rope", "1"), 0.05, "equal"),
    Finding("yarn-holds", "YaRN holds the 1x loss at 2x, within 0.05",
            ("rope+yarn", "2"), ("rope", "1"), 0.05, "equal"),
    Finding("dynamic-vs-rope", "dynamic NTK is better than unscaled RoPE at 8x",
            ("rope+dynamic", "8"), ("rope", "8")),
    Finding("yarn-vs-rope", "YaRN is better than unscaled RoPE at 8x",
            ("rope+yarn", "8"), ("rope", "8")),
    Finding("t5-vs-t5-128", "T5 with max_distance = L_train is better at 8x than with T5's "
            "default, 128", ("t5", "8"), ("t5-128", "8")),
)  # fmt: skip


def judge(
    records: Sequence[dict[str, Any]], finding: Finding, scale: dict[str, int]
) -> dict[str, Any]:
    """The finding at ``scale``: the paired mean difference, its interval and the verdict."""
    d = paired(records, finding.first, finding.second, scale)
    if d is None:
        return {"key": finding.key, "seeds": 0, "verdict": None}
    mean, lo, hi = interval(d, stretch_blocks(scale["L_train"]))
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
    return sorted(found, key=lambda s: (s["L_train"], s["layers"], s["d_model"], s["steps"]))


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
    by block too) or the passkey accuracy at an input length (``("passkey", "128")``, by seed
    alone: each seed draws its own examples); the mean and its :func:`interval`. None where
    no seed is shared."""
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
        raise ValueError(f"what must be ('loss', multiple) or ('passkey', length), got {what}")
    mean, lo, hi = interval(np.stack(rows), stretch_blocks(a[seeds[0]]["scale"]["L_train"]))
    return {"seeds": len(seeds), "mean": round(mean, 4), "interval": [round(lo, 4), round(hi, 4)]}


def finetune_table(records: Sequence[dict[str, Any]], pretrained: int) -> dict[str, Any]:
    """Per fine-tune scaling and steps, of models pretrained ``pretrained`` steps: the seeds'
    losses at 1x, 4x and 8x and passkey accuracy per input length (mean, min, max over seeds)."""
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
            for m in ("1", "4", "8"):
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


LABELS = {
    "nope": "NoPE",
    "sinusoid": "sinusoid",
    "learned": "learned",
    "rope": "RoPE",
    "alibi": "ALiBi",
    "t5": "T5, max_distance = L_train",
    "t5-128": "T5, max_distance = 128 (default)",
    "rope+linear": "RoPE + linear",
    "rope+dynamic": "RoPE + dynamic NTK",
    "rope+yarn": "RoPE + YaRN",
}
TRAINED = ("nope", "sinusoid", "learned", "rope", "alibi", "t5", "t5-128")
SHORT = {**LABELS, "t5": "T5 (L_train)", "t5-128": "T5 (128)"}


def terms(finding: Finding) -> str:
    """What a finding subtracts: ``"T5 (L_train) 8× − sinusoid 8×"``."""
    (a, m), (b, n) = finding.first, finding.second
    return f"{SHORT[a]} {m}× − {SHORT[b]} {n}×"


MULTIPLES = ("1", "2", "4", "8")


@dataclass(frozen=True)
class ArmFinding:
    """A paper's claim on fine-tuning: arm ``better`` beats arm ``worse`` on ``what`` (a lower
    loss at a multiple, ``("loss", "4")``; a higher passkey accuracy at an input length,
    ``("passkey", "256")``)."""

    key: str
    text: str
    better: Arm
    worse: Arm
    what: tuple[str, str]


FINETUNE_FINDINGS = (
    ArmFinding("pi-vs-none-0", "without fine-tuning, PI is worse than the unscaled model at 1x "
               "(it moves every position; Chen et al. 2023 fine-tune after scaling)",
               ("none", 0), ("linear", 0), ("loss", "1")),
    ArmFinding("pi-vs-none-0-4x", "without fine-tuning, PI is better than plain extrapolation at "
               "4x (Chen et al. 2023, §3.2)", ("linear", 0), ("none", 0), ("loss", "4")),
    ArmFinding("yarn-vs-none-0", "without fine-tuning, YaRN is better than plain extrapolation "
               "at 4x (Peng et al. 2023 show it for YaRN's dynamic form)", ("yarn", 0),
               ("none", 0), ("loss", "4")),
    ArmFinding("dynamic-vs-none-0", "without fine-tuning, dynamic NTK is better than plain "
               "extrapolation at 4x (Peng et al. 2023)", ("dynamic", 0), ("none", 0),
               ("loss", "4")),
    ArmFinding("pi-vs-none-200", "after 200 steps, PI is better than fine-tuned extrapolation at "
               "4x (Chen et al. 2023)", ("linear", 200), ("none", 200), ("loss", "4")),
    ArmFinding("pi-vs-none-1000", "after 1,000 steps, PI is better than fine-tuned extrapolation "
               "at 4x (Chen et al. 2023)", ("linear", 1000), ("none", 1000), ("loss", "4")),
    ArmFinding("pi-vs-none-passkey", "after 200 steps, PI retrieves the passkey at 256 bytes more "
               "often than fine-tuned extrapolation (Chen et al. 2023)", ("linear", 200),
               ("none", 200), ("passkey", "256")),
    ArmFinding("yarn-vs-pi-50", "after 50 steps, YaRN is better than PI at 4x (Peng et al. 2023: "
               "fewer steps)", ("yarn", 50), ("linear", 50), ("loss", "4")),
    ArmFinding("yarn-vs-pi-passkey", "after 50 steps, YaRN retrieves the passkey at 256 bytes "
               "more often than PI (Peng et al. 2023)", ("yarn", 50), ("linear", 50),
               ("passkey", "256")),
    ArmFinding("yarn-vs-pi-8x", "after 1,000 steps at 4x, YaRN is better than PI at 8x, past "
               "the fine-tuning length (Peng et al. 2023)", ("yarn", 1000), ("linear", 1000),
               ("loss", "8")),
    ArmFinding("yarn-vs-none-8x", "after 1,000 steps at 4x, YaRN is better than fine-tuned "
               "extrapolation at 8x, past the fine-tuning length (Peng et al. 2023)",
               ("yarn", 1000), ("none", 1000), ("loss", "8")),
)  # fmt: skip


ARMS = {"none": "none", "linear": "PI", "dynamic": "dynamic NTK", "yarn": "YaRN"}


def arm_terms(finding: ArmFinding) -> str:
    """What a fine-tuning finding subtracts, signed as :func:`judge_arms` does:
    ``"PI, 200 steps − none, 200 steps: loss at 4×"``."""
    kind, key = finding.what
    first, second = (
        (finding.better, finding.worse) if kind == "loss" else (finding.worse, finding.better)
    )
    arm = [f"{ARMS[s]}, {n} steps" for s, n in (first, second)]
    what = f"loss at {key}×" if kind == "loss" else f"retrieval at {key} bytes"
    return f"{arm[0]} − {arm[1]}: {what}"


def judge_arms(
    records: Sequence[dict[str, Any]], finding: ArmFinding, pretrained: int | None = None
) -> dict[str, Any]:
    """The fine-tuning finding: the paired difference, signed so that the finding holds
    where it is below 0 (better minus worse for a loss, worse minus better for an accuracy)."""
    kind = finding.what[0]
    first, second = (
        (finding.better, finding.worse) if kind == "loss" else (finding.worse, finding.better)
    )
    try:
        found = compare_arms(records, first, second, finding.what, pretrained)
    except (KeyError, TypeError):  # an arm without that multiple or input length
        found = None
    if found is None:
        return {"key": finding.key, "seeds": 0, "verdict": None}
    lo, hi = found["interval"]
    return {"key": finding.key, **found, "verdict": verdict(lo, hi)}


def scale_name(records: Sequence[dict[str, Any]], scale: dict[str, int]) -> str:
    """The name the harness gives ``scale`` (its config's), else its training length."""
    for r in records:
        name = (r.get("config") or {}).get("scale", {}).get("name")
        if name and r["role"] == "main" and setting(r) == scale:
            return str(name)
    return f"L_train {scale['L_train']}"


def losses(
    records: Sequence[dict[str, Any]], scheme: str, scale: dict[str, int], key: str = "loss"
) -> dict[str, Any]:
    """Per multiple, the seeds' mean, min and max of ``key`` (loss or loss_past) for the main
    runs of ``scheme`` at ``scale``; None where refused. Empty if no run is saved."""
    runs = runs_of(records, scheme, scale)
    if not runs:
        return {}
    out: dict[str, Any] = {}
    for m in MULTIPLES:
        values = [(run.get(key) or {}).get(m) for run in runs.values()]
        if key == "loss_past" and m == "1":
            continue
        out[m] = None if any(v is None for v in values) else _spread(values)
    return out


def main_table(records: Sequence[dict[str, Any]], scale: dict[str, int]) -> dict[str, Any]:
    """Per scheme at ``scale``: its seeds, its learning rate, its losses (all tokens and past
    L_train only)."""
    out: dict[str, Any] = {}
    for scheme in LABELS:
        runs = runs_of(records, scheme, scale)
        if runs:
            out[scheme] = {
                "seeds": sorted(runs),
                "lr": sorted({r["lr"] for r in runs.values() if "lr" in r}),
                "loss": losses(records, scheme, scale),
                "loss_past": losses(records, scheme, scale, "loss_past"),
            }
    return out


def sweep_table(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per scale name and scheme: the validation loss at L_train of each swept rate, the rate
    with the lowest (the main runs' rate, as ``train.chosen_lr``; None while a swept rate is
    missing), and whether it is the highest rate tried (``edge``: the grid may not bracket
    the best rate)."""
    out: dict[str, Any] = {}
    for r in records:
        if r["role"] != "sweep":
            continue
        name = r["config"]["scale"]["name"]
        entry = out.setdefault(name, {}).setdefault(r["scheme"], {"rates": {}, "chosen": None})
        loss = (r.get("validation") or {}).get("1")
        entry["rates"][f"{r['lr']:g}"] = loss
    import train  # here, not at the top: train imports this module

    for name, schemes in out.items():
        grid = train.FULL.scales[name][1] if name in train.FULL.scales else ()
        for entry in schemes.values():
            rates = entry["rates"]
            if len(rates) < max(2, len(grid)):
                continue
            finite = {k: v for k, v in rates.items() if v is not None and math.isfinite(v)}
            if finite:  # as train.chosen_lr: a diverged run is never chosen
                entry["chosen"] = min(finite, key=lambda k: (finite[k], float(k)))
                entry["edge"] = float(entry["chosen"]) == max(float(k) for k in rates)
    return out


def sweep_edges(sweep: dict[str, Any]) -> dict[str, str]:
    """Per scale name, the schemes whose chosen rate is the highest tried, in words."""
    out = {}
    for name, schemes in sweep.items():
        edge = [SHORT[s] for s in TRAINED if schemes.get(s, {}).get("edge")]
        out[name] = ", ".join(edge) if edge else "none"
    return out


def best(records: Sequence[dict[str, Any]], scale: dict[str, int]) -> list[dict[str, Any]]:
    """At each multiple, the trained scheme with the lowest mean loss and the runner-up, with
    the paired difference best - runner-up over their shared seeds: *separate* when its
    interval lies below 0, else the two are level; and the scheme with the highest mean."""
    out = []
    for m in MULTIPLES:
        means = []
        for scheme in TRAINED:
            runs = runs_of(records, scheme, scale)
            values = [(r.get("loss") or {}).get(m) for r in runs.values()]
            if values and all(v is not None for v in values):
                means.append((float(np.mean(values)), scheme))
        if len(means) < 2:
            out.append({"multiple": m, "best": None})
            continue
        means.sort()
        (_, first), (_, second) = means[:2]
        d = paired(records, (first, m), (second, m), scale)
        row: dict[str, Any] = {
            "multiple": m,
            "best": first,
            "runner_up": second,
            "worst": means[-1][1],
        }
        if d is not None:
            mean, lo, hi = interval(d, stretch_blocks(scale["L_train"]))
            row.update(
                seeds=d.shape[0],
                mean=round(mean, 4),
                interval=[round(lo, 4), round(hi, 4)],
                separate=hi < 0,
            )
        out.append(row)
    return out


def _distinct(values: Sequence[Any]) -> list[Any]:
    found: list[Any] = []
    for value in values:
        if value is not None and value not in found:
            found.append(value)
    return found


ISA = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile")


def environment(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the runs were measured on: each value as the list of its distinct values (one
    value where every run agrees); the instruction-set extensions that decide torch's CPU
    kernels among the CPU's flags; the median seconds of a training step by scale."""
    machines = [r.get("machine") or {} for r in records]
    versions = [r.get("versions") or {} for r in records]
    data = [r.get("data") or {} for r in records]
    steps: dict[str, list[float]] = {}
    for r in records:
        ms = (r.get("time") or {}).get("ms_per_step")
        name = (r.get("config") or {}).get("scale", {}).get("name")
        if ms is not None and name is not None and r["finetune"] is None:
            steps.setdefault(name, []).append(float(ms))
    return {
        "runs": len(records),
        "python": _distinct([v.get("python") for v in versions]),
        "torch": _distinct([v.get("torch") for v in versions]),
        "cpu": _distinct([m.get("cpu") for m in machines]),
        "cpu_capability": _distinct([m.get("cpu_capability") for m in machines]),
        "cores": _distinct([m.get("cores") for m in machines]),
        "os": _distinct([m.get("os") for m in machines]),
        "isa": _distinct(
            [" ".join(f for f in ISA if f in (m.get("flags") or [])) or None for m in machines]
        ),
        "flags": _distinct([len(m["flags"]) for m in machines if m.get("flags")]),
        "threads": _distinct([r.get("threads") for r in records]),
        "data_sha256": _distinct([d.get("sha256") for d in data]),
        "data_bytes": _distinct([d.get("bytes") for d in data]),
        "splits": _distinct(
            [
                {k: d[k] for k in ("train", "validation", "test")}
                for d in data
                if all(k in d for k in ("train", "validation", "test"))
            ]
        ),
        "ms_per_step": {k: round(float(np.median(v)), 1) for k, v in steps.items()},
    }


PARTS = {
    ("sweep", "small"): "the learning-rate sweep at the small scale",
    ("sweep", "long"): "the learning-rate sweep at the long scale",
    ("main", "small"): "the main runs at the small scale",
    ("main", "long"): "the main runs at the long scale",
    ("main", "passkey"): "the passkey models (RoPE, pretrained for fine-tuning)",
    ("finetune", "passkey"): "the fine-tuning runs (one per seed and scaling)",
}


def progress(folder: Path, quick: bool = False) -> dict[str, Any]:
    """How much of the plan (``train.FULL``, or ``train.QUICK``) ``folder`` holds: jobs done
    of all, per part (kind and scale). Reads the files; trains nothing."""
    import train  # here, not at the top: train imports this module

    plan = train.QUICK if quick else train.FULL
    found = train.jobs(plan, folder)
    parts: dict[str, dict[str, Any]] = {}
    for job in found:
        if isinstance(job, train.Job):
            key, finished = (job.kind, job.config.scale.name), train.done(folder, job)
        else:
            key, finished = (job.kind, job.scale), False
        part = parts.setdefault(
            f"{key[0]}-{key[1]}",
            {"text": PARTS.get(key, f"{key[0]} at {key[1]}"), "jobs": 0, "done": 0},
        )
        part["jobs"] += 1
        part["done"] += finished
    done = sum(part["done"] for part in parts.values())
    return {
        "jobs": len(found),
        "done": done,
        "complete": done == len(found),
        "parts": parts,
        "plan": {
            "scales": {
                name: asdict(train.SCALES[name]) for name in (*plan.scales, plan.finetune_scale)
            },
            "schemes": len(plan.schemes),
            "dynamic_factor": train.method.DYNAMIC_FACTOR,
            "finetune_multiple": train.method.FINETUNE_MULTIPLE,
            "passkey_fraction": train.method.PASSKEY_FRACTION,
            "passkey_examples": train.method.PASSKEY_EXAMPLES,
            "passkey_lengths": list(train.method.PASSKEY_LENGTHS),
            "passkey_digits": train.method.DIGITS,
            "weight_decay": train.method.WEIGHT_DECAY,
            "dropout": train.method.DROPOUT,
            "level": LEVEL,
            "text_stretch": TEXT_STRETCH,
            # the 97.5% t quantiles the pages quote: 3 seeds (2 degrees of freedom), many
            "t_quantile": {
                "3": f"{t_quantile(0.975, 2):.2f}",
                "many": f"{t_quantile(0.975, 1e6):.2f}",
            },
            # dynamic NTK's alpha = f n / L_train - (f - 1), f the fine-tuning's factor
            "dynamic_alpha": {
                str(n): train.method.FINETUNE_MULTIPLE * n - (train.method.FINETUNE_MULTIPLE - 1)
                for n in (train.method.FINETUNE_MULTIPLE, 2 * train.method.FINETUNE_MULTIPLE)
            },
            "steps": {name: steps for name, (steps, _, _) in plan.scales.items()},
            "rates": {
                name: [f"{r:g}" for r in rates] for name, (_, rates, _) in plan.scales.items()
            },
            "seeds": {name: len(seeds) for name, (_, _, seeds) in plan.scales.items()},
            "finetune": {
                "scale": plan.finetune_scale,
                "pretrain_steps": plan.finetune_steps,
                "lr": "chosen" if plan.finetune_lr is None else f"{plan.finetune_lr:g}",
                "seeds": len(plan.finetune_seeds),
                "scalings": list(plan.finetune_scalings),
                "checkpoints": list(plan.finetune_checkpoints),
            },
        },
    }


def part_done(done: dict[str, Any], part: str) -> bool:
    """Whether ``part`` of the plan (``"main-small"``, ``"finetune-passkey"``) is all saved."""
    found = done["parts"].get(part)
    return found is not None and found["done"] == found["jobs"]


def analyse(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the pages read: every finding and observation at every scale, the losses, the
    sweep, the best scheme, the fine-tuning table and its findings, the environment."""
    pretrained = sorted({r["steps"] for r in records if r["finetune"] is not None})
    sweep = sweep_table(records)
    return {
        "findings": [
            {
                "scale": scale,
                "name": scale_name(records, scale),
                "results": [judge(records, f, scale) for f in FINDINGS],
                "observations": [judge(records, f, scale) for f in OBSERVATIONS],
                "best": best(records, scale),
                "table": main_table(records, scale),
            }
            for scale in scales(records)
        ],
        "sweep": sweep,
        "sweep_edges": sweep_edges(sweep),
        "finetune": {str(steps): finetune_table(records, steps) for steps in pretrained},
        "finetune_findings": {
            str(steps): [judge_arms(records, f, steps) for f in FINETUNE_FINDINGS]
            for steps in pretrained
        },
        "environment": environment(records),
    }


def _finding_line(row: dict[str, Any], text: str) -> str:
    if row["verdict"] is None:
        return f"  {row['key']:<20} pending"
    lo, hi = row["interval"]
    size = f"{row['seeds']} seeds" + (f" x {row['blocks']} blocks" if "blocks" in row else "")
    return (
        f"  {row['key']:<20} {row['verdict']:<14} d = {row['mean']:+.3f} "
        f"[{lo:+.3f}, {hi:+.3f}] ({size}): {text}"
    )


def report(records: Sequence[dict[str, Any]], done: dict[str, Any] | None = None) -> str:
    """The analysis in words, a line per finding and scale (and the plan's progress)."""
    result = analyse(records)
    lines = []
    if done is not None:
        lines.append(f"{done['done']} of {done['jobs']} jobs saved")
        for part in done["parts"].values():
            lines.append(f"  {part['text']}: {part['done']} of {part['jobs']}")
    texts = {f.key: f.text for f in (*FINDINGS, *OBSERVATIONS, *FINETUNE_FINDINGS)}
    for block in result["findings"]:
        scale = block["scale"]
        lines.append(
            f"scale {block['name']}: {scale['layers']} layers, d_model {scale['d_model']}, "
            f"L_train {scale['L_train']}, {scale['steps']} steps"
        )
        for row in [*block["results"], *block["observations"]]:
            lines.append(_finding_line(row, texts[row["key"]]))
        for row in block["best"]:
            if row["best"] is None:
                continue
            level = "ahead of" if row.get("separate") else "not separable from"
            lines.append(
                f"  best at {row['multiple']}x: {row['best']} ({level} {row['runner_up']}: "
                f"d = {row.get('mean', float('nan')):+.3f})"
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
        for row in result["finetune_findings"][pretrained]:
            lines.append(_finding_line(row, texts[row["key"]]))
    return "\n".join(lines) if lines else "no saved runs"


if __name__ == "__main__":
    quick = "--quick" in sys.argv[1:]
    paths = [arg for arg in sys.argv[1:] if arg != "--quick"]
    folder = Path(paths[0]) if paths else FOLDER
    print(report(load(folder), progress(folder, quick)))
