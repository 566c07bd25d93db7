"""posenc._tables: one derived-table mechanism, and dtype defaults as torch's own."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from posenc import (
    PositionalEncoding,
    RotaryEmbedding,
    sincos_2d,
    sinusoidal_table,
    timestep_embedding,
)

LOW = [torch.float16, torch.bfloat16]


FUNCTIONS: list[tuple[str, Callable[[], torch.Tensor]]] = [
    ("sinusoidal_table", lambda: sinusoidal_table(5, 8)),
    ("sinusoidal_table of a tensor", lambda: sinusoidal_table(torch.arange(5), 8)),
    ("sincos_2d", lambda: sincos_2d(2, 3, 8)),
    ("timestep_embedding", lambda: timestep_embedding(torch.tensor([0, 9]), 8)),
]


@pytest.mark.parametrize(("name", "call"), FUNCTIONS, ids=[n for n, _ in FUNCTIONS])
def test_functions_default_to_torchs_default_dtype(
    name: str, call: Callable[[], torch.Tensor], float64_default: None
) -> None:
    out = call()
    assert out.dtype == torch.float64, name
    torch.set_default_dtype(torch.float32)
    assert call().dtype == torch.float32
    # float64 is computed, not the float32 result widened
    assert not torch.equal(out.float().double(), out)


@pytest.mark.parametrize("cast", [*LOW, torch.float32, torch.float64])
def test_encoding_defaults_to_the_modules_dtype(cast: torch.dtype) -> None:
    pe = PositionalEncoding(16, max_len=8).to(cast)
    rows = pe.encoding(12, offset=3)
    assert rows.dtype == cast
    assert torch.equal(rows, sinusoidal_table(torch.arange(3, 15), 16, dtype=cast))


@pytest.mark.parametrize("cast", [*LOW, torch.float32, torch.float64])
def test_cos_sin_defaults_to_the_modules_dtype_rounded_once(cast: torch.dtype) -> None:
    rope = RotaryEmbedding(16, max_len=8).to(cast)
    cos, sin = rope.cos_sin(12, offset=3)
    assert cos.dtype == sin.dtype == cast
    exact_cos, exact_sin = RotaryEmbedding(16, max_len=8).cos_sin(
        12, offset=3, dtype=torch.float64
    )
    for got, exact in ((cos, exact_cos), (sin, exact_sin)):
        # one rounding from float64: within half an ulp of the float64 value
        err = (got.double() - exact).abs()
        half_ulp = torch.finfo(cast).eps / 2 * exact.abs().clamp(min=torch.finfo(cast).tiny)
        assert bool((err <= half_ulp).all()), cast


def test_the_tables_follow_the_last_cast_even_when_the_storage_does_not_change() -> None:
    rope = RotaryEmbedding(8)
    storage = rope._cos
    rope.bfloat16()
    assert rope.cos_sin(2)[0].dtype == torch.bfloat16
    assert rope._cos.dtype == torch.float32  # float32 tables serve bfloat16 inputs
    rope.float()  # a no-op for the float32 tables, not for the module's dtype
    assert rope.cos_sin(2)[0].dtype == torch.float32
    rope.double()
    assert rope._cos.dtype == torch.float64
    assert rope.cos_sin(2)[0].dtype == torch.float64
    assert storage.dtype == torch.float32


def test_a_bfloat16_model_takes_the_accessors_without_a_cast() -> None:
    # A user's attention layer in bfloat16, fed the module's tables as they come.
    rope = RotaryEmbedding(8).bfloat16()
    q = torch.randn(1, 2, 5, 8, dtype=torch.bfloat16)
    cos, _sin = rope.cos_sin(5)
    half = torch.cat((cos, cos), -1) * q  # would raise on float32 tables in a bf16 matmul
    proj = nn.Linear(8, 8, dtype=torch.bfloat16)
    assert proj(half).dtype == torch.bfloat16
    pe = PositionalEncoding(8).bfloat16()
    assert proj(pe.encoding(5)).dtype == torch.bfloat16


@pytest.mark.parametrize(
    "make", [lambda: PositionalEncoding(8, max_len=16), lambda: RotaryEmbedding(8, max_len=16)]
)
def test_one_mechanism_for_both_caching_modules(make: Callable[[], nn.Module]) -> None:
    module = make()
    names = [name for name, _ in module.named_buffers()]
    assert module.state_dict() == {}
    # a cast gives new tensors derived again; a no-op cast keeps them; to_empty re-derives
    before = [b for _, b in module.named_buffers()]
    module.to("cpu")
    assert all(a is b for a, b in zip(before, [b for _, b in module.named_buffers()], strict=True))
    module.to_empty(device="cpu")
    assert all(
        torch.equal(a, b)
        for a, b in zip(before, dict(make().named_buffers()).values(), strict=True)
    )
    with torch.device("meta"):
        meta = make()
    assert all(b.is_meta for _, b in meta.named_buffers())
    meta.to_empty(device="cpu")
    for name in names:
        assert torch.equal(dict(meta.named_buffers())[name], dict(make().named_buffers())[name])


@pytest.mark.parametrize("low", LOW)
def test_half_precision_tables_are_kept_with_the_values_computed_past_them(
    low: torch.dtype,
) -> None:
    # A table per half-precision dtype, rounded once from float64: its rows equal those
    # computed on the fly past max_len (a module with a shorter table computes them).
    rope, short = RotaryEmbedding(16, max_len=64), RotaryEmbedding(16, max_len=4)
    assert rope._kept == {}
    for offset, length in ((0, 64), (10, 7), (60, 4)):
        got = rope.cos_sin(length, offset=offset, dtype=low)
        expected = short.cos_sin(length, offset=offset, dtype=low)
        assert all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))
    kept = rope._kept[low]
    assert kept[0].dtype == low
    assert kept[0].shape == (64, 8)
    rope.cos_sin(3, dtype=low)
    assert rope._kept[low] is kept  # derived once
    # past the table, and tensor positions beyond it: computed, with the same values
    ids = torch.tensor([2, 63, 64, 1000])
    got = rope.cos_sin(4, positions=ids, dtype=low)
    expected = RotaryEmbedding(16, max_len=2048).cos_sin(4, positions=ids, dtype=low)
    assert all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))
    assert rope.state_dict() == {}
    pe, pe_short = PositionalEncoding(16, max_len=64), PositionalEncoding(16, max_len=4)
    rows = pe.encoding(20, offset=40, dtype=low)
    assert torch.equal(rows, pe_short.encoding(20, offset=40, dtype=low))
    assert pe._kept[low][0].shape == (1, 64, 16)
    assert pe.state_dict() == {}


def test_half_precision_tables_are_dropped_by_a_cast_or_move_and_kept_by_a_no_op() -> None:
    rope = RotaryEmbedding(16, max_len=32)
    rope.cos_sin(4, dtype=torch.bfloat16)
    kept = rope._kept[torch.bfloat16]
    rope.to("cpu")
    rope.float()
    assert rope._kept[torch.bfloat16] is kept  # no-op casts: nothing derived again
    rope.double()  # new float64 buffers: the kept tables go, derived again when asked for
    assert rope._kept == {}
    cos, _ = rope.cos_sin(4, dtype=torch.bfloat16)
    assert torch.equal(cos, kept[0][:4])
    rope.to_empty(device="cpu")
    assert rope._kept == {}
    rope.cos_sin(4, dtype=torch.float16)
    rope.reset_parameters()
    assert rope._kept == {}
    with torch.device("meta"):
        meta = RotaryEmbedding(16, max_len=32)
    assert meta.cos_sin(4, dtype=torch.bfloat16)[0].is_meta
    assert meta._kept == {}


def test_half_precision_tables_cannot_be_written_through_the_accessors() -> None:
    rope = RotaryEmbedding(16, max_len=32).bfloat16()
    cos, sin = rope.cos_sin(5, offset=2)
    expected = [t.clone() for t in (cos, sin)]
    cos.fill_(3.0)
    sin.fill_(3.0)
    again = rope.cos_sin(5, offset=2)
    assert all(torch.equal(a, e) for a, e in zip(again, expected, strict=True))
    pe = PositionalEncoding(8, max_len=16)
    rows = pe.encoding(4, dtype=torch.float16)
    rows.fill_(3.0)
    assert not bool((pe._kept[torch.float16][0] == 3.0).any())


def test_half_precision_tables_first_made_in_inference_mode_serve_autograd() -> None:
    rope = RotaryEmbedding(16, max_len=32)
    with torch.inference_mode():
        rope.cos_sin(4, dtype=torch.bfloat16)
    x = torch.randn(1, 4, 16, dtype=torch.bfloat16, requires_grad=True)
    cos, _ = rope.cos_sin(4, dtype=torch.bfloat16)
    (x[..., :8] * cos).sum().backward()  # an inference tensor here could not be saved
    assert x.grad is not None


@pytest.mark.parametrize("dtype", [torch.float32, *LOW])
def test_hf_adapter_gathers_held_rows_with_the_values_of_the_general_path(
    dtype: torch.dtype,
) -> None:
    from posenc.hf import HFRotaryEmbedding

    rope = RotaryEmbedding(16, max_len=32)
    adapter = HFRotaryEmbedding(rope)
    x = torch.zeros(1, dtype=dtype)
    for ids in (torch.tensor([[4, 31]]), torch.tensor([[0, 1], [7, 3]]), torch.tensor([[-2, 40]])):
        cos, sin = adapter(x, ids)
        want = rope.cos_sin(2, positions=ids, batch=ids.shape[0], dtype=dtype)
        assert torch.equal(cos, torch.cat((want[0], want[0]), -1))
        assert torch.equal(sin, torch.cat((want[1], want[1]), -1))
        cos.fill_(5.0)  # the result is the caller's
        assert not bool((rope._table_for(dtype, torch.device("cpu"))[0] == 5.0).any())  # type: ignore[index]
    with pytest.raises(ValueError, match="outside"):  # the domain is still checked
        adapter(x, torch.tensor([[2**62, 0]]))
