"""One rounding from float64 to any floating dtype.

PyTorch converts float64 to float16 and bfloat16 through float32, so those
conversions round twice: a value just past a midpoint of the narrow type can land
exactly on that midpoint in float32, and the second rounding then goes the wrong
way (about one value in 2**16). Rounding to float32 *to odd* first (an inexact
result keeps an odd last bit) leaves the second rounding as the only one that
decides: float32 has more than two bits beyond float16's and bfloat16's
(Boldo and Melquiond, *Emulation of FMA and correctly-rounded sums: proved
algorithms using rounding to odd*, IEEE Trans. Computers 57(4), 2008).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["round_into", "round_once"]


def round_once(table: Tensor, dtype: torch.dtype) -> Tensor:
    """The float64 ``table`` rounded once to ``dtype``: the nearest value, ties to even."""
    return table.to(dtype) if dtype.itemsize >= 4 else _to_odd(table).to(dtype)


def round_into(out: Tensor, table: Tensor) -> Tensor:
    """Copy the float64 ``table`` into ``out``, rounded once to ``out``'s dtype."""
    return out.copy_(table if out.dtype.itemsize >= 4 else _to_odd(table))


def _to_odd(table: Tensor) -> Tensor:
    """Float32 rounded to odd: exact values kept, others to the neighbour whose last bit is odd."""
    wide = table.to(torch.float32).contiguous()
    low = wide.to(torch.float64)
    odd = (wide.view(torch.int32) & 1).bool()
    toward = torch.where(table > low, math.inf, -math.inf).to(torch.float32)
    return torch.where((low != table) & ~odd, torch.nextafter(wide, toward), wide)
