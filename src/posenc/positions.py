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
are refused. Positions may be negative: the sinusoid and the rotary and relative
schemes are defined for every integer, and learned tables refuse what they do
not hold.

>>> import torch
>>> from posenc.positions import resolve
>>> resolve(4).tensor()
tensor([0, 1, 2, 3])
>>> resolve(3, offset=torch.tensor([0, 10]), batch=2).tensor()
tensor([[ 0,  1,  2],
        [10, 11, 12]])
>>> resolve(3, positions=torch.tensor([5, 0, 7], dtype=torch.uint8)).tensor()
tensor([5, 0, 7])
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from . import _checks, _runtime

__all__ = ["Positions", "positions_from_lengths", "positions_from_mask", "resolve"]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class Positions(NamedTuple):
    """The positions of the ``length`` tokens of an input, as :func:`resolve` returns them.

    Exactly one of ``start`` and ``values`` is set: ``start`` when the tokens of
    every sequence sit at ``start, start + 1, ..., start + length - 1`` (the
    common case, served from a precomputed table by slicing, with no tensor
    built), ``values`` otherwise.

    Attributes:
        length: Number of tokens, L.
        start: Position of the first token, shared by the batch, or None.
        values: ``int64`` positions, ``(L,)`` (shared by the batch) or ``(B, L)``
            (one row per sequence; B may be 1), or None.
    """

    length: int
    start: int | None = 0
    values: Tensor | None = None

    def tensor(self, device: torch.device | str | None = None) -> Tensor:
        """The positions as an ``int64`` tensor, ``(L,)`` or ``(B, L)``.

        Args:
            device: Device of the result (default: that of ``values``, or the CPU).

        Returns:
            A tensor the caller may not modify in place when it is ``values``.
        """
        if self.values is not None:
            return self.values if device is None else self.values.to(device)
        assert self.start is not None
        # start + arange, not arange(start, stop): stop may be 2**63, past int64
        return torch.arange(self.length, device=device) + self.start

    def within(self, size: int) -> bool:
        """Whether every position is known to lie in ``[0, size)``, without a device sync.

        True for a ``start`` whose rows fit; for ``values``, the range is read
        only where that is free: on the CPU, eagerly (see ``_runtime.readable``).
        Elsewhere the answer is False, and the caller computes the rows instead
        of reading them from a table of ``size`` rows.

        Args:
            size: Number of rows of the table.

        Returns:
            Whether :meth:`take` may read every position from such a table.
        """
        if self.start is not None:
            return self.start >= 0 and self.start + self.length <= size
        values = self.values
        assert values is not None
        if values.numel() == 0:
            return True
        if not _runtime.readable(values):
            return False
        lo, hi = torch.aminmax(values)
        return bool(lo >= 0) and bool(hi < size)

    def take(self, table: Tensor) -> Tensor:
        """Rows of ``table`` (indexed on dim 0) at these positions; check :meth:`within` first.

        Args:
            table: Tensor ``(N, *)`` with one row per position.

        Returns:
            ``(L, *)`` or ``(B, L, *)``; a view of ``table`` for a ``start``.
        """
        if self.start is not None:
            return table[self.start : self.start + self.length]
        assert self.values is not None
        return table[self.values.to(table.device)]


def _as_int64(name: str, t: object, what: str) -> Tensor:
    """An integer tensor of any dtype, widened to int64; bool and floats refused."""
    t = _checks.integer_tensor(name, t, what)
    return t if t.dtype == torch.int64 else t.to(torch.int64)


def resolve(
    length: int,
    *,
    offset: int | Tensor = 0,
    positions: Tensor | None = None,
    batch: int | None = None,
) -> Positions:
    """Check ``offset``/``positions`` against an input and return its :class:`Positions`.

    Args:
        length: Number of tokens of the input, L.
        offset: Position of the first token: an int, a 0-d integer tensor, or a
            ``(B,)`` integer tensor (one per sequence). Token ``t`` sits at
            ``offset + t``.
        positions: Integer tensor ``(L,)`` or ``(B, L)``: the position of every
            token. Excludes ``offset``.
        batch: Batch size B of the input, or None for an unbatched input (which
            takes only positions shared by the batch). A per-sequence tensor may
            have B rows, or 1 to share its row.

    Returns:
        The positions, with ``start`` set for an int or 0-d ``offset`` given
        as an int, ``values`` (int64) otherwise.

    Raises:
        TypeError: ``offset`` is neither an int nor an integer tensor, or
            ``positions`` is not an integer tensor (bool and floating tensors
            are refused; every integer dtype is accepted).
        ValueError: both are given; a shape does not match ``length`` and
            ``batch``; an int ``offset`` puts a position outside int64.
    """
    if positions is not None:
        if not (isinstance(offset, int) and not isinstance(offset, bool) and offset == 0):
            raise ValueError(
                "give either offset or positions, not both: add the offset to the positions"
            )
        index = _as_int64("positions", positions, "an integer tensor of shape (L,) or (B, L)")
        if index.dim() not in (1, 2) or index.shape[-1] != length:
            raise ValueError(
                f"positions must have shape (L,) or (B, L) with L={length}, "
                f"got shape {tuple(index.shape)}"
            )
        if index.dim() == 2:
            _check_rows("positions", tuple(index.shape), index.shape[0], batch)
        return Positions(length, None, index)
    if isinstance(offset, Tensor):
        start = _as_int64("offset", offset, "an int or an integer tensor of shape () or (B,)")
        steps = torch.arange(length, device=start.device)
        if start.dim() == 0:
            return Positions(length, None, start + steps)
        if start.dim() != 1:
            raise ValueError(
                f"offset must be an int, a 0-d tensor or a (B,) tensor, "
                f"got shape {tuple(start.shape)}"
            )
        _check_rows("offset", tuple(start.shape), start.shape[0], batch)
        return Positions(length, None, start.unsqueeze(-1) + steps)
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(
            f"offset must be an int or an integer tensor, got {type(offset).__name__} "
            f"{offset!r:.60}"
        )
    if offset < INT64_MIN or offset + max(length, 1) - 1 > INT64_MAX:
        raise ValueError(
            f"offset={offset} puts positions outside int64 for L={length}: positions "
            f"must lie in [-2**63, 2**63 - 1]"
        )
    return Positions(length, offset, None)


def _check_rows(name: str, shape: tuple[int, ...], rows: int, batch: int | None) -> None:
    if batch is None:
        raise ValueError(
            f"{name} of shape {shape} gives one row per sequence, but the input is "
            f"unbatched; give {name} of shape {'(L,)' if name == 'positions' else '()'}"
        )
    if rows not in (1, batch):
        raise ValueError(
            f"{name} of shape {shape} needs {rows} sequences, but the input has "
            f"a batch of B={batch} (give B rows, or 1 to share it)"
        )


def positions_from_mask(mask: Tensor) -> Tensor:
    """Positions that count real tokens only, for padded batches.

    Token ``t`` of a row gets the number of real tokens before it, so a
    left-padded or right-padded sequence gets the positions ``0, 1, 2, ...`` it
    would have unpadded. Pad slots get position 0 (any value would do: they
    are masked out of attention). This is ``(mask.cumsum(-1) - 1) * mask``,
    the key positions BLOOM computes from its attention mask.

    Args:
        mask: True (or nonzero) for real tokens, False (or 0) for padding: a bool
            tensor, or an integer one such as a Hugging Face ``attention_mask``.

    Returns:
        ``torch.long`` tensor of the shape of ``mask``.

    Raises:
        TypeError: ``mask`` is not a bool or integer tensor.

    Shapes:
        - mask: ``(B, L)`` (or any shape; positions count along the last dimension)
        - output: same shape as ``mask``

    Example:
        >>> mask = torch.tensor([[False, False, True, True, True],   # left padding
        ...                      [True, True, True, False, False]])  # right padding
        >>> positions_from_mask(mask)
        tensor([[0, 0, 0, 1, 2],
                [0, 1, 2, 0, 0]])
        >>> positions_from_mask(torch.tensor([0, 1, 1, 1]))  # an attention_mask
        tensor([0, 0, 1, 2])
    """
    if not isinstance(mask, Tensor) or mask.dtype.is_floating_point or mask.dtype.is_complex:
        got = f"dtype {mask.dtype}" if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(
            f"mask must be a bool or integer tensor (True or 1 = real token), got {got}"
        )
    real = mask if mask.dtype == torch.bool else mask != 0
    counts = real.cumsum(dim=-1)
    return (counts - 1).masked_fill(~real, 0)


def positions_from_lengths(lengths: Tensor | list[int] | tuple[int, ...]) -> Tensor:
    """Positions of sequences packed end to end: each restarts at 0.

    A packed batch puts several sequences into one row, to waste no slots on
    padding; each token's position counts from the start of its own sequence.

    Args:
        lengths: Length of each packed sequence, in order: a list of ints or a
            1-D integer tensor. Zero lengths are allowed.

    Returns:
        ``torch.long`` tensor ``(sum(lengths),)`` on the device of ``lengths``.

    Raises:
        TypeError: ``lengths`` is not a sequence of ints or an integer tensor.
        ValueError: ``lengths`` is not 1-D or holds a negative length.

    Shapes:
        - lengths: ``(N,)`` for N sequences
        - output: ``(T,)`` with T = ``sum(lengths)``

    Example:
        >>> positions_from_lengths([3, 2])
        tensor([0, 1, 2, 0, 1])
        >>> positions_from_lengths(torch.tensor([2, 0, 3]))
        tensor([0, 1, 0, 1, 2])
    """
    if isinstance(lengths, (list, tuple)):
        for n in lengths:
            if isinstance(n, bool) or not isinstance(n, int):
                raise TypeError(
                    f"lengths must be ints, got {type(n).__name__} {n!r:.40} in {lengths!r:.60}"
                )
        lengths = torch.tensor(lengths, dtype=torch.int64)
    lens = _as_int64("lengths", lengths, "a list of ints or a 1-D integer tensor")
    if lens.dim() != 1:
        raise ValueError(f"lengths must be 1-D, got shape {tuple(lens.shape)}")
    # The output's size is the total length: reading it is a sync on an accelerator
    # whatever is done, so the sign is checked with it.
    if lens.numel() and int(lens.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got {lens.tolist()!r:.80}")
    total = int(lens.sum())
    starts = torch.cumsum(lens, 0) - lens
    return torch.arange(total, device=lens.device) - torch.repeat_interleave(
        starts, lens, output_size=total
    )
