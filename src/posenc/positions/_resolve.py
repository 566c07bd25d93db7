"""Resolution: ``offset`` and ``positions`` checked once into :class:`Positions`; the domain.

The one reading of the position arguments every scheme takes, and the position
domain ``|p| < 2**62`` with its check (:mod:`posenc.positions` explains both).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from .. import _checks, _runtime

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# The largest and the smallest position (documented in posenc.positions, which exports them).
POSITION_MAX = 2**62 - 1
POSITION_MIN = -POSITION_MAX
#: The largest distance ``|key - query|`` of a relative position: ``2**63 - 1`` (int64
#: but ``-2**63``, whose opposite is not an int64).
RELATIVE_MAX = INT64_MAX

_DOMAIN = "int64's position domain |p| < 2**62"
_DOMAIN_WHY = (
    "positions must lie in [-(2**62 - 1), 2**62 - 1], half of int64's range, so that every "
    "difference of two positions fits in int64"
)
_RELATIVE = "int64's domain of relative positions |r| < 2**63"
_RELATIVE_WHY = (
    "relative positions must lie in [-(2**63 - 1), 2**63 - 1]: -2**63 has no opposite in int64"
)


def values_to(name: str, t: Tensor, device: torch.device | str | None) -> Tensor:
    """``t`` on ``device``; from the meta device, which holds no values, refused by name.

    A meta tensor goes to the meta device only: its shape is known there (a result
    whose shape needs no values is computed on meta), its values nowhere.
    """
    if device is None:
        return t
    device = torch.device(device)
    if t.device == device:
        return t
    if t.is_meta:
        raise ValueError(
            f"{name} is on the meta device, which holds no values, and is needed on "
            f"{device}: give {name} with values, or ask for the result on the meta device "
            f"(device='meta', or a module moved with .to('meta')) to trace shapes"
        )
    return t.to(device)


class Positions(NamedTuple):
    """The positions of the ``length`` tokens of an input, as :func:`resolve` returns them.

    Exactly one of ``start`` and ``values`` is set: ``start`` when the tokens of
    every sequence sit at ``start, start + 1, ..., start + length - 1`` (the
    common case, served from a precomputed table by slicing, with no tensor
    built), ``values`` otherwise.

    Attributes:
        length: Number of tokens, L.
        start: Position of the first token, shared by the batch, or None.
        values: ``int64`` positions, ``(L,)`` (shared by the batch) or ``(B, L)``
            (one row per sequence; B may be 1), or None. ``float64`` for the
            fractional positions a scheme that takes them asked for
            (``resolve(..., fractional=True)``: RoPE's).
        bounds: The smallest and the largest of ``values``, when :func:`resolve`
            read them (int64 on the CPU, eagerly): the one reading of the values,
            which :meth:`within` answers from. None when they were not read.
    """

    length: int
    start: int | None = 0
    values: Tensor | None = None
    bounds: tuple[int, int] | None = None

    def __repr__(self) -> str:
        # The bounds are what was read of the values, not a position: left out.
        return f"Positions(length={self.length}, start={self.start}, values={self.values})"

    def tensor(self, device: torch.device | str | None = None) -> Tensor:
        """The positions as an ``int64`` tensor, ``(L,)`` or ``(B, L)``.

        Args:
            device: Device of the result (default: that of ``values``, or the CPU).

        Returns:
            A tensor the caller may not modify in place when it is ``values``.
        """
        if self.values is not None:
            return values_to("positions", self.values, device)
        assert self.start is not None
        # start + arange, not arange(start, stop): stop may be 2**63, past int64
        return torch.arange(self.length, device=device) + self.start

    def within(self, size: int) -> bool:
        """Whether every position is known to lie in ``[0, size)``, without a device sync.

        True for a ``start`` whose rows fit; for ``values``, the range is read
        only where that is free: on the CPU, eagerly (see ``_runtime.readable``).
        Elsewhere the answer is False, and the caller computes the rows instead
        of reading them from a table of ``size`` rows.

        Args:
            size: Number of rows of the table.

        Returns:
            Whether :meth:`take` may read every position from such a table.
        """
        if self.start is not None:
            return self.start >= 0 and self.start + self.length <= size
        if self.bounds is not None:
            return self.bounds[0] >= 0 and self.bounds[1] < size
        values = self.values
        assert values is not None
        if values.dtype.is_floating_point:
            return False  # fractional positions have no row: they are computed
        if values.numel() == 0:
            return True
        if not _runtime.readable(values):
            return False
        lo, hi = torch.aminmax(values)
        return bool(lo >= 0) and bool(hi < size)

    def take(self, table: Tensor) -> Tensor:
        """Rows of ``table`` (indexed on dim 0) at these positions; check :meth:`within` first.

        Args:
            table: Tensor ``(N, *)`` with one row per position.

        Returns:
            ``(L, *)`` or ``(B, L, *)``; a view of ``table`` for a ``start``.
        """
        if self.start is not None:
            return table[self.start : self.start + self.length]
        values: Tensor = self.values  # type: ignore[assignment]
        if values.device != table.device:
            values = values_to("positions", values, table.device)
        return table[values]


def check_domain(
    name: str, value: int | Tensor, *, count: int = 1, relative: bool = False
) -> None:
    """Refuse positions outside the position domain ``|p| < 2**62``, naming the value.

    The one check of the domain, for every scheme: call it on positions (or on an
    offset) before widening them to int64, so that ``uint64`` values from ``2**63``
    are refused rather than wrapped to negative ones.

    Args:
        name: The argument's name, for the message (``"offset"``, ``"positions"``).
        value: An int, or an integer tensor of any dtype. A tensor is read only
            where that is free (on the CPU, eagerly: ``_runtime.readable``); on an
            accelerator, under :func:`torch.compile` or a :mod:`torch.func`
            transform it is not checked. Only int64 and uint64 tensors can hold
            values outside the domain; narrower dtypes are never read.
        count: ``value`` is the first of ``count`` consecutive positions (an
            offset for ``count`` tokens): ``value + count - 1`` is checked too.
            With ``count=0`` only ``value`` itself is.
        relative: ``value`` holds relative positions (``key - query``), whose
            domain is ``|r| < 2**63``: every int64 but ``-2**63``.

    Raises:
        ValueError: a value lies outside the domain; the message names it.
    """
    low, high = (-RELATIVE_MAX, RELATIVE_MAX) if relative else (POSITION_MIN, POSITION_MAX)
    last = max(count, 1) - 1
    if isinstance(value, Tensor):
        if value.dtype not in (torch.int64, torch.uint64) or value.numel() == 0:
            return
        if not _runtime.readable(value):
            return
        wide = value.view(torch.int64)  # a uint64 from 2**63 reads as a negative int64
        lo, hi = (int(v) for v in torch.aminmax(wide))
        if value.dtype == torch.uint64 and lo < 0:
            bad = lo + 2**64  # the smallest uint64 value from 2**63
        elif lo < low:
            bad = lo
        elif hi + last > high:
            bad = hi
        else:
            return
        subject = f"{name} holds {bad}, which"
    elif low <= value and value + last <= high:
        return
    else:
        bad, subject = value, f"{name}={value}"
    domain, why = (_RELATIVE, _RELATIVE_WHY) if relative else (_DOMAIN, _DOMAIN_WHY)
    if last and low <= bad <= high:
        raise ValueError(
            f"{subject} puts positions outside {domain} for L={count} (the last at "
            f"{bad + last}): {why}"
        )
    raise ValueError(f"{subject} is outside {domain}: {why}")


def _check_device(name: str, t: Tensor, device: torch.device | None, *, scalar_ok: bool) -> None:
    """``t`` is on ``device`` (the input's), or a 0-d CPU tensor where ``scalar_ok``."""
    if device is None or t.device == device:
        return
    if scalar_ok and t.dim() == 0 and t.device.type == "cpu":
        return  # torch's own rule: a 0-d CPU tensor goes with tensors on any device
    raise ValueError(
        f"{name} must be on the device of the input ({device}), got a tensor on {t.device}: "
        f"move it with {name}.to({str(device)!r})"
    )


def _integer_only(name: str, dtype: torch.dtype, what: str) -> TypeError:
    """The error for floating positions given to a scheme that takes integers only."""
    return TypeError(
        f"{name} must be {what}, got dtype {dtype}: this scheme takes integer positions "
        f"only (fractional positions are RotaryEmbedding's); integral values in a floating "
        f"tensor convert with {name}.long()"
    )


def as_int64(name: str, t: object, what: str = "an integer tensor") -> Tensor:
    """An integer tensor of any dtype, in the position domain, widened to int64.

    Bool and floating tensors are refused; the domain is checked before the widening.
    The one widening of position ids (uint8 to int64 included) for every scheme.
    """
    if isinstance(t, Tensor) and t.dtype.is_floating_point:
        raise _integer_only(name, t.dtype, what)
    t = _checks.integer_tensor(name, t, what)
    check_domain(name, t)
    return t if t.dtype == torch.int64 else t.to(torch.int64)


#: The bound of fractional positions, ``|p| <= 2**62``: the integer domain's, as a real.
FRACTIONAL_MAX = float(2**62)
_FRACTIONAL = (
    "the domain of fractional positions: finite, |p| <= 2**62 (the integer positions' bound)"
)


def _as_float64(name: str, t: Tensor) -> Tensor:
    """Floating positions checked (finite, in the domain) where reading is free, widened.

    The widening to float64 is exact for every floating dtype, so a position keeps the
    value it was given; only its own rounding, when it was made, stands.
    """
    if t.numel() and _runtime.readable(t):
        wide = t.to(torch.float64)
        bad = ~torch.isfinite(wide)
        if bool(bad.any()):
            value = float(wide[bad][0])
            raise ValueError(
                f"{name} holds {value}, which is outside {_FRACTIONAL}: a position must be a "
                f"finite number"
            )
        top = float(wide.abs().amax())
        if top > FRACTIONAL_MAX:
            raise ValueError(
                f"{name} holds a position of magnitude {top:g}, outside {_FRACTIONAL}"
            )
        return wide
    return t if t.dtype == torch.float64 else t.to(torch.float64)


def _fractional_tensor(name: str, t: object, what: str) -> Tensor | None:
    """``t`` widened to float64 when it is a floating tensor; None when it is not floating.

    Complex positions are refused by name (TypeError): a position is a real number.
    """
    if not isinstance(t, Tensor):
        return None
    if t.dtype.is_complex:
        raise TypeError(
            f"{name} must be {what} (integer, or floating for fractional positions), got "
            f"dtype {t.dtype}: a position is a real number"
        )
    if not t.dtype.is_floating_point:
        return None
    return _as_float64(name, t)


def _positions_tensor(
    positions: object,
    offset: object,
    input_device: torch.device | None,
    shape_text: str,
    fractional: bool = False,
) -> Tensor:
    """``positions`` checked (no offset beside it, integer, on ``input_device``), as int64.

    With ``fractional``, a floating tensor is taken too, checked and widened to float64.
    """
    if isinstance(offset, Tensor) or _checks.as_integer(offset) != 0:
        raise ValueError(
            "give either offset or positions, not both: add the offset to the positions"
        )
    if fractional and isinstance(positions, Tensor):
        _check_device("positions", positions, input_device, scalar_ok=False)
        wide = _fractional_tensor("positions", positions, shape_text)
        if wide is not None:
            return wide
    elif isinstance(positions, Tensor) and positions.dtype.is_floating_point:
        raise _integer_only("positions", positions.dtype, shape_text)
    _check_device(
        "positions",
        _checks.integer_tensor("positions", positions, shape_text),
        input_device,
        scalar_ok=False,
    )
    return as_int64("positions", positions, shape_text)


def resolve(
    length: int,
    *,
    offset: int | Tensor = 0,
    positions: Tensor | None = None,
    batch: int | None = None,
    device: torch.device | str | None = None,
    fractional: bool = False,
) -> Positions:
    """Check ``offset``/``positions`` against an input and return its :class:`Positions`.

    Every position lies in the position domain ``|p| < 2**62`` (see the module's
    docstring): an int ``offset`` is checked always, tensors where reading them is
    free (on the CPU, eagerly; :func:`check_domain`).

    Args:
        length: Number of tokens of the input, L: an int >= 0 (or a symbolic
            size while :mod:`torch.export` traces).
        offset: Position of the first token: an int, a 0-d integer tensor, or a
            ``(B,)`` integer tensor (one per sequence). Token ``t`` sits at
            ``offset + t``.
        positions: Integer tensor ``(L,)`` or ``(B, L)``: the position of every
            token. Excludes ``offset``.
        batch: Batch size B of the input, or None for an unbatched input or an
            accessor called without a batch (either takes only positions shared
            by the batch: ``(L,)``, or ``(1, L)`` as Hugging Face's
            ``position_ids``, returned as ``(L,)``). A per-sequence tensor may
            have B rows, or 1 to share its row.
        device: The input's device, or None to accept tensors on any device.
            ``positions`` and ``offset`` must be on it (a 0-d CPU ``offset`` is
            accepted too, as torch accepts 0-d CPU tensors with any device).
        fractional: Whether the scheme takes fractional positions (RoPE does):
            then ``positions`` may be a floating tensor of any floating dtype,
            widened to float64 (exactly: a position keeps the value it was
            given), finite and with ``|p| <= 2**62``; checked where reading it
            is free, as the integer domain is. Integer positions are read as
            without it. ``offset`` stays an integer.

    Returns:
        The positions, with ``start`` set for an int or 0-d ``offset`` given
        as an int, ``values`` (int64; float64 for fractional positions) otherwise.

    Raises:
        TypeError: ``length`` is not an int, ``offset`` is neither an int nor
            an integer tensor, or ``positions`` is not an integer tensor (bool
            and floating tensors are refused; every integer dtype is accepted;
            with ``fractional`` floating ones are taken, complex ones refused).
        ValueError: ``length`` is negative; both are given; a shape does not
            match ``length`` and ``batch``; a tensor is on another device than
            ``device``; a position lies outside the domain ``|p| < 2**62``; a
            fractional position is NaN or infinite.
    """
    if type(length) is not int or not 0 <= length <= INT64_MAX:
        length = _checks.length("length", length)
    offset_only = positions is None and type(offset) is int  # check_domain's test, inline:
    if offset_only and POSITION_MIN <= offset <= POSITION_MAX + 1 - max(length, 1):
        return Positions(length, offset, None)  # type: ignore[arg-type]  # an int
    input_device = None if device is None else torch.device(device)
    if _common(positions, offset, input_device, length, batch):
        # The common case, each check asked positively, the values read once (their
        # bounds kept for Positions.within). Anything else takes the general path,
        # which explains what is wrong.
        if positions.numel() == 1:  # type: ignore[union-attr]  # one token: one read
            low = high = int(positions)  # type: ignore[arg-type]
        else:
            low, high = map(int, torch.aminmax(positions))  # type: ignore[arg-type]
        if low >= POSITION_MIN and high <= POSITION_MAX:
            return Positions(length, None, positions, (low, high))
    if positions is not None:
        index = _positions_tensor(
            positions,
            offset,
            input_device,
            "an integer tensor of shape (L,) or (B, L)",
            fractional,
        )
        if index.dim() not in (1, 2) or index.shape[-1] != length:
            raise ValueError(
                f"positions must have shape (L,) or (B, L) with L={length}, "
                f"got shape {tuple(index.shape)}"
            )
        if index.dim() == 2 and not (batch is None and index.shape[0] == 1):
            _check_rows("positions", tuple(index.shape), index.shape[0], batch)
        elif index.dim() == 2:
            index = index[0]  # one row and no batch: shared by every sequence, as (L,)
        return Positions(length, None, index)
    if isinstance(offset, Tensor):
        start = _checks.integer_tensor(
            "offset", offset, "an int or an integer tensor of shape () or (B,)"
        )
        _check_device("offset", start, input_device, scalar_ok=True)
        check_domain("offset", start, count=length)
        start = start if start.dtype == torch.int64 else start.to(torch.int64)
        if input_device is not None and start.device != input_device:
            start = start.to(input_device)  # a 0-d CPU offset, for an input elsewhere
        steps = torch.arange(length, device=start.device)
        if start.dim() == 0:
            return Positions(length, None, start + steps)
        if start.dim() != 1:
            raise ValueError(
                f"offset must be an int, a 0-d tensor or a (B,) tensor, "
                f"got shape {tuple(start.shape)}"
            )
        if batch is None and start.shape[0] == 1:
            return Positions(length, None, start[0] + steps)  # shared, as a 0-d offset
        _check_rows("offset", tuple(start.shape), start.shape[0], batch)
        return Positions(length, None, start.unsqueeze(-1) + steps)
    offset = _checks.integer("offset", offset, "an int or an integer tensor")
    check_domain("offset", offset, count=length)
    return Positions(length, offset, None)


def _common(
    positions: object, offset: object, device: torch.device | None, length: int, batch: int | None
) -> bool:
    """Whether ``positions`` are the common case, which :func:`resolve` reads at once.

    int64 ``(L,)``, or ``(1, L)`` or ``(B, L)`` with a batch, not empty, no offset beside
    them, on ``device``, and readable on the host for free.
    """
    if type(positions) is not Tensor or type(offset) is not int or offset or not length:
        return False
    shapes = ((length,),) if not batch else ((length,), (1, length), (batch, length))
    if positions.dtype is not torch.int64 or positions.shape not in shapes:
        return False
    return (device is None or positions.device == device) and _runtime.readable(positions)


def _check_rows(name: str, shape: tuple[int, ...], rows: int, batch: int | None) -> None:
    if batch is None:
        shared = "(L,) or (1, L)" if name == "positions" else "() or (1,)"
        raise ValueError(
            f"{name} of shape {shape} gives one row per sequence, but there is no batch "
            f"to match them (an unbatched input, or an accessor such as cos_sin called "
            f"without batch=): give {name} of shape {shared}, shared by every sequence, "
            f"or the batch size"
        )
    if rows not in (1, batch):
        raise ValueError(
            f"{name} of shape {shape} needs {rows} sequences, but the input has "
            f"a batch of B={batch} (give B rows, or 1 to share it)"
        )
