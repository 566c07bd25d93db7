"""DTensor inputs: positions from the global shape, the work on each rank's shard.

A :class:`~torch.distributed.tensor.DTensor` knows its global shape and where its
local shard lies in it, so a scheme handed one needs no ``offset=`` or
``positions=`` to find the global positions of the tokens a rank holds: this module
reads them from the placements, runs the scheme on the local shard with those
positions (and, for RoPE's "dynamic" and "longrope", the global length), and wraps
the result as a DTensor of the same mesh and placements. A plain tensor passes
through untouched; nothing here imports :mod:`torch.distributed` (a DTensor exists
only once its module is imported).

Placements: ``Replicate()`` and ``Shard(d)`` on any dimension but the features (a
scheme needs every feature of a token), on any number of mesh dimensions (nested
``Shard`` of one dimension is cut in mesh order, as DTensor cuts it). ``Partial``
holds summands, to which a position must be added once, not on every rank: it is
refused, as are other placements.

``offset`` and ``positions`` given with a DTensor input are those of the whole
(global) input; tensors among them that are DTensors are gathered first. They are
read as the module reads them, against the whole input's shape: with
:func:`~posenc.positions.resolve`'s forms, or, for a module whose ``position_axes``
(:class:`ReadsPositions`) is an int A (RoPE on axes, M-RoPE), with
:func:`~posenc.positions.resolve_axes`'s, which add ``(A, L)`` and ``(A, B, L)``.
What that reading finds (which dimension of ``positions`` holds the batch, which
the axes) says how to cut them for a rank's shard, and each rank is handed a form
its shard cannot misread: its batch may be A where the whole input's is not.
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

import torch
from torch import Tensor

from .positions import AxisPositions, Positions, resolve, resolve_axes

__all__ = ["is_dtensor", "local_bias", "rotary_tables", "sequence_input"]

F = TypeVar("F", bound=Callable[..., Any])


def is_dtensor(t: object) -> bool:
    """Whether ``t`` is a DTensor; False at once for a plain tensor, and for non-tensors."""
    if type(t) is Tensor or not isinstance(t, Tensor):
        return False
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(t, module.DTensor)


def _gathered(t: object) -> Any:
    """A DTensor argument as the plain global tensor it stands for; anything else as is."""
    return cast("Any", t).full_tensor() if is_dtensor(t) else t


def _ranges(x: Any, name: str) -> list[tuple[int, int]]:
    """Where the local shard of the DTensor ``x`` lies: ``[lo, hi)`` on each dimension."""
    shape = tuple(x.shape)
    ranges = [(0, n) for n in shape]
    mesh = x.device_mesh
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        raise ValueError(f"{name} is a DTensor on a mesh that does not hold this rank")
    for mesh_dim, placement in enumerate(x.placements):
        if placement.is_replicate():
            continue
        if not placement.is_shard() or type(placement).__name__ != "Shard":
            why = (
                " (partial sums: a position must be added once, not on every rank)"
                if placement.is_partial()
                else ""
            )
            raise ValueError(
                f"{name} is a DTensor with placement {placement}{why}: posenc takes "
                "Replicate() and Shard(dim) placements; redistribute it first"
            )
        dim = placement.dim % len(shape)
        lo, hi = ranges[dim]
        size, me = mesh.size(mesh_dim), coordinate[mesh_dim]
        chunk = -(-(hi - lo) // size)  # torch.chunk's pieces, as DTensor's Shard cuts
        ranges[dim] = (lo + min(me * chunk, hi - lo), lo + min((me + 1) * chunk, hi - lo))
    local = tuple(hi - lo for lo, hi in ranges)
    if local != tuple(x.to_local().shape):
        raise ValueError(
            f"{name} is a DTensor whose local shard has shape {tuple(x.to_local().shape)}, "
            f"not the {local} that its placements {x.placements} give for the global "
            f"shape {shape}: posenc takes evenly chunked shards (DTensor's Shard layout)"
        )
    return ranges


def _whole(ranges: list[tuple[int, int]], shape: tuple[int, ...], dim: int) -> bool:
    return ranges[dim] == (0, shape[dim])


def _refuse_feature_shards(x: Any, ranges: list[tuple[int, int]], name: str) -> None:
    if not _whole(ranges, tuple(x.shape), x.dim() - 1):
        raise ValueError(
            f"{name} is a DTensor sharded on its last dimension (the features): a position "
            "scheme needs every feature of a token; shard the sequence, the batch or the "
            "heads, or redistribute it"
        )


def _wrap(local: Tensor, like: Any, shape: tuple[int, ...], placements: Any = None) -> Any:
    """``local`` as the shard of a DTensor of ``shape`` on ``like``'s mesh."""
    from torch.distributed.tensor import DTensor

    stride = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
    return DTensor.from_local(
        local,
        like.device_mesh,
        like.placements if placements is None else placements,
        run_check=False,
        shape=torch.Size(shape),
        stride=stride,
    )


def _global_seq_len(offset: object, positions: object, length: int) -> int | None:
    """The length RoPE's dynamic and longrope frequencies take by default: largest + 1."""
    if isinstance(positions, Tensor):
        largest = int(positions.amax()) if positions.numel() else None
    elif isinstance(offset, Tensor):
        largest = int(offset.amax()) + length - 1 if offset.numel() and length else None
    elif isinstance(offset, int) and not isinstance(offset, bool) and length:
        largest = offset + length - 1
    else:
        return None
    return None if largest is None else max(largest + 1, 1)


def sequence_input(
    seq_dim: int, *, ids: bool = False, position_ids: bool = False
) -> Callable[[F], F]:
    """Decorate ``forward(self, x, *, offset=0, positions=None, ...)`` for DTensor inputs.

    ``seq_dim`` is the dimension of ``x`` that holds the sequence; dimension 0 is the
    batch when ``x`` has dimensions before it. ``ids``: ``x`` holds token ids and the
    output has one more (feature) dimension; otherwise the output has ``x``'s shape
    and ``x``'s last dimension holds the features, which may not be sharded.
    ``position_ids``: an integer ``x`` holds positions, and ``forward`` returns the
    table's rows at them (one more, feature, dimension); they are their own
    positions, so each rank looks up its shard, on any placement. A ``seq_len``
    keyword, where ``forward`` takes one and it is not given, gets the whole input's
    default (its largest position + 1) when the module's frequencies depend on the
    length.
    """

    def decorate(forward: F) -> F:
        # Keyword parameters spelled out, not **kwargs: torch.compile guards on the keys
        # of a **kwargs dict, and would compile a graph for each set of keywords given.
        if "seq_len" in inspect.signature(forward).parameters:

            def with_length(
                self: Any, x: Any, *, offset: Any = 0, positions: Any = None, seq_len: Any = None
            ) -> Any:
                if type(x) is Tensor or not is_dtensor(x):
                    return forward(self, x, offset=offset, positions=positions, seq_len=seq_len)
                given = {"offset": offset, "positions": positions, "seq_len": seq_len}
                return _local_call(forward, self, x, seq_dim, ids, position_ids, given)

            return cast("F", functools.wraps(forward)(with_length))

        def wrapper(self: Any, x: Any, *, offset: Any = 0, positions: Any = None) -> Any:
            if type(x) is Tensor or not is_dtensor(x):
                return forward(self, x, offset=offset, positions=positions)
            given = {"offset": offset, "positions": positions}
            return _local_call(forward, self, x, seq_dim, ids, position_ids, given)

        return cast("F", functools.wraps(forward)(wrapper))

    return decorate


@runtime_checkable
class ReadsPositions(Protocol):
    """A module that tells this glue how it reads positions (:class:`~posenc.RotaryEmbedding`).

    A module without these attributes reads one stream of positions, and a
    ``seq_len`` it takes gets the whole input's default.

    Attributes:
        position_axes: None for one stream (:func:`~posenc.positions.resolve`'s
            forms), or the number of axes A the positions may lie on
            (:func:`~posenc.positions.resolve_axes`'s forms).
        trained_length: The length up to which its frequencies do not depend on
            the length, or None when they never do (then ``seq_len`` is left alone).
    """

    position_axes: int | None
    trained_length: int | None


def _local_call(
    forward: Callable[..., Tensor],
    module: Any,
    x: Any,
    seq_dim: int,
    ids: bool,
    position_ids: bool,
    kwargs: dict[str, Any],
) -> Any:
    shape = tuple(x.shape)
    if position_ids and not (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool):
        # Positions themselves: each rank's rows are those of its ids, wherever they lie.
        _ranges(x, "position ids")  # checks the placements
        kwargs = {k: _gathered(v) for k, v in kwargs.items()}
        out = forward(module, x.to_local(), **kwargs)
        return _wrap(out, x, (*shape, out.shape[-1]))
    name = "token ids" if ids else "x"
    ranges = _ranges(x, name)
    if not ids:
        _refuse_feature_shards(x, ranges, name)
    seq = seq_dim % x.dim()
    length = shape[seq]
    (lo, hi), batch = ranges[seq], (0 if seq > 0 else None)
    rows = None if batch is None or _whole(ranges, shape, batch) else ranges[batch]
    offset, positions = _gathered(kwargs.get("offset", 0)), _gathered(kwargs.get("positions"))
    # The module's own reading of offset and positions, against the whole input.
    reads = module if isinstance(module, ReadsPositions) else None
    axes = None if reads is None else reads.position_axes
    where = _read(length, axes, offset, positions, None if batch is None else shape[batch])
    # For frequencies that depend on the length: the whole input's, on every rank.
    needs_length = reads is None or reads.trained_length is not None
    if "seq_len" in kwargs and kwargs["seq_len"] is None and needs_length:
        kwargs["seq_len"] = _global_seq_len(offset, positions, length)
    if isinstance(positions, Tensor):
        kwargs["positions"] = _local_positions(
            positions[..., lo:hi], where, rows, batched=batch is not None, axes=axes
        )
    elif isinstance(offset, Tensor) or (isinstance(offset, int) and not isinstance(offset, bool)):
        if (
            isinstance(offset, Tensor)
            and offset.dim() == 1
            and offset.shape[0] != 1
            and rows is not None
        ):
            offset = offset[rows[0] : rows[1]]  # one per sequence: this rank's
        kwargs["offset"] = offset + lo
    out = forward(module, x.to_local(), **kwargs)
    return _wrap(out, x, (*shape, out.shape[-1]) if ids else shape)


def _read(
    length: int, axes: int | None, offset: Any, positions: Any, batch: int | None
) -> Positions | AxisPositions:
    """``offset`` and ``positions`` as a module on ``axes`` axes (None: one stream) reads them.

    Raises the module's own errors, for the whole input's length and batch.
    """
    if axes is None:
        return resolve(length, offset=offset, positions=positions, batch=batch)
    return resolve_axes(length, axes, offset=offset, positions=positions, batch=batch)


def _local_positions(
    positions: Tensor,
    where: Positions | AxisPositions,
    rows: tuple[int, int] | None,
    *,
    batched: bool,
    axes: int | None,
) -> Tensor:
    """A rank's positions (already cut to its tokens), in a form its shard reads the same way.

    ``where`` is the whole input's reading of them: on axes, ``(A, L)`` or
    ``(A, B, L)``, the batch on dimension 1; else ``(L,)`` or ``(B, L)`` (or
    ``(1, B, L)``), the batch on dimension -2. One row per sequence is cut to the
    rank's sequences ``rows``; a row of 1 is shared and stays. On axes a rank's
    batch may be A where the whole batch is not: ``(A, L)`` goes as ``(A, 1, L)``
    and one stream per sequence as ``(1, B, L)``, forms that cannot be misread.
    """
    if isinstance(where, AxisPositions):
        if positions.dim() == 3:
            if rows is not None and positions.shape[1] != 1:
                positions = positions[:, rows[0] : rows[1]]
            return positions
        return positions.unsqueeze(1) if batched else positions
    if positions.dim() >= 2 and rows is not None and positions.shape[-2] != 1:
        positions = positions[..., rows[0] : rows[1], :]
    if axes is not None and positions.dim() == 2:
        positions = positions.unsqueeze(0)
    return positions


def rotary_tables(fn: F) -> F:
    """Decorate ``apply_rotary(x, cos, sin, ...)`` for a DTensor ``x``.

    With ``x``, ``cos`` and ``sin`` all DTensors, DTensor's own operators run (the
    fast paths are off for them: ``_runtime.fast_path``). With a DTensor ``x`` and plain
    (global) tables, each rank rotates its shard by the tables' rows for it.
    """

    @functools.wraps(fn)
    def wrapper(x: Any, cos: Any, sin: Any, *, layout: Any = "half") -> Any:
        flags = (is_dtensor(x), is_dtensor(cos), is_dtensor(sin))
        if not any(flags) or all(flags):
            return fn(x, cos, sin, layout=layout)
        if not flags[0]:
            raise TypeError(
                "cos and sin are DTensors but x is a plain tensor: pass x as a DTensor too, "
                "or the tables as plain tensors (cos.full_tensor())"
            )
        cos, sin = _gathered(cos), _gathered(sin)
        ranges = _ranges(x, "x")
        _refuse_feature_shards(x, ranges, "x")
        shape = tuple(x.shape)
        if isinstance(cos, Tensor) and isinstance(sin, Tensor) and cos.shape == sin.shape:
            for j in range(cos.dim() - 1):
                d = x.dim() - cos.dim() + j
                if d >= 0 and cos.shape[j] == shape[d] != 1 and not _whole(ranges, shape, d):
                    lo, hi = ranges[d]
                    cos, sin = cos.narrow(j, lo, hi - lo), sin.narrow(j, lo, hi - lo)
        return _wrap(fn(x.to_local(), cos, sin, layout=layout), x, shape)

    return cast("F", wrapper)


def local_bias(
    build: Callable[..., Any],
    query_length: Any,
    key_length: Any,
    offset: Any,
    positions: Any,
    key_positions: Any,
) -> Any:
    """A relative bias over DTensor positions: ``build`` on each rank's query rows.

    ``build(query_length, key_length, offset, positions, key_positions)`` is the
    bias of plain tensors (:meth:`posenc._relative.RelativeBias._bias`, every other
    argument bound). DTensor ``key_positions`` and ``offset`` are gathered (every
    query block meets every key). DTensor query ``positions`` make a DTensor bias:
    each rank computes the rows of its queries, sharded on the query dimension (and
    on the batch where ``positions`` are sharded on theirs).
    """
    key_positions, offset = _gathered(key_positions), _gathered(offset)
    if not is_dtensor(positions):
        return build(query_length, key_length, offset, positions, key_positions)
    _ranges(positions, "positions")  # checks the placements
    shape = tuple(positions.shape)
    if query_length != shape[-1]:
        raise ValueError(
            f"positions must have shape (L_q,) or (B, L_q) with L_q={query_length}, "
            f"got the DTensor's global shape {shape}"
        )
    if key_length is None and key_positions is None:
        key_length = query_length  # keys at 0, 1, ... of the whole query length
    local = positions.to_local()
    out = build(local.shape[-1], key_length, offset, local, key_positions)
    from torch.distributed.tensor import Replicate, Shard

    placements: list[Any] = []
    for placement in positions.placements:
        if placement.is_shard():
            dim = placement.dim % len(shape)
            placements.append(Shard(out.dim() - 2 if dim == len(shape) - 1 else 0))
        else:
            placements.append(Replicate())
    big = list(out.shape)
    big[-2] = shape[-1]
    if len(shape) == 2 and out.dim() == 4:
        big[0] = shape[0]
    return _wrap(out, positions, tuple(big), placements)
