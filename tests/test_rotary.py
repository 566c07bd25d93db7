"""posenc.rotary: frequencies and scalings, the rotation, positions, precision, casts, errors.

The formulas are written here again, independently, from their publications:
RoFormer (Su et al., 2021), position interpolation (Chen et al., 2023), NTK-aware
and dynamic NTK scaling (bloc97 and emozilla, 2023, r/LocalLLaMA), YaRN (Peng et
al., 2023), Llama 3.1's ``apply_scaling`` (Meta, llama-models), LongRoPE (Ding et
al., 2024) with Phi-3's attention factor. The peers' own code is in tests/peers/.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import INTEGER_DTYPES, roformer_frequencies, rotary_reference, ulp

from posenc import (
    ROPE_TYPES,
    ROTARY_LAYOUTS,
    MixedFrequencies,
    RotaryEmbedding,
    apply_rotary,
    positions_from_lengths,
    positions_from_mask,
    rope_frequencies,
)
from posenc.rope_config import EXAMPLE_HEAD_DIM, RECORDS

PROPERTY_SETTINGS = settings(max_examples=25, deadline=None)
TWO_PI = 2 * math.pi

LLAMA31 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}


def longrope(pairs: int) -> dict[str, object]:
    return {
        "rope_type": "longrope",
        "original_max_position_embeddings": 4096,
        "factor": 32.0,
        "short_factor": [1.0 + 0.02 * k for k in range(pairs)],
        "long_factor": [1.0 + 0.5 * k for k in range(pairs)],
    }


# Scalings whose frequencies do not depend on the length (decoding equals prefill): the
# example of every such type's record, for heads of EXAMPLE_HEAD_DIM features.
FIXED = {name: r.example for name, r in RECORDS.items() if r.trained_length is None}
FIXED_SCALINGS = [copy.deepcopy(dict(example)) for example in FIXED.values()]
FIXED_IDS = list(FIXED)


def permutation(head_dim: int) -> torch.Tensor:
    """Feature order that turns an interleaved head into a half-layout head."""
    return torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))


# --- frequencies against their publications -----------------------------------------------


@pytest.mark.parametrize("base", [10_000.0, 500_000.0, 1e6])
@pytest.mark.parametrize("head_dim", [2, 8, 64, 128])
def test_default_frequencies_are_roformers(head_dim: int, base: float) -> None:
    freqs, factor = rope_frequencies(head_dim, base=base)
    assert freqs.dtype == torch.float64
    assert freqs.shape == (head_dim // 2,)
    np.testing.assert_allclose(freqs.numpy(), roformer_frequencies(head_dim, base), rtol=1e-15)
    assert factor == 1.0
    same, _ = rope_frequencies(head_dim, base=base, scaling={"rope_type": "default"})
    assert torch.equal(same, freqs)


def test_linear_is_position_interpolation() -> None:
    # Chen et al. (2023): position m is read as m / s, the same as every frequency / s.
    freqs, factor = rope_frequencies(64, scaling={"rope_type": "linear", "factor": 4.0})
    np.testing.assert_allclose(freqs.numpy(), roformer_frequencies(64) / 4.0, rtol=1e-15)
    assert factor == 1.0


@pytest.mark.parametrize("seq_len", [None, 100, 4096, 4097, 10_000, 65_536])
def test_dynamic_ntk_grows_the_base_past_the_trained_length(seq_len: int | None) -> None:
    # emozilla's dynamic NTK: base * ((s * n / L0) - (s - 1)) ** (d / (d - 2)), n >= L0.
    d, base, s, trained = 64, 10_000.0, 4.0, 4096
    scaling = {"rope_type": "dynamic", "factor": s, "max_position_embeddings": trained}
    freqs, factor = rope_frequencies(d, base=base, scaling=scaling, seq_len=seq_len)
    n = trained if seq_len is None else max(seq_len, trained)
    grown = base * ((s * n / trained) - (s - 1)) ** (d / (d - 2))
    np.testing.assert_allclose(freqs.numpy(), roformer_frequencies(d, grown), rtol=1e-14)
    assert factor == 1.0
    if n == trained:
        np.testing.assert_allclose(freqs.numpy(), roformer_frequencies(d, base), rtol=1e-14)


def yarn_reference(
    d: int, base: float, s: float, trained: int, fast: float, slow: float, truncate: bool
) -> np.ndarray:
    """Peng et al. (2023), "NTK-by-parts": the ramp runs over the pair index k, between
    the pairs that turn `fast` and `slow` times over the trained length (their eq. for
    r(d) = L / lambda_d solved for the index, as in the authors' reference code)."""
    theta = roformer_frequencies(d, base)
    k = np.arange(d // 2, dtype=np.float64)

    def index_turning(rotations: float) -> float:
        # L / (2 pi base^(2k/d)) = rotations  <=>  k = d ln(L / (2 pi rotations)) / (2 ln base)
        return d * np.log(trained / (TWO_PI * rotations)) / (2 * np.log(base))

    start, stop = index_turning(fast), index_turning(slow)
    if truncate:
        start, stop = math.floor(start), math.ceil(stop)
    start, stop = max(start, 0), min(stop, d - 1)
    interpolated = np.clip((k - start) / (stop - start), 0, 1)
    return (1 - interpolated) * theta + interpolated * theta / s


@pytest.mark.parametrize("truncate", [True, False])
@pytest.mark.parametrize(("s", "fast", "slow"), [(4.0, 32.0, 1.0), (16.0, 16.0, 2.0)])
def test_yarn_blends_extrapolation_and_interpolation(
    s: float, fast: float, slow: float, truncate: bool
) -> None:
    d, base, trained = 128, 10_000.0, 4096
    scaling = {
        "rope_type": "yarn",
        "factor": s,
        "original_max_position_embeddings": trained,
        "beta_fast": fast,
        "beta_slow": slow,
        "truncate": truncate,
    }
    freqs, factor = rope_frequencies(d, base=base, scaling=scaling)
    expected = yarn_reference(d, base, s, trained, fast, slow, truncate)
    np.testing.assert_allclose(freqs.numpy(), expected, rtol=1e-14)
    # The paper's rule, read off directly: pairs that turn more than beta_fast times over
    # the trained length are kept, those that turn less than beta_slow times interpolated.
    theta = roformer_frequencies(d, base)
    rotations = trained * theta / TWO_PI
    fast_pairs, slow_pairs = rotations > fast * 1.5, rotations < slow / 1.5
    assert fast_pairs.any()
    assert slow_pairs.any()
    np.testing.assert_allclose(freqs.numpy()[fast_pairs], theta[fast_pairs], rtol=1e-15)
    np.testing.assert_allclose(freqs.numpy()[slow_pairs], theta[slow_pairs] / s, rtol=1e-15)
    # sqrt(1/t) = 0.1 ln s + 1 (Peng et al., eq. 22)
    assert factor == pytest.approx(0.1 * math.log(s) + 1, rel=1e-15)


def test_yarn_attention_factor_from_mscale_or_given() -> None:
    # DeepSeek-V2's yarn_get_mscale(s, m) = 0.1 m ln s + 1, used as a ratio.
    s = 40.0
    both = dict(YARN, factor=s, mscale=0.707, mscale_all_dim=1.0)
    _, factor = rope_frequencies(64, scaling=both)
    assert factor == pytest.approx((0.1 * 0.707 * math.log(s) + 1) / (0.1 * math.log(s) + 1))
    # DeepSeek-V3 sets both to 1: the ratio is exactly 1 (the model scales its softmax).
    _, one = rope_frequencies(64, scaling=dict(YARN, factor=s, mscale=1.0, mscale_all_dim=1.0))
    assert one == 1.0
    # Only one of the two: ignored, as in Hugging Face.
    _, plain = rope_frequencies(64, scaling=dict(YARN, factor=s, mscale=0.707))
    assert plain == pytest.approx(0.1 * math.log(s) + 1)
    _, given_ = rope_frequencies(64, scaling=dict(YARN, attention_factor=0.5))
    assert given_ == 0.5
    _, unscaled = rope_frequencies(64, scaling=dict(YARN, factor=1.0))
    assert unscaled == 1.0


def test_yarn_factor_defaults_to_the_length_ratio() -> None:
    # DeepSeek-V3-style configs omit `factor`: max_position_embeddings / original.
    implicit = {
        "rope_type": "yarn",
        "original_max_position_embeddings": 4096,
        "max_position_embeddings": 16_384,
    }
    explicit = dict(YARN, factor=4.0)
    assert torch.equal(
        rope_frequencies(64, scaling=implicit)[0], rope_frequencies(64, scaling=explicit)[0]
    )


def llama3_reference(freqs: np.ndarray, s: float, low: float, high: float, old: int) -> np.ndarray:
    """Meta's `apply_scaling` (llama-models, Llama 3.1), one frequency at a time."""
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(freq)
        elif wavelen > low_wavelen:
            out.append(freq / s)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append((1 - smooth) * freq / s + smooth * freq)
    return np.array(out)


@pytest.mark.parametrize("base", [500_000.0, 10_000.0])
def test_llama3_band_smoothing(base: float) -> None:
    freqs, factor = rope_frequencies(128, base=base, scaling=LLAMA31)
    expected = llama3_reference(roformer_frequencies(128, base), 8.0, 1.0, 4.0, 8192)
    np.testing.assert_allclose(freqs.numpy(), expected, rtol=1e-14)
    assert factor == 1.0
    # All three bands occur with Llama 3.1's numbers.
    ratio = freqs.numpy() / roformer_frequencies(128, base)
    assert (ratio == 1).any()
    assert np.isclose(ratio, 1 / 8).any()
    assert ((ratio > 1 / 8 + 1e-9) & (ratio < 1 - 1e-9)).any()


@pytest.mark.parametrize("seq_len", [None, 4096, 4097])
def test_longrope_short_and_long_factors(seq_len: int | None) -> None:
    # Ding et al. (2024): theta_i / lambda_i, one rescale factor per pair; Phi-3's
    # attention factor sqrt(1 + ln s / ln L0).
    d = 64
    scaling = longrope(d // 2)
    freqs, factor = rope_frequencies(d, scaling=scaling, seq_len=seq_len)
    key = "long_factor" if seq_len is not None and seq_len > 4096 else "short_factor"
    lam = np.array(scaling[key])
    np.testing.assert_allclose(freqs.numpy(), roformer_frequencies(d) / lam, rtol=1e-15)
    assert factor == pytest.approx(math.sqrt(1 + math.log(32.0) / math.log(4096)), rel=1e-15)
    _, given_ = rope_frequencies(d, scaling=dict(scaling, attention_factor=1.25))
    assert given_ == 1.25


def test_proportional_rotates_a_share_of_the_pairs() -> None:
    # Gemma 4's global layers: exponents over the whole head, the remaining pairs still.
    scaling = {"rope_type": "proportional", "partial_rotary_factor": 0.25, "factor": 2.0}
    freqs, factor = rope_frequencies(512, base=1e6, scaling=scaling)
    assert freqs.shape == (256,)
    assert factor == 1.0
    np.testing.assert_allclose(
        freqs[:64].numpy(), roformer_frequencies(512, 1e6)[:64] / 2.0, rtol=1e-15
    )
    assert torch.all(freqs[64:] == 0)
    rope = RotaryEmbedding(512, base=1e6, scaling=scaling)
    assert rope.rotary_dim == 512
    x = torch.randn(3, 512, dtype=torch.float64)
    y = rope.double()(x, offset=1000)
    half = torch.cat((torch.arange(64, 256), torch.arange(320, 512)))
    assert torch.equal(y[:, half], x[:, half])  # the still pairs


@pytest.mark.parametrize(
    "rope_type", [name for name, r in RECORDS.items() if not r.rotates_whole_head]
)
def test_partial_rotary_factor_sets_the_rotated_dimension(rope_type: str) -> None:
    # A quarter of a head of 4 * EXAMPLE_HEAD_DIM rotates as a head of EXAMPLE_HEAD_DIM.
    d = EXAMPLE_HEAD_DIM
    full_scaling = copy.deepcopy(dict(RECORDS[rope_type].example))
    scaling = {**full_scaling, "partial_rotary_factor": 0.25}
    partial, _ = rope_frequencies(4 * d, scaling=scaling)
    as_if_whole, _ = rope_frequencies(d, scaling=full_scaling)
    assert torch.equal(partial, as_if_whole)
    rope = RotaryEmbedding(4 * d, scaling=scaling)
    assert rope.rotary_dim == d
    x = torch.randn(2, 4, 7, 4 * d)
    y = rope(x, offset=5)
    assert torch.equal(y[..., d:], x[..., d:])
    assert torch.equal(y[..., :d], RotaryEmbedding(d, scaling=full_scaling)(x[..., :d], offset=5))


def test_keys_a_type_does_not_read_are_accepted_and_none_counts_as_missing() -> None:
    config_like = {
        "rope_type": "linear",
        "factor": 2.0,
        "rope_theta": 10_000.0,
        "original_max_position_embeddings": None,
        "attention_factor": None,
        "mrope_section": None,
        "type": "linear",
    }
    freqs, _ = rope_frequencies(64, scaling=config_like)
    assert torch.equal(
        freqs, rope_frequencies(64, scaling={"rope_type": "linear", "factor": 2.0})[0]
    )
    legacy = {"type": "linear", "factor": 2.0}  # the older name of rope_type
    assert torch.equal(rope_frequencies(64, scaling=legacy)[0], freqs)


def test_rope_types_lists_what_is_accepted() -> None:
    assert tuple(RECORDS) == ROPE_TYPES
    for name, record in RECORDS.items():  # each builds from its record's example
        rope = RotaryEmbedding(EXAMPLE_HEAD_DIM, scaling=copy.deepcopy(dict(record.example)))
        assert rope.scaling is not None
        assert rope.scaling["rope_type"] == name
    with pytest.raises(ValueError, match=re.escape(f"must be one of {ROPE_TYPES}")):
        RotaryEmbedding(8, scaling={"rope_type": "rope"})
    assert ROTARY_LAYOUTS == ("half", "interleaved")


# --- the rotation against the float64 formula ----------------------------------------------


@pytest.mark.parametrize("layout", ROTARY_LAYOUTS)
@pytest.mark.parametrize("scaling", FIXED_SCALINGS, ids=FIXED_IDS)
def test_forward_is_the_float64_rotation(layout: str, scaling: dict[str, object] | None) -> None:
    d = EXAMPLE_HEAD_DIM
    rope = RotaryEmbedding(d, layout=layout, scaling=scaling, max_len=64)  # type: ignore[arg-type]
    x = torch.randn(2, 3, 40, d, dtype=torch.float64)
    freqs, factor = rope_frequencies(d, scaling=scaling)
    for offset in (0, 30, 5000):
        got = rope.double()(x, offset=offset).numpy()
        expected = rotary_reference(
            x, np.arange(offset, offset + 40), freqs.numpy(), layout, factor
        )
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("layout", ROTARY_LAYOUTS)
def test_float32_rotation_is_within_two_ulps_of_the_pair_length(layout: str) -> None:
    rope = RotaryEmbedding(64, layout=layout)
    x = torch.randn(4, 8, 32, 64)
    freqs = roformer_frequencies(64)
    for offset in (0, 10**5, 10**6, 2**20 - 32):
        y = rope(x, offset=offset)
        exact = rotary_reference(x, np.arange(offset, offset + 32), freqs, layout)
        assert np.all(
            np.abs(y.double().numpy() - exact) <= 2 * ulp(pair_length(x, layout), torch.float32)
        )


def pair_length(x: torch.Tensor, layout: str) -> np.ndarray:
    """The length of the pair each feature belongs to (what a rotation keeps), per feature."""
    xs = x.double().numpy()
    h = xs.shape[-1] // 2
    if layout == "half":
        rho = np.hypot(xs[..., :h], xs[..., h:])
        return np.concatenate((rho, rho), axis=-1)
    rho = np.hypot(xs[..., 0::2], xs[..., 1::2])
    return np.repeat(rho, 2, axis=-1)


@pytest.mark.parametrize("layout", ROTARY_LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cast", ["to", "method"])
def test_cast_module_is_within_one_ulp_at_far_positions(
    layout: str, dtype: torch.dtype, cast: str
) -> None:
    # Built in float32, cast after construction: the case that breaks castable buffers.
    rope = RotaryEmbedding(128, layout=layout)
    rope = (
        rope.to(dtype)
        if cast == "to"
        else (rope.half() if dtype == torch.float16 else rope.bfloat16())
    )
    x = torch.randn(4, 8, 16, 128).to(dtype)
    freqs = roformer_frequencies(128)
    for offset in (0, 10**5, 10**6):
        y = rope(x, offset=offset)
        assert y.dtype == dtype
        exact = rotary_reference(x, np.arange(offset, offset + 16), freqs, layout)
        err = np.abs(y.double().numpy() - exact)
        # One rounding of a float32 result: half an ulp of the exact value, plus float32's
        # own error, a few 2**-24 of the pair's length (it matters only where the two
        # products cancel). Within one ulp of the exact value everywhere else.
        rho = pair_length(x, layout)
        assert np.all(err <= 0.5 * ulp(exact, dtype) + 2**-22 * rho)
        assert np.all(err <= ulp(rho, dtype))
        clear = np.abs(exact) > rho / 256
        assert np.all(err[clear] <= ulp(exact[clear], dtype))


def test_a_castable_frequency_buffer_would_fail_the_precision_test() -> None:
    # The control: frequencies rounded to bfloat16 (what `.to(bf16)` does to a buffer)
    # miss the exact rotation at position 10**5 by far more than an ulp.
    x = torch.randn(2, 16, 128)
    freqs = torch.from_numpy(roformer_frequencies(128)).bfloat16().double()
    pos = torch.arange(10**5, 10**5 + 16, dtype=torch.float64)[:, None]
    angles = pos * freqs
    wrong = apply_rotary(x.double(), angles.cos(), angles.sin())
    exact = rotary_reference(x, np.arange(10**5, 10**5 + 16), roformer_frequencies(128))
    assert np.abs(wrong.numpy() - exact).max() > 1.0


def test_float64_input_gets_float64_tables() -> None:
    rope = RotaryEmbedding(16)
    x = torch.randn(3, 16, dtype=torch.float64)
    got = rope(x, offset=2**20)
    expected = rotary_reference(x, np.arange(2**20, 2**20 + 3), roformer_frequencies(16))
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-9)
    assert rope.cos_sin(2, dtype=torch.float64)[0].dtype == torch.float64


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_output_dtype_is_input_dtype(dtype: torch.dtype) -> None:
    rope = RotaryEmbedding(8)
    assert rope(torch.randn(2, 5, 8).to(dtype)).dtype == dtype


def test_attention_factor_multiplies_cos_and_sin() -> None:
    rope = RotaryEmbedding(64, scaling=YARN)
    freqs, factor = rope_frequencies(64, scaling=YARN)
    cos, sin = rope.cos_sin(10, dtype=torch.float64)
    angles = torch.arange(10, dtype=torch.float64)[:, None] * freqs
    torch.testing.assert_close(cos, factor * angles.cos(), rtol=0, atol=1e-15)
    torch.testing.assert_close(sin, factor * angles.sin(), rtol=0, atol=1e-15)
    x = torch.randn(10, 64, dtype=torch.float64)
    torch.testing.assert_close(rope.double()(x).norm(dim=-1), factor * x.norm(dim=-1))


# --- properties ----------------------------------------------------------------------------

head_dims = st.sampled_from([2, 4, 8, 16, 64])
far_positions = st.integers(-(2**20), 2**20)


@PROPERTY_SETTINGS
@given(
    head_dim=head_dims,
    layout=st.sampled_from(ROTARY_LAYOUTS),
    m=far_positions,
    n=far_positions,
    shift=st.integers(-(2**20), 2**20),
    seed=st.integers(0, 2**16),
)
def test_score_depends_only_on_the_distance(
    head_dim: int, layout: str, m: int, n: int, shift: int, seed: int
) -> None:
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, head_dim, generator=g, dtype=torch.float64)
    rope = RotaryEmbedding(head_dim, layout=layout, max_len=16).double()  # type: ignore[arg-type]

    def score(a: int, b: int) -> float:
        return float((rope(q, offset=a) * rope(k, offset=b)).sum())

    # Against the unrotated score too: <R(m) q, R(n) k> = <q, R(n - m) k>.
    reference = float((q * rope(k, offset=n - m)).sum())
    scale = float(q.norm() * k.norm())
    assert abs(score(m, n) - score(m + shift, n + shift)) <= 1e-9 * scale
    assert abs(score(m, n) - reference) <= 1e-9 * scale


@PROPERTY_SETTINGS
@given(
    head_dim=head_dims,
    layout=st.sampled_from(ROTARY_LAYOUTS),
    offset=far_positions,
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_rotation_keeps_every_pair_length(
    head_dim: int, layout: str, offset: int, dtype: torch.dtype
) -> None:
    rope = RotaryEmbedding(head_dim, layout=layout)  # type: ignore[arg-type]
    x = torch.randn(2, 3, 9, head_dim).to(dtype)
    y = rope(x, offset=offset)
    tol = 4 * torch.finfo(dtype).eps
    np.testing.assert_allclose(pair_length(y, layout), pair_length(x, layout), rtol=tol, atol=tol)


@PROPERTY_SETTINGS
@given(
    layout=st.sampled_from(ROTARY_LAYOUTS),
    scaling=st.sampled_from(FIXED_SCALINGS),
    start=st.integers(0, 2**20),
    length=st.integers(1, 12),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
)
def test_decoding_token_by_token_equals_the_whole_sequence(
    layout: str, scaling: dict[str, object] | None, start: int, length: int, dtype: torch.dtype
) -> None:
    d = EXAMPLE_HEAD_DIM
    rope = RotaryEmbedding(d, layout=layout, scaling=scaling, max_len=8)  # type: ignore[arg-type]
    x = torch.randn(2, 3, length, d).to(dtype)
    whole = rope(x, offset=start)
    steps = [rope(x[:, :, t : t + 1], offset=start + t) for t in range(length)]
    assert torch.equal(torch.cat(steps, dim=2), whole)
    as_tensor = [rope(x[:, :, t : t + 1], offset=torch.tensor(start + t)) for t in range(length)]
    assert torch.equal(torch.cat(as_tensor, dim=2), whole)


@PROPERTY_SETTINGS
@given(
    offsets=st.lists(st.integers(0, 10**6), min_size=1, max_size=4),
    layout=st.sampled_from(ROTARY_LAYOUTS),
)
def test_per_sequence_offsets_rotate_each_sequence_by_its_own(
    offsets: list[int], layout: str
) -> None:
    rope = RotaryEmbedding(16, layout=layout, max_len=32)  # type: ignore[arg-type]
    x = torch.randn(len(offsets), 4, 5, 16)
    got = rope(x, offset=torch.tensor(offsets))
    for b, offset in enumerate(offsets):
        assert torch.equal(got[b], rope(x[b : b + 1], offset=offset)[0])
    positions = torch.tensor(offsets)[:, None] + torch.arange(5)
    assert torch.equal(rope(x, positions=positions), got)


@PROPERTY_SETTINGS
@given(
    lengths=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    layout=st.sampled_from(ROTARY_LAYOUTS),
)
def test_left_padded_batch_equals_each_sequence_unpadded(lengths: list[int], layout: str) -> None:
    rope = RotaryEmbedding(8, layout=layout)  # type: ignore[arg-type]
    width = max(lengths)
    mask = torch.tensor([[t >= width - n for t in range(width)] for n in lengths])
    x = torch.randn(len(lengths), 2, width, 8)
    padded = rope(x, positions=positions_from_mask(mask))
    for b, n in enumerate(lengths):
        alone = rope(x[b : b + 1, :, width - n :])
        assert torch.equal(padded[b : b + 1, :, width - n :], alone)


@PROPERTY_SETTINGS
@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=4).filter(lambda v: sum(v) > 0))
def test_packed_sequences_equal_separate_ones(lengths: list[int]) -> None:
    rope = RotaryEmbedding(8, max_len=4)
    total = sum(lengths)
    x = torch.randn(1, 3, total, 8)
    packed = rope(x, positions=positions_from_lengths(lengths)[None])
    start = 0
    for n in lengths:
        assert torch.equal(packed[:, :, start : start + n], rope(x[:, :, start : start + n]))
        start += n


@PROPERTY_SETTINGS
@given(
    head_dim=st.sampled_from([2, 8, 32]),
    offset=far_positions,
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float64]),
)
def test_the_two_layouts_are_one_rotation_under_a_permutation(
    head_dim: int, offset: int, dtype: torch.dtype
) -> None:
    perm = permutation(head_dim)
    x = torch.randn(2, 3, 5, head_dim).to(dtype)
    half = RotaryEmbedding(head_dim, layout="half")
    inter = RotaryEmbedding(head_dim, layout="interleaved")
    assert torch.equal(half(x[..., perm], offset=offset), inter(x, offset=offset)[..., perm])
    inverse = perm.argsort()
    assert torch.equal(inter(x[..., inverse], offset=offset), half(x, offset=offset)[..., inverse])


def test_permuting_projection_rows_moves_a_checkpoint_between_layouts() -> None:
    # A checkpoint trained with the interleaved layout (Meta's LLaMA code) gives the same
    # attention scores with the half layout once the q and k projections' output rows are
    # permuted within each head (what Hugging Face's LLaMA conversion script does).
    heads, head_dim, d_model = 4, 16, 64
    wq, wk = torch.randn(2, heads * head_dim, d_model, dtype=torch.float64)
    perm = permutation(head_dim)
    rows = (torch.arange(heads)[:, None] * head_dim + perm).reshape(-1)
    x = torch.randn(2, 7, d_model, dtype=torch.float64)

    def scores(wq_: torch.Tensor, wk_: torch.Tensor, layout: str) -> torch.Tensor:
        rope = RotaryEmbedding(head_dim, layout=layout).double()  # type: ignore[arg-type]
        q = (x @ wq_.T).unflatten(-1, (heads, head_dim)).transpose(1, 2)
        k = (x @ wk_.T).unflatten(-1, (heads, head_dim)).transpose(1, 2)
        return rope(q, offset=100) @ rope(k, offset=100).transpose(-1, -2)

    torch.testing.assert_close(
        scores(wq[rows], wk[rows], "half"), scores(wq, wk, "interleaved"), rtol=1e-12, atol=1e-12
    )
    assert not torch.allclose(scores(wq, wk, "half"), scores(wq, wk, "interleaved"))


# --- positions: every integer dtype, beyond max_len, dynamic lengths -----------------------


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_every_integer_dtype_of_positions_and_offset_equals_int64(dtype: torch.dtype) -> None:
    rope = RotaryEmbedding(16, max_len=8)
    x = torch.randn(2, 3, 5, 16)
    positions = torch.tensor([[0, 3, 7, 100, 127], [5, 4, 3, 2, 1]])
    expected = rope(x, positions=positions)
    assert torch.equal(rope(x, positions=positions.to(dtype)), expected)
    offsets = torch.tensor([3, 120])
    assert torch.equal(rope(x, offset=offsets.to(dtype)), rope(x, offset=offsets))
    assert torch.equal(rope(x, offset=torch.tensor(9, dtype=dtype)), rope(x, offset=9))


def test_positions_past_max_len_have_the_same_values() -> None:
    short, long = RotaryEmbedding(32, max_len=16), RotaryEmbedding(32, max_len=4096)
    x = torch.randn(2, 4, 40, 32)
    assert torch.equal(short(x), long(x))
    assert torch.equal(short(x, offset=3000), long(x, offset=3000))
    positions = torch.tensor([0, 15, 16, 4095, 7, 20, 1, 2] * 5)
    assert torch.equal(short(x, positions=positions), long(x, positions=positions))
    assert torch.equal(short(x.bfloat16(), offset=10), long(x.bfloat16(), offset=10))


def test_negative_positions_turn_backwards() -> None:
    rope = RotaryEmbedding(8).double()
    x = torch.randn(3, 8, dtype=torch.float64)
    expected = rotary_reference(x, np.arange(-5, -2), roformer_frequencies(8))
    np.testing.assert_allclose(rope(x, offset=-5).numpy(), expected, atol=1e-14)
    # R(-m) undoes R(m): rotating each token back to position 0 gives x again.
    back = rope(rope(x, offset=5), positions=torch.tensor([-5, -6, -7]))
    np.testing.assert_allclose(back.numpy(), x.numpy(), atol=1e-14)


def dynamic(trained: int = 64) -> dict[str, object]:
    return {"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": trained}


def test_dynamic_frequencies_follow_each_calls_longest_position() -> None:
    scaling = dynamic(64)
    rope = RotaryEmbedding(16, scaling=scaling, max_len=256).double()
    x = torch.randn(2, 3, 100, 16, dtype=torch.float64)
    for length, offset in ((50, 0), (64, 0), (65, 0), (100, 0), (10, 90)):
        got = rope(x[:, :, :length], offset=offset)
        freqs, _ = rope_frequencies(16, scaling=scaling, seq_len=offset + length)
        expected = rotary_reference(
            x[:, :, :length], np.arange(offset, offset + length), freqs.numpy()
        )
        np.testing.assert_allclose(got.numpy(), expected, atol=1e-12)
    # Within the trained length, the unscaled frequencies (the table's).
    torch.testing.assert_close(
        rope(x[:, :, :64]), RotaryEmbedding(16, max_len=256).double()(x[:, :, :64]), rtol=0, atol=0
    )
    # Tensor positions: the batch's largest position decides, as an int offset would.
    positions = torch.arange(100)
    assert torch.equal(rope(x, positions=positions), rope(x))
    per_sequence = torch.stack((torch.arange(100), torch.arange(100) // 2))
    expected_rows = rope(x, offset=0)[0]
    assert torch.equal(rope(x, positions=per_sequence)[0], expected_rows)


def test_longrope_switches_factor_sets_with_the_length() -> None:
    scaling = dict(longrope(8), original_max_position_embeddings=32)
    rope = RotaryEmbedding(16, scaling=scaling, max_len=64).double()
    x = torch.randn(1, 2, 40, 16, dtype=torch.float64)
    for length in (32, 33, 40):
        freqs, factor = rope_frequencies(16, scaling=scaling, seq_len=length)
        expected = rotary_reference(
            x[:, :, :length], np.arange(length), freqs.numpy(), factor=factor
        )
        np.testing.assert_allclose(rope(x[:, :, :length]).numpy(), expected, atol=1e-12)
        by_tensor = rope(x[:, :, :length], positions=torch.arange(length))
        assert torch.equal(by_tensor, rope(x[:, :, :length]))


# --- module state: casts, buffers, views, hooks -------------------------------------------


ALL_FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.mark.parametrize("cast_to", ALL_FLOATS)
@pytest.mark.parametrize("input_dtype", ALL_FLOATS)
def test_any_cast_equals_a_fresh_module_for_any_input(
    cast_to: torch.dtype, input_dtype: torch.dtype
) -> None:
    # Tables are float32 (float64 after .double()) and serve only their own dtype: every
    # other input gets its tables computed from float64, with the same values.
    fresh = RotaryEmbedding(32, max_len=64, scaling=YARN)
    cast = RotaryEmbedding(32, max_len=64, scaling=YARN).to(cast_to)
    x = torch.randn(2, 3, 80, 32).to(input_dtype)
    assert torch.equal(cast(x), fresh(x))
    assert torch.equal(
        cast(x, offset=torch.tensor([5, 10**6])), fresh(x, offset=torch.tensor([5, 10**6]))
    )
    positions = torch.randint(0, 200, (2, 80))
    assert torch.equal(cast(x, positions=positions), fresh(x, positions=positions))


def test_negative_offsets_as_int_and_as_tensor() -> None:
    rope = RotaryEmbedding(16, max_len=8)
    x = torch.randn(2, 3, 5, 16)
    for offset in (-3, -10_000):
        assert torch.equal(rope(x, offset=offset), rope(x, offset=torch.tensor(offset)))
        assert torch.equal(rope(x, offset=offset), rope(x, positions=torch.arange(5) + offset))
    with pytest.raises(ValueError, match="outside int64"):
        rope(x, offset=2**63 - 2)


def test_tables_too_large_are_refused_before_any_allocation() -> None:
    message = r"RotaryEmbedding\(head_dim=128, max_len=1000000000000\)'s tables needs .* TB"
    with pytest.raises(ValueError, match=message):
        RotaryEmbedding(128, max_len=10**12)


@pytest.mark.parametrize("layout", ROTARY_LAYOUTS)
def test_cast_modules_are_bit_identical_to_fresh_ones(layout: str) -> None:
    fresh = RotaryEmbedding(64, layout=layout, scaling=YARN)  # type: ignore[arg-type]
    x = torch.randn(2, 4, 6, 64)
    for dtype in (torch.bfloat16, torch.float16):
        method = "half" if dtype == torch.float16 else "bfloat16"
        for module in (
            copy.deepcopy(fresh).to(dtype),
            getattr(copy.deepcopy(fresh), method)(),
            copy.deepcopy(fresh).to(dtype).float(),
            copy.deepcopy(fresh).double().to(dtype),
        ):
            for offset in (0, 10**5, 10**6):
                assert torch.equal(
                    module(x.to(dtype), offset=offset), fresh(x.to(dtype), offset=offset)
                )
    assert torch.equal(fresh.double().float()._cos, RotaryEmbedding(64, scaling=YARN)._cos)


def test_tables_are_float32_except_after_double() -> None:
    rope = RotaryEmbedding(8)
    assert rope._cos.dtype == torch.float32
    assert rope.half()._cos.dtype == torch.float32
    assert rope.bfloat16()._sin.dtype == torch.float32
    assert rope.double()._cos.dtype == torch.float64
    assert rope.float()._cos.dtype == torch.float32


def test_no_op_to_keeps_the_tables() -> None:
    rope = RotaryEmbedding(8)
    before = rope._cos
    rope.to(torch.float32).to("cpu").float()
    assert rope._cos is before


def test_meta_init_then_to_empty() -> None:
    with torch.device("meta"):
        rope = RotaryEmbedding(16, max_len=32, scaling=LLAMA31)
    assert rope._cos.is_meta
    rope = rope.to_empty(device="cpu")
    fresh = RotaryEmbedding(16, max_len=32, scaling=LLAMA31)
    assert torch.equal(rope._cos, fresh._cos)
    assert torch.equal(rope._sin, fresh._sin)
    x = torch.randn(2, 40, 16)
    assert torch.equal(rope(x), fresh(x))


def test_nothing_is_saved_or_trained_and_forward_keeps_state() -> None:
    rope = RotaryEmbedding(16, scaling=dynamic(8), max_len=16)
    assert rope.state_dict() == {}
    assert list(rope.parameters()) == []
    before = {k: v.clone() for k, v in rope.named_buffers()}
    freqs = rope._table_cache.ladder.freqs.clone()
    rope(torch.randn(2, 40, 16), offset=100)
    rope(torch.randn(2, 4, 16), positions=torch.tensor([[1, 2, 3, 900], [0, 1, 2, 3]]))
    for name, value in rope.named_buffers():
        assert torch.equal(value, before[name])
    assert torch.equal(rope._table_cache.ladder.freqs, freqs)
    rope.load_state_dict({}, strict=True)


def test_cos_sin_are_fresh_tensors_and_feed_apply_rotary() -> None:
    rope = RotaryEmbedding(16, layout="interleaved", max_len=32)
    cos, sin = rope.cos_sin(10, offset=3)
    assert cos.shape == sin.shape == (10, 8)
    x = torch.randn(2, 10, 16)
    assert torch.equal(apply_rotary(x, cos, sin, layout="interleaved"), rope(x, offset=3))
    table = rope._cos.clone()
    cos.zero_()
    sin.fill_(7)
    assert torch.equal(rope._cos, table)
    per_sequence, _ = rope.cos_sin(4, offset=torch.tensor([0, 100]), batch=2)
    assert per_sequence.shape == (2, 4, 8)
    low, _ = rope.cos_sin(3, offset=10**6, dtype=torch.bfloat16)
    exact = torch.cos(
        torch.arange(10**6, 10**6 + 3, dtype=torch.float64)[:, None] * rope_frequencies(16)[0]
    )
    assert torch.equal(low, exact.bfloat16())  # rounded once from float64, not via float32


def test_interleaved_tables_widen_to_hugging_face_form() -> None:
    rope = RotaryEmbedding(8)
    cos, sin = rope.cos_sin(5)
    x = torch.randn(5, 8)
    wide_cos, wide_sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    rotate_half = torch.cat((-x[:, 4:], x[:, :4]), -1)
    torch.testing.assert_close(rope(x), x * wide_cos + rotate_half * wide_sin, rtol=0, atol=1e-6)


def test_autograd_path_gives_the_same_values_and_gradients() -> None:
    rope = RotaryEmbedding(16)
    x = torch.randn(2, 3, 7, 16, requires_grad=True)
    y = rope(x, offset=1000)
    assert y.requires_grad
    with torch.no_grad():
        assert torch.equal(y, rope(x, offset=1000))
    y.square().sum().backward()
    assert x.grad is not None
    # A rotation is orthogonal: the gradient of |R x|^2 = |x|^2 is 2 x.
    torch.testing.assert_close(x.grad, 2 * x.detach(), rtol=1e-5, atol=1e-5)
    xb = torch.randn(2, 5, 16, dtype=torch.bfloat16, requires_grad=True)
    with torch.no_grad():
        expected = rope(xb, offset=10**5)
    assert torch.equal(rope(xb, offset=10**5), expected)


def test_inputs_in_hugging_face_layout_and_non_contiguous() -> None:
    rope = RotaryEmbedding(32)
    x = torch.randn(2, 9, 4, 32).transpose(1, 2)  # (B, H, L, D) view of (B, L, H, D)
    assert not x.is_contiguous()
    assert torch.equal(rope(x, offset=7), rope(x.contiguous(), offset=7))
    odd = torch.randn(3, 10, 64)[..., ::2]  # strided last dimension
    assert torch.equal(rope(odd), rope(odd.contiguous()))


def test_large_inputs_are_rotated_in_slices_with_the_same_values() -> None:
    # 2**18 elements per slice: this input takes several.
    rope = RotaryEmbedding(64)
    x = torch.randn(2, 8, 300, 64, dtype=torch.bfloat16)
    pos = np.arange(300) + 12345
    exact = rotary_reference(x, pos, roformer_frequencies(64))
    y = rope(x, offset=12345)
    assert np.all(
        np.abs(y.double().numpy() - exact) <= ulp(pair_length(x, "half"), torch.bfloat16)
    )
    whole = torch.cat([rope(x[:, :, i : i + 1], offset=12345 + i) for i in range(300)], dim=2)
    assert torch.equal(y, whole)


def test_unbatched_and_empty_inputs() -> None:
    rope = RotaryEmbedding(8)
    x = torch.randn(5, 8)
    assert torch.equal(rope(x)[None], rope(x[None]))
    assert rope(torch.randn(2, 0, 8)).shape == (2, 0, 8)
    assert rope(torch.randn(2, 3, 0, 8), offset=torch.tensor([1, 2])).shape == (2, 3, 0, 8)
    dyn = RotaryEmbedding(8, scaling=dynamic(4))
    assert dyn(torch.randn(0, 8), positions=torch.zeros(0, dtype=torch.long)).shape == (0, 8)


def test_repr() -> None:
    assert repr(RotaryEmbedding(64)) == "RotaryEmbedding(head_dim=64, max_len=4096)"
    rope = RotaryEmbedding(
        128,
        base=5e5,
        layout="interleaved",
        scaling=dict(LLAMA31, partial_rotary_factor=0.5),
        max_len=16,
    )
    assert repr(rope) == (
        "RotaryEmbedding(head_dim=128, max_len=16, base=500000, layout='interleaved', "
        "rope_type='llama3', rotary_dim=64)"
    )


# --- apply_rotary -------------------------------------------------------------------------


def test_apply_rotary_rounds_once_in_the_promoted_dtype() -> None:
    x = torch.randn(4, 6, 32, dtype=torch.bfloat16)
    angles = torch.randn(6, 16, dtype=torch.float64) * 1000
    cos, sin = angles.cos().float(), angles.sin().float()
    y = apply_rotary(x, cos, sin)
    assert y.dtype == torch.bfloat16
    in_float32 = apply_rotary(x.float(), cos, sin)
    assert torch.equal(y, in_float32.bfloat16())


def test_apply_rotary_takes_tables_with_extra_leading_ones() -> None:
    x = torch.randn(5, 8)
    cos, sin = RotaryEmbedding(8).cos_sin(5)
    assert torch.equal(
        apply_rotary(x, cos[None, None], sin[None, None]), apply_rotary(x, cos, sin)
    )
    with torch.enable_grad():
        y = apply_rotary(x.requires_grad_(), cos[None], sin[None])
    assert y.shape == (5, 8)


def test_apply_rotary_partial_and_broadcast_tables() -> None:
    x = torch.randn(2, 3, 5, 10, dtype=torch.float64)
    angles = torch.randn(2, 1, 5, 3, dtype=torch.float64)
    y = apply_rotary(x, angles.cos(), angles.sin(), layout="interleaved")
    assert torch.equal(y[..., 6:], x[..., 6:])
    xs, a = x.numpy(), angles.numpy()
    first, second = xs[..., 0:6:2], xs[..., 1:6:2]
    np.testing.assert_allclose(
        y[..., 0:6:2].numpy(), first * np.cos(a) - second * np.sin(a), atol=1e-15
    )
    np.testing.assert_allclose(
        y[..., 1:6:2].numpy(), second * np.cos(a) + first * np.sin(a), atol=1e-15
    )


# --- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"head_dim": 7}, ValueError, "must be even and at least 2 (rope_type='default'): got 7"),
        ({"head_dim": 0}, ValueError, "head_dim must be a positive int, got 0"),
        ({"head_dim": 8.0}, TypeError, "head_dim must be an int, got float 8.0"),
        ({"base": 1.0}, ValueError, "base must be a finite number > 1, got 1.0"),
        (
            {"layout": "rotate_half"},
            ValueError,
            "layout must be one of ('half', 'interleaved'), got 'rotate_half'",
        ),
        ({"max_len": 0}, ValueError, "max_len must be a positive int, got 0"),
        (
            {"scaling": "linear"},
            TypeError,
            "scaling must be None or a dict in Hugging Face's rope_parameters",
        ),
    ],
)
def test_module_argument_errors(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    args = {"head_dim": 8, **kwargs}
    with pytest.raises(error, match=re.escape(message)):
        RotaryEmbedding(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("scaling", "error", "message"),
    [
        (
            {"factor": 2.0},
            ValueError,
            "scaling needs a 'rope_type', one of ('default', 'linear', ",
        ),
        (
            {"rope_type": "mrope"},
            ValueError,
            f"scaling['rope_type'] must be one of {ROPE_TYPES}, got 'mrope'",
        ),
        (
            {"rope_type": "linear"},
            ValueError,
            "scaling with rope_type='linear' needs the key 'factor'; got the keys ['rope_type']",
        ),
        (
            {"rope_type": "dynamic", "factor": 2.0},
            ValueError,
            "rope_type='dynamic' needs the key 'max_position_embeddings' (the model config's "
            "max_position_embeddings",
        ),
        (
            {"rope_type": "yarn", "factor": 2.0},
            ValueError,
            "rope_type='yarn' needs the key 'original_max_position_embeddings'",
        ),
        (
            {"rope_type": "yarn", "original_max_position_embeddings": 64},
            ValueError,
            "needs the key 'factor', or 'max_position_embeddings' to derive it",
        ),
        (
            {k: v for k, v in LLAMA31.items() if k != "low_freq_factor"},
            ValueError,
            "rope_type='llama3' needs the key 'low_freq_factor'",
        ),
        (
            dict(LLAMA31, high_freq_factor=0.5),
            ValueError,
            "scaling['high_freq_factor'] must be at least scaling['low_freq_factor']",
        ),
        (
            {"rope_type": "linear", "factor": "2"},
            TypeError,
            "scaling['factor'] (rope_type='linear') must be a number, got str '2'",
        ),
        (
            {"rope_type": "linear", "factor": -1.0},
            ValueError,
            "scaling['factor'] (rope_type='linear') must be a finite number > 0, got -1.0",
        ),
        (
            {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5},
            ValueError,
            "scaling['rope_theta']=500000.0 differs from base=10000: "
            "pass base=scaling['rope_theta']",
        ),
        (
            dict(YARN, original_max_position_embeddings=4096.0),
            TypeError,
            "scaling['original_max_position_embeddings'] (rope_type='yarn') must be an int",
        ),
        (
            dict(YARN, truncate="yes"),
            TypeError,
            "scaling['truncate'] (rope_type='yarn') must be a bool, got str 'yes'",
        ),
        (
            dict(longrope(4), short_factor=[1.0, 2.0]),
            ValueError,
            "scaling['short_factor'] (rope_type='longrope') must hold one number per rotated "
            "pair, 4 (rotary dimension 8 / 2), got 2",
        ),
        (
            {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 1.5},
            ValueError,
            "must be in (0, 1], got 1.5",
        ),
        (
            {"rope_type": "default", "partial_rotary_factor": 0.4},
            ValueError,
            "must be even and at least 2 (rope_type='default'): got 3 = int(head_dim=8 × 0.4)",
        ),
        (
            {"rope_type": "linear", "type": "yarn", "factor": 2.0},
            ValueError,
            "scaling gives rope_type='linear' and type='yarn'",
        ),
    ],
)
def test_scaling_errors(scaling: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        rope_frequencies(8, scaling=scaling)
    with pytest.raises(error, match=re.escape(message)):
        RotaryEmbedding(8, scaling=scaling)


def test_seq_len_errors() -> None:
    with pytest.raises(TypeError, match=re.escape("seq_len must be an int, got float 10.0")):
        rope_frequencies(8, seq_len=10.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("seq_len must be an int >= 0, got -1")):
        rope_frequencies(8, seq_len=-1)
    with pytest.raises(ValueError, match=re.escape("seq_len must be a positive int, got 0")):
        RotaryEmbedding(8)(torch.ones(2, 8), seq_len=0)  # a call's length is never 0


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda r: r(torch.ones(2, 5, 8, dtype=torch.long)),
            TypeError,
            "input must be a floating tensor, got dtype torch.int64",
        ),
        (
            lambda r: r(torch.ones(8)),
            ValueError,
            "input must have shape (..., L, head_dim), with the sequence on dim -2, "
            "got 1-D shape (8,)",
        ),
        (
            lambda r: r(torch.ones(2, 5, 6)),
            ValueError,
            "input's last dimension must be head_dim=8, got shape (2, 5, 6)",
        ),
        (
            lambda r: r(torch.ones(2, 5, 8), offset=1.5),
            TypeError,
            "offset must be an int or an integer tensor, got float 1.5",
        ),
        (
            # floating positions are fractional positions now (issue 27); complex ones are not
            lambda r: r(torch.ones(2, 5, 8), positions=torch.zeros(5, dtype=torch.complex64)),
            TypeError,
            "positions must be an integer tensor of shape (L,) or (B, L) (integer, or floating "
            "for fractional positions), got dtype torch.complex64: a position is a real number",
        ),
        (
            lambda r: r(torch.ones(2, 5, 8), positions=torch.zeros(3, 5, dtype=torch.long)),
            ValueError,
            "positions of shape (3, 5) needs 3 sequences, but the input has a batch of B=2",
        ),
        (
            lambda r: r(torch.ones(5, 8), offset=torch.tensor([1, 2])),
            ValueError,
            "offset of shape (2,) gives one row per sequence, but there is no batch to match",
        ),
        (
            lambda r: r(torch.ones(2, 5, 8), offset=1, positions=torch.arange(5)),
            ValueError,
            "give either offset or positions, not both",
        ),
        (
            lambda r: r.cos_sin(3, dtype=torch.long),
            TypeError,
            "dtype must be a floating torch.dtype, got torch.int64",
        ),
    ],
)
def test_forward_errors(call: object, error: type[Exception], message: str) -> None:
    rope = RotaryEmbedding(8)
    with pytest.raises(error, match=re.escape(message)):
        call(rope)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (
            (torch.ones(3, 8), torch.ones(3, 4), torch.ones(3, 4, dtype=torch.float64)),
            TypeError,
            "cos and sin must share a dtype, got torch.float32 and torch.float64",
        ),
        (
            (torch.ones(3, 8), torch.ones(3, 4), torch.ones(2, 4)),
            ValueError,
            "cos and sin must have one shape and device",
        ),
        (
            (torch.ones(3, 8), torch.ones(3, 5), torch.ones(3, 5)),
            ValueError,
            "their last dimension must be between 1 and D/2 = 4 for x of shape (3, 8), got (3, 5)",
        ),
        (
            (torch.ones(2, 4, 3, 8), torch.ones(2, 3, 4), torch.ones(2, 3, 4)),
            ValueError,
            "cos and sin of shape (2, 3, 4) do not broadcast to x's shape (2, 4, 3, 8)",
        ),
        (
            (torch.ones(3, 8), torch.ones(4, 3, 4), torch.ones(4, 3, 4)),
            ValueError,
            "do not broadcast to x's shape (3, 8)",
        ),
        (
            (torch.ones(3, 8, dtype=torch.long), torch.ones(3, 4), torch.ones(3, 4)),
            TypeError,
            "x must be a floating tensor, got dtype torch.int64",
        ),
        (
            (torch.ones(3, 8), torch.ones(3, 4, dtype=torch.long), torch.ones(3, 4)),
            TypeError,
            "cos must be a floating tensor, got dtype torch.int64",
        ),
    ],
)
def test_apply_rotary_errors(
    args: tuple[torch.Tensor, ...], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        apply_rotary(*args)
    with pytest.raises(
        ValueError, match=re.escape("layout must be one of ('half', 'interleaved'), got 'neox'")
    ):
        apply_rotary(torch.ones(3, 8), torch.ones(3, 4), torch.ones(3, 4), layout="neox")  # type: ignore[arg-type]


def test_the_module_declares_how_it_reads_positions() -> None:
    # What the DTensor glue reads (posenc._distributed.ReadsPositions), declared and typed.
    from posenc import PositionalEncoding
    from posenc._distributed import ReadsPositions

    plain = RotaryEmbedding(8)
    assert isinstance(plain, ReadsPositions)
    assert (plain.position_axes, plain.trained_length) == (None, None)
    axial = RotaryEmbedding(8, axes=(4, 4))
    assert (axial.position_axes, axial.trained_length) == (2, None)
    mrope = RotaryEmbedding(8, scaling={"rope_type": "default", "mrope_section": [2, 1, 1]})
    assert mrope.position_axes == 3
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 64}
    assert RotaryEmbedding(8, scaling=dynamic).trained_length == 64
    assert not isinstance(PositionalEncoding(8), ReadsPositions)


# --- layouts: the sequence on any dimension, packed inputs --------------------------------


@pytest.mark.parametrize("layout", ROTARY_LAYOUTS)
def test_sequence_on_dim_1_is_the_transposed_call(layout: str) -> None:
    rope = RotaryEmbedding(32, layout=layout)  # type: ignore[arg-type]
    x = torch.randn(2, 9, 4, 32)  # (B, L, H, D): flash-attn's, torchtune's, GPT-J's
    ids = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [5, 6, 7, 8, 9, 10, 11, 12, 4_000]])
    for kwargs in ({}, {"offset": 7}, {"positions": ids}, {"offset": torch.tensor([3, 9])}):
        y = rope(x, seq_dim=1, **kwargs)  # type: ignore[arg-type]
        assert y.shape == x.shape
        assert y.is_contiguous()
        expected = rope(x.transpose(1, 2), **kwargs).transpose(1, 2)  # type: ignore[arg-type]
        assert torch.equal(y, expected)
    exact = rotary_reference(x.transpose(1, 2), ids[:, None], roformer_frequencies(32), layout)
    got = rope(x, seq_dim=1, positions=ids).transpose(1, 2).double().numpy()
    np.testing.assert_allclose(got, exact, rtol=0, atol=2e-6)


def test_seq_dim_counts_from_either_end() -> None:
    rope = RotaryEmbedding(8)
    x = torch.randn(2, 5, 3, 8)
    assert torch.equal(rope(x, seq_dim=1, offset=4), rope(x, seq_dim=-3, offset=4))
    assert torch.equal(rope(x, seq_dim=2), rope(x, seq_dim=-2))
    assert torch.equal(rope(x, seq_dim=np.int64(1)), rope(x, seq_dim=1))  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_tokens_with_per_token_positions(dtype: torch.dtype) -> None:
    # Packed (T, H, D), as varlen attention takes it: documents of 3, 5 and 2 tokens.
    rope = RotaryEmbedding(16)
    lengths = torch.tensor([3, 5, 2])
    x = torch.randn(10, 4, 16).to(dtype)
    positions = positions_from_lengths(lengths)
    y = rope(x, seq_dim=0, positions=positions)
    pieces = [
        rope(part.transpose(0, 1)).transpose(0, 1)  # each document on its own, from 0
        for part in x.split(lengths.tolist())
    ]
    assert torch.equal(y, torch.cat(pieces))


def test_a_sequence_layout_that_cannot_be_told_apart_is_refused_with_the_fix() -> None:
    rope = RotaryEmbedding(32)
    x = torch.randn(2, 16, 8, 32)  # (B, L, H, D), L = 16 tokens, H = 8 heads
    ids = torch.arange(16).expand(2, 16)
    with pytest.raises(ValueError, match="pass seq_dim=1") as info:
        rope(x, positions=ids)  # read as (B, H, L, D): L = 8 does not match
    assert "holds 8 tokens, and the positions give 16" in str(info.value)
    with pytest.raises(ValueError, match=r"with L=16, got shape \(8,\)\. .* pass seq_dim=1"):
        rope(x, seq_dim=1, positions=torch.arange(8))
    packed = torch.randn(10, 4, 32)
    with pytest.raises(ValueError, match=r"a packed input .* has no batch"):
        rope(packed, seq_dim=0, positions=torch.zeros(2, 10, dtype=torch.long))
    with pytest.raises(ValueError, match="has no batch"):
        rope(packed, seq_dim=0, offset=torch.tensor([1, 2]))


@pytest.mark.parametrize(
    ("seq_dim", "error", "message"),
    [
        (3, ValueError, "seq_dim must name the sequence dimension of the 4-D input"),
        (-1, ValueError, "one of -4, ..., 2 (the last dimension holds the head_dim=8"),
        (4, ValueError, "got 4"),
        (True, TypeError, "seq_dim must be an int, got bool True"),
        (1.0, TypeError, "seq_dim must be an int, got float 1.0"),
    ],
)
def test_seq_dim_errors(seq_dim: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        RotaryEmbedding(8)(torch.randn(2, 3, 4, 8), seq_dim=seq_dim)  # type: ignore[arg-type]


# --- training: the gradient is the rotation back ------------------------------------------


@pytest.mark.parametrize("layout", ROTARY_LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_the_gradient_is_the_rotation_by_minus_theta(layout: str, dtype: torch.dtype) -> None:
    rope = RotaryEmbedding(
        24, layout=layout, scaling={"rope_type": "default", "partial_rotary_factor": 2 / 3}
    )  # type: ignore[arg-type]
    x = torch.randn(2, 3, 300, 24, dtype=dtype, requires_grad=True)  # several slices
    grad = torch.randn(2, 3, 300, 24, dtype=dtype)
    offset = 90_000
    y = rope(x, offset=offset)
    with torch.no_grad():
        assert torch.equal(y, rope(x, offset=offset))  # the values of the inference path
    y.backward(grad)
    # R(θ)ᵀ = R(-θ): the gradient is the gradient rotated back, rounded once; to the
    # bit what autograd derives from the plain formula x·cos + rotate_half(x)·sin.
    back = torch.arange(300) + offset
    assert x.grad is not None
    cos, sin = rope.cos_sin(300, offset=offset, dtype=torch.promote_types(dtype, torch.float32))
    assert torch.equal(x.grad, _plain_gradient(x, cos, sin, layout, grad))
    exact = rotary_reference(grad, -back.numpy(), roformer_frequencies(16), layout)
    np.testing.assert_allclose(
        x.grad.double().numpy(), exact, rtol=0, atol=float(ulp(np.array(4.0), dtype))
    )


def _plain_gradient(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, grad: torch.Tensor
) -> torch.Tensor:
    """Autograd's gradient of the plain formula, in the tables' dtype, rounded to x's."""
    h = cos.shape[-1]
    x = x.detach().requires_grad_(True)
    wide = x[..., : 2 * h].to(cos.dtype)
    if layout == "half":
        pairs = torch.cat((-wide[..., h:], wide[..., :h]), -1)
        wide_cos, wide_sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    else:
        pairs = torch.stack((-wide[..., 1::2], wide[..., 0::2]), -1).flatten(-2)
        wide_cos, wide_sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    y = torch.cat(((wide * wide_cos + pairs * wide_sin).to(x.dtype), x[..., 2 * h :]), -1)
    (got,) = torch.autograd.grad(y, x, grad)
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_a_few_elements_are_rotated_in_fewer_kernels_to_the_same_bits(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    from posenc import rotary

    rope = RotaryEmbedding(32)
    x = (torch.randn(2, 3, 5, 32) * 100).to(dtype)
    x[0, 0, 0, :4] = torch.tensor([0.0, -0.0, 1e-30, -1e30]).to(dtype)
    calls = [lambda t: rope(t, offset=9), lambda t: rope(t, positions=torch.arange(5) * 700)]
    few = [call(x) for call in calls]
    trained = x.clone().requires_grad_(True)
    few.append(calls[0](trained).detach())  # the training path's forward
    monkeypatch.setattr(rotary, "_FEW", 0)  # every size in place, slice by slice
    in_place = [call(x) for call in calls] + [calls[0](trained).detach()]
    bits = {8: torch.int64, 4: torch.int32, 2: torch.int16}[dtype.itemsize]
    for a, b in zip(few, in_place, strict=True):
        assert torch.equal(a.view(bits), b.view(bits))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_a_decoding_step_a_token_at_a_time_gives_the_bits_of_every_other_path(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    from posenc import rotary

    rope = RotaryEmbedding(32, max_len=200)
    torch.manual_seed(0)
    steps = [(torch.randn(3, 4, 1, 32) * 100).to(dtype) for _ in range(200)]
    steps[0][0, 0, 0, :4] = torch.tensor([0.0, -0.0, 1e-30, -1e30]).to(dtype)
    # tokens one at a time across the blocks of widened rows, then back, then a few
    # tokens at once within a block and across one, and one unbatched
    calls = [(x, p) for p, x in enumerate(steps)] + [(steps[5], 70), (steps[6], 3)]
    calls += [(torch.cat(steps[:5], 2), 58), (torch.cat(steps[:5], 2), 62), (steps[7][0, 0], 199)]
    stepped = [rope(x, offset=p) for x, p in calls]
    monkeypatch.setattr(rotary, "_FEW", 0)  # every size in place, slice by slice
    bits = {8: torch.int64, 4: torch.int32, 2: torch.int16}[dtype.itemsize]
    for (x, p), got in zip(calls, stepped, strict=True):
        want = rope(x, positions=torch.arange(p, p + x.shape[-2]))
        assert got.dtype == x.dtype
        assert got.shape == x.shape
        assert torch.equal(got.view(bits), want.view(bits)), p


def test_a_decoding_step_reads_the_tables_as_they_are_now() -> None:
    # The widened rows are kept while the tables are the same tensors, unchanged: a
    # table written in place, moved, cast or derived again is read afresh.
    rope, x = RotaryEmbedding(16, max_len=64), torch.randn(2, 1, 16)
    before = rope(x, offset=7)
    with torch.no_grad():
        rope._cos.fill_(1.0)
        rope._sin.zero_()
    assert torch.equal(rope(x, offset=7), x)  # the angle 0 now: no rotation
    rope.reset_parameters()
    assert torch.equal(rope(x, offset=7), before)
    rope.double()
    assert rope(x.double(), offset=7).dtype == torch.float64
    assert torch.equal(rope.float()(x, offset=7), before)
    rope.to_empty(device="cpu")
    assert torch.equal(rope(x, offset=7), before)


@pytest.mark.parametrize(
    "make",
    [
        lambda: RotaryEmbedding(16, layout="interleaved"),
        lambda: RotaryEmbedding(
            16, scaling={"rope_type": "default", "partial_rotary_factor": 0.5}
        ),
        lambda: RotaryEmbedding(
            16,
            max_len=64,
            scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 8},
        ),
        lambda: RotaryEmbedding(16, axes=(8, 8)),
        lambda: RotaryEmbedding(
            16,
            scaling={
                "rope_type": "default",
                "mrope_section": [2, 3, 3],
                "mrope_interleaved": True,
            },
        ),
        lambda: RotaryEmbedding(16, frequencies=MixedFrequencies(16, n_heads=2)),
    ],
    ids=["interleaved", "partial", "dynamic", "axes", "mrope", "mixed"],
)
def test_a_few_tokens_at_an_offset_are_the_tokens_at_their_positions(
    make: Callable[[], RotaryEmbedding],
) -> None:
    # Whichever path serves a few tokens at an int offset (the decoding step reads the
    # tables, on every axis at once; the other layout, part of the features, another
    # length's frequencies and learned ones take the general path), they are the tokens
    # at their positions.
    rope, x = make(), torch.randn(1, 2, 3, 16)
    for offset in (0, 5, 7, 30):
        positions = torch.arange(offset, offset + 3)
        if rope.position_axes is not None:
            positions = positions.expand(rope.position_axes, 3)
        assert torch.equal(rope(x, offset=offset), rope(x, positions=positions))
    dynamic = rope.trained_length is not None
    if dynamic:  # another length's frequencies: the step is not taken
        wanted = rope(x, positions=torch.arange(5, 8), seq_len=40)
        assert torch.equal(rope(x, offset=5, seq_len=40), wanted)
        assert not torch.equal(rope(x, offset=5), wanted)


def test_a_decoding_step_keeps_what_forward_promises() -> None:
    rope = RotaryEmbedding(16)
    x = torch.randn(3, 2, 16).transpose(0, 1)  # (H, L, D), the heads not outermost
    assert rope(x, offset=1).stride() == x.stride()  # the input's memory layout
    on_meta = rope(torch.empty(1, 2, 1, 16, device="meta"), offset=3)  # tables on the CPU
    assert on_meta.device.type == "meta"
    assert on_meta.shape == (1, 2, 1, 16)
    xpos = RotaryEmbedding(16, xpos_scale_base=512)
    with pytest.raises(ValueError, match="call rotate_queries_and_keys"):
        xpos(torch.randn(1, 1, 16), offset=3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_decoding_step_under_autograd_records_its_gradient(dtype: torch.dtype) -> None:
    rope = RotaryEmbedding(16)
    x = torch.randn(1, 2, 1, 16).to(dtype).requires_grad_(True)
    y = rope(x, offset=3)
    assert y.grad_fn is not None
    (g,) = torch.autograd.grad(y.sum(), x)
    (want,) = torch.autograd.grad(rope(x, positions=torch.tensor([3])).sum(), x)
    assert torch.equal(g, want)
    assert not torch.equal(g, torch.ones_like(g))
    with torch.no_grad():  # and without autograd, the step's values
        assert torch.equal(rope(x, offset=3), y.detach())


def test_second_derivatives_flow_through_the_rotation() -> None:
    rope = RotaryEmbedding(8)
    x = torch.randn(1, 5, 8, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradgradcheck(lambda t: rope(t, offset=3), (x,))
    torch.autograd.gradcheck(lambda t: rope(t, offset=3), (x,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_training_path_equals_autograd_through_the_plain_formula(dtype: torch.dtype) -> None:
    # Each product rounded, then summed: no multiply-add fused where autograd has none,
    # so the two agree to the bit, signed zeros included (autograd's sums give +0).
    rope = RotaryEmbedding(16)
    x = torch.randn(2, 4, 7, 16, dtype=dtype, requires_grad=True)
    grad = torch.randn(2, 4, 7, 16, dtype=dtype)
    grad[..., 0, :] = -0.0
    cos, sin = rope.cos_sin(7, offset=11, dtype=dtype)
    plain = x * torch.cat((cos, cos), -1) + torch.cat((-x[..., 8:], x[..., :8]), -1) * torch.cat(
        (sin, sin), -1
    )
    (expected,) = torch.autograd.grad(plain, x, grad)
    (got,) = torch.autograd.grad(rope(x, offset=11), x, grad)
    bits = torch.int64 if dtype == torch.float64 else torch.int32
    assert torch.equal(got.view(bits), expected.view(bits))


# --- the path of a call: what a reader follows -------------------------------------------


def _executed(call: object) -> tuple[set[tuple[str, int]], set[tuple[str, int, str]]]:
    """The distinct lines and functions of src/posenc that ``call()`` runs."""
    import pathlib
    import sys

    import posenc

    source = str(pathlib.Path(posenc.__file__).parent)
    lines: set[tuple[str, int]] = set()
    functions: set[tuple[str, int, str]] = set()

    def tracer(frame, event, arg):  # type: ignore[no-untyped-def]
        code = frame.f_code
        if not code.co_filename.startswith(source):
            return None
        if event == "call" and not code.co_name.startswith("<"):  # comprehensions aside
            functions.add((code.co_filename, code.co_firstlineno, code.co_name))
        elif event == "line":
            lines.add((code.co_filename, frame.f_lineno))
        return tracer

    sys.settrace(tracer)
    try:
        call()  # type: ignore[operator]
    finally:
        sys.settrace(None)
    return lines, functions


@pytest.mark.parametrize(
    ("call", "most_lines", "most_functions"),
    [
        (lambda rope, q, p: rope(q, positions=p), 66, 14),
        (lambda rope, q, p: rope(q, offset=3), 66, 14),
    ],
    ids=["positions", "offset"],
)
def test_a_steady_call_runs_a_short_path(
    call: object, most_lines: int, most_functions: int
) -> None:
    # The default RoPE call, after a warm-up: resolve, read the rows, rotate. Its
    # validation is on the path (the error tests above); what is counted is every
    # distinct line and function of src/posenc executed, torch's own code aside.
    rope = RotaryEmbedding(64)
    q, p = torch.randn(1, 8, 16, 64), torch.arange(16) + 5
    call(rope, q, p)  # type: ignore[operator]
    lines, functions = _executed(lambda: call(rope, q, p))  # type: ignore[operator]
    names = sorted(f"{f.rsplit('/', 1)[-1]}:{name}" for f, _, name in functions)
    assert len(lines) <= most_lines, (len(lines), names)
    assert len(functions) <= most_functions, names


def flash_attn_rule(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool
) -> torch.Tensor:
    """flash-attn's reference rotation, ``apply_rotary_emb_torch``, stated from its source.

    flash-attn ships no CPU wheel, so its rule is written out here (flash_attn/layers/
    rotary.py at 09d422b): ``x`` is (batch, seqlen, nheads, headdim); ``cos`` and ``sin``
    are (seqlen, rotary_dim / 2) or (batch, seqlen, rotary_dim / 2), widened to one
    value per feature (each twice: the halves side by side, or neighbours when
    interleaved) with a 1 for the heads; the features past rotary_dim pass unchanged.
    """
    rotated = 2 * cos.shape[-1]
    if interleaved:
        cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
        first, second = x[..., 0:rotated:2], x[..., 1:rotated:2]
        turned = torch.stack((-second, first), dim=-1).flatten(-2)
    else:
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        first, second = x[..., : rotated // 2], x[..., rotated // 2 : rotated]
        turned = torch.cat((-second, first), dim=-1)
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # the heads
    return torch.cat((x[..., :rotated] * cos + turned * sin, x[..., rotated:]), dim=-1)


@pytest.mark.parametrize("layout", ROTARY_LAYOUTS)
def test_seq_dim_1_equals_flash_attns_reference_rotation(layout: str) -> None:
    partial = {"rope_type": "default", "partial_rotary_factor": 0.5}
    rope = RotaryEmbedding(32, layout=layout, scaling=partial)  # type: ignore[arg-type]
    x = torch.randn(2, 10, 3, 32, dtype=torch.float64)  # (batch, seqlen, nheads, headdim)
    interleaved = layout == "interleaved"
    cos, sin = rope.cos_sin(10, offset=500, dtype=torch.float64)
    expected = flash_attn_rule(x, cos, sin, interleaved)
    torch.testing.assert_close(rope(x, seq_dim=1, offset=500), expected, rtol=0, atol=1e-15)
    # Per-sequence tables (batch, seqlen, rotary_dim / 2): flash-attn's seqlen_offsets.
    offsets = torch.tensor([3, 9_000])
    cos, sin = rope.cos_sin(10, offset=offsets, batch=2, dtype=torch.float64)
    expected = flash_attn_rule(x, cos, sin, interleaved)
    torch.testing.assert_close(rope(x, seq_dim=1, offset=offsets), expected, rtol=0, atol=1e-15)
    # Varlen: flash-attn's apply_rotary_emb with cu_seqlens restarts every sequence at
    # its offset; packed (T, H, D) with positions_from_lengths is that rotation.
    lengths = torch.tensor([4, 6])
    packed = x[0]  # (T, H, D), T = 10
    cos, sin = rope.cos_sin(10, positions=positions_from_lengths(lengths), dtype=torch.float64)
    expected = flash_attn_rule(packed[None], cos, sin, interleaved)[0]
    got = rope(packed, seq_dim=0, positions=positions_from_lengths(lengths))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-15)


# --- RoPE-Mixed: learned frequencies ------------------------------------------------------


def mixed_cis_reference(
    weight: torch.Tensor, t_x: torch.Tensor, t_y: torch.Tensor
) -> torch.Tensor:
    """The authors' ``compute_mixed_cis``, restated in complex128 from its formula.

    naver-ai/rope-vit, ``models/vit_rope.py``: ``freqs_x = t_x ⊗ freqs[0]`` and
    ``freqs_y = t_y ⊗ freqs[1]`` per head, ``freqs_cis = polar(1, freqs_x + freqs_y)``,
    shape (heads, N, D/2); it multiplies ``view_as_complex(x.reshape(..., -1, 2))``:
    features 2k and 2k + 1 are the real and imaginary parts of pair k (interleaved).
    """
    phase = t_x[None, :, None] * weight[0][:, None, :] + t_y[None, :, None] * weight[1][:, None, :]
    return torch.polar(torch.ones_like(phase), phase)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_mixed_frequencies_rotate_as_the_authors_complex_form(dtype: torch.dtype) -> None:
    from posenc import MixedFrequencies, grid_positions

    torch.manual_seed(0)
    heads, d = 4, 32
    rope = RotaryEmbedding(d, layout="interleaved", frequencies=MixedFrequencies(d, heads))
    q = torch.randn(3, heads, 35, d, dtype=torch.float64)  # a 5 × 7 grid of patches
    xy = grid_positions(5, 7).flip(0)  # x (column) first, then y (row), as the authors
    assert rope.frequencies is not None
    weight = rope.frequencies.weight.detach().to(torch.float64)
    cis = mixed_cis_reference(weight, xy[0].double(), xy[1].double())
    exact = torch.view_as_real(torch.view_as_complex(q.reshape(3, heads, 35, -1, 2)) * cis)
    got = rope(q.to(dtype), positions=xy)
    # float64: the float64 phases; narrower dtypes: within one ulp of the exact rotation
    tol = 1e-14 if dtype == torch.float64 else 2 * torch.finfo(dtype).eps
    torch.testing.assert_close(got.double(), exact.flatten(-2), rtol=tol, atol=tol * 4)


def test_mixed_frequencies_start_as_the_authors_and_learn() -> None:
    from posenc import MixedFrequencies

    torch.manual_seed(3)
    mixed = MixedFrequencies(16, n_heads=2, base=10.0)
    # init_random_2d_freqs: speeds 10 ** (-4j / D), j < D/4, along a random angle a for
    # the first D/4 pairs and a + pi/2 for the others, per head.
    speeds = 10.0 ** (-torch.arange(0, 16, 4, dtype=torch.float64) / 16)
    w = mixed.weight.detach().double()
    for head in range(2):
        a = torch.atan2(w[1, head, 0], w[0, head, 0])
        along = torch.stack((a.cos(), a.sin()))[:, None] * speeds
        across = torch.stack(((a + math.pi / 2).cos(), (a + math.pi / 2).sin()))[:, None] * speeds
        torch.testing.assert_close(w[:, head], torch.cat((along, across), 1).float().double())
    rope = RotaryEmbedding(16, layout="interleaved", frequencies=mixed)
    q = torch.randn(1, 2, 6, 16, requires_grad=True)
    positions = torch.tensor([[0, 1, 2, 0, 1, 2], [0, 0, 0, 1, 1, 1]])
    (rope(q, positions=positions) * torch.randn(1, 2, 6, 16)).sum().backward()
    assert mixed.weight.grad is not None
    assert mixed.weight.grad.abs().sum() > 0  # the frequencies train
    assert q.grad is not None
    assert "frequencies.weight" in rope.state_dict()  # saved, as any parameter


def test_mixed_frequencies_errors() -> None:
    from posenc import MixedFrequencies

    with pytest.raises(ValueError, match="head_dim must be a multiple of 4 for RoPE-Mixed"):
        MixedFrequencies(6, 2)
    with pytest.raises(ValueError, match="n_axes must be an int >= 2"):
        MixedFrequencies(8, 2, n_axes=1)
    with pytest.raises(ValueError, match="need a RotaryEmbedding of head_dim=8"):
        RotaryEmbedding(16, frequencies=MixedFrequencies(8, 2))
    with pytest.raises(TypeError, match="frequencies must be None or a MixedFrequencies"):
        RotaryEmbedding(16, frequencies=torch.ones(2))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"positions": torch.tensor([[4000]])},
        {"positions": torch.tensor([3, 1, 2])},
        {"offset": torch.tensor(5)},
        {"offset": 5},
    ],
    ids=["one-position", "positions", "tensor-offset", "int-offset"],
)
def test_cos_sin_never_hands_out_the_tables(kwargs: dict[str, object]) -> None:
    rope = RotaryEmbedding(8)
    length = 1 if "positions" in kwargs and kwargs["positions"].dim() == 2 else 3  # type: ignore[union-attr]
    batch = 1 if length == 1 else None
    cos, sin = rope.cos_sin(length, batch=batch, **kwargs)  # type: ignore[arg-type]
    tables = {rope._cos.untyped_storage().data_ptr(), rope._sin.untyped_storage().data_ptr()}
    assert cos.untyped_storage().data_ptr() not in tables
    assert sin.untyped_storage().data_ptr() not in tables
    cos.fill_(7.0)
    assert not (rope.cos_sin(8)[0] == 7.0).any()
