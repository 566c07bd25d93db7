r"""
Waveforms of the positional encoding
====================================

Every column of the sinusoidal table is a sine or a cosine of the position, and
each column pair turns at its own speed. This example draws the Annotated
Transformer's ``example_positional`` chart with posenc: columns 4 to 7 of a
``d_model = 20`` encoding over positions 0 to 99. Columns 4 and 5 share one
period, columns 6 and 7 a longer one: each pair of columns has its own
period, and the higher the pair, the longer it is.

Explained in :ref:`seeds` (the chart that ends the walkthrough) and
:ref:`guide-order` (the formula).
"""

# %%
# Adding the encoding to zeros returns the table itself: one row per position,
# one column per dimension.
import matplotlib.pyplot as plt
import torch

import posenc

pe = posenc.PositionalEncoding(20, 0)
y = pe(torch.zeros(1, 100, 20))
print("output shape:", tuple(y.shape))

# %%
# Columns 4 and 5 are the sine and cosine of pair :math:`k = 2`, columns 6 and
# 7 those of pair :math:`k = 3`. Pair :math:`k` turns at
# :math:`\omega_k = 10000^{-2k/d_{model}}` radians per position, so its period
# :math:`2\pi / \omega_k` grows with :math:`k`.
periods = 2 * torch.pi / posenc.inverse_frequencies(20)
for column in (4, 5, 6, 7):
    print(f"column {column}: period {periods[column // 2].item():.1f} positions")

# %%
# Solid lines are sines, dashed lines cosines; the same colour family shares a
# frequency.
colors = {4: "tab:blue", 5: "tab:cyan", 6: "tab:red", 7: "tab:orange"}
fig, ax = plt.subplots(figsize=(6.8, 4.2), facecolor="white", layout="constrained")
for column, color in colors.items():
    kind = "sin" if column % 2 == 0 else "cos"
    ax.plot(
        y[0, :, column],
        color=color,
        linestyle="-" if kind == "sin" else "--",
        label=f"column {column} ({kind}, period {periods[column // 2].item():.1f})",
    )
ax.set_xlabel("position")
ax.set_ylabel("encoding value")
ax.set_title("Columns 4–7 of a d_model = 20 positional encoding")
ax.set_xlim(0, 99)
fig.legend(loc="outside lower center", ncols=2, fontsize="medium")
plt.show()
