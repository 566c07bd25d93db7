"""Worst error of each RoPE implementation against the float64 rotation, after a dtype cast.

Every implementation is built as its users build it (a module in float32, or the
function with its documented arguments), then cast to the model's dtype the way a
model is cast (``module.to(dtype)``); the input ``x`` is in that dtype. The
reference is the rotation of the same ``x`` (read exactly) computed in float64
from RoFormer's frequencies. ``nox -s peers`` runs it (test_rotary_peers.py) and
prints the table; it also runs on its own::

    POSENC_PEERS=1 .nox/peers/bin/python tests/peers/rotary_precision.py [position]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for reference.py

from reference import roformer_frequencies, rotary_reference

from posenc import RotaryEmbedding

HEAD_DIM, HEADS, BATCH, LENGTH = 64, 4, 2, 16
DTYPES = (torch.bfloat16, torch.float16, torch.float32)

Rotate = Callable[[torch.Tensor, int], torch.Tensor]  # (x (B, H, L, D), first position) -> y


def posenc_rotate(dtype: torch.dtype) -> Rotate:
    rope = RotaryEmbedding(HEAD_DIM).to(dtype)
    return lambda x, start: rope(x, offset=start)


def hf_llama(dtype: torch.dtype) -> Rotate:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = LlamaConfig(
        hidden_size=HEAD_DIM * HEADS, num_attention_heads=HEADS, head_dim=HEAD_DIM
    )
    rope = LlamaRotaryEmbedding(config).to(dtype)

    def rotate(x: torch.Tensor, start: int) -> torch.Tensor:
        position_ids = torch.arange(start, start + x.shape[-2]).expand(x.shape[0], -1)
        cos, sin = rope(x, position_ids)
        return apply_rotary_pos_emb(x, x, cos, sin)[0]

    return rotate


def hf_gptj(dtype: torch.dtype, longest: int) -> Rotate:
    from transformers import GPTJConfig
    from transformers.models.gptj.modeling_gptj import GPTJRotaryEmbedding, apply_rotary_pos_emb

    config = GPTJConfig(
        n_embd=HEAD_DIM * HEADS, n_head=HEADS, rotary_dim=HEAD_DIM, n_positions=longest
    )
    rope = GPTJRotaryEmbedding(config).to(dtype)

    def rotate(x: torch.Tensor, start: int) -> torch.Tensor:
        position_ids = torch.arange(start, start + x.shape[-2]).expand(x.shape[0], -1)
        sin, cos = rope(x, position_ids)
        # GPT-J rotates (B, L, H, D) before moving the heads.
        return apply_rotary_pos_emb(x.transpose(1, 2), sin, cos).transpose(1, 2)

    return rotate


def x_transformers(dtype: torch.dtype) -> Rotate:
    from x_transformers.x_transformers import RotaryEmbedding as XRotary
    from x_transformers.x_transformers import apply_rotary_pos_emb

    rope = XRotary(HEAD_DIM).to(dtype)

    def rotate(x: torch.Tensor, start: int) -> torch.Tensor:
        freqs, _ = rope(torch.arange(start, start + x.shape[-2]))
        return apply_rotary_pos_emb(x, freqs)

    return rotate


def rotary_embedding_torch(dtype: torch.dtype) -> Rotate:
    from rotary_embedding_torch import RotaryEmbedding as LRotary

    rope = LRotary(HEAD_DIM).to(dtype)
    return lambda x, start: rope.rotate_queries_or_keys(x, offset=start)


def diffusers_1d(dtype: torch.dtype) -> Rotate:
    from diffusers.models.embeddings import apply_rotary_emb, get_1d_rotary_pos_embed

    # A function, not a module: nothing to cast. Flux asks for float64 frequencies.
    def rotate(x: torch.Tensor, start: int) -> torch.Tensor:
        positions = torch.arange(start, start + x.shape[-2])
        cos, sin = get_1d_rotary_pos_embed(
            HEAD_DIM, positions, use_real=True, freqs_dtype=torch.float64
        )
        return apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=-1)

    return rotate


# name, layout of its pairs, builder(dtype, longest position needed)
IMPLEMENTATIONS: list[tuple[str, str, Callable[[torch.dtype, int], Rotate]]] = [
    ("posenc RotaryEmbedding", "half", lambda d, n: posenc_rotate(d)),
    ("HF Llama (LlamaRotaryEmbedding)", "half", lambda d, n: hf_llama(d)),
    ("HF GPT-J (GPTJRotaryEmbedding)", "interleaved", hf_gptj),
    ("x-transformers RotaryEmbedding", "interleaved", lambda d, n: x_transformers(d)),
    ("rotary-embedding-torch", "interleaved", lambda d, n: rotary_embedding_torch(d)),
    ("diffusers get_1d_rotary_pos_embed f64", "interleaved", lambda d, n: diffusers_1d(d)),
]


def worst_errors(position: int = 10**6, seed: int = 0) -> dict[str, dict[torch.dtype, float]]:
    """``{implementation: {dtype: max |y - exact|}}`` over B×H×L×D values from ``position``."""
    g = torch.Generator().manual_seed(seed)
    x32 = torch.randn(BATCH, HEADS, LENGTH, HEAD_DIM, generator=g)
    freqs = roformer_frequencies(HEAD_DIM)
    positions = np.arange(position, position + LENGTH)
    table: dict[str, dict[torch.dtype, float]] = {}
    for name, layout, build in IMPLEMENTATIONS:
        table[name] = {}
        for dtype in DTYPES:
            x = x32.to(dtype)
            exact = rotary_reference(x, positions, freqs, layout)
            with torch.no_grad():
                y = build(dtype, position + LENGTH)(x, position)
            assert y.dtype == dtype, (name, y.dtype)
            table[name][dtype] = float(np.abs(y.double().numpy() - exact).max())
    return table


def format_table(table: dict[str, dict[torch.dtype, float]], position: int) -> list[str]:
    names = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
    lines = [
        f"worst |error| vs the float64 rotation at positions {position}..{position + LENGTH - 1}, "
        f"head_dim={HEAD_DIM}, module built in float32 then cast (.to(dtype)), x ~ N(0, 1)",
        f"{'':40s}" + "".join(f"{names[d]:>12s}" for d in DTYPES),
    ]
    for name, row in table.items():
        lines.append(f"{name:40s}" + "".join(f"{row[d]:12.3g}" for d in DTYPES))
    return lines


if __name__ == "__main__":
    where = int(sys.argv[1]) if len(sys.argv) > 1 else 10**6
    print("\n".join(format_table(worst_errors(where), where)))
