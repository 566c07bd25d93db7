r"""
Precision at large positions
============================

The usual code computes the table in float32: positions, frequencies, angles
and sines all in single precision. The frequency and then the angle
:math:`pos \cdot \omega_k` are rounded to a relative :math:`2^{-24}`, an
absolute error that grows with the position, and the sine inherits it. posenc
computes in float64 and rounds once, so its float32 table stays within
:math:`3 \times 10^{-8}` of the exact values at every position
:math:`|p| < 2^{31}`, the domain of its proof (past it the bound grows with
:math:`|p|`). The figure goes up to :math:`2^{20}`.

Explained in :ref:`guide-precision`.
"""

# %%
# The float32 formula, written out: frequencies from ``exp`` of a float32
# ramp, then angles, sines and cosines in float32.
import math

import matplotlib.pyplot as plt
import torch

import posenc

d_model = 512


def float32_formula(positions):
    pos = positions.to(torch.float32).unsqueeze(1)
    freq = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * -math.log(1e4) / d_model
    )
    table = torch.zeros(len(positions), d_model)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table


def max_errors(positions):
    """Largest absolute error over the columns, per position, against float64."""
    exact = posenc.sinusoidal_table(positions, d_model, dtype=torch.float64)
    ours = posenc.sinusoidal_table(positions, d_model)
    return (
        (float32_formula(positions).double() - exact).abs().amax(dim=1),
        (ours.double() - exact).abs().amax(dim=1),
    )


# %%
# About 200 positions spread evenly on a log scale, from 1 to :math:`2^{20}`.
positions = torch.logspace(0, 20, 240, base=2).round().long().unique()
err_formula, err_ours = max_errors(positions)
below = bool((err_ours < 3e-8).all())
print(f"{len(positions)} positions, posenc below 3e-8 at all: {below}")

# %%
# At a single position the error depends on how the angle happens to round, so
# the worst case over a range of positions is the fairer number: over a whole
# ``max_len = 5000`` table, and over the last 1,024 positions up to :math:`2^{20}`.
ranges = {
    "at 5,000": torch.tensor([5_000]),
    "rows 0..5,000": torch.arange(5_001),
    "at 2**20": torch.tensor([2**20]),
    "rows 2**20-1023..2**20": torch.arange(2**20 - 1023, 2**20 + 1),
}
for name, pos in ranges.items():
    a, b = max_errors(pos)
    print(f"{name:>23}: float32 formula {a.max():.1e}, posenc {b.max():.2e}")

# %%
# The float32 formula's error grows in proportion to the position; posenc's
# stays at the rounding of the result.
fig, ax = plt.subplots(figsize=(6.8, 4.2), facecolor="white", layout="constrained")
ax.loglog(positions, err_formula, color="tab:red", label="float32 formula")
ax.loglog(
    positions, err_ours, color="tab:blue", linewidth=3, label="posenc, float32 table"
)
ax.axhline(
    2**-25,
    color="black",
    linestyle=":",
    label=r"fp32 rounding bound for values in [0.5, 1], $2^{-25}$",
)
ax.axvline(5_000, color="gray", linestyle="--", linewidth=1, label="position 5,000")
ax.set_xlabel("position")
ax.set_ylabel("max |error| over the 512 columns")
ax.set_title(f"float32 tables against float64, d_model = {d_model}")
ax.legend(loc="upper left", fontsize="medium")
ax.set_ylim(1e-8, 1)
ax.grid(True, which="major", alpha=0.3)
plt.show()
