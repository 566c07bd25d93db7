"""Every argument check of the public functions and modules, in one place.

Each raises at the public boundary with a message that names the argument, the
value received and what is allowed: ValueError for a bad value, TypeError for a
bad type, IndexError for an id out of range. None reads the values of a tensor
on an accelerator, so none costs a device-to-host sync there (token ids are
range-checked on the CPU only; elsewhere the embedding kernel checks them).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import TypeVar

import torch
from torch import Tensor

from ._runtime import readable

T = TypeVar("T")


def _show(value: object) -> str:
    return f"{type(value).__name__} {value!r:.60}"


#: The largest size torch can hold (its sizes are int64).
SIZE_MAX = 2**63 - 1


def as_integer(value: object) -> int | None:
    """``value`` as a Python int when it is an integer, else None: posenc's one test of that.

    An int, NumPy's integers (``np.int64(3)``), a 0-d integer tensor: anything
    ``operator.index`` takes (``numbers.Integral`` and every type with ``__index__``).
    A bool is not (True would read as 1), and neither is a float, even a whole one
    (``64.0``): a size, a count or a position given as a float is a mistake upstream.
    Every check of an integer argument asks this, through :func:`integer` or, for a
    message of its own, directly.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value  # first, as before: torch.compile traces it without a guard on the value
    bool_ = isinstance(value, bool) or type(value).__name__ in ("bool", "bool_")  # NumPy's
    if bool_ or (isinstance(value, Tensor) and value.dim() != 0):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def integer(name: str, value: object, allowed: str = "an int") -> int:
    """An integer argument as a Python int (see :func:`as_integer` for what counts).

    Raises:
        TypeError: ``value`` is a bool, or not integral (a float, a str, a tensor
            that is not 0-d or not of an integer dtype); the message names ``name``,
            the value and ``allowed``.
    """
    number = as_integer(value)
    if number is None:
        raise TypeError(f"{name} must be {allowed}, got {_show(value)}")
    return number


def positive_int(name: str, value: object) -> int:
    value = integer(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {_number_text(value)}")
    _size(name, value)
    return value


def nonnegative_int(name: str, value: object) -> int:
    value = integer(name, value)
    if value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {_number_text(value)}")
    _size(name, value)
    return value


def rank(value: object, world_size: int) -> int:
    """A rank of a group of ``world_size`` processes: an int in ``[0, world_size)``."""
    value = integer("rank", value)
    if not 0 <= value < world_size:
        raise ValueError(
            f"rank must lie in [0, world_size) = [0, {world_size}), got {_number_text(value)}"
        )
    return value


def packed_total(lengths: Sequence[int], total: int) -> None:
    """The lengths of a packed row's documents add up to its ``total`` tokens."""
    if sum(lengths) != total:
        raise ValueError(
            f"lengths must sum to length={total}, the tokens of the packed row, got "
            f"{list(lengths)!r:.80} (summing to {sum(lengths)})"
        )


def zigzag_lengths(lengths: Sequence[int], world_size: int, packed: bool) -> None:
    """Lengths that the head-tail layout cuts into ``2 * world_size`` equal chunks each."""
    for n in lengths:
        if n % (2 * world_size):
            what = f"lengths holds {n}, which" if packed else f"length={n}"
            where = "each document" if packed else "the sequence"
            raise ValueError(
                f"{what} is not a multiple of 2 * world_size = {2 * world_size}: "
                f'layout="zigzag" cuts {where} into 2 * world_size equal chunks (pad it, '
                f'or use layout="contiguous")'
            )


def _size(name: str, value: int) -> None:
    if value > SIZE_MAX:
        raise ValueError(
            f"{name} must be at most 2**63 - 1 (torch's sizes are int64), "
            f"got {_number_text(value)}"
        )


def flag(name: str, value: object) -> bool:
    """A bool, and only a bool: ``endpoint="False"`` would otherwise read as True."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {_show(value)}")
    return value


def choice(name: str, value: object, allowed: Sequence[T]) -> T:
    for option in allowed:
        if type(value) is type(option) and value == option:
            return option
    raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r:.60}")


def _number_text(value: int | float) -> str:
    """``value`` for a message: an int too long to print whole is shown by its size."""
    if isinstance(value, int) and value.bit_length() > 200:
        sign = "-" if value < 0 else ""
        try:
            digits = str(abs(value))
        except ValueError:  # past Python's limit on int -> str conversions
            return f"{sign}2**{abs(value).bit_length() - 1} or more"
        return (
            f"{sign}{digits[0]}.{digits[1:4]}e+{len(digits) - 1} (an int of {len(digits)} digits)"
        )
    return repr(value)


def _as_float(name: str, value: int | float, allowed: str) -> float:
    """``float(value)``; an int past the float range is a ValueError, not an OverflowError."""
    try:
        return float(value)
    except OverflowError:
        raise ValueError(
            f"{name} must be {allowed}, got {_number_text(value)}, past the float range"
        ) from None


def base(value: object, name: str = "base") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {_show(value)}")
    number = _as_float(name, value, "a finite number > 1")
    if not number > 1.0 or number == math.inf:
        raise ValueError(f"{name} must be a finite number > 1, got {_number_text(value)}")
    return number


def dropout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"dropout must be a float, got {_show(value)}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {value}")
    return float(value)


def floating_dtype(name: str, value: object) -> torch.dtype:
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise TypeError(f"{name} must be a floating torch.dtype, got {value!r:.60}")
    return value


def device(name: str, value: object) -> torch.device | None:
    """``value`` as a torch.device (None stays None): a str or a torch.device."""
    if value is None or isinstance(value, torch.device):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a torch.device, a str or None, got {_show(value)}")
    try:
        return torch.device(value)
    except RuntimeError:
        raise ValueError(
            f"{name} must name a device such as 'cpu' or 'cuda:0', got {value!r:.60}"
        ) from None


def integer_tensor(name: str, t: object, what: str = "an integer tensor") -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a Tensor ({what}), got {_show(t)}")
    if t.dtype == torch.bool or t.dtype.is_floating_point or t.dtype.is_complex:
        raise TypeError(f"{name} must be {what}, got dtype {t.dtype}")
    return t


def bool_mask(name: str, mask: object, meaning: str, *, additive: str = "") -> Tensor:
    """A bool or integer mask; floating masks are refused, since they read two ways.

    A floating mask may be multiplicative (1 keep, 0 drop) or additive (0 keep,
    ``-inf`` drop, as Hugging Face builds them): read as the other, it is inverted,
    silently. The message says how to convert either.
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a bool or integer tensor ({meaning}), got {_show(mask)}")
    if mask.dtype.is_floating_point or mask.dtype.is_complex:
        raise TypeError(
            f"{name} must be a bool or integer tensor ({meaning}), got dtype {mask.dtype}: a "
            f"floating mask reads two ways. Convert a 0/1 mask with {name}.bool(); an "
            f"additive mask (0 keep, -inf drop, as Hugging Face builds them) with "
            f"{name} = additive == 0{additive}"
        )
    return mask


def same_device(name: str, t: Tensor, device: torch.device, where: str = "the query") -> None:
    """``t`` is on ``device``; the message names both devices."""
    if t.device != device:
        raise ValueError(
            f"{name} must be on the device of {where} ({device}), got a tensor on {t.device}"
        )


def _autocast(device: torch.device) -> bool:
    try:
        return bool(torch.is_autocast_enabled(device.type))
    except RuntimeError:  # a device type autocast does not know (meta)
        return False


def matches_weight(name: str, x: Tensor, weight: Tensor, module: str) -> None:
    """``x`` can go through a layer whose weight is ``weight``: one device, one dtype.

    Under :func:`torch.autocast` the dtypes may differ: autocast casts them.
    """
    if x.device != weight.device:
        raise ValueError(
            f"{name} is on {x.device} but {module}'s weights are on {weight.device}: move "
            f"the input with {name}.to({str(weight.device)!r}) or the module with "
            f".to({str(x.device)!r})"
        )
    if x.dtype != weight.dtype and not _autocast(x.device):
        raise TypeError(
            f"{name} has dtype {x.dtype} but {module}'s weights have dtype {weight.dtype}: "
            f"cast the input with {name}.to({weight.dtype}) or the module with "
            f".to({x.dtype}) (or run under torch.autocast)"
        )


def callable_dropout(dropout: object) -> None:
    """The ``dropout`` of attention: a module (or callable) applied to the weights, or None."""
    if dropout is not None and not callable(dropout):
        raise TypeError(
            f"dropout must be a module applied to the attention weights, such as "
            f"torch.nn.Dropout({dropout!r:.20}) (or any callable), or None; got {_show(dropout)}"
        )


def floating_tensor(name: str, t: object) -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got dtype {t.dtype}")
    return t


def features(x: object, d_model: int, what: str = "input") -> Tensor:
    """``x`` is a floating (B, L, D) or (L, D) tensor with D = ``d_model``."""
    x = floating_tensor(what, x)
    if x.dim() not in (2, 3):
        raise ValueError(
            f"{what} must have shape (B, L, D) or (L, D), got {x.dim()}-D shape {tuple(x.shape)}"
        )
    last_dim(x, d_model, what)
    return x


def last_dim(x: Tensor, size: int, what: str, name: str = "d_model") -> None:
    if x.dim() == 0 or x.shape[-1] != size:
        raise ValueError(
            f"{what}'s last dimension must be {name}={size}, got shape {tuple(x.shape)}"
        )


def padding_idx(value: object, vocab: int) -> int | None:
    if value is None:
        return None
    value = integer("padding_idx", value, "an int or None")
    if not 0 <= value < vocab:
        raise ValueError(f"padding_idx must be in [0, vocab={vocab}), got {value}")
    return value


TOKEN_IDS = "an integer tensor (any integer dtype; not bool or float)"


def token_ids(ids: object, vocab: int) -> Tensor:
    """The ids as int32/int64 for the lookup kernel, checked.

    The dtype is checked always, the range where it costs no device-to-host sync.
    Narrower integer dtypes (uint8, int16, uint32, ...) are widened to int64.
    """
    ids = integer_tensor("token ids", ids, TOKEN_IDS)
    if ids.dtype not in (torch.int64, torch.int32):
        ids = ids.to(torch.int64)
    in_range(ids, vocab, "token id", f"vocab={vocab}", "ids")
    return ids


def in_range(index: Tensor, size: int, what: str, bound: str, plural: str) -> None:
    """IndexError if a readable (CPU, eager) index lies outside ``[0, size)``."""
    bad = _outside(index, size)
    if bad is not None:
        raise IndexError(
            f"{what} {bad} is out of range for {bound}: {plural} must be in [0, {size})"
        )


def _outside(index: Tensor, size: int) -> int | None:
    """An entry of a readable ``index`` outside ``[0, size)``, if there is one."""
    # Reading values would stall an accelerator and break a compiled graph or a vmap:
    # there the indexing kernel's own bounds check stands.
    if index.numel() == 0 or not readable(index):
        return None
    lo, hi = torch.aminmax(index)
    if lo < 0:
        return int(lo)
    return int(hi) if hi >= size else None


# -- Attention shapes --------------------------------------------------------------------


def _shape(t: Tensor) -> str:
    return str(tuple(t.shape))


def attention_inputs(
    query: object, key: object, value: object, mask: object, bias: object = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Query, key and value of one attention: shapes that fit, one dtype, one device."""
    q = floating_tensor("query", query)
    k = floating_tensor("key", key)
    v = floating_tensor("value", value)
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape (*, L, d), got shape {_shape(t)}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(
            f"query, key and value must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if k.device != q.device or v.device != q.device:
        raise ValueError(
            f"query, key and value must be on one device, got {q.device}, {k.device}, {v.device}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"query and key must have the same last dimension d_k, got query {_shape(q)} "
            f"and key {_shape(k)}"
        )
    _same_length(k, v)
    try:
        batch = torch.broadcast_shapes(  # type: ignore[no-untyped-call]
            q.shape[:-2], k.shape[:-2], v.shape[:-2]
        )
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of query {_shape(q)}, key {_shape(k)} and value "
            f"{_shape(v)} (all but the last two) do not broadcast"
        ) from None
    scores = (*batch, q.shape[-2], k.shape[-2])
    for name, extra in (("mask", mask), ("bias", bias)):
        if extra is not None:
            broadcasts_to(name, extra, scores, "(*, L_q, L_k)")
    if mask is not None:
        attention_mask(mask, q.device)
    if bias is not None:
        additive_bias(bias, q.device)
    return q, k, v


def heads_bias(bias: object, q: Tensor, k: Tensor, h: int) -> Tensor:
    """A bias for multi-head attention: broadcasts to (B, h, L_q, L_k), floating, q's device."""
    heads = (*q.shape[:-2], h, q.shape[-2], k.shape[-2])
    broadcasts_to("bias", bias, heads, "(B, h, L_q, L_k)")
    return additive_bias(bias, q.device)


def additive_bias(bias: object, device: torch.device) -> Tensor:
    """An attention bias: a floating tensor on the device of the scores."""
    b = floating_tensor("bias", bias)
    if b.device != device:
        raise ValueError(
            f"bias must be on the device of the query ({device}), got a bias on {b.device}"
        )
    return b


#: What a mask of attention means, for the messages.
ATTEND = "True or 1 = may attend, False or 0 = may not"


def attention_mask(mask: object, device: torch.device) -> Tensor:
    """A mask of attention: bool or integer (never floating), on the device of the scores."""
    m = bool_mask("mask", mask, ATTEND, additive=", or pass the additive mask as bias=")
    same_device("mask", m, device)
    return m


def _same_length(k: Tensor, v: Tensor) -> None:
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"key and value must have the same length L_k (dim -2), got key {_shape(k)} "
            f"and value {_shape(v)}"
        )


def heads_inputs(
    query: object, key: object, value: object, mask: object, d_model: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Inputs of multi-head attention: (B, L, D) or (L, D) each, one B, one L_k, a mask."""
    q, k, v = (
        features(query, d_model, "query"),
        features(key, d_model, "key"),
        features(value, d_model, "value"),
    )
    if not q.dim() == k.dim() == v.dim():
        raise ValueError(
            "query, key and value must all be batched (B, L, D) or all unbatched (L, D), "
            f"got shapes {_shape(q)}, {_shape(k)}, {_shape(v)}"
        )
    if k.shape[:-2] != q.shape[:-2] or v.shape[:-2] != q.shape[:-2]:
        raise ValueError(
            f"query {_shape(q)}, key {_shape(k)} and value {_shape(v)} must have the "
            "same batch size B"
        )
    _same_length(k, v)
    if mask is not None:
        scores = (*q.shape[:-2], q.shape[-2], k.shape[-2])
        broadcasts_to("mask", mask, scores, "(B, L_q, L_k)")
        attention_mask(mask, q.device)
    return q, k, v


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``target`` without growing it (leading 1s aside)."""
    dims = list(shape)
    while len(dims) > len(target) and dims[0] == 1:
        dims.pop(0)
    try:
        grown = torch.broadcast_shapes(tuple(dims), target)  # type: ignore[no-untyped-call]
    except RuntimeError:
        return False
    return bool(grown == target)


def broadcasts_to(name: str, t: object, shape: tuple[int, ...], legend: str) -> Tensor:
    """``t`` is a tensor that broadcasts to ``shape`` (leading 1s aside, without growing it)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a Tensor or None, got {_show(t)}")
    if not _broadcasts(tuple(t.shape), shape):
        raise ValueError(
            f"{name} of shape {_shape(t)} does not broadcast to the attention scores' "
            f"shape {shape} {legend}"
        )
    return t


# -- Rotary embeddings -------------------------------------------------------------------


def seq_len(value: object) -> int | None:
    """A sequence length: a positive int, None, or a symbolic size while a graph traces."""
    if value is None or isinstance(value, torch.SymInt):
        return value  # type: ignore[return-value]
    return positive_int("seq_len", value)


def given_seq_len(value: object) -> int | None:
    """``rope_frequencies``' length as Hugging Face passes it, read as an int.

    None, an int >= 0 or a 0-d integer tensor (``torch.max(position_ids) + 1``).

    0 is a length the formulas take as they are (dynamic uses ``max(seq_len, L_0)``,
    longrope compares with ``L_0``): the trained length's frequencies, as None gives.
    """
    if isinstance(value, Tensor):
        t = integer_tensor("seq_len", value, "an int or a 0-d integer tensor")
        if t.dim() != 0:
            raise ValueError(
                f"seq_len must be an int or a 0-d integer tensor, got shape {tuple(t.shape)}"
            )
        if t.device.type == "meta":
            raise ValueError("seq_len is on the meta device, which holds no value: give an int")
        value = int(t)
    return None if value is None else nonnegative_int("seq_len", value)


def rotary_input(x: object, head_dim: int) -> Tensor:
    """``x`` is a floating ``(..., L, head_dim)`` tensor."""
    x = floating_tensor("input", x)
    if x.dim() < 2:
        raise ValueError(
            f"input must have shape (..., L, head_dim), with the sequence on dim -2, got "
            f"{x.dim()}-D shape {tuple(x.shape)}"
        )
    last_dim(x, head_dim, "input", "head_dim")
    return x


def rotary_axes(axes: object, head_dim: int, scaling: object) -> tuple[int, ...] | None:
    """``axes``: None, or even ints >= 2 summing to ``head_dim``, without a ``scaling``."""
    if axes is None:
        return None
    sizes = [as_integer(d) for d in axes] if isinstance(axes, (tuple, list)) else [None]
    if not isinstance(axes, (tuple, list)) or None in sizes:
        raise TypeError(f"axes must be None or a tuple of ints, got {_show(axes)}")
    axes = tuple(d for d in sizes if d is not None)
    if not axes or any(d < 2 or d % 2 for d in axes) or sum(axes) != head_dim:
        raise ValueError(
            f"axes must give each position axis an even number >= 2 of rotated features, "
            f"summing to head_dim={head_dim}, got {tuple(axes)} (sum {sum(axes)})"
        )
    if scaling is not None and (
        not isinstance(scaling, dict)
        or set(scaling) - {"rope_type", "rope_theta"}
        or scaling.get("rope_type", "default") != "default"
    ):
        raise ValueError(
            f"axes= takes no scaling (each axis turns at base ** (-2k / d_a); posenc builds "
            f"no scaled multi-axis RoPE), got scaling={scaling!r:.80}: for M-RoPE give "
            f"scaling with 'mrope_section' and no axes"
        )
    return tuple(axes)


def apply_rotary_args(x: object, cos: object, sin: object) -> tuple[Tensor, Tensor, Tensor]:
    """``apply_rotary``'s arguments: one cos and sin per rotated pair, broadcasting to ``x``."""
    x = floating_tensor("x", x)
    c, s = floating_tensor("cos", cos), floating_tensor("sin", sin)
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., L, D), got shape {_shape(x)}")
    if c.dtype != s.dtype:  # a type, as attention's query, key and value dtypes
        raise TypeError(f"cos and sin must share a dtype, got {c.dtype} and {s.dtype}")
    if c.shape != s.shape or c.device != s.device:
        raise ValueError(
            f"cos and sin must have one shape and device, got {_shape(c)} on {c.device} "
            f"and {_shape(s)} on {s.device}"
        )
    if c.device != x.device:
        raise ValueError(f"cos and sin must be on x's device {x.device}, got {c.device}")
    if c.dim() < 1 or c.shape[-1] < 1 or 2 * c.shape[-1] > x.shape[-1]:
        raise ValueError(
            f"cos and sin hold one value per rotated pair: their last dimension must be "
            f"between 1 and D/2 = {x.shape[-1] // 2} for x of shape {_shape(x)}, got "
            f"{_shape(c)}"
        )
    target = (*x.shape[:-1], c.shape[-1])
    if not _broadcasts(tuple(c.shape), target):
        raise ValueError(
            f"cos and sin of shape {_shape(c)} do not broadcast to x's shape {_shape(x)} "
            f"(its dimensions but the last, aligned from the right, then the pairs): for x "
            f"of shape (B, H, L, D) give (L, D/2) or (B, 1, L, D/2)"
        )
    while c.dim() > x.dim():  # leading 1s beyond x's dimensions
        c, s = c[0], s[0]
    return x, c, s


# -- The position family ------------------------------------------------------------------


def length(name: str, value: object) -> int:
    """A number of tokens: an int >= 0, or a symbolic size while an export traces."""
    if isinstance(value, torch.SymInt):
        return value  # type: ignore[return-value]
    return nonnegative_int(name, value)


def real_number(name: str, value: object) -> float:
    """A finite int or float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {_show(value)}")
    if not -math.inf < value < math.inf:  # comparisons: also for a traced float
        raise ValueError(f"{name} must be a finite number, got {value}")
    return _as_float(name, value, "a finite number")


def learned_positions(index: Tensor, max_len: int) -> None:
    """IndexError if a readable (CPU, eager) position lies outside a learned table.

    The message says why: a learned table has a row for each position it was
    trained on and nothing past them.
    """
    bad = _outside(index, max_len)
    if bad is not None:
        learned_position_error(bad, max_len)


def learned_position_error(position: int, max_len: int) -> None:
    raise IndexError(
        f"position {position} is outside the learned table of max_len={max_len}: a learned "
        f"table holds rows for positions 0 .. {max_len - 1} only and cannot extrapolate "
        f"(positions must be in [0, {max_len}); a sinusoidal encoding computes any position)"
    )


def bucket_config(
    bidirectional: bool, num_buckets: object, max_distance: object
) -> tuple[int, int]:
    """T5's bucket arguments: enough buckets for an exact range, a log range above it."""
    num_buckets = positive_int("num_buckets", num_buckets)
    max_distance = positive_int("max_distance", max_distance)
    least = 4 if bidirectional else 2
    if num_buckets < least:
        raise ValueError(
            f"num_buckets must be >= {least} (bidirectional={bidirectional}: at least two "
            f"buckets per direction), got {num_buckets}"
        )
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    max_exact = per_direction // 2
    if max_distance <= max_exact:
        raise ValueError(
            f"max_distance must be > {max_exact} (the distances below {max_exact} have a bucket "
            f"each with num_buckets={num_buckets}, bidirectional={bidirectional}), "
            f"got {max_distance}"
        )
    return num_buckets, max_distance
