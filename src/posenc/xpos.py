r"""xPos: RoPE whose pairs decay with the distance (Sun et al., 2022)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from . import _checks, _runtime
from ._rounding import round_once
from ._sources import XPosScales
from .positions import resolve
from .rotary import ROTARY_LAYOUTS, RotaryEmbedding, RotaryLayout

__all__ = ["XPos"]

_F64 = torch.float64


class XPos(nn.Module):
    r"""Rotates queries and keys as RoPE does, and scales each pair by the position.

    Sun et al. (2022, *A Length-Extrapolatable Transformer*) multiply pair
    ``k`` of the query at position ``n`` by :math:`\zeta_k^{\,n/\gamma}` and
    of the key at position ``m`` by :math:`\zeta_k^{-m/\gamma}`, on top of
    the rotation, so that the pair's share of the score ``q_n · k_m`` is
    scaled by :math:`\zeta_k^{(n-m)/\gamma}`: with
    :math:`\zeta_k = (2k/D + 0.4) / 1.4 < 1` it decays with the distance, the
    fast pairs (small ``k``) fastest, the slowest pairs hardly at all.
    ``scale_base`` is :math:`\gamma` (512, the paper's and
    ``rotary-embedding-torch``'s ``xpos_scale_base``).

    The scale of one token grows or shrinks exponentially with its position:
    at ``|n|/γ = 70`` the key's :math:`\zeta_0^{-n/\gamma}` passes float32's
    range, at ``|n|/γ ≈ 7.7`` float16's. Only the difference ``n - m``
    reaches the score, so the power is taken from a ``center``:
    :math:`\zeta_k^{(n-c)/\gamma}` and :math:`\zeta_k^{-(m-c)/\gamma}`, whose
    product is the same for every ``c``. ``rotary-embedding-torch`` and
    torchscale put ``c`` at the middle of each call's sequence, which changes
    as a cache grows; here ``c`` is an argument, 0 by default, the same at
    every call, so that decoding one token at a time gives the rows of the
    whole sequence. Scales outside the normal range of the output's dtype
    are refused, naming the position: give a ``center`` near the middle of
    the positions (or a larger ``scale_base``).

    The rotation is :class:`RotaryEmbedding`'s: the frequencies of
    :func:`rope_frequencies`, the phase ``p·ω`` in float64. The cos and sin
    of each pair and its scale are computed in float64, multiplied there, and
    rounded once to the table's dtype (float32, float64 for float64 inputs),
    as ``attention_factor`` multiplies them in the rotary core; the rotation
    is then :func:`apply_rotary`'s, rounded once to the input's dtype. Nothing
    is tabled: every call computes its positions' values. The same module is
    ``RotaryEmbedding(head_dim, base=base, layout=layout,
    xpos_scale_base=scale_base)`` and its :meth:`~RotaryEmbedding.rotate_queries_and_keys`,
    which this one calls.

    Args:
        head_dim: Features per head, D (even).
        base: Base of RoPE's wavelengths, ``rope_theta``.
        scale_base: :math:`\gamma`, positions per power of ``ζ``: a finite number > 0.
        layout: Which features pair up, as in :class:`RotaryEmbedding`:
            ``"half"`` or ``"interleaved"`` (``rotary-embedding-torch``'s and
            torchscale's pairs).

    Attributes:
        frequencies: RoPE's :math:`\omega_k` per pair, ``(D/2,)``, float64 on
            the CPU (a plain attribute, as ``zeta``).
        zeta: :math:`\zeta_k` per pair, ``(D/2,)``, float64 on the CPU (a plain
            attribute: no cast rounds it).

    Shapes:
        - q, k: ``(..., L, D)``, the sequence on dim -2 (``(B, H, L, D)``;
          the heads may differ, as with grouped queries); any floating dtype
        - offset: int, or ``(B,)`` integer tensor
        - positions: ``(L,)`` or ``(B, L)``, integer (or floating: fractional)
        - output: ``(q, k)`` rotated and scaled, each of its input's shape and dtype

    Example:
        >>> import torch
        >>> from posenc import XPos
        >>> xpos = XPos(8)
        >>> xpos
        XPos(head_dim=8, scale_base=512)
        >>> q, k = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)   # (B, H, L, D)
        >>> rq, rk = xpos(q, k)
        >>> rq.shape, rk.dtype
        (torch.Size([2, 4, 6, 8]), torch.float32)

        The score of a pair depends on the distance, not on where it sits:

        >>> one, two = torch.randn(1, 8), torch.randn(1, 8)
        >>> def score(n, m):
        ...     a, _ = xpos(one, one, offset=n)
        ...     _, b = xpos(two, two, offset=m)
        ...     return float(a @ b.T)
        >>> round(score(10, 3), 4) == round(score(1010, 1003), 4)
        True

        A ``center`` changes the queries and keys, not their scores:

        >>> a = xpos(q, k)
        >>> b = xpos(q, k, center=3)
        >>> torch.allclose(a[0] @ a[1].mT, b[0] @ b[1].mT, atol=1e-5)
        True
    """

    _rope: RotaryEmbedding  # the rotary core, not a submodule

    def __init__(
        self,
        head_dim: int,
        *,
        base: float = 10_000.0,
        scale_base: float = 512.0,
        layout: RotaryLayout = "half",
    ) -> None:
        super().__init__()
        self.head_dim: int = _checks.positive_int("head_dim", head_dim)
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even (features in pairs), got {head_dim}")
        self.layout: RotaryLayout = _checks.choice("layout", layout, ROTARY_LAYOUTS)
        gamma = _checks.real_number("scale_base", scale_base)
        if not gamma > 0:
            raise ValueError(f"scale_base must be a finite number > 0, got {scale_base!r}")
        self.scale_base: float = gamma
        self.base: float = _checks.base(base)
        # The rotary core does the work; one table row (never read): not a submodule,
        # so that the repr, the state and casts stay this module's.
        rope = RotaryEmbedding(
            self.head_dim, base=self.base, layout=self.layout, max_len=1, xpos_scale_base=gamma
        )
        object.__setattr__(self, "_rope", rope)
        scales = rope.source  # the public accessor: an xPos module's source is its scales
        assert isinstance(scales, XPosScales)
        self._scales: XPosScales = scales
        self.frequencies: Tensor = self._scales.ladder.freqs  # float64, on the CPU
        self.zeta: Tensor = self._scales.zeta  # float64, on the CPU

    def extra_repr(self) -> str:
        """The configuration, shown in the module's repr."""
        parts = [f"head_dim={self.head_dim}", f"scale_base={self.scale_base:g}"]
        if self.base != 10_000.0:
            parts.append(f"base={self.base:g}")
        if self.layout != "half":
            parts.append(f"layout={self.layout!r}")
        return ", ".join(parts)

    def scales(
        self,
        length: int,
        *,
        offset: int | Tensor = 0,
        positions: Tensor | None = None,
        center: float = 0.0,
        batch: int | None = None,
        dtype: torch.dtype = _F64,
        device: torch.device | str | None = None,
    ) -> Tensor:
        r"""The queries' scales :math:`\zeta_k^{(p-c)/\gamma}`; the keys' are their inverses.

        Args:
            length: Number of tokens, L.
            offset: Position of the first token: an int, or one per sequence.
            positions: The position of every token; not with ``offset``.
            center: The position ``c`` the power is taken from.
            batch: Batch size B, to check per-sequence positions against.
            dtype: Floating dtype of the result (float64 by default: exact to
                float64's rounding), rounded once.
            device: Device of the result (default: the CPU).

        Returns:
            ``(L, D/2)``, or ``(B, L, D/2)`` for per-sequence positions.

        Raises:
            ValueError: as :meth:`forward`, for the positions and the range of ``dtype``.

        Example:
            >>> xpos = XPos(4, scale_base=2.0)
            >>> xpos.scales(3)            # ζ = (0.2857, 0.6429) to the powers 0, 1/2, 1
            tensor([[1.0000, 1.0000],
                    [0.5345, 0.8018],
                    [0.2857, 0.6429]], dtype=torch.float64)
        """
        length = _checks.length("length", length)
        dtype = _checks.floating_dtype("dtype", dtype)
        target = torch.device("cpu") if device is None else torch.device(device)
        compute = _runtime.work_device(target)
        at = resolve(
            length, offset=offset, positions=positions, batch=batch, device=None, fractional=True
        )
        scale = self._scales.power(at, _checks.real_number("center", center), compute, dtype)
        return round_once(scale, dtype).to(target)

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        *,
        offset: int | Tensor = 0,
        positions: Tensor | None = None,
        center: float = 0.0,
    ) -> tuple[Tensor, Tensor]:
        r"""Rotate ``q`` and ``k`` by their positions; scale the queries up, the keys down.

        Args:
            q: Queries ``(..., L, D)``.
            k: Keys at the same positions, ``(..., L, D)`` (the heads may differ).
                Decoding with a cache: the new tokens' queries and keys, with
                ``offset``, the same ``center`` at every step; the cached keys
                were rotated and scaled when they were new.
            offset: Position of the first token, an int or a ``(B,)`` integer tensor.
            positions: The position of every token, ``(L,)`` or ``(B, L)``: any
                integers, or floating for fractional positions, as in
                :class:`RotaryEmbedding`.
            center: The position ``c`` the scales' power is taken from (the
                scores do not depend on it; the range of the scales does).

        Returns:
            ``(q, k)`` rotated and scaled, each of its input's shape and dtype.

        Raises:
            TypeError: ``q`` or ``k`` is not a floating tensor, or ``offset``,
                ``positions`` or ``center`` has a wrong type.
            ValueError: ``q`` or ``k`` has fewer than 2 dimensions or a last one
                that is not ``head_dim``; they differ in length, in their number
                of dimensions or in the batch; bad positions (as
                :class:`RotaryEmbedding`); a scale outside the normal range of
                the output's dtype (checked for int offsets, and for positions
                on the CPU, eagerly; elsewhere such scales give inf and 0).

        Example:
            Decoding one token at a time gives the rows of the whole sequence:

            >>> import torch
            >>> xpos = XPos(8)
            >>> q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
            >>> whole = xpos(q, k, center=2)
            >>> steps = [xpos(q[:, :, t:t + 1], k[:, :, t:t + 1], offset=t, center=2)
            ...          for t in range(5)]
            >>> torch.equal(torch.cat([s[1] for s in steps], dim=2), whole[1])
            True
        """
        return self._rope.rotate_queries_and_keys(
            q, k, offset=offset, positions=positions, center=center
        )
