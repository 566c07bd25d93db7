r"""The sinusoidal table: the one place where posenc writes down the formula.

Vaswani et al. (2017, §3.5) give position ``pos`` the vector whose column ``j``
is ``sin`` (even ``j``) or ``cos`` (odd ``j``) of the angle

.. math::

    \theta_{pos, j} = pos \cdot base^{-2 \lfloor j/2 \rfloor / d_{model}},
    \qquad base = 10000.

Every module of posenc calls :func:`sinusoidal_table`; none re-derives the formula.

Precision is the point of this file. Positions stay integers (``int64``) until
the last step; frequencies, angles, ``sin`` and ``cos`` are computed in
``float64`` and rounded once to the requested dtype, and every float32 entry is
within 3e-8 of the exact value for every position below 2**31
(:ref:`guide-precision` proves it). A table computed in float32 instead (as most
implementations do) carries the float32 rounding of the angle, which grows with
the position:

>>> import torch
>>> from posenc import sinusoidal_table
>>> exact = sinusoidal_table(torch.tensor([5_000]), 512, dtype=torch.float64)
>>> ours = sinusoidal_table(torch.tensor([5_000]), 512)
>>> bool((ours.double() - exact).abs().max() < 3e-8)
True

The first rows start with ``sin 0 = 0`` and ``cos 0 = 1`` in every column pair:

>>> sinusoidal_table(3, 4)
tensor([[ 0.0000,  1.0000,  0.0000,  1.0000],
        [ 0.8415,  0.5403,  0.0100,  0.9999],
        [ 0.9093, -0.4161,  0.0200,  0.9998]])
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import _angles, _checks, _runtime
from ._angles import Layout
from ._rounding import round_into, round_once
from .positions import check_domain

__all__ = ["LAYOUTS", "Layout", "inverse_frequencies", "sinusoidal_table"]

#: The two column orders of the sinusoid in use.
LAYOUTS: tuple[Layout, ...] = ("interleaved", "concatenated")


def inverse_frequencies(
    d_model: int,
    *,
    base: float = 10_000.0,
    endpoint: bool = False,
    device: torch.device | str | None = None,
) -> Tensor:
    """Angular frequency of each sin/cos column pair, in float64.

    With ``K = ceil(d_model / 2)`` pairs, pair ``k`` turns at
    ``base ** (-k / (d_model / 2))`` radians per position (the paper's spacing),
    or at ``base ** (-k / (K - 1))`` with ``endpoint=True`` (tensor2tensor's and
    fairseq's spacing, whose slowest frequency is exactly ``1 / base``). Either
    way the wavelengths ``2π / ω_k`` grow geometrically from ``2π``.

    Each frequency is the float64 number nearest to the exact power, from the
    ladder that every scheme of posenc shares (:func:`posenc.frequencies.ladder`):
    ``torch.pow`` in float64 is up to a few units in the last place off when the
    exponent ``k / (d_model / 2)`` is not a binary fraction, and at position 10^6
    every such unit moves the angle by 1e-10.

    Args:
        d_model: Width of the table; ``ceil(d_model / 2)`` pairs (an odd
            ``d_model`` drops the last cosine column).
        base: Base of the geometric progression of wavelengths.
        endpoint: Whether the slowest frequency is exactly ``1 / base``.
        device: Device of the result.

    Returns:
        Tensor of shape ``(ceil(d_model / 2),)`` and dtype float64.

    Example:
        >>> from posenc import inverse_frequencies
        >>> import math
        >>> w = inverse_frequencies(512)
        >>> w.shape, w.dtype, w[0].item()
        (torch.Size([256]), torch.float64, 1.0)
        >>> round(2 * math.pi / w[-1].item())  # the longest wavelength, in positions
        60611
        >>> round(2 * math.pi / inverse_frequencies(512, endpoint=True)[-1].item())
        62832
    """
    d_model = _checks.positive_int("d_model", d_model)
    base = _checks.base(base)
    endpoint = _checks.flag("endpoint", endpoint)
    freqs, _, _ = _angles.frequencies(d_model, base, endpoint)
    return torch.tensor(freqs, dtype=torch.float64, device=device)


def sinusoidal_table(
    positions: int | Tensor,
    d_model: int,
    *,
    base: float = 10_000.0,
    layout: Layout = "interleaved",
    endpoint: bool = False,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """The sinusoidal positional encoding of the given positions.

    With the defaults, column ``j`` holds ``sin`` (even ``j``) or ``cos`` (odd
    ``j``) of ``pos * base ** (-2 * (j // 2) / d_model)``: the paper's
    interleaved layout, defined for every ``d_model >= 1``. The sines and
    cosines are computed in float64 (by angle addition;
    :ref:`guide-precision-proof` proves the bound) and rounded once to ``dtype``: a float32
    entry is within half a float32 ulp plus 3e-15 of the exact value, under
    3e-8, at every position below 2**31.

    ``layout`` and ``endpoint`` select the conventions of other libraries
    (:ref:`guide-conventions` lists them): ``"concatenated"`` puts the
    ``ceil(D/2)`` sine columns first and the ``floor(D/2)`` cosine columns after them;
    ``endpoint=True`` spaces the frequencies as in :func:`inverse_frequencies`.

    Args:
        positions: Either an int ``n``, for the rows of positions ``0 .. n-1``,
            or an integer tensor of any shape holding the positions (any
            integers, also negative ones or ones past any ``max_len``).
        d_model: Number of columns.
        base: Base of the geometric progression of wavelengths.
        layout: ``"interleaved"`` (sin, cos, sin, cos, ...) or
            ``"concatenated"`` (all sines, then all cosines).
        endpoint: Frequency spacing; see :func:`inverse_frequencies`.
        dtype: Floating dtype of the result (default: torch's default dtype,
            float32 unless :func:`torch.set_default_dtype` says otherwise).
        device: Device of the result; by default that of ``positions`` (for
            an int, torch's default device: the CPU unless set). Devices
            without float64 (MPS) compute on the CPU and move the result.

    Returns:
        Tensor of shape ``(n, d_model)`` for an int, ``(*positions.shape, d_model)``
        for a tensor.

    Raises:
        TypeError: ``positions`` is not an int or an integer tensor, ``d_model``
            is not an int, or ``dtype`` is not a floating dtype.
        ValueError: ``positions`` is a negative int, ``d_model < 1``,
            ``base <= 1``, ``layout`` is unknown, or a position lies outside the
            position domain ``|p| < 2**62`` (checked for tensors on the CPU; see
            :func:`posenc.positions.check_domain`).

    Shapes:
        - positions: ``(*)``, integer
        - output: ``(*, D)`` with D = ``d_model``

    Example:
        >>> import torch
        >>> from posenc import sinusoidal_table
        >>> t = sinusoidal_table(100, 20)
        >>> t.shape, t.dtype
        (torch.Size([100, 20]), torch.float32)
        >>> bool((t[:, 0::2] ** 2 + t[:, 1::2] ** 2 - 1).abs().max() < 1e-6)
        True

        Any integer tensor works, including batches of positions:

        >>> sinusoidal_table(torch.tensor([[0, 1], [1, 0]]), 8).shape
        torch.Size([2, 2, 8])
        >>> sinusoidal_table(7, 5).shape  # odd d_model: the last cos column is dropped
        torch.Size([7, 5])

        The same values in the other column order:

        >>> inter = sinusoidal_table(10, 6)
        >>> concat = sinusoidal_table(10, 6, layout="concatenated")
        >>> torch.equal(concat, torch.cat([inter[:, 0::2], inter[:, 1::2]], dim=1))
        True
    """
    d_model = _checks.positive_int("d_model", d_model)
    layout = _checks.choice("layout", layout, LAYOUTS)
    dtype = _checks.floating_dtype("dtype", _runtime.default_dtype(dtype))
    base, endpoint = _checks.base(base), _checks.flag("endpoint", endpoint)
    if isinstance(positions, Tensor):
        pos: Tensor | None = _checks.integer_tensor(
            "positions", positions, "an int or an integer tensor"
        )
        check_domain("positions", positions)
        shape = tuple(positions.shape)
        out_device = torch.device(device) if device is not None else positions.device
    elif _checks.as_integer(positions) is None:
        raise TypeError(
            "positions must be an int or an integer tensor, "
            f"got {type(positions).__name__} {positions!r:.60}"
        )
    else:
        pos = None
        shape = (_checks.nonnegative_int("positions (a length, as an int)", positions),)
        check_domain("positions (a length, as an int)", 0, count=shape[0])
        out_device = _runtime.default_device(device)

    def what() -> str:
        return f"a sinusoidal table of {math.prod(shape)} positions × d_model={d_model}"

    _runtime.allocation((*shape, d_model), dtype, out_device, what)
    work_device = _runtime.work_device(out_device)  # float64 is the working precision
    n = math.prod(shape)
    if n == 0:
        return torch.empty((*shape, d_model), dtype=dtype, device=out_device)
    constants = _angles.frequencies(d_model, _runtime.constant(base), endpoint)
    freqs = _angles.Frequencies(constants, work_device)
    if pos is None:
        # Whole blocks of rows per piece, as many as fit in _angles.PIECE cells.
        blocks_per_piece = max(1, _angles.PIECE // (_angles.BLOCK * freqs.pairs))
        if n <= blocks_per_piece * _angles.BLOCK:
            table = _angles.range_table(n, freqs, layout, d_model)
            return round_once(table, dtype).to(out_device, dtype)
        out = _runtime.empty((n, d_model), dtype, work_device, what)
        _angles.touch_pages(out)
        _angles.fill_range(out, blocks_per_piece, freqs, layout)
        return out.to(device=out_device)
    # Tables a forward pass computes on the fly are one piece: no loop, so that a traced
    # graph holds for every length.
    one_piece = n * freqs.pairs <= _angles.ONE_PIECE
    rows_per_piece = n if one_piece else max(1, _angles.PIECE // freqs.pairs)
    flat = pos.reshape(-1).to(device=work_device, dtype=torch.int64)
    pieces = _angles.pieces_of_positions(flat, rows_per_piece, freqs, layout, d_model)
    if one_piece:
        _, table = next(pieces)
        return round_once(table, dtype).reshape(*shape, d_model).to(out_device, dtype)
    out = _runtime.empty((n, d_model), dtype, work_device, what)
    for start, piece in pieces:
        round_into(out[start : start + piece.shape[0]], piece)
    return out.reshape(*shape, d_model).to(device=out_device)
