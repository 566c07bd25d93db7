"""Frequency sources: the cos and sin rows of resolved positions, behind every rotation.

A rotation is three steps (:class:`~posenc.RotaryEmbedding`): resolve the positions
(:func:`~posenc.positions.resolve`), ask a source for their rows, rotate. A source is
anything with the one method of :class:`FrequencySource`: the cos and sin of every
token's phases, one per rotated pair, computed in float64 and rounded once to a dtype,
on a device. The sources:

- :class:`Ladder`: a fixed frequency per pair (the default ladder, every scaled rope
  type, one ladder per position axis, M-RoPE's sections of one ladder), or, for the
  types whose frequencies depend on the length (dynamic, longrope), those of the call's
  length;
- :class:`MixedFrequencies`: learned frequencies, per head, that mix the axes (RoPE-Mixed);
- :class:`TableCache`: a fixed source with precomputed tables, from which it reads the
  rows it holds; every other row is the source's. The values are the source's, to the bit;
- :class:`XPosScales`: a ladder's rows times xPos's scales, one side (queries or keys)
  at a time; asked for one tensor's rows, it refuses.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from . import _checks, _runtime
from ._rounding import round_once
from .positions import AxisPositions, Positions
from .positions._resolve import values_to
from .rope_config import RopeConfig

__all__ = ["FrequencySource", "Ladder", "MixedFrequencies", "TableCache", "XPosScales"]

_F64 = torch.float64
_CPU = torch.device("cpu")
# Angles per float64 slice of a large table: 32 MB of temporaries per array.
_CHUNK = 1 << 22
# Positions a decoding step's widened rows are kept for (TableCache.widened).
_BLOCK = 64

Where = Positions | AxisPositions
Tables = Callable[[torch.dtype, torch.device], "tuple[Tensor, ...] | None"]


class FrequencySource(Protocol):
    """What a rotation asks for its angles: the rows of resolved positions."""

    def rows(
        self, at: Where, dtype: torch.dtype, device: torch.device, seq_len: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """``(cos, sin)`` at ``at``, one value per rotated pair, rounded once to ``dtype``.

        ``(L, h)`` or ``(B, L, h)`` (a learned source: ``(H, L, h)`` or ``(B, H, L, h)``),
        on ``device``. ``seq_len`` is the length the frequencies depend on, when they do.
        """
        ...


def _cos_sin_float64(
    positions: Tensor, freqs: Tensor, factor: float, *, paired: bool = False
) -> tuple[Tensor, Tensor]:
    """``factor · cos`` and ``factor · sin`` of ``positions × freqs`` in float64, unrounded."""
    angles = positions.to(_F64) * freqs if paired else positions.to(_F64).unsqueeze(-1) * freqs
    cos, sin = torch.cos(angles), torch.sin(angles)
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    return cos, sin


def _cos_sin(
    positions: Tensor, freqs: Tensor, factor: float, dtype: torch.dtype, *, paired: bool = False
) -> tuple[Tensor, Tensor]:
    """``factor · cos`` and ``factor · sin`` of ``positions × freqs``, from float64, rounded once.

    ``positions`` is int64 or float64 of any shape; the result has one more dimension,
    the pairs. With ``paired``, ``positions`` already ends in the pairs (one position per
    pair, on axes) and the result has its shape.
    """

    def tables(pos: Tensor) -> tuple[Tensor, Tensor]:
        cos, sin = _cos_sin_float64(pos, freqs, factor, paired=paired)
        return round_once(cos, dtype), round_once(sin, dtype)

    pairs = freqs.shape[-1]
    shape = positions.shape[:-1] if paired else positions.shape
    if positions.numel() * (1 if paired else pairs) <= _CHUNK:
        return tables(positions)
    flat = positions.reshape(-1, pairs) if paired else positions.reshape(-1)
    rows = (flat.shape[0], pairs)
    what = lambda: f"rotary tables of {flat.shape[0]} positions × {pairs} pairs"  # noqa: E731
    cos = _runtime.empty(rows, dtype, positions.device, what)
    sin = _runtime.empty(rows, dtype, positions.device, what)
    step = max(1, _CHUNK // pairs)
    for start in range(0, flat.shape[0], step):
        cos[start : start + step], sin[start : start + step] = tables(flat[start : start + step])
    return cos.view(*shape, pairs), sin.view(*shape, pairs)


class Ladder:
    """One frequency per rotated pair, and the axis each pair turns with.

    Args:
        config: The parsed ``rope_parameters``: the attention factor, and for dynamic
            and longrope the frequencies of a length.
        freqs: The fixed frequencies, float64 on the CPU (``config``'s, or one ladder
            per axis).
        pair_axes: The axis of each pair, int64 on the CPU; None for one stream.
    """

    def __init__(self, config: RopeConfig, freqs: Tensor, pair_axes: Tensor | None) -> None:
        self.config, self.freqs, self.pair_axes = config, freqs, pair_axes
        self.factor: float = config.attention_factor()
        #: dynamic and longrope: the length up to which the frequencies are ``freqs``.
        self.trained_length: int | None = config.trained_length()

    def rows(
        self, at: Where, dtype: torch.dtype, device: torch.device, seq_len: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """The rows at ``at``, computed from float64 (see :class:`FrequencySource`)."""
        compute = _runtime.work_device(device)  # where float64 runs: the CPU for MPS
        freqs = self.frequencies(at, compute, seq_len)
        if isinstance(at, AxisPositions):  # one position per pair: its axis's
            assert self.pair_axes is not None
            per_pair = at.per_pair(self.pair_axes.to(at.values.device))
            per_pair = values_to("positions", per_pair, compute)
            cos, sin = _cos_sin(per_pair, freqs, self.factor, dtype, paired=True)
        else:
            cos, sin = _cos_sin(at.tensor(compute), freqs, self.factor, dtype)
        return cos.to(device), sin.to(device)

    def table(self, size: int, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
        """The rows of positions ``0, ..., size - 1`` at the fixed frequencies."""
        compute = _runtime.work_device(device)
        positions = torch.arange(size, device=compute)
        cos, sin = _cos_sin(positions, self.freqs.to(compute), self.factor, dtype)
        return cos.to(device), sin.to(device)

    def take(self, at: Where, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """The rows at ``at`` read from tables of :meth:`table` that hold them."""
        if isinstance(at, AxisPositions):  # each pair at its axis's position
            assert self.pair_axes is not None
            return at.take(cos, self.pair_axes), at.take(sin, self.pair_axes)
        return at.take(cos), at.take(sin)

    def frequencies(self, at: Where, device: torch.device, given: int | None = None) -> Tensor:
        """The frequencies for this call: fixed, or from its length for dynamic and longrope.

        The length is ``given`` (``seq_len``), else the largest position + 1.
        """
        if self.trained_length is None:
            return self.freqs.to(device)
        seq_len: int | Tensor | None
        if given is not None:
            seq_len = given
        elif at.start is not None:
            seq_len = at.start + at.length
        elif at.values is not None and at.values.numel() and at.values.is_floating_point():
            # fractional positions: the length of the integer positions that reach as far
            top = at.values.amax().floor().to(torch.int64)
            seq_len = top.to(device) + 1  # no sync: stays a tensor
        elif at.values is not None and at.values.numel():
            seq_len = at.values.amax().to(device) + 1  # no sync: stays a tensor
        else:
            seq_len = None
        return self.config.frequencies(seq_len, device)


class TableCache:
    """A :class:`Ladder` whose rows at positions ``[0, size)`` are read from tables.

    The tables are the ladder's own rows (:meth:`Ladder.table`), kept by the module
    that owns them (:class:`~posenc._tables.DerivedTables`), which says for a dtype and
    a device which tables serve it (``tables``; None: none does). Rows the tables do
    not hold, or that another length's frequencies give (``seq_len`` past the trained
    length), are the ladder's.
    """

    def __init__(self, ladder: Ladder, tables: Tables, size: int) -> None:
        self.ladder, self.tables, self.size = ladder, tables, size
        self.trained_length = ladder.trained_length
        # widened's block: the cos table it was read from, (its first position, the
        # table's version), its rows (cos, sin), and the same rows one by one
        self._block: tuple[Any, ...] | None = None

    def rows(
        self, at: Where, dtype: torch.dtype, device: torch.device, seq_len: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """The rows at ``at``: read where the tables hold them, else computed."""
        fixed = seq_len is None or self.trained_length is None or seq_len <= self.trained_length
        tables = self.tables(dtype, device) if fixed and at.within(self.size) else None
        if tables is None:
            return self.ladder.rows(at, dtype, device, seq_len)
        return self.ladder.take(at, *tables)

    def widened(
        self, start: int, length: int, cos: Tensor, sin: Tensor
    ) -> tuple[Tensor, Tensor] | None:
        """Rows ``[start, start + length)`` of the tables for rotate-half, or None.

        ``(cos, cos)`` and ``(-sin, sin)``: the rows of :meth:`rows` side by side, one
        value per feature, read from a block of ``_BLOCK`` positions widened at once and
        kept while the tables are the same tensors, unchanged: a decoding step, a token
        at a time, widens once a block. None (the caller asks :meth:`rows`) where the
        rows are not in one block of the rows the tables serve. The tables are the
        ones :attr:`tables` gives the caller's dtype and device, which the caller
        checked, as it checked that no ``seq_len`` asks for other frequencies.
        """
        first = start - start % _BLOCK
        if start < 0 or start + length > min(first + _BLOCK, self.size):
            return None
        block = self._block
        if block is None or block[0] is not cos or block[1] != (first, cos._version):
            rows = cos[first : first + _BLOCK], sin[first : first + _BLOCK]
            with torch.inference_mode(False), torch.no_grad():  # plain tensors, as tables
                wide = torch.cat((rows[0], rows[0]), -1), torch.cat((-rows[1], rows[1]), -1)
            # and each row on its own, for a token at a time: a tuple's item, no slicing
            block = (cos, (first, cos._version), *wide, *(torch.split(t, 1) for t in wide))
            self._block = block
        if length == 1:
            return block[4][start - first], block[5][start - first]
        at = slice(start - first, start - first + length)
        return block[2][at], block[3][at]


class MixedFrequencies(nn.Module):
    r"""RoPE-Mixed's learned frequencies (Heo et al., 2024): each head mixes the axes.

    Pair ``k`` of head ``h`` at the position :math:`(p_x, p_y)` of a patch turns by
    :math:`\theta = p_x w_{x,h,k} + p_y w_{y,h,k}`: a learned direction in the plane
    and a learned speed, where axial RoPE turns each pair with one axis only. Give it
    to :class:`~posenc.RotaryEmbedding` (``frequencies=``): the phases are the float64
    sum of products with the parameters widened, and cos and sin are rounded once,
    under autograd (the parameters are trained; nothing is tabled).

    Args:
        head_dim: Features per head, D (a multiple of 4).
        n_heads: Number of heads, H: each its own frequencies.
        n_axes: Number of position axes A: 2 for images (x, y), as the authors;
            more (a video's time) start at zero and are learned like the others.
        base: Base of the initial speeds :math:`base^{-4j/D}`, ``j < D/4`` (the
            authors' ``rope_theta``, 10 for RoPE-Mixed).

    Attributes:
        weight: The frequencies, ``(A, H, D/2)``, axis x then y, initialised as the
            authors do: per head a random angle :math:`a`, the first D/4 pairs along
            :math:`a`, the others along :math:`a + \pi/2`.

    Raises:
        TypeError: ``head_dim``, ``n_heads`` or ``n_axes`` is not an int.
        ValueError: ``head_dim`` is not a multiple of 4, ``n_axes < 2``, or
            ``base <= 1``.

    Shapes:
        - positions: ``(A, L)`` or ``(A, B, L)``, x then y (e.g. from
          :func:`~posenc.grid_positions`, whose rows come first: flipped)
        - output: phases, float64, ``(H, L, D/2)`` or ``(B, H, L, D/2)``

    Example:
        >>> import torch
        >>> from posenc import MixedFrequencies, RotaryEmbedding, grid_positions
        >>> rope = RotaryEmbedding(16, layout="interleaved",
        ...                        frequencies=MixedFrequencies(16, n_heads=4))
        >>> q = torch.randn(1, 4, 6, 16)                 # (B, H, L, D), a 2 × 3 grid
        >>> rope(q, positions=grid_positions(2, 3).flip(0)).shape
        torch.Size([1, 4, 6, 16])
        >>> rope.frequencies
        MixedFrequencies(head_dim=16, n_heads=4, n_axes=2, base=10)
        >>> sum(p.numel() for p in rope.parameters())  # 2 axes × 4 heads × 8 pairs
        64
    """

    def __init__(
        self, head_dim: int, n_heads: int, *, n_axes: int = 2, base: float = 10.0
    ) -> None:
        super().__init__()
        head_dim = _checks.positive_int("head_dim", head_dim)
        if head_dim % 4:
            raise ValueError(f"head_dim must be a multiple of 4 for RoPE-Mixed, got {head_dim}")
        axes = _checks.integer("n_axes", n_axes)  # NumPy's integers too
        if axes < 2:
            raise ValueError(f"n_axes must be an int >= 2, got {axes}")
        self.n_heads = _checks.positive_int("n_heads", n_heads)
        self.n_axes, self.base = axes, _checks.base(base)
        self.weight = nn.Parameter(torch.empty(axes, self.n_heads, head_dim // 2))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The authors' initialisation (``init_random_2d_freqs``), from float64.

        Axes past the first two (``n_axes > 2``, e.g. time) start at zero.
        """
        if self.weight.is_meta:
            return  # no values to set: to_empty() and this call again give them
        quarter = self.weight.shape[-1] // 2
        speed = self.base ** (-4.0 * torch.arange(quarter, dtype=_F64) / (4 * quarter))
        angle = torch.rand(self.n_heads, 1, dtype=_F64, device=_CPU) * 2 * math.pi
        angle = torch.cat((angle.expand(-1, quarter), angle.expand(-1, quarter) + math.pi / 2), 1)
        mixed = torch.stack((angle.cos(), angle.sin())) * speed.repeat(2)
        with torch.no_grad():
            self.weight.zero_()
            self.weight[:2].copy_(mixed)

    def extra_repr(self) -> str:
        """The configuration, shown in the module's repr."""
        d, h = 2 * self.weight.shape[-1], self.n_heads
        return f"head_dim={d}, n_heads={h}, n_axes={self.n_axes}, base={self.base:g}"

    def forward(self, positions: Tensor) -> Tensor:
        """Phases in float64: ``(H, L, D/2)``, or ``(B, H, L, D/2)`` for ``(A, B, L)``."""
        weight = self.weight.to(_F64)
        pattern = "al,ahk->hlk" if positions.dim() == 2 else "abl,ahk->bhlk"
        return torch.einsum(pattern, positions.to(weight), weight)

    def rows(
        self, at: Where, dtype: torch.dtype, device: torch.device, seq_len: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """Cos and sin of the phases at ``at``, rounded once (``seq_len`` is not read)."""
        values = at.tensor(_runtime.work_device(device))
        if isinstance(at, Positions):  # one stream on every axis
            values = values.expand(self.n_axes, *values.shape)
        angles = self(values)
        cos, sin = round_once(angles.cos(), dtype), round_once(angles.sin(), dtype)
        return cos.to(device), sin.to(device)


class XPosScales:
    r"""xPos (Sun et al., 2022): a :class:`Ladder`'s rows times a scale per pair and side.

    Pair ``k`` of a query at position ``p`` is scaled by :math:`\zeta_k^{(p-c)/\gamma}`,
    of a key by its inverse, with :math:`\zeta_k = (2k/d + 0.4) / 1.4` over the ``d``
    rotated features. The scale, cos and sin are multiplied in float64 and rounded once.
    A query and a key need opposite scales, so :meth:`rows`, which is asked for one
    tensor's rows, refuses; :meth:`scaled_rows` gives one side's.
    """

    def __init__(self, ladder: Ladder, rotary_dim: int, scale_base: float) -> None:
        self.ladder, self.scale_base = ladder, scale_base
        pairs = torch.arange(0, rotary_dim, 2, dtype=_F64, device=_CPU)  # not meta
        self.zeta: Tensor = (pairs / float(rotary_dim) + 0.4) / 1.4  # float64, on the CPU
        self._log_zeta0: float = math.log(0.4 / 1.4)  # the fastest decay, ζ_0 = 2/7

    def rows(
        self, at: Where, dtype: torch.dtype, device: torch.device, seq_len: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """Refused: one tensor's rows cannot say whether it is a query or a key."""
        raise ValueError(
            f"this RotaryEmbedding is xPos (xpos_scale_base={self.scale_base:g}): queries "
            f"and keys are scaled oppositely, and a single tensor cannot say which it is; "
            f"call rotate_queries_and_keys(q, k) instead of forward or cos_sin"
        )

    def power(
        self, at: Positions, center: float, compute: torch.device, dtype: torch.dtype
    ) -> Tensor:
        r"""The queries' scales :math:`\zeta^{(p-c)/\gamma}` in float64, ``(..., L, h)``.

        Refused where they leave ``dtype``'s normal range (see :meth:`check_range`).
        """
        self.check_range(at, center, dtype)
        p = at.tensor(compute).to(_F64)
        power = (p - center) / self.scale_base
        return torch.pow(self.zeta.to(compute), power.unsqueeze(-1))

    def check_range(self, at: Positions, center: float, dtype: torch.dtype) -> None:
        """Refuse positions whose scales leave ``dtype``'s normal range, where reading is free."""
        start, values, length = at.start, at.values, at.length
        if torch.compiler.is_compiling() or not isinstance(length, int) or length == 0:
            return  # traced: a check on a symbolic length would specialize it
        if start is not None:
            far, name = max(abs(start - center), abs(start + length - 1 - center)), "offset"
        elif values is not None and _runtime.readable(values) and values.numel():
            wide = values.to(_F64)
            far, name = float((wide - center).abs().amax()), "positions"
        else:
            return  # not readable for free: documented
        info = torch.finfo(dtype)
        limit = min(math.log(info.max), -math.log(info.tiny)) / -self._log_zeta0
        if far / self.scale_base > limit:
            raise ValueError(
                f"{name} puts a position {far:g} from center={center:g}: xPos's scales "
                f"ζ^(±(p - center)/scale_base) leave {dtype}'s range past "
                f"{limit * self.scale_base:.0f} from the center (scale_base="
                f"{self.scale_base:g}); give a center near the middle of the positions, or a "
                f"larger scale_base"
            )

    def scaled_rows(
        self,
        at: Positions,
        center: float,
        dtypes: tuple[torch.dtype, torch.dtype],
        devices: tuple[torch.device, torch.device],
    ) -> list[tuple[Tensor, Tensor]]:
        """The rows of the queries and of the keys: ``[(cos, sin), (cos, sin)]``.

        ``dtypes`` are the queries' and the keys' (a scale past one's normal range is
        refused); each side's rows are rounded once to its tables' dtype, float64 for
        float64, else float32, on its device.
        """
        compute = _runtime.work_device(devices[0])
        freqs = self.ladder.frequencies(at, compute)
        cos, sin = _cos_sin_float64(at.tensor(compute), freqs, self.ladder.factor)
        self.check_range(at, center, dtypes[0])  # the queries' side first, then the keys'
        scale = self.power(at, center, compute, dtypes[1])  # one power: the keys' is 1 / it
        out = []
        for dtype, device, side in zip(dtypes, devices, (scale, scale.reciprocal()), strict=True):
            table = _F64 if dtype == _F64 else torch.float32  # the tables' dtype
            c, s = round_once(cos * side, table), round_once(sin * side, table)
            out.append((c.to(device), s.to(device)))
        return out
