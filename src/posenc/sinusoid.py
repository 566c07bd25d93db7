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
within 3e-8 of the exact value for every position below 2**31 (the user guide's
Precision page proves it). A table computed in float32 instead (as most
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

import decimal
import functools
import math
from collections.abc import Iterator
from typing import Literal

import torch
from torch import Tensor

from . import _checks, _runtime
from ._rounding import round_into, round_once

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

    Each frequency is the float64 number nearest to the exact power (computed
    with Python's ``decimal`` module, whose ``ln`` and ``exp`` are correctly
    rounded, then rounded once): ``torch.pow`` in float64 is up to a few units
    in the last place off when the exponent ``k / (d_model / 2)`` is not a binary
    fraction, and at position 10^6 every such unit moves the angle by 1e-10.

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
    freqs, _, _ = _frequencies(d_model, base, endpoint)
    return torch.tensor(freqs, dtype=torch.float64, device=device)


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
    interleaved layout, defined for every ``d_model >= 1``. The sines and
    cosines are computed in float64 (by angle addition; the user guide's
    Precision page proves the bound) and rounded once to ``dtype``: a float32
    entry is within half a float32 ulp plus 3e-15 of the exact value, under
    3e-8, at every position below 2**31.

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
        out_device = _runtime.default_device(device)

    def what() -> str:
        return f"a sinusoidal table of {math.prod(shape)} positions × d_model={d_model}"

    _runtime.allocation((*shape, d_model), dtype, out_device, what)
    work_device = _runtime.work_device(out_device)  # float64 is the working precision
    n = math.prod(shape)
    if n == 0:
        return torch.empty((*shape, d_model), dtype=dtype, device=out_device)
    constants = _frequencies(d_model, _runtime.constant(base), endpoint)
    freqs = _Frequencies(constants, work_device)
    if pos is None:
        # Whole blocks of rows per piece, as many as fit in _PIECE cells.
        blocks_per_piece = max(1, _PIECE // (_BLOCK * freqs.pairs))
        if n <= blocks_per_piece * _BLOCK:
            table = _range_table(n, freqs, layout, d_model)
            return round_once(table, dtype).to(out_device, dtype)
        out = _runtime.empty((n, d_model), dtype, work_device, what)
        _touch_pages(out)
        _fill_range(out, blocks_per_piece, freqs, layout)
        return out.to(device=out_device)
    # Tables a forward pass computes on the fly are one piece: no loop, so that a traced
    # graph holds for every length.
    one_piece = n * freqs.pairs <= _ONE_PIECE
    rows_per_piece = n if one_piece else max(1, _PIECE // freqs.pairs)
    flat = pos.reshape(-1).to(device=work_device, dtype=torch.int64)
    pieces = _pieces_of_positions(flat, rows_per_piece, freqs, layout, d_model)
    if one_piece:
        _, table = next(pieces)
        return round_once(table, dtype).reshape(*shape, d_model).to(out_device, dtype)
    out = _runtime.empty((n, d_model), dtype, work_device, what)
    for start, piece in pieces:
        round_into(out[start : start + piece.shape[0]], piece)
    return out.reshape(*shape, d_model).to(device=out_device)


# -- How the table is computed --------------------------------------------------------------
#
# Angle addition. A position p is split as p = q·B + r with B = 2**10 and |r| < B (q and r
# of the sign of p), so that sin(p·ω) and cos(p·ω) come from the sin and cos of the block
# angle q·B·ω and of the in-block angle r·ω by one rotation:
#
#     sin(a + b) = sin a · cos b + cos a · sin b,    cos(a + b) = cos a · cos b − sin a · sin b.
#
# The sin and cos of one block angle per B positions and of the B in-block angles are
# computed once; every entry then costs two float64 products and two multiply-adds, and
# one rounding to the output dtype, instead of a float64 sin or cos.
#
# Each factor comes from an exact angle. ω is held as head + tail: the head is ω's float64
# value cut to 32 significant bits, the tail the rest of the exact ω (to 2**-83·ω), so that
# s·head is exact for the steps s used here (s = q·B with |q| < 2**21, or s = r < B), and
# the small s·tail is rounded once; a factor is one rotation of sin/cos(s·head) by that
# small angle. The docs' Precision page proves the error bound from this.
#
# The factors are kept as float64 pairs in the output's column order, so that one
# multiplication and one addcmul produce a whole block of rows:
#     X = [sin a, cos a], X' = [cos a, sin a], Y1 = [cos b, cos b], Y2 = [sin b, −sin b],
#     X·Y1 + X'·Y2 = [sin(a + b), cos(a + b)].
# Every entry is computed by the same operations from the same factors whatever else is
# computed with it (elementwise operations, an addcmul that fuses or not alike on every
# element), so a row does not depend on which other rows share its call.

_BLOCK_BITS = 10
_BLOCK = 1 << _BLOCK_BITS
_HEAD_BITS = 32
# A table of up to this many (row, pair) cells is computed in one piece (and traced as one
# piece by torch.compile); larger ones in pieces of _PIECE cells, written into the output.
_ONE_PIECE = 1 << 22
_PIECE = 1 << 18
# Up to this many cells, tensor positions on the CPU get their factors row by row (fewer
# operations than finding the distinct blocks and in-block steps first).
_SMALL = 1 << 12


Constants = tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]


@_runtime.constant_result
def _frequencies(d_model: int, base: float, endpoint: bool) -> Constants:
    """``(freqs, heads, tails)``: constants of the configuration, for torch.compile too."""
    return _frequencies_cached(d_model, base, endpoint)


@functools.lru_cache(maxsize=64)
def _frequencies_cached(d_model: int, base: float, endpoint: bool) -> Constants:
    pairs = (d_model + 1) // 2
    # ω_k = base ** (-k / span) = exp(-k·ln(base) / span), span = d_model / 2 or pairs - 1,
    # to 40 digits (ln and exp correctly rounded), then rounded once to float64.
    numerator, denominator = (1, max(pairs - 1, 1)) if endpoint else (2, d_model)
    context = decimal.Context(prec=40)
    log_base = context.ln(decimal.Decimal(base))
    exact = [
        context.exp(context.divide(context.multiply(-numerator * k, log_base), denominator))
        for k in range(pairs)
    ]
    freqs = tuple(float(w) for w in exact)
    heads = tuple(_head(w) for w in freqs)
    # The tail carries ω beyond float64: head + tail is within 2**-83·ω of ω.
    tails = tuple(
        float(context.subtract(w, decimal.Decimal(h))) for w, h in zip(exact, heads, strict=True)
    )
    return freqs, heads, tails


def _head(w: float) -> float:
    """``w`` cut to its leading _HEAD_BITS significant bits (exactly: scalings by 2**k)."""
    mantissa, exponent = math.frexp(w)
    return math.ldexp(float(math.floor(math.ldexp(mantissa, _HEAD_BITS))), exponent - _HEAD_BITS)


class _Frequencies:
    """The float64 heads and tails of one table's frequencies, on its working device."""

    def __init__(self, constants: Constants, device: torch.device) -> None:
        _, heads, tails = constants
        self.heads = torch.tensor(heads, dtype=torch.float64, device=device)
        self.tails = torch.tensor(tails, dtype=torch.float64, device=device)
        self.pairs: int = len(heads)

    def turns(self, steps: Tensor) -> tuple[Tensor, Tensor]:
        """Sin and cos of ``steps · ω`` for integer ``steps >= 0`` (…,): (…, pairs), float64.

        The angle is ``s·head`` (exact) plus ``s·tail`` (small, rounded once), joined by
        one rotation.
        """
        s = steps.to(torch.float64).unsqueeze(-1)
        big, small = s * self.heads, s * self.tails
        sin_big, cos_big = torch.sin(big), torch.cos(big)
        sin_small, cos_small = torch.sin(small), torch.cos(small)
        # addcmul out of place, here and below: torch.func.vmap has no batching rule
        # for addcmul_, and these factors are small.
        sin = torch.addcmul(sin_big * cos_small, cos_big, sin_small)
        cos = torch.addcmul(cos_big * cos_small, sin_big, sin_small, value=-1)
        return sin, cos

    def fine_turns(self, steps: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`turns` for in-block steps ``0 <= s < B``, with two sines fewer.

        There ``|s·tail| < 2**-20``, where ``sin x = x`` and ``cos x = 1 - x²/2`` hold
        to better than half a float64 ulp: no float64 sin or cos of the small angle.
        """
        s = steps.to(torch.float64).unsqueeze(-1)
        big, small = s * self.heads, s * self.tails
        sin_big, cos_big = torch.sin(big), torch.cos(big)
        cos_small = torch.mul(small, small).mul_(-0.5).add_(1.0)
        sin = torch.addcmul(sin_big * cos_small, cos_big, small)
        cos = torch.addcmul(cos_big * cos_small, sin_big, small, value=-1)
        return sin, cos


Factors = tuple[Tensor, Tensor]


def _pairs(layout: Layout, first: Tensor, second: Tensor) -> Tensor:
    """``first`` and ``second`` (…, pairs) side by side in the layout's column order."""
    return torch.stack((first, second), dim=-1 if layout == "interleaved" else -2)


def _block_factors(layout: Layout, sin: Tensor, cos: Tensor) -> Factors:
    """``[sin a, cos a]`` and ``[cos a, sin a]``."""
    return _pairs(layout, sin, cos), _pairs(layout, cos, sin)


def _fine_factors(layout: Layout, sin: Tensor, cos: Tensor) -> Factors:
    """``[cos b, cos b]`` and ``[sin b, -sin b]``."""
    return _pairs(layout, cos, cos), _pairs(layout, sin, -sin)


def _rotate(block: Factors, fine: Factors, d_model: int, work: Tensor | None = None) -> Tensor:
    """Rows ``[sin(a + b), cos(a + b)]`` (…, d_model), float64, from broadcastable factors.

    ``work``, if given, is a float64 buffer of at least the result's size to compute in
    (reused from piece to piece, so that a large table does not allocate per piece).
    """
    shape = torch.broadcast_shapes(block[0].shape, fine[0].shape)  # type: ignore[no-untyped-call]
    rows = None if work is None else work[: math.prod(shape)].view(shape)
    rows = torch.mul(block[0], fine[0], out=rows)
    rows.addcmul_(block[1], fine[1])
    return rows.flatten(-2)[..., :d_model]


def _range_factors(n: int, freqs: _Frequencies, layout: Layout) -> tuple[Factors, Factors]:
    """The factors of positions ``0 .. n-1``: per block (blocks, 1, …), per row (min(n, B), …)."""
    device = freqs.heads.device
    blocks = -(-n // _BLOCK)
    block_steps = torch.arange(blocks, device=device).unsqueeze(-1) * _BLOCK  # (blocks, 1)
    block = _block_factors(layout, *freqs.turns(block_steps))
    fine = _fine_factors(layout, *freqs.fine_turns(torch.arange(min(n, _BLOCK), device=device)))
    return block, fine


def _range_table(n: int, freqs: _Frequencies, layout: Layout, d_model: int) -> Tensor:
    """The float64 rows of positions ``0 .. n-1`` (a small table: one piece)."""
    block, fine = _range_factors(n, freqs, layout)
    rows = _rotate(block, fine, d_model).reshape(-1, d_model)
    return rows if rows.shape[0] == n else rows[:n].clone()  # not a view of a longer table


def _touch_pages(out: Tensor) -> None:
    """Write one element per 4 KiB page of a fresh CPU tensor, so that it is mapped.

    A large fresh tensor is memory the kernel maps page by page on first write. Taking
    those faults in one quick strided pass, rather than between the float64 pieces,
    made 2**20 × 512 float32 11% faster with glibc's default allocator (743 -> 662 ms
    here), and no slower when the allocator hands back memory already mapped.
    """
    if out.device.type == "cpu" and out.is_contiguous():
        out.view(-1)[:: max(1, 4096 // out.element_size())].zero_()


def _fill_range(out: Tensor, blocks_per_piece: int, freqs: _Frequencies, layout: Layout) -> None:
    """Write the rows of positions ``0 .. n-1`` into ``out`` (n, d_model), piece by piece.

    A piece is computed in a float64 buffer that stays in the cache, then rounded into
    ``out``; the loop does three operations per piece, no more (a 2**20-row table has
    a thousand pieces).
    """
    n, d_model = out.shape
    (x, x_swapped), (y_cos, y_sin) = _range_factors(n, freqs, layout)
    work = torch.empty((blocks_per_piece, *y_cos.shape), dtype=torch.float64, device=out.device)
    rows = work.flatten(-2).view(-1, work[0, 0].numel())[:, :d_model]
    per, size = blocks_per_piece, blocks_per_piece * _BLOCK
    pieces = [
        (x[i : i + per], x_swapped[i : i + per], out[i * _BLOCK :][:size])
        for i in range(0, x.shape[0], per)
    ]
    for a, a_swapped, target in pieces:
        if target.shape[0] < size:  # the last piece: fewer rows, perhaps fewer blocks
            work, rows = work[: a.shape[0]], rows[: target.shape[0]]
        torch.mul(a, y_cos, out=work)
        work.addcmul_(a_swapped, y_sin)
        round_into(target, rows)


def _pieces_of_positions(
    flat: Tensor, rows_per_piece: int, freqs: _Frequencies, layout: Layout, d_model: int
) -> Iterator[tuple[int, Tensor]]:
    """``(first row, float64 rows)`` for the int64 positions ``flat`` (n,).

    A negative position gets the row of its magnitude with the sines negated (sin is
    odd, cos even), so that the table is exactly symmetric.
    """
    n = flat.numel()
    magnitude = flat.abs()
    block_steps = torch.div(magnitude, _BLOCK, rounding_mode="floor") * _BLOCK
    in_block = magnitude - block_steps
    if not _runtime.readable(flat) or n * freqs.pairs <= _SMALL:
        # Factors per row: no data-dependent shapes (no sync on accelerators, traceable),
        # and the fewest operations for the few rows a forward pass computes.
        def rows(start: int, stop: int) -> Tensor:
            sin_a, cos_a = freqs.turns(block_steps[start:stop])
            sin_b, cos_b = freqs.fine_turns(in_block[start:stop])
            pair = -1 if layout == "interleaved" else -2
            # [sin a, cos a]·cos b + [cos a, -sin a]·sin b: the operations of _rotate.
            rows = torch.addcmul(
                _pairs(layout, sin_a, cos_a) * cos_b.unsqueeze(pair),
                _pairs(layout, cos_a, -sin_a),
                sin_b.unsqueeze(pair),
            )
            return _mirror(rows.flatten(-2)[..., :d_model], flat[start:stop], layout)

        if rows_per_piece == n:  # no loop over a length that may be a traced symbol
            yield 0, rows(0, n)
            return
        for start in range(0, n, rows_per_piece):
            yield start, rows(start, start + rows_per_piece)
        return
    # On the CPU: the factors of each distinct block and in-block step once, then gathered.
    block_keys, block_of = torch.unique(block_steps, return_inverse=True)
    fine_keys, fine_of = torch.unique(in_block, return_inverse=True)
    x, x_swapped = _block_factors(layout, *freqs.turns(block_keys))
    y_cos, y_sin = _fine_factors(layout, *freqs.fine_turns(fine_keys))
    work = torch.empty(rows_per_piece * 2 * freqs.pairs, dtype=torch.float64)
    for start in range(0, n, rows_per_piece):
        a, b = block_of[start : start + rows_per_piece], fine_of[start : start + rows_per_piece]
        block = (x.index_select(0, a), x_swapped.index_select(0, a))
        fine = (y_cos.index_select(0, b), y_sin.index_select(0, b))
        piece = _rotate(block, fine, d_model, work)
        yield start, _mirror(piece, flat[start : start + rows_per_piece], layout)


def _mirror(rows: Tensor, positions: Tensor, layout: Layout) -> Tensor:
    """``rows`` (m, d_model) with the sine columns negated where ``positions`` is negative."""
    sines = rows[:, 0::2] if layout == "interleaved" else rows[:, : (rows.shape[1] + 1) // 2]
    sines.mul_(torch.where(positions.unsqueeze(-1) < 0, -1.0, 1.0))
    return rows


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
    work = _runtime.work_device(out_device)
    shape = (*timesteps.shape, dim)
    _runtime.allocation(shape, torch.float64, work, lambda: f"a timestep embedding {shape}")
    k = torch.arange(half, dtype=torch.float64, device=work)
    # One frequency (dim 2 or 3): k = 0 only, frequency 1 whatever the shift.
    freqs = torch.pow(max_period, -k / span) if span != 0 else torch.ones_like(k)
    angles = timesteps.to(device=work, dtype=torch.float64).unsqueeze(-1) * freqs * scale
    sin, cos = torch.sin(angles), torch.cos(angles)
    parts = [cos, sin] if flip else [sin, cos]
    if dim % 2:
        parts.append(angles.new_zeros((*angles.shape[:-1], 1)))
    return round_once(torch.cat(parts, dim=-1), dtype).to(out_device)
