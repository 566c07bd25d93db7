"""Independent references for the tests (not a test module).

* :func:`sinusoid_reference`: the paper's formula in float64 NumPy, written
  column by column from ``angle = pos * base ** (-2 * floor(j / 2) / d_model)``,
  ``sin`` for even ``j`` and ``cos`` for odd ``j``. It shares no code with posenc.
* :func:`annotated_table`: a float32 table computed the way the Annotated
  Transformer computes it (float32 positions times ``exp(arange(0, d, 2) *
  -(log(10000) / d))``, sines into the even columns, cosines into the odd ones).
* :func:`round_once`: float64 values rounded to float16 or bfloat16 directly (PyTorch's
  ``.to()`` goes through float32 and rounds some values twice).
* :func:`roformer_frequencies` and :func:`rotary_reference`: RoPE in float64
  NumPy, from Su et al. (2021, RoFormer, eq. 34): pair ``k`` of the token at
  position ``m`` turns by ``m * base ** (-2k / d)``; the pair is ``(k, k + h)``
  in the "half" layout and ``(2k, 2k + 1)`` in the "interleaved" one.
* :class:`LegacyEmbeddings` and :class:`LegacyPositionalEncoding`: stand-ins
  with the Annotated Transformer's attribute names (``lut``; a persistent buffer
  ``pe`` of shape ``(1, max_len, d_model)``), for producing legacy state dicts.
* ``INTEGER_DTYPES``: every integer dtype that positions and offsets may come in.
* :class:`CountingBackend`: a torch.compile backend that counts the graphs it is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "INTEGER_DTYPES",
    "CountingBackend",
    "LegacyEmbeddings",
    "LegacyPositionalEncoding",
    "annotated_table",
    "concatenated_reference",
    "legacy_model",
    "roformer_frequencies",
    "rotary_reference",
    "round_once",
    "sinusoid_reference",
    "ulp",
]


#: Every integer dtype a position or an offset may come in (unsigned ones included).
INTEGER_DTYPES = [
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
]


class CountingBackend:
    """A torch.compile backend that counts graph compilations and runs them eagerly."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: object) -> Callable[..., object]:
        self.graphs += 1
        return gm.forward


def _as_positions(positions: int | np.ndarray | list[int] | Tensor) -> np.ndarray:
    if isinstance(positions, int):
        return np.arange(positions, dtype=np.int64)
    if isinstance(positions, Tensor):
        return positions.detach().cpu().numpy().astype(np.int64)
    return np.asarray(positions, dtype=np.int64)


def sinusoid_reference(
    positions: int | np.ndarray | list[int] | Tensor, d_model: int, base: float = 10_000.0
) -> np.ndarray:
    """Float64 table of shape ``(*positions.shape, d_model)`` (``(n, d_model)`` for an int n)."""
    pos = _as_positions(positions).astype(np.float64)
    out = np.empty((*pos.shape, d_model), dtype=np.float64)
    for j in range(d_model):
        i = j // 2
        angle = pos * float(base) ** (-2.0 * i / d_model)
        out[..., j] = np.sin(angle) if j % 2 == 0 else np.cos(angle)
    return out


def concatenated_reference(
    positions: int | np.ndarray | list[int] | Tensor, d_model: int, base: float = 10_000.0
) -> np.ndarray:
    """The other common convention: all sine columns first, then all cosine columns."""
    table = sinusoid_reference(positions, d_model, base)
    return np.concatenate((table[..., 0::2], table[..., 1::2]), axis=-1)


def round_once(values: Tensor, dtype: torch.dtype) -> Tensor:
    """Each float64 value to the nearest ``dtype`` number, with no float32 step.

    The candidates are ``values.to(dtype)`` and its neighbour on the other side of the
    value; both are exact in float64, and so are the distances to them.
    """
    first = values.to(dtype)
    up, down = torch.full_like(first, 2), torch.full_like(first, -2)
    other = torch.where(
        first.double() < values, torch.nextafter(first, up), torch.nextafter(first, down)
    )
    closer = (other.double() - values).abs() < (first.double() - values).abs()
    return torch.where(closer, other, first)


def annotated_table(positions: int | Tensor, d_model: int) -> Tensor:
    """Float32 table computed in float32, the Annotated Transformer's way.

    ``positions`` is a length ``n`` (rows ``0 .. n-1``) or a 1-D integer tensor.
    ``d_model`` must be even, as in the original.
    """
    if isinstance(positions, int):
        positions = torch.arange(positions)
    position = positions.to(torch.float32).unsqueeze(1)
    div_term = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model)
    )
    table = torch.zeros(position.shape[0], d_model, dtype=torch.float32)
    table[:, 0::2] = torch.sin(position * div_term)
    table[:, 1::2] = torch.cos(position * div_term)
    return table


class LegacyEmbeddings(nn.Module):
    """Stand-in for the Annotated Transformer's ``Embeddings`` (attribute ``lut``)."""

    def __init__(self, d_model: int, vocab: int) -> None:
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.d_model = d_model

    def forward(self, x: Tensor) -> Tensor:
        return self.lut(x) * math.sqrt(self.d_model)


class LegacyPositionalEncoding(nn.Module):
    """Stand-in for the Annotated Transformer's ``PositionalEncoding``.

    The table is a *persistent* buffer ``pe`` of shape ``(1, max_len, d_model)``,
    so it ends up in ``state_dict()`` as the original's does.
    """

    pe: Tensor

    def __init__(self, d_model: int, dropout: float, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.register_buffer("pe", annotated_table(max_len, d_model).unsqueeze(0))

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(x + self.pe[:, : x.size(1)])


def legacy_model(d_model: int, vocab: int, dropout: float = 0.0, max_len: int = 5000) -> nn.Module:
    """``Sequential(LegacyEmbeddings, LegacyPositionalEncoding)``.

    Its state dict has the keys ``0.lut.weight`` and ``1.pe``.
    """
    return nn.Sequential(
        LegacyEmbeddings(d_model, vocab), LegacyPositionalEncoding(d_model, dropout, max_len)
    )


def ulp(values: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """Spacing of ``dtype``'s numbers at the magnitude of ``values`` (subnormals included)."""
    info = torch.finfo(dtype)
    mag = np.maximum(np.abs(values), info.tiny)
    return info.eps * np.exp2(np.floor(np.log2(mag)))


def roformer_frequencies(dim: int, base: float = 10_000.0) -> np.ndarray:
    """RoFormer's theta_i = base ** (-2 (i - 1) / d), i = 1 .. d/2, in float64."""
    i = np.arange(1, dim // 2 + 1, dtype=np.float64)
    return np.asarray(base, dtype=np.float64) ** (-2.0 * (i - 1) / dim)


def rotary_reference(
    x: Tensor | np.ndarray,
    positions: Tensor | np.ndarray,
    freqs: np.ndarray,
    layout: str = "half",
    factor: float = 1.0,
) -> np.ndarray:
    """``x`` (..., L, D) rotated in float64, pair by pair, written out with a loop.

    ``positions`` broadcasts against ``x[..., 0]`` (shape (..., L)); ``freqs`` has one
    entry per rotated pair; features past ``2 * len(freqs)`` pass unchanged; cos and
    sin are multiplied by ``factor``.
    """
    xs = x.detach().double().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x, np.float64)
    pos = positions.cpu().numpy() if isinstance(positions, Tensor) else np.asarray(positions)
    pos = np.broadcast_to(pos.astype(np.float64), xs.shape[:-1])
    out = xs.copy()
    h = len(freqs)
    for k in range(h):
        a, b = (k, k + h) if layout == "half" else (2 * k, 2 * k + 1)
        angle = pos * freqs[k]
        c, s = factor * np.cos(angle), factor * np.sin(angle)
        out[..., a] = xs[..., a] * c - xs[..., b] * s
        out[..., b] = xs[..., b] * c + xs[..., a] * s
    return out
