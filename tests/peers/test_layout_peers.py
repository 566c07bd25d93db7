"""RotaryEmbedding's ``seq_dim`` against torchtune's RoPE, which takes (B, L, H, D) inputs.

torchtune's ``RotaryPositionalEmbeddings`` (``torchtune/modules/position_embeddings.py``)
rotates ``x`` of shape ``[b, s, n_h, h_d]``, pairs interleaved, at ``input_pos`` of shape
``[b, s]`` (per-token positions of packed samples). Its file imports torch only and is
loaded by path (the package wants torchao, which the peers venv lacks). Its cache is
float32 from float32 frequencies; the tests hand it posenc's float32 tables, so that
what is compared is the layout (which dimension is the sequence, which features pair
up, where the positions go), not the frequencies' rounding.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc import RotaryEmbedding, positions_from_lengths


def torchtune_rope(dim: int, max_seq_len: int) -> Any:
    spec = importlib.util.find_spec("torchtune")
    assert spec is not None, "torchtune is needed (pip install --no-deps torchtune)"
    assert spec.origin is not None
    path = Path(spec.origin).parent / "modules" / "position_embeddings.py"
    module_spec = importlib.util.spec_from_file_location("torchtune_position_embeddings", path)
    assert module_spec is not None
    assert module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.RotaryPositionalEmbeddings(dim, max_seq_len=max_seq_len)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torchtune_layout_and_packed_positions(dtype: torch.dtype) -> None:
    d, length = 32, 12
    theirs = torchtune_rope(d, 64)
    ours = RotaryEmbedding(d, layout="interleaved")
    cos, sin = ours.cos_sin(64)
    theirs.cache = torch.stack((cos, sin), dim=-1)  # their (max_seq_len, d/2, 2) cache
    torch.manual_seed(0)
    x = torch.randn(3, length, 4, d).to(dtype)  # [b, s, n_h, h_d]
    # The products are rounded differently (theirs: two roundings, a subtraction), so
    # the two agree to a few float32 ulps; a layout mistake is off by O(1).
    atol = 2e-6 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(ours(x, seq_dim=1), theirs(x), rtol=0, atol=atol)
    packed = torch.stack(
        [positions_from_lengths(torch.tensor(lens)) for lens in ([5, 7], [12], [3, 3, 6])]
    )
    torch.testing.assert_close(
        ours(x, seq_dim=1, positions=packed), theirs(x, input_pos=packed), rtol=0, atol=atol
    )
    # One token of a cache, as torchtune decodes: its position as input_pos (b, 1).
    step = x[:, :1]
    at = torch.tensor([[40], [41], [63]])
    torch.testing.assert_close(
        ours(step, seq_dim=1, positions=at), theirs(step, input_pos=at), rtol=0, atol=atol
    )
