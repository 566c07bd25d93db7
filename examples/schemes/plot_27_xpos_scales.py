r"""
xPos: RoPE with a decay
=======================

:class:`~posenc.XPos` (`Sun et al. <https://arxiv.org/abs/2212.10554>`__, 2022)
scales pair k of a query at position n by ζ_k^(n/γ) and of a key at m by
ζ_k^(-m/γ), so that the pair's share of the score is scaled by ζ_k^((n-m)/γ),
with ζ_k = (2k/D + 0.4) / 1.4. Left: that factor against the distance, for some
pairs of a 64-feature head (γ = 512). Right: the scale a key gets at its own
position, which grows exponentially, and the positions where it leaves
float16's and float32's range; a center c (the power taken from p - c) moves
that range without changing any score.

Explained in :ref:`guide-tasks-xpos`.
"""

# %%
# Left, the factor on each pair's share of the score against the distance.
# Right, the keys' scale of the fastest pair, ζ_0^(-(p - c)/γ), with c = 0 and
# with c at 8,192: each dtype's range ends where the scale passes its normal
# range.
import math

import matplotlib.pyplot as plt
import torch

from posenc import XPos

xpos = XPos(64)  # scale_base γ = 512, the paper's
distance = torch.arange(0, 4097, 16, dtype=torch.float64)
fig, (left, right) = plt.subplots(1, 2, figsize=(6.8, 3.6), layout="constrained")
for k in (0, 4, 8, 16, 31):
    zeta = float(xpos.zeta[k])
    factor = zeta ** (distance / xpos.scale_base)
    left.plot(distance, factor, label=f"pair {k}: ζ = {zeta:.3f}")
left.set_xlabel("distance n - m", fontsize=10)
left.set_ylabel("factor on the pair's share", fontsize=10)
left.set_title("the decay, γ = 512", fontsize=10)
left.legend(fontsize=10)

positions = torch.arange(0, 40_001, 100)
for center, style in ((0, "-"), (8192, "--")):
    scale = xpos.scales(len(positions), positions=positions, center=center)[:, 0]
    label = f"key's scale, c = {center}"
    right.semilogy(positions, 1 / scale, style, color="C1", label=label)
for dtype, colour in ((torch.float16, "C3"), (torch.float32, "C2")):
    info = torch.finfo(dtype)
    decay = -math.log(float(xpos.zeta[0]))
    limit = min(math.log(info.max), -math.log(info.tiny)) / decay * xpos.scale_base
    right.axvline(limit, color=colour, linestyle=":", label=str(dtype))
right.set_xlabel("position p", fontsize=10)
right.set_title("one key's scale, pair 0", fontsize=10)
right.legend(fontsize=10)
plt.show()
