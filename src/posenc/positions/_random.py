"""Randomized positions: sorted positions drawn from a range longer than the sequence."""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _checks, _runtime
from ._resolve import POSITION_MAX


def random_positions(
    length: int,
    max_position: int,
    *,
    batch: int | None = None,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Sorted distinct positions drawn at random from ``range(max_position)``.

    Ruoss et al. (2023, *Randomized Positional Encodings Boost Length
    Generalization of Transformers*, ACL) train on short sequences whose
    positions are not ``0 .. L - 1`` but a random subset of a range as long as
    the longest sequence the model will meet, kept in order: the model sees
    every position and every distance of that range in training. Their code
    (``google-deepmind/randomized_positional_encodings``,
    ``models/positional_encodings.py``, ``noisy_fixed_positional_encodings``)
    draws ``length`` indices of ``arange(max_position)`` without replacement and
    sorts them, one draw shared by the batch; this is that rule, for any scheme
    that takes ``positions=``. With ``batch``, each sequence gets its own draw
    (row ``b`` is the ``b``-th draw from ``generator``).

    Every subset of ``length`` positions is equally likely (a uniform random
    permutation's first ``length`` entries). The draw is made on the CPU, or on
    the generator's device, and moved to ``device``.

    Args:
        length: Number of positions, L.
        max_position: Size of the range, at least ``length``.
        batch: Number of independent draws, B, or None for one ``(L,)`` draw.
        generator: The random generator (default: torch's global one).
        device: Where the result goes (default: torch's default device).

    Returns:
        ``torch.long`` positions, strictly increasing along the last dimension.

    Raises:
        TypeError: ``length``, ``max_position`` or ``batch`` is not an int.
        ValueError: ``length`` is negative, ``max_position < length`` or beyond
            the position domain, or ``batch`` is not positive.

    Shapes:
        - output: ``(L,)``, or ``(B, L)`` with ``batch``

    Example:
        >>> import torch
        >>> from posenc import RotaryEmbedding, random_positions
        >>> g = torch.Generator().manual_seed(0)
        >>> pos = random_positions(5, 20, generator=g)
        >>> pos
        tensor([ 4,  5,  7, 13, 19])
        >>> random_positions(5, 20, generator=torch.Generator().manual_seed(0)).equal(pos)
        True
        >>> random_positions(3, 10, batch=2, generator=g).shape
        torch.Size([2, 3])
        >>> q = torch.randn(1, 2, 5, 8)  # (B, H, L, d): trained at positions from 0 .. 19
        >>> RotaryEmbedding(8)(q, positions=pos).shape
        torch.Size([1, 2, 5, 8])
    """
    n = _checks.integer("length", length)
    if n < 0:
        raise ValueError(f"length must be >= 0, got {n}")
    top = _checks.integer("max_position", max_position)
    if top < n:
        raise ValueError(
            f"max_position={top} leaves no room for {n} distinct positions: "
            f"give max_position >= length"
        )
    if top > POSITION_MAX + 1:
        raise ValueError(f"max_position={top} is past the position domain (< 2**62)")
    rows = None if batch is None else _checks.positive_int("batch", batch)
    where = _runtime.default_device(device)
    draw = generator.device if generator is not None else torch.device("cpu")
    _runtime.allocation(
        (top,), torch.int64, draw, lambda: f"a permutation of max_position={top} positions"
    )

    def one() -> Tensor:
        return torch.randperm(top, generator=generator, device=draw)[:n].sort().values

    out = one() if rows is None else torch.stack([one() for _ in range(rows)])
    return out.to(where)
