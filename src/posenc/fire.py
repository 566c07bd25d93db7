r"""FIRE: a learned function of the normalised log distance (Li et al., 2023)."""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from . import _checks, _runtime
from ._relative import RelativeBias

__all__ = ["FIRE"]


class FIRE(RelativeBias):
    r"""FIRE's bias: a learned function of the log distance, normalised by the query's position.

    ``bias[h, i, j] = f_θ(ψ(i - j) / ψ(max(L, i)))[h]`` with ``ψ(x) = log(c·x + 1)``.
    Li et al. (2023, *Functional Interpolation for Relative Positions Improves
    Long Context Transformers*, ICLR 2024) learn the bias as a function of the
    distance ``i - j`` between query ``i`` and key ``j``: a log transform ``ψ``
    that spreads the near distances, divided by that of the query's position
    (at least ``L``), so that every query sees inputs in ``[0, 1]`` whatever the
    length ("progressive interpolation"); an MLP ``f_θ`` (one hidden ReLU layer,
    one output per head) turns that into the bias. T5's buckets, ALiBi and
    KERPLE are functions of the distance alone: FIRE can learn each of them
    within its range, and extrapolates by interpolating.

    As in the reference implementation of the paper (its appendix): ``c`` is
    learned, initialised to 0.1; ``L = |s|·L₀`` with ``L₀`` fixed (512) and the
    multiplier ``s`` learned, initialised to 1; ``ψ`` takes ``|c·x|``, so the
    bias is symmetric in ``i - j`` (a decoder masks later keys, ``causal=True``);
    ``eps`` (1e-6) is added to the denominator. The MLP has ``width`` hidden
    units (32) and PyTorch's default initialisation of :class:`torch.nn.Linear`.

    The score is computed in float64 from the integer positions and rounded
    once (dense), or in the kernel's dtype (:meth:`score_mod`, FlexAttention).
    The MLP is evaluated unit by unit, pointwise, as a FlexAttention kernel
    needs. Eager FlexAttention gives the dense bias's attention; compiled, the
    CPU kernel of torch 2.13 fails to build (a C++ compile error, where
    KERPLE's builds), and the GPU kernel is not checked yet.
    Positions are the query's and the key's own, ``positions=`` included: with
    randomized positions the normaliser is the query's random position.

    Args:
        n_heads: Number of attention heads, H.
        width: Hidden units of the MLP, W.
        c: Initial ``c``.
        L: The fixed ``L₀``; the learned multiplier starts at 1.
        eps: Added to the denominator.

    Attributes:
        mlp: ``Linear(1, W)``, ReLU, ``Linear(W, H)``.
        c: The log transform's scale, ``()``.
        multiplier: ``s``, with ``L = |s|·L₀``, ``()``.
        L0: The fixed ``L₀`` (a buffer), ``()``.

    Shapes:
        - positions: ``(L_q,)`` or ``(B, L_q)``; key_positions: ``(L_k,)`` or ``(B, L_k)``
        - offset: int, or ``(B,)`` integer tensor
        - output: ``(H, L_q, L_k)``, or ``(B, H, L_q, L_k)`` when a
          per-sequence ``offset``, ``positions`` or ``key_positions`` is given

    Example:
        >>> import torch
        >>> from posenc import FIRE
        >>> fire = FIRE(n_heads=2, L=4.0)
        >>> with torch.no_grad():  # f(x) = x for head 0 and -x for head 1
        ...     _ = fire.mlp[0].weight.fill_(1.0), fire.mlp[0].bias.zero_()
        ...     _ = fire.mlp[2].weight.copy_(torch.tensor([[1.0], [-1.0]]).expand(2, 32) / 32)
        ...     _ = fire.mlp[2].bias.zero_(), fire.c.fill_(1.0)
        >>> fire(5, causal=True).detach()[0]  # log(1 + i - j) / log(1 + max(4, i))
        tensor([[0.0000,   -inf,   -inf,   -inf,   -inf],
                [0.4307, 0.0000,   -inf,   -inf,   -inf],
                [0.6826, 0.4307, 0.0000,   -inf,   -inf],
                [0.8614, 0.6826, 0.4307, 0.0000,   -inf],
                [1.0000, 0.8614, 0.6826, 0.4307, 0.0000]])
        >>> fire(1, 9, offset=8).detach()[1, 0, ::4]  # past L: divided by log(1 + 8)
        tensor([-1.0000, -0.7325,  0.0000])

        Every parameter learns through the dense bias; :meth:`score_mod` serves the
        same score to FlexAttention:

        >>> fire(6).sum().backward()
        >>> fire.c.grad is not None and fire.multiplier.grad is not None
        True
    """

    _what = "a FIRE bias"

    def __init__(
        self,
        n_heads: int,
        *,
        width: int = 32,
        c: float = 0.1,
        L: float = 512.0,  # noqa: N803 (the paper's name)
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.n_heads: int = _checks.positive_int("n_heads", n_heads)
        self.width: int = _checks.positive_int("width", width)
        _runtime.allocation(
            (self.width * (self.n_heads + 3),),
            torch.get_default_dtype(),
            _runtime.default_device(),
            lambda: f"FIRE(n_heads={n_heads}, width={width})'s parameters",
            "choose fewer heads or a narrower MLP",
        )
        self.mlp = nn.Sequential(
            nn.Linear(1, self.width), nn.ReLU(), nn.Linear(self.width, self.n_heads)
        )
        self.c: nn.Parameter = nn.Parameter(torch.tensor(float(c)))
        self.multiplier: nn.Parameter = nn.Parameter(torch.tensor(1.0))
        self.L0: Tensor
        self.register_buffer("L0", torch.tensor(float(L)))
        self.eps = float(eps)

    def extra_repr(self) -> str:
        """The configuration, shown in the module's repr."""
        return f"n_heads={self.n_heads}, width={self.width}, eps={self.eps}"

    def parameters_in(self, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, ...]:
        """The MLP's weights and biases, ``c`` and ``L = |s|·L₀``, in ``dtype``."""
        first, last = cast(nn.Linear, self.mlp[0]), cast(nn.Linear, self.mlp[2])
        threshold = (self.multiplier * self.L0).abs()
        tensors = (first.weight[:, 0], first.bias, last.weight, last.bias, self.c, threshold)
        return tuple(t.to(device, dtype) for t in tensors)

    def score(self, h: Tensor, q: Tensor, k: Tensor, *params: Tensor) -> Tensor:
        """``f(log(|c·(q - k)| + 1) / (log(|c·max(q, L)| + 1) + eps))`` for head ``h``."""
        w1, b1, w2, b2, c, threshold = params
        distance = (q - k).to(c.dtype)
        normaliser = torch.maximum(q.to(c.dtype), threshold)
        x = torch.log1p((c * distance).abs()) / (torch.log1p((c * normaliser).abs()) + self.eps)
        # The MLP unit by unit: pointwise, as a compiled FlexAttention kernel needs (no
        # reduction there), and one (..., H) partial sum in memory, not (..., H, W).
        out = b2[h]
        for unit in range(self.width):
            out = out + torch.relu(x * w1[unit] + b1[unit]) * w2[h, unit]
        return out
