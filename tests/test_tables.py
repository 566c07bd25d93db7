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
