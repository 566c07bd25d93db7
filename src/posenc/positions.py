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

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from torch import Tensor

from . import _checks, _runtime

__all__ = [
    "POSITION_MAX",
    "POSITION_MIN",
    "SHARD_LAYOUTS",
    "AxisPositions",
    "Positions",
    "ShardLayout",
    "check_domain",
    "grid_positions",
    "positions_from_lengths",
    "positions_from_mask",
    "resolve",
    "resolve_axes",
    "shard_order",
    "shard_positions",
]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: The largest position, ``2**62 - 1``. Every difference of two positions fits in int64.
POSITION_MAX = 2**62 - 1
#: The smallest position, ``-(2**62 - 1)``, so that the domain is symmetric (``|p| < 2**62``).
POSITION_MIN = -POSITION_MAX
#: The largest distance ``|key - query|`` of a relative position: ``2**63 - 1`` (int64
#: but ``-2**63``, whose opposite is not an int64).
RELATIVE_MAX = INT64_MAX

_DOMAIN = "int64's position domain |p| < 2**62"
_DOMAIN_WHY = (
    "positions must lie in [-(2**62 - 1), 2**62 - 1], half of int64's range, so that every "
    "difference of two positions fits in int64"
)
_RELATIVE = "int64's domain of relative positions |r| < 2**63"
_RELATIVE_WHY = (
    "relative positions must lie in [-(2**63 - 1), 2**63 - 1]: -2**63 has no opposite in int64"
)


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


def check_domain(
    name: str, value: int | Tensor, *, count: int = 1, relative: bool = False
) -> None:
    """Refuse positions outside the position domain ``|p| < 2**62``, naming the value.

    The one check of the domain, for every scheme: call it on positions (or on an
    offset) before widening them to int64, so that ``uint64`` values from ``2**63``
    are refused rather than wrapped to negative ones.

    Args:
        name: The argument's name, for the message (``"offset"``, ``"positions"``).
        value: An int, or an integer tensor of any dtype. A tensor is read only
            where that is free (on the CPU, eagerly: ``_runtime.readable``); on an
            accelerator, under :func:`torch.compile` or a :mod:`torch.func`
            transform it is not checked. Only int64 and uint64 tensors can hold
            values outside the domain; narrower dtypes are never read.
        count: ``value`` is the first of ``count`` consecutive positions (an
            offset for ``count`` tokens): ``value + count - 1`` is checked too.
            With ``count=0`` only ``value`` itself is.
        relative: ``value`` holds relative positions (``key - query``), whose
            domain is ``|r| < 2**63``: every int64 but ``-2**63``.

    Raises:
        ValueError: a value lies outside the domain; the message names it.
    """
    low, high = (-RELATIVE_MAX, RELATIVE_MAX) if relative else (POSITION_MIN, POSITION_MAX)
    last = max(count, 1) - 1
    if isinstance(value, Tensor):
        if value.dtype not in (torch.int64, torch.uint64) or value.numel() == 0:
            return
        if not _runtime.readable(value):
            return
        wide = value.view(torch.int64)  # a uint64 from 2**63 reads as a negative int64
        lo, hi = (int(v) for v in torch.aminmax(wide))
        if value.dtype == torch.uint64 and lo < 0:
            bad = lo + 2**64  # the smallest uint64 value from 2**63
        elif lo < low:
            bad = lo
        elif hi + last > high:
            bad = hi
        else:
            return
        subject = f"{name} holds {bad}, which"
    elif low <= value and value + last <= high:
        return
    else:
        bad, subject = value, f"{name}={value}"
    domain, why = (_RELATIVE, _RELATIVE_WHY) if relative else (_DOMAIN, _DOMAIN_WHY)
    if last and low <= bad <= high:
        raise ValueError(
            f"{subject} puts positions outside {domain} for L={count} (the last at "
            f"{bad + last}): {why}"
        )
    raise ValueError(f"{subject} is outside {domain}: {why}")


def _check_device(name: str, t: Tensor, device: torch.device | None, *, scalar_ok: bool) -> None:
    """``t`` is on ``device`` (the input's), or a 0-d CPU tensor where ``scalar_ok``."""
    if device is None or t.device == device:
        return
    if scalar_ok and t.dim() == 0 and t.device.type == "cpu":
        return  # torch's own rule: a 0-d CPU tensor goes with tensors on any device
    raise ValueError(
        f"{name} must be on the device of the input ({device}), got a tensor on {t.device}: "
        f"move it with {name}.to({str(device)!r})"
    )


def _as_int64(name: str, t: object, what: str) -> Tensor:
    """An integer tensor of any dtype, in the position domain, widened to int64.

    Bool and floating tensors are refused; the domain is checked before the widening.
    """
    t = _checks.integer_tensor(name, t, what)
    check_domain(name, t)
    return t if t.dtype == torch.int64 else t.to(torch.int64)


def _positions_tensor(
    positions: object, offset: object, where: torch.device | None, shape_text: str
) -> Tensor:
    """``positions`` checked (no offset beside it, integer, on ``where``) and widened to int64."""
    if not (isinstance(offset, int) and not isinstance(offset, bool) and offset == 0):
        raise ValueError(
            "give either offset or positions, not both: add the offset to the positions"
        )
    _check_device(
        "positions",
        _checks.integer_tensor("positions", positions, shape_text),
        where,
        scalar_ok=False,
    )
    return _as_int64("positions", positions, shape_text)


def resolve(
    length: int,
    *,
    offset: int | Tensor = 0,
    positions: Tensor | None = None,
    batch: int | None = None,
    device: torch.device | str | None = None,
) -> Positions:
    """Check ``offset``/``positions`` against an input and return its :class:`Positions`.

    Every position lies in the position domain ``|p| < 2**62`` (see the module's
    docstring): an int ``offset`` is checked always, tensors where reading them is
    free (on the CPU, eagerly; :func:`check_domain`).

    Args:
        length: Number of tokens of the input, L: an int >= 0 (or a symbolic
            size while :mod:`torch.export` traces).
        offset: Position of the first token: an int, a 0-d integer tensor, or a
            ``(B,)`` integer tensor (one per sequence). Token ``t`` sits at
            ``offset + t``.
        positions: Integer tensor ``(L,)`` or ``(B, L)``: the position of every
            token. Excludes ``offset``.
        batch: Batch size B of the input, or None for an unbatched input or an
            accessor called without a batch (either takes only positions shared
            by the batch: ``(L,)``, or ``(1, L)`` as Hugging Face's
            ``position_ids``, returned as ``(L,)``). A per-sequence tensor may
            have B rows, or 1 to share its row.
        device: The input's device, or None to accept tensors on any device.
            ``positions`` and ``offset`` must be on it (a 0-d CPU ``offset`` is
            accepted too, as torch accepts 0-d CPU tensors with any device).

    Returns:
        The positions, with ``start`` set for an int or 0-d ``offset`` given
        as an int, ``values`` (int64) otherwise.

    Raises:
        TypeError: ``length`` is not an int, ``offset`` is neither an int nor
            an integer tensor, or ``positions`` is not an integer tensor (bool
            and floating tensors are refused; every integer dtype is accepted).
        ValueError: ``length`` is negative; both are given; a shape does not
            match ``length`` and ``batch``; a tensor is on another device than
            ``device``; a position lies outside the domain ``|p| < 2**62``.
    """
    length = _checks.length("length", length)
    where = None if device is None else torch.device(device)
    if positions is not None:
        index = _positions_tensor(
            positions, offset, where, "an integer tensor of shape (L,) or (B, L)"
        )
        if index.dim() not in (1, 2) or index.shape[-1] != length:
            raise ValueError(
                f"positions must have shape (L,) or (B, L) with L={length}, "
                f"got shape {tuple(index.shape)}"
            )
        if index.dim() == 2 and not (batch is None and index.shape[0] == 1):
            _check_rows("positions", tuple(index.shape), index.shape[0], batch)
        elif index.dim() == 2:
            index = index[0]  # one row and no batch: shared by every sequence, as (L,)
        return Positions(length, None, index)
    if isinstance(offset, Tensor):
        start = _checks.integer_tensor(
            "offset", offset, "an int or an integer tensor of shape () or (B,)"
        )
        _check_device("offset", start, where, scalar_ok=True)
        check_domain("offset", start, count=length)
        start = start if start.dtype == torch.int64 else start.to(torch.int64)
        if where is not None and start.device != where:
            start = start.to(where)  # a 0-d CPU offset, for an input elsewhere
        steps = torch.arange(length, device=start.device)
        if start.dim() == 0:
            return Positions(length, None, start + steps)
        if start.dim() != 1:
            raise ValueError(
                f"offset must be an int, a 0-d tensor or a (B,) tensor, "
                f"got shape {tuple(start.shape)}"
            )
        if batch is None and start.shape[0] == 1:
            return Positions(length, None, start[0] + steps)  # shared, as a 0-d offset
        _check_rows("offset", tuple(start.shape), start.shape[0], batch)
        return Positions(length, None, start.unsqueeze(-1) + steps)
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(
            f"offset must be an int or an integer tensor, got {type(offset).__name__} "
            f"{offset!r:.60}"
        )
    check_domain("offset", offset, count=length)
    return Positions(length, offset, None)


def _check_rows(name: str, shape: tuple[int, ...], rows: int, batch: int | None) -> None:
    if batch is None:
        shared = "(L,) or (1, L)" if name == "positions" else "() or (1,)"
        raise ValueError(
            f"{name} of shape {shape} gives one row per sequence, but there is no batch "
            f"to match them (an unbatched input, or an accessor such as cos_sin called "
            f"without batch=): give {name} of shape {shared}, shared by every sequence, "
            f"or the batch size"
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
            Floating masks are refused: one may mean 1 keep, 0 drop, or be
            additive (0 keep, ``-inf`` drop, as Hugging Face builds them), and
            reading one as the other inverts it. Convert it first:
            ``mask.bool()`` for a 0/1 mask, ``additive == 0`` for an additive one.

    Returns:
        ``torch.long`` tensor of the shape of ``mask``.

    Raises:
        TypeError: ``mask`` is not a bool or integer tensor (a floating mask
            included: the message says how to convert it).

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
    mask = _checks.bool_mask("mask", mask, "True or 1 = real token")
    real = mask if mask.dtype == torch.bool else mask != 0
    counts = real.cumsum(dim=-1)
    return (counts - 1).masked_fill(~real, 0)


def positions_from_lengths(lengths: Tensor | list[int] | tuple[int, ...]) -> Tensor:
    """Positions of sequences packed end to end: each restarts at 0.

    A packed batch puts several sequences into one row, to waste no slots on
    padding; each token's position counts from the start of its own sequence.

    The size of the result is the sum of the lengths, so the lengths are read:
    on an accelerator that is a device-to-host sync, and a tensor on the meta
    device (which holds no values) is refused. The result is refused before any
    work when it would not fit in the device's memory; it is the only tensor of
    its size that the computation holds.

    Args:
        lengths: Length of each packed sequence, in order: a list of ints or a
            1-D integer tensor. Zero lengths are allowed.

    Returns:
        ``torch.long`` tensor ``(sum(lengths),)`` on the device of ``lengths``.

    Raises:
        TypeError: ``lengths`` is not a sequence of ints or an integer tensor.
        ValueError: ``lengths`` is not 1-D, holds a negative length or one past
            the position domain (``2**62 - 1``), is on the meta device, or sums
            to more positions than the device's memory holds.

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
            _length_in_domain(n)
        lengths = torch.tensor(lengths, dtype=torch.int64)
    lens = _checks.integer_tensor("lengths", lengths, "a list of ints or a 1-D integer tensor")
    if lens.dim() != 1:
        raise ValueError(f"lengths must be 1-D, got shape {tuple(lens.shape)}")
    if lens.device.type == "meta":
        raise ValueError(
            "lengths is on the meta device, which holds no values: the size of "
            "positions_from_lengths' result is their sum, so it needs them; give the "
            "lengths as a list of ints or a tensor with values"
        )
    # The output's size is the total length: reading it is a sync on an accelerator
    # whatever is done, so the range is checked with it.
    if lens.numel() == 0:
        return torch.zeros(0, dtype=torch.int64, device=lens.device)
    wide = lens.view(torch.int64) if lens.dtype == torch.uint64 else lens.to(torch.int64)
    lo, hi = (int(v) for v in torch.aminmax(wide))
    if lens.dtype == torch.uint64 and lo < 0:
        _length_in_domain(lo + 2**64)
    if lo < 0:
        raise ValueError(f"lengths must be >= 0, got {lens.tolist()!r:.80} (holds {lo})")
    _length_in_domain(hi)
    # int64 sums exactly while N * max < 2**63; past that, Python's ints do.
    total = int(wide.sum()) if hi * wide.numel() <= INT64_MAX else sum(wide.tolist())
    if total > POSITION_MAX + 1:
        raise ValueError(
            f"lengths sum to {total}: a packed row of that many tokens is past {_DOMAIN} "
            f"({_DOMAIN_WHY})"
        )
    _runtime.allocation(
        (total,),
        torch.int64,
        lens.device,
        lambda: f"positions_from_lengths' result for lengths summing to {total}",
        "pack fewer tokens",
    )
    # Ones, cumulated in place, with each sequence's first token set so that the sum
    # restarts at 0 there: the result is the only tensor of its size.
    sizes = wide[wide > 0]
    starts = torch.cumsum(sizes, 0) - sizes
    restarts = 1 - sizes.roll(1)
    restarts[:1] = 0
    out = torch.ones(total, dtype=torch.int64, device=lens.device)
    out[starts] = restarts
    return out.cumsum_(0)


def _length_in_domain(n: int) -> None:
    """A length gives positions 0 .. n - 1, which must lie in the position domain."""
    if n > POSITION_MAX + 1:
        raise ValueError(
            f"lengths holds {n}, a sequence longer than the position domain allows: its "
            f"positions 0 .. {n - 1} must lie in {_DOMAIN} ({_DOMAIN_WHY})"
        )


# -- Across ranks: the global positions of a shard -----------------------------------------

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
    order = shard_order(length, world_size, layout=layout, lengths=lengths)
    rank = _checks.rank(rank, world_size)
    _, within = _documents(length, lengths)
    chunk = -(-length // world_size)
    lo, hi = min(rank * chunk, length), min((rank + 1) * chunk, length)
    mine = order[lo:hi]
    return (mine if within is None else within[mine]).to(_runtime.default_device(device))


# -- Positions on axes -------------------------------------------------------------------


class AxisPositions(NamedTuple):
    """Positions on ``A`` axes (t, h, w, ...), as :func:`resolve_axes` returns them.

    Attributes:
        length: Number of tokens, L.
        values: ``int64`` positions, ``(A, L)`` (shared by the batch) or ``(A, B, L)``
            (one row per sequence; B may be 1), axes first.
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
        return self.values if device is None else self.values.to(device)

    def within(self, size: int) -> bool:
        """Whether every position on every axis is known to lie in ``[0, size)``.

        As :meth:`Positions.within`: read only where that is free (on the CPU, eagerly).

        Args:
            size: Number of rows of the table.

        Returns:
            Whether :meth:`take` may read every position from such a table.
        """
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
        index = self.per_pair(pair_axes.to(self.values.device)).to(table.device)
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

    Returns:
        :class:`AxisPositions` for positions on axes, else :func:`resolve`'s
        :class:`Positions`.

    Raises:
        TypeError: as :func:`resolve`.
        ValueError: as :func:`resolve`; a 2-D tensor is ambiguous, or a shape
            fits neither form.

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
        return resolve(length, offset=offset, positions=positions, batch=batch, device=device)
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
            return resolve(length, offset=offset, positions=positions, batch=batch, device=device)
    elif rows == 1:
        return resolve(length, offset=offset, positions=positions[0], batch=batch, device=device)
    where = None if device is None else torch.device(device)
    index = _positions_tensor(
        positions, offset, where, "an integer tensor of shape (L,), (B, L), (A, L) or (A, B, L)"
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
    for i, (start, n) in enumerate(zip(starts, counts, strict=True)):
        if isinstance(start, bool) or not isinstance(start, int):
            raise TypeError(
                f"offset must be an int or a tuple of ints, got {_checks._show(start)}"
            )
        check_domain(f"offset[{i}]" if isinstance(offset, tuple) else "offset", start, count=n)
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
