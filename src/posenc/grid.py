r"""Positions on a 2-D grid: the sin-cos table of image patches (ViT, MAE, DiT).

A vision Transformer cuts an image into a ``height × width`` grid of patches
and reads them as a sequence, row by row. Each patch has two coordinates, its
row ``h`` and its column ``w``, and the 2-D sin-cos encoding gives each
coordinate half of the vector: the 1-D sinusoid of width ``d_model / 2``
(:func:`~posenc.sinusoidal_table`) of ``w`` in one half, of ``h`` in the other.
He et al. (2022, *Masked Autoencoders Are Scalable Vision Learners*) use it
in MAE's encoder and decoder; diffusers' ``get_2d_sincos_pos_embed`` (DiT,
PixArt) computes the same table.

>>> import torch
>>> from posenc import sincos_2d, sinusoidal_table
>>> table = sincos_2d(2, 3, 8)            # 2 rows × 3 columns, d_model 8
>>> table.shape                           # one row per patch, row-major
torch.Size([6, 8])
>>> w = sinusoidal_table(3, 4, layout="concatenated")
>>> h = sinusoidal_table(2, 4, layout="concatenated")
>>> torch.allclose(table[5], torch.cat([w[2], h[1]]), atol=1e-7)  # cell (h=1, w=2)
True
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from . import _checks, _runtime
from .sinusoid import Layout, sinusoidal_table

__all__ = ["GRID_CONVENTIONS", "GridConvention", "sincos_2d"]

GridConvention = Literal["mae", "timm", "interleaved"]
#: The column orders of the 2-D sin-cos table that :func:`sincos_2d` offers.
GRID_CONVENTIONS: tuple[GridConvention, ...] = ("mae", "timm", "interleaved")


def sincos_2d(
    height: int,
    width: int,
    d_model: int,
    *,
    convention: GridConvention = "mae",
    base: float = 10_000.0,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""The 2-D sin-cos encoding of a ``height × width`` grid, one row per cell.

    Cell ``(h, w)`` is row ``h * width + w`` (row-major, the order in which a
    patch embedding flattens an image). Each coordinate is encoded by the
    sinusoid of width ``D/2`` and its ``D/4`` frequencies
    ``base ** (-k / (D/4))``, ``k = 0 .. D/4 - 1``; the conventions differ only
    in where the columns go. Writing ``S_h``, ``C_h`` for the ``D/4`` sines and
    cosines of the row coordinate and ``S_w``, ``C_w`` for the column's:

    - ``"mae"``: ``[S_w, C_w, S_h, C_h]``, the first half encodes the
      **column**. This is MAE's ``util/pos_embed.py`` and diffusers'
      ``get_2d_sincos_pos_embed``. Their code calls the first half ``emb_h``
      and comments that it encodes ``grid_h``, but it is computed from
      ``grid[0]``, and ``np.meshgrid(grid_w, grid_h)`` puts the column
      coordinate there ("here w goes first").
    - ``"timm"``: ``[S_h, S_w, C_h, C_w]``, timm's ``build_sincos2d_pos_embed``
      (``timm/layers/pos_embed_sincos.py``) with its defaults.
    - ``"interleaved"``: each half is the paper's interleaved sinusoid
      (``sin, cos, sin, cos, ...``), the row's first: positional-encodings'
      ``PositionalEncoding2D`` for a ``(B, height, width, D)`` input.

    The table is computed in float64 and rounded once to ``dtype``; positions
    are the integers ``0 .. height - 1`` and ``0 .. width - 1``, never
    rescaled. (diffusers' ``get_2d_sincos_pos_embed`` divides them by
    ``grid_size / base_size``, 16 by default: its table equals this one for
    ``base_size=grid_size``.)

    Args:
        height: Number of rows of the grid.
        width: Number of columns of the grid.
        d_model: Width of the encoding, a multiple of 4.
        convention: ``"mae"``, ``"timm"`` or ``"interleaved"``; see above.
        base: Base of the geometric progression of wavelengths.
        dtype: Floating dtype of the result.
        device: Device of the result (default: torch's default device, the
            CPU unless set).

    Returns:
        Tensor of shape ``(height * width, d_model)``.

    Raises:
        TypeError: a size is not an int, or ``dtype`` is not a floating dtype.
        ValueError: a size is below 1, ``d_model`` is not a multiple of 4,
            ``base <= 1``, or ``convention`` is unknown.

    Shapes:
        - output: ``(height * width, D)``; reshape to ``(height, width, D)`` for
          the grid

    Example:
        >>> import torch
        >>> from posenc import sincos_2d
        >>> grid = sincos_2d(14, 14, 768)         # ViT-B/16 on 224 × 224 images
        >>> grid.shape, grid.dtype
        (torch.Size([196, 768]), torch.float32)
        >>> grid[0, :4], grid[0, 192:196]          # cell (0, 0): sin 0 = 0, cos 0 = 1
        (tensor([0., 0., 0., 0.]), tensor([1., 1., 1., 1.]))

        The other conventions hold the same numbers in another order:

        >>> mae, timm = sincos_2d(3, 5, 16), sincos_2d(3, 5, 16, convention="timm")
        >>> sw, cw, sh, ch = mae.split(4, dim=1)
        >>> torch.equal(timm, torch.cat([sh, sw, ch, cw], dim=1))
        True
    """
    height = _checks.positive_int("height", height)
    width = _checks.positive_int("width", width)
    d_model = _checks.positive_int("d_model", d_model)
    if d_model % 4:
        raise ValueError(
            f"d_model must be a multiple of 4 (a sine and a cosine per frequency, for "
            f"each of two coordinates), got {d_model}"
        )
    convention = _checks.choice("convention", convention, GRID_CONVENTIONS)
    dtype = _checks.floating_dtype("dtype", _runtime.default_dtype(dtype))
    base = _checks.base(base)
    out_device = _runtime.default_device(device)
    shape = (height * width, d_model)
    _runtime.allocation(shape, dtype, out_device, lambda: f"a {height} × {width} grid's table")
    work = _runtime.work_device(out_device)
    half, quarter = d_model // 2, d_model // 4
    layout: Layout = "interleaved" if convention == "interleaved" else "concatenated"
    # Each axis's table rounded once to dtype: the same numbers as the float64 grid
    # rounded once, from two tables far smaller than the grid.
    rows, cols = (
        sinusoidal_table(n, half, base=base, layout=layout, dtype=dtype, device=work)
        for n in (height, width)
    )
    by_row = rows[:, None, :].expand(height, width, half)  # depends on h only
    by_col = cols[None, :, :].expand(height, width, half)  # depends on w only
    if convention == "mae":
        parts = [by_col, by_row]
    elif convention == "timm":
        parts = [by_row[..., :quarter], by_col[..., :quarter]]
        parts += [by_row[..., quarter:], by_col[..., quarter:]]
    else:
        parts = [by_row, by_col]
    table = torch.cat(parts, dim=-1).reshape(shape)
    return table.to(out_device)
