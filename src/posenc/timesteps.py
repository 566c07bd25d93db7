r"""Diffusion timesteps: the sinusoid of a noise level, as diffusers' ``get_timestep_embedding``.

A diffusion model is told the timestep it denoises as a vector: the sines and
cosines of the timestep at a ladder of frequencies, as a position would be. The
frequencies and the one rounding are those of :mod:`posenc.sinusoid`; the
column order and the frequency spacing are diffusers' (and DDPM's before it).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _checks, _runtime
from ._rounding import round_into, round_once
from .frequencies import ladder
from .positions import check_domain

__all__ = ["timestep_embedding"]

# Cells (timesteps × dim) computed in one piece; larger embeddings go a slice at a time.
_PIECE = 1 << 18


def timestep_embedding(
    timesteps: Tensor,
    dim: int,
    *,
    flip_sin_to_cos: bool = False,
    downscale_freq_shift: float = 1.0,
    max_period: float = 10_000.0,
    scale: float = 1.0,
    dtype: torch.dtype | None = None,
) -> Tensor:
    r"""The sinusoidal embedding of diffusion timesteps, fractional ones included.

    A diffusion model tells its network which noise level it is denoising by
    the timestep ``t``, embedded like a position. With ``K = dim // 2``
    frequencies

    .. math::

        \omega_k = T^{-k / (K - s)}, \qquad k = 0, \dots, K - 1,

    with :math:`T` = ``max_period`` and :math:`s` = ``downscale_freq_shift``,
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
    float64 and rounded once to ``dtype``. The frequencies are the correctly
    rounded ladder every scheme shares (:func:`posenc.frequencies.ladder`). A
    large embedding is computed a slice of timesteps at a time, so that the
    float64 work never holds more than a few MB beside the result.

    Args:
        timesteps: Tensor of any shape, integer or floating.
        dim: Width of the embedding.
        flip_sin_to_cos: Whether the cosines come first.
        downscale_freq_shift: The shift in the exponent's denominator ``K - shift``.
        max_period: The base of the frequencies; the longest period is about
            ``2π · max_period``.
        scale: Factor applied to every angle.
        dtype: Floating dtype of the result (default: torch's default dtype).

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
        >>> import torch
        >>> from posenc import timestep_embedding
        >>> t = torch.tensor([0, 10, 999])
        >>> e = timestep_embedding(t, 8)
        >>> e.shape
        torch.Size([3, 8])
        >>> e[1]                           # sin(10 ω_k) for k < 4, then the cosines
        tensor([-0.5440,  0.4477,  0.0215,  0.0010, -0.8391,  0.8942,  0.9998,  1.0000])
        >>> from posenc import sinusoidal_table
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
    if not timesteps.dtype.is_floating_point:
        check_domain("timesteps", timesteps)  # uint64 past 2**63 would wrap
    dim = _checks.positive_int("dim", dim)
    flip = _checks.flag("flip_sin_to_cos", flip_sin_to_cos)
    shift = _checks.real_number("downscale_freq_shift", downscale_freq_shift)
    max_period = _checks.base(max_period, "max_period")
    scale = _checks.real_number("scale", scale)
    dtype = _checks.floating_dtype("dtype", _runtime.default_dtype(dtype))
    half = dim // 2
    span = half - shift
    if span == 0 and half > 1:
        raise ValueError(
            f"downscale_freq_shift={shift} equals dim // 2 = {half}: the exponents "
            f"-k / (dim // 2 - downscale_freq_shift) would divide by zero"
        )
    out_device = timesteps.device
    work = _runtime.work_device(out_device)
    shape = (*timesteps.shape, dim)

    def what() -> str:
        return f"a timestep embedding {shape}"

    _runtime.allocation(shape, dtype, out_device, what)
    # One frequency (dim 2 or 3): k = 0 only, frequency 1 whatever the shift.
    ladder_ = (
        ladder(half, _runtime.constant(max_period), _runtime.constant(span), 1)
        if span != 0
        else (1.0,) * half
    )
    freqs = torch.tensor(ladder_, dtype=torch.float64, device=work)

    def rows(t: Tensor) -> Tensor:
        angles = t.to(device=work, dtype=torch.float64).unsqueeze(-1) * freqs * scale
        sin, cos = torch.sin(angles), torch.cos(angles)
        parts = [cos, sin] if flip else [sin, cos]
        if dim % 2:
            parts.append(angles.new_zeros((*angles.shape[:-1], 1)))
        return torch.cat(parts, dim=-1)

    n = timesteps.numel()
    if n * dim <= _PIECE or not _runtime.fast_path(constants=(timesteps,)):
        # One piece (traceable, transformable): angles, sines and cosines, then the joined
        # float64 rows, at most about 2.5 times the float64 result at once.
        _runtime.allocation(shape, torch.float64, work, what, peak=2.5)
        return round_once(rows(timesteps), dtype).to(out_device)
    # Large and eager: slices of timesteps rounded into the result, so that the float64
    # temporaries (angles, sines, cosines, their concatenation) stay a few MB.
    out = _runtime.empty((n, dim), dtype, work, what)
    flat = timesteps.reshape(-1)
    step = max(1, _PIECE // dim)
    for start in range(0, n, step):
        round_into(out[start : start + step], rows(flat[start : start + step]))
    return out.view(shape).to(out_device)
