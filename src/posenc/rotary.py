r"""Rotary position embeddings (RoPE): position as a rotation of query and key vectors.

Su et al. (2021, *RoFormer*) split each query and key vector into pairs of
features and turn pair ``k`` of the token at position ``m`` by the angle
:math:`m\,\omega_k`, with :math:`\omega_k = base^{-2k/d}`. A rotation keeps
lengths, and the dot product of two rotated vectors depends on the positions
only through their difference, so attention sees relative positions:

.. math::

    \langle R(m)\,q,\ R(n)\,k \rangle = \langle q,\ R(n - m)\,k \rangle .

>>> import torch
>>> from posenc import RotaryEmbedding
>>> rope = RotaryEmbedding(8)
>>> q, k = torch.randn(8), torch.randn(8)
>>> def score(m, n):
...     rq = rope(q.expand(1, 8), offset=m)
...     rk = rope(k.expand(1, 8), offset=n)
...     return f"{(rq * rk).sum():.4f}"
>>> score(3, 1), score(1_002, 1_000), score(70_002, 70_000)
('-2.2786', '-2.2786', '-2.2786')

Everything about the angles is computed as :mod:`posenc.sinusoid` computes its
table: positions stay ``int64``, frequencies, angles, sines and cosines are
float64, and the tables are rounded once. :func:`rope_frequencies` holds every
frequency formula, for the scalings of Hugging Face's ``rope_parameters`` too;
:class:`RotaryEmbedding` and :func:`apply_rotary` hold the rotation.
"""

from __future__ import annotations

import copy
import functools
import math
import operator
from collections.abc import Callable
from typing import Any, Literal, SupportsIndex

import torch
from torch import Tensor

from . import _checks, _distributed, _runtime, rope_config
from ._sources import FrequencySource, Ladder, MixedFrequencies, TableCache, XPosScales
from ._tables import DerivedTables
from .frequencies import ladder
from .positions import AxisPositions, Positions, resolve, resolve_axes
from .rope_config import ROPE_TYPES, RopeConfig

__all__ = [
    "ROPE_TYPES",
    "ROTARY_LAYOUTS",
    "MixedFrequencies",
    "RotaryEmbedding",
    "RotaryLayout",
    "apply_rotary",
    "rope_attention_scale",
    "rope_frequencies",
]

RotaryLayout = Literal["half", "interleaved"]
#: The two ways of pairing the features of a head: ``("half", "interleaved")``.
ROTARY_LAYOUTS: tuple[RotaryLayout, ...] = ("half", "interleaved")

_F64 = torch.float64
_CPU = torch.device("cpu")


# -- Frequencies: every formula, once ----------------------------------------------------


def rope_frequencies(
    head_dim: int,
    *,
    base: float = 10_000.0,
    scaling: dict[str, Any] | None = None,
    seq_len: int | Tensor | None = None,
) -> tuple[Tensor, float]:
    r"""The angular frequency of each rotated pair, and the attention factor.

    Without ``scaling``, pair ``k`` turns by :math:`\omega_k = base^{-2k/d}`
    radians per position (Su et al., 2021), ``d = head_dim``. ``scaling`` is a
    ``rope_parameters`` dict as found in a Hugging Face model config, with a
    ``rope_type`` and the keys that type reads (:mod:`posenc.rope_config` holds
    one record per type). Keys of Hugging Face's ``RopeParameters`` that the type
    does not read are ignored; a key no type reads warns, naming the nearest
    known one; the multimodal keys ``mrope_section`` and ``mrope_interleaved``
    (M-RoPE) are read by :class:`RotaryEmbedding`, which says which axis turns
    each pair, and change no frequency; a ``rope_theta`` key must equal
    ``base``. The default ladder :math:`base^{-2k/d}` is correctly rounded
    (:func:`posenc.frequencies.ladder`), and every scaling starts from it. With
    :math:`s` = ``factor`` and :math:`L_0` the length the model was trained with:

    - ``"default"``: :math:`\omega_k` as above.
    - ``"linear"`` (position interpolation, Chen et al., 2023): :math:`\omega_k / s`.
    - ``"dynamic"`` (NTK-aware, bloc97 and emozilla, 2023): a larger base,
      :math:`base \cdot (s\,n/L_0 - (s - 1))^{d/(d-2)}`, where
      :math:`n = \max(` ``seq_len``, :math:`L_0)` and :math:`L_0` is the key
      ``max_position_embeddings``; without ``seq_len``, :math:`n = L_0`.
    - ``"yarn"`` (Peng et al., 2023): the pairs that turn more than
      ``beta_fast`` (32) times over :math:`L_0` keep :math:`\omega_k`, those that
      turn less than ``beta_slow`` (1) times get :math:`\omega_k / s`, and a ramp
      linear in ``k`` blends the two between them. The attention factor is
      ``attention_factor``, or :math:`0.1 \ln s + 1`, or with ``mscale`` and
      ``mscale_all_dim`` the ratio :math:`(0.1\,m \ln s + 1) / (0.1\,m_{all} \ln s + 1)`.
    - ``"llama3"`` (Meta, Llama 3.1): wavelengths shorter than
      :math:`L_0` / ``high_freq_factor`` keep :math:`\omega_k`, those longer than
      :math:`L_0` / ``low_freq_factor`` get :math:`\omega_k / s`, and the band
      between is blended by :math:`\gamma = (L_0/\lambda_k - low)/(high - low)`.
      Equal factors (Llama 4) leave no band: the wavelength on the boundary is kept.
    - ``"longrope"`` (Ding et al., 2024): :math:`\omega_k / f_k`, with
      :math:`f` = ``long_factor`` when ``seq_len`` exceeds :math:`L_0`, else
      ``short_factor``. The attention factor is ``attention_factor``, or
      :math:`\sqrt{1 + \ln s / \ln L_0}`.
    - ``"proportional"`` (Gemma 4): the first ``partial_rotary_factor`` share of
      the ``d/2`` pairs turn at :math:`base^{-2k/d} / s`, the other pairs not at
      all (frequency 0).

    :math:`L_0` is the key ``original_max_position_embeddings`` for yarn, llama3
    and longrope. ``partial_rotary_factor`` (every type but proportional)
    rotates only the first ``int(head_dim * partial_rotary_factor)`` features,
    and the formulas use that number as ``d``.

    Args:
        head_dim: Features per head, d.
        base: Base of the wavelengths, the model's ``rope_theta``.
        scaling: None, or a ``rope_parameters`` dict (see above).
        seq_len: Length of the sequence, for the types whose frequencies
            depend on it (dynamic, longrope); ignored by the others. An int
            >= 0 or a 0-d integer tensor, as Hugging Face's rope functions take
            it (``torch.max(position_ids) + 1``; the tensor is read); 0 and
            None give the frequencies of the trained length.

    Returns:
        A float64 tensor ``(rotary_dim // 2,)`` on the CPU, one frequency per
        rotated pair (``rotary_dim = head_dim`` unless ``partial_rotary_factor``
        says otherwise), and the attention factor, which multiplies cos and sin.

    Raises:
        TypeError: ``head_dim`` is not an int, ``seq_len`` is neither an int
            nor an integer tensor, ``scaling`` is not a dict, or one of its
            values has the wrong type.
        ValueError: ``base <= 1``; ``seq_len`` is negative or not 0-d;
            ``scaling`` lacks a key its type needs, names an unknown
            ``rope_type``, has a ``rope_theta`` other than ``base``, or a value
            out of range (YaRN's ``beta_fast`` below ``beta_slow``, an
            ``mrope_section`` that does not sum to the rotated pairs, or sums to more
            when interleaved); the
            rotated dimension is odd.

    Warns:
        UserWarning: ``scaling`` has a key that no ``rope_type`` reads.

    Shapes:
        - output: ``(rotary_dim // 2,)``, float64, with ``rotary_dim`` =
          ``int(head_dim * partial_rotary_factor)`` (``head_dim`` by default)

    Example:
        >>> w, factor = rope_frequencies(8)
        >>> w, factor
        (tensor([1.0000, 0.1000, 0.0100, 0.0010], dtype=torch.float64), 1.0)
        >>> rope_frequencies(8, scaling={"rope_type": "linear", "factor": 4.0})[0] * 4
        tensor([1.0000, 0.1000, 0.0100, 0.0010], dtype=torch.float64)

        A Llama 3.1 config's ``rope_parameters``, as printed by ``transformers``:

        >>> llama31 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
        ...            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        ...            "original_max_position_embeddings": 8192}
        >>> w, factor = rope_frequencies(128, base=500_000.0, scaling=llama31)
        >>> plain, _ = rope_frequencies(128, base=500_000.0)
        >>> (w / plain)[::8]  # fast pairs kept, slow ones / 8, a band between
        tensor([1.0000, 1.0000, 1.0000, 1.0000, 0.3711, 0.1250, 0.1250, 0.1250],
               dtype=torch.float64)

        YaRN scales the attention too:

        >>> yarn = {"rope_type": "yarn", "factor": 4.0,
        ...         "original_max_position_embeddings": 4096}
        >>> round(rope_frequencies(64, scaling=yarn)[1], 4)
        1.1386
    """
    head_dim = _checks.positive_int("head_dim", head_dim)
    base = _checks.base(base)
    config = rope_config.parse(scaling, head_dim, base)
    length = _checks.given_seq_len(seq_len)
    return config.frequencies(length, _CPU), config.attention_factor()


def rope_attention_scale(qk_head_dim: int, scaling: dict[str, Any] | None = None) -> float:
    r"""The softmax scale of attention with scaled RoPE: :math:`d^{-1/2}`, times YaRN's mscale².

    DeepSeek-V2 and V3 (multi-head latent attention, MLA) scale their scores by
    :math:`m^2 / \sqrt{d}`, with :math:`d` = ``qk_head_dim`` (the rotated and the
    unrotated features of a query head together) and
    :math:`m = 0.1\,m_{all} \ln s + 1` from ``factor`` :math:`s` and
    ``mscale_all_dim`` :math:`m_{all}` (1 when :math:`s \le 1`), as their reference
    code and Hugging Face's ``DeepseekV3Attention`` do for any ``rope_type`` but
    "default". The cos and sin carry YaRN's own attention factor
    (:attr:`RotaryEmbedding.attention_factor`, :math:`m / m_{all}`-shaped): the two
    multiply, and dropping this one is a known bug (transformers 47435).

    Args:
        qk_head_dim: Features of a query (and key) head, d: ``qk_nope_head_dim +
            qk_rope_head_dim`` for MLA.
        scaling: None, or a ``rope_parameters`` dict (see :func:`rope_frequencies`).

    Returns:
        The factor on :math:`q \cdot k`.

    Raises:
        TypeError: ``qk_head_dim`` is not an int, ``scaling`` is not a dict, or
            ``factor`` or ``mscale_all_dim`` is not a number.
        ValueError: ``mscale_all_dim`` is given without ``factor``, or a value is
            out of range.

    Example:
        DeepSeek-V3's configuration: 128 + 64 features per head, YaRN by 40.

        >>> v3 = {"rope_type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
        ...       "original_max_position_embeddings": 4096}
        >>> round(rope_attention_scale(192, v3), 6), round(192**-0.5, 6)
        (0.135234, 0.072169)
    """
    d = _checks.positive_int("qk_head_dim", qk_head_dim)
    scale: float = float(d) ** -0.5  # as the peers: qk_head_dim ** (-0.5)
    if scaling is None:
        return scale
    if not isinstance(scaling, dict):
        raise TypeError(
            "scaling must be None or a dict in Hugging Face's rope_parameters format, got "
            f"{_checks._show(scaling)}"
        )
    name = scaling.get("rope_type", scaling.get("type", "default"))
    all_dim = scaling.get("mscale_all_dim")
    if name == "default" or not all_dim:
        return scale
    all_dim = rope_config.real("mscale_all_dim", all_dim, str(name), 0)
    if scaling.get("factor") is None:
        raise ValueError(
            f"scaling has mscale_all_dim={all_dim} but no 'factor' (rope_type={name!r}): "
            "the attention scale is (0.1 * mscale_all_dim * ln(factor) + 1)**2 / sqrt(d)"
        )
    s = rope_config.number("factor", scaling["factor"], str(name), 0)
    m = 1.0 if s <= 1 else 0.1 * all_dim * math.log(s) + 1.0
    return float(scale * m * m)


# -- The rotation ------------------------------------------------------------------------

# Elements of x per slice on the CPU: the slice and its float32 copy stay in cache
# between the three passes over it.
_SLICE = 1 << 18
# Elements of x up to which the rotation's kernels are few rather than in place: a
# decoding step's queries and keys, where each kernel's launch is most of the cost.
_FEW = 1 << 14


@_distributed.rotary_tables
def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, *, layout: RotaryLayout = "half") -> Tensor:
    r"""Rotate each pair of features of ``x`` by the angle whose cos and sin are given.

    With ``h = cos.shape[-1]`` pairs, the pair :math:`(x_1, x_2)` becomes
    :math:`(x_1 \cos - x_2 \sin,\ x_2 \cos + x_1 \sin)`. ``layout`` says which
    features pair up: ``"half"`` pairs feature ``k`` with ``k + h``
    (rotate-half: GPT-NeoX, LLaMA, Hugging Face), ``"interleaved"`` pairs
    ``2k`` with ``2k + 1`` (GPT-J, Meta's complex-number code). When ``2h`` is
    less than ``x``'s last dimension, only the first ``2h`` features are
    rotated and the others pass unchanged (partial rotary, as in GPT-NeoX).

    The arithmetic runs in the promoted dtype of ``x`` and ``cos`` and is
    rounded once to ``x``'s dtype: bfloat16 ``x`` with float32 tables is
    rotated in float32. This is what :class:`RotaryEmbedding` calls.

    Args:
        x: Tensor ``(..., L, D)``, the sequence on dim -2.
        cos: One cosine per pair, ``(..., L, h)`` with ``h <= D / 2``, that
            broadcasts against ``x`` (aligned from the right, as in PyTorch:
            ``(L, h)``, or ``(B, 1, L, h)`` for x ``(B, H, L, D)``).
        sin: The sines, of the shape, dtype and device of ``cos``.
        layout: ``"half"`` or ``"interleaved"``.

    Returns:
        Tensor of the shape and dtype of ``x``.

    Raises:
        TypeError: a tensor is not floating.
        ValueError: the shapes do not fit, ``cos`` and ``sin`` differ in shape,
            dtype or device, or ``layout`` is unknown.

    Shapes:
        - x: ``(..., L, D)``
        - cos, sin: ``(..., L, h)``, ``h <= D/2``, broadcasting to ``x``
        - output: the shape of ``x``

    Example:
        A quarter turn of the first pair, nothing for the second:

        >>> import torch
        >>> x = torch.tensor([[1.0, 2.0, 0.0, 0.0]])   # pairs (x0, x2), (x1, x3)
        >>> apply_rotary(x, torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0]]))
        tensor([[0., 2., 1., 0.]])
        >>> x = torch.tensor([[1.0, 0.0, 2.0, 0.0]])   # pairs (x0, x1), (x2, x3)
        >>> apply_rotary(x, torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0]]),
        ...              layout="interleaved")
        tensor([[0., 1., 2., 0.]])

        Hugging Face's tables repeat each value for the two features of a pair;
        one copy is the table ``apply_rotary`` takes: ``cos[..., :h]`` for the
        half layout, ``cos[..., ::2]`` for the interleaved one.

        Tensors with the heads after the sequence, ``(B, L, H, D)`` as GPT-J's
        attention holds them, take tables with a 1 for the heads,
        ``(B, L, 1, h)``: the rotation is elementwise, so only broadcasting
        matters. :class:`RotaryEmbedding` itself wants the sequence on dim -2;
        this is the way to rotate such tensors without a transpose:

        >>> rope = RotaryEmbedding(8, layout="interleaved")
        >>> x = torch.randn(2, 5, 3, 8)                    # (B, L, H, D)
        >>> ids = torch.arange(5).expand(2, 5)            # position_ids (B, L)
        >>> cos, sin = rope.cos_sin(5, positions=ids, batch=2)
        >>> y = apply_rotary(x, cos[:, :, None], sin[:, :, None], layout="interleaved")
        >>> torch.equal(y, rope(x.transpose(1, 2), positions=ids).transpose(1, 2))
        True
    """
    layout = _checks.choice("layout", layout, ROTARY_LAYOUTS)
    x, cos, sin = _checks.apply_rotary_args(x, cos, sin)
    products = torch.promote_types(x.dtype, cos.dtype)  # the dtype the products are in
    if cos.dtype is not products:
        cos, sin = cos.to(products), sin.to(products)
    return _rotate(x, cos, sin, layout)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, layout: RotaryLayout) -> Tensor:
    """The rotation, on checked arguments: fused where nothing records it, else plain.

    ``cos`` and ``sin`` have the dtype the products are computed in: ``x``'s, or wider.
    """
    if not _runtime.fast_path(x, constants=(cos, sin)):
        return _rotated(x, cos, sin, layout)  # compilers, torch.func, subclasses
    if x.requires_grad and torch.is_grad_enabled():
        return _Rotation.apply(x, cos, sin, layout, 1, True)  # type: ignore[no-any-return,no-untyped-call]
    return _rotate_fused(x, cos, sin, layout, 1)


class _Rotation(torch.autograd.Function):
    """The fused rotation under autograd. Its gradient is the rotation back, by -θ.

    Eager only, on plain tensors, with tables that need no gradient (``_rotate``
    decides): compilers and :mod:`torch.func` take :func:`_rotated`, whose
    gradient autograd derives.

    The gradient is the one autograd derives from :func:`_rotated`, to the bit:
    the products ``g·cos`` and ``g·sin`` are each rounded and then summed, never
    fused into one multiply-add (see :func:`_rotate_into`'s ``fused``).
    """

    @staticmethod
    def forward(
        x: Tensor, cos: Tensor, sin: Tensor, layout: RotaryLayout, sign: int, fused: bool
    ) -> Tensor:
        return _rotate_fused(x, cos, sin, layout, sign, fused)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _, cos, sin, ctx.layout, ctx.sign, _ = inputs
        ctx.save_for_backward(cos, sin)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        cos, sin = ctx.saved_tensors
        # The transpose of a rotation is the rotation by the opposite angle; applied
        # through this function again, so that a second derivative has it too.
        fused = False  # the sum autograd would form, product by product
        back = _Rotation.apply(grad, cos, sin, ctx.layout, -ctx.sign, fused)  # type: ignore[no-untyped-call]
        return back, None, None, None, None, None


def _rotate_fused(
    x: Tensor, cos: Tensor, sin: Tensor, layout: RotaryLayout, sign: int, fused: bool = True
) -> Tensor:
    """Rotation by ``sign`` times the angles, into one new output (eager, plain tensors).

    The cos table is widened to one value per feature, so that the product with it
    is one pass over ``x`` that torch runs as a flat loop; the sin products are then
    added to each half of the pairs in place. On the CPU, a slice of positions at a
    time, so that the passes find the slice in cache. One rounding to ``x``'s dtype.
    """
    rotated, length, cpu = 2 * cos.shape[-1], x.shape[-2], x.device.type == "cpu"
    few = fused and layout == "half" and rotated == x.shape[-1] and x.numel() <= _FEW
    if few and sign > 0 and x.is_contiguous():
        return _rotate_few(x, torch.cat((cos, cos), -1), torch.cat((-sin, sin), -1))
    out = torch.empty_like(x)
    # one cos per feature: each pair's value twice
    cos = torch.cat((cos, cos), -1) if layout == "half" else cos.repeat_interleave(2, -1)
    if rotated == x.shape[-1] and (not cpu or length <= 1 or x.numel() <= _SLICE):
        # one slice, every feature: no views of positions
        _rotate_into(out, x, cos, sin, layout, sign, fused)
        return out
    per_position = x.numel() // max(length, 1)
    step = max(1, _SLICE // max(per_position, 1)) if cpu else max(length, 1)
    if rotated < x.shape[-1]:
        if fused:
            out[..., rotated:] = x[..., rotated:]
        else:  # + 0, as autograd sums a gradient's pieces into zeros: +0 for -0
            torch.add(x[..., rotated:], 0, out=out[..., rotated:])
    for start in range(0, length, step):
        rows = slice(start, start + step)
        _rotate_into(
            out[..., rows, :rotated],
            x[..., rows, :rotated],
            _along(cos, rows, length),
            _along(sin, rows, length),
            layout,
            sign,
            fused,
        )
    return out


def _rotate_few(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """:func:`_rotate_into`'s products and sums in three kernels, for a few elements.

    Rotate-half of every feature, from rows widened to one value per feature: ``cos``
    is ``(cos, cos)`` and ``sin`` is ``(-sin, sin)``. The pair's other feature is the
    input rolled by half a head (``x1 cos - x2 sin``, ``x2 cos + x1 sin``). Each
    product is rounded, then the sum, as there, in the rows' dtype (a narrower input
    is widened exactly), and written to the output in its dtype: the same values to
    the bit, where a decoding step's token spends most of its time per kernel.
    """
    rolled = x.roll(sin.shape[-1] // 2, -1)
    if x.dtype is cos.dtype:
        return torch.addcmul(x * cos, rolled, sin)
    # A narrower x is widened exactly by each kernel; the sum is rounded once, on writing.
    return torch.addcmul(x * cos, rolled, sin, out=torch.empty_like(x))


def _along(table: Tensor, rows: slice, length: int) -> Tensor:
    """The rows of a table for a slice of the positions (a table of one row serves all)."""
    return table[..., rows, :] if table.dim() > 1 and table.shape[-2] == length else table


def _split_pairs(t: Tensor, layout: RotaryLayout) -> tuple[Tensor, Tensor]:
    """The first and second features of every pair, as views."""
    if layout == "half":
        h = t.shape[-1] // 2
        return t[..., :h], t[..., h:]
    return t[..., 0::2], t[..., 1::2]


_EVEN_ODD = (slice(0, None, 2), slice(1, None, 2))  # the interleaved layout's pairs


def _rotate_into(
    out: Tensor,
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    layout: RotaryLayout,
    sign: int,
    fused: bool = True,
) -> None:
    """``out = rotate(x)`` by ``sign`` times the angles, in ``cos``'s dtype, rounded once.

    ``cos`` has one value per feature (each pair's twice), ``sin`` one per pair. A
    narrower ``x`` is widened once, exactly, to their dtype (products of mixed dtypes
    would each widen a copy of their own). ``fused`` adds the sin products with
    ``addcmul``, as :func:`_rotated` computes the rotation; otherwise each product is
    rounded before the sum, as autograd computes :func:`_rotated`'s gradient (the sum
    of ``g·cos`` and ``g·sin``; an ``alpha`` of ±1 is exact, fused or not).
    """
    h = sin.shape[-1]
    first, second = (slice(0, h), slice(h, None)) if layout == "half" else _EVEN_ODD
    wide = x if x.dtype is cos.dtype else x.to(cos.dtype)
    acc = out if out.dtype is cos.dtype else torch.empty_like(wide)
    if fused:
        torch.mul(wide, cos, out=acc)
        acc[..., first].addcmul_(wide[..., second], sin, value=-sign)
        acc[..., second].addcmul_(wide[..., first], sin, value=sign)
    else:
        # 0 + x·cos is x·cos rounded, fused or not, with +0 for -0: autograd sums
        # the pieces of a gradient into zeros, so its gradients carry no -0 either.
        torch.addcmul(cos.new_zeros(()), wide, cos, out=acc)
        product = torch.mul(wide[..., second], sin)
        acc[..., first].add_(product, alpha=-sign)
        acc[..., second].add_(torch.mul(wide[..., first], sin, out=product), alpha=sign)
    if acc is not out:
        out.copy_(acc)  # the one rounding to x's dtype


def _rotated(x: Tensor, cos: Tensor, sin: Tensor, layout: RotaryLayout) -> Tensor:
    """The same products, without writing into views: for autograd and compilers."""
    rotated = 2 * cos.shape[-1]
    first, second = _split_pairs(x[..., :rotated].to(cos.dtype), layout)
    # Each half rounded to x's dtype before they are joined: a compiler then writes the
    # output in one pass, instead of a float32 copy and a conversion.
    new_first = torch.addcmul(first * cos, second, sin, value=-1).to(x.dtype)
    new_second = torch.addcmul(second * cos, first, sin).to(x.dtype)
    if layout == "half":
        y = torch.cat((new_first, new_second), dim=-1)
    else:
        y = torch.stack((new_first, new_second), dim=-1).flatten(-2)
    return torch.cat((y, x[..., rotated:]), dim=-1) if rotated < x.shape[-1] else y


# -- The module --------------------------------------------------------------------------


class RotaryEmbedding(DerivedTables):
    r"""Rotates queries or keys by their positions (RoPE), exactly in every dtype.

    Call it on the queries and on the keys of an attention layer, before their
    dot product: ``q = rope(q)``, ``k = rope(k)``. Token ``t`` sits at position
    ``t``, or ``offset + t`` (decoding with a cache), or wherever ``positions``
    puts it (padding, packed sequences), exactly as in
    :class:`~posenc.PositionalEncoding`.

    The cos and sin of the first ``max_len`` positions are computed once, in
    float64, rounded to float32 (float64 where :func:`torch.set_default_dtype`
    made float64 the default) and kept in non-persistent buffers; later
    positions are computed on the fly with the same values. bfloat16 and
    float16 inputs are rotated in float32 and rounded once, so the output is
    within one unit in the last place of the exact rotation (where the two
    products of a pair nearly cancel, within one ulp of the pair's length) at
    every position ``|p| <= 2**40``; a float32 output is within two float32 ulps
    of the pair's length for ``|p| <= 2**30``. Past those positions the float64
    rounding of the angle ``p·ω`` grows beyond the bounds.
    Casting the module (``.to(torch.bfloat16)``, ``.half()``) changes nothing:
    there is no frequency buffer to round, and the tables are derived again,
    in float32 (float64 after ``.double()``).

    ``scaling`` takes a model config's ``rope_parameters``; see
    :func:`rope_frequencies`. For "dynamic" and "longrope", whose frequencies
    depend on the length, each call uses ``seq_len`` = its largest position
    + 1 (over the batch), as Hugging Face does when a sequence grows; nothing is
    remembered between calls.

    Positions on axes (the guide's "Positions on axes"): with ``axes=(d_0, ...,
    d_{A-1})`` the first ``d_0`` rotated features turn with the position on axis
    0 at the frequencies :math:`base^{-2k/d_0}`, the next ``d_1`` with axis 1 at
    :math:`base^{-2k/d_1}`, and so on (FLUX, HunyuanVideo, Wan and Qwen-Image
    with ``layout="interleaved"``; the vision towers' "axial" form with
    ``axes=(D/2, D/2)`` and ``layout="half"``). A ``scaling`` with
    ``mrope_section`` (Qwen2-VL, Qwen2.5-VL: chunked) or also
    ``mrope_interleaved`` (Qwen3-VL) builds multimodal RoPE: the pairs of one
    ladder shared among the axes t, h and w. Either takes positions ``(A, L)``
    or ``(A, B, L)`` (see :func:`~posenc.positions.resolve_axes`), and an
    ``offset`` or ``(L,)`` / ``(B, L)`` positions as one stream on every axis,
    which is 1-D RoPE bit for bit for M-RoPE. The tables are the same
    ``max_len`` rows, one column per pair: a grid's cos and sin are gathered from
    them, never recomputed, while every position lies in ``[0, max_len)``.

    Args:
        head_dim: Features per head, D; even, unless ``partial_rotary_factor``
            rotates an even part of it.
        base: Base of the wavelengths, the model's ``rope_theta``.
        layout: Which features pair up: ``"half"`` (``k`` with ``k + D/2``:
            GPT-NeoX, LLaMA, Hugging Face) or ``"interleaved"`` (``2k`` with
            ``2k + 1``: GPT-J, Meta's LLaMA code). :ref:`guide-rotary` shows
            the permutation that moves a checkpoint from one to the other.
        scaling: None, or a ``rope_parameters`` dict (see :func:`rope_frequencies`),
            M-RoPE's ``mrope_section`` and ``mrope_interleaved`` keys included.
        max_len: Number of positions whose cos and sin are precomputed.
        axes: None, or the rotated features of each position axis, ``(d_0, ...)``:
            even ints summing to ``head_dim``; each axis its own ladder
            :math:`base^{-2k/d_a}`. Not with a ``scaling``.
        frequencies: None, or a :class:`MixedFrequencies`: learned frequencies
            (RoPE-Mixed) that give the phases, for a ``head_dim`` of twice their
            pairs, without ``axes`` or ``scaling``.
        xpos_scale_base: None (off), or xPos's :math:`\gamma` (Sun et al., 2022;
            512 there): pair ``k`` of a query is also scaled by
            :math:`\zeta_k^{(p-c)/\gamma}` and of a key by its inverse, as
            :class:`~posenc.XPos` does. Queries and keys then go through
            :meth:`rotate_queries_and_keys`; :meth:`forward` and :meth:`cos_sin`
            refuse, as one tensor cannot say which it is. One stream of
            positions and fixed frequencies only (no ``axes``, M-RoPE or ``frequencies``).

    Attributes:
        rotary_dim: Number of features rotated (the first ones); the others
            pass unchanged.
        attention_factor: The factor on cos and sin (YaRN, LongRoPE; else 1).
        n_axes: Number of position axes A: 1, ``len(axes)``, or 3 for M-RoPE.
        position_axes: How ``forward`` reads ``positions``: None for one stream
            (:func:`~posenc.positions.resolve`'s forms), or A when the positions may
            lie on axes (:func:`~posenc.positions.resolve_axes`'s forms).
        source: Where the cos and sin rows of resolved positions come from:
            ``frequencies`` when given, else the frequencies of this configuration,
            read from the tables where they hold the rows. Its one method,
            ``rows(at, dtype, device, seq_len)``, is what :meth:`forward` and
            :meth:`cos_sin` ask.
        trained_length: For "dynamic" and "longrope", whose frequencies depend on
            the length: the length up to which they do not; None for the other types.
        xpos_scale_base: xPos's :math:`\gamma`, or None.

    Shapes:
        - x: ``(..., L, D)``, the sequence on dim -2: ``(B, H, L, D)`` as in
          Hugging Face, ``(B, L, D)`` or ``(L, D)``; any floating dtype. With
          ``seq_dim=1``, ``(B, L, H, D)``; with ``seq_dim=0``, packed ``(T, H, D)``
        - offset: int, or ``(B,)`` integer tensor, B = ``x.shape[0]``
        - positions: ``(L,)`` or ``(B, L)`` integer tensor; per-sequence rows
          broadcast over the dimensions between B and L (the heads); on axes also
          ``(A, L)`` or ``(A, B, L)``
        - output: same shape and dtype as ``x``
        - q, k (:meth:`rotate_queries_and_keys`): each as ``x``, of the same tokens;
          the output ``(q, k)``, each of its input's shape and dtype

    Example:
        >>> import torch
        >>> rope = RotaryEmbedding(64)
        >>> rope
        RotaryEmbedding(head_dim=64, max_len=4096)
        >>> q = torch.randn(2, 8, 5, 64)                     # (B, H, L, D)
        >>> rope(q).shape, rope(q.bfloat16()).dtype
        (torch.Size([2, 8, 5, 64]), torch.bfloat16)

        Rotations keep lengths, and position 0 is not rotated:

        >>> torch.allclose(rope(q).norm(dim=-1), q.norm(dim=-1))
        True
        >>> torch.equal(rope(q)[:, :, 0], q[:, :, 0])
        True

        Decoding one token at a time gives the rows of the whole sequence:

        >>> steps = [rope(q[:, :, t : t + 1], offset=t) for t in range(5)]
        >>> torch.equal(torch.cat(steps, dim=2), rope(q))
        True

        A module cast to bfloat16 is as exact as a fresh one:

        >>> x = torch.randn(1, 1, 3, 64, dtype=torch.bfloat16)
        >>> torch.equal(rope.bfloat16()(x, offset=100_000), rope(x, offset=100_000))
        True

        On two axes, an image's rows and columns (positions from
        :func:`~posenc.grid_positions`):

        >>> from posenc import grid_positions
        >>> axial = RotaryEmbedding(64, axes=(32, 32))
        >>> axial
        RotaryEmbedding(head_dim=64, max_len=4096, axes=(32, 32))
        >>> patches = torch.randn(1, 8, 12, 64)                # a 3 × 4 grid
        >>> axial(patches, positions=grid_positions(3, 4)).shape
        torch.Size([1, 8, 12, 64])
    """

    _cos: Tensor
    _sin: Tensor
    _table_names = ("_cos", "_sin")

    def __init__(
        self,
        head_dim: int,
        *,
        base: float = 10_000.0,
        layout: RotaryLayout = "half",
        scaling: dict[str, Any] | None = None,
        max_len: int = 4096,
        axes: tuple[int, ...] | list[int] | None = None,
        frequencies: MixedFrequencies | None = None,
        xpos_scale_base: float | None = None,
    ) -> None:
        super().__init__()
        self.head_dim: int = _checks.positive_int("head_dim", head_dim)
        self.base: float = _checks.base(base)
        self.layout: RotaryLayout = _checks.choice("layout", layout, ROTARY_LAYOUTS)
        self.max_len: int = _checks.positive_int("max_len", max_len)
        self._config: RopeConfig = rope_config.parse(scaling, head_dim, self.base)
        # A copy, nested lists too: later edits of the caller's dict change nothing here.
        self.scaling: dict[str, Any] | None = None if scaling is None else copy.deepcopy(scaling)
        self.rotary_dim: int = self._config.rotary_dim
        self.attention_factor: float = self._config.attention_factor()
        # For dynamic and longrope: the length up to which the frequencies are fixed.
        self.trained_length: int | None = self._config.trained_length()
        self.axes: tuple[int, ...] | None = _checks.rotary_axes(axes, self.head_dim, scaling)
        # Float64 and on the CPU, plain attributes: no cast or move can round them.
        freqs, pair_axes = self._config.frequencies(), self._config.pair_axes()
        if self.axes is not None:  # each axis its own ladder base ** (-2k / d_a)
            freqs = torch.tensor(
                [w for d in self.axes for w in ladder(d // 2, self.base, float(d))],
                dtype=_F64,
                device=_CPU,
            )
            pair_axes = tuple(a for a, d in enumerate(self.axes) for _ in range(d // 2))
        # The axis of each rotated pair (int64); None: one stream.
        axis_of_pair = (
            None if pair_axes is None else torch.tensor(pair_axes, dtype=torch.int64, device=_CPU)
        )
        self.n_axes: int = (
            len(self.axes) if self.axes else 3 if self._config.sections is not None else 1
        )
        # The axes positions are read on (resolve_axes' forms), or None for one stream
        # (resolve's): this module's reading, which the DTensor glue reads positions by.
        self.position_axes: int | None = None if axis_of_pair is None else self.n_axes
        # The positions the tables serve, [0, rows): max_len, and for dynamic and
        # longrope no further than the trained length (past it the frequencies differ).
        rows = min(self.max_len, self.trained_length or self.max_len)
        # The fixed source, read from the tables where they hold the rows.
        self._table_cache = TableCache(
            Ladder(self._config, freqs, axis_of_pair), self._table_for, rows
        )
        # xPos: the ladder's rows times the scales, one side at a time; None: off.
        self.xpos_scale_base: float | None = _xpos_scale_base(xpos_scale_base, self, frequencies)
        self._xpos: XPosScales | None = (
            None
            if self.xpos_scale_base is None
            else XPosScales(self._table_cache.ladder, self.rotary_dim, self.xpos_scale_base)
        )
        # The source of forward and cos_sin without learned frequencies (xPos: refusing).
        self._fixed: FrequencySource = self._table_cache if self._xpos is None else self._xpos
        # Learned frequencies: positions on their axes, phases from their parameters.
        self.frequencies: MixedFrequencies | None = _learned(frequencies, self)
        if frequencies is not None:
            self.position_axes = self.n_axes = frequencies.n_axes
        # How this module reads offset and positions, fractional ones included.
        self._resolve: Callable[..., Positions | AxisPositions] = (
            functools.partial(resolve, fractional=True)
            if self.position_axes is None
            else functools.partial(resolve_axes, axes=self.position_axes, fractional=True)
        )
        self._register_tables()

    @property
    def source(self) -> FrequencySource:
        """Where the rows come from: the learned frequencies, else the cached ladder.

        A ``FrequencySource`` (``posenc._sources``): :class:`MixedFrequencies`, or the
        ladder of this module's configuration, read from its tables where they hold the
        rows (``TableCache``).
        """
        return self._fixed if self.frequencies is None else self.frequencies

    def _table_shapes(self) -> tuple[tuple[int, ...], ...]:
        shape = (self.max_len, self.rotary_dim // 2)
        return shape, shape

    def _derive(self, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, ...]:
        return self._table_cache.ladder.table(self.max_len, dtype, device)

    def _describe(self) -> str:
        return f"RotaryEmbedding(head_dim={self.head_dim}, max_len={self.max_len})'s tables"

    @staticmethod
    def _storage_dtype(dtype: torch.dtype) -> torch.dtype:
        """float64 for float64; float32 for the rest (half precision is rotated in float32)."""
        return torch.float64 if dtype == torch.float64 else torch.float32

    def reset_parameters(self) -> None:
        """Derive the cos and sin tables again, on their device.

        There are no parameters; the name is the one initialisation code calls.
        Casting or moving the module (``.to()``, ``.half()``, ``.to_empty()``)
        calls it by itself. The tables are float32, which serves float32,
        bfloat16 and float16 inputs, or float64 when the module was cast to
        float64 (or built while float64 was torch's default dtype); they are
        never converted from another dtype.

        Example:
            >>> import torch
            >>> rope = RotaryEmbedding(16).half()
            >>> rope._cos.dtype                       # float32 serves float16 inputs
            torch.float32
            >>> torch.equal(rope._cos, RotaryEmbedding(16)._cos)
            True
        """
        super().reset_parameters()

    def extra_repr(self) -> str:
        """The configuration, shown in the module's repr."""
        parts = [f"head_dim={self.head_dim}", f"max_len={self.max_len}"]
        if self.base != 10_000.0:
            parts.append(f"base={self.base:g}")
        if self.layout != "half":
            parts.append(f"layout={self.layout!r}")
        if self._config.rope_type.name != "default":
            parts.append(f"rope_type={self._config.rope_type.name!r}")
        if self.rotary_dim != self.head_dim:
            parts.append(f"rotary_dim={self.rotary_dim}")
        if self.axes is not None:
            parts.append(f"axes={self.axes}")
        if self._config.sections is not None:
            parts.append(f"mrope_section={list(self._config.sections)}")
            if self._config.interleaved:
                parts.append("mrope_interleaved=True")
        if self.xpos_scale_base is not None:
            parts.append(f"xpos_scale_base={self.xpos_scale_base:g}")
        return ", ".join(parts)

    def cos_sin(
        self,
        length: int,
        *,
        offset: int | Tensor = 0,
        positions: Tensor | None = None,
        batch: int | None = None,
        seq_len: int | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The cos and sin tables that :meth:`forward` uses, as new tensors.

        One value per rotated pair, times :attr:`attention_factor`, computed in
        float64 and rounded once to ``dtype``: the tables :func:`apply_rotary`
        takes, and those of kernels that take one value per pair. For Hugging
        Face's ``apply_rotary_pos_emb``, which takes one per feature, widen
        them: ``torch.cat((cos, cos), -1)`` for the half layout,
        ``cos.repeat_interleave(2, -1)`` for the interleaved one. The result
        never shares memory with the module.

        Args:
            length: Number of tokens, L.
            offset: Position of the first token: an int, or one per sequence.
            positions: The position of every token; not with ``offset``. On
                axes also ``(A, L)`` or ``(A, B, L)``. Integer, or floating for
                fractional positions, as in :meth:`forward`.
            batch: Batch size B, to check per-sequence ``offset`` and
                ``positions`` against; None for shared positions only.
            seq_len: The length the frequencies depend on, as in :meth:`forward`.
            dtype: Floating dtype of the tables (default: the module's, torch's
                default dtype when built, then that of the last cast: a module cast
                to bfloat16 gives bfloat16 tables, each rounded once from float64).
            device: Device of the tables (default: that of the module's).

        Returns:
            ``(cos, sin)``, each ``(L, rotary_dim / 2)``, or ``(B, L, rotary_dim / 2)``
            for per-sequence positions.

        Raises:
            TypeError: ``offset`` is not integer, ``positions`` is neither
                integer nor floating (bool, complex), or ``dtype`` is not floating.
            ValueError: both are given, a shape does not match, or a position
                is outside the domain (NaN and infinite ones included).

        Example:
            >>> import torch
            >>> rope = RotaryEmbedding(4)
            >>> cos, sin = rope.cos_sin(3)
            >>> cos
            tensor([[ 1.0000,  1.0000],
                    [ 0.5403,  0.9999],
                    [-0.4161,  0.9998]])
            >>> apply_rotary(torch.ones(3, 4), cos, sin).equal(rope(torch.ones(3, 4)))
            True
            >>> rope.bfloat16().cos_sin(3)[0].dtype    # the module's dtype
            torch.bfloat16
        """
        if type(length) is not int or length < 0:
            length = _checks.nonnegative_int("length", length)
        dtype = self._dtype if dtype is None else _checks.floating_dtype("dtype", dtype)
        device = self._cos.device if device is None else torch.device(device)
        at = self._resolve(length, offset=offset, positions=positions, batch=batch)
        seq_len = None if seq_len is None else _checks.seq_len(seq_len)
        cos, sin = self.source.rows(at, dtype, device, seq_len)
        if at.start is not None:  # a run of positions: maybe views of the tables
            cos, sin = self._unshared(cos, sin)
        return cos, sin  # else gathered from the tables or computed: new tensors

    def forward(
        self,
        x: Tensor,
        *,
        offset: int | Tensor = 0,
        positions: Tensor | None = None,
        seq_len: int | None = None,
        seq_dim: int = -2,
    ) -> Tensor:
        """Rotate each pair of features of ``x`` by its position's angles.

        Under autograd the gradient is the rotation back, by the opposite angles,
        computed as the forward is (eagerly, with one rounding); compilers and
        :mod:`torch.func` differentiate the plain formula.

        Args:
            x: Queries or keys, ``(..., L, head_dim)`` with the sequence on dim
                -2, or on ``seq_dim``.
            offset: Position of the first token, as an int for all sequences or
                a ``(B,)`` integer tensor with one per sequence (B = ``x.shape[0]``).
            positions: Integer tensor ``(L,)`` or ``(B, L)`` (B may be 1) with
                the position of every token, e.g. from
                :func:`~posenc.positions_from_mask`; any integers, any integer dtype.
                On axes also ``(A, L)`` or ``(A, B, L)``, axes first (e.g. from
                :func:`~posenc.grid_positions` or :func:`~posenc.multimodal_positions`).
                A floating tensor (any floating dtype, every form) gives
                fractional positions, as vision towers place their patches
                (EVA-02's ``ref_feat_shape``, timm's ``in_pixels``, DINOv3's
                normalised patch centres): each position is taken at its exact
                value, widened to float64, the phase ``p·ω`` is their float64
                product, and cos and sin are rounded once to the table's dtype.
                The only roundings are then the position's own (when it was made
                in its dtype: a float32 position is exact as given) and the final
                one. Fractional positions must be finite with ``|p| <= 2**62``
                (checked where reading them is free); they are always computed,
                never read from the tables. Integer positions take the path
                they always took, to the bit.
            seq_len: The length the frequencies depend on ("dynamic" and
                "longrope"; ignored by the other types): by default the largest
                position + 1. Under context parallelism each rank holds part of
                the sequence and passes the whole sequence's length here, so that
                every rank rotates with the same frequencies.
            seq_dim: The dimension of ``x`` that holds the sequence: -2 for
                ``(B, H, L, D)`` (Hugging Face), 1 for ``(B, L, H, D)`` (flash-attn,
                torchtune, GPT-J), 0 for packed ``(T, H, D)`` tokens, which take
                one stream of positions ``(T,)`` (e.g. from
                :func:`~posenc.positions_from_lengths`) or an int offset. Dim 0 is the
                batch when the sequence is not. The shape cannot say which
                dimension is the sequence: positions whose length is not that
                dimension's are refused with this advice.

        Returns:
            Tensor of the shape and dtype of ``x`` (and its memory layout, eagerly).

        Raises:
            TypeError: ``x`` is not a floating tensor, ``offset`` is not
                integer, ``positions`` is neither integer nor floating (bool,
                complex), or ``seq_dim`` is not an int.
            ValueError: ``x`` has fewer than 2 dimensions or its last one is not
                ``head_dim``; both ``offset`` and ``positions`` are given, or
                their shapes do not match ``x``; a position is outside the
                domain (a fractional one NaN or infinite); ``seq_dim`` names the
                last dimension or none; a packed input gets per-sequence positions.

        Example:
            The same rotation, with the heads before or after the sequence:

            >>> import torch
            >>> rope = RotaryEmbedding(64)
            >>> q = torch.randn(2, 10, 8, 64)                    # (B, L, H, D)
            >>> torch.equal(rope(q, seq_dim=1), rope(q.transpose(1, 2)).transpose(1, 2))
            True

            Packed documents of 6 and 4 tokens, each from position 0:

            >>> from posenc import positions_from_lengths
            >>> packed = torch.randn(10, 8, 64)                  # (T, H, D)
            >>> p = positions_from_lengths(torch.tensor([6, 4]))
            >>> p
            tensor([0, 1, 2, 3, 4, 5, 0, 1, 2, 3])
            >>> rope(packed, seq_dim=0, positions=p).shape
            torch.Size([10, 8, 64])
        """
        if seq_dim != -2:
            return self._forward_on(x, seq_dim, offset, positions, seq_len)
        if type(x) is not Tensor or not (
            x.is_floating_point() and x.dim() >= 2 and x.shape[-1] == self.head_dim
        ):
            if _distributed.is_dtensor(x):
                return self._sharded(x, offset=offset, positions=positions, seq_len=seq_len)
            x = _checks.rotary_input(x, self.head_dim)
        if positions is None and seq_len is None and type(offset) is int:
            step = self._step(x, offset)  # a decoding step's few tokens, else None
            if step is not None:
                return step
        batch = x.shape[0] if x.dim() >= 3 else None
        try:
            at = self._resolve(
                x.shape[-2], offset=offset, positions=positions, batch=batch, device=x.device
            )
        except ValueError as error:
            raise _layout_hint(error, x, positions) from error.__cause__
        seq_len = None if seq_len is None else _checks.seq_len(seq_len)
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32  # the tables'
        cos, sin = self.source.rows(at, dtype, x.device, seq_len)
        # one row per sequence: broadcast over the heads (learned rows have their heads)
        if cos.dim() == 3 and x.dim() > 3 and self.frequencies is None:
            cos = cos.view(cos.shape[0], *(1,) * (x.dim() - 3), *cos.shape[1:])
            sin = sin.view(cos.shape)
        return _rotate(x, cos, sin, self.layout)

    # DTensor inputs: each rank rotates its shard with the global positions.
    _sharded = _distributed.sequence_input(-2)(forward)

    def _step(self, x: Tensor, offset: int) -> Tensor | None:
        """A decoding step's rotation, from widened rows kept by the tables, or None.

        A few elements (``_FEW``), rotate-half of every feature, eagerly, with nothing
        to record, at an int offset whose rows the tables of ``x``'s dtype and device
        hold: the rows of ``TableCache.widened``, then the three kernels of
        :func:`_rotate_few`. The values of forward's other path, to the bit.
        """
        # the buffers, without nn.Module.__getattr__'s cost (a decoding step asks each call)
        cos, sin, cache = self._buffers["_cos"], self._buffers["_sin"], self._table_cache
        assert cos is not None  # registered in __init__, never None
        assert sin is not None
        if not (
            self._fixed is cache
            and self.frequencies is None
            and self.layout == "half"
            and self.rotary_dim == self.head_dim
            and cos.dtype is (torch.float64 if x.dtype == torch.float64 else torch.float32)
            and cos.device == x.device
            and not (x.requires_grad and torch.is_grad_enabled())
            and _runtime.fast_path(x)  # eager: no size is read while compiling
            and x.numel() <= _FEW
        ):
            return None
        rows = cache.widened(offset, x.shape[-2], cos, sin)
        return None if rows is None else _rotate_few(x, *rows)

    def rotate_queries_and_keys(
        self,
        q: Tensor,
        k: Tensor,
        *,
        offset: int | Tensor = 0,
        positions: Tensor | None = None,
        seq_dim: int = -2,
        center: float = 0.0,
    ) -> tuple[Tensor, Tensor]:
        r"""Rotate the queries and the keys of the same tokens; with xPos, scale them too.

        Without ``xpos_scale_base`` this is :meth:`forward` on each (``center`` is
        not read). With it, pair ``k`` of the query at position ``p`` is also
        multiplied by :math:`\zeta_k^{(p-c)/\gamma}` and of the key by its inverse,
        so that the pair's share of ``q_n · k_m`` is scaled by
        :math:`\zeta_k^{(n-m)/\gamma}` whatever ``c`` is (see :class:`~posenc.XPos`).
        The scale, cos and sin are multiplied in float64 and rounded once to the
        tables' dtype; nothing is read from the tables.

        Args:
            q: Queries ``(..., L, head_dim)``, the sequence on dim -2 or ``seq_dim``.
            k: Keys of the same tokens, of ``q``'s number of dimensions, batch and
                length (the heads may differ). Decoding with a cache: the new
                tokens' queries and keys, with ``offset`` and the same ``center``
                at every step.
            offset: Position of the first token, as in :meth:`forward`.
            positions: The position of every token, as in :meth:`forward`.
            seq_dim: The dimension of ``q`` and ``k`` that holds the sequence.
            center: xPos: the position ``c`` the scales' power is taken from (the
                scores do not depend on it, the scales' range does).

        Returns:
            ``(q, k)`` rotated (and scaled), each of its input's shape and dtype.

        Raises:
            TypeError: as :meth:`forward`, or ``center`` is not a number.
            ValueError: as :meth:`forward`; ``q`` and ``k`` differ in their tokens;
                an xPos scale outside the normal range of the output's dtype
                (checked for int offsets, and for positions on the CPU, eagerly;
                elsewhere such scales give inf and 0).

        Example:
            >>> import torch
            >>> xpos = RotaryEmbedding(8, xpos_scale_base=512)
            >>> q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)   # (B, H, L, D)
            >>> rq, rk = xpos.rotate_queries_and_keys(q, k, center=2)
            >>> rq.shape, rk.dtype
            (torch.Size([1, 2, 5, 8]), torch.float32)
            >>> xpos(q)
            Traceback (most recent call last):
                ...
            ValueError: this RotaryEmbedding is xPos (xpos_scale_base=512): ... call
            rotate_queries_and_keys(q, k) instead of forward or cos_sin
        """
        center = _checks.real_number("center", center)
        if self._xpos is None:  # RoPE: queries and keys turn alike
            rotate = functools.partial(
                self.forward, offset=offset, positions=positions, seq_dim=seq_dim
            )
            return rotate(q), rotate(k)
        q, k = _xpos_input("q", q, self.head_dim), _xpos_input("k", k, self.head_dim)
        if seq_dim != -2:
            seq = self._sequence_dim(q, seq_dim, offset, positions)
            if k.dim() == q.dim():
                q, k = q.movedim(seq, -2), k.movedim(seq, -2)
            rq, rk = self.rotate_queries_and_keys(
                q, k, offset=offset, positions=positions, center=center
            )
            return rq.movedim(-2, seq), rk.movedim(-2, seq)
        if (
            q.shape[-2] != k.shape[-2]
            or q.dim() != k.dim()
            or (q.dim() >= 3 and q.shape[0] != k.shape[0])
        ):
            raise ValueError(
                f"q and k must hold the same tokens: one number of dimensions, batch and "
                f"length (dim -2), got shapes {tuple(q.shape)} and {tuple(k.shape)}"
            )
        batch = q.shape[0] if q.dim() >= 3 else None
        at = resolve(q.shape[-2], offset=offset, positions=positions, batch=batch, fractional=True)
        rows = self._xpos.scaled_rows(at, center, (q.dtype, k.dtype), (q.device, k.device))
        out = []
        for x, (cos, sin) in zip((q, k), rows, strict=True):
            if cos.dim() == 3 and x.dim() > 3:  # per sequence: broadcast over the heads
                cos = cos.view(cos.shape[0], *(1,) * (x.dim() - 3), *cos.shape[1:])
                sin = sin.view(cos.shape)
            out.append(apply_rotary(x, cos, sin, layout=self.layout))  # DTensor x too
        return out[0], out[1]

    def _forward_on(
        self,
        x: Tensor,
        seq_dim: int,
        offset: int | Tensor,
        positions: Tensor | None,
        seq_len: int | None,
    ) -> Tensor:
        """:meth:`forward` with the sequence on ``seq_dim``: a view with it on dim -2."""
        x = _checks.rotary_input(x, self.head_dim)
        seq = self._sequence_dim(x, seq_dim, offset, positions)
        moved = x.movedim(seq, -2)
        out = self.forward(moved, offset=offset, positions=positions, seq_len=seq_len)
        return out.movedim(-2, seq)

    def _sequence_dim(self, x: Tensor, seq_dim: object, offset: object, positions: object) -> int:
        """``seq_dim`` as a dimension of ``x`` (not its last), checked against packing."""
        if isinstance(seq_dim, bool) or not isinstance(seq_dim, (int, SupportsIndex)):
            raise TypeError(f"seq_dim must be an int, got {_checks._show(seq_dim)}")
        seq_dim, ndim = operator.index(seq_dim), x.dim()
        if not -ndim <= seq_dim < ndim or seq_dim % ndim == ndim - 1:
            raise ValueError(
                f"seq_dim must name the sequence dimension of the {ndim}-D input "
                f"{tuple(x.shape)}, one of {-ndim}, ..., {ndim - 2} (the last dimension "
                f"holds the head_dim={self.head_dim} features), got {seq_dim}"
            )
        seq = seq_dim % ndim
        if seq == 0 and ndim > 2 and _per_sequence(offset, positions):
            raise ValueError(
                f"a packed input (seq_dim={seq_dim}, shape {tuple(x.shape)}: T tokens, then "
                f"heads and features) has no batch: give positions of shape (T,), e.g. from "
                f"positions_from_lengths, or an int offset"
            )
        return seq


def _per_sequence(offset: object, positions: object) -> bool:
    """Whether ``offset`` or ``positions`` hold one row per sequence (a batch of them)."""
    if isinstance(positions, Tensor) and positions.dim() >= 2:
        return positions.shape[-2] != 1
    return isinstance(offset, Tensor) and offset.dim() == 1 and offset.shape[0] != 1


def _learned(
    frequencies: MixedFrequencies | None, rope: RotaryEmbedding
) -> MixedFrequencies | None:
    """``frequencies``, checked against the module that turns by them."""
    if frequencies is None:
        return None
    if not isinstance(frequencies, MixedFrequencies):
        raise TypeError(
            f"frequencies must be None or a MixedFrequencies, got {_checks._show(frequencies)}"
        )
    pairs = frequencies.weight.shape[-1]
    if 2 * pairs != rope.rotary_dim or rope.axes is not None or rope.scaling is not None:
        raise ValueError(
            f"frequencies of {2 * pairs} features need a RotaryEmbedding of head_dim="
            f"{2 * pairs}, without axes or scaling (they set the frequencies), got "
            f"head_dim={rope.head_dim}, axes={rope.axes}, scaling={rope.scaling}"
        )
    return frequencies


def _xpos_scale_base(value: object, rope: RotaryEmbedding, frequencies: object) -> float | None:
    """``xpos_scale_base``: None, or a finite number > 0 for a module of one position stream."""
    if value is None:
        return None
    gamma = _checks.real_number("xpos_scale_base", value)
    if not gamma > 0:
        raise ValueError(f"xpos_scale_base must be None or a finite number > 0, got {value!r}")
    if rope.position_axes is not None or frequencies is not None:
        raise ValueError(
            "xpos_scale_base needs one stream of positions and fixed frequencies: not with "
            "axes, M-RoPE's mrope_section or learned frequencies"
        )
    return gamma


def _xpos_input(name: str, x: object, head_dim: int) -> Tensor:
    """``x``, a floating ``(..., L, head_dim)`` tensor, named in the errors."""
    x = _checks.floating_tensor(name, x)
    if x.dim() < 2:
        raise ValueError(
            f"{name} must have shape (..., L, head_dim), with the sequence on dim -2, got "
            f"{x.dim()}-D shape {tuple(x.shape)}"
        )
    _checks.last_dim(x, head_dim, name, "head_dim")
    return x


def _layout_hint(error: ValueError, x: Tensor, positions: Tensor | None) -> ValueError:
    """``error``, with the likely cause when the positions' length is not the sequence's.

    A (B, L, H, D) input read with the default ``seq_dim`` has H where L should be: the
    one sign of a layout that can be seen is positions of another length.
    """
    if not isinstance(positions, Tensor) or not positions.dim():
        return error
    if positions.shape[-1] == x.shape[-2]:
        return error
    return ValueError(
        f"{error}. The input's sequence (its dim seq_dim, -2 unless given) holds "
        f"{x.shape[-2]} tokens, and the positions give {positions.shape[-1]}: for "
        f"(B, L, H, D) inputs (flash-attn, torchtune, GPT-J) pass seq_dim=1, for packed "
        f"(T, H, D) inputs seq_dim=0 with positions (T,); (B, H, L, D) keeps seq_dim=-2"
    )
