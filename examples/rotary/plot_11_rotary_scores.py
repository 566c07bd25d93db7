r"""
Rotary scores depend on the distance only
=========================================

A rotary embedding turns each pair of features of a query at position
:math:`m` by :math:`m\,\omega_k`, and a key at position :math:`n` by
:math:`n\,\omega_k`. Their dot product is then
:math:`\langle q, R(n - m)\,k \rangle`: the two positions enter only through
their difference. Here the same query and key are placed at many pairs of
positions, near the start of a sequence and a million tokens into it.

Explained in :ref:`guide-rotary`, section :ref:`guide-rotary-relative`.
"""

# %%
# One query and one key of ``head_dim = 64``. The score of the query at
# position ``n + delta`` against the key at ``n`` is computed for every
# ``delta`` from -64 to 64, around three values of ``n``. The module works in
# float64 here, so that the curves can be compared to 1e-9.
import matplotlib.pyplot as plt
import torch

import posenc

torch.manual_seed(0)  # the same random numbers wherever the script runs

head_dim = 64
rope = posenc.RotaryEmbedding(head_dim).double()
q, k = torch.randn(2, 1, head_dim, dtype=torch.float64)
deltas = torch.arange(-64, 65)


def scores(n):
    """The score of q at position n + delta against k at position n, for every delta."""
    queries = rope(q.expand(len(deltas), -1), positions=n + deltas)
    key = rope(k, offset=n)
    return (queries * key).sum(dim=-1)


curves = {n: scores(n) for n in (0, 1_000, 1_000_000)}
worst = max((c - curves[0]).abs().max().item() for c in curves.values())
print(f"largest difference between the three curves: {worst:.1e}")
print(f"unrotated score <q, k> = {(q * k).sum():.4f}, at delta 0: {curves[0][64]:.4f}")

# %%
# The three curves lie on top of each other. With a random query and key the
# score wanders with the distance; with a query equal to the key, every pair
# contributes :math:`|q_k|^2 \cos(\Delta\,\omega_k)`, and the sum is largest at
# :math:`\Delta = 0` and shrinks, oscillating, as the tokens move apart: the
# long-term decay that `Su et al. (2021) <https://arxiv.org/abs/2104.09864>`__
# (§3.4.3) point out.
same = torch.ones(1, head_dim, dtype=torch.float64)
far = torch.unique(torch.logspace(0, 5, 400).round().long())
decay = (rope(same.expand(len(far), -1), positions=far) * rope(same)).sum(dim=-1)
at_100 = (rope(same, offset=100) * rope(same)).sum().item()
print(f"q = k = ones: score {head_dim} at distance 0, {at_100:.2f} at distance 100")

fig, (left, right) = plt.subplots(1, 2, figsize=(6.8, 3.6), layout="constrained")
styles = {
    0: ("tab:blue", "-", 5),
    1_000: ("tab:orange", "--", 3),
    1_000_000: ("black", ":", 2),
}
for n, curve in curves.items():
    color, line, width = styles[n]
    label = f"n = {n:,}"
    left.plot(deltas, curve, color=color, linestyle=line, linewidth=width, label=label)
left.set_xlabel("distance m − n")
left.set_ylabel("score ⟨R(m) q, R(n) k⟩")
left.set_title("Random q, k: one curve for every n", fontsize=10)
left.legend(fontsize=10, title="key at", title_fontsize=10)
right.semilogx(far, decay, color="tab:green")
right.axhline(0, color="gray", linewidth=0.8)
right.set_xlabel("distance |m − n|")
right.set_ylabel("score for q = k = ones")
right.set_title("Equal q and k: the score decays", fontsize=10)
fig.suptitle(f"Rotary attention scores, head_dim = {head_dim}", fontsize=11)
plt.show()
