"""xPos against rotary-embedding-torch's own ``use_xpos`` (Sun et al., 2022).

rotary-embedding-torch pairs features ``2k`` and ``2k + 1`` (posenc's
``layout="interleaved"``) and takes the scales' power from the middle of each call's
sequence, ``len // 2``; posenc takes it from ``center``. Given the same center, the
rotated and scaled queries and keys are the same, up to the peer's float32
frequencies and ζ (it builds them in float32, then casts). Both spellings are checked:
``XPos`` and ``RotaryEmbedding(xpos_scale_base=...).rotate_queries_and_keys``. posenc's
default layout, ``"half"`` (pairs ``k`` and ``k + d/2``), is checked against the same
peer with the features permuted: feature ``k`` of ours is the peer's ``2k``, feature
``k + d/2`` its ``2k + 1``, so the peer's pairs are ours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from posenc import RotaryEmbedding, XPos

SPELLINGS = ["XPos", "RotaryEmbedding"]


def _ours(
    spelling: str, dim: int, scale_base: float, layout: str | None = "interleaved"
) -> Callable[..., tuple[Tensor, Tensor]]:
    """posenc's xPos in ``layout`` (None: the default), as ``(q, k, **kw) -> (q, k)``."""
    given: dict[str, Any] = {} if layout is None else {"layout": layout}
    if spelling == "XPos":
        return XPos(dim, scale_base=scale_base, **given)
    rope = RotaryEmbedding(dim, xpos_scale_base=scale_base, **given)
    return rope.rotate_queries_and_keys


CASES = pytest.mark.parametrize(
    ("dim", "length", "scale_base"), [(16, 48, 16.0), (32, 33, 8.0), (8, 64, 512.0)]
)


def _peer_and_inputs(dim: int, length: int, scale_base: float) -> tuple[Any, Tensor, Tensor]:
    """rotary-embedding-torch's xPos in float64, and float64 queries and keys, seeded."""
    from rotary_embedding_torch import RotaryEmbedding as PeerRotary

    torch.manual_seed(dim + length)
    peer = PeerRotary(dim, use_xpos=True, xpos_scale_base=scale_base, cache_if_possible=False)
    q = torch.randn(2, 3, length, dim, dtype=torch.float64)
    k = torch.randn(2, 3, length, dim, dtype=torch.float64)
    return peer.double(), q, k


def _interleaving(dim: int) -> Tensor:
    """Indices that put the half layout's pairs next to each other: ``x[..., order]``
    holds feature ``k`` at ``2k`` and feature ``k + dim/2`` at ``2k + 1``."""
    half = torch.arange(dim // 2)
    return torch.stack([half, half + dim // 2], -1).flatten()


@pytest.mark.parametrize("spelling", SPELLINGS)
@CASES
def test_xpos_is_rotary_embedding_torch_use_xpos(
    dim: int, length: int, scale_base: float, spelling: str
) -> None:
    peer, q, k = _peer_and_inputs(dim, length, scale_base)
    ours = _ours(spelling, dim, scale_base)
    want_q, want_k = peer.rotate_queries_and_keys(q, k)
    got_q, got_k = ours(q, k, center=length // 2)
    # the peer's frequencies and ζ are float32 values: 1e-7 relative, times the angle
    torch.testing.assert_close(got_q, want_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k, want_k, rtol=1e-5, atol=1e-5)
    # the scales are there (a plain rotation is far from the peer's output)
    if scale_base < 100:
        plain = RotaryEmbedding(dim, layout="interleaved")(q)
        assert (plain - want_q).abs().max() > 0.1


@pytest.mark.parametrize("spelling", SPELLINGS)
@CASES
def test_default_half_layout_is_the_peer_with_its_features_permuted(
    dim: int, length: int, scale_base: float, spelling: str
) -> None:
    peer, q, k = _peer_and_inputs(dim, length, scale_base)
    ours = _ours(spelling, dim, scale_base, layout=None)  # the default, "half"
    order = _interleaving(dim)
    back = order.argsort()  # the peer's feature 2k back to k, 2k + 1 to k + dim/2
    want_q, want_k = peer.rotate_queries_and_keys(q[..., order], k[..., order])
    got_q, got_k = ours(q, k, center=length // 2)
    torch.testing.assert_close(got_q, want_q[..., back], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k, want_k[..., back], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_xpos_is_the_peers_decoding_with_cached_keys(spelling: str) -> None:
    from rotary_embedding_torch import RotaryEmbedding as PeerRotary

    torch.manual_seed(0)
    dim, cached, new = 16, 20, 3
    peer = PeerRotary(dim, use_xpos=True, xpos_scale_base=4.0, cache_if_possible=False).double()
    ours = _ours(spelling, dim, 4.0)
    q = torch.randn(1, 2, new, dim, dtype=torch.float64)
    k = torch.randn(1, 2, cached + new, dim, dtype=torch.float64)
    want_q, want_k = peer.rotate_queries_with_cached_keys(q, k)
    # FINDING: the peer takes the keys' power from the middle of the keys, len(k) // 2,
    # and the queries' from len(q) // 2, a count, not a position: the queries at
    # positions 20, 21, 22 get the power (p - 1) / γ, the keys (p - 11) / γ. Each pair's
    # share of every score is then off by the constant ζ_k^((11 - 1) / γ), which one
    # center (posenc's) does not give; posenc reproduces it with the two centers.
    _, got_k = ours(k, k, center=(cached + new) // 2)
    got_q, _ = ours(q, q, offset=cached, center=new // 2)
    torch.testing.assert_close(got_q, want_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k, want_k, rtol=1e-5, atol=1e-5)
    one_center, _ = ours(q, q, offset=cached, center=(cached + new) // 2)
    assert (one_center - want_q).abs().max() > 0.1
