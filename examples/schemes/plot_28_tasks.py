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


def quick_copy_runs(steps=300, n=8, seed=0):
    """Without saved runs: the copy task trained here, one seed (under a minute).

    Each scheme in a two-layer decoder (d_model 64, 4 heads) trained ``steps`` steps
    on ``k`` of 8 symbols, a separator and the ``k`` symbols again, ``k`` from 1 to
    ``n``; the per-token accuracy on the copied symbols at ``k`` = n, 2n and 4n, as
    the saved runs hold it. A sketch of ``nox -s tasks --quick``, not its numbers.
    """
    import torch
    from torch import nn
    from torch.nn.functional import cross_entropy
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    import posenc

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small runs fastest on one thread

    class Layer(nn.Module):
        def __init__(self, scheme, d=64, heads=4):
            super().__init__()
            self.scheme, self.heads = scheme, heads
            self.norms = nn.ModuleList([nn.LayerNorm(d), nn.LayerNorm(d)])
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            wide = nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)
            self.mlp = nn.Sequential(*wide)
            self.rope = posenc.RotaryEmbedding(d // heads)
            self.alibi = posenc.ALiBi(heads) if scheme == "alibi" else None

        def forward(self, h):
            b, length, d = h.shape
            qkv = self.qkv(self.norms[0](h)).view(b, length, 3, self.heads, -1)
            q, k, v = qkv.transpose(1, 3).unbind(2)
            if self.scheme == "rope":
                q, k = self.rope(q), self.rope(k)
            if self.alibi is None:
                y = sdpa(q, k, v, is_causal=True)
            else:
                y = sdpa(q, k, v, attn_mask=self.alibi(length, causal=True))
            h = h + self.out(y.transpose(1, 2).reshape(b, length, d))
            return h + self.mlp(self.norms[1](h))

    class Model(nn.Module):
        def __init__(self, scheme, d=64):
            super().__init__()
            self.scheme, self.embed = scheme, nn.Embedding(9, d)  # 8 symbols, separator
            self.layers = nn.Sequential(Layer(scheme), Layer(scheme))
            self.head = nn.Linear(d, 9)

        def forward(self, x):
            h = self.embed(x)
            if self.scheme == "sinusoid":
                h = h + posenc.sinusoidal_table(x.shape[1], h.shape[-1])
            return self.head(self.layers(h))

    def batch(k, size):
        symbols = torch.randint(0, 8, (size, k))
        separator = torch.full((size, 1), 8)
        return torch.cat([symbols, separator, symbols], dim=1)

    def answers(model, x, k):  # the logits that predict the copied symbols, and those
        return model(x[:, :-1])[:, k:].flatten(0, 1), x[:, k + 1 :].flatten()

    found = []
    for scheme in ("nope", "sinusoid", "rope", "alibi"):
        torch.manual_seed(seed)
        model = Model(scheme)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        for _ in range(steps):
            k = int(torch.randint(1, n + 1, ()))
            optimizer.zero_grad()
            cross_entropy(*answers(model, batch(k, 32), k)).backward()
            optimizer.step()
        accuracy = {}
        with torch.no_grad():
            for m in MULTIPLES:
                logits, want = answers(model, batch(int(m) * n, 256), int(m) * n)
                accuracy[m] = float((logits.argmax(-1) == want).float().mean())
        print(scheme, {m: round(a, 3) for m, a in accuracy.items()})
        run = {"task": "copy", "scheme": scheme, "seed": seed, "accuracy": accuracy}
        found.append(run)
    torch.set_num_threads(threads)
    return found


if not runs and not FOLDER.parent.is_dir():  # downloaded alone: no benchmarks/results
    print("no saved runs here (they are in the repository): a quick version instead")
    runs = quick_copy_runs()


# %%
# Accuracy against the instance size at test, one panel per task: the line is
# the mean over the seeds; bars: the lowest and the highest seed. The dashed
# vertical line is n, the largest size in training: the points right of it are
# longer than any training instance. The dotted horizontal line is chance, a
# uniform guess among the answer's values: 1/8 for the symbols of copy, reverse
# and select, 1/2 for Flip-Flop's bits. Counting has no such line: its answer
# is the query's number of occurrences modulo 10, which is not uniform, and the
# most frequent count grows with the size, so a constant guess does not score a
# fixed share. xPos, RoPE with a decay, is drawn dashed in RoPE's colour.
LABELS = {  # the scheme's name, as the tables of the guide write it
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
COLOURS = {
    "nope": "0.45",
    "sinusoid": "C0",
    "learned": "C4",
    "rope": "C1",
    "alibi": "C2",
    "t5": "C3",
    "kerple": "C5",
    "fire": "C6",
    "xpos": "C1",
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
                mean = statistics.fmean(values)
                xs.append(int(m))
                ys.append(mean)
                low.append(mean - min(values))
                high.append(max(values) - mean)
        if xs:
            ax.errorbar(
                xs, ys, yerr=[low, high], color=colour, marker=".", capsize=2,
                label=LABELS[scheme], linestyle="--" if scheme == "xpos" else "-",
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
axes[1, 1].tick_params(labelbottom=True)  # select: no panel below it
for ax in (axes[2, 0], axes[1, 1]):
    ax.set_xlabel("instance size at test", fontsize=10)
legend = axes.flat[-1]
handles, labels = axes.flat[0].get_legend_handles_labels()
legend.axis("off")
if handles:
    legend.legend(handles, labels, fontsize=10, loc="center")
else:
    legend.text(
        0.5, 0.5, "no run saved yet:\nnox -s tasks", ha="center", va="center",
        transform=legend.transAxes,
    )  # fmt: skip
seeds = sorted({r["seed"] for r in runs})
title = "Trained on sizes 1..n, tested at n, 2n, 4n"
if runs and not files:
    title = "Quick version (copy only): " + title[0].lower() + title[1:]
if seeds:
    title += f"; seeds {', '.join(map(str, seeds))}"
fig.suptitle(title, fontsize=11)
plt.show()
