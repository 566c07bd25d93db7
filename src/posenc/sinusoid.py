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

__all__ = ["LAYOUTS", "Layout", "inverse_frequencies", "sinusoidal_table", "timestep_embedding"]

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


# -- Diffusion timesteps ----------------------------------------------------------------


def timestep_embedding(
    timesteps: Tensor,
    dim: int,
    *,
    flip_sin_to_cos: bool = False,
    downscale_freq_shift: float = 1.0,
    max_period: float = 10_000.0,
    scale: float = 1.0,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    r"""The sinusoidal embedding of diffusion timesteps, fractional ones included.

    A diffusion model tells its network which noise level it is denoising by
    the timestep ``t``, embedded like a position. With ``K = dim // 2``
    frequencies

    .. math::

        \omega_k = \text{max\_period}^{-k / (K - \text{shift})},
        \qquad k = 0, \dots, K - 1,

    the embedding is the ``K`` values ``sin(scale · t · ω_k)``, then the ``K``
    values ``cos(scale · t · ω_k)`` (cosines first with ``flip_sin_to_cos``),
    then a zero column when ``dim`` is odd: the convention of diffusers'
    ``get_timestep_embedding``.

    - ``downscale_freq_shift=1`` (the default) is DDPM's (Ho et al., 2020,
      ``diffusion_tf/nn.py``): the slowest frequency is exactly
      ``1 / max_period``, as in tensor2tensor and fairseq, whose code DDPM's
      cites. For integer ``t`` and even ``dim`` this is
      ``sinusoidal_table(t, dim, layout="concatenated", endpoint=True,
      base=max_period)``.
    - ``downscale_freq_shift=0`` is the paper's spacing ``max_period ** (-k / K)``;
      with ``flip_sin_to_cos=True`` it is guided-diffusion's and Stable
      Diffusion's ``timestep_embedding`` (``[cos, sin]``).

    Timesteps may be integers or floats (continuous-time samplers); they are
    widened to float64, and the angles, sines and cosines are computed in
    float64 and rounded once to ``dtype``.

    Args:
        timesteps: Tensor of any shape, integer or floating.
        dim: Width of the embedding.
        flip_sin_to_cos: Whether the cosines come first.
        downscale_freq_shift: The shift in the exponent's denominator ``K - shift``.
        max_period: The base of the frequencies; the longest period is about
            ``2π · max_period``.
        scale: Factor applied to every angle.
        dtype: Floating dtype of the result.

    Returns:
        Tensor of shape ``(*timesteps.shape, dim)``, on the device of ``timesteps``.

    Raises:
        TypeError: ``timesteps`` is not an integer or floating tensor, ``dim``
            is not an int, a flag is not a bool, a number is not a number, or
            ``dtype`` is not a floating dtype.
        ValueError: ``dim < 1``, ``max_period <= 1``, a number is not finite,
            or ``K - shift = 0`` with more than one frequency (the exponents
            would divide by zero).

    Shapes:
        - timesteps: ``(*)``, typically ``(B,)``
        - output: ``(*, dim)``

    Example:
        >>> t = torch.tensor([0, 10, 999])
        >>> e = timestep_embedding(t, 8)
        >>> e.shape
        torch.Size([3, 8])
        >>> e[1]                           # sin(10 ω_k) for k < 4, then the cosines
        tensor([-0.5440,  0.4477,  0.0215,  0.0010, -0.8391,  0.8942,  0.9998,  1.0000])
        >>> same = sinusoidal_table(t, 8, layout="concatenated", endpoint=True)
        >>> torch.allclose(e, same, rtol=0, atol=1e-7)
        True

        Fractional timesteps, and guided-diffusion's order:

        >>> timestep_embedding(torch.tensor([0.5]), 4, flip_sin_to_cos=True,
        ...                    downscale_freq_shift=0)
        tensor([[0.8776, 1.0000, 0.4794, 0.0050]])
    """
    if not isinstance(timesteps, Tensor):
        raise TypeError(
            f"timesteps must be a Tensor of integers or floats, got {type(timesteps).__name__}"
        )
    if timesteps.dtype == torch.bool or timesteps.dtype.is_complex:
        raise TypeError(f"timesteps must be an integer or floating tensor, got {timesteps.dtype}")
    dim = _checks.positive_int("dim", dim)
    flip = _checks.flag("flip_sin_to_cos", flip_sin_to_cos)
    shift = _checks.real_number("downscale_freq_shift", downscale_freq_shift)
    max_period = _checks.base(max_period, "max_period")
    scale = _checks.real_number("scale", scale)
    dtype = _checks.floating_dtype("dtype", dtype)
    half = dim // 2
    span = half - shift
    if span == 0 and half > 1:
        raise ValueError(
            f"downscale_freq_shift={shift} equals dim // 2 = {half}: the exponents "
            f"-k / (dim // 2 - downscale_freq_shift) would divide by zero"
        )
    out_device = timesteps.device
    work = torch.device("cpu") if out_device.type == "mps" else out_device
    shape = (*timesteps.shape, dim)
    _checks.allocation(shape, torch.float64, work, lambda: f"a timestep embedding {shape}")
    k = torch.arange(half, dtype=torch.float64, device=work)
    # One frequency (dim 2 or 3): k = 0 only, frequency 1 whatever the shift.
    freqs = torch.pow(max_period, -k / span) if span != 0 else torch.ones_like(k)
    angles = timesteps.to(device=work, dtype=torch.float64).unsqueeze(-1) * freqs * scale
    sin, cos = torch.sin(angles), torch.cos(angles)
    parts = [cos, sin] if flip else [sin, cos]
    if dim % 2:
        parts.append(angles.new_zeros((*angles.shape[:-1], 1)))
    return torch.cat(parts, dim=-1).to(device=out_device, dtype=dtype)
