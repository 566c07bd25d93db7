r"""
Learned tables stop at max_len
==============================

`Vaswani et al. <https://arxiv.org/abs/1706.03762>`__ (2017, §3.5, Table 3 row
E) found learned position embeddings about as good as the sinusoid, and kept the
sinusoid because it might let the model extrapolate to longer sequences. The
difference that does not depend on training: the sinusoid is defined at every
position, a learned table only at the ``max_len`` positions it holds.

Explained in :ref:`guide-learned`.
"""

# %%
# Both modules hold 64 positions. The sinusoid computes the rows past 64 on the
# fly; the learned table has none, and says so. (The learned table takes
# ``nn.Embedding``'s order, ``(max_len, d_model)``; the sinusoid takes
# ``d_model`` first, as the Annotated Transformer's does.)
import matplotlib.pyplot as plt
import torch

import posenc

torch.manual_seed(0)  # the same random numbers wherever the script runs

max_len, d_model, length = 64, 32, 192
sinusoid = posenc.PositionalEncoding(d_model, max_len=max_len)
learned = posenc.LearnedPositionalEmbedding(max_len, d_model)
zeros = torch.zeros(1, length, d_model)
computed = sinusoid(zeros)[0]
print("sinusoid rows:", tuple(computed.shape))
try:
    learned(zeros)
except IndexError as error:
    first, rest = str(error).split(": ", 1)
    print("learned: IndexError:", first)
    print("   ", rest[:56], "...")
rows = learned(zeros[:, :max_len])[0].detach()
print("learned rows:", tuple(rows.shape))

# %%
# Three columns of each, over three times ``max_len``. The sinusoid's columns
# continue past the dashed line with the same formula; the learned table's end
# there. Its values here are a fresh initialisation, random: training changes
# them, not where they end.
fig, axes = plt.subplots(1, 2, figsize=(6.8, 3.6), sharey=True, layout="constrained")
positions = torch.arange(length)
for column, colour in zip((4, 8, 12), ("C0", "C1", "C3"), strict=True):
    axes[0].plot(positions, computed[:, column], color=colour, label=f"col {column}")
    axes[1].plot(positions[:max_len], rows[:, column], color=colour)
axes[1].axvspan(max_len, length, color="0.9")
axes[1].text(max_len + 8, 0.0, "no rows:\nIndexError", fontsize=10)
for ax, title in zip(axes, ("sinusoid: computed", "learned: a table"), strict=True):
    ax.axvline(max_len, color="black", linestyle="--", linewidth=1)
    ax.set_xlim(0, length)
    ax.set_xlabel("position", fontsize=10)
    ax.set_title(title, fontsize=10)
    ax.tick_params(labelsize=10)
axes[0].set_ylabel("value", fontsize=10)
axes[0].legend(
    loc="upper left", fontsize=10, ncols=3, handlelength=1.2, columnspacing=0.8
)
fig.suptitle(f"Past max_len = {max_len}", fontsize=11)
plt.show()

# %%
# The price of the rows: the learned table is ``max_len × d_model`` trainable
# numbers; the sinusoid has none.
print("learned parameters:", sum(p.numel() for p in learned.parameters()))
print("sinusoid parameters:", sum(p.numel() for p in sinusoid.parameters()))
