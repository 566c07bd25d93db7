r"""
Token embeddings meet positional encodings
==========================================

The input layer of a Transformer turns token ids into vectors, scales them by
:math:`\sqrt{d_{model}}`, and adds the sinusoidal encoding of each position.
This example runs the step-5 demo of the Annotated Transformer walkthrough with
posenc and checks its printed numbers: the scale, the table, and the same token
becoming two different vectors at two positions.

Explained in :ref:`seeds`, output for output, and :ref:`guide-tokens` (why the
scale).
"""

# %%
# :class:`posenc.Embeddings` looks each id up in an ``nn.Embedding`` table,
# initialised from :math:`N(0, 1)`, and multiplies by :math:`\sqrt{512} \approx 22.6`.
import math

import matplotlib.pyplot as plt
import torch

import posenc

torch.manual_seed(0)
emb = posenc.Embeddings(d_model=512, vocab=1000)
tokens = torch.tensor([[17, 42, 7]])
e = emb(tokens)
raw = emb.lut(tokens).detach()
print("token ids", tokens.tolist(), "-> embeddings", tuple(e.shape))
print(f"std of the table entries: {raw.std():.3f}")
print(f"after × {math.sqrt(512):.1f}: {e.std():.3f}")

# %%
# The encoding is a fixed buffer, not a parameter: nothing in it is trained.
pe = posenc.PositionalEncoding(d_model=512, dropout=0.0)
print("buffer:", tuple(pe.pe.shape))
print("parameters:", sum(p.numel() for p in pe.parameters()))

# %%
# Added to zeros, the output is the table. Position 0 reads
# :math:`[\sin 0, \cos 0, \dots] = [0, 1, 0, 1, \dots]`.
print(pe(torch.zeros(1, 4, 512))[0, :, :6].round(decimals=3))

# %%
# The token 42 at positions 0 and 1 has one embedding; the encoding sets the
# two apart by :math:`\lVert PE(0) - PE(1) \rVert`.
same = emb(torch.tensor([[42, 42]]))
z = pe(same)
print(f"embedding only: distance {(same[0, 0] - same[0, 1]).norm():.2f}")
print(f"with encoding:  distance {(z[0, 0] - z[0, 1]).norm():.2f}")

# %%
# Why scale? The encoding lives in :math:`[-1, 1]` (shaded). Unscaled, the
# embedding entries are of the same size, and the position would weigh as much
# as the token; scaled, they spread over about :math:`\pm 60` and the position
# is a small offset on top.
fig, axes = plt.subplots(
    1, 2, figsize=(6.8, 3.8), facecolor="white", layout="constrained"
)
panels = (
    (raw, "before scaling: lut(ids)", 4),
    (e.detach(), "after × √512: Embeddings", 100),
)
for ax, (values, title, limit) in zip(axes, panels, strict=True):
    ax.hist(
        values.flatten(),
        bins=40,
        range=(-limit, limit),
        color="tab:blue",
        label="entries",
    )
    ax.axvspan(-1, 1, color="tab:orange", alpha=0.3, zorder=0, label="PE range [-1, 1]")
    for edge in (-1, 1):
        ax.axvline(edge, color="tab:orange", linewidth=1.5)
    ax.set_title(f"{title}, std {values.std():.2f}", fontsize="medium")
    ax.set_xlabel("entry value")
axes[0].set_ylabel("count (3 tokens × 512 entries)")
axes[1].legend(loc="upper left", fontsize="medium")
plt.show()
