"""Every module under torch.func's transforms and forward-mode AD.

``vmap`` refuses two things that eager fast paths like: reading a tensor's values
(data-dependent control flow) and operations that write into ``out=``; forward-mode
AD has no formula for ``out=`` operations either. Each module must give under a
transform what it gives called on each sample, and tangents must be what the
module's linearity says they are.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.autograd.forward_ad as fwad
from torch import Tensor
from torch.func import functional_call, jvp, vmap

from posenc import (
    ALiBi,
    Embeddings,
    LearnedPositionalEmbedding,
    PositionalEncoding,
    RelativePositionBias,
    RotaryEmbedding,
    TokenAndPositionEmbedding,
    apply_rotary,
    timestep_embedding,
)

D, VOCAB, MAX_LEN = 16, 50, 12

# torch's forward AD loads its decompositions through torch.jit.script on first use,
# which warns in torch >= 2.10: a warning of torch's, not of posenc's.
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning"
)


def _each(fn: Callable[..., Tensor], *batched: Tensor) -> Tensor:
    """``fn`` called on each sample (dim 0) of ``batched``, the results stacked."""
    return torch.stack([fn(*sample) for sample in zip(*batched, strict=True)])


def _modules() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {
        "sinusoid": PositionalEncoding(D, 0.0, max_len=MAX_LEN),
        "rotary": RotaryEmbedding(D, max_len=MAX_LEN),
        "rotary-interleaved": RotaryEmbedding(D, layout="interleaved", max_len=MAX_LEN),
        "learned": LearnedPositionalEmbedding(MAX_LEN, D),
    }


@pytest.mark.parametrize("name", list(_modules()))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_vmap_over_inputs_equals_each_sample(name: str, dtype: torch.dtype) -> None:
    module = _modules()[name]
    x = torch.randn(3, 2, 5, D).to(dtype)  # vmapped over dim 0: samples of (2, 5, D)
    got = vmap(lambda s: module(s, offset=4))(x)
    torch.testing.assert_close(got, _each(lambda s: module(s, offset=4), x), rtol=0, atol=0)


@pytest.mark.parametrize("name", list(_modules()))
def test_vmap_over_positions_equals_each_sample(name: str) -> None:
    module = _modules()[name]
    x = torch.randn(2, 4, D)
    # Inside and past max_len, where the rows are computed instead of looked up.
    top = MAX_LEN if name == "learned" else 3 * MAX_LEN
    positions = torch.randint(0, top, (5, 2, 4))
    got = vmap(lambda p: module(x, positions=p))(positions)
    want = _each(lambda p: module(x, positions=p), positions)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("fused", [True, False])
def test_vmap_over_token_ids_equals_each_sample(fused: bool) -> None:
    torch.manual_seed(0)
    model = (
        TokenAndPositionEmbedding(D, VOCAB, dropout=0.0, max_len=MAX_LEN)
        if fused
        else Embeddings(D, VOCAB)
    )
    ids = torch.randint(0, VOCAB, (4, 2, 6), dtype=torch.int32)
    torch.testing.assert_close(vmap(model)(ids), _each(model, ids), rtol=0, atol=0)


def test_vmap_over_out_of_range_ids_still_raises() -> None:
    ids = torch.tensor([[[1, 2]], [[3, VOCAB]]])
    with pytest.raises(IndexError):
        vmap(Embeddings(D, VOCAB))(ids)


@pytest.mark.parametrize("module", [ALiBi(3), RelativePositionBias(3)], ids=["alibi", "t5"])
def test_vmap_over_bias_positions_equals_each_sample(module: torch.nn.Module) -> None:
    positions = torch.randint(-20, 200, (4, 5))
    got = vmap(lambda p: module(5, 7, positions=p))(positions)
    want = _each(lambda p: module(5, 7, positions=p), positions)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_vmap_over_rotary_tables_equals_each_sample() -> None:
    x = torch.randn(3, 2, 5, D)
    angles = torch.rand(3, 5, D // 2) * 100
    got = vmap(lambda a, b: apply_rotary(a, b.cos(), b.sin()))(x, angles)
    want = _each(lambda a, b: apply_rotary(a, b.cos(), b.sin()), x, angles)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_vmap_over_timesteps_equals_each_sample() -> None:
    t = torch.rand(4, 3) * 1000
    got = vmap(lambda s: timestep_embedding(s, 32))(t)
    torch.testing.assert_close(got, _each(lambda s: timestep_embedding(s, 32), t), rtol=0, atol=0)


# -- Forward-mode AD -------------------------------------------------------------------
# Each of these modules is x + f(positions) or a rotation of x: linear in x, so the
# tangent of the output is the tangent of the input passed through the same map.


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_forward_ad_through_rotary_is_the_rotated_tangent(grad_mode: bool, layout: str) -> None:
    rope = RotaryEmbedding(D, layout=layout, max_len=MAX_LEN)  # type: ignore[arg-type]
    x, v = torch.randn(2, 3, 20, D), torch.randn(2, 3, 20, D)  # past max_len too
    with torch.set_grad_enabled(grad_mode):
        out, tangent = jvp(rope, (x,), (v,))
        with fwad.dual_level():
            dual = rope(fwad.make_dual(x, v))
            primal, dual_tangent = fwad.unpack_dual(dual)
    torch.testing.assert_close(out, rope(x), rtol=0, atol=0)
    torch.testing.assert_close(primal, rope(x), rtol=0, atol=0)
    torch.testing.assert_close(tangent, rope(v), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(dual_tangent, rope(v), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["sinusoid", "learned"])
def test_forward_ad_through_an_added_encoding_is_the_input_tangent(name: str) -> None:
    module = _modules()[name]
    x, v = torch.randn(2, 5, D), torch.randn(2, 5, D)
    with torch.no_grad():
        _, tangent = jvp(module, (x,), (v,))
    torch.testing.assert_close(tangent, v, rtol=0, atol=0)


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
