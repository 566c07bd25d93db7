"""CoPE against x-transformers' own ``CoPE`` (Appendix B of Golovneva et al., 2024).

x-transformers keeps the position vectors as rows, ``pos_emb`` ``(P, d)``; posenc as
columns, ``table`` ``(d, P)``. Given the same vectors, the same queries and the same
attention logits (``-inf`` after each query), the two give the same position logits and
the same gradients. The authors' own layer (facebookresearch/RAM) is checked in
tests/test_cope.py, re-derived: it is not a package.
"""

from __future__ import annotations

import math

import pytest
import torch

from posenc import CoPE

XT_IMPORT = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning"
)


@XT_IMPORT
@pytest.mark.parametrize("n_positions", [4, 16, 64])
def test_cope_is_x_transformers_cope(n_positions: int) -> None:
    from x_transformers.x_transformers import CoPE as PeerCoPE

    torch.manual_seed(n_positions)
    b, h, length, d = 2, 3, 24, 16
    peer = PeerCoPE(dim=d, heads=h, max_pos=n_positions).double()
    with torch.no_grad():
        peer.pos_emb.normal_()
    ours = CoPE(d, n_positions).double()
    with torch.no_grad():
        ours.table.copy_(peer.pos_emb.T)
    q = torch.randn(b, h, length, d, dtype=torch.float64, requires_grad=True)
    k = torch.randn(b, h, length, d, dtype=torch.float64)
    logits = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(
        torch.ones(length, length, dtype=torch.bool).triu(1), -math.inf
    )
    want, got = peer(q, logits), ours(q, logits)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    weights = torch.randn_like(want)
    (g_q, g_emb) = torch.autograd.grad(
        (want * weights).sum(), (q, peer.pos_emb), retain_graph=True
    )
    (h_q, h_table) = torch.autograd.grad((got * weights).sum(), (q, ours.table))
    torch.testing.assert_close(h_q, g_q, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(h_table, g_emb.T, rtol=1e-10, atol=1e-12)
