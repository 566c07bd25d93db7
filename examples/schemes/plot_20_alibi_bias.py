r"""
ALiBi's bias, head by head
==========================

ALiBi (`Press et al., 2022 <https://arxiv.org/abs/2108.12409>`__) adds to the
score of query :math:`i` for key :math:`j` a penalty proportional to their
distance, with a different slope :math:`m_h` for each head:

.. math::

    b_h(i, j) = -m_h\,(i - j).

Steep heads fade out within a few tokens; shallow heads see far back. Nothing
is learned, and the bias is defined for any distance.

Explained in :ref:`guide-bias`, section :ref:`guide-bias-alibi`.
"""

# %%
# The slopes for 8 heads are the powers :math:`2^{-1}, \dots, 2^{-8}`.
import matplotlib.pyplot as plt
import torch

import posenc

n_heads = 8
alibi = posenc.ALiBi(n_heads)
print("slopes:", alibi.slopes.tolist())
small = alibi(5)  # (H, L, L), queries and keys at 0 .. L-1
print("bias:", tuple(small.shape))
print("head 0, query 3:", small[0, 3].tolist())

# %%
# What the bias does to attention: softmax turns a bias :math:`b` into a factor
# :math:`e^{b}` on the key's unnormalised weight, relative to the nearest key
# (bias 0). The heatmaps show that factor for a causal model (keys after the
# query are masked: blank), on one scale for all heads. Head 0 sees little
# beyond its last few tokens. For head 7 the first token of 64 keeps a factor
# of 0.78 of the nearest key's; the softmax then shares the weight among all 64
# keys, so with equal scores the last query gives the first token 1.4% of its
# attention, against 1.6% for each key without a bias (printed below).
length = 64
bias = alibi(length)
causal = posenc.subsequent_mask(length)[0]
factor = bias.exp().masked_fill(~causal, float("nan"))
fig, axes = plt.subplots(
    2,
    4,
    figsize=(6.8, 4.4),
    sharex=True,
    sharey=True,
    layout="constrained",
)
for head, ax in enumerate(axes.flat):
    image = ax.imshow(factor[head].numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
    ax.set_title(f"head {head}: m = 1/{2 ** (head + 1)}", fontsize=10)
    ax.tick_params(labelsize=10)
for ax in axes[1]:
    ax.set_xlabel("key j", fontsize=10)
for ax in axes[:, 0]:
    ax.set_ylabel("query i", fontsize=10)
colorbar = fig.colorbar(image, ax=axes, shrink=0.85)
colorbar.set_label("factor exp(−m (i − j))", fontsize=10)
colorbar.ax.tick_params(labelsize=10)
fig.suptitle("ALiBi, 8 heads, L = 64: bias as a factor on each weight", fontsize=10)
plt.show()
print("factor of key 0 for query 63, by head:")
print([round(v, 3) for v in factor[:, 63, 0].tolist()])
# The weights themselves: with equal scores, query 63's softmax over its 64 keys.
weights = bias[:, 63].softmax(dim=-1)
print("weight of key 0 for query 63 with equal scores, by head, in %:")
print([round(100 * v, 2) for v in weights[:, 0].tolist()])
print(f"without a bias: {100 / length:.2f}% for each key")

# %%
# The bias depends on :math:`i - j` only: every diagonal is constant, and the
# bias of the last query of a long sequence is the same whether it is computed
# for the whole sequence or for one step of a decoder with a cache.
diagonals = [bias.diagonal(offset=k, dim1=1, dim2=2) for k in range(1 - length, length)]
print("every diagonal constant:", all(bool((d == d[:, :1]).all()) for d in diagonals))
step = alibi(1, length, offset=length - 1)  # the last query, over all the keys
print("one decoding step == last row:", torch.equal(step, bias[:, -1:]))
