r"""
Wavelengths of the column pairs
===============================

Column pair :math:`k` of the encoding turns at
:math:`\omega_k = 10000^{-2k/d_{model}}` radians per position, so it repeats
every :math:`\lambda_k = 2\pi / \omega_k` positions. The wavelengths form a
geometric progression from :math:`2\pi` up to just below
:math:`2\pi \cdot 10000`: a straight line on a log scale.

Explained in :ref:`guide-order`, section :ref:`guide-order-wavelengths`.
"""

# %%
# :func:`posenc.inverse_frequencies` returns the :math:`\omega_k` in float64,
# one per pair.
import math

import matplotlib.pyplot as plt

import posenc

d_model = 512
omega = posenc.inverse_frequencies(d_model)
wavelength = 2 * math.pi / omega
print("pairs:", omega.numel())
print(f"shortest: {wavelength[0].item():.4f} (2π = {2 * math.pi:.4f})")
print(f"longest:  {wavelength[-1].item():.0f} (2π·10000 = {2 * math.pi * 1e4:.0f})")

# %%
# Each pair is slower than the previous one by the same factor,
# :math:`10000^{2/d_{model}}`.
ratio = wavelength[1:] / wavelength[:-1]
print(f"ratio between pairs: {ratio.mean().item():.6f} == {1e4 ** (2 / d_model):.6f}")

# %%
# The last pair stops one step short of :math:`2\pi \cdot 10000` (dashed).
k = range(omega.numel())
fig, ax = plt.subplots(figsize=(6.8, 3.8), facecolor="white", layout="constrained")
ax.semilogy(k, wavelength, color="tab:blue", label="λ_k = 2π / ω_k")
ax.axhline(2 * math.pi * 1e4, color="gray", linestyle="--", label="2π · 10000")
ends = (
    (0, "2π ≈ 6.28", (12, -16)),
    (len(k) - 1, f"{wavelength[-1].item():,.0f}", (-120, -10)),
)
for i, text, offset in ends:
    ax.plot(i, wavelength[i], "o", color="tab:red")
    ax.annotate(
        f"k = {i}: {text}",
        (i, wavelength[i]),
        xytext=offset,
        textcoords="offset points",
    )
ax.set_xlabel("pair index k (columns 2k, 2k + 1)")
ax.set_ylabel("wavelength (positions)")
ax.set_title(f"Wavelength per column pair, d_model = {d_model}")
ax.set_ylim(1, 3e5)
ax.legend(loc="lower right")
plt.show()
