r"""
FIRE, CoPE and randomized positions
===================================

Three schemes proposed for length generalization, each drawn from posenc's own
modules. :class:`~posenc.FIRE` (`Li et al. <https://arxiv.org/abs/2310.04418>`__,
2023) feeds its MLP the log distance divided by the log of the query's position:
the inputs of a query's earlier keys lie in [0, 1], however far it is.
:class:`~posenc.CoPE`
(`Golovneva et al. <https://arxiv.org/abs/2405.18719>`__, 2024) counts what a
query's gates open, not tokens: a query that opens its gates on sentence ends
gives each key its distance in sentences. :func:`~posenc.random_positions`
(`Ruoss et al. <https://arxiv.org/abs/2305.16843>`__, 2023) trains on sorted
positions drawn from a range at least as long as the longest test sequence, so
that no position met at test is new.

Explained in :ref:`guide-tasks-fire`, :ref:`guide-tasks-cope` and
:ref:`guide-tasks-random`.
"""

# %%
# FIRE's input to its MLP. With the MLP set to the identity on its first head,
# the bias is the input itself, ψ(i − j) / ψ(max(L, i)) with ψ(x) = log(c·x + 1).
# Left: queries at several positions i, with the paper's initial c and L; each
# row runs from 0 (the query itself) to 1 (the first key) once i is past L.
# Right: one query, and the scale c, which spreads the near distances.
import matplotlib.pyplot as plt
import torch

from posenc import FIRE, CoPE, random_positions

torch.manual_seed(0)  # FIRE's MLP is drawn when built (and then set by hand)


def fire_input(query: int, c: float) -> torch.Tensor:
    """FIRE's MLP input for one query at position ``query`` over keys 0 .. query."""
    fire = FIRE(n_heads=1, width=1, c=c).double()  # L₀ = 512, the paper's
    with torch.no_grad():  # f(x) = ReLU(x): x itself, as x >= 0
        fire.mlp[0].weight.fill_(1.0)
        fire.mlp[0].bias.zero_()
        fire.mlp[2].weight.fill_(1.0)
        fire.mlp[2].bias.zero_()
        return fire(1, query + 1, offset=query)[0, 0].flip(0)  # by distance 0 .. query


fig, (left, right) = plt.subplots(1, 2, figsize=(6.8, 3.6), layout="constrained")
for query in (64, 256, 512, 2048, 8192):
    x = fire_input(query, c=0.1)
    left.plot(torch.arange(query + 1) / query, x, label=f"i = {query}")
left.set_xlabel("distance / query position, (i − j) / i", fontsize=10)
left.set_ylabel("the MLP's input", fontsize=10)
left.set_title("progressive interpolation, c = 0.1, L = 512", fontsize=10)
left.legend(fontsize=10)
for c in (0.01, 0.1, 1.0, 10.0):
    right.plot(fire_input(2048, c=c), label=f"c = {c:g}")
right.set_xscale("symlog", linthresh=1)
right.set_xlabel("distance i − j (query at 2048)", fontsize=10)
right.set_title("the log transform's scale c", fontsize=10)
right.legend(fontsize=10)
plt.show()

# %%
# CoPE's positions. A sequence of words with a sentence end every few words;
# the gate logits of every query are +8 on a sentence end and −8 elsewhere, as a
# query that has learned to look for them would make them. Left: the
# contextual position of every key for every query. Right: the last query's
# contextual position against its token distance: it steps at sentence ends.
g = torch.Generator().manual_seed(0)
length = 48
ends = torch.rand(length, generator=g) < 0.15
ends[-1] = True
logits = torch.where(ends, 8.0, -8.0).expand(length, length)
later = torch.ones(length, length, dtype=torch.bool).triu(1)
logits = logits.masked_fill(later, -torch.inf)
cope = CoPE(head_dim=4, n_positions=length)
p = cope.positions(logits)

fig, (left, right) = plt.subplots(1, 2, figsize=(6.8, 3.6), layout="constrained")
image = left.imshow(p.masked_fill(logits.isinf(), torch.nan), cmap="viridis")
fig.colorbar(image, ax=left, shrink=0.8, label="contextual position")
left.set_xlabel("key j", fontsize=10)
left.set_ylabel("query i", fontsize=10)
left.set_title("p_ij = Σ gates from j to i", fontsize=10)
distance = torch.arange(length)
right.step(distance, p[-1].flip(0), where="post", label="CoPE's position")
right.plot(distance, distance, ":", color="grey", label="token distance")
for number, d in enumerate(distance[ends.flip(0)]):
    label = "a sentence end" if number == 0 else None
    right.axvline(int(d), color="C3", linewidth=0.5, alpha=0.4, label=label)
right.set_xlabel("token distance i − j", fontsize=10)
right.set_title("the last query", fontsize=10)
right.legend(fontsize=10)
plt.show()

# %%
# Randomized positions, a schematic. A model trained on sequences of up to L
# tokens at positions 0 .. L − 1 meets positions it never saw on longer ones.
# Ruoss et al. draw the positions from a longer range [0, M), sorted, so every
# position up to the longest test sequence is trained. Here L = 16 tokens and
# M = 4 × 4L = 256, four times a longest test sequence of 4L tokens; the tasks'
# M is four times each task's own longest test sequence in tokens. As the
# tasks' harness and the authors' code do, one set of positions is drawn per
# training batch and shared by its sequences (``random_positions`` without
# ``batch=``; with it, as here, each row is one such draw). Left: the positions
# of a few training batches. Right: how often each position is met over many
# batches, with and without the draw.
L, M, draws = 16, 4 * 4 * 16, 4000
g = torch.Generator().manual_seed(0)
fig, (left, right) = plt.subplots(1, 2, figsize=(6.8, 3.6), layout="constrained")
left.plot(torch.arange(L), [0] * L, "|", markersize=9, color="C7", label="plain")
for row, pos in enumerate(random_positions(L, M, batch=8, generator=g), start=1):
    label = "drawn" if row == 1 else None
    left.plot(pos, [row] * L, "|", markersize=9, color="C0", label=label)
left.axvline(4 * L, color="C3", linestyle=":", label="4L")
left.set_xlabel("position", fontsize=10)
left.set_ylabel("training batch", fontsize=10)
left.set_title(f"L = {L} tokens, range [0, M), M = {M}", fontsize=10)
left.set_ylim(-0.8, 10.2)
left.legend(fontsize=10, loc="upper center", ncols=3)
drawn = random_positions(L, M, batch=draws, generator=g)
counts = torch.bincount(drawn.flatten(), minlength=M)
right.bar(torch.arange(M), counts / draws, width=1.0, color="C0", label="drawn")
plain = torch.ones(L)
right.bar(torch.arange(L), plain, width=1.0, color="C7", alpha=0.5, label="plain")
right.axhline(L / M, color="k", linestyle=":", label=f"L / M = {L / M:.3f}")
right.set_yscale("log")
right.set_xlabel("position", fontsize=10)
right.set_ylabel("share of batches that use it", fontsize=10)
right.set_title(f"{draws} training batches", fontsize=10)
right.legend(fontsize=10)
plt.show()
