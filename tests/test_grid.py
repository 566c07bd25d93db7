"""posenc.sincos_2d: the 2-D sin-cos tables of MAE, timm and positional-encodings.

References, in float64 NumPy, written from the published code (no code copied):

* MAE (He et al., "Masked Autoencoders Are Scalable Vision Learners", CVPR 2022),
  facebookresearch/mae, ``util/pos_embed.py``: ``np.meshgrid(grid_w, grid_h)`` puts the
  column coordinate first; ``get_2d_sincos_pos_embed_from_grid`` concatenates the 1-D
  embedding of ``grid[0]`` (the column) and of ``grid[1]`` (the row), each
  ``[sin(pos ω) | cos(pos ω)]`` with ``ω_k = 10000 ** (-k / (D/4))``, ``k < D/4``.
* timm (Wightman, pytorch-image-models), ``timm/layers/pos_embed_sincos.py``,
  ``build_sincos2d_pos_embed`` with its defaults: an ``ij`` grid over ``(H, W)``, bands
  ``temperature ** (-k / (D/4))``, and ``torch.stack([sin, cos], dim=1)`` of the
  ``(HW, 2, D/4)`` angles flattened: ``[sin_h, sin_w, cos_h, cos_w]``.
* positional-encodings (Peter Tatkowski, tatp22/multidim-positional-encoding),
  ``positional_encodings/torch_encodings.py``,
  ``PositionalEncoding2D``: per axis the interleaved sinusoid of width D/2 (``get_emb``
  stacks sin and cos per frequency), the first spatial axis of the input first.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from reference import round_once

from posenc import GRID_CONVENTIONS, sincos_2d

FLOAT32_TOLERANCE = 3e-8


def _frequencies(d_model: int, base: float) -> np.ndarray:
    quarter = d_model // 4
    return np.asarray([base ** (-k / quarter) for k in range(quarter)])


def mae_reference(height: int, width: int, d_model: int, base: float = 10_000.0) -> np.ndarray:
    omega = _frequencies(d_model, base)
    out = np.empty((height * width, d_model))
    for h, w in itertools.product(range(height), range(width)):
        first, second = w * omega, h * omega  # grid[0] is the column coordinate
        out[h * width + w] = np.concatenate(
            [np.sin(first), np.cos(first), np.sin(second), np.cos(second)]
        )
    return out


def timm_reference(height: int, width: int, d_model: int, base: float = 10_000.0) -> np.ndarray:
    bands = _frequencies(d_model, base)
    out = np.empty((height * width, d_model))
    for h, w in itertools.product(range(height), range(width)):
        out[h * width + w] = np.concatenate(
            [np.sin(h * bands), np.sin(w * bands), np.cos(h * bands), np.cos(w * bands)]
        )
    return out


def interleaved_reference(
    height: int, width: int, d_model: int, base: float = 10_000.0
) -> np.ndarray:
    omega = _frequencies(d_model, base)
    out = np.empty((height * width, d_model))
    for h, w in itertools.product(range(height), range(width)):
        row = np.stack([np.sin(h * omega), np.cos(h * omega)], axis=-1).reshape(-1)
        col = np.stack([np.sin(w * omega), np.cos(w * omega)], axis=-1).reshape(-1)
        out[h * width + w] = np.concatenate([row, col])
    return out


REFERENCES = {"mae": mae_reference, "timm": timm_reference, "interleaved": interleaved_reference}
SIZES = [(1, 1, 4), (14, 14, 64), (3, 7, 16), (9, 2, 12), (16, 16, 768)]


@pytest.mark.parametrize("convention", GRID_CONVENTIONS)
@pytest.mark.parametrize(("height", "width", "d_model"), SIZES)
def test_each_convention_equals_its_published_formula(
    convention: str, height: int, width: int, d_model: int
) -> None:
    expected = REFERENCES[convention](height, width, d_model)
    exact = sincos_2d(height, width, d_model, convention=convention, dtype=torch.float64)  # type: ignore[arg-type]
    np.testing.assert_allclose(exact.numpy(), expected, rtol=0, atol=1e-14)
    single = sincos_2d(height, width, d_model, convention=convention)  # type: ignore[arg-type]
    assert single.dtype == torch.float32
    assert float(np.abs(single.double().numpy() - expected).max()) <= FLOAT32_TOLERANCE


def test_base_changes_the_frequencies() -> None:
    got = sincos_2d(4, 5, 16, base=100.0, dtype=torch.float64).numpy()
    np.testing.assert_allclose(got, mae_reference(4, 5, 16, base=100.0), rtol=0, atol=1e-14)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_rounded_once_from_float64(dtype: torch.dtype) -> None:
    exact = sincos_2d(6, 5, 32, dtype=torch.float64)
    assert torch.equal(sincos_2d(6, 5, 32, dtype=dtype), round_once(exact, dtype))


@pytest.mark.parametrize("convention", GRID_CONVENTIONS)
@pytest.mark.parametrize(("height", "width", "d_model"), [(14, 14, 16), (5, 11, 8), (32, 3, 4)])
def test_every_pair_of_cells_gets_a_different_row(
    convention: str, height: int, width: int, d_model: int
) -> None:
    table = sincos_2d(height, width, d_model, convention=convention, dtype=torch.float64)  # type: ignore[arg-type]
    distances = torch.cdist(table, table)
    distances.fill_diagonal_(float("inf"))
    assert float(distances.min()) > 1e-3


def test_dot_product_depends_on_the_displacement_only() -> None:
    # Each frequency contributes cos(Δh ω) + cos(Δw ω): the similarity of two cells
    # depends on their offset (Δh, Δw), not on where they are.
    height, width = 9, 7
    grid = sincos_2d(height, width, 32, dtype=torch.float64).view(height, width, 32)
    sim = torch.einsum("abd,ced->abce", grid, grid)
    for dh, dw in [(0, 1), (2, -3), (-4, 0), (5, 6)]:
        values = [
            sim[h, w, h + dh, w + dw]
            for h in range(height)
            for w in range(width)
            if 0 <= h + dh < height and 0 <= w + dw < width
        ]
        assert torch.allclose(torch.stack(values), values[0], rtol=0, atol=1e-12)


def test_mae_first_half_encodes_the_column() -> None:
    grid = sincos_2d(4, 6, 16).view(4, 6, 16)
    assert torch.equal(grid[:, 3, :8], grid[0, 3, :8].expand(4, 8))  # same column, any row
    assert torch.equal(grid[2, :, 8:], grid[2, 0, 8:].expand(6, 8))  # same row, any column


def test_device_argument() -> None:
    assert sincos_2d(2, 2, 4, device="cpu").device.type == "cpu"
    assert sincos_2d(2, 2, 4, device="meta").device.type == "meta"


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((0, 4, 8), {}, ValueError, "height must be a positive int, got 0"),
        ((4, 2.0, 8), {}, TypeError, "width must be an int"),
        ((4, 4, 6), {}, ValueError, "d_model must be a multiple of 4.*got 6"),
        ((4, 4, 8), {"convention": "vit"}, ValueError, "convention must be one of"),
        ((4, 4, 8), {"dtype": torch.int32}, TypeError, "dtype must be a floating"),
        ((4, 4, 8), {"base": 1.0}, ValueError, "base must be a finite number > 1"),
    ],
)
def test_errors_name_the_argument(args, kwargs, error, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        sincos_2d(*args, **kwargs)
