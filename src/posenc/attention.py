"""The attention blocks that the input layer feeds, as in the Annotated Transformer.

They are here so that a reader can check the claim positional encodings exist
for: attention by itself does not know the order of its inputs. Permute the
tokens, and self-attention returns the same outputs, permuted the same way
(it is *permutation equivariant*):

>>> import torch
>>> from posenc import PositionalEncoding, attention
>>> _ = torch.manual_seed(0)
>>> x = torch.randn(5, 16)                 # five tokens, unbatched
>>> perm = torch.tensor([3, 0, 4, 1, 2])
>>> out, _ = attention(x, x, x)
>>> out_perm, _ = attention(x[perm], x[perm], x[perm])
>>> torch.allclose(out_perm, out[perm], atol=1e-6)
True

Add the positional encoding after permuting, as a model does, and the outputs
depend on where each token stands:

>>> pe = PositionalEncoding(16)
>>> y, y_perm = pe(x), pe(x[perm])
>>> out, _ = attention(y, y, y)
>>> out_perm, _ = attention(y_perm, y_perm, y_perm)
>>> torch.allclose(out_perm, out[perm], atol=1e-6)
False
"""

from __future__ import annotations

import copy
import math
from typing import cast

import torch
from torch import Tensor, nn

from . import _checks, _runtime

__all__ = [
    "MultiHeadedAttention",
    "PositionwiseFeedForward",
    "attention",
    "clones",
    "subsequent_mask",
]


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout: nn.Module | None = None,
    *,
    bias: Tensor | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Scaled dot-product attention, ``softmax(Q Kᵀ / √d_k + bias) V``.

    Args:
        query: Queries ``(*, L_q, d_k)``.
        key: Keys ``(*, L_k, d_k)``.
        value: Values ``(*, L_k, d_v)``.
        mask: Optional bool or integer tensor broadcastable to ``(*, L_q, L_k)``;
            where it is 0 or False, the query may not attend to the key (the
            Annotated Transformer's ``mask == 0``). Floating masks are refused,
            since they read two ways: convert a 0/1 mask with ``mask.bool()``;
            give an additive mask (0 keep, ``-inf`` drop, as Hugging Face builds
            them) as ``bias``, or as ``mask=additive == 0``.
        dropout: Optional module (or callable) applied to the attention
            weights, such as ``nn.Dropout(0.1)``; not a probability.
        bias: Optional floating tensor broadcastable to ``(*, L_q, L_k)``,
            added to the scaled scores before the mask and the softmax: a
            relative position bias such as :class:`~posenc.ALiBi` or
            :class:`~posenc.RelativePositionBias` gives, ``(h, L_q, L_k)`` or
            ``(B, h, L_q, L_k)``. A bias of a wider dtype than the query (a
            float32 bias with bfloat16 queries) makes the sum and the softmax
            run in that dtype; the weights are rounded back to the query's.
        scale: The factor of the scores, ``Q Kᵀ · scale``, in place of
            ``1 / √d_k`` (None), as ``scale=`` of
            :func:`torch.nn.functional.scaled_dot_product_attention`. T5 folds
            the scale into its initialisation: its checkpoints need
            ``scale=1.0``.

    Returns:
        ``(output, weights)``: output ``(*, L_q, d_v)`` and the attention
        weights ``(*, L_q, L_k)``, each row summing to 1, in the query's dtype.

    Raises:
        TypeError: an input is not a floating tensor, or they differ in dtype;
            ``mask`` is not a bool or integer tensor; ``dropout`` is not
            callable (a float such as 0.1: give ``nn.Dropout(0.1)``);
            ``scale`` is not a number.
        ValueError: the shapes do not fit together (the message names them),
            or ``mask`` or ``bias`` is on another device than the query;
            ``scale`` is not finite.

    Shapes:
        ``*`` is any batch shape, e.g. ``(B, h)`` for B sequences and h heads;
        the batch shapes of the inputs broadcast.

    Example:
        >>> import torch
        >>> from posenc import attention, subsequent_mask
        >>> q = torch.zeros(1, 2, 4)
        >>> k = v = torch.eye(3, 4).unsqueeze(0)
        >>> out, w = attention(q, k, v, mask=subsequent_mask(3)[:, :2])
        >>> w  # equal scores: uniform over the keys each query may see
        tensor([[[1.0000, 0.0000, 0.0000],
                 [0.5000, 0.5000, 0.0000]]])

        Unscaled scores, as T5's checkpoints need, agree with SDPA's ``scale=``:

        >>> from torch.nn.functional import scaled_dot_product_attention as sdpa
        >>> q, k, v = torch.eye(3, 4).expand(3, 2, 3, 4).unbind()
        >>> out, _ = attention(q, k, v, scale=1.0)
        >>> torch.allclose(out, sdpa(q, k, v, scale=1.0))
        True
    """
    query, key, value = _checks.attention_inputs(query, key, value, mask, bias)
    _checks.callable_dropout(dropout)
    if scale is None:
        d_k = query.shape[-1]
        scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    else:
        scores = query @ key.transpose(-2, -1) * _checks.real_number("scale", scale)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        # The most negative finite value of the dtype, not -1e9: fp16 cannot hold -1e9.
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1).to(query.dtype)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights


def subsequent_mask(size: int, *, device: torch.device | str | None = None) -> Tensor:
    """Causal mask: position ``i`` may attend to positions ``0 .. i`` only.

    Args:
        size: Sequence length, L.
        device: Device of the mask (default: torch's default device, the CPU
            unless ``torch.set_default_device`` says otherwise). Built there,
            not copied there: no host-to-device transfer.

    Returns:
        Bool tensor of shape ``(1, size, size)``, True on and below the diagonal.

    Raises:
        TypeError: ``size`` is not an int, or ``device`` is not a
            :class:`torch.device`, a str or None.
        ValueError: ``size`` is not positive, or ``device`` names no device.

    Shapes:
        - output: ``(1, L, L)``, broadcastable to ``(B, L, L)`` and, after
          ``unsqueeze(1)``, to ``(B, h, L, L)``.

    Example:
        >>> import torch
        >>> from posenc import subsequent_mask
        >>> subsequent_mask(3)
        tensor([[[ True, False, False],
                 [ True,  True, False],
                 [ True,  True,  True]]])
        >>> subsequent_mask(2, device="meta").device
        device(type='meta')
    """
    size = _checks.positive_int("size", size)
    where = _checks.device("device", device)
    return torch.ones(1, size, size, dtype=torch.bool, device=where).tril()


def clones(module: nn.Module, n: int) -> nn.ModuleList:
    """``n`` independent deep copies of ``module``, in an :class:`torch.nn.ModuleList`.

    Args:
        module: Module to copy; the copies share no parameters.
        n: Number of copies.

    Returns:
        A ModuleList of length ``n``.

    Example:
        >>> import torch
        >>> from posenc import clones
        >>> layers = clones(torch.nn.Linear(2, 2), 3)
        >>> len(layers), layers[0].weight is layers[1].weight
        (3, False)
    """
    n = _checks.positive_int("n", n)
    return nn.ModuleList(copy.deepcopy(module) for _ in range(n))


class MultiHeadedAttention(nn.Module):
    """Multi-head attention: h attentions over d_model/h-wide projections, concatenated.

    The four projections are initialised independently (the Annotated
    Transformer builds them with ``clones``, four copies of one initialised
    layer, and re-initialises every parameter in ``make_model``; a module used
    alone needs its own draws). :meth:`reset_parameters` draws them again in
    the order construction does, so a module built on the meta device, then
    ``to_empty`` and ``reset_parameters``, equals one built directly under the
    same seed.

    Args:
        h: Number of heads; must divide ``d_model``.
        d_model: Width of the inputs and output, D.
        dropout: Dropout on the attention weights, in ``[0, 1)``.

    Attributes:
        linears: Four :class:`torch.nn.Linear` ``(D, D)``: query, key, value, output.
        attn: Attention weights of the last forward, ``(B, h, L_q, L_k)``,
            detached: it holds no autograd graph (the module can be copied, and
            backward frees the graph, after a training forward).

    Shapes:
        - query: ``(B, L_q, D)``; key, value: ``(B, L_k, D)``
        - mask: broadcastable to ``(B, L_q, L_k)``
        - bias: broadcastable to ``(B, h, L_q, L_k)``, e.g. ``(h, L_q, L_k)``
        - output: ``(B, L_q, D)``

    Example:
        >>> import torch
        >>> from posenc import MultiHeadedAttention, subsequent_mask
        >>> mha = MultiHeadedAttention(h=8, d_model=512)
        >>> x = torch.randn(2, 10, 512)
        >>> mha(x, x, x, mask=subsequent_mask(10)).shape, mha.attn.shape
        (torch.Size([2, 10, 512]), torch.Size([2, 8, 10, 10]))
        >>> MultiHeadedAttention(h=3, d_model=512)
        Traceback (most recent call last):
        ...
        ValueError: h=3 must divide d_model=512
    """

    attn: Tensor | None

    def __init__(self, h: int, d_model: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.h: int = _checks.positive_int("h", h)
        self.d_model: int = _checks.positive_int("d_model", d_model)
        if d_model % h:
            raise ValueError(f"h={h} must divide d_model={d_model}")
        self.d_k: int = d_model // h
        dropout = _checks.dropout(dropout)
        _runtime.allocation(
            (4, d_model, d_model + 1),  # four weights and their biases
            torch.get_default_dtype(),
            _runtime.default_device(),
            lambda: f"MultiHeadedAttention(h={h}, d_model={d_model})'s four projections",
            "choose a smaller d_model",
        )
        # Four layers, each drawn on its own: clones(nn.Linear(...), 4) would copy one.
        self.linears: nn.ModuleList = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(4))
        self.dropout: nn.Dropout = nn.Dropout(p=dropout)
        self.attn = None

    def reset_parameters(self) -> None:
        """Draw the four projections again, in the order of construction (query first)."""
        for linear in self.linears:
            cast("nn.Linear", linear).reset_parameters()

    def extra_repr(self) -> str:
        """The configuration, shown in the module's repr."""
        return f"h={self.h}, d_model={self.d_model}"

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        *,
        bias: Tensor | None = None,
    ) -> Tensor:
        """Attend from ``query`` to ``key``/``value`` with all heads at once.

        Args:
            query: ``(B, L_q, D)``.
            key: ``(B, L_k, D)``.
            value: ``(B, L_k, D)``.
            mask: Optional mask broadcastable to ``(B, L_q, L_k)``, shared by all heads.
            bias: Optional additive bias broadcastable to ``(B, h, L_q, L_k)``, one
                per head (:class:`~posenc.ALiBi`, :class:`~posenc.RelativePositionBias`);
                ``(h, L_q, L_k)`` for unbatched inputs.

        Returns:
            Tensor of shape ``(B, L_q, D)``.

        Raises:
            TypeError: an input is not a floating tensor, or its dtype is not the
                weights' (outside :class:`torch.autocast`); ``mask`` is not a bool
                or integer tensor.
            ValueError: a shape does not fit (the message names the shapes), or
                an input, ``mask`` or ``bias`` is on another device.
        """
        query, key, value = _checks.heads_inputs(query, key, value, mask, self.d_model)
        names = ("query", "key", "value")
        for name, x, linear in zip(names, (query, key, value), self.linears[:3], strict=True):
            weight = cast("nn.Linear", linear).weight
            _checks.matches_weight(name, x, weight, "MultiHeadedAttention")
        if bias is not None:
            _checks.heads_bias(bias, query, key, self.h)
        if mask is not None and query.dim() == 3:
            mask = mask.unsqueeze(-3)  # (B, 1, L_q, L_k): one mask for every head
        batch = query.shape[:-2]

        def split_heads(lin: nn.Module, x: Tensor) -> Tensor:
            heads: Tensor = lin(x)
            return heads.view(*heads.shape[:-1], self.h, self.d_k).transpose(-3, -2)

        q, k, v = (
            split_heads(lin, x)
            for lin, x in zip(self.linears[:3], (query, key, value), strict=True)
        )
        x, attn = attention(q, k, v, mask=mask, dropout=self.dropout, bias=bias)
        self.attn = attn.detach()  # for pictures: without the graph, which backward frees
        x = x.transpose(-3, -2).reshape(*batch, -1, self.d_model)
        out: Tensor = self.linears[3](x)
        return out


class PositionwiseFeedForward(nn.Module):
    """The feed-forward block applied to every position: ``W₂ dropout(relu(W₁ x))``.

    Args:
        d_model: Width of the inputs and output, D.
        d_ff: Width of the hidden layer (2048 in the paper).
        dropout: Dropout on the hidden layer, in ``[0, 1)``.

    Shapes:
        - x: ``(*, D)``
        - output: ``(*, D)``

    Example:
        >>> import torch
        >>> from posenc import PositionwiseFeedForward
        >>> ff = PositionwiseFeedForward(d_model=512, d_ff=2048)
        >>> ff(torch.randn(2, 10, 512)).shape
        torch.Size([2, 10, 512])
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.d_model: int = _checks.positive_int("d_model", d_model)
        d_ff = _checks.positive_int("d_ff", d_ff)
        dropout = _checks.dropout(dropout)
        _runtime.allocation(
            (2, d_ff, d_model + 1),  # the two weights and (about) their biases
            torch.get_default_dtype(),
            _runtime.default_device(),
            lambda: f"PositionwiseFeedForward(d_model={d_model}, d_ff={d_ff})'s two layers",
            "choose a smaller d_model or d_ff",
        )
        self.w_1: nn.Linear = nn.Linear(self.d_model, d_ff)
        self.w_2: nn.Linear = nn.Linear(d_ff, d_model)
        self.dropout: nn.Dropout = nn.Dropout(dropout)

    def reset_parameters(self) -> None:
        """Draw both layers again, in the order of construction (``w_1``, then ``w_2``)."""
        self.w_1.reset_parameters()
        self.w_2.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        """Return ``w_2(dropout(relu(w_1(x))))``.

        Args:
            x: ``(*, D)``.

        Returns:
            Tensor of the shape of ``x``.

        Raises:
            TypeError: ``x`` is not a floating tensor, or its dtype is not the
                weights' (outside :class:`torch.autocast`).
            ValueError: the last dimension of ``x`` is not ``d_model``, or ``x``
                is on another device than the weights.
        """
        _checks.last_dim(_checks.floating_tensor("input", x), self.d_model, "input")
        _checks.matches_weight("input", x, self.w_1.weight, "PositionwiseFeedForward")
        out: Tensor = self.w_2(self.dropout(self.w_1(x).relu()))
        return out
