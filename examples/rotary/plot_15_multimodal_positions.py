r"""
The (t, h, w) positions of a text, image, text stream
=====================================================

Qwen2-VL's multimodal RoPE gives every token three positions. Text tokens
carry the same position on all three axes; the tokens of an image sit on its
grid, the rows on h and the columns on w, all at one t; the text after the
image resumes :math:`\max(h, w)` past the image's start (one past its largest
position, which for an image, a single frame, is the same; for a video, see
example 18).
:func:`posenc.multimodal_positions` computes them from the token types and
the image's grid, as Hugging Face's ``get_rope_index`` does.

Explained in :ref:`guide-axes`, section :ref:`guide-axes-ids`.
"""

# %%
# Three words, an image of 6 × 8 patches (3 × 4 tokens after the 2 × 2 merge),
# then three words.
import matplotlib.pyplot as plt
import torch

import posenc

types = torch.tensor([[0] * 3 + [1] * 12 + [0] * 3])
grid = torch.tensor([[1, 6, 8]])
positions, deltas = posenc.multimodal_positions(types, image_grid_thw=grid)
ids = positions[:, 0]
for name, row in zip("thw", ids, strict=True):
    print(f"{name}: text {row[:3].tolist()}, then {row[15:].tolist()}; the image:")
    print(row[3:15].view(3, 4))
print("decoding continues from delta", int(deltas[0, 0]))

# %%
# Each axis as a row of cells over the tokens, coloured by position and
# labelled with it. Along the image, h steps once per 4 tokens and w cycles
# through the columns; t stays at 3.
names = ["t", "h", "w"]
fig, ax = plt.subplots(figsize=(6.8, 2.9), layout="constrained")
image = ax.imshow(ids.numpy(), aspect="auto", cmap="viridis")
for axis in range(3):
    for token in range(ids.shape[1]):
        value = int(ids[axis, token])
        colour = "white" if value < 5 else "black"
        ax.text(token, axis, value, ha="center", va="center", fontsize=10, color=colour)
ax.axvspan(2.5, 14.5, ymin=0, ymax=1, fill=False, edgecolor="red", linewidth=1.5)
ax.set_yticks(range(3), names)
ax.set_xticks([1, 8.5, 16], ["text", "image (3 × 4 tokens)", "text"])
ax.tick_params(labelsize=10)
ax.set_xlabel("token", fontsize=10)
ax.set_ylabel("axis", fontsize=10)
colorbar = fig.colorbar(image, ax=ax, shrink=0.9)
colorbar.set_label("position", fontsize=10)
colorbar.ax.tick_params(labelsize=10)
ax.set_title("M-RoPE positions of text, image, text (Qwen2-VL)", fontsize=11)
plt.show()
