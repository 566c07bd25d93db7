"""
Speed of the input layer, measured here
=======================================

An input layer turns token ids into a (B, L, D) tensor. The least it can do is
look the rows up (``embedding``) and add the positions' rows once, with one
out-of-place add: that is the floor. This script times the floor, an
Annotated-Transformer-style pair of modules and posenc's
:class:`~posenc.TokenAndPositionEmbedding` on a small batch, on the machine that
runs it, and draws each as a multiple of the floor. It needs nothing but torch,
matplotlib and posenc, and takes a few seconds; the :ref:`guide-performance`
page shows a full run of ``nox -s bench`` at training size.

Explained in :ref:`guide-performance`, which also says why this small case shows a
different ratio.
"""

# %%
# The candidates, for one dtype: each returns the same (B, L, D) tensor. The
# baseline follows the Annotated Transformer: the lookup, a multiplication by
# ``sqrt(d_model)`` and the addition of the table, each into a new tensor.
import math
import os
import statistics
import time

import matplotlib.pyplot as plt
import torch
from torch.nn.functional import embedding

from posenc import TokenAndPositionEmbedding, sinusoidal_table

torch.manual_seed(0)  # the same random numbers wherever the script runs

B, L, D, VOCAB = 16, 512, 512, 16_000
ids = torch.randint(0, VOCAB, (B, L))


def candidates(dtype):
    layer = TokenAndPositionEmbedding(D, VOCAB).to(dtype).eval()
    weight = layer.embeddings.lut.weight.detach()
    table = sinusoidal_table(L, D, dtype=dtype)

    def baseline():
        return embedding(ids, weight) * math.sqrt(D) + table

    return {
        "floor": lambda: embedding(ids, weight) + table,
        "baseline": baseline,
        "posenc": lambda: layer(ids),
    }


# %%
# Timing. Every candidate runs once per round, in turn, so that a busy moment of
# the machine is shared; before each call a 64 MiB buffer is written, so that no
# call finds the previous one's data in the cache. A figure is the median of the
# rounds, each round the median of a few calls.
flush = torch.empty(16 * 2**20)


def measure(runs, rounds=7, calls=5):
    times = {name: [] for name in runs}
    with torch.inference_mode():
        for run in runs.values():
            run()
        for _ in range(rounds):
            for name, run in runs.items():
                per_call = []
                for _ in range(calls):
                    flush.fill_(1.0)
                    start = time.perf_counter()
                    run()
                    per_call.append(time.perf_counter() - start)
                times[name].append(statistics.median(per_call))
    return {name: statistics.median(t) for name, t in times.items()}


# %%
# The machine's load is part of the result. The 1-minute load average (the
# number of processes running or waiting for a core) is read before and after
# the run: at or above the number of cores, other work shares the cores with
# this script, every figure is slower, and the ratios mix that work in. A loaded
# build can then show posenc slower than the Annotated-Transformer baseline,
# which a quiet run of the same code does not; the :ref:`guide-performance` page
# gives a run measured on a quiet machine.
dtypes = [torch.float32, torch.bfloat16]
load_before = os.getloadavg()[0]
results = {dtype: measure(candidates(dtype)) for dtype in dtypes}
load_after = os.getloadavg()[0]
cores = os.cpu_count() or 1
busy = max(load_before, load_after) >= cores
load = f"load average {load_before:.1f} -> {load_after:.1f} on {cores} cores"
print(f"B={B}, L={L}, D={D}, vocab {VOCAB}; {torch.get_num_threads()} threads; {load}")
print("a loaded machine: other work is in these figures" if busy else "a quiet machine")
for dtype, medians in results.items():
    floor = medians["floor"]
    line = ", ".join(
        f"{name} {ms * 1e3:.2f} ms ({ms / floor:.2f}x)" for name, ms in medians.items()
    )
    print(f"{str(dtype).removeprefix('torch.'):>8}: {line}")

# %%
# Each bar is a time divided by the floor's, measured in the same run: below the
# dashed line is faster than the floor. posenc's eager layer makes one fresh
# output where the floor makes two, and in bfloat16 one more elementwise pass
# (the scaled embedding is rounded before the table is added, as the unfused
# modules round it).
names = {"floor": "floor\n(lookup + add)", "baseline": "Annotated\nTransformer",
         "posenc": "posenc\n(eager)"}  # fmt: skip
fig, axes = plt.subplots(1, 2, figsize=(6.8, 3.6), sharey=True, layout="constrained")
for ax, dtype in zip(axes, dtypes, strict=True):
    medians = results[dtype]
    ratios = [medians[name] / medians["floor"] for name in names]
    bars = ax.bar(range(len(names)), ratios, color=["#9e9e9e", "#d62728", "#1f77b4"])
    ax.bar_label(bars, fmt="%.2f", fontsize=10)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="floor (= 1)")
    ax.set_xticks(range(len(names)), list(names.values()), fontsize=10)
    ax.set_title(str(dtype).removeprefix("torch."), fontsize=11)
    ax.tick_params(axis="y", labelsize=10)
    ax.set_ylim(0, max(ratios) * 1.2)
axes[0].set_ylabel("time / floor (lower is faster)", fontsize=10)
axes[0].legend(loc="upper left", fontsize=10)
state = "loaded" if busy else "quiet"
fig.suptitle(
    f"Input layer, B={B}, L={L}, D={D}, measured on this machine\n"
    f"{load.replace('->', '→')} ({state})",
    fontsize=11,
)
plt.show()
