r"""
Interleaved and concatenated layouts
====================================

Libraries store the same sines and cosines in two column orders: the paper
interleaves them (sin, cos, sin, cos, ...), while tensor2tensor, fairseq,
Marian and Whisper put every sine first and every cosine after. Side by side,
the two tables of ``d_model = 64`` over 64 positions look different, yet they
hold exactly the same numbers.

Explained in :ref:`guide-conventions`.
"""

# %%
# ``layout=`` selects the order. Both tables come from the same float64
# angles, rounded once, so they can be compared with ``torch.equal``.
import matplotlib.pyplot as plt
import torch

import posenc

d_model, n = 64, 64
inter = posenc.sinusoidal_table(n, d_model)
concat = posenc.sinusoidal_table(n, d_model, layout="concatenated")
print("same shape:", inter.shape == concat.shape, tuple(inter.shape))
print("same columns in the same order:", torch.equal(inter, concat))

# %%
# Taking the even columns (the sines) and then the odd ones (the cosines) of the
# interleaved table gives the concatenated table, bit for bit; the inverse
# permutation goes back.
order = torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])
print(
    "first columns of the permutation:",
    order[:4].tolist(),
    "...",
    order[32:36].tolist(),
)
print("interleaved[:, order] == concatenated:", torch.equal(inter[:, order], concat))
print(
    "concatenated[:, order.argsort()] == interleaved:",
    torch.equal(concat[:, order.argsort()], inter),
)

# %%
# In the interleaved table each sine column sits next to its cosine, so the
# stripes of one frequency come in pairs. In the concatenated table the same
# stripes appear twice, once in the left half (sines) and once in the right
# half (cosines).
fig, axes = plt.subplots(
    1, 2, figsize=(6.8, 4.2), sharey=True, facecolor="white", layout="constrained"
)
panels = (
    (inter, 'layout="interleaved"\nsin, cos, sin, cos, ...'),
    (concat, 'layout="concatenated"\nall sin, then all cos'),
)
for ax, (table, title) in zip(axes, panels, strict=True):
    image = ax.imshow(
        table.numpy(),
        aspect="auto",
        cmap="RdBu_r",
        vmin=-1,
        vmax=1,
        interpolation="nearest",
    )
    ax.set_title(title, fontsize="medium")
    ax.set_xlabel("column j")
axes[1].axvline(d_model / 2 - 0.5, color="black", linewidth=1, linestyle="--")
axes[0].set_ylabel("position")
fig.colorbar(image, ax=axes, label="encoding value", shrink=0.9)
fig.suptitle(f"One table, two column orders: d_model = {d_model}, positions 0–{n - 1}")
plt.show()

# %%
# The other difference between libraries is not an order but a value.
# ``endpoint=False`` (the paper) spaces the exponents of the frequencies
# :math:`\omega_k` in steps of :math:`2/d_{model}`; ``endpoint=True``
# (tensor2tensor, fairseq, Whisper) stretches them so that the slowest pair turns
# at exactly :math:`1/base`. No permutation turns one table into the other.
paper = posenc.inverse_frequencies(d_model)
stretched = posenc.inverse_frequencies(d_model, endpoint=True)
print(f"slowest frequency: paper {paper[-1].item():.3e},", end=" ")
print(f"endpoint {stretched[-1].item():.3e}")
other = posenc.sinusoidal_table(n, d_model, endpoint=True)
same_values = torch.equal(inter.flatten().sort().values, other.flatten().sort().values)
print(
    "endpoint=True table has the same sorted values (any permutation would):",
    same_values,
)

# %%
# Both ladders start at :math:`\omega_0 = 1` and fall geometrically, a straight
# line on a log scale; the endpoint ladder falls slightly faster and ends on
# :math:`10^{-4}`.
k = torch.arange(paper.numel())
fig, ax = plt.subplots(figsize=(6.8, 4), facecolor="white", layout="constrained")
ax.semilogy(
    k.numpy(), paper.numpy(), "o-", markersize=3, label="endpoint=False (paper)"
)
ax.semilogy(k.numpy(), stretched.numpy(), "s-", markersize=3, label="endpoint=True")
ax.axhline(1e-4, color="gray", linestyle="--", linewidth=1, label="1 / base = 1e-4")
ax.set_xlabel("pair index k (interleaved columns 2k, 2k + 1)")
ax.set_ylabel("frequency ω_k (radians per position)")
ax.set_title(f"Frequency spacing of the column pairs, d_model = {d_model}")
ax.legend(loc="upper right")
ax.grid(True, which="major", alpha=0.3)
plt.show()
