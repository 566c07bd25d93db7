"""posenc.positional: PositionalEncoding's buffer, forward, dtypes, dropout, errors, state."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from reference import (
    LegacyPositionalEncoding,
    annotated_table,
    concatenated_reference,
    legacy_model,
    sinusoid_reference,
    ulp,
)
from torch import nn

from posenc import Embeddings, PositionalEncoding, sinusoidal_table
from posenc.positions import resolve


def reference_rows(length: int, d_model: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.from_numpy(sinusoid_reference(length, d_model)).to(dtype)


# --- the buffer -----------------------------------------------------------------------------


@pytest.mark.parametrize(("d_model", "max_len"), [(512, 5000), (20, 100), (7, 1)])
def test_buffer_shape_and_values(d_model: int, max_len: int) -> None:
    pe = PositionalEncoding(d_model, max_len=max_len)
    assert pe.pe.shape == (1, max_len, d_model)
    assert pe.pe.dtype == torch.float32
    exact = sinusoid_reference(max_len, d_model)
    assert np.abs(pe.pe[0].double().numpy() - exact).max() <= 3e-8


def test_default_max_len_is_5000() -> None:
    assert PositionalEncoding(16).pe.shape == (1, 5000, 16)


def test_buffer_is_not_persistent_and_nothing_is_trained() -> None:
    pe = PositionalEncoding(512)
    assert len(pe.state_dict()) == 0
    assert pe.state_dict() == {}
    assert list(pe.parameters()) == []
    assert "pe" in dict(pe.named_buffers())
    assert not pe.pe.requires_grad


def test_buffer_follows_to() -> None:
    pe = PositionalEncoding(8, max_len=10).to(torch.float64)
    assert pe.pe.dtype == torch.float64


# --- forward --------------------------------------------------------------------------------


def test_forward_adds_the_table_batched() -> None:
    pe = PositionalEncoding(16, max_len=50)
    x = torch.randn(3, 20, 16)
    out = pe(x)
    assert out.shape == x.shape
    torch.testing.assert_close(out, x + reference_rows(20, 16), rtol=0, atol=1e-6)


def test_forward_adds_the_table_unbatched() -> None:
    pe = PositionalEncoding(16, max_len=50)
    x = torch.randn(20, 16)
    out = pe(x)
    assert out.shape == (20, 16)
    torch.testing.assert_close(out, x + reference_rows(20, 16), rtol=0, atol=1e-6)
    torch.testing.assert_close(out, pe(x.unsqueeze(0))[0], rtol=0, atol=0)


def test_every_sequence_of_a_batch_gets_the_same_rows() -> None:
    out = PositionalEncoding(12)(torch.zeros(4, 9, 12))
    for b in range(1, 4):
        assert torch.equal(out[b], out[0])


def test_forward_does_not_mutate_input() -> None:
    x = torch.randn(2, 5, 8)
    before = x.clone()
    PositionalEncoding(8)(x)
    assert torch.equal(x, before)


def test_gradient_flows_to_the_input() -> None:
    x = torch.randn(2, 5, 8, requires_grad=True)
    PositionalEncoding(8)(x).sum().backward()
    assert x.grad is not None
    assert torch.equal(x.grad, torch.ones_like(x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("length", [300, 700])  # inside and beyond max_len=512
def test_output_dtype_is_input_dtype_and_values_within_one_ulp(
    dtype: torch.dtype, length: int
) -> None:
    pe = PositionalEncoding(32, max_len=512)
    out = pe(torch.zeros(2, length, 32, dtype=dtype))
    assert out.dtype == dtype
    exact = sinusoid_reference(length, 32)
    got = out[1].double().numpy()
    if dtype == torch.float64:
        np.testing.assert_allclose(got, exact, rtol=0, atol=1e-12)  # float64-accurate
    else:
        assert np.all(np.abs(got - exact) <= ulp(exact, dtype))


def test_float64_input_is_not_limited_by_the_float32_buffer() -> None:
    out = PositionalEncoding(64, max_len=100)(torch.zeros(1, 100, 64, dtype=torch.float64))
    err = np.abs(out[0].numpy() - sinusoid_reference(100, 64)).max()
    assert err < 1e-13  # a float32 table would be off by ~1e-8


def test_float16_output_is_the_float64_table_rounded_to_fp16() -> None:
    out = PositionalEncoding(48)(torch.zeros(200, 48, dtype=torch.float16))
    exact = torch.from_numpy(sinusoid_reference(200, 48))
    diff_in_ulps = (out.double() - exact.half().double()).abs() / torch.from_numpy(
        ulp(exact.numpy(), torch.float16)
    )
    assert float(diff_in_ulps.max()) <= 1.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_longer_than_max_len_matches_a_bigger_module_and_keeps_the_buffer(
    dtype: torch.dtype,
) -> None:
    short = PositionalEncoding(8, max_len=4)
    before = short.pe.clone()
    x = torch.randn(2, 10, 8).to(dtype)
    out = short(x)
    assert torch.equal(out, PositionalEncoding(8, max_len=16)(x))
    assert torch.equal(out, PositionalEncoding(8, max_len=10)(x))
    assert short.pe.shape == (1, 4, 8)
    assert torch.equal(short.pe, before)
    assert short.max_len == 4
    assert len(short.state_dict()) == 0


def test_rows_past_max_len_follow_the_formula() -> None:
    out = PositionalEncoding(20, max_len=3)(torch.zeros(1, 50, 20))
    assert np.abs(out[0].double().numpy() - sinusoid_reference(50, 20)).max() <= 3e-8


def test_zero_length_input() -> None:
    out = PositionalEncoding(8)(torch.zeros(2, 0, 8))
    assert out.shape == (2, 0, 8)


# --- dropout --------------------------------------------------------------------------------


def test_eval_mode_is_identity_plus_table() -> None:
    pe = PositionalEncoding(16, dropout=0.5).eval()
    x = torch.randn(2, 30, 16)
    torch.testing.assert_close(pe(x), x + reference_rows(30, 16), rtol=0, atol=1e-6)


def test_train_mode_without_dropout_is_identity_plus_table() -> None:
    pe = PositionalEncoding(16, dropout=0.0).train()
    x = torch.randn(2, 30, 16)
    torch.testing.assert_close(pe(x), x + reference_rows(30, 16), rtol=0, atol=1e-6)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_train_mode_drops_entries_and_rescales_survivors(p: float) -> None:
    pe = PositionalEncoding(16, dropout=p).train()
    x = torch.full((8, 50, 16), 3.0)  # x + PE lies in [2, 4]: never zero by itself
    out = pe(x)
    full = (x + reference_rows(50, 16)) / (1 - p)
    dropped = out == 0
    frac = dropped.double().mean().item()
    assert 0 < frac < 1
    assert abs(frac - p) < 0.05
    torch.testing.assert_close(out[~dropped], full[~dropped], rtol=1e-6, atol=1e-6)


def test_dropout_is_a_submodule_with_the_given_p() -> None:
    pe = PositionalEncoding(16, dropout=0.1)
    assert isinstance(pe.dropout, nn.Dropout)
    assert pe.dropout.p == pytest.approx(0.1)


# --- against the Annotated Transformer ------------------------------------------------------


@pytest.mark.parametrize("d_model", [16, 512])
def test_same_numbers_as_annotated_transformer_at_short_positions(d_model: int) -> None:
    ours = PositionalEncoding(d_model, 0.0, max_len=64).eval()
    theirs = LegacyPositionalEncoding(d_model, 0.0, max_len=64).eval()
    x = torch.randn(2, 64, d_model)
    # The float32-computed table drifts by ~1e-7 per position; 64 positions stay below 2e-5.
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=2e-5)
    torch.testing.assert_close(ours.pe, theirs.pe, rtol=0, atol=2e-5)


# --- repr -----------------------------------------------------------------------------------


def test_extra_repr_says_the_configuration() -> None:
    assert PositionalEncoding(512).extra_repr() == "d_model=512, max_len=5000"
    assert PositionalEncoding(20, max_len=100).extra_repr() == "d_model=20, max_len=100"
    assert "base=500" in PositionalEncoding(8, base=500.0).extra_repr()
    text = repr(PositionalEncoding(64, dropout=0.1, max_len=128))
    assert "d_model=64, max_len=128" in text
    assert "Dropout(p=0.1" in text


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"d_model": 0}, ValueError, r"d_model.*\b0\b"),
        ({"d_model": -4}, ValueError, r"d_model.*-4"),
        ({"d_model": 2.5}, TypeError, r"d_model.*2\.5"),
        ({"d_model": True}, TypeError, r"d_model.*True"),
        ({"d_model": 8, "dropout": 1.0}, ValueError, r"dropout.*1\.0"),
        ({"d_model": 8, "dropout": -0.1}, ValueError, r"dropout.*-0\.1"),
        ({"d_model": 8, "dropout": 1.5}, ValueError, r"dropout.*1\.5"),
        ({"d_model": 8, "dropout": "0.1"}, TypeError, r"dropout.*'0\.1'"),
        ({"d_model": 8, "max_len": 0}, ValueError, r"max_len.*\b0\b"),
        ({"d_model": 8, "max_len": -10}, ValueError, r"max_len.*-10"),
        ({"d_model": 8, "max_len": 10.0}, TypeError, r"max_len.*10\.0"),
    ],
)
def test_constructor_errors_name_the_argument_and_value(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        PositionalEncoding(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("shape", "match"),
    [
        ((2, 5, 7), r"d_model=8.*\(2, 5, 7\)"),
        ((5, 16), r"d_model=8.*\(5, 16\)"),
        ((8,), r"1-D.*\(8,\)"),
        ((1, 2, 5, 8), r"4-D.*\(1, 2, 5, 8\)"),
    ],
)
def test_bad_input_shape_is_a_value_error(shape: tuple[int, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        PositionalEncoding(8)(torch.zeros(shape))
    assert "input" in str(info.value)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_non_floating_input_is_a_type_error(dtype: torch.dtype) -> None:
    with pytest.raises(TypeError, match=rf"input.*floating.*{str(dtype).split('.')[-1]}"):
        PositionalEncoding(8)(torch.zeros(2, 3, 8, dtype=dtype))


def test_non_tensor_input_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"input.*list"):
        PositionalEncoding(2)([[0.0, 0.0]])  # type: ignore[arg-type]


# --- checkpoints ----------------------------------------------------------------------------


@pytest.mark.parametrize("stored_len", [1, 100, 5000])
@pytest.mark.parametrize("own_len", [50, 5000])
def test_legacy_pe_of_any_max_len_loads_strictly(stored_len: int, own_len: int) -> None:
    state = LegacyPositionalEncoding(64, 0.1, max_len=stored_len).state_dict()
    assert list(state) == ["pe"]
    assert state["pe"].shape == (1, stored_len, 64)
    pe = PositionalEncoding(64, 0.1, max_len=own_len)
    before = pe.pe.clone()
    result = pe.load_state_dict(state, strict=True)
    assert result.missing_keys == []
    assert result.unexpected_keys == []
    assert torch.equal(pe.pe, before)  # derived data: the module keeps its own table
    assert "pe" in state  # the caller's dict is left alone
    assert pe.state_dict() == {}


def test_legacy_pe_in_float16_loads() -> None:
    state = LegacyPositionalEncoding(32, 0.0, max_len=300).half().state_dict()
    PositionalEncoding(32).load_state_dict(state, strict=True)


def test_legacy_model_checkpoint_loads_into_sequential() -> None:
    legacy = legacy_model(d_model=32, vocab=50, dropout=0.1, max_len=5000)
    state = legacy.state_dict()
    assert sorted(state) == ["0.lut.weight", "1.pe"]
    model = nn.Sequential(Embeddings(32, 50), PositionalEncoding(32, 0.1, max_len=100))
    model.load_state_dict(state, strict=True)
    assert torch.equal(model[0].lut.weight, legacy[0].lut.weight)
    assert sorted(model.state_dict()) == ["0.lut.weight"]
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    torch.testing.assert_close(model.eval()(ids), legacy.eval()(ids), rtol=0, atol=1e-5)


def test_missing_pe_is_fine() -> None:
    result = PositionalEncoding(8).load_state_dict({}, strict=True)
    assert result.missing_keys == []


def _table_with_one_bad_entry() -> torch.Tensor:
    table = torch.from_numpy(sinusoid_reference(5000, 16)).float().unsqueeze(0)
    table[0, 4000, 3] += 0.05  # far beyond float32 drift, yet tiny next to the table's range
    return table


BAD_TABLES = {
    "one bad entry at position 4000": _table_with_one_bad_entry(),
    "concatenated": torch.from_numpy(concatenated_reference(100, 16)).float().unsqueeze(0),
    "random": torch.randn(1, 100, 16, generator=torch.Generator().manual_seed(1)),
    "zeros": torch.zeros(1, 100, 16),
    "base 100": torch.from_numpy(sinusoid_reference(100, 16, base=100.0)).float().unsqueeze(0),
    "shifted by one position": torch.from_numpy(sinusoid_reference(101, 16)[1:])
    .float()
    .unsqueeze(0),
    "nan": torch.full((1, 100, 16), float("nan")),
}
BAD_SHAPES = {
    "wrong d_model": annotated_table(100, 8).unsqueeze(0),
    "no batch dim": annotated_table(100, 16),
    "batch of two": annotated_table(100, 16).expand(2, 100, 16).clone(),
}


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("name", sorted(BAD_TABLES))
def test_stored_table_of_another_sinusoid_is_an_error(name: str, strict: bool) -> None:
    with pytest.raises(RuntimeError, match=r"\bpe\b") as info:
        PositionalEncoding(16).load_state_dict({"pe": BAD_TABLES[name]}, strict=strict)
    assert "not the sinusoidal" in str(info.value)


@pytest.mark.parametrize("name", sorted(BAD_SHAPES))
def test_stored_table_of_another_shape_is_an_error(name: str) -> None:
    with pytest.raises(RuntimeError, match=r"\bpe\b.*shape"):
        PositionalEncoding(16).load_state_dict({"pe": BAD_SHAPES[name]}, strict=True)


def test_bad_table_nested_names_its_key() -> None:
    legacy = legacy_model(d_model=16, vocab=10, max_len=100)
    state = legacy.state_dict()
    state["1.pe"] = BAD_TABLES["concatenated"]
    model = nn.Sequential(Embeddings(16, 10), PositionalEncoding(16))
    with pytest.raises(RuntimeError, match=re.escape("1.pe")):
        model.load_state_dict(state, strict=True)


def test_non_tensor_pe_is_an_error() -> None:
    with pytest.raises(RuntimeError, match=r"\bpe\b"):
        PositionalEncoding(16).load_state_dict({"pe": [[0.0] * 16]}, strict=True)


def test_unexpected_keys_are_still_reported() -> None:
    state = LegacyPositionalEncoding(8, 0.0, max_len=10).state_dict()
    state["extra"] = torch.zeros(1)
    with pytest.raises(RuntimeError, match=r"extra"):
        PositionalEncoding(8).load_state_dict(state, strict=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_meta_init_then_to_empty_computes_the_table(dtype: torch.dtype) -> None:
    with torch.device("meta"):
        meta = PositionalEncoding(12, max_len=40, layout="concatenated")
    assert meta.pe.is_meta
    module = meta.to_empty(device="cpu").to(dtype)
    exact = sinusoidal_table(40, 12, layout="concatenated", dtype=dtype)
    assert module.pe.dtype == dtype
    assert torch.equal(module.pe[0], exact)


def test_casting_recomputes_the_table_instead_of_converting_it() -> None:
    module = PositionalEncoding(64, max_len=3000)
    fresh = module.pe.clone()
    module.half()
    assert torch.equal(module.pe[0], sinusoidal_table(3000, 64, dtype=torch.float16))
    module.float()  # a converted fp16 table would have lost 13 bits for good
    assert torch.equal(module.pe, fresh)
    module.double()
    assert torch.equal(module.pe[0], sinusoidal_table(3000, 64, dtype=torch.float64))
    x = torch.randn(2, 5, 64, dtype=torch.float64)
    assert torch.equal(module(x) - x, (x + sinusoidal_table(5, 64, dtype=torch.float64)) - x)


def test_reset_parameters_repairs_a_damaged_table() -> None:
    module = PositionalEncoding(16, max_len=50)
    expected = module.pe.clone()
    module.pe.zero_()
    module.reset_parameters()
    assert torch.equal(module.pe, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize(
    "where",
    [
        {"offset": 3},
        {"offset": 30},  # past max_len: computed
        {"offset": torch.tensor([0, 25])},
        {"positions": torch.tensor([[4, 0, 1, 2], [19, 20, 21, -5]])},
    ],
    ids=["offset", "past-max-len", "offsets", "positions"],
)
def test_add_encoding_in_place_is_forwards_sum(
    dtype: torch.dtype, where: dict[str, object]
) -> None:
    pe = PositionalEncoding(8, max_len=20)
    x = torch.randn(2, 4, 8).to(dtype)
    out = x.clone()
    resolved = resolve(4, batch=2, **where)  # type: ignore[arg-type]
    assert pe.add_encoding_(out, resolved) is out
    assert torch.equal(out, pe(x, **where))  # type: ignore[arg-type]
    table = pe.pe.clone()
    out.zero_()
    assert torch.equal(pe.pe, table)  # the table was read, never handed out


def test_add_encoding_refuses_a_shape_that_is_not_the_positions() -> None:
    pe = PositionalEncoding(8)
    with pytest.raises(ValueError, match=r"shape \(B, L, 8\) or \(L, 8\) with L = 3"):
        pe.add_encoding_(torch.zeros(2, 4, 8), resolve(3))
    with pytest.raises(ValueError, match=r"got \(2, 3, 6\)"):
        pe.add_encoding_(torch.zeros(2, 3, 6), resolve(3))
    with pytest.raises(ValueError, match=r"got \(8,\)"):
        pe.add_encoding_(torch.zeros(8), resolve(1))
