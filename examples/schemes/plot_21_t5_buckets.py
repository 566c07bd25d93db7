r"""
T5's buckets of distance
========================

T5 (`Raffel et al., 2020 <https://arxiv.org/abs/1910.10683>`__) learns one
number per head for each *bucket* of the relative position ``key - query``.
Short distances each get a bucket; longer ones share buckets whose width grows
logarithmically up to ``max_distance``; beyond it, everything shares the last
bucket. An encoder gives keys before and after the query buckets of their own; a
decoder puts every key after the query in bucket 0, which its causal mask hides
anyway.

Explained in :ref:`guide-bias`, section :ref:`guide-bias-t5`.
"""

# %%
# With T5's settings, 32 buckets and ``max_distance=128``: the first bucket of
# each width, for the encoder's keys before the query.
import matplotlib.pyplot as plt
import torch

import posenc

torch.manual_seed(0)  # the same random numbers wherever the script runs

r = torch.arange(-200, 201)
encoder = posenc.relative_position_bucket(r)
decoder = posenc.relative_position_bucket(r, bidirectional=False)
before = encoder[:201].flip(0)  # distances 0, 1, 2, ... to the keys before the query
starts = [d for d in range(1, 201) if before[d] != before[d - 1]]
print("encoder, keys before: a bucket starts at distance")
print(starts)
# An encoder's bucket 16 is never used: a key after the query is at least 1 away,
# so its buckets are 16 + 1 .. 16 + 15.
used, used_decoder = encoder.unique().numel(), decoder.unique().numel()
print("buckets used by the encoder:", used, "of 32; by the decoder:", used_decoder)

# %%
# The staircase: one step per distance near 0, then wider steps, then flat.
# The last bucket starts before ``max_distance`` (at 91 for the encoder, 113 for
# the decoder): the logarithmic steps are rounded down, and the last one is the
# widest.
fig, ax = plt.subplots(figsize=(6.8, 4), layout="constrained")
ax.step(r, encoder, where="mid", label="encoder (bidirectional)", color="tab:blue")
ax.step(r, decoder, where="mid", label="decoder (unidirectional)", color="tab:orange")
for x in (-128, 128):
    ax.axvline(x, color="grey", linestyle="--", linewidth=1)
ax.text(130, 2, "max_distance", fontsize=10, color="grey")
ax.set_xlabel("relative position: key − query", fontsize=10)
ax.set_ylabel("bucket index", fontsize=10)
ax.set_title("T5's buckets: num_buckets = 32, max_distance = 128", fontsize=11)
ax.legend(loc="center right", fontsize=10)
ax.tick_params(labelsize=10)
plt.show()

# %%
# The module looks each bucket up in a learned ``(num_buckets, n_heads)``
# table: the bias of a query and a key is the row of their bucket.
t5 = posenc.RelativePositionBias(n_heads=4)
bias = t5(6)
weight = t5.relative_attention_bias.weight
print("bias:", tuple(bias.shape))
bucket = int(posenc.relative_position_bucket(torch.tensor(1 - 4)))
print("query 4, key 1 -> bucket", bucket)
print("bias[:, 4, 1] == table row 3:", torch.equal(bias[:, 4, 1], weight[3]))
