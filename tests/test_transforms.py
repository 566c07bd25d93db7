"""torch.func's transforms where a scheme has something of its own to show.

``vmap`` refuses two things that eager fast paths like: reading a tensor's values
(data-dependent control flow) and operations that write into ``out=``; forward-mode
AD has no formula for ``out=`` operations either. vmap over every scheme's inputs and
positions, and forward AD through every linear one, run over the registry of schemes
in test_schemes.py; here, out-of-range ids under vmap and forward AD in the weights.
"""

from __future__ import annotations

import pytest
import torch
from torch.func import (
    functional_call,
    functionalize,
    grad,
    hessian,
    jacfwd,
    jacrev,
    jvp,
    vjp,
    vmap,
)

from posenc import Embeddings, PositionalEncoding, RotaryEmbedding, TokenAndPositionEmbedding
from posenc.hf import HFRotaryEmbedding
from posenc.positions import resolve

D, VOCAB = 16, 50

# torch's forward AD loads its decompositions through torch.jit.script on first use,
# which warns in torch >= 2.10: a warning of torch's, not of posenc's.
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning"
)


def test_vmap_over_out_of_range_ids_still_raises() -> None:
    ids = torch.tensor([[[1, 2]], [[3, VOCAB]]])
    with pytest.raises(IndexError):
        vmap(Embeddings(D, VOCAB))(ids)


def test_forward_ad_through_the_fused_layer_in_its_weights() -> None:
    torch.manual_seed(0)
    layer = TokenAndPositionEmbedding(D, VOCAB, dropout=0.0)
    ids = torch.randint(0, VOCAB, (2, 7))
    weight = layer.embeddings.lut.weight.detach()
    direction = torch.randn_like(weight)
    key = "embeddings.lut.weight"
    with torch.no_grad():
        out, tangent = jvp(
            lambda w: functional_call(layer, {key: w}, (ids,)), (weight,), (direction,)
        )
    torch.testing.assert_close(out, layer(ids), rtol=0, atol=0)
    # d/dW (W[ids] * sqrt(D) + rows) in the direction V is V[ids] * sqrt(D).
    torch.testing.assert_close(tangent, direction[ids] * D**0.5, rtol=1e-6, atol=1e-6)


# -- Every torch.func transform on every accessor ------------------------------------------
# The accessors hand out new tensors (a clone where a row may be a view of a table) and
# serve rows from tables; under a transform neither a storage nor a kept table may be
# read (_runtime.fast_path), and the values are those of the calls made one by one.


def _rope() -> RotaryEmbedding:
    return RotaryEmbedding(8, max_len=16)


def _hf(form: str) -> HFRotaryEmbedding:
    layout = "half" if form == "widened" else "interleaved"
    return HFRotaryEmbedding(RotaryEmbedding(8, layout=layout, max_len=16), form=form)  # type: ignore[arg-type]


def _first(out: object) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out  # type: ignore[index,return-value]


# Integer positions (or offsets) -> a float tensor, one per accessor; the inputs (B, ...),
# mapped over by vmap, one row a call.
ROWS = torch.tensor([[0, 1, 2], [3, 4, 20], [15, 16, 17]])
OFFSETS = torch.tensor([0, 5, 15])
INTEGER_ACCESSORS: dict[str, tuple[object, torch.Tensor]] = {
    "RotaryEmbedding.cos_sin(positions=)": (
        lambda p: torch.stack(_rope().cos_sin(3, positions=p)),
        ROWS,
    ),
    "RotaryEmbedding.cos_sin(offset=)": (
        lambda o: torch.stack(_rope().cos_sin(3, offset=o)),
        OFFSETS,
    ),
    "RotaryEmbedding.cos_sin(bfloat16)": (
        lambda p: torch.stack(_rope().cos_sin(3, positions=p, dtype=torch.bfloat16)),
        ROWS,
    ),
    "RotaryEmbedding.forward(positions=)": (
        lambda p: _rope()(torch.ones(2, 3, 8), positions=p),
        ROWS,
    ),
    "PositionalEncoding.encoding(positions=)": (
        lambda p: PositionalEncoding(8, max_len=16).encoding(3, positions=p),
        ROWS,
    ),
    "PositionalEncoding.encoding(offset=)": (
        lambda o: PositionalEncoding(8, max_len=16).encoding(3, offset=o),
        OFFSETS,
    ),
    "PositionalEncoding.encoding(float16)": (
        lambda p: PositionalEncoding(8, max_len=16).encoding(3, positions=p, dtype=torch.half),
        ROWS,
    ),
    "PositionalEncoding.forward(offset=)": (
        lambda o: PositionalEncoding(8, max_len=16)(torch.ones(3, 8), offset=o),
        OFFSETS,
    ),
    "PositionalEncoding.add_encoding_": (
        # into a tensor of the call's own (under vmap, batched as the rows are)
        lambda o: PositionalEncoding(8, max_len=16).add_encoding_(
            torch.ones(3, 8) * o.new_ones(()).float(), resolve(3, offset=o)
        ),
        OFFSETS,
    ),
    "TokenAndPositionEmbedding(ids, positions=)": (
        lambda p: _LAYER(p, positions=p),
        ROWS,
    ),
    "TokenAndPositionEmbedding(ids, offset=)": (
        lambda o: _LAYER(ROWS[0], offset=o),
        OFFSETS,
    ),
    **{
        f"HFRotaryEmbedding({form})": (
            lambda p, form=form: torch.stack(
                [
                    torch.view_as_real(t) if t.is_complex() else t
                    for t in _as_tuple(_hf(form)(torch.zeros(1), p[None]))
                ]
            ),
            ROWS,
        )
        for form in ("widened", "repeated", "gptj", "complex")
    },
}


def _as_tuple(out: object) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)  # type: ignore[return-value]


_LAYER = TokenAndPositionEmbedding(D, VOCAB, max_len=16)  # its weights drawn outside vmap


@pytest.mark.parametrize("name", INTEGER_ACCESSORS)
@pytest.mark.parametrize("transform", ["vmap", "functionalize"])
def test_accessor_on_integer_positions_under_vmap_and_functionalize(
    name: str, transform: str
) -> None:
    fn, inputs = INTEGER_ACCESSORS[name]
    one_by_one = torch.stack([fn(row) for row in inputs])  # type: ignore[operator]
    if transform == "vmap":
        got = vmap(fn)(inputs)  # type: ignore[arg-type]
    else:
        got = torch.stack([functionalize(fn)(row) for row in inputs])  # type: ignore[arg-type]
    assert got.dtype == one_by_one.dtype
    assert torch.equal(got, one_by_one)


# Fractional positions (RoPE's): float64 phases, so every derivative transform applies;
# checked against central differences (error about eps**2 = 1e-12, rounding 1e-10).
CLOSE = {"rtol": 1e-7, "atol": 1e-8}
FRACTIONAL = torch.tensor([0.5, 1.25, 20.75], dtype=torch.float64)
FLOAT_ACCESSORS = {
    "RotaryEmbedding.cos_sin": lambda p: torch.stack(
        _rope().cos_sin(3, positions=p, dtype=torch.float64)
    ),
    "RotaryEmbedding.forward": lambda p: _rope().double()(
        torch.ones(3, 8, dtype=torch.float64), positions=p
    ),
}


def _numeric_jacobian(fn: object, p: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The Jacobian by central differences in float64, one position at a time."""
    columns = []
    for i in range(p.numel()):
        step = torch.zeros_like(p)
        step[i] = eps
        columns.append((fn(p + step) - fn(p - step)) / (2 * eps))  # type: ignore[operator]
    return torch.stack(columns, dim=-1)


@pytest.mark.parametrize("name", FLOAT_ACCESSORS)
@pytest.mark.parametrize("transform", ["grad", "vjp", "jvp", "jacrev", "jacfwd", "hessian"])
def test_accessor_on_fractional_positions_under_every_derivative_transform(
    name: str, transform: str
) -> None:
    fn = FLOAT_ACCESSORS[name]
    p = FRACTIONAL
    jacobian = _numeric_jacobian(fn, p)
    assert jacobian.abs().sum() > 1  # the positions move the result
    if transform == "grad":
        got = grad(lambda q: fn(q).sum())(p)
        torch.testing.assert_close(got, jacobian.flatten(0, -2).sum(0), **CLOSE)
    elif transform == "vjp":
        out, pull = vjp(fn, p)
        assert torch.equal(out, fn(p))
        (got,) = pull(torch.ones_like(out))
        torch.testing.assert_close(got, jacobian.flatten(0, -2).sum(0), **CLOSE)
    elif transform == "jvp":
        out, tangent = jvp(fn, (p,), (torch.ones_like(p),))
        assert torch.equal(out, fn(p))
        torch.testing.assert_close(tangent, jacobian.sum(-1), **CLOSE)
    elif transform in ("jacrev", "jacfwd"):
        got = (jacrev if transform == "jacrev" else jacfwd)(fn)(p)
        torch.testing.assert_close(got, jacobian, **CLOSE)
    else:  # second derivatives: d2 cos(p w) / dp2 = -w**2 cos(p w)
        got = hessian(lambda q: fn(q).sum())(p)
        assert got.shape == (3, 3)
        assert torch.equal(got, torch.diag(torch.diagonal(got)))  # positions do not mix
        eps = 1e-4
        slope = grad(lambda q: fn(q).sum())(p + eps) - grad(lambda q: fn(q).sum())(p - eps)
        torch.testing.assert_close(torch.diagonal(got), slope / (2 * eps), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", FLOAT_ACCESSORS)
def test_vmap_over_fractional_positions_and_grad_inside_it(name: str) -> None:
    fn = FLOAT_ACCESSORS[name]
    batch = torch.stack([FRACTIONAL, FRACTIONAL + 100.5])
    assert torch.equal(vmap(fn)(batch), torch.stack([fn(row) for row in batch]))
    per_row = vmap(grad(lambda q: fn(q).sum()))(batch)
    expected = torch.stack([grad(lambda q: fn(q).sum())(row) for row in batch])
    assert torch.equal(per_row, expected)


def test_a_transform_leaves_no_kept_table_behind() -> None:
    # A half-precision table derived under a transform would be wrapped by it, and kept
    # past it (functionalize's wrapper then fails the next eager call): under one, the
    # rows are computed and nothing is kept. Positions from an int offset reach the
    # tables (batched ones are computed anyway).
    pe, rope = PositionalEncoding(8, max_len=16), _rope()
    x = torch.randn(2, 3, 8).bfloat16()
    functionalize(lambda t: pe(t, offset=2))(x[0])
    functionalize(lambda t: rope(t, offset=2))(x[0])
    vmap(lambda t: pe(t, offset=2))(x)
    vmap(lambda p: pe.encoding(3, positions=p, dtype=torch.bfloat16))(ROWS)
    vmap(lambda p: rope.cos_sin(3, positions=p, dtype=torch.bfloat16)[0])(ROWS)
    assert pe._kept == {}
    assert rope._kept == {}
    fresh = PositionalEncoding(8, max_len=16)
    assert torch.equal(pe(x[0], offset=2), fresh(x[0], offset=2))  # eagerly: kept
    assert set(pe._kept) == {torch.bfloat16}
    assert torch.equal(rope(x[0], offset=2), _rope()(x[0], offset=2))
