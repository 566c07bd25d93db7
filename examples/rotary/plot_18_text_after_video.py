r"""
Where the text after a video resumes: the two rules
===================================================

A Qwen2.5-VL video places its frames on the t axis by their time:
frame :math:`i` at :math:`\lfloor i \cdot \text{tokens\_per\_second} \cdot
\text{second\_per\_grid\_ts} \rfloor`, so a few seconds of video reach far
along t while h and w stay within the frame's few rows and columns. Where the
text after it resumes depends on the runtime:

- ``"max"`` (posenc's default): 1 past the largest position the video took on
  any axis, t included. The Qwen team's rule, the one the models were trained
  with: transformers ≤ 5.2 and vLLM;
- ``"spatial"``: ``start + max(h, w)`` (after the merge), transformers ≥ 5.3.
  The text then resumes inside the video's t range.

:func:`posenc.multimodal_positions` computes both (``text_after_vision=``).
Explained in :ref:`guide-axes`, section :ref:`guide-axes-text-after-vision`.
"""

# %%
# Four words, a video of 12 temporal patches of 2 × 2 tokens (a 4 × 4 patch grid
# merged 2 × 2) sampled at 2.4 frames a second, two frames a patch: 5/6 s a
# patch, 2 tokens a second (Qwen2.5-VL's vision config), then six words.
import matplotlib.pyplot as plt
import torch

import posenc

before, patches, after = 4, 12, 6
types = torch.tensor([[0] * before + [2] * (patches * 4) + [0] * after])
video = torch.tensor([[patches, 4, 4]])
seconds = dict(
    temporal="seconds", tokens_per_second=2, second_per_grid_ts=torch.tensor([5 / 6])
)
rules = {}
for rule in posenc.TEXT_AFTER_VISION_RULES:
    positions, deltas = posenc.multimodal_positions(
        types, video_grid_thw=video, text_after_vision=rule, **seconds
    )
    rules[rule] = (positions[:, 0], int(deltas[0, 0]))
    ids = positions[:, 0]
    end = before + patches * 4
    print(
        f"{rule!r}: video t {int(ids[0, before])}..{int(ids[0, end - 1])}, "
        f"h and w up to {int(ids[1:, before:end].max())}"
    )
    print(
        f"    text after it at {ids[0, end:].tolist()}; delta {int(deltas[0, 0])}, "
        f"next token at {types.shape[1] + int(deltas[0, 0])}"
    )

# %%
# Each axis's position against the token index, one panel a rule. The video's
# tokens are shaded, the dotted line is the video's last t. Under ``"spatial"``
# the text after it goes back down into positions the video's frames already
# hold on t, and decoding, which continues from the delta (the largest position
# + 1, as transformers computes it), jumps back past the dotted line.
fig, panels = plt.subplots(1, 2, figsize=(6.4, 3.6), sharey=True, layout="constrained")
tokens = torch.arange(types.shape[1])
styles = {
    "t": ("tab:blue", "o", 4.0),
    "h": ("tab:orange", "s", 3.0),
    "w": ("tab:green", "^", 3.0),
}
for ax, (rule, (ids, delta)) in zip(panels, rules.items(), strict=True):
    ax.axvspan(before - 0.5, before + patches * 4 - 0.5, color="0.9", zorder=0)
    for axis, (name, (colour, marker, size)) in enumerate(styles.items()):
        ax.plot(tokens, ids[axis], marker, color=colour, markersize=size, label=name)
    end = before + patches * 4
    ax.axhline(
        int(ids[0, before:end].max()), color="tab:blue", linestyle=":", linewidth=1
    )
    text = tokens[end:]
    ax.plot(text, ids[0, text], "-", color="tab:red", linewidth=2, label="text after")
    following = types.shape[1]  # the next token to decode sits at its index + delta
    ax.plot(
        following,
        following + delta,
        "o",
        mfc="none",
        color="tab:red",
        label="next token",
    )
    ax.set_title(f'text_after_vision="{rule}"', fontsize=10)
    ax.set_xlabel("token", fontsize=10)
    ax.tick_params(labelsize=10)
panels[0].set_ylabel("position", fontsize=10)
panels[1].legend(fontsize=10, loc="upper left", handlelength=1.2, borderpad=0.3)
fig.suptitle("One Qwen2.5-VL video (12 patches at 5/6 s), then text", fontsize=11)
plt.show()
