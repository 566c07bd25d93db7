"""Positions on axes: :func:`resolve_axes`, and the coordinates of a grid's cells."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from .. import _checks, _runtime
from ._resolve import (
    Positions,
    _check_rows,
    _positions_tensor,
    check_domain,
    resolve,
    values_to,
)


class AxisPositions(NamedTuple):
    """Positions on ``A`` axes (t, h, w, ...), as :func:`resolve_axes` returns them.

    Attributes:
        length: Number of tokens, L.
        values: ``int64`` positions, ``(A, L)`` (shared by the batch) or ``(A, B, L)``
            (one row per sequence; B may be 1), axes first; ``float64`` for
            fractional positions (``resolve_axes(..., fractional=True)``).
        start: Always None: positions on axes are never one run ``start, start + 1, ...``.
    """

    length: int
    values: Tensor
    start: None = None

    def tensor(self, device: torch.device | str | None = None) -> Tensor:
        """The positions, ``(A, L)`` or ``(A, B, L)`` ``int64``; not to be modified in place.

        Args:
            device: Device of the result (default: that of ``values``).

        Returns:
            ``values``, on ``device``.
        """
        return values_to("positions", self.values, device)

    def within(self, size: int) -> bool:
        """Whether every position on every axis is known to lie in ``[0, size)``.

        As :meth:`Positions.within`: read only where that is free (on the CPU, eagerly).

        Args:
            size: Number of rows of the table.

        Returns:
            Whether :meth:`take` may read every position from such a table.
        """
        if self.values.dtype.is_floating_point:
            return False  # fractional positions have no row: they are computed
        if self.values.numel() == 0:
            return True
        if not _runtime.readable(self.values):
            return False
        lo, hi = torch.aminmax(self.values)
        return bool(lo >= 0) and bool(hi < size)

    def per_pair(self, pair_axes: Tensor) -> Tensor:
        """The position each pair turns by: ``(L, h)`` or ``(B, L, h)`` ``int64``.

        Args:
            pair_axes: ``(h,)`` ``int64``, the axis of each pair, on the device of ``values``.

        Returns:
            ``out[..., l, k] = values[pair_axes[k], ..., l]``.
        """
        return self.values.index_select(0, pair_axes).movedim(0, -1)

    def take(self, table: Tensor, pair_axes: Tensor) -> Tensor:
        """Each pair's entry of ``table`` at its axis's position; check :meth:`within` first.

        Args:
            table: Tensor ``(N, h)``, one row per position, one column per pair.
            pair_axes: ``(h,)`` ``int64``, the axis of each pair.

        Returns:
            ``(L, h)`` or ``(B, L, h)``: ``out[..., l, k] = table[p, k]`` with ``p`` the
            position of token ``l`` on the axis of pair ``k``; a new tensor.
        """
        index = values_to(
            "positions", self.per_pair(pair_axes.to(self.values.device)), table.device
        )
        shape = index.shape
        return table.gather(0, index.reshape(-1, shape[-1])).view(shape)


def resolve_axes(
    length: int,
    axes: int,
    *,
    offset: int | Tensor = 0,
    positions: Tensor | None = None,
    batch: int | None = None,
    device: torch.device | str | None = None,
    fractional: bool = False,
) -> Positions | AxisPositions:
    """:func:`resolve` for a scheme that turns on ``axes`` position axes.

    Positions on axes come axes first, Hugging Face's M-RoPE order: ``(A, L)``
    shared by the batch, or ``(A, B, L)`` one row per sequence (B may be 1, and a
    first size of 1 shares one stream among the axes). Everything else is one
    stream shared by every axis, as :func:`resolve` reads it (an ``offset``,
    ``(L,)`` or ``(B, L)`` positions): text tokens, whose position is the same on
    every axis. Every rule of :func:`resolve` holds per axis: any integer dtype,
    negative positions, the input's device, the domain ``|p| < 2**62``.

    A 2-D tensor is read as ``(A, L)`` when its first size is ``A`` and cannot be
    the batch's, and as ``(B, L)`` when it is the batch's and not ``A``; when
    ``A`` equals the batch size it could be either, and it is refused: give
    ``(A, 1, L)`` for positions on axes shared by the batch, or ``(1, B, L)`` for
    one stream per sequence. Diffusers builds its ids as ``(L, A)``: pass
    ``ids.T``.

    Args:
        length: Number of tokens of the input, L.
        axes: Number of position axes, A.
        offset: As in :func:`resolve`: the same on every axis.
        positions: ``(L,)``, ``(B, L)``, ``(A, L)`` or ``(A, B, L)`` integer tensor.
        batch: Batch size B of the input, or None for an unbatched input.
        device: The input's device, or None to accept tensors on any device.
        fractional: As in :func:`resolve`: floating positions are taken (on
            every form), widened to float64.

    Returns:
        :class:`AxisPositions` for positions on axes, else :func:`resolve`'s
        :class:`Positions`.

    Raises:
        TypeError: as :func:`resolve`.
        ValueError: as :func:`resolve`; a 2-D tensor is ambiguous, a shape
            fits neither form, or the axes come last (diffusers' ``(L, A)``).

    Example:
        >>> import torch
        >>> resolve_axes(3, 2, positions=torch.tensor([[0, 0, 1], [0, 1, 0]])).values
        tensor([[0, 0, 1],
                [0, 1, 0]])
        >>> resolve_axes(3, 2, offset=5)
        Positions(length=3, start=5, values=None)
    """
    length = _checks.length("length", length)
    axes = _checks.positive_int("axes", axes)
    if not isinstance(positions, Tensor) or positions.dim() not in (2, 3):
        return resolve(
            length,
            offset=offset,
            positions=positions,
            batch=batch,
            device=device,
            fractional=fractional,
        )
    shape = tuple(positions.shape)
    # every form ends in L: (L, A) or (B, L, A) is diffusers' order, axes last (tested
    # from the last size, which under torch.export is L itself: no guard on L's value)
    if shape[-1] != length and shape[-1] == axes and shape[-2] == length:
        turned, fix = (
            ("(A, L)", "ids.T") if len(shape) == 2 else ("(A, B, L)", "ids.permute(2, 0, 1)")
        )
        raise ValueError(
            f"positions on axes come axes first, {turned}; got shape {shape}, which is "
            f"({'B, ' if len(shape) == 3 else ''}L, A) with L={length} and A={axes}, "
            f"diffusers' order: pass {fix}"
        )
    rows = positions.shape[0]
    if positions.dim() == 2:
        if batch is not None and rows == axes and axes == batch and axes > 1:
            raise ValueError(
                f"positions of shape {tuple(positions.shape)} could be (A, L) for the "
                f"{axes} axes or (B, L) for the batch of {batch}: give positions.unsqueeze(1), "
                f"(A, 1, L), for positions on the axes shared by the batch, or "
                f"positions.unsqueeze(0), (1, B, L), for one stream per sequence"
            )
        if rows != axes or (batch is not None and rows == batch):
            return resolve(
                length,
                offset=offset,
                positions=positions,
                batch=batch,
                device=device,
                fractional=fractional,
            )
    elif rows == 1:
        return resolve(
            length,
            offset=offset,
            positions=positions[0],
            batch=batch,
            device=device,
            fractional=fractional,
        )
    where = None if device is None else torch.device(device)
    index = _positions_tensor(
        positions,
        offset,
        where,
        "an integer tensor of shape (L,), (B, L), (A, L) or (A, B, L)",
        fractional,
    )
    if index.shape[0] != axes or index.shape[-1] != length:
        raise ValueError(
            f"positions on axes must have shape (A, L) or (A, B, L) with A={axes} and "
            f"L={length}, got shape {tuple(index.shape)}"
        )
    if index.dim() == 3:
        _check_rows("positions", tuple(index.shape), index.shape[1], batch)
    return AxisPositions(length, index)


def grid_positions(
    *sizes: int, offset: int | tuple[int, ...] = 0, device: torch.device | str | None = None
) -> Tensor:
    """The coordinates of every cell of a grid, in row-major order (the last axis fastest).

    A ``t × h × w`` video or an ``h × w`` image, flattened as its patches are: cell
    ``(i, j)`` of an ``h × w`` grid is token ``i·w + j``, with position ``i`` on the
    first axis and ``j`` on the second. ``offset`` shifts every axis, or each axis by
    its own amount (centred images: Qwen-Image starts the rows at ``-(h - h // 2)``).
    Diffusers' ids are the transpose, ``(N, A)``.

    Args:
        *sizes: The size of each axis, A ints >= 0.
        offset: The first position: one int for every axis, or one per axis.
        device: Device of the result (default: torch's default device).

    Returns:
        ``int64`` tensor ``(A, prod(sizes))``: the positions :class:`~posenc.RotaryEmbedding`
        takes on axes.

    Raises:
        TypeError: a size or an offset is not an int.
        ValueError: no size, a negative size, ``offset`` of another length than
            ``sizes``, positions outside the domain ``|p| < 2**62``, or a result too
            large for the device's memory.

    Shapes:
        - output: ``(A, N)``, ``N = prod(sizes)``

    Example:
        >>> grid_positions(2, 3)
        tensor([[0, 0, 0, 1, 1, 1],
                [0, 1, 2, 0, 1, 2]])
        >>> grid_positions(2, 2, offset=(10, -1))
        tensor([[10, 10, 11, 11],
                [-1,  0, -1,  0]])
    """
    if not sizes:
        raise ValueError("grid_positions needs the size of at least one axis, got none")
    counts = tuple(_checks.nonnegative_int(f"sizes[{i}]", n) for i, n in enumerate(sizes))
    starts: tuple[int, ...]
    if isinstance(offset, tuple):
        if len(offset) != len(counts):
            raise ValueError(
                f"offset must be an int or one int per axis ({len(counts)}), got {offset!r:.80}"
            )
        starts = offset
    else:
        starts = (offset,) * len(counts)
    checked = []
    for i, (start, n) in enumerate(zip(starts, counts, strict=True)):
        value = _checks.integer("offset", start, "an int or a tuple of ints")
        check_domain(f"offset[{i}]" if isinstance(offset, tuple) else "offset", value, count=n)
        checked.append(value)
    starts = tuple(checked)
    total = 1
    for n in counts:
        total *= n
    place = _runtime.default_device(device)
    _runtime.allocation(
        (len(counts), total),
        torch.int64,
        place,
        lambda: f"grid_positions{counts}",
        "ask for a smaller grid",
    )
    ranges = [torch.arange(n, device=place) + s for n, s in zip(counts, starts, strict=True)]
    grids = torch.meshgrid(*ranges, indexing="ij")
    return torch.stack(grids).reshape(len(counts), total)
