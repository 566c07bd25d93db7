r"""
How M-RoPE shares the head dimension: chunked and interleaved
=============================================================

A head of 128 features has 64 rotated pairs, turning at one ladder
:math:`\omega_k = base^{-2k/128}`, fastest first. Qwen2-VL's M-RoPE gives the
first 16 pairs to t, the next 24 to h and the last 24 to w (chunked): each
spatial axis gets one band of frequencies, and w only slow ones. Qwen3-VL
interleaves them, t, h, w, t, h, w, ..., so that every axis has fast and slow
pairs.

Explained in :ref:`guide-axes`, section :ref:`guide-axes-sections`.
"""

# %%
# The axis of each pair, from the configs' ``rope_parameters``, and the range
# of frequencies each axis gets.
import matplotlib.pyplot as plt
import torch

import posenc
from posenc.rope_config import parse

configs = {
    "chunked (Qwen2-VL, [16, 24, 24])": {
        "rope_type": "default",
        "mrope_section": [16, 24, 24],
    },
    "interleaved (Qwen3-VL, [24, 20, 20])": {
        "rope_type": "default",
        "mrope_section": [24, 20, 20],
        "mrope_interleaved": True,
    },
}
freqs, _ = posenc.rope_frequencies(128, base=1_000_000.0)
owners = {}
for name, scaling in configs.items():
    owner = torch.tensor(parse(scaling, 128, 1_000_000.0).pair_axes())
    owners[name] = owner
    for axis, label in enumerate("thw"):
        mine = freqs[owner == axis]
        print(
            f"{name.split()[0]:11} {label}: {mine.numel():2} pairs, "
            f"frequencies {float(mine.min()):.1e} .. {float(mine.max()):.1e}"
        )

# %%
# Each pair's frequency on a log scale, coloured by the axis that turns it.
colours = ["tab:blue", "tab:orange", "tab:green"]
fig, axes = plt.subplots(2, 1, figsize=(6.8, 4.4), sharex=True, layout="constrained")
for ax, (name, owner) in zip(axes, owners.items(), strict=True):
    for axis, label in enumerate("thw"):
        k = torch.nonzero(owner == axis).flatten()
        ax.bar(
            k.numpy(), freqs[k].numpy(), width=0.85, color=colours[axis], label=label
        )
    ax.set_yscale("log")
    ax.set_ylabel("frequency ω_k", fontsize=10)
    ax.set_title(name, fontsize=10)
    ax.tick_params(labelsize=10)
axes[0].legend(title="axis", fontsize=10, title_fontsize=10, ncols=3, loc="upper right")
axes[1].set_xlabel("rotated pair k (features k and k + 64)", fontsize=10)
fig.suptitle("M-RoPE: which axis turns each pair of a 128-feature head", fontsize=11)
plt.show()
