"""posenc.frequencies: one correctly rounded ladder, used by every scheme."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch

import posenc
from posenc import rope_frequencies, sinusoidal_table, timestep_embedding
from posenc.frequencies import ladder, ladder_parts

mpmath.mp.prec = 200


def exact(base: float, numerator: int, span: float) -> float:
    """``base ** (-numerator / span)``, correctly rounded to float64 (mpmath, 200 bits)."""
    return float(mpmath.power(mpmath.mpf(base), -mpmath.mpf(numerator) / mpmath.mpf(span)))


@pytest.mark.parametrize("base", [10_000.0, 500_000.0, 1e6, 2.0])
@pytest.mark.parametrize("head_dim", [32, 80, 96, 128])
def test_rope_frequencies_are_correctly_rounded(base: float, head_dim: int) -> None:
    freqs = rope_frequencies(head_dim, base=base)[0].tolist()
    assert freqs == [exact(base, 2 * k, head_dim) for k in range(head_dim // 2)]


def test_torch_pow_is_not_correctly_rounded_where_the_ladder_is() -> None:
    # The reason for the ladder: 28 of the 48 default frequencies of head_dim 96.
    k = torch.arange(0, 96, 2, dtype=torch.float64)
    pow_ = torch.pow(torch.tensor(10_000.0, dtype=torch.float64), -k / 96).tolist()
    ours = rope_frequencies(96)[0].tolist()
    truth = [exact(10_000.0, 2 * j, 96) for j in range(48)]
    assert ours == truth
    assert sum(p != t for p, t in zip(pow_, truth, strict=True)) == 28


@pytest.mark.parametrize("shift", [0.0, 1.0, 0.5])
@pytest.mark.parametrize("dim", [8, 64, 320])
def test_timestep_frequencies_are_the_correctly_rounded_ladder(shift: float, dim: int) -> None:
    half = dim // 2
    want = [exact(10_000.0, k, half - shift) for k in range(half)]
    assert list(ladder(half, 10_000.0, half - shift, 1)) == want
    # sin(t · ω_k) at t = 1 is the float64 sine of the ladder's ω_k (torch's sine).
    e = timestep_embedding(torch.tensor([1]), dim, downscale_freq_shift=shift, dtype=torch.float64)
    assert torch.equal(e[0, :half], torch.sin(torch.tensor(want, dtype=torch.float64)))


@pytest.mark.parametrize("endpoint", [False, True])
def test_the_sinusoid_the_grid_and_rope_share_one_ladder(endpoint: bool) -> None:
    w = posenc.inverse_frequencies(64, endpoint=endpoint).tolist()
    span = 31.0 if endpoint else 64.0
    assert w == list(ladder(32, 10_000.0, span, 1 if endpoint else 2))
    if not endpoint:
        assert w == rope_frequencies(64)[0].tolist()
    # The grid's per-axis sinusoid is the sinusoid of half the width: its ladder.
    grid = posenc.sincos_2d(1, 2, 16, dtype=torch.float64)  # cell (0, 1): column 1
    assert grid[1, :4].tolist() == pytest.approx([math.sin(x) for x in ladder(4, 10_000.0, 8.0)])
    assert posenc.inverse_frequencies(8).tolist() == list(ladder(4, 10_000.0, 8.0))


def test_heads_and_tails_carry_the_exact_frequency() -> None:
    freqs, heads, tails = ladder_parts(64, 10_000.0, 128.0, 2, 32)
    for k, (w, h, t) in enumerate(zip(freqs, heads, tails, strict=True)):
        truth = mpmath.power(10_000, -mpmath.mpf(2 * k) / 128)
        assert abs(mpmath.mpf(h) + mpmath.mpf(t) - truth) <= truth * mpmath.mpf(2) ** -83
        assert math.frexp(h)[0] * 2**32 == int(math.frexp(h)[0] * 2**32)  # 32 bits
        assert w == float(truth)


def test_a_wide_table_needs_no_minutes_of_exact_arithmetic() -> None:
    # 200,000 pairs: the exact powers come from one ratio and 200,000 products
    # (4-9 s of exp() calls before); checked here for values, not for time.
    row = sinusoidal_table(torch.tensor([1]), 400_000, dtype=torch.float64)[0]
    for k in (0, 1, 12_345, 199_999):
        assert row[2 * k].item() == pytest.approx(
            math.sin(exact(10_000.0, 2 * k, 400_000)), abs=1e-15
        )
