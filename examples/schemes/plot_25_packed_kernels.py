r"""
Packed documents, and the kernels a bias runs in
================================================

A packed training row holds several documents end to end, each with positions
that restart at 0. A query may see neither a later slot nor another document:
the mask is causal *and* block-diagonal. A relative bias such as ALiBi then
runs in one of three kernels: SDPA with the dense bias as ``attn_mask``,
FlexAttention with the bias as a ``score_mod`` (and the mask as a block mask),
or flash-attn with ``alibi_slopes``. This example draws a packed row's mask
and bias, then compares the first two kernels' time and memory.

Explained in :ref:`guide-bias`, sections :ref:`guide-bias-documents` and
:ref:`guide-bias-kernels`.
"""

# %%
# Four documents of 5, 9, 3 and 7 tokens in a row of 24. The four descriptions
# of the packing: lengths, document ids, positions and ``cu_seqlens``.
import json
import re
import statistics
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch

import posenc

torch.manual_seed(0)  # the same random numbers wherever the script runs

lengths = [5, 9, 3, 7]
docs = posenc.document_ids(lengths)
print("documents:", docs.tolist())
print("positions:", posenc.positions_from_lengths(lengths).tolist())
print("cu_seqlens:", posenc.cu_seqlens(lengths).tolist())

# %%
# Left, the mask every kernel applies (:func:`~posenc.document_mask`): a query
# sees the earlier slots of its own document. Right, ALiBi's bias for head 0
# with ``documents=`` and ``causal=True``, drawn as the factor
# :math:`e^{b}` that softmax puts on each key (blank: :math:`-\infty`). Each
# document's block is the bias it has alone.
alibi = posenc.ALiBi(8)
mask = posenc.document_mask(docs)
bias = alibi(len(docs), documents=docs, causal=True)
alone = all(
    torch.equal(bias[:, s : s + n, s : s + n], alibi(n, causal=True))
    for s, n in zip(posenc.cu_seqlens(lengths)[:-1].tolist(), lengths, strict=True)
)
print("each document's block is its own bias:", alone)
factor = bias[0].exp().masked_fill(~mask, float("nan"))
fig, axes = plt.subplots(1, 2, figsize=(6.8, 3.4), layout="constrained")
axes[0].imshow(mask.numpy(), cmap="Greys", vmin=0, vmax=1.4)
axes[0].set_title("document + causal mask", fontsize=10)
image = axes[1].imshow(factor.numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
axes[1].set_title("ALiBi head 0, exp(bias)", fontsize=10)
for ax in axes:
    ax.set_xlabel("key slot", fontsize=10)
    ax.set_ylabel("query slot", fontsize=10)
    ax.tick_params(labelsize=10)
colorbar = fig.colorbar(image, ax=axes[1], shrink=0.85)
colorbar.ax.tick_params(labelsize=10)
plt.show()

# %%
# The kernels. A saved run of ``nox -s bench`` (sections ``attention-1k``,
# ``-4k``, ``-8k``: causal ALiBi attention, 8 heads, head dimension 64) holds
# each kernel's time and its peak memory; without it, this script measures a
# small version here (FlexAttention compiled at two short lengths, time only,
# and the dense bias's own size for its memory).
SAVED = Path(
    "benchmarks/results/attention-cpu-2threads.json"
)  # from the repository's root
if not SAVED.is_file():
    SAVED = Path("../..") / SAVED  # from examples/schemes, as the gallery runs it
LABELS = {"dense": "SDPA + dense bias", "flex": "FlexAttention + score_mod"}


def from_saved(path):
    """Per length: each case's median time (ms) and peak memory (MiB), glibc's."""
    run = json.loads(path.read_text(encoding="utf-8"))
    rows = {}
    for section in run["sections"]:
        size = re.fullmatch(r"attention-(\d+)k", section["key"])
        if size is None:  # the decoding row's section
            continue
        length = int(size[1]) * 1024
        memory = section["note"].split("Peak memory")[-1]
        peaks = dict(re.findall(r"(\w+) (\d+) MiB", memory))
        rows[length] = {
            case["name"]: (
                case["allocators"]["default"]["median_ms"],
                float(peaks[case["name"]]) if case["name"] in peaks else None,
            )
            for case in section["cases"]
        }
    return rows, f"saved run of {run['date']}, {run['settings']['threads']} threads"


def kernels(length):
    """The two kernels at one length, and the dense bias's size in MiB."""
    from torch.nn.attention.flex_attention import flex_attention
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q, k, v = torch.randn(3, 1, 8, length, 64).unbind()
    block_mask = posenc.document_block_mask(length=length)
    flex = torch.compile(flex_attention, dynamic=False)
    score_mod = alibi.score_mod()
    return {
        "dense": lambda: sdpa(q, k, v, attn_mask=alibi(length, causal=True)),
        "flex": lambda: flex(q, k, v, score_mod=score_mod, block_mask=block_mask),
    }, 8 * length * length * 4 / 2**20


def measured_here(lengths=(256, 512)):
    """A quick version: the median of a few calls; memory is the dense bias's size."""
    rows = {}
    for length in lengths:
        runs, dense_mib = kernels(length)
        rows[length] = {}
        with torch.inference_mode():
            for name, run in runs.items():
                run()
                times = []
                for _ in range(5):
                    start = time.perf_counter()
                    run()
                    times.append((time.perf_counter() - start) * 1e3)
                mib = dense_mib if name == "dense" else 0.0
                rows[length][name] = (statistics.median(times), mib)
    return rows, "measured here, quick version"


rows, source = from_saved(SAVED) if SAVED.is_file() else measured_here()
print(source)
for length, cases in rows.items():
    print(length, {name: (round(ms, 1), mib) for name, (ms, mib) in cases.items()})

# %%
# Time (left, log scale) and peak memory (right) per length. The dense path
# holds an :math:`H L^2` bias; FlexAttention holds none, and skips the blocks
# above the diagonal.
fig, axes = plt.subplots(1, 2, figsize=(6.8, 3.2), layout="constrained")
for name, label in LABELS.items():
    xs = list(rows)
    axes[0].plot(xs, [rows[x][name][0] for x in xs], marker="o", label=label)
    mib = [rows[x][name][1] for x in xs]
    if all(m is not None for m in mib):
        axes[1].plot(xs, mib, marker="o", label=label)
axes[0].set_yscale("log")
axes[0].set_ylabel("time per call (ms)", fontsize=10)
axes[1].set_ylabel("peak memory (MiB)", fontsize=10)
for ax in axes:
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens L", fontsize=10)
    ax.tick_params(labelsize=10)
axes[0].legend(fontsize=10)
fig.suptitle(f"Causal ALiBi attention, 8 heads ({source})", fontsize=10)
plt.show()
