"""Fractional positions against the vision towers' own rotaries: timm's EVA-02 with
``ref_feat_shape``, timm's ``in_pixels`` grids, and DINOv3 in transformers.

Each peer places its patches at fractions (t/2, linspace(-1, 1), normalised patch
centres) and computes the tables in float32. posenc takes those positions as floating
tensors: the phase is the float64 product of the position and the frequency, rounded
once. Both are measured against a float64 reference of the same recipe; posenc must be
the closer one, and the errors are reported after the run.

timm is loaded as files: its package imports torchvision, whose wheels fail to import
on torch 2.13, while ``timm/layers/pos_embed_sincos.py`` needs only torch and three
small modules beside it (``nox -s peers`` installs timm without its dependencies).
"""

from __future__ import annotations

import importlib.util
import math
import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor

from posenc import RotaryEmbedding, apply_rotary, grid_positions

Report = Callable[[str], None]
HEAD_DIM = 64


def _timm_pos_embed_sincos() -> types.ModuleType:
    """``timm.layers.pos_embed_sincos``, loaded without importing timm (or torchvision)."""
    spec = importlib.util.find_spec("timm")
    if spec is None or spec.submodule_search_locations is None:
        pytest.skip("timm is not installed (nox -s peers installs it with --no-deps)")
    layers = Path(next(iter(spec.submodule_search_locations))) / "layers"
    package = types.ModuleType("_timm_layers")
    package.__path__ = [str(layers)]  # its relative imports (._fx, .grid) resolve here
    sys.modules.setdefault("_timm_layers", package)
    name = "_timm_layers.pos_embed_sincos"
    if name in sys.modules:
        return sys.modules[name]
    file_spec = importlib.util.spec_from_file_location(name, layers / "pos_embed_sincos.py")
    assert file_spec is not None
    assert file_spec.loader is not None
    module = importlib.util.module_from_spec(file_spec)
    sys.modules[name] = module
    file_spec.loader.exec_module(module)
    return module


def _reference_tables(positions: np.ndarray, freqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 cos and sin of positions (A, L) × the frequencies of each axis (A, K): (L, A·K)."""
    angle = np.concatenate([positions[a][:, None] * freqs[a] for a in range(len(freqs))], -1)
    return np.cos(angle), np.sin(angle)


def _reference_rotation(x: Tensor, cos: np.ndarray, sin: np.ndarray, layout: str) -> np.ndarray:
    xs = x.double().numpy()
    out = xs.copy()
    h = cos.shape[-1]
    first = np.arange(h) if layout == "half" else 2 * np.arange(h)
    second = first + h if layout == "half" else first + 1
    out[..., first] = xs[..., first] * cos - xs[..., second] * sin
    out[..., second] = xs[..., second] * cos + xs[..., first] * sin
    return out


def _err(a: Tensor | np.ndarray, b: np.ndarray) -> float:
    values = a.double().numpy() if isinstance(a, Tensor) else a
    return float(np.abs(values - b).max())


def _compare(
    report: Report,
    name: str,
    ours: tuple[Tensor, Tensor],
    theirs: tuple[Tensor, Tensor],
    reference: tuple[np.ndarray, np.ndarray],
) -> tuple[float, float]:
    errors = [max(_err(t[0], reference[0]), _err(t[1], reference[1])) for t in (ours, theirs)]
    peer = max(
        _err(ours[0], theirs[0].double().numpy()), _err(ours[1], theirs[1].double().numpy())
    )
    report(
        f"{name}: cos/sin vs float64: posenc {errors[0]:.2e}, peer {errors[1]:.2e}; "
        f"posenc vs peer {peer:.2e}"
    )
    return errors[0], errors[1]


def test_eva02_ref_feat_shape_positions_are_t_over_2(peer_report: Report) -> None:
    # EVA-02 at 448 px, patch 14: a 32 x 32 grid on a model trained at 16 x 16
    # (ref_feat_shape): timm places patch t at t * 16 / 32 = t / 2 on each axis.
    timm = _timm_pos_embed_sincos()
    peer = timm.RotaryEmbeddingCat(
        HEAD_DIM, in_pixels=False, feat_shape=[32, 32], ref_feat_shape=[16, 16]
    )
    sin_emb, cos_emb = peer.get_embed().chunk(2, -1)  # (N, D) each, interleaved
    theirs = (cos_emb[:, ::2], sin_emb[:, ::2])

    rope = RotaryEmbedding(HEAD_DIM, axes=(HEAD_DIM // 2, HEAD_DIM // 2), layout="interleaved")
    positions = grid_positions(32, 32) / 2  # float32 t / 2, exact
    ours = rope.cos_sin(32 * 32, positions=positions)

    bands = 10_000.0 ** (-np.arange(HEAD_DIM // 4) / (HEAD_DIM // 4))  # timm's freq_bands
    reference = _reference_tables(positions.double().numpy(), np.stack([bands, bands]))
    ours_err, peer_err = _compare(peer_report, "EVA-02 ref_feat_shape", ours, theirs, reference)
    assert ours_err <= 6e-8 < peer_err

    torch.manual_seed(0)
    q = torch.randn(2, 3, 32 * 32, HEAD_DIM)
    rotated = rope(q, positions=positions.unsqueeze(1))  # (A, 1, L): a batch of 2 is not A=2
    want = _reference_rotation(q, *reference, "interleaved")
    peer_q = timm.apply_rot_embed_cat(q, peer.get_embed())
    assert _err(rotated, want) <= _err(peer_q, want)
    assert _err(rotated, want) <= 4 * 2**-24 * float(q.abs().max())
    peer_report(
        f"EVA-02 ref_feat_shape: rotated q vs float64: posenc {_err(rotated, want):.2e}, "
        f"peer {_err(peer_q, want):.2e}"
    )


def test_timm_in_pixels_linspace_grid(peer_report: Report) -> None:
    # in_pixels: coordinates linspace(-1, 1) per axis and "pixel" bands
    # pi * 2**linspace(0, log2(max_res) - 1, K), rising. posenc's ladder falls,
    # base**(-j/K): with base = 2**(c K), c the bands' log2 step, and positions scaled by
    # pi * max_res / 2 (the largest band), pair j of an axis turns as timm's band K-1-j.
    timm = _timm_pos_embed_sincos()
    h, w, max_res, k = 14, 10, 224, HEAD_DIM // 4
    sin_emb, cos_emb = timm.build_rotary_pos_embed([h, w], dim=HEAD_DIM, max_res=max_res)
    theirs = (cos_emb[:, ::2], sin_emb[:, ::2])

    step = (math.log2(max_res) - 1) / (k - 1)
    rope = RotaryEmbedding(
        HEAD_DIM, axes=(2 * k, 2 * k), base=2.0 ** (step * k), layout="interleaved"
    )
    grid = torch.stack(
        torch.meshgrid(
            torch.linspace(-1, 1, h, dtype=torch.float64),
            torch.linspace(-1, 1, w, dtype=torch.float64),
            indexing="ij",
        )
    ).reshape(2, h * w)
    positions = grid * (math.pi * max_res / 2)

    def timm_order(table: Tensor) -> Tensor:  # each axis's pairs, in timm's rising band order
        return table.view(-1, 2, k).flip(-1).reshape(-1, 2 * k)

    cos, sin = rope.cos_sin(h * w, positions=positions)
    ours = (timm_order(cos), timm_order(sin))
    bands = math.pi * 2.0 ** (np.arange(k) * step)
    reference = _reference_tables(grid.numpy(), np.stack([bands, bands]))
    ours_err, peer_err = _compare(peer_report, "timm in_pixels", ours, theirs, reference)
    assert ours_err <= 6e-8 < peer_err

    torch.manual_seed(0)
    q = torch.randn(2, h * w, HEAD_DIM)
    rotated = apply_rotary(q, *ours, layout="interleaved")
    want = _reference_rotation(q, *reference, "interleaved")
    peer_q = timm.apply_rot_embed(q, sin_emb, cos_emb)
    assert _err(rotated, want) <= _err(peer_q, want)
    peer_report(
        f"timm in_pixels: rotated q vs float64: posenc {_err(rotated, want):.2e}, "
        f"peer {_err(peer_q, want):.2e}"
    )


def test_dinov3_patch_centres_normalised_to_minus_one_one(peer_report: Report) -> None:
    # DINOv3: patch centres (i + 0.5) / n mapped to [-1, 1], angle 2 pi c * base**(-4j/D)
    # per axis, tables [y | x] tiled (half layout); prefix tokens are not rotated.
    from transformers import DINOv3ViTConfig
    from transformers.models.dinov3_vit import modeling_dinov3_vit as dino

    h = w = 14
    config = DINOv3ViTConfig(
        hidden_size=HEAD_DIM * 2, num_attention_heads=2, image_size=224, patch_size=16
    )
    peer = dino.DINOv3ViTRopePositionEmbedding(config).eval()  # training draws augmentations
    cos_t, sin_t = peer(torch.zeros(1, 3, 224, 224))
    theirs = (cos_t[:, : HEAD_DIM // 2], sin_t[:, : HEAD_DIM // 2])

    rope = RotaryEmbedding(HEAD_DIM, axes=(HEAD_DIM // 2, HEAD_DIM // 2), base=config.rope_theta)
    sizes = torch.tensor([[h], [w]], dtype=torch.float64)
    centres = (grid_positions(h, w).double() + 0.5) / sizes * 2 - 1
    positions = 2 * math.pi * centres
    ours = rope.cos_sin(h * w, positions=positions)

    bands = config.rope_theta ** (-4.0 * np.arange(HEAD_DIM // 4) / HEAD_DIM)
    reference = _reference_tables(positions.numpy(), np.stack([bands, bands]))
    ours_err, peer_err = _compare(peer_report, "DINOv3", ours, theirs, reference)
    assert ours_err <= 6e-8 < peer_err

    torch.manual_seed(0)
    prefix = 5  # the class token and four registers
    q = torch.randn(1, 2, prefix + h * w, HEAD_DIM)
    k = torch.randn(1, 2, prefix + h * w, HEAD_DIM)
    peer_q, peer_k = dino.apply_rotary_pos_emb(q, k, cos_t, sin_t)
    ours_q = torch.cat((q[..., :prefix, :], rope(q[..., prefix:, :], positions=positions)), -2)
    ours_k = torch.cat((k[..., :prefix, :], rope(k[..., prefix:, :], positions=positions)), -2)
    for mine, theirs_x, x in ((ours_q, peer_q, q), (ours_k, peer_k, k)):
        assert torch.equal(mine[..., :prefix, :], x[..., :prefix, :])
        want = _reference_rotation(x[..., prefix:, :], *reference, "half")
        assert _err(mine[..., prefix:, :], want) <= _err(theirs_x[..., prefix:, :], want)
    want_q = _reference_rotation(q[..., prefix:, :], *reference, "half")
    peer_report(
        f"DINOv3: rotated q vs float64: posenc {_err(ours_q[..., prefix:, :], want_q):.2e}, "
        f"peer {_err(peer_q[..., prefix:, :], want_q):.2e}"
    )
