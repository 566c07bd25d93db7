"""Adding position to token vectors: :class:`PositionalEncoding`.

Attention compares tokens with each other but has no notion of where they
stand; :class:`PositionalEncoding` adds to each token vector the sinusoid of its
position (see :mod:`posenc.sinusoid`), so that the same token at two places
becomes two different vectors. With ``torch.manual_seed(0)``, the token 42
placed at positions 0 and 1:

>>> import torch
>>> from posenc import Embeddings, PositionalEncoding
>>> _ = torch.manual_seed(0)
>>> emb = Embeddings(d_model=512, vocab=1000)
>>> pe = PositionalEncoding(d_model=512, dropout=0.0)
>>> same = emb(torch.tensor([[42, 42]]))
>>> f"{(same[0, 0] - same[0, 1]).norm():.2f}"  # embedding only: identical
'0.00'
>>> z = pe(same)
>>> f"{(z[0, 0] - z[0, 1]).norm():.2f}"  # after adding the encoding: apart
'3.71'
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .sinusoid import _check_base, _check_d_model, sinusoidal_table

__all__ = ["PositionalEncoding"]


def _check_dropout(dropout: object) -> float:
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)):
        raise TypeError(f"dropout must be a float, got {type(dropout).__name__} {dropout!r}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    return float(dropout)


def _check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return value


def _check_features(x: Tensor, d_model: int, what: str = "input") -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{what} must be a Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{what} must be a floating tensor, got dtype {x.dtype}")
    if x.dim() not in (2, 3):
        raise ValueError(
            f"{what} must have shape (B, L, D) or (L, D), got {x.dim()}-D shape {tuple(x.shape)}"
        )
    if x.shape[-1] != d_model:
        raise ValueError(
            f"{what}'s last dimension must be d_model={d_model}, got shape {tuple(x.shape)}"
        )


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal encoding of each position, then applies dropout.

    ``PositionalEncoding(d_model, dropout, max_len)`` takes the arguments of the
    Annotated Transformer's module and gives the same outputs, within float32
    rounding, without its defects: the table is computed in float64 and rounded
    once, the output keeps the input's dtype, any ``d_model >= 1`` works,
    sequences longer than ``max_len`` get their rows computed on the fly, and
    the table is never written into checkpoints.

    Args:
        d_model: Width of the token vectors, D.
        dropout: Dropout probability applied to the sum, in ``[0, 1)``. The
            paper uses 0.1.
        max_len: Number of positions precomputed in :attr:`pe`. Longer inputs
            still work: their rows are computed on the fly, with the same values.
        base: Base of the geometric progression of wavelengths.

    Attributes:
        pe: The precomputed table, shape ``(1, max_len, d_model)``, float32. A
            non-persistent buffer: it follows ``.to()`` but is not in
            ``state_dict()``, and there are no parameters.

    Shapes:
        - x: ``(B, L, D)`` or, unbatched, ``(L, D)``; any floating dtype
        - output: same shape and dtype as ``x``

        B is the batch size, L the sequence length, D = ``d_model``.

    Example:
        The buffer holds ``max_len`` rows and nothing is trained:

        >>> import torch
        >>> pe = PositionalEncoding(d_model=512, dropout=0.0)
        >>> tuple(pe.pe.shape)
        (1, 5000, 512)
        >>> sum(p.numel() for p in pe.parameters()), len(pe.state_dict())
        (0, 0)

        Added to zeros, the output is the table itself. Position 0 is
        ``[sin 0, cos 0, ...] = [0, 1, 0, 1, ...]``; the first six columns of
        positions 0 to 3, rounded to 3 decimals:

        >>> y = pe(torch.zeros(1, 4, 512))
        >>> y[0, :, :6].round(decimals=3)
        tensor([[ 0.0000,  1.0000,  0.0000,  1.0000,  0.0000,  1.0000],
                [ 0.8410,  0.5400,  0.8220,  0.5700,  0.8020,  0.5970],
                [ 0.9090, -0.4160,  0.9360, -0.3510,  0.9580, -0.2860],
                [ 0.1410, -0.9900,  0.2450, -0.9700,  0.3430, -0.9390]])

        Inputs keep their dtype and may be longer than ``max_len``:

        >>> short = PositionalEncoding(8, max_len=4)
        >>> short(torch.zeros(2, 6, 8, dtype=torch.bfloat16)).dtype
        torch.bfloat16
        >>> torch.equal(short(torch.zeros(6, 8))[4:], PositionalEncoding(8)(torch.zeros(6, 8))[4:])
        True
    """

    pe: Tensor

    def __init__(
        self,
        d_model: int,
        dropout: float = 0.0,
        max_len: int = 5000,
        *,
        base: float = 10_000.0,
    ) -> None:
        super().__init__()
        self.d_model = _check_d_model(d_model)
        self.max_len = _check_positive_int("max_len", max_len)
        self.base = _check_base(base)
        self.dropout = nn.Dropout(p=_check_dropout(dropout))
        table = sinusoidal_table(self.max_len, self.d_model, base=self.base)
        self.register_buffer("pe", table.unsqueeze(0), persistent=False)

    def extra_repr(self) -> str:
        """The configuration, shown in the module's repr."""
        base = "" if self.base == 10_000.0 else f", base={self.base:g}"
        return f"d_model={self.d_model}, max_len={self.max_len}{base}"

    def table(self, length: int, *, dtype: torch.dtype, device: torch.device) -> Tensor:
        """Rows ``0 .. length-1`` of the encoding, shape ``(length, d_model)``.

        Served from :attr:`pe` when it covers ``length`` rows and is at least as
        precise as ``dtype``; otherwise computed in float64 and rounded once to
        ``dtype``. Either way the values are the same sinusoid.

        Args:
            length: Number of positions, L.
            dtype: Floating dtype of the result.
            device: Device of the result.

        Returns:
            Tensor of shape ``(length, d_model)``.
        """
        buffer = self.pe
        if length <= buffer.shape[1] and (torch.finfo(dtype).eps >= torch.finfo(buffer.dtype).eps):
            return buffer[0, :length].to(device=device, dtype=dtype)
        return sinusoidal_table(length, self.d_model, base=self.base, dtype=dtype, device=device)

    def forward(self, x: Tensor) -> Tensor:
        """Return ``dropout(x + PE[:L])``.

        Args:
            x: Token vectors, ``(B, L, D)`` or ``(L, D)``.

        Returns:
            Tensor of the shape and dtype of ``x``.

        Raises:
            TypeError: ``x`` is not a floating tensor.
            ValueError: ``x`` is not 2-D or 3-D, or its last dimension is not ``d_model``.
        """
        _check_features(x, self.d_model)
        out = x + self.table(x.shape[-2], dtype=x.dtype, device=x.device)
        if self.training and self.dropout.p > 0.0:
            out = self.dropout(out)
        return out

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        # Checkpoints of the Annotated Transformer store the table as "pe". It is
        # derived data: accept it when it is this module's sinusoid, else say so.
        stored = state_dict.pop(prefix + "pe", None)
        if stored is not None:
            problem = _check_stored_table(stored, self.d_model, self.base)
            if problem:
                error_msgs.append(f"{prefix}pe: {problem}")
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


def _check_stored_table(stored: object, d_model: int, base: float) -> str:
    """Why a table found in a checkpoint is not this sinusoid, or ``""`` when it is."""
    if not isinstance(stored, Tensor) or not stored.is_floating_point():
        return f"expected a floating tensor holding the sinusoidal table, got {stored!r:.60}"
    if stored.dim() != 3 or stored.shape[0] != 1 or stored.shape[2] != d_model:
        return (
            f"expected a table of shape (1, max_len, {d_model}) for d_model={d_model}, "
            f"got shape {tuple(stored.shape)}"
        )
    stored = stored.detach().to("cpu", torch.float64)
    exact = sinusoidal_table(stored.shape[1], d_model, base=base, dtype=torch.float64)
    # Tables computed in float32 (the Annotated Transformer's) drift from the exact
    # values by about 1e-7 per position; fp16 tables are off by up to 5e-4. A table
    # of another convention (layout, base, learned) differs by O(1).
    pos = torch.arange(stored.shape[1], dtype=torch.float64).unsqueeze(-1)
    tolerance = 1e-3 + 4e-7 * pos
    bad = ~((stored[0] - exact).abs() <= tolerance)  # NaN counts as bad
    if bool(bad.any()):
        row, col = divmod(int(bad.flatten().nonzero()[0]), d_model)
        return (
            "the stored table is not the sinusoidal encoding this module computes "
            f"(base={base:g}): at position {row}, column {col} it holds "
            f"{stored[0, row, col].item():.6g} instead of {exact[row, col].item():.6g}"
        )
    return ""
