"""Positions on axes against the peers' own code: diffusers' multi-axis rotaries and
Hugging Face's Qwen-VL rotaries, ``get_rope_index`` and DeepSeek-V3's attention scale.

Every peer function is imported and called on inputs the tests construct; the models
are built from tiny configs, nothing is downloaded. Each test reports the largest
difference it finds (printed after the run). The peers that compute in float32
(HunyuanVideo's and Qwen-Image's frequencies, Hugging Face's text and vision rotaries)
differ from posenc's float64 phases by their own rounding, which grows with the
position; the position ids must agree exactly.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from posenc import (
    RotaryEmbedding,
    apply_rotary,
    grid_positions,
    multimodal_positions,
    rope_attention_scale,
)

Report = Callable[[str], None]


def _max(a: Tensor, b: Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def _pairs(table: Tensor, layout: str) -> Tensor:
    """One value per pair from a peer's table of one value per feature."""
    return table[..., ::2] if layout == "interleaved" else table[..., : table.shape[-1] // 2]


# -- diffusers ----------------------------------------------------------------------------


def test_flux_pos_embed_and_apply_rotary_emb(peer_report: Report) -> None:
    from diffusers.models.embeddings import apply_rotary_emb
    from diffusers.models.transformers.transformer_flux import FluxPosEmbed

    axes = (16, 56, 56)
    peer = FluxPosEmbed(theta=10_000, axes_dim=list(axes))
    rope = RotaryEmbedding(128, layout="interleaved", axes=axes)
    # FLUX's ids: 12 text tokens at (0, 0, 0), then a 24 × 32 latent grid at (0, h, w).
    text = torch.zeros(3, 12, dtype=torch.long)
    image = torch.cat([torch.zeros(1, 24 * 32, dtype=torch.long), grid_positions(24, 32)])
    ids = torch.cat([text, image], dim=1)  # (A, L); diffusers' ids are its transpose
    cos, sin = peer(ids.T)
    ours_cos, ours_sin = rope.cos_sin(ids.shape[1], positions=ids)
    table = max(_max(ours_cos, cos[:, ::2]), _max(ours_sin, sin[:, ::2]))
    x = torch.randn(1, 2, ids.shape[1], 128)
    theirs = apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=-1)
    rotation = _max(rope(x, positions=ids), theirs)
    peer_report(f"FluxPosEmbed (16, 56, 56): tables {table:.2e}, rotation {rotation:.2e}")
    assert table <= 2**-24
    assert rotation <= 4e-6


def test_hunyuan_video_rotary_pos_embed(peer_report: Report) -> None:
    from diffusers.models.transformers.transformer_hunyuan_video import (
        HunyuanVideoRotaryPosEmbed,
    )

    peer = HunyuanVideoRotaryPosEmbed(patch_size=2, patch_size_t=1, rope_dim=[16, 56, 56])
    latents = torch.zeros(1, 4, 5, 16, 24)  # 5 frames of 8 × 12 patches
    cos, sin = peer(latents)
    rope = RotaryEmbedding(128, base=256.0, layout="interleaved", axes=(16, 56, 56))
    positions = grid_positions(5, 8, 12)
    ours_cos, ours_sin = rope.cos_sin(positions.shape[1], positions=positions)
    table = max(_max(ours_cos, cos[:, ::2]), _max(ours_sin, sin[:, ::2]))
    peer_report(f"HunyuanVideoRotaryPosEmbed (base 256, float32 freqs): tables {table:.2e}")
    assert table <= 2e-6  # its frequencies are float32: a few float32 ulps at these positions


def test_wan_rotary_pos_embed(peer_report: Report) -> None:
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    peer = WanRotaryPosEmbed(attention_head_dim=128, patch_size=(1, 2, 2), max_seq_len=1024)
    cos, sin = peer(torch.zeros(1, 4, 3, 20, 16))  # 3 frames of 10 × 8 patches
    axes = (peer.t_dim, peer.h_dim, peer.w_dim)
    assert axes == (44, 42, 42)
    rope = RotaryEmbedding(128, layout="interleaved", axes=axes)
    positions = grid_positions(3, 10, 8)
    ours_cos, ours_sin = rope.cos_sin(positions.shape[1], positions=positions)
    table = max(_max(ours_cos, cos[0, :, 0, ::2]), _max(ours_sin, sin[0, :, 0, ::2]))
    peer_report(f"WanRotaryPosEmbed (44, 42, 42): tables {table:.2e}")
    assert table <= 2**-24


def test_qwen_image_rope_with_negative_positions(peer_report: Report) -> None:
    from diffusers.models.transformers.transformer_qwenimage import QwenEmbedRope

    peer = QwenEmbedRope(theta=10_000, axes_dim=[16, 56, 56], scale_rope=True)
    frames, h, w, text = 1, 9, 12, 7
    image, words = peer([(frames, h, w)], device=torch.device("cpu"), max_txt_seq_len=text)
    rope = RotaryEmbedding(128, layout="interleaved", axes=(16, 56, 56))
    # scale_rope centres the image: rows from -(h - h // 2), columns from -(w - w // 2);
    # the text starts past the image's largest half, on every axis.
    centred = grid_positions(frames, h, w, offset=(0, -(h - h // 2), -(w - w // 2)))
    assert int(centred.min()) < 0
    ours_cos, ours_sin = rope.cos_sin(centred.shape[1], positions=centred)
    table = max(_max(ours_cos, image.real), _max(ours_sin, image.imag))
    cos_t, sin_t = rope.cos_sin(text, offset=max(h // 2, w // 2))
    table_text = max(_max(cos_t, words.real), _max(sin_t, words.imag))
    peer_report(
        f"QwenEmbedRope (scale_rope, negative positions, float32 freqs): image tables "
        f"{table:.2e}, text tables {table_text:.2e}"
    )
    assert table <= 2e-6
    assert table_text <= 2e-6


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_get_1d_rotary_pos_embed_per_axis_and_apply_rotary_emb(
    layout: str, peer_report: Report
) -> None:
    # A multi-axis table composed of the peer's per-axis tables, as FLUX (interleaved)
    # does; for the half layout, the peer's per-axis pair values concatenated and then
    # repeated over the two halves, the form its use_real_unbind_dim=-2 rotates.
    from diffusers.models.embeddings import apply_rotary_emb, get_1d_rotary_pos_embed

    axes = (8, 12, 12)
    positions = torch.randint(-40, 3000, (3, 50))
    cos_parts, sin_parts = [], []
    for a, d in enumerate(axes):
        cos, sin = get_1d_rotary_pos_embed(
            d, positions[a], use_real=True, repeat_interleave_real=layout == "interleaved",
            freqs_dtype=torch.float64,
        )  # fmt: skip
        cos_parts.append(cos if layout == "interleaved" else cos[:, : d // 2])
        sin_parts.append(sin if layout == "interleaved" else sin[:, : d // 2])
    cos, sin = torch.cat(cos_parts, -1), torch.cat(sin_parts, -1)
    if layout == "half":
        cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    x = torch.randn(2, 3, 50, 32)
    unbind = -1 if layout == "interleaved" else -2
    theirs = apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=unbind)
    rope = RotaryEmbedding(32, layout=layout, axes=axes)  # type: ignore[arg-type]
    rotation = _max(rope(x, positions=positions), theirs)
    table = _max(rope.cos_sin(50, positions=positions)[0], _pairs(cos, layout))
    peer_report(
        f"get_1d_rotary_pos_embed + apply_rotary_emb on 3 axes ({layout}): tables "
        f"{table:.2e}, rotation {rotation:.2e}"
    )
    assert table <= 2**-24
    assert rotation <= 4e-6


# -- Hugging Face: the rotaries -----------------------------------------------------------


def _quiet() -> Any:
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("ignore")
    return ctx


TEXT = {
    "vocab_size": 64,
    "hidden_size": 64,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "bos_token_id": None,
    "eos_token_id": None,
}
QWEN2_ROPE = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [4, 6, 6]}
QWEN3_ROPE = {
    "rope_type": "default",
    "rope_theta": 5_000_000.0,
    "mrope_section": [6, 5, 5],
    "mrope_interleaved": True,
}


def qwen2_vl(rope: dict[str, Any] = QWEN2_ROPE) -> Any:
    from transformers import Qwen2VLConfig

    vision = {"depth": 1, "embed_dim": 32, "hidden_size": 64, "num_heads": 2}
    return Qwen2VLConfig(text_config={**TEXT, "rope_parameters": rope}, vision_config=vision)


def qwen2_5_vl(rope: dict[str, Any] = QWEN2_ROPE) -> Any:
    from transformers import Qwen2_5_VLConfig

    vision = {"depth": 1, "hidden_size": 32, "out_hidden_size": 64, "num_heads": 2,
              "intermediate_size": 16, "tokens_per_second": 2}  # fmt: skip
    return Qwen2_5_VLConfig(text_config={**TEXT, "rope_parameters": rope}, vision_config=vision)


def qwen3_vl(rope: dict[str, Any] = QWEN3_ROPE) -> Any:
    from transformers import Qwen3VLConfig

    vision = {"depth": 1, "hidden_size": 32, "out_hidden_size": 64, "num_heads": 2,
              "intermediate_size": 16, "num_position_embeddings": 16}  # fmt: skip
    text = {**TEXT, "rope_parameters": rope, "head_dim": 32}
    return Qwen3VLConfig(text_config=text, vision_config=vision)


def _text_rotary(model: str, rope: dict[str, Any]) -> Any:
    if model == "qwen2_vl":
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

        return Qwen2VLRotaryEmbedding(qwen2_vl(rope).text_config)
    if model == "qwen2_5_vl":
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
            Qwen2_5_VLRotaryEmbedding,
        )

        return Qwen2_5_VLRotaryEmbedding(qwen2_5_vl(rope).text_config)
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding

    return Qwen3VLTextRotaryEmbedding(qwen3_vl(rope).text_config)


@pytest.mark.parametrize(
    ("model", "rope"),
    [
        ("qwen2_vl", QWEN2_ROPE),
        ("qwen2_5_vl", QWEN2_ROPE),
        ("qwen3_vl", QWEN3_ROPE),
        ("qwen2_vl", {**QWEN2_ROPE, "rope_type": "linear", "factor": 2.0}),
        (
            "qwen3_vl",
            {
                **QWEN3_ROPE,
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 1024,
            },
        ),
    ],
    ids=["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen2_vl-linear", "qwen3_vl-yarn"],
)
def test_qwen_vl_text_rotary(model: str, rope: dict[str, Any], peer_report: Report) -> None:
    from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb

    peer = _text_rotary(model, rope)
    ours = RotaryEmbedding(
        32, base=rope["rope_theta"], scaling={**rope, "max_position_embeddings": 4096}
    )
    positions = torch.randint(0, 40, (3, 2, 30))  # near 0: float32 phases are still good
    x = torch.randn(2, 2, 30, 32)
    cos, sin = peer(x, positions)
    ours_cos, ours_sin = ours.cos_sin(30, positions=positions, batch=2)
    table = max(_max(ours_cos, cos[..., :16]), _max(ours_sin, sin[..., :16]))
    theirs, _ = apply_rotary_pos_emb(x, x, cos, sin)
    rotation = _max(ours(x, positions=positions), theirs)
    # Text only: Hugging Face's (B, L) position ids, expanded to three equal streams.
    text = torch.arange(30).expand(2, 30)
    cos_text, _ = peer(x, text)
    text_table = _max(ours.cos_sin(30, positions=text, batch=2)[0], cos_text[..., :16])
    peer_report(
        f"{type(peer).__name__} ({rope['rope_type']}): tables {table:.2e}, rotation "
        f"{rotation:.2e}, text-only tables {text_table:.2e}"
    )
    assert max(table, text_table) <= 4e-6
    assert rotation <= 2e-5


def test_interleaved_sections_short_of_the_pairs_leave_the_rest_to_t(
    peer_report: Report,
) -> None:
    # A head of 72 with [8, 12, 12] (timm's GenLIP): 32 of 36 pairs in sections. Hugging
    # Face's interleaved recomposition_frequencies leaves the 4 left over with t.
    from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding

    rope = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [8, 12, 12],
            "mrope_interleaved": True}  # fmt: skip
    peer = Qwen3VLTextRotaryEmbedding(
        Qwen3VLTextConfig(**{**TEXT, "rope_parameters": rope, "head_dim": 72})
    )
    ours = RotaryEmbedding(72, base=1_000_000.0, scaling=rope)
    positions = torch.randint(0, 40, (3, 2, 30))  # each axis its own: the owner shows
    x = torch.randn(2, 2, 30, 72)
    cos, sin = peer(x, positions)
    ours_cos, ours_sin = ours.cos_sin(30, positions=positions, batch=2)
    table = max(_max(ours_cos, cos[..., :36]), _max(ours_sin, sin[..., :36]))
    theirs, _ = apply_rotary_pos_emb(x, x, cos, sin)
    rotation = _max(ours(x, positions=positions), theirs)
    # which axis turns each pair in the peer: move one axis, see which pairs change
    owner = torch.full((36,), -1)
    for axis in range(3):
        moved = positions.clone()
        moved[axis] += 1000
        owner[(peer(x, moved)[1] != sin)[..., :36].flatten(0, -2).any(0)] = axis
    peer_report(
        f"{type(peer).__name__}, head 72 with sections [8, 12, 12]: tables {table:.2e}, "
        f"rotation {rotation:.2e}"
    )
    assert table <= 4e-6
    assert rotation <= 2e-5
    assert owner.tolist() == list(ours._config.pair_axes() or ())
    # h and w keep their 12 each, t takes the other 12: its 8 and the 4 left over
    assert torch.bincount(owner).tolist() == [12, 12, 12]


def test_chunked_sections_short_of_the_pairs_are_refused_by_both() -> None:
    # Hugging Face's chunked recomposition splits the pairs by the sections, and torch's
    # split refuses sizes that do not sum to them; posenc refuses the config by name.
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    rope = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [8, 12, 12]}
    peer = Qwen2VLRotaryEmbedding(qwen2_vl(rope).text_config.__class__(
        **{**TEXT, "hidden_size": 144, "rope_parameters": rope}
    ))  # fmt: skip
    with pytest.raises(RuntimeError, match="split_with_sizes expects split_sizes to sum"):
        peer(torch.randn(1, 2, 5, 72), torch.zeros(3, 1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"mrope_section.*summing to the rotated pairs, 36"):
        RotaryEmbedding(72, base=1_000_000.0, scaling=rope)


def test_qwen2_vl_vision_rotary_is_axial(peer_report: Report) -> None:
    from transformers.models.qwen2_vl.modeling_qwen2_vl import (
        Qwen2VLVisionRotaryEmbedding,
        apply_rotary_pos_emb_vision,
    )
    from transformers.vision_utils import get_vision_position_ids

    vision = qwen2_vl().vision_config
    peer = Qwen2VLVisionRotaryEmbedding(vision)
    head_dim = vision.embed_dim // vision.num_heads  # 16
    grids = torch.tensor([[1, 8, 12], [2, 4, 6]])
    ids = get_vision_position_ids(grids, vision.spatial_merge_size)  # (N, 2): (h, w)
    tokens = ids.shape[0]
    cos, sin = peer(torch.zeros(tokens, head_dim), ids)
    ours = RotaryEmbedding(head_dim, axes=(head_dim // 2, head_dim // 2))
    ours_cos, ours_sin = ours.cos_sin(tokens, positions=ids.T)
    table = max(_max(ours_cos, cos[:, : head_dim // 2]), _max(ours_sin, sin[:, : head_dim // 2]))
    q = torch.randn(tokens, 2, head_dim)  # (N, heads, D), the vision tower's layout
    theirs, _ = apply_rotary_pos_emb_vision(q, q, cos, sin)
    # (heads, N, D) with 2 heads on 2 axes: (2, N) positions could be either; (A, 1, N).
    mine = ours(q.transpose(0, 1), positions=ids.T.unsqueeze(1)).transpose(0, 1)
    rotation = _max(mine, theirs)
    peer_report(
        f"Qwen2VLVisionRotaryEmbedding (axial, h then w): tables {table:.2e}, "
        f"rotation {rotation:.2e}"
    )
    assert table <= 2e-6
    assert rotation <= 1e-5


# -- Hugging Face: get_rope_index -------------------------------------------------------


def _model(kind: str) -> Any:
    ctx = _quiet()
    try:
        if kind == "qwen2_vl":
            from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

            return Qwen2VLModel(qwen2_vl())
        if kind == "qwen2_5_vl":
            from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

            return Qwen2_5_VLModel(qwen2_5_vl())
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

        return Qwen3VLModel(qwen3_vl())
    finally:
        ctx.__exit__(None, None, None)


T, I, V = 0, 1, 2  # noqa: E741


def _row(*runs: tuple[int, int]) -> list[int]:
    return [kind for kind, n in runs for _ in range(n)]


def _batch(rows: list[list[int]], left: bool = True) -> tuple[Tensor, Tensor]:
    """Token types and the attention mask of rows padded to one length (left or right)."""
    width = max(map(len, rows))
    types = torch.zeros(len(rows), width, dtype=torch.int32)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for b, row in enumerate(rows):
        where = slice(width - len(row), width) if left else slice(0, len(row))
        types[b, where] = torch.tensor(row, dtype=torch.int32)
        mask[b, where] = 1
    return types, mask


# Grids (t, h, w) of patches before the 2 × 2 merge: an image of 1 × 8 × 12 gives 24
# tokens, 1 × 4 × 4 gives 4, a video of 3 × 4 × 8 gives 24 (8 a frame).
CASES: dict[str, dict[str, Any]] = {
    "text only": {"rows": [_row((T, 9))]},
    "one image": {"rows": [_row((T, 3), (I, 24), (T, 4))], "images": [[1, 8, 12]]},
    "two images": {
        "rows": [_row((T, 2), (I, 24), (T, 3), (I, 4), (T, 2))],
        "images": [[1, 8, 12], [1, 4, 4]],
    },
    "a video": {"rows": [_row((T, 2), (V, 24), (T, 3))], "videos": [[3, 4, 8]]},
    "mixed": {
        "rows": [_row((T, 2), (I, 4), (T, 2), (V, 24), (T, 3))],
        "images": [[1, 4, 4]],
        "videos": [[3, 4, 8]],
    },
    "left-padded batch": {
        "rows": [_row((T, 2), (I, 24), (T, 4)), _row((T, 3), (I, 4), (T, 1)), _row((T, 6))],
        "images": [[1, 8, 12], [1, 4, 4]],
    },
    "right-padded batch with videos": {
        "rows": [_row((T, 1), (V, 24), (T, 2)), _row((T, 2), (V, 8), (T, 5))],
        "videos": [[3, 4, 8], [2, 4, 4]],
        "left": False,
    },
    # t > max(h, w) / m: 8 frames of 2 × 2 tokens (the two rules differ from here on)
    "a long video": {"rows": [_row((T, 2), (V, 32), (T, 3))], "videos": [[8, 4, 4]]},
    "a video last, an image first": {
        "rows": [_row((T, 1), (I, 4), (T, 2), (V, 32)), _row((T, 2), (I, 6), (T, 3))],
        "images": [[1, 4, 4], [1, 4, 6]],
        "videos": [[8, 4, 4]],
    },
    "left-padded batch of long videos": {
        "rows": [_row((T, 3), (V, 12), (T, 2), (V, 12), (T, 1)), _row((T, 2), (V, 20), (T, 4))],
        "videos": [[6, 4, 2], [3, 4, 4], [5, 4, 4]],
    },
}


def _timestamps(case: dict[str, Any]) -> dict[str, Any]:
    """Qwen3-VL's form of a case: each video frame between text (its timestamp)."""
    frames = iter([g for g in case.get("videos", []) for _ in range(g[0])])
    rows = []
    for row in case["rows"]:
        out, i = [], 0
        while i < len(row):
            if row[i] != V:
                out.append(row[i])
                i += 1
                continue
            j = i
            while j < len(row) and row[j] == V:
                j += 1
            left = j - i
            while left:
                _, h, w = next(frames)
                per_frame = (h // 2) * (w // 2)
                out += [T, T] + [V] * per_frame  # "<t> <vision_start>", then the frame
                left -= per_frame
            i = j
        rows.append(out)
    return {**case, "rows": rows}


@pytest.mark.parametrize("kind", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
@pytest.mark.parametrize("case", list(CASES))
def test_get_rope_index(kind: str, case: str, peer_report: Report) -> None:
    spec = _timestamps(CASES[case]) if kind == "qwen3_vl" else CASES[case]
    types, mask = _batch(spec["rows"], spec.get("left", True))
    images = torch.tensor(spec["images"]) if "images" in spec else None
    videos = torch.tensor(spec["videos"]) if "videos" in spec else None
    model = _model(kind)
    peer_kwargs: dict[str, Any] = {}
    ours_kwargs: dict[str, Any] = {}
    if kind == "qwen2_5_vl" and videos is not None:
        seconds = torch.tensor([0.5, 1.5, 1.25][: len(videos)])  # 1, 3, 2.5 t a frame
        peer_kwargs["second_per_grid_ts"] = seconds
        ours_kwargs = {"temporal": "seconds", "tokens_per_second": 2,
                       "second_per_grid_ts": seconds}  # fmt: skip
    elif kind == "qwen2_5_vl":
        ours_kwargs = {"temporal": "seconds", "tokens_per_second": 2}
    elif kind == "qwen3_vl":
        ours_kwargs = {"temporal": "timestamps"}
    input_ids = torch.ones_like(types, dtype=torch.long)  # read for their shape only
    theirs, their_deltas = model.get_rope_index(
        input_ids, types, image_grid_thw=images, video_grid_thw=videos,
        attention_mask=mask, **peer_kwargs,
    )  # fmt: skip
    ours, deltas = multimodal_positions(
        types, image_grid_thw=images, video_grid_thw=videos, attention_mask=mask,
        spatial_merge_size=2, text_after_vision="spatial", **ours_kwargs,
    )  # fmt: skip
    real = mask.bool().expand(3, -1, -1)
    difference = int((ours - theirs).abs()[real].max())
    peer_report(
        f"{type(model).__name__}.get_rope_index, {case}: largest difference {difference} "
        f"(deltas {deltas.flatten().tolist()})"
    )
    assert torch.equal(ours[real], theirs[real])
    assert torch.equal(deltas, their_deltas)


# -- transformers 5.2's get_rope_index: text_after_vision="max" -----------------------------

LEGACY = Path(__file__).with_name("transformers_5_2_rope_index.py")
LEGACY_KINDS = ("qwen2_vl", "qwen2_5_vl")
# transformers 5.2's Qwen2.5-VL casts second_per_grid_ts to int64 before the product
# (`torch.as_tensor(second_per_grid_t, dtype=range_tensor.dtype)`: 0.5 s -> 0), a bug
# of that release alone (5.24 and vLLM multiply the float): whole seconds here, the
# fractions against the rule in tests/test_axes.py and against 5.24 above.
LEGACY_SECONDS = [1.0, 2.0, 3.0]


def _input_ids(types: Tensor, mask: Tensor) -> Tensor:
    """Token ids for 5.2's get_rope_index, which reads them: a vision start before each run."""
    ids = torch.where(types == I, 5, torch.where(types == V, 6, 1)) * mask
    starts = (types != T) & (torch.nn.functional.pad(types, (1, 0))[:, :-1] != types)
    before = torch.nn.functional.pad(starts, (0, 1))[:, 1:]
    assert bool((types[before] == T).all()), "each vision run follows a text token"
    return torch.where(before, 4, ids)


def _legacy_case(kind: str, case: str) -> dict[str, Any]:
    spec = CASES[case]
    types, mask = _batch(spec["rows"], spec.get("left", True))
    videos = spec.get("videos")
    seconds = LEGACY_SECONDS[: len(videos)] if kind == "qwen2_5_vl" and videos else None
    return {
        "kind": kind, "types": types, "mask": mask, "images": spec.get("images"),
        "videos": videos, "seconds": seconds,
    }  # fmt: skip


@pytest.fixture(scope="module")
def legacy_rope_index() -> dict[tuple[str, str], dict[str, Any]]:
    """transformers 5.2's get_rope_index on every case, run once in a subprocess."""
    where = os.environ.get("POSENC_TRANSFORMERS_5_2", "")
    if not (Path(where) / "transformers" / "__init__.py").is_file():
        pytest.fail(
            "POSENC_TRANSFORMERS_5_2 must name the directory transformers 5.2 is installed "
            f"in (`nox -s peers` installs it and sets it), got {where!r}"
        )
    keys = [(kind, case) for kind in LEGACY_KINDS for case in CASES]
    cases = []
    for kind, case in keys:
        spec = _legacy_case(kind, case)
        cases.append({
            "kind": kind, "input_ids": _input_ids(spec["types"], spec["mask"]).tolist(),
            "attention_mask": spec["mask"].tolist(), "images": spec["images"],
            "videos": spec["videos"], "seconds": spec["seconds"],
        })  # fmt: skip
    run = subprocess.run(
        [sys.executable, str(LEGACY), where], input=json.dumps(cases), capture_output=True,
        text=True, check=False, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    return dict(zip(keys, json.loads(run.stdout), strict=True))


@pytest.mark.parametrize("kind", LEGACY_KINDS)
@pytest.mark.parametrize("case", list(CASES))
def test_text_after_vision_max_is_transformers_5_2s_get_rope_index(
    kind: str, case: str, legacy_rope_index: dict[tuple[str, str], Any], peer_report: Report
) -> None:
    spec = _legacy_case(kind, case)
    theirs_all = legacy_rope_index[kind, case]
    assert theirs_all["version"] == "5.2.0"
    theirs = torch.tensor(theirs_all["positions"])
    kwargs: dict[str, Any] = {"temporal": "frames"}
    if kind == "qwen2_5_vl":
        kwargs = {"temporal": "seconds", "tokens_per_second": 2}
        if spec["seconds"] is not None:
            kwargs["second_per_grid_ts"] = torch.tensor(spec["seconds"])
    grids = {
        "image_grid_thw": None if spec["images"] is None else torch.tensor(spec["images"]),
        "video_grid_thw": None if spec["videos"] is None else torch.tensor(spec["videos"]),
    }
    types, mask = spec["types"], spec["mask"]
    ours, deltas = multimodal_positions(types, attention_mask=mask, **grids, **kwargs)
    spatial, _ = multimodal_positions(
        types, attention_mask=mask, text_after_vision="spatial", **grids, **kwargs
    )
    real = mask.bool().expand(3, -1, -1)
    rules_differ = not torch.equal(ours[real], spatial[real])
    # 5.2's delta is the largest position + 1 minus the padded length (clamped at 0 for
    # Qwen2-VL); posenc's, minus the real length: the same once that is accounted for.
    shifted = deltas.flatten() + mask.sum(-1) - mask.shape[-1]
    if kind == "qwen2_vl":
        shifted = shifted.clamp(min=0)
    peer_report(
        f"transformers 5.2 {kind} get_rope_index, {case}: largest difference "
        f"{int((ours - theirs).abs()[real].max())}; 'spatial' would differ by "
        f"{int((spatial - theirs).abs()[real].max())} (deltas {deltas.flatten().tolist()})"
    )
    assert torch.equal(ours[real], theirs[real])
    assert shifted.tolist() == theirs_all["deltas"]
    if case in ("a long video", "left-padded batch of long videos"):
        assert rules_differ  # the peer tells the two rules apart on these cases


def test_qwen2_5_vl_seconds_are_float32_products(peer_report: Report) -> None:
    # Hugging Face multiplies the frame index by tokens_per_second × second_per_grid_ts
    # in float32 and truncates; the models were trained on those ids. At 5/6 s a grid
    # and 2 tokens a second, the float32 product rounds 2.9999998 up to 3 (etc.),
    # which a float64 product of float32's 5/6 would truncate to one step lower.
    model = _model("qwen2_5_vl")
    frames = 64
    types, mask = _batch([_row((T, 1), (V, 4 * frames), (T, 1))])
    videos = torch.tensor([[frames, 4, 4]])
    for seconds in (torch.tensor([5 / 6]), torch.tensor([5 / 6], dtype=torch.float64)):
        theirs, _ = model.get_rope_index(
            torch.ones_like(types, dtype=torch.long), types, video_grid_thw=videos,
            second_per_grid_ts=seconds, attention_mask=mask,
        )  # fmt: skip
        ours, _ = multimodal_positions(
            types, video_grid_thw=videos, temporal="seconds", tokens_per_second=2,
            second_per_grid_ts=seconds, text_after_vision="spatial",
        )  # fmt: skip
        t = ours[0, 0, 1 : 1 + 4 * frames : 4] - 1
        wide = [math.floor(i * 2 * float(seconds[0])) for i in range(frames)]
        lower = sum(int(a) != b for a, b in zip(t.tolist(), wide, strict=True))
        peer_report(
            f"Qwen2_5_VLModel.get_rope_index, {frames} frames at 5/6 s ({seconds.dtype}): "
            f"largest difference {int((ours - theirs).abs().max())}; a float64 product "
            f"would move {lower} frames"
        )
        assert torch.equal(ours, theirs)


# -- DeepSeek-V3 ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rope",
    [
        {
            "rope_type": "yarn",
            "factor": 40.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
        },
        {
            "rope_type": "yarn",
            "factor": 16.0,
            "mscale": 0.707,
            "mscale_all_dim": 0.707,
            "original_max_position_embeddings": 4096,
        },
        {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096},
        {"rope_type": "default"},
    ],
    ids=["v3", "mscale-0.707", "no-mscale_all_dim", "default"],
)
def test_deepseek_v3_attention_scale(rope: dict[str, Any], peer_report: Report) -> None:
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    config = DeepseekV3Config(
        vocab_size=32, hidden_size=64, intermediate_size=32, moe_intermediate_size=16,
        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=16,
        kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
        n_routed_experts=2, num_experts_per_tok=1, rope_parameters={**rope, "rope_theta": 1e4},
        bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    attention = DeepseekV3Attention(config, layer_idx=0)
    ours = rope_attention_scale(24, rope)
    difference = abs(ours - attention.scaling)
    peer_report(
        f"DeepseekV3Attention.scaling ({rope['rope_type']}, mscale_all_dim="
        f"{rope.get('mscale_all_dim')}): {attention.scaling:.9f}, difference {difference:.1e}"
    )
    assert difference <= 1e-15 * ours
    assert math.isclose(ours, attention.scaling, rel_tol=1e-15)


def test_apply_rotary_matches_the_hf_tables_it_documents() -> None:
    # The widened tables Hugging Face's apply_rotary_pos_emb takes are posenc's repeated.
    rope = RotaryEmbedding(32, scaling={"rope_type": "default", "mrope_section": [4, 6, 6]})
    positions = torch.randint(0, 50, (3, 1, 10))
    cos, sin = rope.cos_sin(10, positions=positions, batch=1)
    x = torch.randn(1, 10, 32)
    assert torch.equal(apply_rotary(x, cos, sin), rope(x, positions=positions))
