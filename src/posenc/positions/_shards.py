"""Across ranks: the global positions of the tokens of a shard, and the shard order."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from .. import _checks, _runtime
from ._lengths import _length_in_domain, positions_from_lengths
from ._resolve import _DOMAIN, _DOMAIN_WHY, POSITION_MAX

ShardLayout = Literal["contiguous", "zigzag"]
#: How a sequence is cut into shards: ``("contiguous", "zigzag")``.
SHARD_LAYOUTS: tuple[ShardLayout, ...] = ("contiguous", "zigzag")


def _documents(
    length: int, lengths: Tensor | list[int] | tuple[int, ...] | None
) -> tuple[list[int], Tensor | None]:
    """The documents' lengths as ints (one document without ``lengths``), and their positions."""
    if lengths is None:
        return [length], None
    within = positions_from_lengths(lengths)  # checks them
    sizes = lengths.tolist() if isinstance(lengths, Tensor) else list(lengths)
    _checks.packed_total(sizes, length)
    return [int(n) for n in sizes], within


def shard_order(
    length: int,
    world_size: int,
    *,
    layout: ShardLayout = "contiguous",
    lengths: Tensor | list[int] | tuple[int, ...] | None = None,
    inverse: bool = False,
    device: torch.device | str | None = None,
) -> Tensor:
    """The permutation that puts a sequence in shard order, rank after rank, and back.

    ``x.index_select(dim, order)`` reorders the sequence dimension so that cutting
    it into ``world_size`` contiguous pieces (``torch.chunk``, the layout of a
    DTensor sharded on that dimension) gives rank ``r`` the tokens
    :func:`shard_positions` names; ``inverse=True`` gives the permutation back,
    ``order.argsort()``, which restores the sequence from its shards put end to end.

    - ``"contiguous"``: rank ``r`` holds the ``r``-th of ``world_size`` pieces; the
      order is the identity.
    - ``"zigzag"`` (head-tail): the sequence is cut into ``2 * world_size`` chunks
      and rank ``r`` holds chunks ``r`` and ``2 * world_size - 1 - r``, so that under
      a causal mask every rank does the same work: torch's context-parallel load
      balancer (``_HeadTailLoadBalancer``), Megatron-LM's and torchtitan's.
    - ``"zigzag"`` with ``lengths`` (packed documents): each document is cut into
      ``2 * world_size`` chunks and rank ``r`` holds chunks ``r`` and
      ``2 * world_size - 1 - r`` of every document, document after document. These
      are the chunks of torch's per-document balancer
      (``_PerDocumentHeadTailLoadBalancer``), in rank-major order: torch 2.13's
      lists them document by document, so that its contiguous shards mix ranks
      (pytorch/pytorch#189902).

    Args:
        length: Number of tokens of the whole sequence, L.
        world_size: Number of ranks the sequence is cut over, W.
        layout: ``"contiguous"`` or ``"zigzag"``.
        lengths: Lengths of the documents packed into the sequence, summing to
            ``length`` (a list of ints or a 1-D integer tensor, read on the host);
            None for one sequence. With ``"zigzag"`` each is a multiple of
            ``2 * world_size``.
        inverse: Return the inverse permutation (shard order to sequence order).
        device: Device of the result (default: the CPU, or torch's default device).

    Returns:
        ``int64`` ``(L,)``: the index, in the sequence, of each token in shard order
        (with ``inverse``, the index in shard order of each token of the sequence).

    Raises:
        TypeError: a length, ``world_size`` or ``inverse`` has the wrong type.
        ValueError: ``length`` is negative, ``world_size`` is not positive,
            ``layout`` is unknown, ``lengths`` do not sum to ``length``, or a
            length is not a multiple of ``2 * world_size`` for ``"zigzag"``.

    Shapes:
        - lengths: ``(N,)`` for N documents
        - output: ``(L,)``

    Example:
        >>> import torch
        >>> order = shard_order(8, 2, layout="zigzag")
        >>> order
        tensor([0, 1, 6, 7, 2, 3, 4, 5])
        >>> x = torch.arange(8) * 10
        >>> x[order].chunk(2)                          # rank 0, rank 1
        (tensor([ 0, 10, 60, 70]), tensor([20, 30, 40, 50]))
        >>> torch.equal(x[order][shard_order(8, 2, layout="zigzag", inverse=True)], x)
        True
        >>> shard_order(12, 2, layout="zigzag", lengths=[4, 8])
        tensor([ 0,  3,  4,  5, 10, 11,  1,  2,  6,  7,  8,  9])
    """
    length = _checks.nonnegative_int("length", length)
    world_size = _checks.positive_int("world_size", world_size)
    layout = _checks.choice("layout", layout, SHARD_LAYOUTS)
    inverse = _checks.flag("inverse", inverse)
    where = _runtime.default_device(device)
    documents, _ = _documents(length, lengths)
    if layout == "contiguous":
        _runtime.allocation(
            (length,), torch.int64, where, lambda: f"shard_order's result for length={length}"
        )
        return torch.arange(length, device=where)
    _checks.zigzag_lengths(documents, world_size, packed=lengths is not None)
    _runtime.allocation(
        (length,), torch.int64, where, lambda: f"shard_order's result for length={length}"
    )
    starts = torch.tensor([0, *documents[:-1]], dtype=torch.int64).cumsum(0).tolist()
    pieces = []
    for r in range(world_size):
        for start, n in zip(starts, documents, strict=True):
            chunk = n // (2 * world_size)
            head, tail = start + r * chunk, start + (2 * world_size - 1 - r) * chunk
            pieces += [torch.arange(head, head + chunk), torch.arange(tail, tail + chunk)]
    order = torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.int64)
    return (order.argsort() if inverse else order).to(where)


def shard_positions(
    length: int,
    world_size: int,
    rank: int,
    *,
    layout: ShardLayout = "contiguous",
    lengths: Tensor | list[int] | tuple[int, ...] | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """The global positions of the tokens a rank holds, when a sequence is cut over ranks.

    Under context or sequence parallelism each rank holds a shard of the sequence,
    and a position scheme must see the positions the tokens have in the whole
    sequence, not ``0, 1, ...`` of the shard: pass these as ``positions=``. The
    shards are those of :func:`shard_order`: ``"contiguous"`` cuts as
    ``torch.chunk`` does (the layout of a DTensor sharded on the sequence; the last
    ranks may hold fewer tokens), ``"zigzag"`` gives rank ``r`` chunks ``r`` and
    ``2W - 1 - r`` of ``2W``, as torch's context parallelism does. With ``lengths``
    (documents packed into one row) positions restart at 0 with each document, as
    :func:`positions_from_lengths` counts them.

    Args:
        length: Number of tokens of the whole sequence, L.
        world_size: Number of ranks, W.
        rank: This rank, in ``[0, W)``.
        layout: ``"contiguous"`` or ``"zigzag"``.
        lengths: Lengths of packed documents, summing to ``length``; None for
            one sequence.
        device: Device of the result (default: the CPU, or torch's default device).

    Returns:
        ``int64`` ``(L_r,)``: ``L / W`` positions for ``"zigzag"``; for
        ``"contiguous"`` ``ceil(L / W)``, fewer on the last ranks when ``W`` does
        not divide ``L``.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: as :func:`shard_order`; or ``rank`` is outside ``[0, W)``.

    Shapes:
        - output: ``(L_r,)``, the tokens of rank ``rank``

    Example:
        >>> import torch
        >>> shard_positions(8, 2, 1)
        tensor([4, 5, 6, 7])
        >>> shard_positions(8, 2, 0, layout="zigzag"), shard_positions(8, 2, 1, layout="zigzag")
        (tensor([0, 1, 6, 7]), tensor([2, 3, 4, 5]))
        >>> shard_positions(12, 2, 0, layout="zigzag", lengths=[4, 8])  # two documents
        tensor([0, 3, 0, 1, 6, 7])

        A rank rotates its shard by these positions, and gets its rows of the
        rotation of the whole sequence:

        >>> from posenc import RotaryEmbedding
        >>> rope, q = RotaryEmbedding(8), torch.randn(8, 8)
        >>> mine = q[shard_order(8, 2, layout="zigzag")].chunk(2)[1]
        >>> whole = rope(q)[shard_order(8, 2, layout="zigzag")].chunk(2)[1]
        >>> torch.equal(rope(mine, positions=shard_positions(8, 2, 1, layout="zigzag")), whole)
        True
    """
    length = _checks.nonnegative_int("length", length)
    world_size = _checks.positive_int("world_size", world_size)
    layout = _checks.choice("layout", layout, SHARD_LAYOUTS)
    if layout == "zigzag":
        order = shard_order(length, world_size, layout=layout, lengths=lengths)
        rank = _checks.rank(rank, world_size)
        _, within = _documents(length, lengths)
        chunk = -(-length // world_size)
        mine = order[min(rank * chunk, length) : min((rank + 1) * chunk, length)]
        return (mine if within is None else within[mine]).to(_runtime.default_device(device))
    rank = _checks.rank(rank, world_size)
    return _contiguous_shard(length, world_size, rank, lengths, _runtime.default_device(device))


def _contiguous_shard(
    length: int,
    world_size: int,
    rank: int,
    lengths: Tensor | list[int] | tuple[int, ...] | None,
    where: torch.device,
) -> Tensor:
    """The positions of one contiguous shard, computed for that shard only.

    Rank ``r`` holds tokens ``[r·c, (r + 1)·c)`` of the sequence, ``c = ceil(L / W)``
    (``torch.chunk``'s cut); with ``lengths`` each token's position counts from the start
    of its document, found from the documents' lengths (ints) without building the
    positions of the whole sequence.
    """
    if lengths is None:
        if length > POSITION_MAX + 1:
            raise ValueError(
                f"length={length} is a sequence longer than the position domain allows: its "
                f"positions 0 .. {length - 1} must lie in {_DOMAIN} ({_DOMAIN_WHY})"
            )
        sizes = [length]
    else:
        sizes = _lengths_as_ints(lengths)
        _checks.packed_total(sizes, length)
    chunk = -(-length // world_size)
    lo, hi = min(rank * chunk, length), min((rank + 1) * chunk, length)
    _runtime.allocation(
        (hi - lo,),
        torch.int64,
        where,
        lambda: f"shard_positions' result for rank {rank} of {world_size} (L={length})",
        "cut the sequence over more ranks",
    )
    pieces = []
    start = 0
    for n in sizes:  # the documents that overlap [lo, hi), each from where the shard meets it
        stop = start + n
        if stop > lo and start < hi:
            first, last = max(lo, start), min(hi, stop)
            pieces.append(torch.arange(last - first, device=where) + (first - start))
        if stop >= hi:
            break
        start = stop
    if not pieces:
        return torch.zeros(0, dtype=torch.int64, device=where)
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


def _lengths_as_ints(lengths: Tensor | list[int] | tuple[int, ...]) -> list[int]:
    """Documents' lengths checked as :func:`positions_from_lengths` checks them, as ints."""
    if isinstance(lengths, Tensor):
        lens = _checks.integer_tensor("lengths", lengths, "a list of ints or a 1-D integer tensor")
        if lens.device.type == "meta":
            raise ValueError(
                "lengths is on the meta device, which holds no values: shard_positions needs "
                "the lengths to find a shard's documents; give them as a list of ints or a "
                "tensor with values"
            )
        if lens.dim() != 1:
            raise ValueError(f"lengths must be 1-D, got shape {tuple(lens.shape)}")
        values = [int(v) for v in lens.tolist()]
        if lens.dtype == torch.uint64:
            values = [v + 2**64 if v < 0 else v for v in values]
    else:
        values = []
        for given in lengths:
            n = _checks.as_integer(given)
            if n is None:
                raise TypeError(
                    f"lengths must be ints, got {type(given).__name__} {given!r:.40} in "
                    f"{lengths!r:.60}"
                )
            values.append(n)
    for n in values:
        if n < 0:
            raise ValueError(f"lengths must be >= 0, got {values!r:.80} (holds {n})")
        _length_in_domain(n)
    return values
