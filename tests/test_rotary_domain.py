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


# -- Fractional positions (issue 27): the given value, a float64 phase, one rounding ---------

FLOATING = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def exact_tables(positions: list[float], head_dim: int = D) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of p·ω_k, ω_k = 10000**(-2k/d) (Su et al. 2021, eq. 15), at 160 bits."""
    mpmath.mp.prec = 160
    h = head_dim // 2
    cos, sin = np.empty((len(positions), h)), np.empty((len(positions), h))
    for i, p in enumerate(positions):
        for k in range(h):
            angle = mpmath.mpf(p) * mpmath.power(10_000, -mpmath.mpf(2 * k) / head_dim)
            cos[i, k], sin[i, k] = float(mpmath.cos(angle)), float(mpmath.sin(angle))
    return cos, sin


@pytest.mark.parametrize("dtype", FLOATING)
def test_a_fractional_position_is_taken_at_its_exact_value_and_rounded_once(
    dtype: torch.dtype,
) -> None:
    # Positions made in `dtype` (0.1 is not exact in any of them): the phase is the
    # product of the value the tensor holds, widened exactly, so the reference is the
    # exact cos/sin at that value, and the float32 table is within half an ulp of it
    # plus the float64 phase's error (the contract's 3e-8 for |p| <= 2**20).
    far = 2.0**19 + 0.5 if torch.finfo(dtype).max > 2.0**20 else 60_000.3  # float16's range
    given = torch.tensor([0.1, 0.5, 7.25, -3.3, 1000.7, far], dtype=dtype)
    values = [float(v) for v in given.double()]  # what the tensor holds, exactly
    cos, sin = RotaryEmbedding(D).cos_sin(len(values), positions=given, dtype=torch.float32)
    want_cos, want_sin = exact_tables(values)
    assert np.abs(cos.double().numpy() - want_cos).max() <= 3e-8
    assert np.abs(sin.double().numpy() - want_sin).max() <= 3e-8
    # in float64 the only rounding left is the phase's: a few float64 ulps of 2**19
    cos64, sin64 = RotaryEmbedding(D).cos_sin(len(values), positions=given, dtype=torch.float64)
    assert np.abs(cos64.numpy() - want_cos).max() <= 2**19 * 2**-52
    assert np.abs(sin64.numpy() - want_sin).max() <= 2**19 * 2**-52


@pytest.mark.parametrize("dtype", FLOATING)
@pytest.mark.parametrize("axes", [None, (32, 32)], ids=["1-D", "axes"])
def test_integral_floating_positions_are_the_integer_positions_to_the_bit(
    dtype: torch.dtype, axes: tuple[int, int] | None
) -> None:
    torch.manual_seed(0)
    rope = RotaryEmbedding(D, axes=axes, max_len=64)
    ints = torch.tensor([[0, 3, 100, 255], [-7, 2, 4096, 1]])  # in and past the tables
    if axes is None:
        ints = ints[0]
    x = torch.randn(1, 2, 4, D)
    assert torch.equal(rope(x, positions=ints.to(dtype)), rope(x, positions=ints))
    for out in (torch.float32, torch.bfloat16, torch.float64):
        got = rope.cos_sin(4, positions=ints.to(dtype), dtype=out)
        want = rope.cos_sin(4, positions=ints, dtype=out)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_fractional_positions_keep_attention_relative() -> None:
    # <R(m)q, R(n)k> depends on n - m only (Su et al. 2021, eq. 16), fractions included.
    torch.manual_seed(0)
    rope = RotaryEmbedding(D)
    q, k = torch.randn(1, D, dtype=torch.float64), torch.randn(1, D, dtype=torch.float64)

    def score(m: float, n: float) -> float:
        rq = rope(q, positions=torch.tensor([m], dtype=torch.float64))
        rk = rope(k, positions=torch.tensor([n], dtype=torch.float64))
        return float((rq * rk).sum())

    assert score(0.25, 1.75) == pytest.approx(score(10.5, 12.0), abs=1e-12)
    assert score(0.25, 1.75) != pytest.approx(score(0.25, 2.0), abs=1e-3)


def test_fractional_positions_rotate_as_the_float64_reference_on_axes_and_per_sequence() -> None:
    torch.manual_seed(0)
    rope = RotaryEmbedding(D, axes=(32, 32))
    x = torch.randn(2, 3, 6, D)
    grid = torch.stack(torch.meshgrid(torch.arange(2.0), torch.arange(3.0), indexing="ij"))
    positions = (grid.reshape(2, 6) + 0.5) / 2  # patch centres, in units of a reference grid
    per_sequence = torch.stack((positions, -positions), dim=1)  # (A, B, L)
    y = rope(x, positions=per_sequence).double().numpy()
    freqs = np.concatenate([10_000.0 ** (-np.arange(16) * 2.0 / 32)] * 2)
    pos = per_sequence.double().numpy()  # (A, B, L)
    per_pair = np.concatenate([np.repeat(pos[a][..., None], 16, -1) for a in (0, 1)], -1)
    angle = per_pair[:, None] * freqs  # (B, 1, L, h)
    xs = x.double().numpy()
    want = xs.copy()
    h = D // 2
    want[..., :h] = xs[..., :h] * np.cos(angle) - xs[..., h:] * np.sin(angle)
    want[..., h:] = xs[..., h:] * np.cos(angle) + xs[..., :h] * np.sin(angle)
    assert np.abs(y - want).max() <= 4 * 2**-24 * np.abs(xs).max()


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        (torch.tensor([0.0, float("nan")]), ValueError, "positions holds nan"),
        (torch.tensor([float("inf"), 0.0]), ValueError, "positions holds inf"),
        (torch.tensor([0.0, -float("inf")], dtype=torch.bfloat16), ValueError, "holds -inf"),
        (torch.tensor([0.0, 2.0**63]), ValueError, r"magnitude 9\.22337e\+18, outside the domain"),
        (torch.tensor([0j, 1j]), TypeError, "got dtype torch.complex64: a position is a real"),
        (torch.tensor([True, False]), TypeError, "got dtype torch.bool"),
    ],
    ids=["nan", "inf", "-inf bf16", "2**63", "complex", "bool"],
)
@pytest.mark.parametrize("axes", [None, (32, 32)], ids=["1-D", "axes"])
def test_positions_that_are_no_real_number_in_the_domain_are_refused_by_name(
    bad: torch.Tensor, error: type[Exception], match: str, axes: tuple[int, int] | None
) -> None:
    rope = RotaryEmbedding(D, axes=axes)
    shaped = bad if axes is None else bad.expand(2, 2)
    with pytest.raises(error, match=match):
        rope(torch.zeros(1, 2, D), positions=shaped)
    with pytest.raises(error, match=match):
        rope.cos_sin(2, positions=shaped)


def test_fractional_positions_are_rotary_only_and_offset_stays_an_integer() -> None:
    from posenc import ALiBi, PositionalEncoding

    half = torch.tensor([0.0, 0.5])
    with pytest.raises(TypeError, match="fractional positions are RotaryEmbedding's"):
        PositionalEncoding(D)(torch.zeros(2, D), positions=half)
    with pytest.raises(TypeError, match="fractional positions are RotaryEmbedding's"):
        ALiBi(2)(2, positions=half)
    with pytest.raises(TypeError, match="offset must be an int or an integer tensor"):
        RotaryEmbedding(D)(torch.zeros(2, D), offset=torch.tensor(0.5))
    with pytest.raises(ValueError, match="give either offset or positions"):
        RotaryEmbedding(D)(torch.zeros(2, D), offset=1, positions=half)


def test_dynamic_frequencies_at_fractional_positions_use_the_integer_length_reached() -> None:
    # seq_len for dynamic NTK is max(position) + 1 (transformers' rule, on integers); a
    # fractional position p reaches floor(p) + 1.
    scaling = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 8}
    rope = RotaryEmbedding(D, scaling=scaling)
    x = torch.randn(1, 3, D, dtype=torch.float64)
    frac = torch.tensor([0.0, 3.5, 11.5], dtype=torch.float64)
    got = rope(x, positions=frac)
    assert torch.equal(got, rope(x, positions=frac, seq_len=12))
    assert not torch.equal(got, rope(x, positions=frac, seq_len=8))
