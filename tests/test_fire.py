"""FIRE (Li et al., 2023) on the relative-bias base: the paper's formula, dense and flex."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import Tensor, nn

from posenc import FIRE, document_ids, positions_from_lengths, random_positions


def _paper_bias(fire: FIRE, positions: Tensor) -> Tensor:
    """The bias of the reference implementation in the paper's appendix, re-derived.

    Li et al. (2023), appendix: ``rel = i - j``; ``L = |s · L₀|``; the normaliser
    ``max(i, L)``; both through ``log(|c·x| + 1)``, the normaliser plus ``eps``; the MLP
    applied to their ratio, one output per head: ``(H, L, L)``. Written on the paper's
    operations (``log(... + 1)``, an ``nn.Sequential`` call), not posenc's.
    """
    p = positions.to(torch.float64)
    rel = p[:, None] - p[None, :]
    threshold = torch.abs(fire.multiplier * fire.L0)
    normaliser = torch.max(p, threshold)[:, None]
    rel = torch.log(torch.abs(fire.c * rel) + 1)
    normaliser = torch.log(torch.abs(fire.c * normaliser) + 1) + fire.eps
    return fire.mlp((rel / normaliser).unsqueeze(-1)).permute(2, 0, 1)


def _trained_like(n_heads: int = 3, **kwargs: float) -> FIRE:
    torch.manual_seed(0)
    fire = FIRE(n_heads, **kwargs).double()
    with torch.no_grad():
        fire.c.fill_(0.7)
        fire.multiplier.fill_(-0.03)  # L = |s|·L₀: the sign plays no part
    return fire


def test_the_bias_is_the_papers_reference_formula() -> None:
    fire = _trained_like(L=512.0)
    for positions in (torch.arange(40), torch.arange(7, 31), random_positions(25, 400)):
        want = _paper_bias(fire, positions)
        got = fire(len(positions), positions=positions)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_the_gradients_are_the_papers() -> None:
    fire = _trained_like()
    positions = torch.arange(30)
    weights = torch.randn(3, 30, 30, dtype=torch.float64)
    params = [fire.c, fire.multiplier, *fire.mlp.parameters()]
    got = torch.autograd.grad((fire(30) * weights).sum(), params)
    want = torch.autograd.grad((_paper_bias(fire, positions) * weights).sum(), params)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    assert all(bool(g.abs().sum() > 0) for g in got)  # every parameter learns


def test_the_query_position_normalises_the_distance() -> None:
    # Past L, a query at i sees ψ(i - j)/ψ(i): the row's farthest key always gets f(1).
    fire = _trained_like(L=4.0, eps=0.0)
    with torch.no_grad():
        bias = fire(1, 64, offset=63)[:, 0]
        far = [fire(1, n, offset=n - 1)[:, 0, 0] for n in (8, 16, 64)]
    one = fire.mlp(torch.ones(1, dtype=torch.float64)).detach()
    for value in far:
        torch.testing.assert_close(value, one)
    assert not torch.allclose(bias[:, 0], bias[:, 32])
    # Below L the normaliser is ψ(L): two queries under L see the same function of i - j.
    with torch.no_grad():
        short = fire(3, causal=True)
        torch.testing.assert_close(short[:, 2, :2], fire(1, 3, offset=2)[:, 0, :2])


def test_the_bias_is_symmetric_in_the_distance() -> None:
    fire = _trained_like(L=1000.0)  # one normaliser for every query
    with torch.no_grad():
        bias = fire(20)
    torch.testing.assert_close(bias, bias.transpose(-1, -2))


def test_score_mod_is_the_dense_bias_in_flex_attention() -> None:
    from torch.nn.attention.flex_attention import flex_attention
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    torch.manual_seed(1)
    fire = FIRE(3, L=4.0)
    with torch.no_grad():
        fire.c.fill_(0.9)
    lengths = [5, 7, 4]
    docs, pos = document_ids(lengths), positions_from_lengths(lengths)
    q, k, v = torch.randn(3, 1, 3, 16, 8).unbind()
    with torch.no_grad(), warnings.catch_warnings(action="ignore"):
        for kwargs in (
            {"causal": True},
            {"positions": pos, "documents": docs, "causal": True},
            {"positions": random_positions(16, 100, generator=torch.Generator().manual_seed(0))},
        ):
            out = flex_attention(q, k, v, score_mod=fire.score_mod(**kwargs))  # type: ignore[arg-type]
            dense = sdpa(q, k, v, attn_mask=fire(16, **kwargs))  # type: ignore[arg-type]
            torch.testing.assert_close(out, dense, rtol=0, atol=2e-5)


def test_documents_restart_the_bias() -> None:
    fire = _trained_like()
    lengths = [4, 6, 2]
    docs, pos = document_ids(lengths), positions_from_lengths(lengths)
    with torch.no_grad():
        got = fire(12, positions=pos, documents=docs, causal=True)
        start = 0
        for n in lengths:
            part = slice(start, start + n)
            assert torch.equal(got[:, part, part], fire(n, causal=True))
            start += n


def test_float32_is_the_float64_score_rounded_once() -> None:
    fire = _trained_like().float()
    with torch.no_grad():
        wide = fire(50, causal=True, dtype=torch.float64)  # from the float32 parameters
        narrow = fire(50, causal=True)
    assert narrow.dtype == torch.float32
    assert torch.equal(narrow, wide.float())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_heads": 0}, ValueError, "n_heads"),
        ({"n_heads": 2, "width": 0}, ValueError, "width"),
        ({"n_heads": 2.0}, TypeError, "n_heads"),
    ],
)
def test_bad_arguments_are_refused(kwargs, error, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        FIRE(**kwargs)


def test_the_module_has_the_papers_parameters() -> None:
    fire = FIRE(4)
    assert isinstance(fire.mlp[0], nn.Linear)
    assert fire.mlp[0].out_features == 32
    assert fire.mlp[2].out_features == 4
    assert fire.c.item() == pytest.approx(0.1)
    assert fire.L0.item() == 512.0
    assert "L0" in dict(fire.named_buffers())
    assert "L0" not in dict(fire.named_parameters())
