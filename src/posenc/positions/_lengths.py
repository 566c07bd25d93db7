"""Masks and lengths: the positions of padded batches and of packed sequences."""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _checks, _runtime
from ._resolve import _DOMAIN, _DOMAIN_WHY, INT64_MAX, POSITION_MAX


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
        >>> import torch
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
    ``(B, N)`` lengths describe B packed rows, each summing to the same length.

    The size of the result is the sum of the lengths, so the lengths are read:
    on an accelerator that is a device-to-host sync, and a tensor on the meta
    device (which holds no values) is refused. The result is refused before any
    work when it would not fit in the device's memory; it is the only tensor of
    its size that the computation holds.

    Args:
        lengths: Length of each packed sequence, in order: a list of ints, a
            1-D integer tensor, or a ``(B, N)`` one for B packed rows. Zero
            lengths are allowed.

    Returns:
        ``torch.long`` tensor ``(sum(lengths),)``, or ``(B, T)``, on the device of
        ``lengths``.

    Raises:
        TypeError: ``lengths`` is not a sequence of ints or an integer tensor.
        ValueError: ``lengths`` is not 1-D or 2-D, holds a negative length or one
            past the position domain (``2**62 - 1``), is on the meta device, sums
            to more positions than the device's memory holds, or its rows differ
            in total.

    Shapes:
        - lengths: ``(N,)`` for N sequences, or ``(B, N)``
        - output: ``(T,)`` with T = ``sum(lengths)``, or ``(B, T)``

    Example:
        >>> import torch
        >>> positions_from_lengths([3, 2])
        tensor([0, 1, 2, 0, 1])
        >>> positions_from_lengths(torch.tensor([2, 0, 3]))
        tensor([0, 1, 0, 1, 2])
        >>> positions_from_lengths(torch.tensor([[3, 2], [1, 4]]))
        tensor([[0, 1, 2, 0, 1],
                [0, 0, 1, 2, 3]])
    """
    lens = _lengths_tensor(lengths)
    if lens.dim() == 2:
        totals = lens.sum(-1)
        if totals.numel() and not bool((totals == totals[0]).all()):
            raise ValueError(
                f"the packed rows of lengths must have the same total length, got totals "
                f"{totals.tolist()!r:.80}: pad the shorter rows with a document of padding"
            )
        return _packed(lens.reshape(-1)).reshape(lens.shape[0], -1)
    return _packed(lens)


def _lengths_tensor(lengths: object) -> Tensor:
    """``lengths`` checked: an int64 tensor ``(N,)`` or ``(B, N)`` of lengths in the domain."""
    if isinstance(lengths, (list, tuple)):
        counts: list[object] = []
        for n in lengths:
            row = []
            for m in n if isinstance(n, (list, tuple)) else [n]:
                count = _checks.as_integer(m)
                if count is None:
                    raise TypeError(
                        f"lengths must be ints, got {type(m).__name__} {m!r:.40} "
                        f"in {lengths!r:.60}"
                    )
                _length_in_domain(count)
                row.append(count)
            counts.append(row if isinstance(n, (list, tuple)) else row[0])
        lengths = torch.tensor(counts, dtype=torch.int64)
    lens = _checks.integer_tensor("lengths", lengths, "a list of ints or a 1-D integer tensor")
    if lens.dim() not in (1, 2):
        raise ValueError(f"lengths must be 1-D or (B, N), got shape {tuple(lens.shape)}")
    if lens.device.type == "meta":
        raise ValueError(
            "lengths is on the meta device, which holds no values: the size of "
            "positions_from_lengths' result is their sum, so it needs them; give the "
            "lengths as a list of ints or a tensor with values"
        )
    if lens.numel() == 0:
        return lens.to(torch.int64)
    wide = lens.view(torch.int64) if lens.dtype == torch.uint64 else lens.to(torch.int64)
    lo, hi = (int(v) for v in torch.aminmax(wide))
    if lens.dtype == torch.uint64 and lo < 0:
        _length_in_domain(lo + 2**64)
    if lo < 0:
        raise ValueError(f"lengths must be >= 0, got {lens.tolist()!r:.80} (holds {lo})")
    _length_in_domain(hi)
    return wide


def _packed(wide: Tensor) -> Tensor:
    """The positions of checked 1-D int64 lengths (the reading of their total is a sync)."""
    if wide.numel() == 0:
        return torch.zeros(0, dtype=torch.int64, device=wide.device)
    hi = int(wide.max())
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
        wide.device,
        lambda: f"positions_from_lengths' result for lengths summing to {total}",
        "pack fewer tokens",
    )
    # Ones, cumulated in place, with each sequence's first token set so that the sum
    # restarts at 0 there: the result is the only tensor of its size.
    sizes = wide[wide > 0]
    starts = torch.cumsum(sizes, 0) - sizes
    restarts = 1 - sizes.roll(1)
    restarts[:1] = 0
    out = torch.ones(total, dtype=torch.int64, device=wide.device)
    out[starts] = restarts
    return out.cumsum_(0)


def _length_in_domain(n: int) -> None:
    """A length gives positions 0 .. n - 1, which must lie in the position domain."""
    if n > POSITION_MAX + 1:
        raise ValueError(
            f"lengths holds {n}, a sequence longer than the position domain allows: its "
            f"positions 0 .. {n - 1} must lie in {_DOMAIN} ({_DOMAIN_WHY})"
        )
