r"""
What the schemes do when trained
================================

Each scheme of posenc, in the same small byte-level language model, trained at
a training length L_train and evaluated on the same held-out test bytes in
chunks of 1, 2, 4 and 8 × L_train (as `Press et al.
<https://arxiv.org/abs/2108.12409>`__, 2022, evaluate), at two training
lengths, several seeds each, each scheme at the learning rate its sweep chose
on validation. This script draws the saved runs of ``nox -s
train``, one file a run in ``benchmarks/results/train/``, through the
harness's analysis (``benchmarks/train_analysis.py``): training takes hours
on two cores, drawing a few seconds. Where a part of the set is not saved yet,
the figures draw what is and say what is pending.

Explained in :ref:`guide-trained`.
"""

# %%
# The saved runs, and how much of the plan they are. Each run's file holds the
# test loss (nats per byte) at each multiple of L_train, null where a scheme
# cannot go, and the loss of each block of the test text, which the paired
# intervals resample.
import os
import sys
from pathlib import Path

import matplotlib.pyplot as plt

BENCHMARKS = Path("benchmarks")  # from the repository's root
if not BENCHMARKS.is_dir():
    BENCHMARKS = (
        Path("../..") / BENCHMARKS
    )  # from examples/schemes, as the gallery runs it


def quick_comparison(steps=150, l_train=32, seed=0):
    """Without the saved runs: a quick version, trained here (seconds per scheme).

    Each scheme in a two-layer byte-level model (d_model 64, 4 heads), trained
    ``steps`` steps at ``l_train`` bytes on CPython's own ``argparse.py`` (its first
    90%), then the test loss on 8 KiB of the rest in chunks of 1, 2, 4 and 8 ×
    ``l_train``. One seed, 150 steps: a sketch of the saved set, not its numbers.
    """
    import argparse

    import torch
    from torch import nn
    from torch.nn.functional import cross_entropy
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    import posenc

    torch.set_num_threads(1)  # a model this small runs fastest on one thread
    data = torch.tensor(list(Path(argparse.__file__).read_bytes()))
    split = len(data) * 9 // 10
    train, test = data[:split], data[split : split + 8192]

    class Layer(nn.Module):
        def __init__(self, scheme, d=64, heads=4):
            super().__init__()
            self.scheme, self.heads = scheme, heads
            self.norms = nn.ModuleList([nn.LayerNorm(d), nn.LayerNorm(d)])
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            wide = nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)
            self.mlp = nn.Sequential(*wide)
            self.rope = posenc.RotaryEmbedding(d // heads)
            self.bias = {
                "alibi": posenc.ALiBi(heads),
                "t5": posenc.RelativePositionBias(heads, bidirectional=False),
            }.get(scheme)  # a submodule: T5's table trains with the model

        def forward(self, h):
            b, n, d = h.shape
            qkv = self.qkv(self.norms[0](h)).view(b, n, 3, self.heads, -1)
            q, k, v = qkv.transpose(1, 3).unbind(2)
            if self.scheme == "rope":
                q, k = self.rope(q), self.rope(k)
            if self.bias is None:
                y = sdpa(q, k, v, is_causal=True)
            else:
                y = sdpa(q, k, v, attn_mask=self.bias(n, causal=True))
            h = h + self.out(y.transpose(1, 2).reshape(b, n, d))
            return h + self.mlp(self.norms[1](h))

    class Model(nn.Module):
        def __init__(self, scheme, d=64):
            super().__init__()
            self.scheme, self.embed = scheme, nn.Embedding(256, d)
            self.layers = nn.Sequential(Layer(scheme), Layer(scheme))
            self.head = nn.Linear(d, 256)

        def forward(self, x):
            h = self.embed(x)
            if self.scheme == "sinusoid":
                h = h + posenc.sinusoidal_table(x.shape[1], h.shape[-1])
            return self.head(self.layers(h))

    def loss(model, chunks):
        logits = model(chunks[:, :-1])
        return cross_entropy(logits.flatten(0, 1), chunks[:, 1:].flatten())

    found = {}
    for scheme in ("nope", "sinusoid", "rope", "alibi", "t5"):
        torch.manual_seed(seed)
        model = Model(scheme)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        for _ in range(steps):
            starts = torch.randint(0, len(train) - l_train - 1, (8, 1))
            batch = train[starts + torch.arange(l_train + 1)]
            optimizer.zero_grad()
            loss(model, batch).backward()
            optimizer.step()
        with torch.no_grad():
            found[scheme] = {}
            for multiple in (1, 2, 4, 8):
                n = multiple * l_train + 1
                chunks = test[: len(test) // n * n].view(-1, n)
                found[scheme][multiple] = float(loss(model.eval(), chunks))
        print(scheme, {m: round(v, 3) for m, v in found[scheme].items()})
    _, ax = plt.subplots(figsize=(6.8, 4.0), layout="constrained")
    for scheme, losses in found.items():
        lengths = [m * l_train for m in losses]
        ax.plot(lengths, list(losses.values()), marker="o", label=scheme)
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.axvline(l_train, color="black", linestyle="--", linewidth=1)
    ax.set_xlabel("evaluation length (bytes)", fontsize=10)
    ax.set_ylabel("test loss (nats/byte)", fontsize=10)
    ax.set_title(f"Quick version: {steps} steps at L_train = {l_train}, one seed")
    ax.legend(fontsize=10)
    plt.show()
    return found


if not (BENCHMARKS / "train_analysis.py").is_file():  # downloaded alone
    print("no saved runs here (they are in the repository): a quick version instead")
    quick_comparison()
    sys.exit()
sys.path.insert(0, str(BENCHMARKS.resolve()))
import train_analysis as analysis  # benchmarks/ is not a package

# To draw another folder, say your own quick run's (``nox -s train -- --quick``
# writes /tmp/train-quick/runs; with ``--out /tmp/quick.json``, /tmp/quick/runs):
# TRAIN_RESULTS=/tmp/train-quick/runs
# TRAIN_PLAN=quick python examples/schemes/plot_19_trained_comparison.py
FOLDER = Path(os.environ.get("TRAIN_RESULTS", BENCHMARKS / "results" / "train"))
records = analysis.load(FOLDER)
done = analysis.progress(FOLDER, quick=os.environ.get("TRAIN_PLAN") == "quick")
found = analysis.analyse(records)
print(f"{done['done']} of the plan's {done['jobs']} training runs saved")
for part in done["parts"].values():
    print(f"  {part['text']}: {part['done']} of {part['jobs']}")
scales = list(done["plan"]["steps"])  # small, long
blocks = {block["name"]: block for block in found["findings"]}


def saved_note(scale):
    """' (runs pending)' while the main runs at ``scale`` are not all saved, else ''.

    The counts are printed above and tabled on the guide's page; a figure's text
    stays the same as runs are saved, so its translations do too.
    """
    part = done["parts"].get(f"main-{scale}", {"done": 0, "jobs": 0})
    if part["done"] == part["jobs"]:
        return ""
    return " (runs pending)"


# %%
# Loss against the evaluation length, at each scale: the line is the mean over
# the seeds, the band their range (min to max). First the trained schemes;
# then RoPE trained at L_train and run longer with the scalings users reach
# for, without training (linear and YaRN configured for the length, dynamic
# NTK at its fixed factor). The dashed line marks L_train, the longest length
# the model was trained on.
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
SHORT = {
    **analysis.LABELS,
    "t5": "T5, max_distance L_train",
    "t5-128": "T5, max_distance 128",
}


def pending_axes(ax, text):
    ax.text(
        0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=10
    )
    ax.set_xticks([])
    ax.set_yticks([])


def by_length(schemes, title):
    """One panel per scale: the loss of ``schemes`` against the evaluation length."""
    fig, axes = plt.subplots(1, len(scales), figsize=(6.8, 4.4), layout="constrained")
    axes = list(axes) if len(scales) > 1 else [axes]
    for ax, scale in zip(axes, scales, strict=True):
        block = blocks.get(scale)
        if block is None or not any(s in block["table"] for s in schemes):
            ax.set_title(f"{scale} scale{saved_note(scale)}", fontsize=10)
            pending_axes(ax, "pending:\nno run saved yet")
            continue
        l_train = block["scale"]["L_train"]
        ax.set_title(
            f"{scale} scale, L_train = {l_train}{saved_note(scale)}", fontsize=10
        )
        for scheme in schemes:
            entry = block["table"].get(scheme)
            if entry is None:
                continue
            shown = [(int(m), v) for m, v in entry["loss"].items() if v is not None]
            lengths = [m * l_train for m, _ in shown]
            colour = COLOURS[scheme]
            marker = "o" if len(lengths) == 1 else "."
            means = [v["mean"] for _, v in shown]
            ax.plot(lengths, means, marker=marker, color=colour, label=SHORT[scheme])
            low, high = [v["min"] for _, v in shown], [v["max"] for _, v in shown]
            ax.fill_between(lengths, low, high, color=colour, alpha=0.25, linewidth=0)
        ax.set_xscale("log", base=2)
        ticks = [int(m) * l_train for m in analysis.MULTIPLES]
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.axvline(l_train, color="black", linestyle="--", linewidth=1)
        ax.set_xlabel("evaluation length (bytes)", fontsize=10)
        ax.tick_params(labelsize=10)
    axes[0].set_ylabel("test loss (nats/byte)", fontsize=10)
    handles, labels = next(
        (
            ax.get_legend_handles_labels()
            for ax in axes
            if ax.get_legend_handles_labels()[0]
        ),
        ([], []),
    )
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=10)
    fig.suptitle(title, fontsize=11)
    plt.show()


by_length(analysis.TRAINED, "Trained schemes: the seeds' mean and range")

# %%
by_length(
    ("rope", "rope+linear", "rope+dynamic", "rope+yarn"),
    "RoPE run longer with a scaling, no training",
)

# %%
# The learning-rate sweep: seed 0 of each scheme at each rate, the validation
# loss at L_train. The rate with the lowest is the scheme's rate for its main
# runs (a run that diverged is never chosen).
fig, axes = plt.subplots(
    1, len(scales), figsize=(6.8, 4.2), layout="constrained", squeeze=False
)
for ax, scale in zip(axes[0], scales, strict=True):
    sweep = found["sweep"].get(scale, {})
    part = done["parts"].get(f"sweep-{scale}")
    pending = "" if part is None or part["done"] == part["jobs"] else " (runs pending)"
    ax.set_title(f"sweep, {scale} scale{pending}", fontsize=10)
    if not sweep:
        empty = (
            "no sweep in this plan" if part is None else "pending:\nno run saved yet"
        )
        ax.text(
            0.5,
            0.5,
            empty,
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=10,
        )
        ax.set_xticks([])
        ax.set_yticks([])
        continue
    for scheme in analysis.TRAINED:
        entry = sweep.get(scheme)
        if entry is None:
            continue
        points = sorted(
            (float(lr), loss) for lr, loss in entry["rates"].items() if loss
        )
        ax.plot(
            *zip(*points, strict=True),
            marker="o",
            color=COLOURS[scheme],
            label=SHORT[scheme],
        )
    ax.set_xscale("log")
    rates = done["plan"]["rates"][scale]
    ax.set_xticks([float(r) for r in rates], rates)
    ax.minorticks_off()
    ax.set_xlabel("learning rate", fontsize=10)
    ax.set_ylabel("validation loss, 1×", fontsize=10)
    ax.tick_params(labelsize=10)
handles, labels = axes[0][0].get_legend_handles_labels()
if handles:
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=10)
plt.show()

# %%
# The papers' findings, and this run's own questions, as paired differences:
# for each seed and each block of the test text, the loss of the first term
# minus the second (both saw the same batches and the same bytes), their mean
# and a 95% t-interval that counts the seeds and the stretches of text. A
# finding that claims "less" is reproduced where the interval lies left of its
# bound (the dashed line at 0, or ALiBi's grey bar at 0.03), not reproduced
# where it lies right of it, and not separable where it straddles it. One that
# claims "within 0.01" or "within 0.05" is judged against its two grey bars
# (the tables of the guide give each verdict).
# Only the scales whose main runs are all saved are drawn.
rows = [*analysis.FINDINGS, *analysis.OBSERVATIONS]
fig, ax = plt.subplots(figsize=(6.8, 6.4), layout="constrained")
shift = {scale: 0.18 * (i - (len(scales) - 1) / 2) for i, scale in enumerate(scales)}
markers = dict(zip(scales, "os", strict=False))
drawn = []
for scale in scales:
    block = blocks.get(scale) if not saved_note(scale) else None
    if block is None:
        continue
    drawn.append(scale)
    results = {r["key"]: r for r in [*block["results"], *block["observations"]]}
    for y, finding in enumerate(rows):
        r = results[finding.key]
        if r["verdict"] is None:
            continue
        lo, hi = r["interval"]
        ax.errorbar(
            r["mean"],
            y + shift[scale],
            xerr=[[r["mean"] - lo], [hi - r["mean"]]],
            fmt=markers[scale],
            color="C0" if scale == scales[0] else "C3",
            label=scale if y == 0 else None,
            markersize=4,
        )
ax.axvline(0, color="black", linestyle="--", linewidth=1)


for y, finding in enumerate(rows):  # a finding's own bound, where it is not 0
    bounds = (
        [finding.bound] if finding.kind == "less" else [-finding.bound, finding.bound]
    )
    for bound in bounds:
        if bound:
            ax.plot([bound, bound], [y - 0.35, y + 0.35], color="0.5", linewidth=2)


names = [analysis.terms(f) for f in rows]
ax.set_yticks(range(len(rows)), names)
ax.invert_yaxis()
ax.set_xscale("symlog", linthresh=0.03, linscale=0.5)
ticks = [-1, -0.3, -0.1, -0.03, 0, 0.03, 0.1, 0.3, 1]
ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
ax.set_xlabel(
    "paired difference, first − second (nats/byte)\n"
    "holds left of its bound (0 or grey bar), or between two bars",
    fontsize=10,
)
ax.tick_params(labelsize=10)
pending = [scale for scale in scales if scale not in drawn]
title = "Findings: mean paired difference and 95% interval"
if pending:
    title += (
        f"\npending: {' and '.join(pending)} scale{'s' if len(pending) > 1 else ''}"
    )
    title += " (main runs not all saved)"
ax.set_title(title, fontsize=10)
if drawn:
    ax.legend(fontsize=10, title="scale", title_fontsize=10)
plt.show()
