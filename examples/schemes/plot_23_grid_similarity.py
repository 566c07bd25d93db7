r"""
Similarity on a grid of patches
===============================

The 2-D sin-cos encoding (MAE, DiT) gives each patch of a 14 × 14 grid a
vector built from its row and its column. Each frequency :math:`\omega`
contributes :math:`\cos(\Delta h\,\omega) + \cos(\Delta w\,\omega)` to the dot
product of two cells, so the similarity depends only on their displacement
:math:`(\Delta h, \Delta w)` and falls off with distance along each axis.

Explained in :ref:`guide-grid`.
"""

# %%
# A ViT-B/16 grid: 14 × 14 patches, 768 columns. Every vector has squared norm
# ``d_model / 2``, so dividing the dot products by it gives cosine similarities.
import matplotlib.pyplot as plt
import torch

import posenc

size, d_model = 14, 768
grid = posenc.sincos_2d(size, size, d_model, dtype=torch.float64)
print("table:", tuple(grid.shape))
gram = grid @ grid.T / (d_model / 2)
print(
    "every cell's similarity to itself is 1:",
    torch.allclose(gram.diagonal(), torch.ones(196, dtype=torch.float64)),
)
similarity = gram.view(size, size, size, size)

# %%
# The similarity of one cell to all the others, for three cells. The peak
# sits on the chosen cell; the pattern is the same shape wherever it sits. Many
# slow columns barely change across 14 cells, so no two cells are far apart:
# the lowest similarity on the grid, printed below, is 0.66, and the colours
# span the range that occurs.
cells = [(0, 0), (4, 9), (7, 7)]
lowest = float(similarity.min())
print("lowest similarity on the grid:", round(lowest, 3))
fig, axes = plt.subplots(1, 3, figsize=(6.8, 3.0), sharey=True, layout="constrained")
for ax, (h, w) in zip(axes, cells, strict=True):
    image = ax.imshow(similarity[h, w].numpy(), cmap="magma", vmin=lowest, vmax=1.0)
    ax.plot(w, h, marker="x", color="cyan", markersize=8)
    ax.set_title(f"from cell (h={h}, w={w})", fontsize=10)
    ax.set_xlabel("column w", fontsize=10)
    ax.set_xticks(range(0, size, 4))
    ax.set_yticks(range(0, size, 4))
    ax.tick_params(labelsize=10)
axes[0].set_ylabel("row h", fontsize=10)
colorbar = fig.colorbar(image, ax=axes, shrink=0.9)
colorbar.set_label("cosine similarity", fontsize=10)
colorbar.ax.tick_params(labelsize=10)
fig.suptitle("2-D sin-cos encoding, 14 × 14 grid, d_model = 768", fontsize=11)
plt.show()

# %%
# Same displacement, same similarity: one step right of (4, 9) and of (7, 7).
print("(4,9)->(4,10):", round(float(similarity[4, 9, 4, 10]), 6))
print("(7,7)->(7,8): ", round(float(similarity[7, 7, 7, 8]), 6))
