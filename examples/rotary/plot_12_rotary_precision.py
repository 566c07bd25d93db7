r"""
Rotary precision after a cast to bfloat16
=========================================

The usual rotary module keeps its inverse frequencies :math:`\omega_k` in a
buffer. ``model.to(torch.bfloat16)`` casts every floating buffer, so the
frequencies are rounded to 8 significant bits, and the angle
:math:`m\,\omega_k` of position :math:`m` is off by :math:`m` times that
rounding: for ``head_dim`` 64, 0.44 rad in the worst pair at position 1,000,
more than a radian from a few thousand positions on. posenc keeps no such
buffer. Both are measured here against the rotation computed in float64: the
plot shows the error of the rotated values, not of the angles.

Explained in :ref:`guide-rotary`, section :ref:`guide-rotary-precision`.
"""

# %%
# The castable-buffer approach, written out: ``inv_freq`` is a buffer, the
# angles are computed in float32 from it, and cos and sin are rounded to the
# input's dtype before the rotate-half products, which run in that dtype too.
import matplotlib.pyplot as plt
import torch
from torch import nn

import posenc

torch.manual_seed(0)  # the same random numbers wherever the script runs
head_dim = 64


class CastableBufferRotary(nn.Module):
    def __init__(self, dim, base=10_000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2) / dim))

    def forward(self, x, positions):
        angles = positions[:, None].float() * self.inv_freq.float()
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin


# %%
# Both modules are built in float32 and cast to bfloat16, as a model is. The
# input holds 8 heads of random bfloat16 vectors at about 200 positions spread
# evenly on a log scale from 1 to :math:`2^{20}`, and at :math:`10^3`,
# :math:`10^5`, :math:`10^6`. For each position the plot
# shows the largest error over the heads and features; the exact rotation is
# posenc's float64 one (its tables are float64 for a float64 input).
marks = torch.tensor([1_000, 100_000, 1_000_000])
spread = torch.logspace(0, 20, 200, base=2).round().long()
positions = torch.unique(torch.cat((spread, marks)))
x = torch.randn(1, 8, len(positions), head_dim).bfloat16()
exact = posenc.RotaryEmbedding(head_dim)(x.double(), positions=positions)


def worst(y):
    return (y.double() - exact).abs().amax(dim=(0, 1, 3))


kept = CastableBufferRotary(head_dim)
cast = CastableBufferRotary(head_dim).bfloat16()
ours = posenc.RotaryEmbedding(head_dim).bfloat16()
errors = {
    "castable buffer, module kept in float32": worst(kept(x, positions)),
    "castable buffer, module cast to bfloat16": worst(cast(x, positions)),
    "posenc, module cast to bfloat16": worst(ours(x, positions=positions)),
}
for name, err in errors.items():
    at = "  ".join(f"{p:.0e}: {err[positions == p].item():6.3f}" for p in marks)
    print(f"{name:41s} {at}")
# The angle error of the cast buffer: position 1,000 times the rounding of each
# frequency to bfloat16, in the worst pair (the introduction's figure).
inv_freq = cast.inv_freq.double()
pairs = torch.arange(0, head_dim, 2, dtype=torch.float64)
exact_freq = 1.0 / 10_000.0 ** (pairs / head_dim)
angle_error = (1_000 * (inv_freq - exact_freq)).abs().max().item()
print(f"angle error at position 1,000, worst pair, bfloat16: {angle_error:.2f} rad")

# %%
# Kept in float32, the castable approach loses only the bfloat16 rounding of
# cos and sin and of its products, until the float32 angles themselves drift
# (their error grows as :math:`m \cdot 2^{-24}`). Cast to bfloat16, its error
# grows with the position from about 10 on and reaches 1, the size of the
# values, near 1,000 positions. posenc's
# error stays at the rounding of the result at every position: half a bfloat16
# unit in the last place of the value (the dotted line for values between 2 and
# 4; the two blips are values above 4, whose unit is twice as large).
fig, ax = plt.subplots(figsize=(6.8, 4.2), layout="constrained")
styles = (("tab:orange", 1.5, "--"), ("tab:red", 1.5, "-"), ("tab:blue", 2.5, "-"))
for (name, err), (color, width, line) in zip(errors.items(), styles, strict=True):
    ax.loglog(positions, err, color=color, linewidth=width, linestyle=line, label=name)
half_ulp = "half a bfloat16 ulp in [2, 4), 2⁻⁷"
ax.axhline(2.0**-7, color="black", linestyle=":", label=half_ulp)
ax.set_xlabel("position")
ax.set_ylabel("largest |error| against float64")
ax.set_title(f"Rotating bfloat16 queries, head_dim = {head_dim}", fontsize=11)
ax.set_ylim(1e-3, 20)
ax.grid(True, which="major", alpha=0.3)
ax.legend(loc="upper left", fontsize=10)
plt.show()
