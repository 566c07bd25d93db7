"""posenc.bias: ALiBi and T5's relative position buckets, against the papers' formulas.

References written here from the publications, sharing no code with posenc:

* ALiBi: Press, Smith and Lewis, "Train Short, Test Long: Attention with Linear
  Biases Enables Input Length Extrapolation" (ICLR 2022), §3: the bias of query
  ``i`` for key ``j <= i`` is ``-m · (i - j)``; for ``n`` heads (a power of 2)
  the slopes are the geometric sequence starting at and with ratio
  ``2 ** (-8 / n)``. Other head counts follow their code
  (ofirpress/attention_with_linear_biases, ``fairseq/models/transformer.py``,
  ``get_slopes``): the slopes of the closest smaller power of two, then every
  other slope of the next power of two, as many as needed.
* T5: Raffel et al., "Exploring the Limits of Transfer Learning with a Unified
  Text-to-Text Transformer" (JMLR 2020), §2.1, and Mesh TensorFlow's
  ``_relative_position_bucket`` (tensorflow/mesh,
  ``mesh_tensorflow/transformer/transformer_layers.py``): half of the buckets
  of a direction hold one distance each, the rest are spaced logarithmically
  up to ``max_distance``. Evaluated below in exact rational arithmetic.
* KERPLE: Chi, Fan, Ramadge and Rudnicky, "KERPLE: Kernelized Relative
  Positional Embedding for Length Extrapolation" (NeurIPS 2022): the
  logarithmic variant's bias ``-r1 · log(1 + r2 · |i - j|)`` with ``r1, r2 > 0``;
  the authors' code (chijames/KERPLE, ``kerple_log``) clamps both to at least
  ``1e-2`` before use. x-transformers has no KERPLE: the formula below, in
  float64 with Python's ``math.log1p``, is the check.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import INTEGER_DTYPES, round_once

from posenc import (
    KERPLE,
    ALiBi,
    MultiHeadedAttention,
    RelativePositionBias,
    alibi_slopes,
    attention,
    document_block_mask,
    document_ids,
    positions_from_lengths,
    positions_from_mask,
    relative_position_bucket,
    subsequent_mask,
)
from posenc._relative import RelativeBias

PROPERTY = settings(max_examples=40, deadline=None)


# --- references -----------------------------------------------------------------------------


def press_slopes(n: int) -> list[float]:
    """Press et al.'s slopes: the paper's sequence, their code's rule for other n."""

    def power_of_two(p: int) -> list[float]:
        start = 2.0 ** (-8.0 / p)
        return [start * start**i for i in range(p)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_two(closest) + power_of_two(2 * closest)[0::2][: n - closest]


def alibi_reference(
    slopes: list[float], q_pos: np.ndarray, k_pos: np.ndarray, symmetric: bool
) -> np.ndarray:
    """(H, Lq, Lk) float64: -m (i - j), or -m |i - j|."""
    distance = q_pos[:, None].astype(np.float64) - k_pos[None, :].astype(np.float64)
    if symmetric:
        distance = np.abs(distance)
    return -np.asarray(slopes)[:, None, None] * distance[None]


def t5_bucket_reference(r: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """Mesh TensorFlow's bucket of one relative position, in exact arithmetic."""
    bucket = 0
    n = -r
    if bidirectional:
        num_buckets //= 2
        if n < 0:
            bucket += num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return bucket + n
    # max_exact + floor(log(n / max_exact) / log(max_distance / max_exact) * (nb - max_exact)):
    # the largest k with (n / max_exact) ** (nb - max_exact) >= (max_distance / max_exact) ** k.
    ratio, span = Fraction(max_distance, max_exact), num_buckets - max_exact
    power = Fraction(n, max_exact) ** span
    k = 0
    while k < span and ratio ** (k + 1) <= power:
        k += 1
    return bucket + min(max_exact + k, num_buckets - 1)


# --- alibi_slopes ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 32, 40, 64, 96, 100, 128])
def test_slopes_follow_press_et_al(n: int) -> None:
    slopes = alibi_slopes(n)
    assert slopes.dtype == torch.float64
    assert slopes.shape == (n,)
    # Their code multiplies by the ratio i times: its slopes carry a few ulps of that.
    np.testing.assert_allclose(slopes.numpy(), press_slopes(n), rtol=1e-14, atol=0)


def test_slopes_of_the_paper_examples() -> None:
    # §3: "For models with 8 heads, our slopes are 1/2, 1/2^2, ..., 1/2^8"; 16 heads
    # interpolate them: 1/2^0.5, 1/2^1, ..., 1/2^8.
    assert alibi_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]
    np.testing.assert_allclose(alibi_slopes(16).numpy(), [2.0 ** (-k / 2) for k in range(1, 17)])


def test_slopes_are_distinct_positive_and_below_one() -> None:
    for n in range(1, 70):
        s = alibi_slopes(n)
        assert bool((s > 0).all())
        assert bool((s < 1).all())
        assert len(set(s.tolist())) == n


@pytest.mark.parametrize(("n", "error"), [(0, ValueError), (-3, ValueError), (8.0, TypeError)])
def test_slopes_errors(n: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=rf"n_heads.*{n!r}"):
        alibi_slopes(n)  # type: ignore[arg-type]


# --- ALiBi values ---------------------------------------------------------------------------


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize(("lq", "lk", "offset"), [(5, 5, 0), (1, 9, 8), (3, 7, 4), (4, 2, 0)])
def test_alibi_equals_the_formula(symmetric: bool, lq: int, lk: int, offset: int) -> None:
    alibi = ALiBi(6, symmetric=symmetric)
    got = alibi(lq, lk, offset=offset, dtype=torch.float64)
    q_pos, k_pos = np.arange(offset, offset + lq), np.arange(lk)
    expected = alibi_reference(press_slopes(6), q_pos, k_pos, symmetric)
    assert got.shape == (6, lq, lk)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-15, atol=0)


def test_causal_and_symmetric_agree_at_and_before_the_query() -> None:
    causal, symmetric = ALiBi(8)(7), ALiBi(8, symmetric=True)(7)
    past = subsequent_mask(7)[0]
    assert torch.equal(causal[:, past], symmetric[:, past])
    assert bool((causal[:, ~past] > 0).all())  # the causal line continues past the query
    assert bool((symmetric[:, ~past] < 0).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_alibi_is_the_float64_bias_rounded_once(dtype: torch.dtype) -> None:
    alibi = ALiBi(12)
    exact = alibi(30, 300, offset=270, dtype=torch.float64)
    got = alibi(30, 300, offset=270, dtype=dtype)
    assert got.dtype == dtype
    assert torch.equal(got, round_once(exact, dtype))


@pytest.mark.parametrize("n_heads", [1, 3, 6, 8, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    ("lq", "lk", "offset"),
    [(30, 300, 270), (3, 4, 2**24 - 3), (2, 3, 2**24 + 1), (2, 2, 2**40)],
    ids=["near", "distance-below-2**24", "distance-2**24", "far"],
)
def test_alibi_float32_path_keeps_the_float64_values(
    n_heads: int, dtype: torch.dtype, lq: int, lk: int, offset: int
) -> None:
    # Powers-of-two slopes (1, 3, 6, 8 heads) with distances below 2**24 take float32
    # arithmetic, exact there; 16 heads (slopes 2**(-k/2)) and longer distances float64.
    # Every value is the float64 product -m_h * (i - j) rounded once (Press et al., 2022).
    slopes = alibi_slopes(n_heads)
    q = torch.arange(offset, offset + lq, dtype=torch.int64)
    k = torch.arange(lk, dtype=torch.int64)
    distance = (q[:, None] - k[None]).to(torch.float64)
    for symmetric in (False, True):
        alibi = ALiBi(n_heads, symmetric=symmetric)
        line = -(distance.abs() if symmetric else distance)
        exact = slopes[:, None, None] * line
        for causal in (False, True):
            got = alibi(lq, lk, offset=offset, dtype=dtype, causal=causal)
            # causal is by slot: query i sits at key slot i + lk - lq
            later = torch.arange(lk)[None] - torch.arange(lq)[:, None] > lk - lq
            want = exact.masked_fill(later, -math.inf) if causal else exact
            # IEEE 754: past the largest finite value plus half its ulp, the nearest is inf
            top = torch.tensor(torch.finfo(dtype).max, dtype=dtype)
            below = torch.nextafter(top, torch.zeros_like(top))
            overflow = float(top.double() + (top.double() - below.double()) / 2)
            rounded = round_once(want, dtype)
            rounded[want.abs() >= overflow] = (
                want.sign()[want.abs() >= overflow].to(dtype) * math.inf
            )
            assert got.dtype == dtype
            assert torch.equal(got, rounded)
            assert not bool(torch.signbit(got[want == 0]).any())  # +0, as float64 gives
    ids = torch.tensor([[0, 9], [70_000, 5]])
    keys = torch.arange(3)
    batch = ALiBi(n_heads)(2, 3, positions=ids, key_positions=keys, dtype=dtype)
    per = [ALiBi(n_heads)(2, 3, positions=row, key_positions=keys, dtype=dtype) for row in ids]
    assert torch.equal(batch, torch.stack(per))


def test_alibi_default_dtype_device_and_no_state() -> None:
    alibi = ALiBi(4)
    out = alibi(3)
    assert out.dtype == torch.float32
    assert out.device.type == "cpu"
    assert alibi.state_dict() == {}
    assert list(alibi.parameters()) == []
    assert list(alibi.buffers()) == []
    # Casting changes nothing: the module holds no tensor; the dtype is asked per call.
    assert torch.equal(alibi.to(torch.bfloat16)(3), out)
    assert alibi(3, dtype=torch.float64).dtype == torch.float64


def test_slopes_property_is_a_fresh_tensor() -> None:
    alibi = ALiBi(4)
    alibi.slopes.zero_()
    assert torch.equal(alibi.slopes, alibi_slopes(4))


@given(shift=st.integers(-(2**20), 2**20), symmetric=st.booleans())
@PROPERTY
def test_alibi_is_unchanged_when_queries_and_keys_shift_together(
    shift: int, symmetric: bool
) -> None:
    alibi = ALiBi(5, symmetric=symmetric)
    q, k = torch.tensor([3, 4, 9]), torch.tensor([0, 2, 3, 7, 9])
    base = alibi(3, positions=q, key_positions=k, dtype=torch.float64)
    moved = alibi(3, positions=q + shift, key_positions=k + shift, dtype=torch.float64)
    assert torch.equal(base, moved)


@given(
    scores=st.lists(st.floats(-5, 5), min_size=6 * 6, max_size=6 * 6),
    causal_mask=st.booleans(),
)
@PROPERTY
def test_alibi_softmax_equals_key_only_bias_of_bloom_form(
    scores: list[float], causal_mask: bool
) -> None:
    # BLOOM (and Press et al.'s code) add m·j, a row constant m·i away from -m·(i - j):
    # softmax ignores a constant per row, so both give the same attention weights.
    s = torch.tensor(scores, dtype=torch.float64).view(1, 6, 6)
    slopes = alibi_slopes(3)
    ours = ALiBi(3)(6, dtype=torch.float64)
    key_only = slopes[:, None, None] * torch.arange(6, dtype=torch.float64)
    row_constant = ours - key_only
    assert torch.allclose(row_constant, row_constant[..., :1].expand(-1, -1, 6), atol=1e-13)
    mask = subsequent_mask(6) if causal_mask else torch.ones(1, 6, 6, dtype=torch.bool)
    a = (s + ours).masked_fill(~mask, -math.inf).softmax(-1)
    b = (s + key_only).masked_fill(~mask, -math.inf).softmax(-1)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


# --- shared forward: offsets, padding, dtypes, shapes ----------------------------------------

BIAS_MODULES = [
    pytest.param(lambda: ALiBi(4), id="ALiBi"),
    pytest.param(lambda: ALiBi(4, symmetric=True), id="ALiBi-symmetric"),
    pytest.param(lambda: RelativePositionBias(4), id="T5-encoder"),
    pytest.param(
        lambda: RelativePositionBias(4, bidirectional=False, num_buckets=8, max_distance=20),
        id="T5-decoder",
    ),
    pytest.param(lambda: KERPLE(4), id="KERPLE"),
]


@pytest.mark.parametrize("make", BIAS_MODULES)
def test_decoding_with_offsets_equals_the_whole_sequence(make) -> None:  # type: ignore[no-untyped-def]
    module = make()
    length = 40
    whole = module(length)
    steps = [module(1, t + 1, offset=t) for t in range(length)]
    for t, step in enumerate(steps):
        assert step.shape == (4, 1, t + 1)
        assert torch.equal(step, whole[:, t : t + 1, : t + 1])
    chunks = [module(8, s + 8, offset=s) for s in range(0, length, 8)]
    for s, chunk in zip(range(0, length, 8), chunks, strict=True):
        assert torch.equal(chunk, whole[:, s : s + 8, : s + 8])


@pytest.mark.parametrize("make", BIAS_MODULES)
def test_per_sequence_offsets_give_each_sequence_its_row(make) -> None:  # type: ignore[no-untyped-def]
    module = make()
    whole = module(30)
    offset = torch.tensor([0, 12, 29])
    step = module(1, 30, offset=offset)
    assert step.shape == (3, 4, 1, 30)
    for b, t in enumerate(offset.tolist()):
        assert torch.equal(step[b, :, 0], whole[:, t])


@pytest.mark.parametrize("make", BIAS_MODULES)
def test_left_padded_batch_gets_the_bias_of_the_unpadded_sequences(make) -> None:  # type: ignore[no-untyped-def]
    module = make()
    lengths = [6, 3, 1]
    width = max(lengths)
    mask = torch.zeros(len(lengths), width, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, width - n :] = True  # left padding
    p = positions_from_mask(mask)
    bias = module(width, positions=p, key_positions=p)
    assert bias.shape == (3, 4, width, width)
    for b, n in enumerate(lengths):
        assert torch.equal(bias[b, :, width - n :, width - n :], module(n))


@pytest.mark.parametrize("make", BIAS_MODULES)
def test_left_padded_attention_equals_unpadded_attention(make) -> None:  # type: ignore[no-untyped-def]
    module = make()
    lengths, width, d_k = [5, 2], 5, 8
    mask = torch.zeros(2, width, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, width - n :] = True
    q, k, v = (torch.randn(2, 4, width, d_k, dtype=torch.float64) for _ in range(3))
    p = positions_from_mask(mask)
    bias = module(width, positions=p, key_positions=p, dtype=torch.float64)
    allowed = mask[:, None, None, :] & subsequent_mask(width)
    out, _ = attention(q, k, v, mask=allowed, bias=bias)
    for b, n in enumerate(lengths):
        real = slice(width - n, width)
        alone, _ = attention(
            q[b, :, real],
            k[b, :, real],
            v[b, :, real],
            mask=subsequent_mask(n),
            bias=module(n, dtype=torch.float64),
        )
        torch.testing.assert_close(out[b, :, real], alone, rtol=0, atol=1e-12)


@pytest.mark.parametrize("make", BIAS_MODULES)
@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_every_integer_dtype_of_positions(make, dtype: torch.dtype) -> None:  # type: ignore[no-untyped-def]
    module = make()
    q, k = torch.tensor([[3, 4], [0, 9]]), torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    expected = module(2, positions=q, key_positions=k)
    got = module(2, positions=q.to(dtype), key_positions=k.to(dtype))
    assert torch.equal(got, expected)
    assert torch.equal(module(2, 10, offset=torch.tensor([3, 0], dtype=dtype))[1], module(2, 10))


@pytest.mark.parametrize("make", BIAS_MODULES)
def test_shapes_of_shared_and_per_sequence_positions(make) -> None:  # type: ignore[no-untyped-def]
    module = make()
    assert module(3).shape == (4, 3, 3)
    assert module(3, 7).shape == (4, 3, 7)
    assert module(3, 7, batch=5).shape == (4, 3, 7)  # shared positions broadcast
    assert module(3, key_positions=torch.arange(6)).shape == (4, 3, 6)
    assert module(3, key_positions=torch.zeros(2, 6, dtype=torch.long)).shape == (2, 4, 3, 6)
    assert module(3, positions=torch.zeros(1, 3, dtype=torch.long)).shape == (1, 4, 3, 3)
    assert module(0, 4).shape == (4, 0, 4)
    assert module(3, 0).shape == (4, 3, 0)


@pytest.mark.parametrize("make", BIAS_MODULES)
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"query_length": 2.0}, TypeError, "query_length must be an int"),
        ({"query_length": -1}, ValueError, "query_length must be an int >= 0, got -1"),
        ({"key_length": "3"}, TypeError, "key_length must be an int"),
        ({"offset": 1.5}, TypeError, "offset must be an int or an integer tensor"),
        ({"positions": torch.zeros(3)}, TypeError, "positions must be .* got dtype torch.float32"),
        ({"key_positions": torch.zeros(3)}, TypeError, "key_positions must be .*float32"),
        ({"key_positions": torch.zeros(3, dtype=torch.bool)}, TypeError, "key_positions"),
        ({"key_length": 4, "key_positions": torch.arange(3)}, ValueError, "L_k=4, got shape"),
        (
            {"positions": torch.zeros(2, 3, dtype=torch.long), "batch": 3},
            ValueError,
            "positions of shape .* 2 sequences.*B=3",
        ),
        (
            {"positions": torch.zeros(2, 3, dtype=torch.long), "key_positions": torch.zeros(3, 4)},
            TypeError,
            "key_positions",
        ),
        (
            {
                "positions": torch.zeros(2, 3, dtype=torch.long),
                "key_positions": torch.zeros(3, 4, dtype=torch.long),
            },
            ValueError,
            r"disagree on the batch size \(positions 2, key_positions 3 sequences\)",
        ),
        (
            {"offset": 2, "positions": torch.arange(3)},
            ValueError,
            "either offset or positions",
        ),
        ({"dtype": torch.int64}, TypeError, "dtype must be a floating torch.dtype"),
        ({"batch": 0}, ValueError, "batch must be a positive int"),
        (
            {"key_positions": torch.zeros(3, 4, dtype=torch.long), "batch": 2},
            ValueError,
            r"key_positions of shape \(3, 4\) gives 3 sequences, but the batch has B=2",
        ),
    ],
)
def test_forward_errors_name_the_argument(make, kwargs, error, match) -> None:  # type: ignore[no-untyped-def]
    module = make()
    args = {"query_length": 3, **kwargs}
    with pytest.raises(error, match=match):
        module(**args)


# --- causal=True: the bias and the causal mask in one tensor, for SDPA ------------------------


def _masked_after(bias: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """``bias`` with -inf where the key's position is after the query's (test's own rule)."""
    after = k_pos.unsqueeze(-2) > q_pos.unsqueeze(-1)  # (Lq, Lk) or (B, Lq, Lk)
    return bias.masked_fill(after.unsqueeze(-3), -math.inf)


@pytest.mark.parametrize("make", BIAS_MODULES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_causal_is_the_bias_with_minus_inf_after_the_query(make, dtype: torch.dtype) -> None:  # type: ignore[no-untyped-def]
    module = make()
    with torch.no_grad():
        whole = module(9, dtype=dtype)
        assert torch.equal(
            module(9, dtype=dtype, causal=True),
            _masked_after(whole, torch.arange(9), torch.arange(9)),
        )
        # a cache: 3 new queries at 6, 7, 8 over 9 keys
        step = module(3, 9, offset=6, dtype=dtype, causal=True)
        assert torch.equal(step, _masked_after(whole, torch.arange(9), torch.arange(9))[:, 6:])
        # per-sequence positions (padding): the rule reads slots, never positions (a
        # packed row's positions restart, and a rule by position let later slots in)
        p = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])
        got = module(5, positions=p, key_positions=p, dtype=dtype, causal=True)
        slots = torch.arange(5)
        want = _masked_after(module(5, positions=p, key_positions=p, dtype=dtype), slots, slots)
        assert torch.equal(got, want)
        assert got.dtype == dtype


@pytest.mark.parametrize("make", BIAS_MODULES)
def test_causal_bias_in_sdpa_equals_attention_with_subsequent_mask(make) -> None:  # type: ignore[no-untyped-def]
    module = make()
    q, k, v = torch.randn(3, 2, 4, 6, 8, dtype=torch.float64).unbind()
    with torch.no_grad():
        mask = module(6, dtype=torch.float64, causal=True)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        want, _ = attention(q, k, v, mask=subsequent_mask(6), bias=module(6, dtype=torch.float64))
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("make", BIAS_MODULES)
def test_causal_left_padded_sdpa_equals_unpadded_attention(make) -> None:  # type: ignore[no-untyped-def]
    module = make()
    lengths, width = [5, 2], 5
    real = torch.zeros(2, width, dtype=torch.bool)
    for b, n in enumerate(lengths):
        real[b, width - n :] = True
    q, k, v = (torch.randn(2, 4, width, 8, dtype=torch.float64) for _ in range(3))
    p = positions_from_mask(real)
    with torch.no_grad():
        mask = module(width, positions=p, key_positions=p, dtype=torch.float64, causal=True)
        mask = mask.masked_fill(~real[:, None, None, :], -math.inf)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        for b, n in enumerate(lengths):
            keep = slice(width - n, width)
            alone, _ = attention(
                q[b, :, keep], k[b, :, keep], v[b, :, keep], mask=subsequent_mask(n),
                bias=module(n, dtype=torch.float64),
            )  # fmt: skip
            torch.testing.assert_close(out[b, :, keep], alone, rtol=0, atol=1e-12)


@pytest.mark.parametrize("hooked", [False, True], ids=["plain", "hooked-table"])
def test_t5_causal_under_autograd_gives_the_gradient_of_the_masked_bias(hooked: bool) -> None:
    # With a plain table or a hook on it, the mask comes after the lookup, out of place
    # under autograd. Values and gradients are the masked bias's.
    t5 = RelativePositionBias(3, bidirectional=True, num_buckets=8, max_distance=20)
    if hooked:
        t5.relative_attention_bias.register_forward_hook(lambda module, args, out: None)
    scores = torch.randn(3, 8, 8, dtype=torch.float64)
    weight = t5.relative_attention_bias.weight
    got = (scores + t5(8, causal=True, dtype=torch.float64)).softmax(-1)
    (g,) = torch.autograd.grad(got.square().sum(), weight)
    plain = t5(8, dtype=torch.float64)
    want = (scores + _masked_after(plain, torch.arange(8), torch.arange(8))).softmax(-1)
    (w,) = torch.autograd.grad(want.square().sum(), weight)
    assert torch.equal(got, want)
    torch.testing.assert_close(g, w, rtol=0, atol=1e-14)
    assert torch.isfinite(g).all()
    # buckets 4..7 hold the keys after the query, all masked: no gradient reaches them
    assert torch.equal(g[4:], torch.zeros_like(g[4:]))
    assert (g[:4] != 0).all()


@pytest.mark.parametrize("make", BIAS_MODULES)
def test_causal_must_be_a_bool(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TypeError, match="causal must be a bool"):
        make()(3, causal=1)


# --- relative_position_bucket ---------------------------------------------------------------

CONFIGS = [(True, 32, 128), (False, 32, 128), (True, 8, 20), (False, 6, 7), (True, 64, 1000)]


@pytest.mark.parametrize(("bidirectional", "num_buckets", "max_distance"), CONFIGS)
def test_buckets_equal_mesh_tensorflow_formula(
    bidirectional: bool, num_buckets: int, max_distance: int
) -> None:
    r = torch.arange(-3 * max_distance, 3 * max_distance + 1)
    got = relative_position_bucket(
        r, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    expected = [
        t5_bucket_reference(x, bidirectional, num_buckets, max_distance) for x in r.tolist()
    ]
    assert got.dtype == torch.int64
    assert got.tolist() == expected


def test_buckets_exact_where_a_float32_logarithm_is_not() -> None:
    # num_buckets=17, max_distance=27 (unidirectional): 18 / 8 = (3/2)**2 and 27 / 8 = (3/2)**3,
    # so distance 18 sits exactly on the boundary of bucket 8 + 6 = 14.
    r = torch.tensor([-17, -18])
    got = relative_position_bucket(r, bidirectional=False, num_buckets=17, max_distance=27)
    assert got.tolist() == [t5_bucket_reference(x, False, 17, 27) for x in (-17, -18)]
    assert got.tolist() == [13, 14]


def test_default_buckets_of_the_t5_paper() -> None:
    r = torch.arange(-200, 201)
    buckets = relative_position_bucket(r)
    assert buckets.min() == 0
    assert buckets.max() == 31
    assert torch.equal(buckets[200 - 7 : 201], torch.arange(7, -1, -1))  # exact, keys before
    assert torch.equal(buckets[201:208], 16 + torch.arange(1, 8))  # exact, keys after
    assert bool((buckets[: 200 - 127] == 15).all())  # past max_distance: the last bucket
    assert bool((buckets[200 + 128 :] == 31).all())


@given(
    a=st.integers(0, 10_000),
    b=st.integers(0, 10_000),
    sign=st.sampled_from([-1, 1]),
    config=st.sampled_from(CONFIGS),
)
@PROPERTY
def test_bucket_is_monotone_in_distance(a: int, b: int, sign: int, config) -> None:  # type: ignore[no-untyped-def]
    bidirectional, num_buckets, max_distance = config
    near, far = sorted((a, b))
    got = relative_position_bucket(
        torch.tensor([sign * near, sign * far]),
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    ).tolist()
    assert got[0] <= got[1] or (sign == 1 and not bidirectional)
    if not bidirectional and sign == 1:
        assert got == [0, 0]  # a decoder's keys after the query all share bucket 0
    assert min(got) >= 0
    assert max(got) < num_buckets


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_bucket_of_every_integer_dtype(dtype: torch.dtype) -> None:
    r = torch.tensor([0, 1, 5, 9, 100, 127])
    signed = torch.tensor([0, -1, -5, -9, -100, -127])
    expected = relative_position_bucket(r)
    assert torch.equal(relative_position_bucket(r.to(dtype)), expected)
    if torch.iinfo(dtype).min < 0:  # negative distances: the signed dtypes
        got = relative_position_bucket(signed.to(dtype), bidirectional=False)
        assert torch.equal(got, relative_position_bucket(signed, bidirectional=False))


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((torch.zeros(3),), {}, TypeError, "relative_position must be an integer tensor"),
        (([1, 2],), {}, TypeError, "relative_position must be a Tensor"),
        ((torch.arange(3),), {"bidirectional": 1}, TypeError, "bidirectional must be a bool"),
        ((torch.arange(3),), {"num_buckets": 3}, ValueError, "num_buckets must be >= 4"),
        (
            (torch.arange(3),),
            {"num_buckets": 1, "bidirectional": False},
            ValueError,
            "num_buckets must be >= 2",
        ),
        ((torch.arange(3),), {"num_buckets": 32.0}, TypeError, "num_buckets must be an int"),
        ((torch.arange(3),), {"max_distance": 8}, ValueError, "max_distance must be > 8"),
        ((torch.arange(3),), {"max_distance": 0}, ValueError, "max_distance must be a positive"),
    ],
)
def test_bucket_errors(args, kwargs, error, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        relative_position_bucket(*args, **kwargs)


# --- RelativePositionBias -------------------------------------------------------------------


def test_t5_bias_is_the_table_at_the_buckets() -> None:
    t5 = RelativePositionBias(6, num_buckets=16, max_distance=40)
    w = t5.relative_attention_bias.weight
    q_pos, k_pos = torch.arange(5, 12), torch.arange(60)
    got = t5(7, 60, offset=5)
    for i, qi in enumerate(q_pos.tolist()):
        for j, kj in enumerate(k_pos.tolist()):
            bucket = t5_bucket_reference(kj - qi, True, 16, 40)
            assert torch.equal(got[:, i, j], w[bucket])


def test_t5_state_dict_key_is_hugging_face_t5s() -> None:
    t5 = RelativePositionBias(4)
    assert list(t5.state_dict()) == ["relative_attention_bias.weight"]
    weight = torch.randn(32, 4)
    t5.load_state_dict({"relative_attention_bias.weight": weight})
    assert torch.equal(t5(1, 1)[:, 0, 0], weight[0])


def test_t5_dtype_and_device_follow_the_table() -> None:
    t5 = RelativePositionBias(4)
    assert t5(3).dtype == torch.float32
    t5.to(torch.bfloat16)  # a learned table: casting converts it, as any weight
    assert t5.relative_attention_bias.weight.dtype == torch.bfloat16
    assert t5(3).dtype == torch.bfloat16
    assert t5(3, dtype=torch.float32).dtype == torch.float32


def test_t5_gradient_reaches_the_buckets_used() -> None:
    t5 = RelativePositionBias(2, bidirectional=False, num_buckets=8, max_distance=20)
    t5(3).sum().backward()
    grad = t5.relative_attention_bias.weight.grad
    assert grad is not None
    used = relative_position_bucket(
        torch.arange(3)[None] - torch.arange(3)[:, None],
        bidirectional=False,
        num_buckets=8,
        max_distance=20,
    ).unique()
    assert torch.equal(grad.abs().sum(1).nonzero().flatten(), used)


def test_t5_forward_hook_on_the_table_sees_the_lookup() -> None:
    t5 = RelativePositionBias(3)
    seen: list[torch.Tensor] = []
    t5.relative_attention_bias.register_forward_hook(lambda m, i, o: seen.append(o))
    out = t5(4, 5)
    assert len(seen) == 1
    assert torch.equal(seen[0].permute(2, 0, 1), out)


def test_t5_constructor_errors() -> None:
    with pytest.raises(TypeError, match="n_heads must be an int"):
        RelativePositionBias(2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_distance must be > 8"):
        RelativePositionBias(2, max_distance=8)
    with pytest.raises(TypeError, match="symmetric must be a bool"):
        ALiBi(2, symmetric="no")  # type: ignore[arg-type]


def test_extra_repr() -> None:
    assert repr(ALiBi(8)) == "ALiBi(n_heads=8)"
    assert repr(ALiBi(8, symmetric=True)) == "ALiBi(n_heads=8, symmetric=True)"
    assert "n_heads=2, bidirectional=False, num_buckets=8, max_distance=20" in repr(
        RelativePositionBias(2, bidirectional=False, num_buckets=8, max_distance=20)
    )


# --- T5: the buckets a training length never reaches ------------------------------------------


@functools.cache
def _bucket(r: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    return t5_bucket_reference(r, bidirectional, num_buckets, max_distance)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("length", [1, 2, 7, 20, 64, 129, 400])
@pytest.mark.parametrize("causal", [False, True])
def test_unreached_buckets_are_those_no_pair_of_the_length_uses(config, length, causal) -> None:  # type: ignore[no-untyped-def]
    bidirectional, num_buckets, max_distance = config
    t5 = RelativePositionBias(
        1, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    # the relative positions j - i of the pairs of positions 0 .. L-1 (causal: j <= i)
    pairs = range(-(length - 1), 1 if causal else length)
    reached = {_bucket(r, bidirectional, num_buckets, max_distance) for r in pairs}
    unreached = sorted(set(range(num_buckets)) - reached)
    assert t5.unreached_buckets(length, causal=causal) == unreached


def test_t5_decoder_at_64_tokens_never_trains_buckets_27_to_31() -> None:
    # The trap of a decoder trained on 64 tokens with T5's default max_distance=128.
    t5 = RelativePositionBias(2, bidirectional=False)
    assert t5.unreached_buckets(64, causal=True) == [27, 28, 29, 30, 31]
    scores = torch.randn(2, 64, 64)
    (scores + t5(64, causal=True)).log_softmax(-1).sum().backward()
    grad = t5.relative_attention_bias.weight.grad
    assert grad is not None
    untouched = (grad == 0).all(-1).nonzero().flatten().tolist()
    assert untouched == [27, 28, 29, 30, 31]
    assert (
        RelativePositionBias(2, bidirectional=False, max_distance=64).unreached_buckets(
            64, causal=True
        )
        == []
    )


def test_unreached_buckets_errors() -> None:
    t5 = RelativePositionBias(2)
    with pytest.raises(TypeError, match="length must be an int"):
        t5.unreached_buckets(64.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="length must be a positive int"):
        t5.unreached_buckets(0)
    with pytest.raises(TypeError, match="causal must be a bool"):
        t5.unreached_buckets(4, causal=None)  # type: ignore[arg-type]


# --- KERPLE ---------------------------------------------------------------------------------


def kerple_reference(
    r1: list[float], r2: list[float], q_pos: list[int], k_pos: list[int]
) -> np.ndarray:
    """(H, Lq, Lk) float64: -max(r1, 1e-2) log(1 + max(r2, 1e-2) |i - j|), Python's log1p."""
    return np.array(
        [
            [[-max(a, 1e-2) * math.log1p(max(b, 1e-2) * abs(i - j)) for j in k_pos] for i in q_pos]
            for a, b in zip(r1, r2, strict=True)
        ]
    )


def _kerple(r1: list[float], r2: list[float], dtype: torch.dtype = torch.float64) -> KERPLE:
    module = KERPLE(len(r1)).to(dtype)
    with torch.no_grad():
        module.r1.copy_(torch.tensor(r1, dtype=torch.float64))
        module.r2.copy_(torch.tensor(r2, dtype=torch.float64))
    return module


R1, R2 = [0.5, 1.7, 3e-3, 1.0], [0.9, 0.01, 0.2, 1e-5]  # two below the clamp


@pytest.mark.parametrize(("lq", "lk", "offset"), [(5, None, 0), (3, 9, 6), (1, 40, 39), (7, 4, 2)])
def test_kerple_equals_the_paper_formula_in_float64(lq: int, lk: int | None, offset: int) -> None:
    module = _kerple(R1, R2)
    keys = lk if lk is not None else lq
    q_pos = list(range(offset, offset + lq))
    want = kerple_reference(R1, R2, q_pos, list(range(keys)))
    with torch.no_grad():
        got = module(lq, lk, offset=offset)
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), want, rtol=5e-16, atol=0)  # 2 ulps: log1p, products


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_kerple_is_the_float64_bias_rounded_once(dtype: torch.dtype) -> None:
    module = _kerple(R1, R2)
    with torch.no_grad():
        exact = module(300, dtype=torch.float64)
        assert torch.equal(module(300, dtype=dtype), round_once(exact, dtype))


def test_kerple_gradient_is_the_formulas_at_the_clamped_values() -> None:
    # d/dr1 = -log(1 + r2 n), d/dr2 = -r1 n / (1 + r2 n), at r = max(r, 1e-2): the
    # authors' clamp in place, then the gradient; here the stored values stay.
    module = _kerple(R1, R2)
    weights = torch.randn(4, 6, 6, dtype=torch.float64)
    (module(6) * weights).sum().backward()
    n = (torch.arange(6)[None, :] - torch.arange(6)[:, None]).abs().to(torch.float64)
    r1 = torch.tensor(R1, dtype=torch.float64).clamp(min=1e-2)[:, None, None]
    r2 = torch.tensor(R2, dtype=torch.float64).clamp(min=1e-2)[:, None, None]
    want1 = (-torch.log1p(r2 * n) * weights).sum((-1, -2))
    want2 = (-r1 * n / (1 + r2 * n) * weights).sum((-1, -2))
    assert module.r1.grad is not None
    assert module.r2.grad is not None
    torch.testing.assert_close(module.r1.grad, want1, rtol=1e-13, atol=0)
    torch.testing.assert_close(module.r2.grad, want2, rtol=1e-13, atol=0)
    assert module.r1.tolist() == R1  # forward changed nothing
    assert module.r2.tolist() == R2


def test_kerple_causal_under_autograd_has_finite_gradients() -> None:
    module = _kerple(R1, R2)
    scores = torch.randn(4, 9, 9, dtype=torch.float64)
    causal = (scores + module(9, causal=True)).softmax(-1)
    (g1, g2) = torch.autograd.grad(causal.square().sum(), (module.r1, module.r2))
    plain = module(9)
    masked = plain.masked_fill(~subsequent_mask(9), -math.inf)
    want = (scores + masked).softmax(-1)
    (w1, w2) = torch.autograd.grad(want.square().sum(), (module.r1, module.r2))
    assert torch.equal(causal, want)
    assert torch.isfinite(g1).all()
    assert torch.isfinite(g2).all()
    torch.testing.assert_close((g1, g2), (w1, w2), rtol=1e-13, atol=1e-15)


def test_kerple_parameters_dtype_device_and_state_dict() -> None:
    module = KERPLE(3)
    assert list(module.state_dict()) == ["r1", "r2"]
    assert module.r1.shape == module.r2.shape == (3,)
    assert ((module.r1 >= 0) & (module.r1 <= 2)).all()  # U(0, 2), the authors' init
    assert ((module.r2 >= 0) & (module.r2 <= 1)).all()  # U(0, 1)
    assert module(4).dtype == torch.float32
    assert module.double()(4).dtype == torch.float64
    assert module(4, dtype=torch.bfloat16).dtype == torch.bfloat16
    assert repr(KERPLE(8)) == "KERPLE(n_heads=8)"
    with pytest.raises(TypeError, match="n_heads must be an int"):
        KERPLE(2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_heads must be a positive int"):
        KERPLE(0)


PEAK = """
import resource, torch
from posenc import KERPLE
torch.set_grad_enabled(False)
kerple = KERPLE(4)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = kerple(2000, causal=True)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) * 1024 / (out.numel() * out.element_size()))
"""


def test_kerple_fills_by_blocks_below_twice_its_size() -> None:
    # In a fresh process: the growth of the peak resident memory over one call, in units
    # of the result; computed at once, the float64 temporaries would take 6 times it.
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", PEAK],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert float(run.stdout.strip()) < 2.0


# --- attention(..., bias=) ------------------------------------------------------------------


def test_attention_adds_the_bias_before_the_mask_and_softmax() -> None:
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64) for _ in range(3))
    bias = torch.randn(3, 5, 5, dtype=torch.float64)
    mask = subsequent_mask(5)
    out, weights = attention(q, k, v, mask=mask, bias=bias)
    scores = q.numpy() @ np.swapaxes(k.numpy(), -1, -2) / 2.0 + bias.numpy()
    scores = np.where(mask.numpy(), scores, -np.inf)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    expected_w = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(weights.numpy(), expected_w, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out.numpy(), expected_w @ v.numpy(), rtol=1e-12, atol=1e-13)


def test_attention_with_a_float32_bias_keeps_the_query_dtype() -> None:
    q, k, v = (torch.randn(1, 2, 6, 8).to(torch.bfloat16) for _ in range(3))
    bias = ALiBi(2)(6)
    out, weights = attention(q, k, v, mask=subsequent_mask(6), bias=bias)
    assert out.dtype == weights.dtype == torch.bfloat16
    ref, _ = attention(q.float(), k.float(), v.float(), mask=subsequent_mask(6), bias=bias)
    torch.testing.assert_close(out.float(), ref, rtol=0, atol=3e-2)


@pytest.mark.parametrize(
    ("bias", "error", "match"),
    [
        (torch.zeros(3, 5, 4), ValueError, r"bias of shape \(3, 5, 4\) does not broadcast"),
        (torch.zeros(5, 5, dtype=torch.long), TypeError, "bias must be a floating tensor"),
        ([0.0], TypeError, "bias must be a Tensor or None"),
        (torch.zeros(5, 5, device="meta"), ValueError, "bias must be on the device of the query"),
    ],
)
def test_attention_bias_errors(bias: object, error: type[Exception], match: str) -> None:
    q = k = v = torch.randn(2, 3, 5, 4)
    with pytest.raises(error, match=match):
        attention(q, k, v, bias=bias)  # type: ignore[arg-type]


def test_multi_headed_attention_passes_the_bias_to_every_head() -> None:
    torch.manual_seed(0)
    mha = MultiHeadedAttention(h=4, d_model=16, dropout=0.0).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    bias = ALiBi(4)(6, dtype=torch.float64)
    got = mha(x, x, x, mask=subsequent_mask(6), bias=bias)
    lin = mha.linears
    q, k, v = (lin[i](x).view(2, 6, 4, 4).transpose(1, 2) for i in range(3))  # (B, h, L, d_k)
    heads, _ = attention(q, k, v, mask=subsequent_mask(6), bias=bias)
    expected = lin[3](heads.transpose(1, 2).reshape(2, 6, 16))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    assert mha.attn is not None
    plain = mha(x, x, x, mask=subsequent_mask(6))
    assert not torch.allclose(got, plain)


def test_multi_headed_attention_bias_shapes() -> None:
    mha = MultiHeadedAttention(h=2, d_model=8, dropout=0.0)
    x = torch.randn(3, 5, 8)
    assert mha(x, x, x, bias=ALiBi(2)(5)).shape == (3, 5, 8)
    p = torch.arange(5).expand(3, 5)
    assert mha(x, x, x, bias=ALiBi(2)(5, positions=p, key_positions=p)).shape == (3, 5, 8)
    assert mha(x[0], x[0], x[0], bias=ALiBi(2)(5)).shape == (5, 8)  # unbatched
    with pytest.raises(ValueError, match=r"bias of shape \(3, 5, 5\) does not broadcast"):
        mha(x, x, x, bias=ALiBi(3)(5))


# Consecutive queries over consecutive keys look each distance up once and copy windows
# of it (RelativeBias._fill, by distance); with autograd on the table, every pair is
# looked up. The two must agree, entry for entry, with and without the mask.
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("lengths", "offset"),
    [((1, 1), 0), ((7, 7), 0), ((3, 40), 37), ((40, 3), -20), ((1, 300), 299)],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_t5_bias_by_distance_equals_the_lookup_of_every_pair(
    bidirectional: bool, causal: bool, lengths: tuple[int, int], offset: int, dtype: torch.dtype
) -> None:
    torch.manual_seed(0)
    bias = RelativePositionBias(3, bidirectional=bidirectional, num_buckets=16, max_distance=20)
    args = dict(offset=offset, causal=causal, dtype=dtype)
    every_pair = bias(*lengths, **args)  # the table requires grad: a lookup per pair
    assert every_pair.requires_grad
    with torch.no_grad():
        by_distance = bias(*lengths, **args)
        queries = (torch.arange(lengths[0]) + offset)[None]  # (1, Lq): per sequence
        keys = torch.arange(lengths[1])
        gathered = bias(
            *lengths, positions=queries, key_positions=keys, causal=causal, dtype=dtype
        )[0]
    assert by_distance.shape == (3, *lengths)
    assert torch.equal(by_distance, every_pair.detach())
    assert torch.equal(by_distance, gathered)


# --- packed documents: no query sees a later slot or another document -----------------------

FLEX_EAGER = "ignore:flex_attention called without torch.compile:UserWarning"


def _lengths(seed: int) -> list[int]:
    """A random packing: 1 to 6 documents of 0 to 9 tokens, 1 token at least in all."""
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 7, (), generator=g))
    lengths = torch.randint(0, 10, (n,), generator=g).tolist()
    return lengths if sum(lengths) else [*lengths, 1]


def _per_document(module, lengths: list[int], dtype: torch.dtype, causal: bool) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """The reference: each document's bias computed alone, -inf between documents."""
    total = sum(lengths)
    want = torch.full((module.n_heads, total, total), -math.inf, dtype=dtype)
    start = 0
    for n in lengths:
        want[:, start : start + n, start : start + n] = module(n, dtype=dtype, causal=causal)
        start += n
    return want


@pytest.mark.parametrize("make", BIAS_MODULES)
@pytest.mark.parametrize("seed", range(5))
def test_packed_documents_see_only_their_own_document(make, seed: int) -> None:  # type: ignore[no-untyped-def]
    module = make()
    lengths = _lengths(seed)
    docs, pos = document_ids(lengths), positions_from_lengths(lengths)
    total = len(docs)
    with torch.no_grad():
        for causal in (True, False):
            want = _per_document(module, lengths, torch.float64, causal)
            for positions in (None, pos):  # slots or restarting positions: the same bias
                got = module(
                    total, documents=docs, positions=positions, causal=causal,
                    dtype=torch.float64,
                )  # fmt: skip
                assert torch.equal(got, want)
        # a batch of packed rows, each with its own documents
        other = [total]
        batch = torch.stack([docs, document_ids(other)])
        got = module(total, documents=batch, causal=True, dtype=torch.float64)
        assert got.shape == (2, 4, total, total)
        assert torch.equal(got[0], _per_document(module, lengths, torch.float64, True))
        assert torch.equal(got[1], _per_document(module, other, torch.float64, True))


def test_the_leak_of_restarting_positions_is_closed() -> None:
    # Before: causal=True masked by position, so the documents after the first (which
    # restart at 0) saw later slots of the earlier ones: [0, 1, 100, 101, 160, 161].
    p = positions_from_lengths([100, 60, 96])
    m = ALiBi(8)(256, positions=p, key_positions=p, causal=True)
    assert torch.isfinite(m[0, 101]).nonzero().flatten().tolist() == list(range(102))
    later = torch.ones(256, 256, dtype=torch.bool).triu(1)
    assert not torch.isfinite(m[:, later]).any()
    d = document_ids([100, 60, 96])
    m = ALiBi(8)(256, positions=p, documents=d, causal=True)
    assert torch.isfinite(m[0, 101]).nonzero().flatten().tolist() == [100, 101]


@pytest.mark.parametrize("make", BIAS_MODULES)
def test_documents_with_a_cache_are_those_of_the_keys(make) -> None:  # type: ignore[no-untyped-def]
    module = make()
    docs = document_ids([4, 3])
    with torch.no_grad():
        whole = module(7, documents=docs, causal=True)
        assert torch.equal(module(2, 7, offset=5, documents=docs, causal=True), whole[:, 5:])
    with pytest.raises(ValueError, match="leaves queries without a document"):
        module(8, 7, documents=docs)
    with pytest.raises(ValueError, match=r"documents must have shape \(L_k,\) or \(B, L_k\)"):
        module(3, documents=docs)
    with pytest.raises(TypeError, match="documents must be an integer tensor"):
        module(7, documents=docs.float())


@pytest.mark.parametrize("make", BIAS_MODULES)
def test_positions_without_key_positions_are_self_attention(make) -> None:  # type: ignore[no-untyped-def]
    # Before: keys sat at 0 .. L-1 whatever the queries' positions (a left-padded row).
    module = make()
    p = positions_from_mask(torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]))
    with torch.no_grad():
        assert torch.equal(module(4, positions=p), module(4, positions=p, key_positions=p))
    with pytest.raises(ValueError, match="give key_positions"):
        module(2, 4, positions=p[:, :2])


@pytest.mark.filterwarnings(FLEX_EAGER)
@pytest.mark.parametrize("make", BIAS_MODULES)
@pytest.mark.parametrize("seed", range(3))
def test_packed_documents_under_flex_attention_equal_attention_per_document(
    make, seed: int
) -> None:  # type: ignore[no-untyped-def]
    from torch.nn.attention.flex_attention import flex_attention
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    module = make()
    lengths = _lengths(seed + 10)
    docs, pos = document_ids(lengths), positions_from_lengths(lengths)
    total = len(docs)
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(3, 1, 4, total, 8, generator=g).unbind()
    with torch.no_grad():
        for kwargs in ({}, {"positions": pos}):
            score_mod = module.score_mod(documents=docs, causal=True, **kwargs)
            out = flex_attention(q, k, v, score_mod=score_mod)
            dense = sdpa(q, k, v, attn_mask=module(total, documents=docs, causal=True, **kwargs))
            torch.testing.assert_close(out, dense, rtol=0, atol=1e-5)
            start = 0
            for n in lengths:
                part = slice(start, start + n)
                alone = sdpa(
                    q[..., part, :], k[..., part, :], v[..., part, :],
                    attn_mask=module(n, causal=True),
                )  # fmt: skip
                torch.testing.assert_close(out[..., part, :], alone, rtol=0, atol=1e-5)
                start += n


# --- score_mod: the same score function, in the kernel's dtype -------------------------------


def _on_grid(score_mod, heads: int, lq: int, lk: int) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """score_mod of a zero score at every (head, query, key), by broadcasting its indices."""
    h = torch.arange(heads)[:, None, None]
    i, j = torch.arange(lq)[:, None], torch.arange(lk)[None]
    return score_mod(torch.zeros((), dtype=torch.float32), torch.tensor(0), h, i, j)


@pytest.mark.parametrize("heads", [3, 8, 12])
@pytest.mark.parametrize("symmetric", [False, True])
def test_alibi_score_mod_is_the_float64_bias_rounded_once(heads: int, symmetric: bool) -> None:
    # Bound: one rounding to float32 while |key - query| < 2**24 (distances are exact
    # float32 integers, the slope is rounded once, their product once more: within one
    # float32 ulp of the exact value; for power-of-two slopes the product is exact).
    alibi = ALiBi(heads, symmetric=symmetric)
    for offset in (0, 2**23):
        p = torch.arange(40) + offset
        got = _on_grid(alibi.score_mod(positions=p), heads, 40, 40)
        exact = alibi(40, positions=p, dtype=torch.float64)
        ulp = torch.finfo(torch.float32).eps * exact.abs()
        assert ((got.double() - exact).abs() <= ulp).all()
        if all(math.frexp(m)[0] == 0.5 for m in alibi_slopes(heads).tolist()):
            assert torch.equal(got, round_once(exact, torch.float32))


def test_kerple_score_mod_is_within_its_bound_of_float64() -> None:
    # Bound, float32: |score_mod - exact| <= 2**-21 * (1 + |exact|) (the parameters rounded
    # once, log1p and two products, each within half an ulp).
    torch.manual_seed(0)
    kerple = KERPLE(8)
    with torch.no_grad():
        kerple.r1.uniform_(0, 20)
        kerple.r2.uniform_(0, 5)
        got = _on_grid(kerple.score_mod(offset=1000), 8, 300, 1300)
        exact = kerple(300, 1300, offset=1000, dtype=torch.float64)
    assert ((got.double() - exact).abs() <= 2**-21 * (1 + exact.abs())).all()


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_score_mod_buckets_are_exact(bidirectional: bool) -> None:
    # The buckets come from an integer table of distances: T5's values exactly, at every
    # distance up to and past max_distance, and for a float64 table rounded once.
    t5 = RelativePositionBias(4, bidirectional=bidirectional, num_buckets=16, max_distance=30)
    with torch.no_grad():
        got = _on_grid(t5.score_mod(offset=50), 4, 20, 120)
        assert torch.equal(got, t5(20, 120, offset=50, dtype=torch.float32))
        t5.double()
        got = _on_grid(t5.score_mod(offset=50), 4, 20, 120)
        assert torch.equal(got, t5(20, 120, offset=50, dtype=torch.float32))


def test_score_mod_errors_name_the_argument() -> None:
    alibi = ALiBi(2)
    with pytest.raises(TypeError, match="causal must be a bool"):
        alibi.score_mod(causal=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="documents must be an integer tensor"):
        alibi.score_mod(documents=torch.zeros(3))
    with pytest.raises(TypeError, match=r"dtype must be a floating torch\.dtype"):
        alibi.score_mod(dtype=torch.int64)


COMPILED = [
    pytest.param(lambda: ALiBi(4), id="ALiBi"),
    pytest.param(lambda: RelativePositionBias(4, bidirectional=False), id="T5-decoder"),
    pytest.param(lambda: KERPLE(4), id="KERPLE"),
]


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("make", COMPILED)
def test_compiled_flex_attention_equals_sdpa_with_the_dense_mask(make) -> None:  # type: ignore[no-untyped-def]
    # The fused kernel, compiled on the CPU, with the document block mask skipping blocks.
    from torch.nn.attention.flex_attention import flex_attention
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    torch._dynamo.reset()
    module = make()
    docs = document_ids([100, 60, 96])
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 1, 4, 256, 16, generator=g).unbind()
    with torch.no_grad():
        flex = torch.compile(flex_attention, fullgraph=True)
        mask = document_block_mask(docs, block_size=128)
        out = flex(q, k, v, score_mod=module.score_mod(documents=docs), block_mask=mask)
        dense = sdpa(q, k, v, attn_mask=module(256, documents=docs, causal=True))
    torch.testing.assert_close(out, dense, rtol=0, atol=1e-5)


def _flash_attn_alibi_bias(slopes: torch.Tensor, lq: int, lk: int) -> torch.Tensor:
    """flash-attn's ALiBi convention, as its tests' reference builds it
    (Dao-AILab/flash-attention, tests/test_flash_attn.py, attn_bias_from_alibi_slopes,
    causal branch): ``-slope * |i + L_k - L_q - j|`` for query i and key j."""
    i = torch.arange(lq)[:, None]
    j = torch.arange(lk)[None]
    return -slopes[:, None, None] * (i + lk - lq - j).abs()


@pytest.mark.parametrize("heads", [4, 12])
@pytest.mark.parametrize(("lq", "lk"), [(7, 7), (3, 10)])
def test_flash_attention_alibi_slopes_recipe(heads: int, lq: int, lk: int) -> None:
    # The recipe: flash_attn_func(..., alibi_slopes=alibi.slopes.float(), causal=True)
    # is the attention of alibi(L_q, L_k, offset=L_k - L_q, causal=True).
    alibi = ALiBi(heads)
    slopes = alibi.slopes.float()
    assert slopes.dtype == torch.float32
    assert slopes.shape == (heads,)
    theirs = _flash_attn_alibi_bias(slopes.double(), lq, lk)
    ours = alibi(lq, lk, offset=lk - lq, causal=True, dtype=torch.float64)
    seen = torch.isfinite(ours)
    # flash-attn takes float32 slopes: one rounding of each, 2**-24 relative at most
    torch.testing.assert_close(ours[seen], theirs[seen], rtol=2**-23, atol=0)
    # without causal, flash-attn's bias is symmetric: ALiBi(symmetric=True)
    sym = ALiBi(heads, symmetric=True)(lq, lk, offset=lk - lq, dtype=torch.float64)
    torch.testing.assert_close(sym, theirs, rtol=2**-23, atol=0)


# --- the adversary's classes -----------------------------------------------------------------


def test_a_float64_t5_table_is_rounded_once_to_bfloat16() -> None:
    # 1 + 2**-8 + 2**-30 rounds to 1 + 2**-8 in float32, a bfloat16 midpoint, which then
    # ties to even (1.0): the correctly rounded value is 1 + 2**-7 = 1.0078125.
    t5 = RelativePositionBias(1, num_buckets=4, max_distance=8).double()
    with torch.no_grad():
        t5.relative_attention_bias.weight.fill_(1 + 2**-8 + 2**-30)
        for dtype in (torch.bfloat16,):
            assert t5(3, dtype=dtype).unique().tolist() == [1.0078125]
            assert t5(3, dtype=dtype, positions=torch.tensor([[0, 5, 1]])).unique().tolist() == [
                1.0078125
            ]
        got = _on_grid(t5.score_mod(dtype=torch.bfloat16), 1, 3, 3)
        assert got.unique().tolist() == [1.0078125]
    with torch.no_grad():
        t5.relative_attention_bias.weight.fill_(1 + 2**-11 + 2**-30)  # float16's midpoint
        assert t5(3, dtype=torch.float16).unique().tolist() == [1 + 2**-10]


def test_a_forward_replaced_on_the_table_is_honoured() -> None:
    # accelerate's add_hook_to_module replaces forward on the instance: every read of the
    # table (dense by distance, per pair, score_mod) must go through it.
    t5 = RelativePositionBias(2, num_buckets=8, max_distance=16)
    table = t5.relative_attention_bias
    original = table.forward
    table.forward = lambda ids: original(ids) * 0 + 7.0  # type: ignore[method-assign]
    with torch.no_grad():
        assert t5(5).unique().tolist() == [7.0]
        p = torch.tensor([[3, 1, 4, 1, 5]])
        assert t5(5, positions=p).unique().tolist() == [7.0]
        assert _on_grid(t5.score_mod(), 2, 5, 5).unique().tolist() == [7.0]
    assert t5(5).unique().tolist() == [7.0]  # with autograd too


# --- the steady call is short ----------------------------------------------------------------


def test_a_steady_alibi_call_executes_few_lines_of_posenc() -> None:
    # The whole path of ALiBi(12)(16, causal=True), once warm: at most 70 distinct lines
    # in at most 15 functions of src/posenc (it was 143 lines in 38 functions).
    import os
    import sys

    import posenc

    root = os.path.dirname(posenc.__file__)
    alibi = ALiBi(12)
    want = alibi(16, causal=True)
    lines: set[tuple[str, int]] = set()
    functions: set[object] = set()

    def local(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "line":
            lines.add((frame.f_code.co_filename, frame.f_lineno))
        return local

    def trace(frame, event, arg):  # type: ignore[no-untyped-def]
        if not frame.f_code.co_filename.startswith(root):
            return None
        functions.add(frame.f_code)
        return local

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        got = alibi(16, causal=True)
    finally:
        sys.settrace(previous)
    assert torch.equal(got, want)
    assert len(functions) <= 15, sorted(f.co_name for f in functions)  # type: ignore[attr-defined]
    assert len(lines) <= 70, len(lines)


def _code_lines(cls: type) -> int:
    """Lines of a class's source that are code: no docstring, comment or blank line."""
    import ast
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(cls))
    docs: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(node):
            docs |= set(range(node.body[0].lineno, node.body[0].end_lineno + 1))  # type: ignore[operator]
    return sum(
        1
        for n, line in enumerate(source.splitlines(), 1)
        if n not in docs and line.strip() and not line.strip().startswith("#")
    )


def test_kerple_is_a_score_function_and_its_parameters() -> None:
    # KERPLE supplies its score and its parameters; the base does the rest (it was 44).
    assert _code_lines(KERPLE) <= 25


class _Fire(RelativeBias):
    """A FIRE-like scheme (Li et al., 2023): a function of the distance normalised by the
    query's own position, log(1 + |q - k|) / log(2 + q), which the base serves unchanged."""

    _what = "a FIRE-like bias"

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.weight = torch.nn.Parameter(torch.linspace(-2.0, -0.5, n_heads))

    def parameters_in(self, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
        return (self.weight.to(device, torch.float64).to(dtype),)

    def score(self, h, q, k, *params):  # type: ignore[no-untyped-def]
        (w,) = params
        return w[h] * torch.log1p((q - k).abs().to(w.dtype)) / torch.log(2 + q.to(w.dtype))


@pytest.mark.filterwarnings(FLEX_EAGER)
def test_a_scheme_of_the_query_position_fits_the_base_unchanged() -> None:
    from torch.nn.attention.flex_attention import flex_attention
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    fire = _Fire(3)
    lengths = [4, 6, 2]
    docs, pos = document_ids(lengths), positions_from_lengths(lengths)
    with torch.no_grad():
        # documents restart their positions: the per-document bias needs positions
        got = fire(12, positions=pos, documents=docs, causal=True, dtype=torch.float64)
        start = 0
        for n in lengths:
            part = slice(start, start + n)
            want = fire(n, causal=True, dtype=torch.float64)
            assert torch.equal(got[:, part, part], want)
            start += n
        q, k, v = torch.randn(3, 1, 3, 12, 8).unbind()
        score_mod = fire.score_mod(positions=pos, documents=docs, causal=True)
        out = flex_attention(q, k, v, score_mod=score_mod)
        dense = sdpa(q, k, v, attn_mask=fire(12, positions=pos, documents=docs, causal=True))
    torch.testing.assert_close(out, dense, rtol=0, atol=1e-5)
    assert _code_lines(_Fire) <= 15


@pytest.mark.parametrize("make", BIAS_MODULES)
def test_score_mod_with_a_cache_is_the_dense_bias(make) -> None:  # type: ignore[no-untyped-def]
    # Queries at key slots offset, offset + 1, ...: causality and documents by slot.
    module = make()
    docs = document_ids([4, 5])
    with torch.no_grad():
        for kwargs in ({"causal": True}, {"causal": True, "documents": docs}, {}):
            got = _on_grid(module.score_mod(offset=6, **kwargs), 4, 3, 9)
            want = module(3, 9, offset=6, dtype=torch.float32, **kwargs)
            assert torch.equal(torch.isinf(got), torch.isinf(want))
            seen = torch.isfinite(want)
            torch.testing.assert_close(got[seen], want[seen], rtol=2**-21, atol=2**-21)
        offsets = torch.tensor([2, 6])
        got = module.score_mod(offset=offsets)(
            torch.zeros(()), torch.arange(2)[:, None, None, None],
            torch.arange(4)[:, None, None], torch.arange(3)[:, None], torch.arange(9)[None],
        )  # fmt: skip
        want = module(3, 9, offset=offsets, dtype=torch.float32)
        torch.testing.assert_close(got, want, rtol=2**-21, atol=2**-21)
    with pytest.raises(ValueError, match="per-sequence offset has no slot"):
        module.score_mod(offset=offsets, causal=True)


@pytest.mark.parametrize(
    ("dtype", "offset"),
    [
        (torch.float16, 0),  # float16 overflows at the larger offsets' values
        *(
            (dtype, offset)
            for dtype in (torch.float32, torch.bfloat16)
            for offset in (0, 2**24 - 600, 2**24 + 5)
        ),
    ],
)
def test_a_large_alibi_bias_in_float32_keeps_the_float64_values(
    dtype: torch.dtype, offset: int
) -> None:
    # A bias larger than a block, of power-of-two slopes: float32 arithmetic where every
    # distance is below 2**24 (exact there), float64 past it; the values are the same.
    lq, lk = 300, 600
    alibi = ALiBi(8)
    got = alibi(lq, lk, offset=offset, dtype=dtype, causal=True)
    q = torch.arange(offset, offset + lq, dtype=torch.int64)
    distance = (torch.arange(lk)[None] - q[:, None]).to(torch.float64)
    exact = alibi_slopes(8)[:, None, None] * distance
    later = torch.arange(lk)[None] - torch.arange(lq)[:, None] > lk - lq
    assert torch.equal(got, round_once(exact, dtype).masked_fill(later, -math.inf))


@pytest.mark.parametrize("make", BIAS_MODULES)
@pytest.mark.parametrize("kind", [np.int64, np.int32, np.uint8, np.intp])
def test_score_mod_takes_numpy_integers_as_its_offset(make, kind: type) -> None:  # type: ignore[no-untyped-def]
    module = make()
    with torch.no_grad():
        got = _on_grid(module.score_mod(offset=kind(7), causal=True), 2, 3, 10)
        want = _on_grid(module.score_mod(offset=7, causal=True), 2, 3, 10)
    assert torch.equal(got, want)
    with pytest.raises(TypeError, match="offset must be"):
        module.score_mod(offset=np.float64(7.0))


# --- the decoding row: windows of one score per distance, kept for ALiBi ------------------------


def _trained(make):  # type: ignore[no-untyped-def]
    """A module of BIAS_MODULES with parameters away from their initialisation."""
    module = make()
    torch.manual_seed(3)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.rand_like(p) * 3 - 1)
    return module


@pytest.mark.parametrize("make", BIAS_MODULES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("start", [0, 37, 2**24 - 3, 2**40 + 1])
def test_the_decoding_row_is_the_last_row_of_the_dense_bias(make, dtype, start) -> None:  # type: ignore[no-untyped-def]
    # Bit for bit: each step's row (served by distance, and for ALiBi from the kept table
    # from the second step on) against the rows of the whole bias, which is computed per
    # pair (a batch of two rows is never taken by distance), with autograd on and off.
    module = _trained(make)
    length = 24
    p = torch.arange(start, start + length)
    docs = document_ids([5, 11, 8])
    rows = p.expand(2, length)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            whole = module(length, positions=rows, dtype=dtype, causal=True)[1]
            packed = module(length, positions=rows, documents=docs, dtype=dtype, causal=True)[1]
            for t in (0, 1, 2, 9, 23):
                keys = p[: t + 1]
                step = module(1, t + 1, offset=start + t, dtype=dtype)
                if start == 0:  # the steady call: ints only, keys at 0 .. t
                    assert torch.equal(step, module(1, t + 1, offset=t, dtype=dtype, causal=True))
                    assert torch.equal(step, module(t + 1, dtype=dtype)[:, -1:])
                shifted = module(1, t + 1, positions=keys[-1:], key_positions=keys, dtype=dtype)
                assert torch.equal(shifted, whole[:, t : t + 1, : t + 1])
                with_docs = module(
                    1, t + 1, positions=keys[-1:], key_positions=keys,
                    documents=docs[: t + 1], dtype=dtype, causal=True,
                )  # fmt: skip
                assert torch.equal(with_docs, packed[:, t : t + 1, : t + 1])
            if start == 0:
                last = module(1, length, offset=length - 1, dtype=dtype)
                assert torch.equal(last, whole[:, -1:])


@pytest.mark.parametrize("make", BIAS_MODULES)
def test_a_bias_by_distance_is_the_bias_per_pair(make) -> None:  # type: ignore[no-untyped-def]
    # Consecutive queries over consecutive keys (windows of one score per distance)
    # against the same positions in a batch of two rows (per pair), for every shape.
    module = _trained(make)
    with torch.no_grad():
        for lq, lk, offset in [(1, 1, 0), (7, 7, 0), (3, 40, 37), (40, 3, -20), (5, 9, 2**30)]:
            q = torch.arange(offset, offset + lq)
            for causal in (False, True):
                got = module(lq, lk, offset=offset, causal=causal)
                per_pair = module(
                    lq, lk, positions=q.expand(2, lq), key_positions=torch.arange(lk),
                    causal=causal,
                )  # fmt: skip
                assert torch.equal(got, per_pair[1])


def test_alibi_keeps_one_table_per_dtype_and_device_and_serves_its_windows() -> None:
    alibi = ALiBi(8)
    assert alibi._per_distance is None
    first = alibi(1, 201, offset=200)
    ((lo, table),) = alibi._per_distance.values()  # type: ignore[union-attr]
    assert lo <= -200
    assert lo + table.shape[-1] > 0
    second = alibi(1, 201, offset=200)
    assert torch.equal(first, second)
    assert second.data_ptr() != first.data_ptr()
    assert second.untyped_storage().size() == 8 * 201 * 4
    second.add_(1)  # a new tensor: the kept table is untouched
    assert torch.equal(alibi(1, 201, offset=200), first)
    alibi(1, 3, offset=2, dtype=torch.bfloat16)
    assert set(alibi._per_distance) == {  # type: ignore[arg-type]
        (torch.float32, torch.device("cpu")), (torch.bfloat16, torch.device("cpu")),
    }  # fmt: skip
    # a step far past the table: a new one, the same values as a fresh module's
    far = alibi(1, 5000, offset=4999)
    assert torch.equal(far, ALiBi(8)(1, 5000, offset=4999, positions=None))
    assert torch.equal(far, ALiBi(8)(5000)[:, -1:])


def test_no_table_is_kept_or_served_where_something_watches() -> None:
    # Behind _runtime.fast_path: under a transform or a global hook, neither kept nor read.
    alibi = ALiBi(4)
    torch.func.functionalize(lambda: alibi(1, 9, offset=8))()
    torch.func.vmap(lambda x: alibi(1, 9, offset=8) + x)(torch.zeros(2))
    assert alibi._per_distance is None
    want = alibi(1, 9, offset=8)
    ((_, table),) = alibi._per_distance.values()  # type: ignore[union-attr]
    table.fill_(7.0)  # a kept table that is read shows
    assert alibi(1, 9, offset=8).unique().tolist() == [7.0]
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, a, o: None)
    try:
        assert torch.equal(alibi(1, 9, offset=8), want)
        got = torch.func.vmap(lambda x: alibi(1, 9, offset=8) + x)(torch.zeros(2))
        assert torch.equal(got[0], want)
    finally:
        handle.remove()


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda m: m(1.0, 9), TypeError, "query_length must be"),
        (lambda m: m(1, 9.0), TypeError, "key_length must be"),
        (lambda m: m(-1, 9), ValueError, "query_length"),
        (lambda m: m(1, 9, offset=8.0), TypeError, "offset"),
        (lambda m: m(1, 2**62 + 1, offset=2**62), ValueError, "offset"),
        (lambda m: m(1, 1, offset=-(2**62)), ValueError, "offset"),  # its distance is kept
        (lambda m: m(1, 9, offset=8, causal=1), TypeError, "causal must be a bool"),
        (lambda m: m(1, 9, offset=8, dtype=torch.int64), TypeError, "dtype"),
        (lambda m: m(1, 9, offset=8, dtype=[1]), TypeError, "dtype"),
        (lambda m: m(10**6, 10**6, offset=0), ValueError, "more than the"),
    ],
)
def test_a_kept_table_keeps_the_error_contract(call, error, match) -> None:  # type: ignore[no-untyped-def]
    alibi = ALiBi(8)
    alibi(1, 201, offset=200)
    alibi(1, 10**6 + 1, offset=10**6)  # a table wide enough for the calls above
    alibi(1, 1, offset=1 - 2**62)  # and one of the distances next to 2**62
    for module in (alibi, ALiBi(8)):
        with pytest.raises(error, match=match):
            call(module)


def test_no_scheme_overrides_the_fill() -> None:
    # The base chooses the fill from the capabilities a scheme declares.
    for cls in (ALiBi, RelativePositionBias, KERPLE, _Fire):
        assert not {"_fill", "_looked_up", "_distances", "forward"} & set(vars(cls)), cls
    assert RelativePositionBias.looked_up
    assert all(cls.relative_only for cls in (ALiBi, RelativePositionBias, KERPLE))
    assert not _Fire.relative_only
