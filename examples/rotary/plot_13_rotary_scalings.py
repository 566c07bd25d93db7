r"""
The frequencies of each rotary scaling
======================================

A model trained on :math:`L_0` tokens has seen its slow pairs turn only through
the angles of positions below :math:`L_0`. Each scaling for longer contexts
slows some pairs down, by up to the factor :math:`s`, and each chooses
differently which ones. :func:`posenc.rope_frequencies` computes them from the
``rope_parameters`` dict of a model config; here all of them get
``head_dim = 128``, Llama 3's base of 500,000, :math:`L_0 = 8192` and
:math:`s = 8`.

Explained in :ref:`guide-rotary`, section :ref:`guide-rotary-scalings`.
"""

# %%
# One config per scaling type, in Hugging Face's format. The LongRoPE factors
# are made up for the figure (real ones come from a search, one per pair): a
# smooth rise from 1 to :math:`s`. For each scaling, at a length of
# :math:`4 L_0`: how many of the 64 pairs keep their frequency, how many are
# divided by :math:`s` ("/ s"), and the attention factor.
import math

import matplotlib.pyplot as plt
import torch

import posenc

head_dim, base, trained, s = 128, 500_000.0, 8192, 8.0
pairs = head_dim // 2
rise = [1 + (s - 1) * (k / (pairs - 1)) ** 2 for k in range(pairs)]
configs = {
    "linear": {"rope_type": "linear", "factor": s},
    "dynamic, n = 4 L₀": {
        "rope_type": "dynamic", "factor": s, "max_position_embeddings": trained,
    },
    "yarn": {
        "rope_type": "yarn", "factor": s, "original_max_position_embeddings": trained,
    },
    "llama3": {
        "rope_type": "llama3", "factor": s, "original_max_position_embeddings": trained,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    },
    "longrope (long factors)": {
        "rope_type": "longrope", "factor": s,
        "original_max_position_embeddings": trained,
        "short_factor": [1.0] * pairs, "long_factor": rise,
    },
}  # fmt: skip
plain, _ = posenc.rope_frequencies(head_dim, base=base)
scaled = {}
for name, scaling in configs.items():
    freqs, factor = posenc.rope_frequencies(
        head_dim, base=base, scaling=scaling, seq_len=4 * trained
    )
    scaled[name] = freqs
    kept = int(torch.isclose(freqs, plain, rtol=1e-12).sum())
    slowed = int(torch.isclose(freqs, plain / s, rtol=1e-12).sum())
    print(f"{name:24s} kept {kept:2d}, / s {slowed:2d}, attention factor {factor:.4f}")

# %%
# The top panel shows the frequencies against the pair index; the bottom one
# their ratio to the unscaled frequencies, against the unscaled wavelength
# :math:`\lambda_k = 2\pi/\omega_k`. Linear divides every pair by :math:`s`.
# Dynamic NTK raises the base, which leaves the fastest pairs almost as they
# are and divides the slowest one by :math:`s\,n/L_0 - (s - 1)`: 25 at
# :math:`n = 4 L_0`, more than :math:`s`. YaRN keeps the pairs
# that turn more than 32 times in :math:`L_0` (wavelengths below
# :math:`L_0/32`), divides those that turn less than once, and ramps between.
# Llama 3.1 does the same with wavelength bounds :math:`L_0/4` and :math:`L_0`.
wavelength = 2 * math.pi / plain
fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.8, 7.2), layout="constrained")
top.semilogy(plain, color="black", linewidth=3, label="unscaled")
for name, freqs in scaled.items():
    top.semilogy(freqs, linewidth=1.5, label=name)
    bottom.semilogx(wavelength, freqs / plain, linewidth=1.5, marker=".", label=name)
top.set_xlabel("pair index k")
top.set_ylabel("ω_k (radians per position)")
title = f"Frequencies, head_dim = {head_dim}, base = {base:,.0f}, s = {s:g}"
top.set_title(title, fontsize=11)
top.legend(fontsize=10, ncol=2)
top.grid(True, alpha=0.3)
bounds = ((trained / 32, "L₀ / 32"), (trained / 4, "L₀ / 4"), (trained, "L₀"))
for bound, label in bounds:
    bottom.axvline(bound, color="gray", linestyle=":", linewidth=1)
    bottom.text(bound, 1.04, label, ha="center", fontsize=10, color="dimgray")
bottom.axhline(1 / s, color="gray", linewidth=0.8)
bottom.set_ylim(0, 1.1)
bottom.set_xlabel("unscaled wavelength 2π / ω_k (positions)")
bottom.set_ylabel("scaled ω_k / unscaled ω_k")
bottom.set_title(f"Which pairs each scaling slows (L₀ = {trained:,})", fontsize=11)
bottom.grid(True, alpha=0.3)
bottom.legend(loc="center right", fontsize=10)
plt.show()

# %%
# The scalings that depend on the length do so through ``seq_len``. Dynamic
# NTK leaves the frequencies alone up to :math:`L_0` and slows the slowest
# pair more and more beyond; a :class:`posenc.RotaryEmbedding` uses each call's
# largest position + 1.
lengths = [trained, 2 * trained, 4 * trained, 16 * trained]
for n in lengths:
    freqs, _ = posenc.rope_frequencies(
        head_dim, base=base, scaling=configs["dynamic, n = 4 L₀"], seq_len=n
    )
    ratio = (freqs[-1] / plain[-1]).item()
    print(f"dynamic, n = {n:6d}: slowest pair / unscaled = {ratio:.4f}")
