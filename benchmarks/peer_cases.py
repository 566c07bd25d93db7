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
- ``llama-{float32,bfloat16}``: the forward of a small Llama (4 layers, hidden 256,
  8 heads of 32, vocab 1000, ids (1, 512), no cache), as transformers builds it and
  after ``patch_rotary``: the rotary tables inside a whole model.
- ``mrope``: M-RoPE position ids for Qwen2-VL, text, a 1 x 32 x 32 image (256 tokens
  after the 2 x 2 merge), text, a 4 x 16 x 16 video (256 tokens), text, batch 2 left
  padded: transformers' ``Qwen2VLModel.get_rope_index`` against posenc's
  ``multimodal_positions`` (the same ids, checked in tests/peers).
- ``flux``: FLUX's rotary tables, axes (16, 56, 56), 512 text tokens at (0, 0, 0) then
  a 64 x 64 latent grid (4608 positions): diffusers' ``FluxPosEmbed`` against posenc's
  ``RotaryEmbedding(128, axes=(16, 56, 56)).cos_sin`` (diffusers' tables repeat each
  column twice, posenc's hold each once).
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


def llama(dtype: torch.dtype) -> Cases:
    import copy
    import warnings

    from transformers import LlamaConfig, LlamaModel

    from posenc.hf import patch_rotary

    config = LlamaConfig(
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=4096,
    )  # fmt: skip
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = LlamaModel(config).to(dtype).eval()
    patched = patch_rotary(copy.deepcopy(hf))
    ids = torch.randint(0, 1000, (1, 512))

    def run(model: nn.Module) -> Callable[[], object]:
        def forward() -> object:
            with torch.no_grad():
                return model(input_ids=ids, use_cache=False).last_hidden_state

        return forward

    return [
        ("hf", "LlamaModel forward, transformers' rotary", run(hf)),
        ("posenc", "LlamaModel forward after patch_rotary", run(patched)),
    ]


def _mrope_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token types (0 text, 1 image, 2 video), the attention mask, the grids (t, h, w)."""
    rows = [[0] * 20 + [1] * 256 + [0] * 30 + [2] * 256 + [0] * 40,
            [0] * 60 + [1] * 256 + [0] * 10]  # fmt: skip
    width = max(map(len, rows))
    types = torch.zeros(2, width, dtype=torch.long)
    mask = torch.zeros(2, width, dtype=torch.long)
    for b, row in enumerate(rows):
        types[b, width - len(row) :] = torch.tensor(row)
        mask[b, width - len(row) :] = 1
    return types, mask, torch.tensor([[1, 32, 32], [1, 32, 32], [4, 16, 16]])


def mrope() -> Cases:
    import warnings

    from transformers import Qwen2VLConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    text = {"vocab_size": 64, "hidden_size": 64, "intermediate_size": 32,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
            "max_position_embeddings": 4096, "bos_token_id": None, "eos_token_id": None,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0,
                                "mrope_section": [4, 6, 6]}}  # fmt: skip
    vision = {"depth": 1, "embed_dim": 32, "hidden_size": 64, "num_heads": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = Qwen2VLModel(Qwen2VLConfig(text_config=text, vision_config=vision))
    types, mask, grids = _mrope_inputs()
    images, videos = grids[:2], grids[2:]
    input_ids = torch.ones_like(types)  # read for their shape only

    def peer() -> object:
        return model.get_rope_index(
            input_ids, types, image_grid_thw=images, video_grid_thw=videos, attention_mask=mask
        )

    def ours() -> object:
        return posenc.multimodal_positions(
            types, image_grid_thw=images, video_grid_thw=videos, attention_mask=mask,
            spatial_merge_size=2, text_after_vision="spatial",
        )  # fmt: skip

    return [
        ("hf", "Qwen2VLModel.get_rope_index", peer),
        ("posenc", "posenc multimodal_positions", ours),
    ]


def flux() -> Cases:
    from diffusers.models.transformers.transformer_flux import FluxPosEmbed

    axes = (16, 56, 56)
    peer = FluxPosEmbed(theta=10_000, axes_dim=list(axes))
    rope = posenc.RotaryEmbedding(128, layout="interleaved", axes=axes)
    text = torch.zeros(3, 512, dtype=torch.long)
    image = torch.cat([torch.zeros(1, 64 * 64, dtype=torch.long), posenc.grid_positions(64, 64)])
    ids = torch.cat([text, image], dim=1)  # (3, L); diffusers takes (L, 3)
    their_ids = ids.T.contiguous()
    length = ids.shape[1]

    def ours() -> object:
        return rope.cos_sin(length, positions=ids)

    return [
        ("diffusers", "diffusers FluxPosEmbed", lambda: peer(their_ids)),
        ("posenc", "posenc RotaryEmbedding.cos_sin, 3 axes", ours),
    ]
