"""Where tokens sit: the one place that turns ``offset`` and ``positions`` into positions.

Every scheme in posenc takes the same two keyword arguments in ``forward``:

- ``offset``: the position of the first token, an int shared by the batch or a
  ``(B,)`` integer tensor with one per sequence (decoding with a KV cache, where
  the sequences of a batch have reached different steps);
- ``positions``: the position of every token, an integer tensor ``(L,)`` or
  ``(B, L)`` (padding, packed sequences, any order at all).

:func:`resolve` checks them once and returns a :class:`Positions`; the schemes
read positions from it and never re-derive them. The helpers
:func:`positions_from_mask` (padded batches) and :func:`positions_from_lengths`
(packed sequences) build ``positions`` tensors.

Positions are integers, and stay ``int64`` until a scheme turns them into
angles or indices. Integer tensors of any dtype are accepted and widened
(``uint8`` positions are positions, never a mask); bool and floating tensors
are refused, but for RoPE, which takes floating tensors as fractional positions
(``resolve(..., fractional=True)``: widened to float64, finite, ``|p| <= 2**62``).
Positions may be negative: the sinusoid and the rotary and relative
schemes are defined for every integer, and learned tables refuse what they do
not hold.

The position domain is ``|p| < 2**62``, from :data:`POSITION_MIN` to
:data:`POSITION_MAX`: half of int64's range, so that the difference of any two
positions (a relative position, ``key - query``) and its opposite fit in int64
too. Positions outside it are refused with a ValueError naming the value, for
int offsets always and for tensors where reading their values is free (on the
CPU, eagerly: :func:`check_domain`); on an accelerator, under
:func:`torch.compile` or :func:`torch.func.vmap` tensors are not read, and
values outside the domain are the caller's to avoid (``uint64`` values from
``2**63`` then wrap to negative ones when widened to ``int64``).

>>> import torch
>>> from posenc.positions import resolve
>>> resolve(4).tensor()
tensor([0, 1, 2, 3])
>>> resolve(3, offset=torch.tensor([0, 10]), batch=2).tensor()
tensor([[ 0,  1,  2],
        [10, 11, 12]])
>>> resolve(3, positions=torch.tensor([5, 0, 7], dtype=torch.uint8)).tensor()
tensor([5, 0, 7])
>>> resolve(2, offset=2**62 - 1)
Traceback (most recent call last):
...
ValueError: offset=4611686018427387903 puts positions outside int64's position ...
"""

# One job per submodule: resolution and the domain (_resolve), masks and lengths
# (_lengths), axes and grids (_axes), shards (_shards); their public names live here.
from torch import Tensor  # noqa: F401 (the fields of Positions and AxisPositions: below)

from . import _resolve
from ._axes import AxisPositions, grid_positions, resolve_axes
from ._documents import (
    cu_seqlens,
    document_block_mask,
    document_ids,
    document_mask,
    documents_from_positions,
    lengths_from_cu_seqlens,
    lengths_from_documents,
    positions_from_documents,
)
from ._lengths import positions_from_lengths, positions_from_mask
from ._random import random_positions
from ._resolve import Positions, check_domain, resolve
from ._shards import SHARD_LAYOUTS, ShardLayout, shard_order, shard_positions

__all__ = [
    "POSITION_MAX",
    "POSITION_MIN",
    "SHARD_LAYOUTS",
    "AxisPositions",
    "Positions",
    "ShardLayout",
    "check_domain",
    "cu_seqlens",
    "document_block_mask",
    "document_ids",
    "document_mask",
    "documents_from_positions",
    "grid_positions",
    "lengths_from_cu_seqlens",
    "lengths_from_documents",
    "positions_from_documents",
    "positions_from_lengths",
    "positions_from_mask",
    "random_positions",
    "resolve",
    "resolve_axes",
    "shard_order",
    "shard_positions",
]

#: The largest position, ``2**62 - 1``. Every difference of two positions fits in int64.
POSITION_MAX = _resolve.POSITION_MAX
#: The smallest position, ``-(2**62 - 1)``, so that the domain is symmetric (``|p| < 2**62``).
POSITION_MIN = _resolve.POSITION_MIN

# The two classes are named, in signatures, pickles and type hints, by the module users
# import them from: posenc.positions.Positions, not the private one that defines it. Their
# fields' annotations (``Tensor``) are then resolved in this module's namespace.
Positions.__module__ = __name__
AxisPositions.__module__ = __name__
