r"""The sinusoidal table: the one place where posenc writes down the formula.

Vaswani et al. (2017, §3.5) give position ``pos`` the vector whose column ``j``
is ``sin`` (even ``j``) or ``cos`` (odd ``j``) of the angle

.. math::

    \theta_{pos, j} = pos \cdot base^{-2 \lfloor j/2 \rfloor / d_{model}},
    \qquad base = 10000.

Every module of posenc calls :func:`sinusoidal_table`; none re-derives the formula.

Precision is the point of this file. Positions stay integers (``int64``) until
the last step; frequencies, angles, ``sin`` and ``cos`` are computed in
``float64`` and rounded once to the requested dtype. A table computed in float32
instead (as most implementations do) carries the float32 rounding of the angle,
which grows with the position:

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
from typing import Literal

import torch
from torch import Tensor

from . import _checks

__all__ = ["LAYOUTS", "Layout", "inverse_frequencies", "sinusoidal_table"]

Layout = Literal["interleaved", "concatenated"]
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

    Args:
        d_model: Width of the table; ``ceil(d_model / 2)`` pairs (an odd
            ``d_model`` drops the last cosine column).
        base: Base of the geometric progression of wavelengths.
        endpoint: Whether the slowest frequency is exactly ``1 / base``.
        device: Device of the result.

    Returns:
        Tensor of shape ``(ceil(d_model / 2),)`` and dtype float64.

    Example:
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
    pairs = (d_model + 1) // 2
    k = torch.arange(pairs, dtype=torch.float64, device=device)
    span = max(pairs - 1, 1) if endpoint else d_model / 2
    return torch.pow(base, -k / span)


def sinusoidal_table(
    positions: int | Tensor,
    d_model: int,
    *,
    base: float = 10_000.0,
    layout: Layout = "interleaved",
    endpoint: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The sinusoidal positional encoding of the given positions.

    With the defaults, column ``j`` holds ``sin`` (even ``j``) or ``cos`` (odd
    ``j``) of ``pos * base ** (-2 * (j // 2) / d_model)``: the paper's
    interleaved layout, defined for every ``d_model >= 1``. The angles and their
    sines are computed in float64 and rounded once to ``dtype``.

    ``layout`` and ``endpoint`` select the conventions of other libraries
    (the user guide's Conventions page lists them): ``"concatenated"`` puts the ``ceil(D/2)``
    sine columns first and the ``floor(D/2)`` cosine columns after them;
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
        dtype: Floating dtype of the result.
        device: Device of the result; by default that of ``positions`` (the
            CPU for an int). Devices without float64 (MPS) compute on the CPU
            and move the result.

    Returns:
        Tensor of shape ``(n, d_model)`` for an int, ``(*positions.shape, d_model)``
        for a tensor.

    Raises:
        TypeError: ``positions`` is not an int or an integer tensor, ``d_model``
            is not an int, or ``dtype`` is not a floating dtype.
        ValueError: ``positions`` is a negative int, ``d_model < 1``,
            ``base <= 1`` or ``layout`` is unknown.

    Shapes:
        - positions: ``(*)``, integer
        - output: ``(*, D)`` with D = ``d_model``

    Example:
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
    dtype = _checks.floating_dtype("dtype", dtype)
    base, endpoint = _checks.base(base), _checks.flag("endpoint", endpoint)
    if isinstance(positions, Tensor):
        pos: Tensor | None = _checks.integer_tensor(
            "positions", positions, "an int or an integer tensor"
        )
        shape = tuple(positions.shape)
        out_device = torch.device(device) if device is not None else positions.device
    elif isinstance(positions, bool) or not isinstance(positions, int):
        raise TypeError(
            "positions must be an int or an integer tensor, "
            f"got {type(positions).__name__} {positions!r:.60}"
        )
    else:
        pos = None
        shape = (_checks.nonnegative_int("positions (a length, as an int)", positions),)
        out_device = torch.device(device) if device is not None else torch.device("cpu")

    def what() -> str:
        return f"a sinusoidal table of {math.prod(shape)} positions × d_model={d_model}"

    _checks.allocation((*shape, d_model), dtype, out_device, what)
    # float64 is the working precision; MPS (and any device without it) works on the CPU.
    work_device = torch.device("cpu") if out_device.type == "mps" else out_device
    freqs = inverse_frequencies(d_model, base=base, endpoint=endpoint, device=work_device)
    n = math.prod(shape)
    flat = pos.reshape(-1).to(work_device) if pos is not None else None

    def rows(start: int, stop: int) -> Tensor:
        p = flat[start:stop] if flat is not None else torch.arange(start, stop, device=work_device)
        return _rows(p, freqs, layout, d_model)

    step = max(1, _CHUNK // freqs.numel())
    if n <= step:
        return rows(0, n).reshape(*shape, d_model).to(device=out_device, dtype=dtype)
    # Large tables: float64 work in slices, so the temporaries stay small; the positions
    # of an int length are made slice by slice too.
    out = _checks.empty((n, d_model), dtype, work_device, what)
    for start in range(0, n, step):
        out[start : start + step] = rows(start, min(start + step, n))
    return out.reshape(*shape, d_model).to(device=out_device)


# Angles per float64 slice of a large table: 32 MB of temporaries per array.
_CHUNK = 1 << 22


def _rows(pos: Tensor, freqs: Tensor, layout: Layout, d_model: int) -> Tensor:
    """The float64 rows of the given positions: the formula, written once."""
    angles = pos.to(torch.float64).unsqueeze(-1) * freqs
    sin, cos = torch.sin(angles), torch.cos(angles)
    if layout == "interleaved":
        table = torch.stack((sin, cos), dim=-1).flatten(-2)
    else:
        table = torch.cat((sin, cos), dim=-1)
    return table[..., :d_model]
