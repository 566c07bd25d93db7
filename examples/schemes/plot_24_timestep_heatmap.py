r"""
Timestep embeddings over t
==========================

A diffusion model tells its network the timestep :math:`t` through a
sinusoid: with :math:`K` = ``dim // 2`` frequencies
:math:`\omega_k = 10000^{-k/(K-1)}` (DDPM's spacing), the embedding is the
:math:`K` values :math:`\sin(t\,\omega_k)` followed by the :math:`K` values
:math:`\cos(t\,\omega_k)`. Fast columns tell nearby steps apart; slow columns
say roughly where in the schedule :math:`t` is.

Explained in :ref:`guide-timesteps`.
"""

# %%
# The 1000 steps of a DDPM schedule, embedded in 64 columns.
import matplotlib.pyplot as plt
import torch

import posenc

t = torch.arange(1000)
embedding = posenc.timestep_embedding(t, 64)
print("embedding:", tuple(embedding.shape))
print("t = 0:  ", embedding[0, [0, 31, 32, 63]].tolist())
print("t = 999:", [round(v, 4) for v in embedding[999, [0, 31, 32, 63]].tolist()])

# %%
# Rows are columns of the embedding, sines above the line and cosines below it;
# the horizontal axis is the timestep.
fig, ax = plt.subplots(figsize=(6.8, 4), layout="constrained")
image = ax.imshow(
    embedding.T.numpy(),
    aspect="auto",
    cmap="RdBu_r",
    vmin=-1,
    vmax=1,
    interpolation="nearest",
)
ax.axhline(31.5, color="black", linewidth=1)
ax.text(1010, 15, "sin", fontsize=10, va="center")
ax.text(1010, 47, "cos", fontsize=10, va="center")
ax.set_xlabel("timestep t", fontsize=10)
ax.set_ylabel("column", fontsize=10)
ax.set_title("timestep_embedding(t, 64): DDPM's order and spacing", fontsize=11)
ax.tick_params(labelsize=10)
colorbar = fig.colorbar(image, ax=ax, pad=0.06)
colorbar.set_label("value", fontsize=10)
colorbar.ax.tick_params(labelsize=10)
plt.show()

# %%
# Guided-diffusion's order (Stable Diffusion's default in diffusers) puts the
# cosines first and spaces the frequencies as the paper does; the columns are
# other functions of t, so the two are not interchangeable.
guided = posenc.timestep_embedding(t, 64, flip_sin_to_cos=True, downscale_freq_shift=0)
difference = float((guided - embedding).abs().max())
print("largest difference between the two orders:", round(difference, 3))
