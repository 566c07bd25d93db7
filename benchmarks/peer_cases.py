"""Timings beside the code posenc replaces: the peer's function is each section's floor.

- ``hf-rotary-{float32,bfloat16}``: a Llama ``rotary_emb`` (head_dim 128, base 10 000,
  ``max_position_embeddings`` 4096): transformers' ``LlamaRotaryEmbedding`` against
  posenc's ``HFRotaryEmbedding`` (what ``patch_rotary`` installs), ``position_ids``
  (1, 4096) and one token at 4000; ``x`` only gives the dtype.
- ``decode-{float32,bfloat16}``: one decoding step, one token at position 4000. RoPE:
  HF's ``rotary_emb`` then ``apply_rotary_pos_emb`` on q and k (1, 32, 1, 128), against
  ``RotaryEmbedding`` on q and on k. Input layer: ``nn.Embedding`` then ``* sqrt(d)``
  plus a slice of a precomputed table (d 512, vocab 32 000), against the fused
  ``TokenAndPositionEmbedding`` and the pair ``Embeddings`` -> ``PositionalEncoding``.
- ``bias-{512,4096}``: float32, 8 heads, L queries over L keys. ALiBi against the
  one-liner ``slopes[:, None, None] * -(i - j).abs()`` in float32; T5's
  ``RelativePositionBias`` against transformers' ``T5Attention.compute_bias`` (32
  buckets, max_distance 128, the same table).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

import posenc
from posenc.hf import HFRotaryEmbedding

Cases = list[tuple[str, str, Callable[[], object]]]


def _llama(dtype: torch.dtype) -> tuple[nn.Module, nn.Module]:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(
        hidden_size=4096, num_attention_heads=32, head_dim=128, max_position_embeddings=4096
    )
    hf = LlamaRotaryEmbedding(config).to(dtype)
    ours = HFRotaryEmbedding(posenc.RotaryEmbedding(128, max_len=4096)).to(dtype)
    return hf, ours


def hf_rotary(dtype: torch.dtype, length: int) -> Cases:
    hf, ours = _llama(dtype)
    x = torch.zeros(1, length, 8, dtype=dtype)
    ids = torch.arange(length)[None] if length > 1 else torch.tensor([[4000]])
    return [
        ("hf", "transformers LlamaRotaryEmbedding", lambda: hf(x, ids)),
        ("posenc", "posenc HFRotaryEmbedding", lambda: ours(x, ids)),
    ]


def decode_rope(dtype: torch.dtype) -> Cases:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    hf, _ = _llama(dtype)
    torch.manual_seed(0)
    q, k = (torch.randn(1, 32, 1, 128).to(dtype) for _ in range(2))
    ids = torch.tensor([[4000]])
    rope = posenc.RotaryEmbedding(128, max_len=4096).to(dtype)

    def peer() -> object:
        cos, sin = hf(q, ids)
        return apply_rotary_pos_emb(q, k, cos, sin)

    def ours() -> object:
        return rope(q, offset=4000), rope(k, offset=4000)

    return [
        ("hf", "HF rotary_emb + apply_rotary_pos_emb", peer),
        ("posenc", "RotaryEmbedding on q and k", ours),
    ]


def decode_input(dtype: torch.dtype) -> Cases:
    d, vocab = 512, 32_000
    fused = posenc.TokenAndPositionEmbedding(d, vocab).to(dtype).eval()
    pair = nn.Sequential(posenc.Embeddings(d, vocab), posenc.PositionalEncoding(d)).to(dtype)
    pair.eval()
    lut = nn.Embedding(vocab, d).to(dtype)
    table = posenc.sinusoidal_table(5000, d, dtype=dtype)
    scale = math.sqrt(d)
    ids = torch.tensor([[17]])

    def plain() -> object:
        return lut(ids) * scale + table[4000:4001]

    return [
        ("plain", "nn.Embedding * sqrt(d) + table slice", plain),
        ("fused", "TokenAndPositionEmbedding", lambda: fused(ids, offset=4000)),
        ("pair", "Embeddings -> PositionalEncoding", lambda: pair[1](pair[0](ids), offset=4000)),
    ]  # fmt: skip


def biases(length: int) -> Cases:
    from transformers.models.t5.modeling_t5 import T5Attention, T5Config

    t5 = T5Attention(
        T5Config(num_heads=8, d_model=512, d_kv=64, relative_attention_num_buckets=32),
        has_relative_attention_bias=True,
    )
    rpb = posenc.RelativePositionBias(8)
    with torch.no_grad():
        rpb.relative_attention_bias.weight.copy_(t5.relative_attention_bias.weight)
    alibi = posenc.ALiBi(8)
    slopes = posenc.alibi_slopes(8).float()

    def one_liner() -> torch.Tensor:
        i = torch.arange(length)
        return slopes[:, None, None] * -(i[:, None] - i[None]).abs()

    return [
        ("one_liner", "ALiBi one-liner, float32", one_liner),
        ("alibi", "posenc ALiBi", lambda: alibi(length)),
        ("t5", "HF T5Attention.compute_bias", lambda: t5.compute_bias(length, length)),
        ("rpb", "posenc RelativePositionBias", lambda: rpb(length)),
    ]
