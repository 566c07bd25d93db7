r"""
What the schemes do when trained
================================

Each scheme of posenc, in the same small byte-level language model, trained at
L_train = 64 bytes and evaluated on the same held-out bytes in chunks of 64,
128, 256 and 512 (as `Press et al. <https://arxiv.org/abs/2108.12409>`__, 2022,
evaluate). This script draws the saved run of ``nox -s train``
(``benchmarks/results/train-cpu.json``): training takes more than an hour on
two cores (the file records how long), drawing a second.

Explained in :ref:`guide-trained`.
"""

# %%
# The saved run: one entry per scheme and seed, with the loss (nats per byte)
# at each multiple of L_train, null where a scheme cannot go.
import json
import statistics
from pathlib import Path

import matplotlib.pyplot as plt

RESULTS = Path("benchmarks/results/train-cpu.json")  # from the repository's root
if not RESULTS.is_file():
    RESULTS = Path("../..") / RESULTS  # from examples/schemes, as the gallery runs it
run = json.loads(RESULTS.read_text(encoding="utf-8"))
l_train, steps = run["training"]["L_train"], run["training"]["steps"]
multiples = [str(m) for m in run["evaluation"]["multiples"]]
seeds = sorted({row["seed"] for row in run["runs"]})
print(f"{len(run['runs'])} rows, {steps} steps, seeds {seeds}, L_train = {l_train}")
print("the whole run" if run["complete"] else "a partial run: some seeds are missing")


def seeds_of(scheme, key="loss"):
    """Per multiple, the losses of the scheme's seeds (None: refused there)."""
    rows = [row for row in run["runs"] if row["scheme"] == scheme]
    return {m: [row[key][m] for row in rows] for m in multiples}


for scheme, label in run["labels"].items():
    shown = []
    for m, values in seeds_of(scheme).items():
        if None in values:
            shown.append(f"{m}x   n/a")
        else:
            shown.append(f"{m}x {statistics.fmean(values):.3f}")
    print(f"{label:<34}", "  ".join(shown))

# %%
# Loss against the evaluation length: the line is the mean over the seeds, the
# band their range (min to max). First the trained schemes, then RoPE trained
# at 64 and run longer with the scalings users reach for, without retraining.
# Last, where the loss goes up: the loss at each position of the 512-byte
# chunks, averaged over the chunks and the seeds (and over 8 neighbouring
# positions, so that the curves can be told apart). Left of the dashed line the
# model sees distances it was trained on; right of it, none of its training had.
# The three panels are one figure, drawn in this one cell.
COLOURS = {
    "nope": "0.45",
    "sinusoid": "C0",
    "learned": "C4",
    "rope": "C1",
    "alibi": "C2",
    "t5": "C3",
    "t5-128": "C5",
    "rope+linear": "C9",
    "rope+dynamic": "C8",
    "rope+yarn": "C6",
}
trained = [s for s in run["labels"] if "+" not in s]
scaled = [s for s in run["labels"] if s == "rope" or s.startswith("rope+")]

fig, axes = plt.subplot_mosaic(
    [["schemes"], ["scalings"], ["positions"]],
    figsize=(6.8, 10.5),
    layout="constrained",
)
for key, group in (("schemes", trained), ("scalings", scaled)):
    ax = axes[key]
    for scheme in group:
        lengths, low, mean, high = [], [], [], []
        for m, values in seeds_of(scheme).items():
            if None not in values:
                lengths.append(int(m) * l_train)
                low.append(min(values))
                high.append(max(values))
                mean.append(statistics.fmean(values))
        colour = COLOURS.get(scheme, "black")
        marker = "o" if len(lengths) == 1 else "."
        label = run["labels"][scheme].replace(" (default)", "")
        ax.plot(lengths, mean, marker=marker, color=colour, label=label)
        ax.fill_between(lengths, low, high, color=colour, alpha=0.25, linewidth=0)
    ax.set_xscale("log", base=2)
    ax.set_xticks(
        [int(m) * l_train for m in multiples],
        [str(int(m) * l_train) for m in multiples],
    )
    ax.axvline(l_train, color="black", linestyle="--", linewidth=1)
    ax.set_xlabel("evaluation length (bytes)", fontsize=10)
    ax.set_ylabel("loss (nats per byte)", fontsize=10)
    ax.tick_params(labelsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=10, ncols=2, loc="upper left")
titles = {
    "schemes": f"trained at L_train = {l_train}, evaluated longer",
    "scalings": "RoPE with inference-time scalings (no training)",
}
for key, title in titles.items():
    axes[key].set_title(title, fontsize=10)

ax = axes["positions"]
window = 8
for scheme in [*trained, "rope+yarn"]:
    rows = [row["per_position"] for row in run["runs"] if row["scheme"] == scheme]
    if not rows or rows[0] is None:
        continue
    per_position = [statistics.fmean(values) for values in zip(*rows, strict=True)]
    smooth = [
        statistics.fmean(per_position[i : i + window])
        for i in range(0, len(per_position), window)
    ]
    centres = [i + window / 2 for i in range(0, len(per_position), window)]
    label = run["labels"][scheme].replace(" (default)", "")
    ax.plot(centres, smooth, color=COLOURS.get(scheme, "black"), label=label)
ax.axvline(l_train, color="black", linestyle="--", linewidth=1)
ax.set_xlabel("position in a 512-byte chunk", fontsize=10)
ax.set_ylabel("loss (nats per byte)", fontsize=10)
ax.set_title("per position, at 8 × L_train", fontsize=10)
ax.tick_params(labelsize=10)
low, high = ax.get_ylim()
ax.set_ylim(low, high + 0.4 * (high - low))  # room for the legend above the curves
if ax.get_legend_handles_labels()[0]:
    ax.legend(fontsize=10, ncols=2, loc="upper left")
shown_seeds = ", ".join(str(seed) for seed in seeds)
fig.suptitle(f"Byte-level decoder, {steps} steps, seeds {shown_seeds}", fontsize=11)
plt.show()
