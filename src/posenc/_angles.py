"""The sinusoid's engine: rows of sines and cosines by angle addition, in float64.

:func:`~posenc.sinusoidal_table` chooses the pieces; this module computes them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Literal

import torch
from torch import Tensor

from . import _runtime
from ._rounding import round_into
from .frequencies import Ladder, ladder_parts

#: The sinusoid's column orders (``posenc.Layout``): defined here, where the columns are
#: laid out, and re-exported by :mod:`posenc.sinusoid`, which imports this module.
Layout = Literal["interleaved", "concatenated"]

# -- How the table is computed --------------------------------------------------------------
#
# Angle addition. A position p is split as p = q·B + r with B = 2**10 and |r| < B (q and r
# of the sign of p), so that sin(p·ω) and cos(p·ω) come from the sin and cos of the block
# angle q·B·ω and of the in-block angle r·ω by one rotation:
#
#     sin(a + b) = sin a · cos b + cos a · sin b,    cos(a + b) = cos a · cos b − sin a · sin b.
#
# The sin and cos of one block angle per B positions and of the B in-block angles are
# computed once; every entry then costs two float64 products and two multiply-adds, and
# one rounding to the output dtype, instead of a float64 sin or cos.
#
# Each factor comes from an exact angle. ω is held as head + tail: the head is ω's float64
# value cut to 32 significant bits, the tail the rest of the exact ω (to 2**-83·ω), so that
# s·head is exact for the steps s used here (s = q·B with |q| < 2**21, or s = r < B), and
# the small s·tail is rounded once; a factor is one rotation of sin/cos(s·head) by that
# small angle. The docs' Precision page proves the error bound from this.
#
# The factors are kept as float64 pairs in the output's column order, so that one
# multiplication and one addcmul produce a whole block of rows:
#     X = [sin a, cos a], X' = [cos a, sin a], Y1 = [cos b, cos b], Y2 = [sin b, −sin b],
#     X·Y1 + X'·Y2 = [sin(a + b), cos(a + b)].
# Every entry is computed by the same operations from the same factors whatever else is
# computed with it (elementwise operations, an addcmul that fuses or not alike on every
# element), so a row does not depend on which other rows share its call.

BLOCK_BITS = 10
BLOCK = 1 << BLOCK_BITS
_HEAD_BITS = 32
# A table of up to this many (row, pair) cells is computed in one piece (and traced as one
# piece by torch.compile); larger ones in pieces of PIECE cells, written into the output.
ONE_PIECE = 1 << 22
PIECE = 1 << 18
# Up to this many cells, tensor positions on the CPU get their factors row by row (fewer
# operations than finding the distinct blocks and in-block steps first).
_SMALL = 1 << 12


def frequencies(d_model: int, base: float, endpoint: bool) -> Ladder:
    """``(freqs, heads, tails)`` of the sinusoid: :func:`~posenc.frequencies.ladder_parts`.

    ``ω_k = base ** (-2k / d_model)``, or ``base ** (-k / (K - 1))`` with ``endpoint``, for
    the ``K = ceil(d_model / 2)`` pairs; a constant of the configuration, for
    torch.compile too.
    """
    pairs = (d_model + 1) // 2
    if endpoint:
        return ladder_parts(pairs, base, float(max(pairs - 1, 1)), 1, _HEAD_BITS)
    return ladder_parts(pairs, base, float(d_model), 2, _HEAD_BITS)


class Frequencies:
    """The float64 heads and tails of one table's frequencies, on its working device."""

    def __init__(self, constants: Ladder, device: torch.device) -> None:
        _, heads, tails = constants
        self.heads = torch.tensor(heads, dtype=torch.float64, device=device)
        self.tails = torch.tensor(tails, dtype=torch.float64, device=device)
        self.pairs: int = len(heads)

    def turns(self, steps: Tensor) -> tuple[Tensor, Tensor]:
        """Sin and cos of ``steps · ω`` for integer ``steps >= 0`` (…,): (…, pairs), float64.

        The angle is ``s·head`` (exact) plus ``s·tail`` (small, rounded once), joined by
        one rotation.
        """
        s = steps.to(torch.float64).unsqueeze(-1)
        big, small = s * self.heads, s * self.tails
        sin_big, cos_big = torch.sin(big), torch.cos(big)
        sin_small, cos_small = torch.sin(small), torch.cos(small)
        # addcmul out of place, here and below: torch.func.vmap has no batching rule
        # for addcmul_, and these factors are small.
        sin = torch.addcmul(sin_big * cos_small, cos_big, sin_small)
        cos = torch.addcmul(cos_big * cos_small, sin_big, sin_small, value=-1)
        return sin, cos

    def fine_turns(self, steps: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`turns` for in-block steps ``0 <= s < B``, with two sines fewer.

        There ``|s·tail| < 2**-20``, where ``sin x = x`` and ``cos x = 1 - x²/2`` hold
        to better than half a float64 ulp: no float64 sin or cos of the small angle.
        """
        s = steps.to(torch.float64).unsqueeze(-1)
        big, small = s * self.heads, s * self.tails
        sin_big, cos_big = torch.sin(big), torch.cos(big)
        cos_small = torch.mul(small, small).mul_(-0.5).add_(1.0)
        sin = torch.addcmul(sin_big * cos_small, cos_big, small)
        cos = torch.addcmul(cos_big * cos_small, sin_big, small, value=-1)
        return sin, cos


Factors = tuple[Tensor, Tensor]


def _pairs(layout: Layout, first: Tensor, second: Tensor) -> Tensor:
    """``first`` and ``second`` (…, pairs) side by side in the layout's column order."""
    return torch.stack((first, second), dim=-1 if layout == "interleaved" else -2)


def _block_factors(layout: Layout, sin: Tensor, cos: Tensor) -> Factors:
    """``[sin a, cos a]`` and ``[cos a, sin a]``."""
    return _pairs(layout, sin, cos), _pairs(layout, cos, sin)


def _fine_factors(layout: Layout, sin: Tensor, cos: Tensor) -> Factors:
    """``[cos b, cos b]`` and ``[sin b, -sin b]``."""
    return _pairs(layout, cos, cos), _pairs(layout, sin, -sin)


def _rotate(block: Factors, fine: Factors, d_model: int, work: Tensor | None = None) -> Tensor:
    """Rows ``[sin(a + b), cos(a + b)]`` (…, d_model), float64, from broadcastable factors.

    ``work``, if given, is a float64 buffer of at least the result's size to compute in
    (reused from piece to piece, so that a large table does not allocate per piece).
    """
    shape = torch.broadcast_shapes(block[0].shape, fine[0].shape)  # type: ignore[no-untyped-call]
    rows = None if work is None else work[: math.prod(shape)].view(shape)
    rows = torch.mul(block[0], fine[0], out=rows)
    rows.addcmul_(block[1], fine[1])
    return rows.flatten(-2)[..., :d_model]


def _range_factors(n: int, freqs: Frequencies, layout: Layout) -> tuple[Factors, Factors]:
    """The factors of positions ``0 .. n-1``: per block (blocks, 1, …), per row (min(n, B), …)."""
    device = freqs.heads.device
    blocks = -(-n // BLOCK)
    block_steps = torch.arange(blocks, device=device).unsqueeze(-1) * BLOCK  # (blocks, 1)
    block = _block_factors(layout, *freqs.turns(block_steps))
    fine = _fine_factors(layout, *freqs.fine_turns(torch.arange(min(n, BLOCK), device=device)))
    return block, fine


def range_table(n: int, freqs: Frequencies, layout: Layout, d_model: int) -> Tensor:
    """The float64 rows of positions ``0 .. n-1`` (a small table: one piece)."""
    block, fine = _range_factors(n, freqs, layout)
    rows = _rotate(block, fine, d_model).reshape(-1, d_model)
    return rows if rows.shape[0] == n else rows[:n].clone()  # not a view of a longer table


def touch_pages(out: Tensor) -> None:
    """Write one element per 4 KiB page of a fresh CPU tensor, so that it is mapped.

    A large fresh tensor is memory the kernel maps page by page on first write. Taking
    those faults in one quick strided pass, rather than between the float64 pieces,
    made 2**20 × 512 float32 11% faster with glibc's default allocator (743 -> 662 ms
    here), and no slower when the allocator hands back memory already mapped.
    """
    if out.device.type == "cpu" and out.is_contiguous():
        out.view(-1)[:: max(1, 4096 // out.element_size())].zero_()


def fill_range(out: Tensor, blocks_per_piece: int, freqs: Frequencies, layout: Layout) -> None:
    """Write the rows of positions ``0 .. n-1`` into ``out`` (n, d_model), piece by piece.

    A piece is computed in a float64 buffer that stays in the cache, then rounded into
    ``out``; the loop does three operations per piece, no more (a 2**20-row table has
    a thousand pieces).
    """
    n, d_model = out.shape
    (x, x_swapped), (y_cos, y_sin) = _range_factors(n, freqs, layout)
    work = torch.empty((blocks_per_piece, *y_cos.shape), dtype=torch.float64, device=out.device)
    rows = work.flatten(-2).view(-1, work[0, 0].numel())[:, :d_model]
    per, size = blocks_per_piece, blocks_per_piece * BLOCK
    pieces = [
        (x[i : i + per], x_swapped[i : i + per], out[i * BLOCK :][:size])
        for i in range(0, x.shape[0], per)
    ]
    for a, a_swapped, target in pieces:
        if target.shape[0] < size:  # the last piece: fewer rows, perhaps fewer blocks
            work, rows = work[: a.shape[0]], rows[: target.shape[0]]
        torch.mul(a, y_cos, out=work)
        work.addcmul_(a_swapped, y_sin)
        round_into(target, rows)


def pieces_of_positions(
    flat: Tensor, rows_per_piece: int, freqs: Frequencies, layout: Layout, d_model: int
) -> Iterator[tuple[int, Tensor]]:
    """``(first row, float64 rows)`` for the int64 positions ``flat`` (n,).

    A negative position gets the row of its magnitude with the sines negated (sin is
    odd, cos even), so that the table is exactly symmetric.
    """
    n = flat.numel()
    magnitude = flat.abs()
    block_steps = torch.div(magnitude, BLOCK, rounding_mode="floor") * BLOCK
    in_block = magnitude - block_steps
    if not _runtime.readable(flat) or n * freqs.pairs <= _SMALL:
        # Factors per row: no data-dependent shapes (no sync on accelerators, traceable),
        # and the fewest operations for the few rows a forward pass computes.
        def rows(start: int, stop: int) -> Tensor:
            sin_a, cos_a = freqs.turns(block_steps[start:stop])
            sin_b, cos_b = freqs.fine_turns(in_block[start:stop])
            pair = -1 if layout == "interleaved" else -2
            # [sin a, cos a]·cos b + [cos a, -sin a]·sin b: the operations of _rotate.
            rows = torch.addcmul(
                _pairs(layout, sin_a, cos_a) * cos_b.unsqueeze(pair),
                _pairs(layout, cos_a, -sin_a),
                sin_b.unsqueeze(pair),
            )
            return _mirror(rows.flatten(-2)[..., :d_model], flat[start:stop], layout)

        if rows_per_piece == n:  # no loop over a length that may be a traced symbol
            yield 0, rows(0, n)
            return
        for start in range(0, n, rows_per_piece):
            yield start, rows(start, start + rows_per_piece)
        return
    # On the CPU: the factors of each distinct block and in-block step once, then gathered.
    block_keys, block_of = torch.unique(block_steps, return_inverse=True)
    fine_keys, fine_of = torch.unique(in_block, return_inverse=True)
    x, x_swapped = _block_factors(layout, *freqs.turns(block_keys))
    y_cos, y_sin = _fine_factors(layout, *freqs.fine_turns(fine_keys))
    work = torch.empty(rows_per_piece * 2 * freqs.pairs, dtype=torch.float64)
    for start in range(0, n, rows_per_piece):
        a, b = block_of[start : start + rows_per_piece], fine_of[start : start + rows_per_piece]
        block = (x.index_select(0, a), x_swapped.index_select(0, a))
        fine = (y_cos.index_select(0, b), y_sin.index_select(0, b))
        piece = _rotate(block, fine, d_model, work)
        yield start, _mirror(piece, flat[start : start + rows_per_piece], layout)


def _mirror(rows: Tensor, positions: Tensor, layout: Layout) -> Tensor:
    """``rows`` (m, d_model) with the sine columns negated where ``positions`` is negative."""
    sines = rows[:, 0::2] if layout == "interleaved" else rows[:, : (rows.shape[1] + 1) // 2]
    sines.mul_(torch.where(positions.unsqueeze(-1) < 0, -1.0, 1.0))
    return rows
