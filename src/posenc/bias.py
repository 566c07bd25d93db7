r"""Relative position as an additive attention bias: ALiBi, T5's learned buckets, KERPLE.

Instead of adding a vector to each token, these schemes add a number to each
attention score, one per head, that depends on how far the key is from the
query. The score of query ``i`` for key ``j`` becomes
``q_i · k_j / √d_k + bias[h, i, j]``, and only the distance ``j - i`` enters
the bias, so it is the same wherever the pair sits in the sequence.

- ALiBi (Press et al., 2022, *Train Short, Test Long*) uses a fixed line per
  head: ``bias[h, i, j] = -m_h · (i - j)``, with slopes ``m_h`` from
  :func:`alibi_slopes`. Nothing is learned.
- T5 (Raffel et al., 2020, *Exploring the Limits of Transfer Learning*, §2.1)
  sorts each distance into one of ``num_buckets`` buckets
  (:func:`relative_position_bucket`) and learns one number per bucket and head
  (:class:`RelativePositionBias`).
- KERPLE (Chi et al., 2022, *Kernelized Relative Positional Embedding for
  Length Extrapolation*) learns two positive numbers per head of a logarithm:
  ``bias[h, i, j] = -r1_h · log(1 + r2_h · |i - j|)`` (:class:`KERPLE`).

The modules share one base: they take the lengths and the positions of the
queries and of the keys, with the same ``offset`` and ``positions`` arguments
as every scheme (:func:`posenc.positions.resolve`), and return a bias that
:func:`~posenc.attention` adds to its scores, or, with ``causal=True``, the
additive mask that ``torch.nn.functional.scaled_dot_product_attention``
takes:

>>> import torch
>>> from posenc import ALiBi, attention, subsequent_mask
>>> alibi = ALiBi(n_heads=4)
>>> bias = alibi(3)                        # queries and keys at 0, 1, 2
>>> bias.shape
torch.Size([4, 3, 3])
>>> bias[0]                                # head 0: slope 1/4
tensor([[ 0.0000,  0.2500,  0.5000],
        [-0.2500,  0.0000,  0.2500],
        [-0.5000, -0.2500,  0.0000]])
>>> q = k = v = torch.randn(1, 4, 3, 8)    # (B, heads, L, d_k)
>>> out, _ = attention(q, k, v, mask=subsequent_mask(3), bias=bias)
>>> out.shape
torch.Size([1, 4, 3, 8])

Above the diagonal (keys after the query) the causal bias keeps the line
``-m_h · (i - j)``; a causal mask removes those keys (see :class:`ALiBi`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import ParamSpec, TypeVar, cast

import torch
from torch import Tensor, nn
from torch.nn import functional

from . import _checks, _runtime
from ._relative import RelativeBias, relative_positions
from ._rounding import round_once
from .positions import check_domain, positions_from_mask

__all__ = [
    "KERPLE",
    "ALiBi",
    "RelativePositionBias",
    "alibi_slopes",
    "relative_position_bucket",
]

P = ParamSpec("P")
R = TypeVar("R")


# -- ALiBi ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _slopes(n_heads: int) -> tuple[float, ...]:
    """Press et al.'s slopes as Python floats: 2 ** (-8 k / n), exponents exact."""
    closest = 1 << (n_heads.bit_length() - 1)  # the largest power of 2 <= n_heads
    # n a power of 2: the geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^-8.
    slopes = [2.0 ** (-8.0 * k / closest) for k in range(1, closest + 1)]
    # Otherwise: every other slope of the sequence for 2 * closest heads, starting with
    # its first; those are the ones that fall between the slopes above.
    extra = n_heads - closest
    slopes += [2.0 ** (-8.0 * (2 * m + 1) / (2 * closest)) for m in range(extra)]
    return tuple(slopes)


def alibi_slopes(n_heads: int) -> Tensor:
    r"""The slope of each head of ALiBi, in float64.

    For a number of heads ``n`` that is a power of two, the slopes form the
    geometric sequence that starts at ``2 ** (-8 / n)`` and has that ratio:
    head ``h`` (from 0) gets ``m_h = 2 ** (-8 (h + 1) / n)``, from ``2 ** (-8 / n)``
    down to ``2 ** -8``. For other ``n``, Press et al. (2022, §3 and their code)
    take the ``P`` slopes of the largest power of two ``P < n``, then the
    first ``n - P`` slopes of every other entry (the 1st, 3rd, 5th, ...) of
    the sequence for ``2P`` heads, which lie between the first ones.

    The exponents are exact binary fractions (``P`` is a power of two), and
    each slope is ``2.0 ** exponent`` in float64.

    Args:
        n_heads: Number of attention heads, H.

    Returns:
        Tensor of shape ``(H,)`` and dtype float64, on the CPU.

    Raises:
        TypeError: ``n_heads`` is not an int.
        ValueError: ``n_heads < 1``.

    Example:
        >>> from posenc import alibi_slopes
        >>> alibi_slopes(8)
        tensor([0.5000, 0.2500, 0.1250, 0.0625, 0.0312, 0.0156, 0.0078, 0.0039],
               dtype=torch.float64)
        >>> alibi_slopes(8).log2().tolist()
        [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0]

        Twelve heads: the eight slopes of eight heads, then the first four
        of the sixteen-head sequence ``2 ** (-k / 2)`` with odd ``k``:

        >>> alibi_slopes(12).log2()
        tensor([-1.0000, -2.0000, -3.0000, -4.0000, -5.0000, -6.0000, -7.0000, -8.0000,
                -0.5000, -1.5000, -2.5000, -3.5000], dtype=torch.float64)
    """
    n_heads = _checks.positive_int("n_heads", n_heads)
    return torch.tensor(_uncached(_slopes)(n_heads), dtype=torch.float64)


def _uncached(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` itself under :func:`torch.compile` (which traces through caches), else cached."""
    if torch.compiler.is_compiling():
        return cast("Callable[P, R]", fn.__wrapped__)  # type: ignore[attr-defined]
    return fn


class ALiBi(RelativeBias):
    r"""Attention with Linear Biases: ``bias[h, i, j] = -m_h · (i - j)``.

    Press et al. (2022) add to the score of query ``i`` for key ``j`` a penalty
    proportional to their distance, with a fixed slope ``m_h`` per head
    (:func:`alibi_slopes`), and use no position embedding at all. Steep heads
    look at the last few tokens, shallow heads far back; nothing is learned,
    and the bias is defined at every distance, which is why models trained on
    short sequences still work on longer ones.

    Two forms:

    - ``symmetric=False`` (causal, the paper's): ``-m_h · (i - j)`` for every
      pair. For keys at or before the query (``j <= i``) it is the paper's
      penalty ``-m_h · |i - j|``. For keys after the query it continues the
      same line (a positive value): a causal model masks those keys, so
      their value never matters, and keeping the line makes each row
      ``m_h · j`` minus a constant ``m_h · i``. Softmax ignores a constant
      added to a row, so this bias gives exactly the attention of Press et
      al.'s code, BLOOM and MPT, which add ``m_h · j`` (key positions only)
      or ``m_h · (j - (L - 1))``; posenc's values are the true ``-m_h · (i - j)``,
      zero on the diagonal.
    - ``symmetric=True``: ``-m_h · |i - j|`` everywhere, for encoders and
      other attention without a causal mask (x-transformers' form).

    Padding: give the positions of the real tokens, e.g.
    ``p = positions_from_mask(mask)`` as both ``positions`` and
    ``key_positions``. That ``p`` is BLOOM's ``(mask.cumsum(-1) - 1) * mask``,
    so every sequence of a left-padded batch gets the bias it would have
    unpadded; the padding keys themselves are removed by the attention mask.

    Casting or moving the module changes nothing: it holds no tensor. The
    bias is computed in float64 from integer positions and rounded once to
    the requested ``dtype``; ask for the dtype of the attention scores.
    :meth:`score_mod` computes the same score inside FlexAttention, in the
    kernel's dtype; for flash-attn, pass ``alibi_slopes=alibi.slopes.float()``
    (see :ref:`guide-bias-kernels`).

    Args:
        n_heads: Number of attention heads, H.
        symmetric: Whether keys after the query are penalised by their
            distance too (``-m_h · |i - j|``); see above.

    Shapes:
        - positions: ``(L_q,)`` or ``(B, L_q)``; key_positions: ``(L_k,)`` or ``(B, L_k)``
        - offset: int, or ``(B,)`` integer tensor
        - output: ``(H, L_q, L_k)``, or ``(B, H, L_q, L_k)`` when a
          per-sequence ``offset``, ``positions`` or ``key_positions`` is given

    Example:
        >>> import torch
        >>> from posenc import ALiBi
        >>> alibi = ALiBi(n_heads=2)
        >>> alibi.slopes
        tensor([0.0625, 0.0039], dtype=torch.float64)
        >>> alibi(2, 4, offset=2)[0]  # two new queries at 2, 3 over four cached keys
        tensor([[-0.1250, -0.0625,  0.0000,  0.0625],
                [-0.1875, -0.1250, -0.0625,  0.0000]])
        >>> ALiBi(2, symmetric=True)(2, 4, offset=2)[0]
        tensor([[-0.1250, -0.0625,  0.0000, -0.0625],
                [-0.1875, -0.1250, -0.0625,  0.0000]])

        A left-padded batch: the real tokens get the bias of the unpadded sequence.

        >>> from posenc import positions_from_mask
        >>> mask = torch.tensor([[False, True, True], [True, True, True]])
        >>> p = positions_from_mask(mask)
        >>> bias = alibi(3, positions=p, key_positions=p)
        >>> bias.shape
        torch.Size([2, 2, 3, 3])
        >>> torch.equal(bias[0, :, 1:, 1:], alibi(2))
        True

        For ``torch.nn.functional.scaled_dot_product_attention``,
        ``causal=True`` returns the bias with ``-inf`` where the key comes after
        the query, the causal mask and the bias in one tensor (see
        :meth:`ALiBi.forward`):

        >>> alibi(2, 4, offset=2, causal=True)[0]
        tensor([[-0.1250, -0.0625,  0.0000,    -inf],
                [-0.1875, -0.1250, -0.0625,  0.0000]])
    """

    def __init__(self, n_heads: int, *, symmetric: bool = False) -> None:
        super().__init__()
        self.n_heads: int = _checks.positive_int("n_heads", n_heads)
        self.symmetric: bool = _checks.flag("symmetric", symmetric)
        self._slopes: tuple[float, ...] = _slopes(self.n_heads)  # Python floats, no tensor
        # Every slope a power of two (H = 1, 2, 4, 8, and the heads of 3, 5, 6, 7): their
        # float32 products with integer distances below 2**24 are exact.
        self._powers_of_two: bool = all(math.frexp(m)[0] == 0.5 for m in self._slopes)

    @property
    def slopes(self) -> Tensor:
        """The slope of each head, float64 ``(H,)``: :func:`alibi_slopes`, a new tensor."""
        return alibi_slopes(self.n_heads)

    def extra_repr(self) -> str:
        """The configuration, shown in the module's repr."""
        return f"n_heads={self.n_heads}" + (", symmetric=True" if self.symmetric else "")

    _what = "an ALiBi bias"
    relative_only = True

    def parameters_in(self, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, ...]:
        """The slopes, ``(H,)``, rounded once to ``dtype``."""
        slopes = torch.tensor(self._slopes, dtype=torch.float64, device=device)
        return (round_once(slopes, dtype),)

    def _exact_in_float32(self, q: Tensor, k: Tensor) -> bool:
        """Powers-of-two slopes and every ``|key - query| < 2**24``, read for free."""
        if not (self._powers_of_two and _runtime.readable(q) and _runtime.readable(k)):
            return False
        if not q.numel() or not k.numel():
            return False
        q_lo, q_hi = (int(v) for v in torch.aminmax(q))
        k_lo, k_hi = (int(v) for v in torch.aminmax(k))
        return max(abs(k_hi - q_lo), abs(q_hi - k_lo)) < 2**24

    def score(self, h: Tensor, q: Tensor, k: Tensor, *params: Tensor) -> Tensor:
        """``-m_h · (q - k)``, or ``-m_h · |q - k|`` when symmetric."""
        (slopes,) = params
        distance = k - q
        if self.symmetric:
            distance = -distance.abs()
        return slopes[h] * distance.to(slopes.dtype)

    def bloom(
        self,
        attention_mask: Tensor,
        *,
        query_length: int = 1,
        dtype: torch.dtype | None = None,
    ) -> Tensor:
        """The bias in BLOOM's form ``(B·H, L_q, L_k)``, from an attention mask.

        BLOOM's ``build_alibi_tensor(attention_mask, num_heads, dtype)`` returns
        ``(B·H, 1, L_k)``, ``m_h`` times each key's position (its count of real
        tokens before it), which ``baddbmm`` adds to the scores of every query.
        This gives the true ``-m_h · (i - j)`` for the last ``query_length``
        tokens of the mask as queries: with the default ``query_length=1``, the
        token being decoded with a cache, BLOOM's shape exactly. Softmax ignores
        a constant added to a row, so any query attends as it does with BLOOM's
        own tensor; but the values are small near the query, where bf16 or fp16
        rounds them finely, instead of ``m_h · j``, which grows with the length.

        Args:
            attention_mask: ``(B, L_k)``, True or 1 for real tokens, the cache
                included (BLOOM's ``attention_mask``).
            query_length: Number of queries L_q: the last tokens of the mask.
            dtype: Floating dtype of the result (default: torch's default dtype).

        Returns:
            ``(B·H, L_q, L_k)`` on the mask's device; row ``b·H + h`` is
            sequence ``b``, head ``h``, as in BLOOM.

        Raises:
            TypeError: ``attention_mask`` is not a bool or integer tensor, or
                ``query_length`` is not an int.
            ValueError: ``attention_mask`` is not 2-D, or ``query_length``
                exceeds its length.

        Shapes:
            - attention_mask: ``(B, L_k)``
            - output: ``(B·H, L_q, L_k)``

        Example:
            >>> import torch
            >>> from posenc import ALiBi
            >>> alibi = ALiBi(2)
            >>> mask = torch.tensor([[0, 1, 1, 1]])          # one pad token on the left
            >>> alibi.bloom(mask)                            # the last token decodes
            tensor([[[-0.1250, -0.1250, -0.0625,  0.0000]],
            <BLANKLINE>
                    [[-0.0078, -0.0078, -0.0039,  0.0000]]])
        """
        keys = positions_from_mask(attention_mask)
        if keys.dim() != 2:
            raise ValueError(
                f"attention_mask must have shape (B, L_k), got shape {tuple(keys.shape)}"
            )
        batch, length = keys.shape
        n = _checks.nonnegative_int("query_length", query_length)
        if n > length:
            raise ValueError(
                f"query_length={n} exceeds the mask's length L_k={length}: the queries are "
                "the last tokens of the mask"
            )
        bias = self(
            n, length, positions=keys[:, length - n :], key_positions=keys, batch=batch,
            dtype=dtype, device=keys.device,
        )  # fmt: skip
        out: Tensor = bias.reshape(batch * self.n_heads, n, length)
        return out


# -- T5 ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _bucket_starts(per_direction: int, max_distance: int) -> tuple[int, ...]:
    """The smallest distance of each bucket 1 .. per_direction - 1, exactly.

    Bucket ``b < max_exact`` holds the distance ``b``. Above, Raffel et al.'s
    formula puts ``n`` in bucket ``max_exact + floor(m · log(n / max_exact) /
    log(max_distance / max_exact))`` with ``m = per_direction - max_exact``, so
    bucket ``max_exact + k`` starts at the smallest integer ``n`` with
    ``(n / max_exact) ** m >= (max_distance / max_exact) ** k``. That inequality is
    decided here in integers, so the boundaries do not depend on a
    floating-point logarithm.
    """
    max_exact = per_direction // 2
    m = per_direction - max_exact
    starts = list(range(1, max_exact + 1))
    for k in range(1, m):
        target = max_distance**k * max_exact**m  # n ** m * max_exact ** k >= target

        def fits(n: int, k: int = k, target: int = target) -> bool:
            return bool(n**m * max_exact**k >= target)

        n = max(max_exact, int(max_exact * (max_distance / max_exact) ** (k / m)) - 1)
        while not fits(n):
            n += 1
        while n > max_exact and fits(n - 1):
            n -= 1
        starts.append(n)
    return tuple(starts)


def relative_position_bucket(
    relative_position: Tensor,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Tensor:
    r"""T5's bucket of each relative position ``key position - query position``.

    Raffel et al. (2020, §2.1) give each distance a bucket: one bucket per
    distance for short distances, then buckets that grow logarithmically
    wider up to ``max_distance``, beyond which every distance shares the last
    bucket. With ``B`` buckets per direction (``num_buckets / 2`` when
    ``bidirectional``, else ``num_buckets``) and ``E = B // 2``, a distance
    ``n >= 0`` goes to

    .. math::

        \text{bucket}(n) = \begin{cases}
        n & n < E \\
        \min\Big(B - 1,\; E + \Big\lfloor (B - E)
            \dfrac{\ln(n / E)}{\ln(\text{max\_distance} / E)} \Big\rfloor\Big) & n \ge E.
        \end{cases}

    Bidirectional: ``n = |r|``, and keys after the query (``r > 0``) use the
    buckets ``B .. 2B - 1``. Unidirectional (a decoder): ``n = max(-r, 0)``,
    so every key after the query shares bucket 0 with the query itself.

    This is the bucketing of Mesh TensorFlow's ``_relative_position_bucket``,
    which Hugging Face's ``T5Attention`` copies, with the floor decided
    exactly (in integers) rather than through a float32 logarithm.

    Args:
        relative_position: Integer tensor of any shape and integer dtype,
            ``key position - query position``.
        bidirectional: Whether keys after the query get buckets of their own
            (encoders) or share bucket 0 (decoders).
        num_buckets: Number of buckets, in both directions together.
        max_distance: Distance from which all distances share the last bucket.

    Returns:
        ``torch.long`` tensor of the shape of ``relative_position``, values in
        ``[0, num_buckets)``.

    Raises:
        TypeError: ``relative_position`` is not an integer tensor, or an
            argument has the wrong type.
        ValueError: ``num_buckets`` is below 4 (bidirectional) or 2, or
            ``max_distance`` is not above ``E``.

    Example:
        >>> import torch
        >>> from posenc import relative_position_bucket
        >>> r = torch.tensor([-200, -128, -64, -20, -8, -7, -1, 0, 1, 7, 8, 20, 128])
        >>> relative_position_bucket(r)
        tensor([15, 15, 14, 10,  8,  7,  1,  0, 17, 23, 24, 26, 31])
        >>> relative_position_bucket(r, bidirectional=False)
        tensor([31, 31, 26, 17,  8,  7,  1,  0,  0,  0,  0,  0,  0])
    """
    relative = _checks.integer_tensor("relative_position", relative_position, "an integer tensor")
    check_domain("relative_position", relative, relative=True)
    if relative.dtype != torch.int64:
        relative = relative.to(torch.int64)
    bidirectional = _checks.flag("bidirectional", bidirectional)
    num_buckets, max_distance = _checks.bucket_config(bidirectional, num_buckets, max_distance)
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    starts = _uncached(_bucket_starts)(per_direction, max_distance)
    return _buckets(relative, bidirectional, per_direction, starts)


def _buckets(
    relative: Tensor, bidirectional: bool, per_direction: int, starts: tuple[int, ...]
) -> Tensor:
    """The buckets of int64 relative positions, given the first distance of each bucket."""
    starts_t = torch.tensor(starts, dtype=torch.int64, device=relative.device)
    if bidirectional:
        buckets = torch.bucketize(relative.abs(), starts_t, right=True)
        return buckets + (relative > 0).to(torch.int64) * per_direction
    return torch.bucketize((-relative).clamp(min=0), starts_t, right=True)


class RelativePositionBias(RelativeBias):
    r"""T5's relative position bias: a learned number per bucket of distance and head.

    Raffel et al. (2020) replace position embeddings with a scalar added to
    each attention score, looked up in a ``(num_buckets, n_heads)`` table by
    the bucket of ``key position - query position``
    (:func:`relative_position_bucket`). T5 computes it in the first layer and
    shares it with the others.

    Checkpoints: the table is the child :attr:`relative_attention_bias`, an
    :class:`torch.nn.Embedding`, so its key is Hugging Face T5's own
    ``relative_attention_bias.weight`` and loads as it is, e.g. from
    ``encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight``
    (``bidirectional=True``) or the decoder's ``decoder.block.0.layer.0...``
    (``bidirectional=False``). Like every learned weight it follows
    ``.to()`` and ``.half()``: casting converts it.

    The dtype a loaded table keeps is PyTorch's rule for every parameter:
    :meth:`~torch.nn.Module.load_state_dict` copies the checkpoint's values
    into the table, which keeps the module's dtype (a float64 checkpoint
    loaded into a float32 module is rounded to float32);
    ``load_state_dict(..., assign=True)`` takes the checkpoint's tensor, and
    its dtype. The bias comes in the table's dtype unless ``dtype=`` asks for
    another; for a model in float64 or bf16, cast the module with the model
    (``bias.to(model.dtype)``) before loading, so that the values are not
    rounded to float32 on the way.

    T5 does not divide its scores by ``√d_k`` (the scale is folded into
    its initialisation): :func:`~posenc.attention` does, so a T5 checkpoint's
    attention is reproduced by attention without that scale, with this bias.

    Args:
        n_heads: Number of attention heads, H.
        bidirectional: Encoder (True) or decoder (False) bucketing.
        num_buckets: Number of buckets (32 in T5).
        max_distance: Distance from which all distances share a bucket (128 in T5).

    Attributes:
        relative_attention_bias: The table, :class:`torch.nn.Embedding`
            ``(num_buckets, n_heads)``, initialised by PyTorch's default N(0, 1).

    Shapes:
        - positions: ``(L_q,)`` or ``(B, L_q)``; key_positions: ``(L_k,)`` or ``(B, L_k)``
        - offset: int, or ``(B,)`` integer tensor
        - output: ``(H, L_q, L_k)``, or ``(B, H, L_q, L_k)`` when a
          per-sequence ``offset``, ``positions`` or ``key_positions`` is given

    Example:
        >>> import torch
        >>> from posenc import RelativePositionBias
        >>> t5 = RelativePositionBias(n_heads=8)
        >>> t5
        RelativePositionBias(
          n_heads=8, bidirectional=True, num_buckets=32, max_distance=128
          (relative_attention_bias): Embedding(32, 8)
        )
        >>> t5(5).shape
        torch.Size([8, 5, 5])
        >>> w = t5.relative_attention_bias.weight
        >>> torch.equal(t5(5)[:, 0, 3], w[19])  # key 3 after the query: bucket 16 + 3
        True

        Decoding with a cache: the last row of the whole sequence's bias.

        >>> dec = RelativePositionBias(8, bidirectional=False)
        >>> torch.equal(dec(1, 6, offset=5), dec(6)[:, 5:])
        True

        ``causal=True`` gives SDPA its mask (see :meth:`RelativePositionBias.forward`):
        the bias with ``-inf`` where the key comes after the query.

        >>> from torch.nn.functional import scaled_dot_product_attention as sdpa
        >>> from posenc import attention, subsequent_mask
        >>> q, k, v = torch.randn(3, 1, 8, 4, 16).unbind()  # (B, H, L, d_k) each
        >>> with torch.no_grad():
        ...     out = sdpa(q, k, v, attn_mask=dec(4, causal=True))
        ...     want, _ = attention(q, k, v, mask=subsequent_mask(4), bias=dec(4))
        >>> torch.allclose(out, want, atol=1e-6)
        True
    """

    relative_only = True
    looked_up = True

    def __init__(
        self,
        n_heads: int,
        *,
        bidirectional: bool = True,
        num_buckets: int = 32,
        max_distance: int = 128,
    ) -> None:
        super().__init__()
        self.n_heads: int = _checks.positive_int("n_heads", n_heads)
        self.bidirectional: bool = _checks.flag("bidirectional", bidirectional)
        buckets, distance = _checks.bucket_config(bidirectional, num_buckets, max_distance)
        self.num_buckets: int = buckets
        self.max_distance: int = distance
        _runtime.allocation(
            (buckets, self.n_heads),
            torch.get_default_dtype(),  # the dtype nn.Embedding gives its weight
            _runtime.default_device(),
            lambda: f"RelativePositionBias(n_heads={n_heads}, num_buckets={buckets})'s table",
            "choose fewer heads",
        )
        self.relative_attention_bias: nn.Embedding = nn.Embedding(self.num_buckets, self.n_heads)
        self._per_direction: int = buckets // 2 if self.bidirectional else buckets
        self._starts: tuple[int, ...] = _bucket_starts(self._per_direction, distance)

    def extra_repr(self) -> str:
        """The configuration, shown in the module's repr."""
        return (
            f"n_heads={self.n_heads}, bidirectional={self.bidirectional}, "
            f"num_buckets={self.num_buckets}, max_distance={self.max_distance}"
        )

    def parameters_in(self, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, ...]:
        """The bucket of each distance ``-max_distance .. max_distance``, and the table.

        Every distance from ``max_distance`` on shares the last bucket of its
        direction, so the integer table ``(2·max_distance + 1,)`` holds every bucket
        exactly; the values are the table's (read through its module when a hook or
        a replaced ``forward`` asks for that), rounded once to ``dtype``.
        """
        m = self.max_distance
        distances = torch.arange(-m, m + 1, device=device)
        lut = _buckets(distances, self.bidirectional, self._per_direction, self._starts)
        return lut, self._table(dtype).to(device)

    def score(self, h: Tensor, q: Tensor, k: Tensor, *params: Tensor) -> Tensor:
        """The table's value at the bucket of ``k - q``, for head ``h``."""
        lut, table = params
        m = self.max_distance
        return table[lut[(k - q).clamp(-m, m) + m], h]

    def _table(self, dtype: torch.dtype) -> Tensor:
        """The table ``(num_buckets, H)`` in ``dtype``, rounded once, read as its module reads."""
        module = self.relative_attention_bias
        if self._plain_table():
            weight = module.weight
        else:  # a hook, a subclass or a replaced forward: the module reads its rows
            weight = module(torch.arange(self.num_buckets, device=module.weight.device))
        return _rounded(weight, dtype)

    def index(self, q: Tensor, k: Tensor) -> Tensor:
        """The bucket of every pair, ``(..., L_q, L_k)``, from the int64 positions."""
        return _buckets(
            relative_positions(q, k), self.bidirectional, self._per_direction, self._starts
        )

    def lookup(self, index: Tensor, dtype: torch.dtype) -> Tensor:
        """The table's rows at the buckets ``index``, ``(..., H)``, rounded once to ``dtype``.

        With a hook, a subclass or a replaced ``forward``, through the module.
        """
        table = self.relative_attention_bias
        if self._plain_table():
            return functional.embedding(index, _rounded(table.weight, dtype))
        return _rounded(table(index), dtype)

    def unreached_buckets(self, length: int, *, causal: bool = False) -> list[int]:
        """The buckets that no query-key pair of a sequence of ``length`` tokens uses.

        Training on sequences of ``length`` tokens updates only the rows of the
        table that their pairs look up; the other rows keep their initial values
        and first enter the bias on longer sequences, untrained. With T5's
        defaults (``num_buckets=32``, ``max_distance=128``) a decoder trained on
        64 tokens never reaches buckets 27 to 31, which hold the distances 67 and
        beyond (bucket 26, which it reaches, holds 59 to 66). Train with
        ``max_distance`` at most ``length`` (or evaluate within it) to leave none.

        This is a question for the training setup, not a warning at run time:
        a short call (a decoding step, a short batch) does not mean the model
        was trained short.

        Args:
            length: Number of tokens of the training sequences, L (positions
                ``0 .. L - 1``, every query with every key).
            causal: Count only the keys at or before the query, as a causal mask
                (``causal=True``, :func:`~posenc.subsequent_mask`) leaves them.

        Returns:
            The bucket ids in ``[0, num_buckets)`` that no pair reaches, ascending.

        Raises:
            TypeError: ``length`` is not an int, or ``causal`` is not a bool.
            ValueError: ``length < 1``.

        Example:
            >>> from posenc import RelativePositionBias
            >>> decoder = RelativePositionBias(8, bidirectional=False)
            >>> decoder.unreached_buckets(64, causal=True)
            [27, 28, 29, 30, 31]
            >>> decoder.unreached_buckets(128, causal=True)
            []

            Bidirectional, bucket ``num_buckets / 2`` is reached at no length: it
            would hold the keys after the query at distance 0 (Mesh TensorFlow's
            bucketing, which Hugging Face's T5 copies, has the same unused row).

            >>> RelativePositionBias(8, max_distance=64).unreached_buckets(64)
            [16]
        """
        length = _checks.positive_int("length", length)
        causal = _checks.flag("causal", causal)
        # Every distance from max_distance on shares the last bucket of its direction.
        far = min(length - 1, self.max_distance)
        relative = torch.arange(-far, 1 if causal else far + 1, dtype=torch.int64)
        used = _buckets(relative, self.bidirectional, self._per_direction, self._starts)
        reached = set(used.tolist())
        return [b for b in range(self.num_buckets) if b not in reached]

    def _plain_table(self) -> bool:
        """Whether the table may be read without calling its module.

        Not when the module is a subclass or renormalises its rows (``max_norm``), nor
        where :func:`~posenc._runtime.fast_path` says no: a hook registered, its
        ``forward`` replaced on the instance (accelerate's ``add_hook_to_module``), a
        transform, the compiler, a tensor subclass.
        """
        table = self.relative_attention_bias
        return (
            type(table) is nn.Embedding
            and table.max_norm is None
            and _runtime.fast_path(table.weight, modules=(table,))
        )


# -- KERPLE -----------------------------------------------------------------------------

#: The least value of KERPLE's r1 and r2 that the bias uses (Chi et al.'s code clamps to it).
KERPLE_EPS = 1e-2


class KERPLE(RelativeBias):
    r"""KERPLE's logarithmic bias: ``bias[h, i, j] = -r1_h · log(1 + r2_h · |i - j|)``.

    Chi et al. (2022, *KERPLE: Kernelized Relative Positional Embedding for
    Length Extrapolation*, NeurIPS) derive relative biases from conditionally
    positive definite kernels of the distance; the logarithmic one, their best
    at extrapolation, has two learned numbers per head, both positive: ``r1``
    scales the penalty, ``r2`` sets where it turns from linear (``r1 · r2 · n``
    for small ``n``) to logarithmic. ALiBi is its linear cousin; like ALiBi it
    is defined at every distance, learned on short sequences and used on longer
    ones.

    Parameters: :attr:`r1` and :attr:`r2`, ``(H,)`` each, initialised as the
    authors' code does (chijames/KERPLE, the ``kerple_log`` embedding of their
    GPT-NeoX fork): ``r1 ~ U(0, 2)``, ``r2 ~ U(0, 1)``. The paper requires
    ``r1, r2 > 0``; their code clamps both to at least ``1e-2``
    (``KERPLE_EPS``, 1e-2) in place at every forward. posenc's forward changes no
    state: it uses ``max(r, 1e-2)`` and passes the gradient through the clamp
    unchanged, so the bias and its gradients are those of the authors' code
    while the stored parameters stay as the optimiser left them.

    The bias is computed in float64 from the integer distances and the
    parameters, and rounded once to the requested ``dtype`` (default: the
    parameters'). The formula is symmetric in ``i - j``; a decoder masks the
    keys after the query (``causal=True``).

    Args:
        n_heads: Number of attention heads, H.

    Attributes:
        r1: Scale of each head's penalty, ``(H,)``.
        r2: Rate of each head's penalty, ``(H,)``.

    Shapes:
        - positions: ``(L_q,)`` or ``(B, L_q)``; key_positions: ``(L_k,)`` or ``(B, L_k)``
        - offset: int, or ``(B,)`` integer tensor
        - output: ``(H, L_q, L_k)``, or ``(B, H, L_q, L_k)`` when a
          per-sequence ``offset``, ``positions`` or ``key_positions`` is given

    Example:
        >>> import torch
        >>> from posenc import KERPLE
        >>> kerple = KERPLE(n_heads=2)
        >>> with torch.no_grad():
        ...     _ = kerple.r1.copy_(torch.tensor([1.0, 2.0]))
        ...     _ = kerple.r2.copy_(torch.tensor([1.0, 0.5]))
        >>> kerple(4, causal=True).detach()[0]  # head 0: -log(1 + |i - j|)
        tensor([[ 0.0000,    -inf,    -inf,    -inf],
                [-0.6931,  0.0000,    -inf,    -inf],
                [-1.0986, -0.6931,  0.0000,    -inf],
                [-1.3863, -1.0986, -0.6931,  0.0000]])
        >>> kerple(1, 4, offset=3).detach()[1]  # head 1: -2 log(1 + |3 - j| / 2)
        tensor([[-1.8326, -1.3863, -0.8109,  0.0000]])
    """

    _what = "a KERPLE bias"
    relative_only = True

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.n_heads: int = _checks.positive_int("n_heads", n_heads)
        _runtime.allocation(
            (2, self.n_heads),
            torch.get_default_dtype(),
            _runtime.default_device(),
            lambda: f"KERPLE(n_heads={n_heads})'s parameters",
            "choose fewer heads",
        )
        self.r1: nn.Parameter = nn.Parameter(2.0 * torch.rand(self.n_heads))
        self.r2: nn.Parameter = nn.Parameter(torch.rand(self.n_heads))

    def extra_repr(self) -> str:
        """The configuration, shown in the module's repr."""
        return f"n_heads={self.n_heads}"

    def parameters_in(self, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, ...]:
        """``max(r1, 1e-2)`` and ``max(r2, 1e-2)``, rounded once to ``dtype``."""
        return tuple(
            round_once(_at_least(r.to(device, torch.float64), KERPLE_EPS), dtype)
            for r in (self.r1, self.r2)
        )

    def score(self, h: Tensor, q: Tensor, k: Tensor, *params: Tensor) -> Tensor:
        """``-r1_h · log(1 + r2_h · |k - q|)`` (``0 - x``: +0 on the diagonal, as ALiBi's)."""
        r1, r2 = params
        return 0.0 - r1[h] * torch.log1p(r2[h] * (k - q).abs().to(r1.dtype))


def _rounded(table: Tensor, dtype: torch.dtype) -> Tensor:
    """``table`` in ``dtype``, rounded once (a float64 table through :func:`round_once`)."""
    if table.dtype == dtype:
        return table
    return round_once(table, dtype) if table.dtype == torch.float64 else table.to(dtype)


def _at_least(r: Tensor, least: float) -> Tensor:
    """``max(r, least)``, with the gradient of ``r`` itself (as if clamped in place)."""
    return r.detach().clamp(min=least) + (r - r.detach())
