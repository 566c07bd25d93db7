"""torch.compile with Inductor: compiled modules match eager ones.

The contracts every scheme keeps under torch.compile (graph counts), torch.export, ONNX,
deepcopy and pickle run over the registry of schemes, in test_schemes.py.
"""

from __future__ import annotations

import pytest
import torch

from posenc import RotaryEmbedding, TokenAndPositionEmbedding

D, VOCAB, MAX_LEN = 32, 100, 64
HEADS = 4


def head_input(length: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(2, HEADS, length, D).to(dtype)


def id_input(length: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, length))


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()


# Inductor's CPU backend imports torch.utils.mkldnn, which warns about TorchScript.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_compile_inductor_matches_eager() -> None:
    module = TokenAndPositionEmbedding(D, VOCAB, max_len=MAX_LEN).eval()
    compiled = torch.compile(module, fullgraph=True, dynamic=True)
    for length in (4, 9):
        ids = id_input(length)
        torch.testing.assert_close(compiled(ids), module(ids), rtol=0, atol=1e-6)


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_compile_inductor_matches_eager(dtype: torch.dtype) -> None:
    module = RotaryEmbedding(D, max_len=MAX_LEN)
    compiled = torch.compile(module, fullgraph=True, dynamic=True)
    for length in (4, 9):
        x = head_input(length, dtype)
        got, expected = compiled(x, offset=10**5), module(x, offset=10**5)
        assert got.dtype == dtype
        # Inductor may round the two products differently (no fused multiply-add): at most
        # an ulp apart in float32; in bfloat16, where the float32 result sits on a
        # rounding boundary, one bfloat16 ulp.
        ulps = 2.0**-23 * 8 if dtype == torch.float32 else 2.0**-7 * 8
        torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=ulps)


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hf_rotary_and_cos_sin_compile_fullgraph(dtype: torch.dtype) -> None:
    # Hugging Face's own rotary modules compile with fullgraph=True; the adapter must too.
    from posenc.hf import HFRotaryEmbedding

    rope = RotaryEmbedding(D, max_len=MAX_LEN).to(dtype)
    adapter = HFRotaryEmbedding(rope)
    x = torch.zeros(2, 5, D, dtype=dtype)
    ids = torch.tensor([[0, 1, 2, 3, 4], [60, 61, 62, 63, 64]])  # in and past the table
    got = torch.compile(adapter, fullgraph=True, dynamic=False)(x, ids)
    for g, e in zip(got, adapter(x, ids), strict=True):
        assert g.dtype == dtype
        assert torch.equal(g, e)

    def tables(offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        return rope.cos_sin(4, offset=offset)

    cos, sin = torch.compile(tables, fullgraph=True, dynamic=False)(3)
    assert torch.equal(cos, rope.cos_sin(4, offset=3)[0])
    # what _unshared guarantees, compiled too: writing into the result leaves the module as it was
    before = rope.cos_sin(4, offset=3)
    cos.fill_(7.0)
    sin.fill_(7.0)
    for b, a in zip(before, rope.cos_sin(4, offset=3), strict=True):
        assert torch.equal(a, b)
    assert not bool((rope._cos == 7.0).any())
