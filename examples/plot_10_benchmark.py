"""
Speed of the input layer
========================

The input layer turns token ids into a (B, L, D) tensor, so it cannot be faster
than writing one: the benchmark's floor is one out-of-place ``a + b`` of two
(B, L, D) tensors. This script draws the medians that ``nox -s bench`` saved in
``benchmarks/results/``, as multiples of that floor, next to an
Annotated-Transformer-style baseline measured in the same run.
"""

# %%
# The saved run: one row per candidate, dtype and mode, each a median of
# interleaved rounds. Rerun ``nox -s bench -- --save benchmarks/results/NAME``
# to measure your own machine.
import json
from pathlib import Path

import matplotlib.pyplot as plt

try:
    here = Path(__file__).resolve().parent
except NameError:  # run cell by cell
    here = Path.cwd()
results = here.parent / "benchmarks" / "results" / "cpu-2threads.json"
run = json.loads(results.read_text())
print(f"torch {run['torch']}, {run['threads']} threads, measured {run['date']}")

cases = ["floor", "baseline", "pair", "fused", "compiled"]
labels = [
    "a + b\n(floor)",
    "baseline\npair",
    "Embeddings →\nPositionalEncoding",
    "fused,\neager",
    "fused,\ncompiled",
]
panels = [(d, m) for m in ("inference", "train") for d in ("float32", "bfloat16")]
for dtype, mode in panels:
    rows = {r["case"]: r for r in run["rows"] if r["dtype"] == dtype and r["mode"] == mode}
    ratios = ", ".join(f"{c} {rows[c]['vs_floor']:.2f}" for c in cases)
    print(f"{dtype:>8} {mode:>9}: × floor: {ratios}")

# %%
# Bars are multiples of the floor (lower is better); the dashed line is the
# floor, the dotted one the eager target of 1.25.
fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharey="row", facecolor="white")
colors = ["#9e9e9e", "#d62728", "#ff7f0e", "#1f77b4", "#2ca02c"]
for ax, (dtype, mode) in zip(axes.flat, panels, strict=True):
    rows = {r["case"]: r for r in run["rows"] if r["dtype"] == dtype and r["mode"] == mode}
    values = [rows[c]["vs_floor"] for c in cases]
    bars = ax.bar(range(len(cases)), values, color=colors)
    ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
    if mode == "inference":
        ax.axhline(1.25, color="black", linestyle=":", linewidth=1)
    ax.set_xticks(range(len(cases)), labels, fontsize=7)
    what = "forward, inference mode" if mode == "inference" else "forward + backward"
    ax.set_title(f"{dtype}, {what}", fontsize=10)
    ax.set_ylabel("time / floor")
    ax.set_facecolor("white")
fig.suptitle(f"Input layer, B=32, L=512, D=512, vocab 32000 ({run['threads']} CPU threads)")
fig.tight_layout()
plt.show()
