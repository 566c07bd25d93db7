r"""
Attention does not see order; the encoding makes it
===================================================

Self-attention compares every token with every other token, and nothing in
:math:`\mathrm{softmax}(QK^\top/\sqrt{d_k})V` refers to where a token stands.
Shuffle the tokens and the outputs come back shuffled the same way: attention is
*permutation equivariant*. Adding the positional encoding after the shuffle, as
a model does, breaks that symmetry.

Explained in :ref:`guide-order`, section :ref:`guide-order-attention`.
"""

# %%
# Six random token vectors, of about the size of the encoding's entries, and a
# fixed shuffle of them.
import matplotlib.pyplot as plt
import torch

import posenc

torch.manual_seed(0)
x = 0.5 * torch.randn(6, 16)
perm = torch.tensor([3, 0, 5, 1, 4, 2])
inverse = perm.argsort()

# %%
# Without positions, attending over the shuffled tokens gives the shuffled
# outputs, up to float rounding.
out, w = posenc.attention(x, x, x)
out_p, w_p = posenc.attention(x[perm], x[perm], x[perm])
print(f"no PE:   max |out_perm - out[perm]| = {(out_p - out[perm]).abs().max():.1e}")

# %%
# With the encoding added to the shuffled sequence, each token gets the
# encoding of its new place, and the outputs differ.
pe = posenc.PositionalEncoding(16)
y, y_p = pe(x), pe(x[perm])
out_pe, w_pe = posenc.attention(y, y, y)
out_pe_p, w_pe_p = posenc.attention(y_p, y_p, y_p)
print(
    f"with PE: max |out_perm - out[perm]| = {(out_pe_p - out_pe[perm]).abs().max():.2f}"
)

# %%
# The attention weights of the shuffled run, put back in the original token
# order, match the original weights without the encoding (top row: the
# difference is black) but not with it (bottom row).
rows = (
    ("no PE", w, w_p[inverse][:, inverse]),
    ("with PE", w_pe, w_pe_p[inverse][:, inverse]),
)
labels = [f"t{i}" for i in range(6)]
fig, axes = plt.subplots(
    2, 3, figsize=(6.8, 6.2), facecolor="white", layout="constrained"
)
for (name, original, restored), row in zip(rows, axes, strict=True):
    difference = (original - restored).abs()
    panels = (
        (original, "original order", "viridis", 0.7),
        (restored, "shuffled, put back", "viridis", 0.7),
        (difference, f"|difference|, max {difference.max():.0e}", "magma", 0.25),
    )
    for ax, (values, title, cmap, vmax) in zip(row, panels, strict=True):
        ax.imshow(values.numpy(), cmap=cmap, vmin=0, vmax=vmax)
        ax.set_title(title, fontsize="medium")
        ax.set_xticks(range(6), labels)
        ax.set_yticks(range(6), labels)
        ax.set_xlabel("key token")
    row[0].set_ylabel(f"{name}\nquery token", fontweight="bold")
weights, differences = axes[0, 0].images[0], axes[0, 2].images[0]
fig.colorbar(
    weights, ax=axes[:, :2], location="bottom", label="attention weight", shrink=0.7
)
fig.colorbar(differences, ax=axes[:, 2], location="bottom", label="|difference|")
fig.suptitle("Attention weights without (top) and with (bottom) the encoding")
plt.show()
