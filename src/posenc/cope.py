r"""CoPE: contextual positions counted by gates on the keys (Golovneva et al., 2024)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from . import _checks, _runtime

__all__ = ["CoPE"]


class CoPE(nn.Module):
    r"""Contextual position logits: positions that count what the query's gates open.

    Golovneva et al. (2024, *Contextual Position Encoding: Learning to Count
    What's Important*) let each query decide what counts as a step. Query
    ``i`` opens a gate on key ``j``, ``g_ij = σ(s_ij)`` with ``s_ij`` the
    attention logit, and the key's position is the number of open gates from
    it to the query, ``p_ij = Σ_{t=j..i} g_it``: a fraction, counting words,
    sentences or any token the query has learned to look for. A learned table
    ``e[0 .. P-1]`` of position vectors gives the logit at integer positions,
    ``z_i[n] = q_i · e[n]``, and a fractional one is interpolated between the
    two integers around it; ``p`` is clamped to ``P - 1``. The result is added
    to the attention logits before the softmax.

    :meth:`forward` takes the queries and the attention logits (scaled, with
    ``-inf`` where a key is masked: its gate is then 0) and returns the
    position logits. As in the authors' code (``facebookresearch/RAM``,
    ``projects/cope/src/cope/context_position.py``) the table is shared by the
    heads, starts at zero (CoPE then adds nothing until it learns), and the
    interpolation weight carries the gradient while the integer positions
    carry none. Their layer adds the position logits to the unscaled ``q·k``
    and scales the sum by ``1/√d``; a table of this module equals theirs times
    ``1/√d``.

    CoPE is data-dependent: the positions of a row depend on every logit in
    it, so it has no FlexAttention ``score_mod`` (a score of one pair) and
    runs on the dense logits only; its memory is that of the ``(L_q, L_k)``
    logits, a few times over.

    Args:
        head_dim: Size of each head's queries, d.
        n_positions: Rows of the table, P (positions ``0 .. P - 1``).

    Attributes:
        table: The position vectors, ``(d, P)`` (column ``n`` is ``e[n]``).

    Shapes:
        - query: ``(..., L_q, d)``
        - logits: ``(..., L_q, L_k)``, the attention logits
        - output: ``(..., L_q, L_k)``, to add to ``logits``

    Example:
        >>> import torch
        >>> from posenc import CoPE, subsequent_mask
        >>> cope = CoPE(head_dim=4, n_positions=8)
        >>> with torch.no_grad():
        ...     _ = cope.table.copy_(torch.arange(8.0).expand(4, 8) / 4)  # q·e[n] = n
        >>> q, k = torch.ones(1, 1, 3, 4), torch.zeros(1, 1, 3, 4)
        >>> logits = (q @ k.transpose(-1, -2)).masked_fill(~subsequent_mask(3), float("-inf"))
        >>> cope(q, logits).detach()[0, 0]  # every gate half open: position = (i - j + 1) / 2
        tensor([[0.5000, 0.0000, 0.0000],
                [1.0000, 0.5000, 0.0000],
                [1.5000, 1.0000, 0.5000]])
        >>> scores = logits + cope(q, logits)  # then softmax, as usual
    """

    def __init__(self, head_dim: int, n_positions: int) -> None:
        super().__init__()
        self.head_dim: int = _checks.positive_int("head_dim", head_dim)
        self.n_positions: int = _checks.positive_int("n_positions", n_positions)
        _runtime.allocation(
            (self.head_dim, self.n_positions),
            torch.get_default_dtype(),
            _runtime.default_device(),
            lambda: f"CoPE(head_dim={head_dim}, n_positions={n_positions})'s table",
            "choose fewer positions",
        )
        self.table: nn.Parameter = nn.Parameter(torch.zeros(self.head_dim, self.n_positions))

    def extra_repr(self) -> str:
        """The configuration, shown in the module's repr."""
        return f"head_dim={self.head_dim}, n_positions={self.n_positions}"

    def positions(self, logits: Tensor) -> Tensor:
        """The fractional positions ``min(Σ_{t=j..i} σ(s_it), P - 1)``, ``(..., L_q, L_k)``."""
        gates = torch.sigmoid(logits)
        return gates.flip(-1).cumsum(-1).flip(-1).clamp(max=self.n_positions - 1)

    def forward(self, query: Tensor, logits: Tensor) -> Tensor:
        """The position logits of ``query`` for the attention ``logits``.

        Args:
            query: The queries, ``(..., L_q, d)``.
            logits: Their attention logits, ``(..., L_q, L_k)``, ``-inf`` where masked.

        Returns:
            ``(..., L_q, L_k)``, in the dtype ``query`` and ``logits`` promote to
            (the table is cast to ``query``'s dtype; float16 queries with float32
            logits give float32 position logits, as their sum with ``logits`` is).

        Raises:
            ValueError: ``query``'s last dimension is not ``head_dim``, or the
                shapes of ``query`` and ``logits`` disagree before ``L_k``.
        """
        if query.shape[-1] != self.head_dim or query.shape[:-1] != logits.shape[:-1]:
            raise ValueError(
                f"CoPE takes query (..., L_q, {self.head_dim}) and logits (..., L_q, L_k), "
                f"got query {tuple(query.shape)} and logits {tuple(logits.shape)}"
            )
        pos = self.positions(logits)
        at_integers = query @ self.table.to(query.dtype)  # (..., L_q, P)
        floor = pos.floor()
        weight = pos - floor  # the gradient flows here only
        low = at_integers.gather(-1, floor.long())
        high = at_integers.gather(-1, pos.ceil().long())
        return high * weight + low * (1 - weight)
