r"""
Similarity on a grid under a two-axis rotation
==============================================

A rotation on two axes turns half of a head's pairs by the row of a patch and
half by its column, each half with its own ladder. The score of a query at one
cell with the same vector rotated at every other cell then depends only on the
displacement :math:`(\Delta h, \Delta w)`: the map below is the same shape
around any cell, for any vector.

Explained in :ref:`guide-axes`, section :ref:`guide-axes-grids`.
"""

# %%
# A 64-feature head on a 24 × 24 grid, the vision towers' axial form: 32
# features for the rows, 32 for the columns. One random vector, rotated at
# every cell; cosine similarity to the copy at the centre.
import matplotlib.pyplot as plt
import torch

import posenc

torch.manual_seed(0)
size, head_dim = 24, 64
rope = posenc.RotaryEmbedding(head_dim, axes=(32, 32)).double()
cells = posenc.grid_positions(size, size)
v = torch.randn(head_dim, dtype=torch.float64)
rotated = rope(v.expand(size * size, head_dim), positions=cells)
rotated = rotated / rotated.norm(dim=-1, keepdim=True)
centre = 12 * size + 12
similarity = (rotated @ rotated[centre]).view(size, size)
print("similarity to itself:", round(float(similarity[12, 12]), 6))

# %%
# The same displacement from another cell gives the same score:
corner = (rotated @ rotated[3 * size + 4]).view(size, size)
print(
    "one step right of (12, 12) and of (3, 4):",
    round(float(similarity[12, 13]), 6),
    round(float(corner[3, 5]), 6),
)

# %%
# The map: a cross of high similarity along the row and the column of the
# centre, where only one axis's pairs have turned. The slow pairs barely turn
# over 24 cells, so no cell is far below the lowest value shown: the colours
# span the range that occurs.
lowest = float(similarity.min())
print("lowest similarity on the grid:", round(lowest, 3))
fig, ax = plt.subplots(figsize=(5.2, 4.4), layout="constrained")
image = ax.imshow(similarity.numpy(), cmap="magma", vmin=lowest, vmax=1)
ax.plot(12, 12, marker="x", color="cyan", markersize=8)
ax.set_xlabel("column w", fontsize=10)
ax.set_ylabel("row h", fontsize=10)
ax.tick_params(labelsize=10)
colorbar = fig.colorbar(image, ax=ax, shrink=0.9)
colorbar.set_label("cosine similarity to (12, 12)", fontsize=10)
colorbar.ax.tick_params(labelsize=10)
ax.set_title("Two-axis RoPE (32 + 32 features), 24 × 24 grid", fontsize=11)
plt.show()
