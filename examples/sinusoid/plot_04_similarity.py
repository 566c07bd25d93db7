r"""
Dot products between positions
==============================

How alike are the encodings of two positions? Each column pair contributes

.. math::

    \begin{aligned}
    &\sin(p\omega_k)\sin(q\omega_k) + \cos(p\omega_k)\cos(q\omega_k) \\
    &\qquad = \cos\big((p - q)\,\omega_k\big),
    \end{aligned}

so the dot product

.. math::

    PE(p) \cdot PE(q) = \sum_k \cos\big((p - q)\,\omega_k\big)

depends on the offset :math:`p - q` only, and is even in it. This example
draws it and checks that numerically.

Explained in :ref:`guide-order`, section :ref:`guide-order-shifts`.
"""

# %%
# The Gram matrix of the table holds every :math:`PE(p) \cdot PE(q)`. Float64
# keeps rounding out of the check.
import matplotlib.pyplot as plt
import torch

import posenc

d_model, n = 128, 100
table = posenc.sinusoidal_table(n, d_model, dtype=torch.float64)
sim = table @ table.T
print("Gram matrix:", tuple(sim.shape))
print(
    "PE(p)·PE(p) == d_model / 2 for all p:",
    torch.allclose(sim.diagonal(), torch.tensor(d_model / 2, dtype=torch.float64)),
)

# %%
# Along each diagonal :math:`q = p + m`, for each offset :math:`m`, the value must
# be constant. The largest
# deviation from the diagonal's first entry, over all offsets, is at rounding
# level; the matrix is also symmetric.
deviation = max(
    (sim.diagonal(m) - sim.diagonal(m)[0]).abs().max().item() for m in range(n)
)
print(f"max deviation along diagonals: {deviation:.1e}")
print("symmetric:", torch.allclose(sim, sim.T, rtol=0, atol=1e-12))

# %%
# Left, the matrix; right, every pair :math:`(p, q)` against its offset, all
# falling on the curve of the formula, which peaks at 0 and decays with distance.
p, q = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
fig, (ax0, ax1) = plt.subplots(
    1, 2, figsize=(6.8, 3.6), facecolor="white", layout="constrained"
)
image = ax0.imshow(sim.numpy(), cmap="viridis", origin="lower")
ax0.set_xlabel("position q")
ax0.set_ylabel("position p")
ax0.set_title(f"PE(p)·PE(q), d_model = {d_model}", fontsize="medium")
fig.colorbar(image, ax=ax0, label="dot product")
ax1.scatter(
    (p - q).flatten(), sim.flatten(), s=2, color="tab:blue", label="all pairs (p, q)"
)
offsets = torch.arange(-n + 1, n, dtype=torch.float64)
formula = torch.cos(offsets[:, None] * posenc.inverse_frequencies(d_model)).sum(dim=1)
ax1.plot(offsets, formula, color="tab:red", linewidth=1, label="Σ cos((p − q) ω_k)")
ax1.set_xlabel("offset p − q")
ax1.set_ylabel("dot product")
ax1.set_title("A function of p − q only", fontsize="medium")
# Room above the peak for the legend, clear of the points.
ax1.set_ylim(top=1.25 * d_model / 2)
ax1.legend(loc="upper right", fontsize="medium")
plt.show()
