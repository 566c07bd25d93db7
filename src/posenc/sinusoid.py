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

import torch
from torch import Tensor

__all__ = ["inverse_frequencies", "sinusoidal_table"]


def _check_d_model(d_model: object) -> int:
    if isinstance(d_model, bool) or not isinstance(d_model, int):
        raise TypeError(f"d_model must be an int, got {type(d_model).__name__} {d_model!r}")
    if d_model <= 0:
        raise ValueError(f"d_model must be a positive int, got {d_model}")
    return d_model


def _check_base(base: object) -> float:
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(f"base must be a number, got {type(base).__name__} {base!r}")
    if not base > 1.0 or base == float("inf"):
        raise ValueError(f"base must be a finite number > 1, got {base}")
    return float(base)


def inverse_frequencies(
    d_model: int, *, base: float = 10_000.0, device: torch.device | str | None = None
) -> Tensor:
    """Angular frequency of each sin/cos column pair, in float64.

    Pair ``k`` (columns ``2k`` and ``2k+1``) turns at ``base ** (-2k / d_model)``
    radians per position, so the wavelengths ``2π / ω_k`` grow geometrically
    from ``2π`` to almost ``2π · base``.

    Args:
        d_model: Width of the table; ``ceil(d_model / 2)`` pairs (an odd
            ``d_model`` drops the last cosine column).
        base: Base of the geometric progression of wavelengths.
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
    """
    d_model = _check_d_model(d_model)
    base = _check_base(base)
    k = torch.arange((d_model + 1) // 2, dtype=torch.float64, device=device)
    return torch.pow(base, -2.0 * k / d_model)


def _is_integer(t: Tensor) -> bool:
    return not (t.is_floating_point() or t.is_complex())


def _positions_tensor(positions: int | Tensor, device: torch.device | str | None) -> Tensor:
    if isinstance(positions, Tensor):
        if positions.dtype == torch.bool or not _is_integer(positions):
            raise TypeError(
                "positions must be an int or an integer tensor, "
                f"got a tensor of dtype {positions.dtype}"
            )
        return positions.to(device=device) if device is not None else positions
    if isinstance(positions, bool) or not isinstance(positions, int):
        raise TypeError(
            "positions must be an int or an integer tensor, "
            f"got {type(positions).__name__} {positions!r}"
        )
    if positions < 0:
        raise ValueError(f"positions must be a length >= 0 when given as an int, got {positions}")
    return torch.arange(positions, dtype=torch.int64, device=device)


def sinusoidal_table(
    positions: int | Tensor,
    d_model: int,
    *,
    base: float = 10_000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The sinusoidal positional encoding of the given positions.

    Column ``j`` holds ``sin`` (even ``j``) or ``cos`` (odd ``j``) of
    ``pos * base ** (-2 * (j // 2) / d_model)``: the paper's interleaved layout,
    defined for every ``d_model >= 1``. The angles and their sines are computed
    in float64 and rounded once to ``dtype``.

    Args:
        positions: Either an int ``n``, for the rows of positions ``0 .. n-1``,
            or an integer tensor of any shape holding the positions (any
            integers, also negative ones or ones past any ``max_len``).
        d_model: Number of columns.
        base: Base of the geometric progression of wavelengths.
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
        ValueError: ``positions`` is a negative int, ``d_model < 1`` or
            ``base <= 1``.

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
    """
    d_model = _check_d_model(d_model)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating dtype, got {dtype!r}")
    pos = _positions_tensor(positions, device)
    out_device = pos.device
    # float64 is the working precision; MPS (and any device without it) works on the CPU.
    work_device = torch.device("cpu") if out_device.type == "mps" else out_device
    freqs = inverse_frequencies(d_model, base=base, device=work_device)
    angles = pos.to(device=work_device, dtype=torch.float64).unsqueeze(-1) * freqs
    table = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1).flatten(-2)
    return table[..., :d_model].to(device=out_device, dtype=dtype)
