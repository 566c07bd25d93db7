r"""
The table as a heatmap
======================

A realistic encoding has hundreds of columns. Drawn as an image of positions by
dimensions, the table of ``d_model = 512`` over the first 100 positions shows
fast stripes on the left, where the wavelengths are short, and nearly constant
columns on the right, where they are far longer than 100 positions. The sine
(even) and cosine (odd) columns are drawn apart, since they interleave.

Explained in :ref:`guide-order`, section :ref:`guide-order-formula`.
"""

# %%
# :func:`posenc.sinusoidal_table` gives the rows of positions ``0 .. n-1``.
# Splitting even and odd columns gives one panel per function, each indexed by
# the pair :math:`k` (columns :math:`2k` and :math:`2k+1`).
import matplotlib.pyplot as plt

import posenc

table = posenc.sinusoidal_table(100, 512)
sin_cols, cos_cols = table[:, 0::2], table[:, 1::2]
print("table:", tuple(table.shape), "sin columns:", tuple(sin_cols.shape))

# %%
# Position 0 is :math:`\sin 0 = 0` and :math:`\cos 0 = 1` in every pair, and the
# slowest pairs barely move over 100 positions.
print("row 0, all sin == 0:", bool((sin_cols[0] == 0).all()))
print("row 0, all cos == 1:", bool((cos_cols[0] == 1).all()))
print(f"cos of the last pair at position 99: {cos_cols[99, -1].item():.6f}")
# From pair 160 on, the largest angle over these positions, 99 times the pair's
# frequency, is under a third of a radian.
omega_160 = 10_000.0 ** (-2 * 160 / 512)
print(f"largest angle of pairs 160 to 255, positions 0-99: {99 * omega_160:.3f} rad")

# %%
# Both panels share one colour scale, from -1 (blue) to +1 (red).
fig, axes = plt.subplots(
    1, 2, figsize=(6.8, 3.8), sharey=True, facecolor="white", layout="constrained"
)
for ax, cols, name in zip(
    axes,
    (sin_cols, cos_cols),
    ("sin: even columns 2k", "cos: odd columns 2k+1"),
    strict=True,
):
    image = ax.imshow(
        cols.numpy(),
        aspect="auto",
        cmap="RdBu_r",
        vmin=-1,
        vmax=1,
        interpolation="nearest",
    )
    ax.set_title(name)
    ax.set_xlabel("pair index k")
axes[0].set_ylabel("position")
fig.colorbar(image, ax=axes, label="encoding value", shrink=0.9)
fig.suptitle("Sinusoidal positional encoding, d_model = 512, positions 0–99")
plt.show()
