r"""
Length generalization on tasks
==============================

Each scheme in the same small decoder, trained on instances of the papers'
algorithmic tasks of size 1 to n and tested on instances of size exactly n, 2n
and 4n: copy and reverse (`Kazemnejad et al. <https://arxiv.org/abs/2305.19466>`__,
2023), counting and selective copy (`Golovneva et al.
<https://arxiv.org/abs/2405.18719>`__, 2024) and Flip-Flop (`Liu et al.
<https://arxiv.org/abs/2306.00946>`__, 2023). This script draws the saved runs
of ``nox -s tasks`` (``benchmarks/results/tasks/``, one file a run); while none
is saved it draws empty panels that say so.

Explained in :ref:`guide-tasks`.
"""

# %%
# The saved runs: one file per task, scheme and seed, with the per-token
# accuracy on the answers at each multiple of n (null where a scheme is refused:
# the learned table past its rows).
import json
import os
import random
import statistics
from pathlib import Path

import matplotlib.pyplot as plt

FOLDER = Path(os.environ.get("POSENC_TASK_RESULTS", "benchmarks/results/tasks"))
if not FOLDER.is_dir() and not FOLDER.is_absolute():
    FOLDER = Path("../..") / FOLDER  # from examples/schemes, as the gallery runs it
files = sorted(FOLDER.glob("*.json"))
runs = [json.loads(f.read_text(encoding="utf-8")) for f in files]
TASKS = ["copy", "reverse", "count", "select", "flipflop"]
MULTIPLES = ["1", "2", "4"]
CHANCE = {"copy": 1 / 8, "reverse": 1 / 8, "select": 1 / 8, "flipflop": 1 / 2}
print(f"{len(runs)} runs saved in {FOLDER}")


def mean_and_interval(values):
    """The mean over the seeds and its 95% bootstrap interval (4,000 fixed draws)."""
    rng = random.Random(0)
    means = sorted(
        statistics.fmean(rng.choices(values, k=len(values))) for _ in range(4000)
    )
    return statistics.fmean(values), means[100], means[3899]


# %%
# Accuracy against the test length, one panel per task: the line is the mean
# over the seeds, the bars the 95% bootstrap interval of that mean. Left of the
# dashed line is the training range; the dotted line is chance where it is a
# constant (counting's answers are not uniform).
COLOURS = {
    "nope": "0.45",
    "sinusoid": "C0",
    "learned": "C4",
    "rope": "C1",
    "alibi": "C2",
    "t5": "C3",
    "kerple": "C5",
    "fire": "C6",
    "xpos": "C7",
    "cope": "C8",
    "rope+random": "C9",
    "sinusoid+random": "k",
}
fig, axes = plt.subplots(
    3, 2, figsize=(6.4, 9.2), layout="constrained", sharex=True, sharey=True
)
for ax, task in zip(axes.flat, TASKS, strict=False):
    mine = [r for r in runs if r["task"] == task]
    for scheme, colour in COLOURS.items():
        rows = [r for r in mine if r["scheme"] == scheme]
        xs, ys, low, high = [], [], [], []
        for m in MULTIPLES:
            values = [r["accuracy"][m] for r in rows]
            if values and None not in values:
                mean, lo, hi = mean_and_interval(values)
                xs.append(int(m))
                ys.append(mean)
                low.append(mean - lo)
                high.append(hi - mean)
        if xs:
            ax.errorbar(
                xs, ys, yerr=[low, high], color=colour, marker=".", capsize=2,
                label=scheme,
            )  # fmt: skip
    ax.axvline(1, color="black", linestyle="--", linewidth=1)
    if task in CHANCE:
        ax.axhline(CHANCE[task], color="black", linestyle=":", linewidth=1)
    if not mine:
        ax.text(2.0, 0.75, "runs pending", ha="center", va="center", fontsize=10)
    ax.set_title(task, fontsize=10)
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4], ["n", "2n", "4n"])
    ax.set_xlim(0.85, 4.7)
    ax.set_ylim(0, 1.02)
    ax.tick_params(labelsize=10)
for ax in axes[:, 0]:
    ax.set_ylabel("per-token accuracy", fontsize=10)
legend = axes.flat[-1]
handles, labels = axes.flat[0].get_legend_handles_labels()
legend.axis("off")
if handles:
    legend.legend(handles, labels, fontsize=10, ncols=2, loc="center")
else:
    legend.text(
        0.5, 0.5, "no run saved yet:\nnox -s tasks", ha="center", va="center",
        transform=legend.transAxes,
    )  # fmt: skip
seeds = sorted({r["seed"] for r in runs})
title = "Trained on sizes 1..n, tested at n, 2n, 4n"
if seeds:
    title += f"; seeds {', '.join(map(str, seeds))}"
fig.suptitle(title, fontsize=11)
plt.show()
