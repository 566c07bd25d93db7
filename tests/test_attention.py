"""posenc.attention: the Annotated Transformer's blocks, checked against direct computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from posenc import (
    MultiHeadedAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
    attention,
    clones,
    subsequent_mask,
)


def direct_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """softmax(Q Kᵀ / √d) V in float64 NumPy; ``allowed`` False removes a key from the softmax."""
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ v, weights


# --- attention ------------------------------------------------------------------------------


def test_attention_equals_direct_computation() -> None:
    q = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    k = torch.randn(2, 3, 6, 8, dtype=torch.float64)
    v = torch.randn(2, 3, 6, 4, dtype=torch.float64)
    out, weights = attention(q, k, v)
    assert out.shape == (2, 3, 5, 4)
    assert weights.shape == (2, 3, 5, 6)
    expected_out, expected_w = direct_attention(q.numpy(), k.numpy(), v.numpy())
    np.testing.assert_allclose(weights.numpy(), expected_w, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out.numpy(), expected_out, rtol=1e-12, atol=1e-13)


def test_attention_float32_unbatched() -> None:
    q, k, v = torch.randn(4, 16), torch.randn(7, 16), torch.randn(7, 3)
    out, weights = attention(q, k, v)
    expected_out, expected_w = direct_attention(
        q.double().numpy(), k.double().numpy(), v.double().numpy()
    )
    np.testing.assert_allclose(weights.numpy(), expected_w, rtol=0, atol=1e-6)
    np.testing.assert_allclose(out.numpy(), expected_out, rtol=0, atol=1e-5)


def test_mask_removes_keys_from_the_softmax() -> None:
    q = torch.randn(2, 5, 8, dtype=torch.float64)
    k = torch.randn(2, 6, 8, dtype=torch.float64)
    v = torch.randn(2, 6, 3, dtype=torch.float64)
    allowed = torch.rand(2, 5, 6) > 0.4
    allowed[..., 0] = True  # every query may see at least one key
    out, weights = attention(q, k, v, mask=allowed)
    assert torch.equal(weights[~allowed], torch.zeros(int((~allowed).sum()), dtype=torch.float64))
    expected_out, expected_w = direct_attention(q.numpy(), k.numpy(), v.numpy(), allowed.numpy())
    np.testing.assert_allclose(weights.numpy(), expected_w, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out.numpy(), expected_out, rtol=1e-12, atol=1e-13)


def test_integer_mask_means_the_same_as_bool_mask() -> None:
    q, k, v = torch.randn(1, 4, 8), torch.randn(1, 4, 8), torch.randn(1, 4, 8)
    causal = subsequent_mask(4)
    out_bool, w_bool = attention(q, k, v, mask=causal)
    out_int, w_int = attention(q, k, v, mask=causal.to(torch.uint8))
    assert torch.equal(w_bool, w_int)
    assert torch.equal(out_bool, out_int)


def test_mask_broadcasts_over_queries() -> None:
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    padding = torch.tensor([[True, True, True, False, False], [True] * 5]).unsqueeze(1)
    _, weights = attention(q, k, v, mask=padding)
    assert torch.equal(weights[0, :, 3:], torch.zeros(3, 2))
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))


def test_causal_mask_first_query_sees_only_the_first_key() -> None:
    q, k, v = torch.randn(1, 4, 8), torch.randn(1, 4, 8), torch.randn(1, 4, 2)
    out, weights = attention(q, k, v, mask=subsequent_mask(4))
    assert torch.equal(weights[0, 0], torch.tensor([1.0, 0.0, 0.0, 0.0]))
    torch.testing.assert_close(out[0, 0], v[0, 0])
    assert torch.equal(torch.triu(weights[0], diagonal=1), torch.zeros(4, 4))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_masking_does_not_overflow(dtype: torch.dtype) -> None:
    q, k, v = torch.randn(2, 6, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    mask = subsequent_mask(6)
    out, weights = attention(q.to(dtype), k.to(dtype), v.to(dtype), mask=mask)
    assert out.dtype == dtype
    assert weights.dtype == dtype
    assert bool(torch.isfinite(out).all())
    assert bool(torch.isfinite(weights).all())
    assert torch.equal(weights[0].float().triu(1), torch.zeros(6, 6))
    ref_out, _ = attention(q.to(dtype).float(), k.to(dtype).float(), v.to(dtype).float(), mask)
    torch.testing.assert_close(out.float(), ref_out, rtol=0, atol=5e-2)


def test_dropout_module_is_applied_to_the_weights() -> None:
    q, k, v = torch.randn(1, 4, 8), torch.randn(1, 4, 8), torch.randn(1, 4, 8)
    _, plain = attention(q, k, v)
    torch.manual_seed(3)
    _, dropped = attention(q, k, v, dropout=nn.Dropout(0.5))
    kept = dropped != 0
    assert bool((~kept).any())
    torch.testing.assert_close(dropped[kept], plain[kept] * 2)


# --- subsequent_mask ------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 5, 33])
def test_subsequent_mask_values_shape_dtype(size: int) -> None:
    mask = subsequent_mask(size)
    assert mask.shape == (1, size, size)
    assert mask.dtype == torch.bool
    i, j = np.indices((size, size))
    assert np.array_equal(mask[0].numpy(), j <= i)


@pytest.mark.parametrize(("size", "error"), [(0, ValueError), (-2, ValueError), (2.0, TypeError)])
def test_subsequent_mask_errors(size: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=rf"size.*{size!r}"):
        subsequent_mask(size)  # type: ignore[arg-type]


@pytest.mark.parametrize("device", ["meta", torch.device("meta")])
def test_subsequent_mask_is_built_on_the_device_given(device: object) -> None:
    mask = subsequent_mask(3, device=device)  # type: ignore[arg-type]
    assert mask.device == torch.device("meta")
    assert mask.shape == (1, 3, 3)
    assert mask.dtype == torch.bool


def test_subsequent_mask_follows_the_default_device() -> None:
    with torch.device("meta"):
        assert subsequent_mask(2).device == torch.device("meta")
    cpu = subsequent_mask(2, device="cpu")
    assert cpu.device == torch.device("cpu")
    assert torch.equal(cpu, subsequent_mask(2))


@pytest.mark.parametrize(
    ("device", "error", "match"),
    [(0.5, TypeError, r"device.*float 0\.5"), ("gpu7", ValueError, r"device.*'gpu7'")],
)
def test_subsequent_mask_device_errors(device: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        subsequent_mask(2, device=device)  # type: ignore[arg-type]


# --- clones ---------------------------------------------------------------------------------


def test_clones_are_independent_copies() -> None:
    original = nn.Linear(3, 3)
    copies = clones(original, 3)
    assert isinstance(copies, nn.ModuleList)
    assert len(copies) == 3
    for layer in copies:
        assert layer is not original
        assert torch.equal(layer.weight, original.weight)
        assert layer.weight.data_ptr() != original.weight.data_ptr()
    ptrs = {layer.weight.data_ptr() for layer in copies}
    assert len(ptrs) == 3
    with torch.no_grad():
        copies[0].weight.add_(1.0)
    assert not torch.equal(copies[0].weight, copies[1].weight)
    assert torch.equal(copies[1].weight, original.weight)
    assert len(list(copies.parameters())) == 6


@pytest.mark.parametrize(("n", "error"), [(0, ValueError), (-1, ValueError), (2.0, TypeError)])
def test_clones_errors(n: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=rf"\bn\b.*{n!r}"):
        clones(nn.Linear(2, 2), n)  # type: ignore[arg-type]


# --- MultiHeadedAttention -------------------------------------------------------------------


def direct_multi_head(
    mha: MultiHeadedAttention, q: torch.Tensor, kv: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """The multi-head computation written out head by head, in float64."""
    lin = [(m.weight.detach().double(), m.bias.detach().double()) for m in mha.linears]
    qp = q.double() @ lin[0][0].T + lin[0][1]
    kp = kv.double() @ lin[1][0].T + lin[1][1]
    vp = kv.double() @ lin[2][0].T + lin[2][1]
    d_k = mha.d_model // mha.h
    heads = []
    for head in range(mha.h):
        cols = slice(head * d_k, (head + 1) * d_k)
        allowed = None
        if mask is not None:
            allowed = np.broadcast_to(mask.numpy(), (q.shape[0], q.shape[1], kv.shape[1]))
        out, _ = direct_attention(
            qp[..., cols].numpy(), kp[..., cols].numpy(), vp[..., cols].numpy(), allowed
        )
        heads.append(out)
    concat = torch.from_numpy(np.concatenate(heads, axis=-1))
    return concat @ lin[3][0].T + lin[3][1]


def test_multi_headed_attention_shapes_and_weights() -> None:
    mha = MultiHeadedAttention(h=4, d_model=32, dropout=0.0)
    q, kv = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    out = mha(q, kv, kv)
    assert out.shape == (2, 5, 32)
    assert mha.attn is not None
    assert mha.attn.shape == (2, 4, 5, 7)
    torch.testing.assert_close(mha.attn.sum(-1), torch.ones(2, 4, 5))
    assert bool((mha.attn >= 0).all())


def test_multi_headed_attention_equals_head_by_head_computation() -> None:
    mha = MultiHeadedAttention(h=4, d_model=32, dropout=0.3).eval()
    q, kv = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    mask = torch.ones(2, 1, 7, dtype=torch.bool)
    mask[0, :, 5:] = False
    out = mha(q, kv, kv, mask=mask)
    torch.testing.assert_close(
        out.double(), direct_multi_head(mha, q, kv, mask), atol=1e-5, rtol=0
    )
    assert mha.attn is not None
    assert torch.equal(mha.attn[0, :, :, 5:], torch.zeros(4, 5, 2))
    torch.testing.assert_close(mha(q, kv, kv).double(), direct_multi_head(mha, q, kv, None))


def test_multi_headed_attention_causal_mask_shared_by_heads() -> None:
    mha = MultiHeadedAttention(h=2, d_model=8, dropout=0.0)
    x = torch.randn(3, 6, 8)
    mha(x, x, x, mask=subsequent_mask(6))
    assert mha.attn is not None
    assert torch.equal(mha.attn.triu(1), torch.zeros(3, 2, 6, 6))


def test_multi_headed_attention_has_four_linears() -> None:
    mha = MultiHeadedAttention(h=8, d_model=64)
    assert len(mha.linears) == 4
    assert all(isinstance(m, nn.Linear) and m.weight.shape == (64, 64) for m in mha.linears)
    assert mha.d_k == 8
    assert "h=8, d_model=64" in repr(mha)


@pytest.mark.parametrize(("h", "d_model"), [(3, 512), (5, 32), (64, 32)])
def test_h_not_dividing_d_model_is_a_value_error(h: int, d_model: int) -> None:
    with pytest.raises(ValueError, match=rf"h={h}.*d_model={d_model}"):
        MultiHeadedAttention(h=h, d_model=d_model)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"h": 0, "d_model": 8}, ValueError, r"\bh\b.*\b0\b"),
        ({"h": 2, "d_model": 0}, ValueError, r"d_model.*\b0\b"),
        ({"h": 2, "d_model": 8, "dropout": 1.0}, ValueError, r"dropout.*1\.0"),
    ],
)
def test_multi_headed_attention_constructor_errors(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        MultiHeadedAttention(**kwargs)  # type: ignore[arg-type]


def test_multi_headed_attention_wrong_width_is_a_value_error() -> None:
    mha = MultiHeadedAttention(h=2, d_model=8)
    with pytest.raises(ValueError, match=r"key.*d_model=8"):
        mha(torch.randn(1, 3, 8), torch.randn(1, 3, 6), torch.randn(1, 3, 8))


# --- permutation equivariance ---------------------------------------------------------------

PERM = torch.tensor([3, 0, 5, 1, 4, 2])


def test_self_attention_is_permutation_equivariant_without_positions() -> None:
    x = torch.randn(1, 6, 16)
    out, _ = attention(x, x, x)
    xp = x[:, PERM]
    out_perm, _ = attention(xp, xp, xp)
    torch.testing.assert_close(out_perm, out[:, PERM], rtol=0, atol=1e-6)

    mha = MultiHeadedAttention(h=4, d_model=16, dropout=0.0)
    torch.testing.assert_close(mha(xp, xp, xp), mha(x, x, x)[:, PERM], rtol=0, atol=1e-5)


def test_positional_encoding_breaks_permutation_equivariance() -> None:
    x = torch.randn(1, 6, 16)
    pe = PositionalEncoding(16)
    y, y_perm = pe(x), pe(x[:, PERM])
    out, _ = attention(y, y, y)
    out_perm, _ = attention(y_perm, y_perm, y_perm)
    assert float((out_perm - out[:, PERM]).abs().max()) > 1e-2

    mha = MultiHeadedAttention(h=4, d_model=16, dropout=0.0).requires_grad_(False)
    assert float((mha(y_perm, y_perm, y_perm) - mha(y, y, y)[:, PERM]).abs().max()) > 1e-2


# --- PositionwiseFeedForward ----------------------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 3, 16), (5, 16), (16,)])
def test_feed_forward_is_w2_relu_w1_in_eval(shape: tuple[int, ...]) -> None:
    ff = PositionwiseFeedForward(d_model=16, d_ff=64, dropout=0.5).eval()
    x = torch.randn(shape)
    out = ff(x)
    assert out.shape == shape
    hidden = (x.double() @ ff.w_1.weight.double().T + ff.w_1.bias.double()).clamp_min(0)
    expected = hidden @ ff.w_2.weight.double().T + ff.w_2.bias.double()
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=1e-5)
    assert ff.w_1.weight.shape == (64, 16)
    assert ff.w_2.weight.shape == (16, 64)


def test_feed_forward_dropout_is_active_in_train_mode() -> None:
    ff = PositionwiseFeedForward(d_model=16, d_ff=64, dropout=0.5)
    x = torch.randn(4, 16)
    assert not torch.allclose(ff.train()(x), ff.eval()(x))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"d_model": 0, "d_ff": 8}, ValueError, r"d_model.*\b0\b"),
        ({"d_model": 8, "d_ff": 0}, ValueError, r"d_ff.*\b0\b"),
        ({"d_model": 8, "d_ff": 8, "dropout": -0.1}, ValueError, r"dropout.*-0\.1"),
    ],
)
def test_feed_forward_constructor_errors(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        PositionwiseFeedForward(**kwargs)  # type: ignore[arg-type]


def test_unbatched_multi_head_attention_with_causal_mask() -> None:
    mha = MultiHeadedAttention(h=4, d_model=16, dropout=0.0).eval()
    x = torch.randn(5, 16)
    out = mha(x, x, x, mask=subsequent_mask(5))
    assert out.shape == (5, 16)
    assert mha.attn is not None
    assert mha.attn.shape == (4, 5, 5)
    batched = mha(x.unsqueeze(0), x.unsqueeze(0), x.unsqueeze(0), mask=subsequent_mask(5))
    torch.testing.assert_close(out, batched[0])
    assert torch.equal(mha.attn[0].triu(1), torch.zeros(4, 5, 5))


# --- shape errors at the boundary ------------------------------------------------------------

Q = torch.randn(2, 3, 5, 8)
KV = torch.randn(2, 3, 7, 8)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (
            (Q, torch.randn(2, 3, 7, 6), KV),
            ValueError,
            r"last dimension d_k.*\(2, 3, 5, 8\).*\(2, 3, 7, 6\)",
        ),
        (
            (Q, KV, torch.randn(2, 3, 6, 8)),
            ValueError,
            r"same length L_k.*\(2, 3, 7, 8\).*\(2, 3, 6, 8\)",
        ),
        (
            (Q, torch.randn(4, 3, 7, 8), torch.randn(4, 3, 7, 8)),
            ValueError,
            r"batch dimensions.*do not broadcast",
        ),
        (
            (Q, KV, KV, torch.ones(5, 6, dtype=torch.bool)),
            ValueError,
            r"mask of shape \(5, 6\).*\(2, 3, 5, 7\)",
        ),
        (
            (Q, KV, KV, torch.ones(3, 2, 5, 7, dtype=torch.bool)),
            ValueError,
            r"mask of shape \(3, 2, 5, 7\)",
        ),
        (
            (torch.randn(8), KV, KV),
            ValueError,
            r"query must have shape \(\*, L, d\), got shape \(8,\)",
        ),
        ((Q, KV.double(), KV), TypeError, "share a dtype.*float32, torch.float64"),
        ((Q, KV, KV.long()), TypeError, "value must be a floating tensor"),
        ((Q, KV, KV, [[1]]), TypeError, "mask must be a Tensor or None"),
    ],
)
def test_attention_shape_errors_name_the_shapes(
    args: tuple[object, ...], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        attention(*args)  # type: ignore[arg-type]


def test_attention_mask_with_extra_leading_ones_still_broadcasts() -> None:
    # The causal mask of subsequent_mask is (1, L, L), also for unbatched (h, L, d) heads.
    mask = torch.ones(1, 1, 5, 7, dtype=torch.bool)
    out, w = attention(Q[0], KV[0], KV[0], mask=mask)
    plain_out, plain_w = attention(Q[0], KV[0], KV[0])
    assert torch.equal(out, plain_out.unsqueeze(0))
    assert torch.equal(w, plain_w.unsqueeze(0))


@pytest.mark.parametrize(
    ("shapes", "mask", "match"),
    [
        (((2, 3, 8), (3, 4, 8), (3, 4, 8)), None, r"same batch size B"),
        (((2, 3, 8), (2, 4, 8), (2, 5, 8)), None, r"same length L_k.*\(2, 4, 8\).*\(2, 5, 8\)"),
        (((2, 3, 8), (4, 8), (4, 8)), None, r"must all be batched .* or all unbatched"),
        (
            ((2, 3, 8), (2, 4, 8), (2, 4, 8)),
            torch.ones(2, 3, 3),
            r"mask of shape \(2, 3, 3\).*\(2, 3, 4\)",
        ),
    ],
)
def test_multi_headed_attention_shape_errors_name_the_shapes(
    shapes: tuple[tuple[int, ...], ...], mask: torch.Tensor | None, match: str
) -> None:
    mha = MultiHeadedAttention(h=2, d_model=8)
    q, k, v = (torch.randn(*s) for s in shapes)
    with pytest.raises(ValueError, match=match):
        mha(q, k, v, mask=mask)


@pytest.mark.parametrize(
    ("x", "error", "match"),
    [
        (
            torch.randn(2, 3, 6),
            ValueError,
            r"last dimension must be d_model=8, got shape \(2, 3, 6\)",
        ),
        (torch.ones(2, 8, dtype=torch.long), TypeError, "must be a floating tensor"),
        ([1.0] * 8, TypeError, "must be a Tensor"),
    ],
)
def test_feed_forward_input_errors(x: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        PositionwiseFeedForward(d_model=8, d_ff=16)(x)  # type: ignore[arg-type]


@pytest.mark.parametrize("scale", [1.0, 0.3, 2])
def test_scale_replaces_the_default_as_sdpa_does(scale: float) -> None:
    # T5's checkpoints need the unscaled product (scale=1.0); SDPA's scale= is the reference,
    # with a relative bias and a causal mask, in float64 so that only the scale can differ.
    from posenc import RelativePositionBias

    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 4, 6, 8, dtype=torch.float64).unbind()
    bias = RelativePositionBias(4, bidirectional=False).double()
    with torch.no_grad():
        want = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=bias(6, causal=True), scale=scale
        )
        out, weights = attention(q, k, v, mask=subsequent_mask(6), bias=bias(6), scale=scale)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    direct = (q @ k.transpose(-2, -1) * scale + bias(6).detach()).masked_fill(
        ~subsequent_mask(6), -math.inf
    )
    torch.testing.assert_close(weights, direct.softmax(-1), rtol=1e-12, atol=1e-12)


def test_scale_none_is_one_over_root_d_k_bit_for_bit() -> None:
    torch.manual_seed(1)
    q, k, v = torch.randn(3, 2, 5, 16).unbind()
    default, _ = attention(q, k, v)
    again, _ = attention(q, k, v, scale=None)
    assert torch.equal(default, again)
    near, _ = attention(q, k, v, scale=1 / math.sqrt(16))
    torch.testing.assert_close(near, default)
    unscaled, _ = attention(q, k, v, scale=1.0)
    assert not torch.allclose(unscaled, default)


@pytest.mark.parametrize(
    ("scale", "error", "match"),
    [
        ("1.0", TypeError, "scale must be a number"),
        (True, TypeError, "scale must be a number"),
        (math.inf, ValueError, "scale must be a finite number"),
        (math.nan, ValueError, "scale must be a finite number"),
    ],
)
def test_scale_refuses_what_is_not_a_finite_number(
    scale: object, error: type[Exception], match: str
) -> None:
    q = torch.zeros(1, 2, 4)
    with pytest.raises(error, match=match):
        attention(q, q, q, scale=scale)  # type: ignore[arg-type]
