r"""
Decoding one token at a time
============================

A decoder with a KV cache keeps the keys and values of the tokens it has seen
and embeds only the new token at each step. That token must get the encoding of
its place in the whole sequence, not of place 0: ``offset=t`` says where it
stands. The layer here precomputes 16 positions and decodes 24 tokens, so the
last steps run past ``max_len``.

Explained in :ref:`guide-positions`, section :ref:`guide-positions-offsets`.
"""

# %%
# The reference is the whole sequence embedded at once. Step ``t`` embeds the
# single id at index ``t``, at ``offset=t``; stacked, the steps give the same rows,
# bit for bit, before and after position 16.
import matplotlib.pyplot as plt
import torch

import posenc

torch.manual_seed(0)  # the same random numbers wherever the script runs

layer = posenc.TokenAndPositionEmbedding(d_model=32, vocab=100, max_len=16)
ids = torch.randint(0, 100, (1, 24))
whole = layer(ids)
steps = torch.cat([layer(ids[:, t : t + 1], offset=t) for t in range(24)], dim=1)
print("whole:", tuple(whole.shape), "steps:", tuple(steps.shape))
print("step by step == whole sequence:", torch.equal(steps, whole))
print("buffer still holds", layer.positional.pe.shape[1], "rows")

# %%
# In a batch served together, each sequence can be at its own step. A ``(B,)``
# tensor gives one offset per sequence: here the next token of the first
# sequence sits at position 20 and that of the second at position 3.
offset = torch.tensor([20, 3])
batch_ids = torch.stack([ids[0, 20:21], ids[0, 3:4]])
print(
    "per-sequence offsets == whole rows 20 and 3:",
    torch.equal(layer(batch_ids, offset=offset)[:, 0], whole[0, [20, 3]]),
)

# %%
# The positional part of each output row is what the layer adds to the scaled
# token vector. Decoded step by step (left) and computed for the whole sequence
# at once (right), it is the same, bit for bit. The dashed line marks
# ``max_len``: rows above it come from the buffer, rows below are computed on the
# fly.
added = steps - layer.embeddings(ids)
reference = whole - layer.embeddings(ids)
largest = (added - reference).abs().max().item()
print("largest |step by step - whole| in the positional part:", largest)
fig, axes = plt.subplots(
    1, 2, figsize=(6.8, 4.4), sharey=True, facecolor="white", layout="constrained"
)
panels = ((added[0], "decoded step by step"), (reference[0], "whole sequence at once"))
for ax, (data, title) in zip(axes, panels, strict=True):
    image = ax.imshow(
        data.detach().numpy(),
        aspect="auto",
        cmap="RdBu_r",
        vmin=-1,
        vmax=1,
        interpolation="nearest",
    )
    ax.axhline(15.5, color="black", linestyle="--", linewidth=1)
    ax.set_title(title, fontsize="medium")
    ax.set_xlabel("column")
axes[0].set_ylabel("position (decoding step t)")
axes[0].text(0.5, 15.2, "max_len = 16", va="bottom", backgroundcolor="white")
fig.colorbar(image, ax=axes, shrink=0.9, label="positional part")
fig.suptitle(f"Decoding 24 tokens with offset=t: largest difference {largest:g}")
plt.show()

# %%
# A left-padded batch puts its pads first, so the real tokens would start at
# different positions. :func:`posenc.positions_from_mask` counts real tokens
# only: every real token gets the position it has in its unpadded sequence, and
# pads get 0, which does not matter because attention masks them out.
pad = 0
padded = torch.tensor([[pad, pad, pad, 11, 12, 13], [21, 22, 23, 24, 25, 26]])
mask = padded != pad
positions = posenc.positions_from_mask(mask)
print(positions)
out = layer(padded, positions=positions)
print(
    "left-padded rows == unpadded sequence:",
    torch.equal(out[0, 3:], layer(padded[0, 3:])),
)

# %%
# Decoding continues from there: the next token of each sequence sits at its
# count of real tokens, which is a per-sequence offset.
next_offset = mask.sum(dim=-1)
print("next offsets:", next_offset.tolist())
step = layer(torch.tensor([[14], [27]]), offset=next_offset)
print(
    "next row == row 3 of [11, 12, 13, 14]:",
    torch.equal(step[0, 0], layer(torch.tensor([11, 12, 13, 14]))[3]),
)

# %%
# The grid of positions: pads (grey) get 0, real tokens count from 0.
fig, ax = plt.subplots(figsize=(6.8, 2.4), facecolor="white", layout="constrained")
ax.imshow(mask.float().numpy(), cmap="Greys_r", vmin=-1, vmax=1, aspect="auto")
for row in range(2):
    for col in range(6):
        label = f"{positions[row, col].item()}" + ("" if mask[row, col] else " (pad)")
        ax.text(col, row, label, ha="center", va="center")
ax.set_xticks(range(6))
ax.set_yticks([0, 1], ["left-padded", "full"])
ax.set_xlabel("slot in the batch")
ax.set_title("positions_from_mask(padded != pad)")
plt.show()
