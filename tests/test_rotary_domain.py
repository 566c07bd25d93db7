"""RoPE's precision bounds, at the edge of the positions they are stated for.

The angle p·ω is a float64 product: its rounding grows with p, and past the stated
positions the bounds no longer hold (float32: 3.7 ulps of the pair's length at 2**32;
bfloat16: 2.9 ulps at 2**48). The reference here is exact (mpmath, 160 bits), since a
float64 reference carries the same rounding of the angle.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import torch

from posenc import RotaryEmbedding

D = 64
#: The positions up to which each bound is stated (RotaryEmbedding's docstring).
FLOAT32_EDGE = 2**30
BFLOAT16_EDGE = 2**40


def exact_rotation(x: torch.Tensor, positions: list[int]) -> np.ndarray:
    mpmath.mp.prec = 160
    xs = x.double().numpy()
    out = xs.copy()
    h = D // 2
    for i, p in enumerate(positions):
        for k in range(h):
            angle = p * mpmath.power(10_000, -mpmath.mpf(2 * k) / D)
            c, s = float(mpmath.cos(angle)), float(mpmath.sin(angle))
            out[..., i, k] = xs[..., i, k] * c - xs[..., i, k + h] * s
            out[..., i, k + h] = xs[..., i, k + h] * c + xs[..., i, k] * s
    return out


def ulp_of_pair_length(x: torch.Tensor, dtype: torch.dtype) -> np.ndarray:
    xs = x.double().numpy()
    rho = np.hypot(xs[..., : D // 2], xs[..., D // 2 :])
    rho = np.concatenate((rho, rho), axis=-1)
    return 2.0 ** np.floor(np.log2(rho)) * torch.finfo(dtype).eps


@pytest.mark.parametrize(
    ("dtype", "edge", "ulps"),
    [(torch.float32, FLOAT32_EDGE, 2.0), (torch.bfloat16, BFLOAT16_EDGE, 1.0)],
)
@pytest.mark.parametrize("sign", [1, -1])
def test_the_bound_holds_up_to_the_stated_position(
    dtype: torch.dtype, edge: int, ulps: float, sign: int
) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 4, D).to(dtype)
    first = edge - 4 if sign > 0 else -edge
    positions = list(range(first, first + 4))
    y = RotaryEmbedding(D)(x, offset=first).double().numpy()
    err = np.abs(y - exact_rotation(x, positions))
    assert np.all(err <= ulps * ulp_of_pair_length(x, dtype))


def test_past_the_stated_positions_the_float32_bound_fails() -> None:
    # The control: the statement's edge is where it is for a reason.
    torch.manual_seed(0)
    x = torch.randn(2, 4, D)
    first = 2**34
    y = RotaryEmbedding(D)(x, offset=first).double().numpy()
    err = np.abs(y - exact_rotation(x, list(range(first, first + 4))))
    assert np.any(err > 2.0 * ulp_of_pair_length(x, torch.float32))


# -- seq_len: the length the frequencies depend on -------------------------------------------

SCALINGS = [
    {"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": 64},
    {
        "rope_type": "longrope",
        "original_max_position_embeddings": 64,
        "short_factor": [1.0] * 8,
        "long_factor": [2.0 + k for k in range(8)],
        "factor": 4.0,
    },
]


@pytest.mark.parametrize("scaling", SCALINGS, ids=["dynamic", "longrope"])
@pytest.mark.parametrize("cut", [16, 48, 100])
def test_a_slice_with_the_whole_length_rotates_as_the_whole_sequence(
    scaling: dict[str, object], cut: int
) -> None:
    # Context parallelism: each rank holds part of the sequence; passing the global
    # length gives every rank the frequencies of the whole sequence.
    rope = RotaryEmbedding(16, scaling=scaling, max_len=32)
    x = torch.randn(2, 3, 200, 16)
    whole = rope(x)
    first = rope(x[..., :cut, :], seq_len=200)
    rest = rope(x[..., cut:, :], offset=cut, seq_len=200)
    assert torch.equal(torch.cat((first, rest), dim=-2), whole)
    positions = torch.arange(cut, 200)
    assert torch.equal(rope(x[..., cut:, :], positions=positions, seq_len=200), rest)
    cos, _ = rope.cos_sin(200 - cut, offset=cut, seq_len=200)
    assert torch.equal(cos, rope.cos_sin(200)[0][cut:])
    if cut <= 64:  # without it, a slice within the trained length takes the short frequencies
        assert not torch.equal(rope(x[..., :cut, :]), first)


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "10"])
def test_seq_len_is_a_positive_int(value: object) -> None:
    rope = RotaryEmbedding(8)
    error = ValueError if isinstance(value, int) and not isinstance(value, bool) else TypeError
    with pytest.raises(error, match="seq_len"):
        rope(torch.randn(2, 8), seq_len=value)  # type: ignore[arg-type]
