r"""
Making a trained model longer
=============================

A RoPE model pretrained at L_train = 64 bytes, then fine-tuned at 4 × L_train
(256 bytes) with each of the scalings people use to extend a context: none
(plain extrapolation), linear (Position Interpolation, `Chen et al.
<https://arxiv.org/abs/2306.15595>`__, 2023), dynamic NTK, and YaRN (`Peng et
al. <https://arxiv.org/abs/2309.00071>`__, 2023). Each is recorded at a few
points of its fine-tuning, from no steps to a thousand, over several seeds:
its test loss at 4 and 8 × L_train, and passkey retrieval (Mohtashami and
Jaggi's task, as Chen et al. use it: a number hidden in filler text near the
start, asked for at the end) against the length of the input. This script
draws the saved runs of ``nox -s train`` through the harness's analysis;
where the fine-tuning runs are not all saved
yet, it draws what is and says what is pending.

Explained in :ref:`guide-extending`.
"""

# %%
# The saved fine-tuning runs, and how much of the plan they are.
import os
import sys
from pathlib import Path

import matplotlib.pyplot as plt

BENCHMARKS = Path("benchmarks")  # from the repository's root
if not BENCHMARKS.is_dir():
    BENCHMARKS = (
        Path("../..") / BENCHMARKS
    )  # from examples/schemes, as the gallery runs it


def quick_extension(pretrain=300, finetune=(0, 30), l_train=32, seed=0):
    """Without the saved runs: a quick version, trained here (under a minute).

    A two-layer byte-level RoPE model (d_model 64, 4 heads) pretrained ``pretrain``
    steps at ``l_train`` bytes on CPython's own ``argparse.py`` (its first 90%), then
    fine-tuned at 4 × ``l_train`` with each scaling; the test loss on the rest at 4
    and 8 × ``l_train`` after each number of steps in ``finetune``. No passkey, one
    seed: a sketch of the saved set, not its numbers.
    """
    import argparse
    import copy

    import torch
    from torch import nn
    from torch.nn.functional import cross_entropy
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    import posenc

    torch.set_num_threads(1)  # a model this small runs fastest on one thread
    data = torch.tensor(list(Path(argparse.__file__).read_bytes()))
    split = len(data) * 9 // 10
    train, test = data[:split], data[split:]

    class Layer(nn.Module):
        def __init__(self, d=64, heads=4):
            super().__init__()
            self.heads = heads
            self.norms = nn.ModuleList([nn.LayerNorm(d), nn.LayerNorm(d)])
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            wide = nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)
            self.mlp = nn.Sequential(*wide)
            self.rope = posenc.RotaryEmbedding(d // heads)

        def forward(self, h):
            b, n, d = h.shape
            qkv = self.qkv(self.norms[0](h)).view(b, n, 3, self.heads, -1)
            q, k, v = qkv.transpose(1, 3).unbind(2)
            q, k = self.rope(q), self.rope(k)  # YaRN's factor is in its cos and sin
            y = sdpa(q, k, v, is_causal=True)
            h = h + self.out(y.transpose(1, 2).reshape(b, n, d))
            return h + self.mlp(self.norms[1](h))

    def loss(model, chunks):
        logits = model(chunks[:, :-1])
        return cross_entropy(logits.flatten(0, 1), chunks[:, 1:].flatten())

    def train_steps(model, steps, length):
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        for _ in range(steps):
            starts = torch.randint(0, len(train) - length - 1, (16, 1))
            optimizer.zero_grad()
            loss(model, train[starts + torch.arange(length + 1)]).backward()
            optimizer.step()

    def test_loss(model, multiple):
        n = multiple * l_train + 1
        with torch.no_grad():
            return float(loss(model, test[: len(test) // n * n].view(-1, n)))

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Embedding(256, 64), Layer(), Layer(), nn.Linear(64, 256))
    train_steps(model, pretrain, l_train)
    found = {}
    for scaling in ("none", "linear", "dynamic", "yarn"):
        torch.manual_seed(seed + 1)
        tuned = copy.deepcopy(model)
        if scaling != "none":
            parameters = {
                "rope_type": scaling,
                "factor": 4.0,
                "original_max_position_embeddings": l_train,
                "max_position_embeddings": l_train,
            }
            for layer in (tuned[1], tuned[2]):
                layer.rope = posenc.RotaryEmbedding(16, scaling=parameters)
        found[scaling] = {}
        done = 0
        for steps in finetune:
            train_steps(tuned, steps - done, 4 * l_train)
            done = steps
            found[scaling][steps] = {m: test_loss(tuned, m) for m in (4, 8)}
        for steps, cell in found[scaling].items():
            losses = ", ".join(f"{m}x {v:.3f}" for m, v in cell.items())
            print(f"{scaling:<8} {steps:>3} steps: loss at {losses}")
    fig, axes = plt.subplots(
        1, 2, figsize=(6.8, 3.8), layout="constrained", sharey=True
    )
    for ax, multiple in zip(axes, (4, 8), strict=True):
        for scaling, by_steps in found.items():
            ax.plot(
                list(by_steps),
                [cell[multiple] for cell in by_steps.values()],
                marker="o",
                label=scaling,
            )
        ax.set_xticks(list(finetune))
        ax.set_xlabel(f"fine-tuning steps at {4 * l_train} bytes", fontsize=10)
        ax.set_title(f"test loss at {multiple} × L_train", fontsize=10)
    axes[0].set_ylabel("loss (nats/byte)", fontsize=10)
    axes[0].legend(fontsize=10)
    fig.suptitle(f"Quick version: L_train = {l_train}, one seed", fontsize=10)
    plt.show()
    return found


if not (BENCHMARKS / "train_analysis.py").is_file():  # downloaded alone
    print("no saved runs here (they are in the repository): a quick version instead")
    quick_extension()
    sys.exit()
sys.path.insert(0, str(BENCHMARKS.resolve()))
import train_analysis as analysis  # benchmarks/ is not a package

# To draw another folder, say your own quick run's (``nox -s train -- --quick``
# writes /tmp/train-quick/runs; with ``--out /tmp/quick.json``, /tmp/quick/runs):
# TRAIN_RESULTS=/tmp/train-quick/runs
# TRAIN_PLAN=quick python examples/schemes/plot_26_context_extension.py
FOLDER = Path(os.environ.get("TRAIN_RESULTS", BENCHMARKS / "results" / "train"))
records = analysis.load(FOLDER)
done = analysis.progress(FOLDER, quick=os.environ.get("TRAIN_PLAN") == "quick")
plan = done["plan"]["finetune"]
table = analysis.finetune_table(records, plan["pretrain_steps"])
part = done["parts"]["finetune-passkey"]
pending = part["done"] < part["jobs"]
status = f"{part['done']} of {part['jobs']} fine-tuning runs saved"
print(status)
for scaling, by_steps in table.items():
    for steps, cell in sorted(by_steps.items(), key=lambda item: int(item[0])):
        print(
            f"{scaling:<8} {steps:>5} steps: loss at 4x {cell['loss_4x']['mean']:.3f}, "
            f"at 8x {cell['loss_8x']['mean']:.3f} (seeds {cell['seeds']})"
        )

# %%
# The loss against the fine-tuning steps, at the fine-tuning length (4 ×) and
# past it (8 ×): the line is the mean over the seeds, the band their range.
# The step axis is linear up to 50 and logarithmic beyond, so that 0 (the
# scaling alone, no training) has its place.
COLOURS = {"none": "0.35", "linear": "C9", "dynamic": "C8", "yarn": "C6"}
LABELS = {
    "none": "none (extrapolation)",
    "linear": "linear (PI)",
    "dynamic": "dynamic NTK",
    "yarn": "YaRN",
}
fig, axes = plt.subplots(1, 2, figsize=(6.8, 3.8), layout="constrained", sharey=True)
for ax, multiple in zip(axes, ("4", "8"), strict=True):
    for scaling in plan["scalings"]:
        by_steps = table.get(scaling, {})
        points = sorted(
            (int(n), cell[f"loss_{multiple}x"]) for n, cell in by_steps.items()
        )
        if not points:
            continue
        steps = [n for n, _ in points]
        colour = COLOURS.get(scaling, "black")
        ax.plot(
            steps,
            [v["mean"] for _, v in points],
            marker="o",
            markersize=4,
            color=colour,
            label=LABELS.get(scaling, scaling),
        )
        ax.fill_between(
            steps,
            [v["min"] for _, v in points],
            [v["max"] for _, v in points],
            color=colour,
            alpha=0.25,
            linewidth=0,
        )
    ax.set_xscale("symlog", linthresh=50)
    ax.set_xticks(plan["checkpoints"], [str(n) for n in plan["checkpoints"]])
    ax.set_xlabel("fine-tuning steps at 4 × L_train", fontsize=10)
    ax.set_title(f"test loss at {multiple} × L_train", fontsize=10)
    ax.tick_params(labelsize=10)
    if not table:
        ax.text(
            0.5,
            0.5,
            "pending:\nno run saved yet",
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=10,
        )
axes[0].set_ylabel("loss (nats/byte)", fontsize=10)
if axes[0].get_legend_handles_labels()[0]:
    axes[0].legend(fontsize=10)
fig.suptitle(
    "Fine-tuning a RoPE model at 4 × its training length"
    + ("\npending: fine-tuning runs not all saved" if pending else ""),
    fontsize=10,
)
plt.show()

# %%
# Passkey retrieval against the length of the input, one panel per number of
# fine-tuning steps: the share of examples whose five digits all come out
# right, the mean over the seeds and their range. Each example fills its
# length, the key near the start and the question at the end. The dashed
# lines mark the pretraining length (64) and the fine-tuning length (256).
steps_shown = plan["checkpoints"]
fig, axes = plt.subplots(
    2, 2, figsize=(6.8, 6.4), layout="constrained", sharex=True, sharey=True
)
for ax, n in zip(axes.flat, steps_shown, strict=False):
    for scaling in plan["scalings"]:
        cell = table.get(scaling, {}).get(str(n))
        if cell is None:
            continue
        lengths = [int(d) for d in cell["passkey"]]
        values = list(cell["passkey"].values())
        colour = COLOURS.get(scaling, "black")
        ax.plot(
            lengths,
            [v["mean"] for v in values],
            marker="o",
            markersize=4,
            color=colour,
            label=LABELS.get(scaling, scaling),
        )
        ax.fill_between(
            lengths,
            [v["min"] for v in values],
            [v["max"] for v in values],
            color=colour,
            alpha=0.2,
            linewidth=0,
        )
    l_train = done["plan"]["scales"][done["plan"]["finetune"].get("scale", "passkey")][
        "L_train"
    ]
    for mark in (l_train, l_train * done["plan"]["finetune_multiple"]):
        ax.axvline(mark, color="black", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    lengths = done["plan"]["passkey_lengths"]
    ax.set_xticks(lengths, [str(d) for d in lengths])
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"after {n} steps", fontsize=10)
    ax.tick_params(labelsize=10)
    if not any(str(n) in table.get(s, {}) for s in plan["scalings"]):
        ax.text(
            0.5,
            0.5,
            "pending",
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=10,
            backgroundcolor="white",
        )
for ax in axes[1]:
    ax.set_xlabel("input length (bytes)", fontsize=10)
for ax in axes[:, 0]:
    ax.set_ylabel("exact retrieval", fontsize=10)
handles, labels = axes[0][0].get_legend_handles_labels()
if handles:
    fig.legend(handles, labels, loc="outside lower center", ncols=4, fontsize=10)
top = axes[0][0]
for mark, text in (
    (l_train, "pretrained"),
    (l_train * done["plan"]["finetune_multiple"], "fine-tuned"),
):
    top.text(
        mark,
        0.3,
        f"{text} ",
        rotation=90,
        fontsize=10,
        va="center",
        ha="right",
        transform=top.get_xaxis_transform(),
        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
    )
fig.suptitle(
    "Passkey retrieval after fine-tuning at 256 bytes"
    + ("\npending: fine-tuning runs not all saved" if pending else ""),
    fontsize=10,
)
plt.show()
