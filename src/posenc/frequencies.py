r"""One ladder of frequencies for every scheme: :math:`base^{-s k / span}`, correctly rounded.

The sinusoid, rotary embeddings, diffusion timesteps and 2-D grids all turn pair
``k`` at a frequency of the same geometric form,

.. math::

    \omega_k = base^{-s k / span}, \qquad k = 0, 1, \dots, K - 1,

with ``s k / span`` = ``2k / d`` for the sinusoid and RoPE (Vaswani et al.,
2017; Su et al., 2021), ``k / (K - 1)`` for the sinusoid's ``endpoint=True`` and
``k / (K - shift)`` for timesteps. :func:`ladder` computes it once, for all of
them: each :math:`\omega_k` is the float64 number nearest to the exact power.
``torch.pow`` in float64 is a few units in the last place off whenever the exponent
is not a binary fraction (for ``head_dim = 96``, 28 of RoPE's 48 frequencies), and
at position 10^6 each unit moves an angle by about 1e-10.

The exact values are computed with Python's :mod:`decimal` at 60 digits: the
ratio ``r = base^{-s / span}`` once (``ln`` and ``exp`` correctly rounded), then
``ω_k = ω_{k-1} · r``, whose relative error after ``k`` products stays below
``k · 10^-59``, far below float64's ``10^-16``; the rounding to float64 is then
the correct one unless the exact value lies within that distance of a midpoint
between two float64 numbers. A table of 200,000 pairs takes about 0.2 s, once per
configuration (the results are cached).

>>> from posenc.frequencies import ladder
>>> ladder(4, 10_000.0, 8)
(1.0, 0.1, 0.01, 0.001)
"""

from __future__ import annotations

import decimal
import functools
import math

from . import _runtime

__all__ = ["Ladder", "ladder", "ladder_parts"]

#: ``(freqs, heads, tails)``: see :func:`ladder_parts`.
Ladder = tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]

_CONTEXT = decimal.Context(prec=60)


@functools.lru_cache(maxsize=128)
def _exact(count: int, base: float, span: float, step: int) -> tuple[decimal.Decimal, ...]:
    """``base ** (-step * k / span)`` for ``k < count``, to about 59 significant digits."""
    c = _CONTEXT
    # Decimal(float) is exact: span = K - shift (a float) keeps every one of its bits.
    ratio = c.exp(c.divide(c.multiply(-step, c.ln(decimal.Decimal(base))), decimal.Decimal(span)))
    values, w = [], decimal.Decimal(1)
    for _ in range(count):
        values.append(w)
        w = c.multiply(w, ratio)
    return tuple(values)


@_runtime.constant_result
def ladder(count: int, base: float, span: float, step: int = 2) -> tuple[float, ...]:
    """The float64 frequencies ``base ** (-step * k / span)``, ``k < count``, correctly rounded.

    A constant of the configuration: :func:`torch.compile` takes the result as a
    constant and does not trace the computation.

    Args:
        count: Number of frequencies, K.
        base: The base, > 1 (``rope_theta``, ``max_period``).
        span: The denominator of the exponent (``d``, ``K - 1``, ``K - shift``); not 0.
        step: The numerator's step: 2 for ``2k / d``, 1 for ``k / span``.

    Returns:
        A tuple of ``count`` floats, the first 1.0.
    """
    return _floats(count, base, span, step)


@functools.lru_cache(maxsize=128)
def _floats(count: int, base: float, span: float, step: int) -> tuple[float, ...]:
    return tuple(float(w) for w in _exact(count, base, span, step))


@_runtime.constant_result
def ladder_parts(count: int, base: float, span: float, step: int, head_bits: int) -> Ladder:
    """:func:`ladder`, and each frequency split as ``head + tail`` beyond float64.

    The head is the float64 frequency cut to its leading ``head_bits`` significant
    bits, the tail the rest of the exact value, rounded to float64: ``head + tail``
    is within ``2**-(53 + 53 - head_bits)`` of the exact frequency, relatively.
    The sinusoid's angle addition needs it (``s · head`` is exact for ``s`` below
    ``2**(53 - head_bits)``).
    """
    return _parts(count, base, span, step, head_bits)


@functools.lru_cache(maxsize=64)
def _parts(count: int, base: float, span: float, step: int, head_bits: int) -> Ladder:
    exact = _exact(count, base, span, step)
    freqs = _floats(count, base, span, step)
    heads = tuple(_head(w, head_bits) for w in freqs)
    tails = tuple(
        float(_CONTEXT.subtract(w, decimal.Decimal(h))) for w, h in zip(exact, heads, strict=True)
    )
    return freqs, heads, tails


def _head(w: float, bits: int) -> float:
    """``w`` cut to its leading ``bits`` significant bits (exactly: scalings by powers of 2)."""
    mantissa, exponent = math.frexp(w)
    return math.ldexp(float(math.floor(math.ldexp(mantissa, bits))), exponent - bits)
