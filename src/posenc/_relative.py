r"""The relative-bias base: what every bias over ``key - query`` positions shares.

An attention bias such as ALiBi, T5's buckets or KERPLE is a number per head for
each query-key pair that depends on the pair's relative position ``key position -
query position`` only. :class:`RelativeBias` owns everything around that number,
written once: the query and key position arguments of ``forward`` (lengths,
``offset``, ``positions``, ``key_positions``, the batch), the defaults of ``dtype``
and ``device``, the size guard, the block-by-block filling (with the scheme's byte
count per pair, and the peak memory it implies), ``causal=True`` and DTensor inputs
(:func:`posenc._distributed.local_bias`).

A scheme supplies:

- ``_block(dtype, work, causal)``: a function from the int64 relative positions of a
  block of pairs, ``(r, c)`` on the ``work`` device, to the block's values
  ``(H, r, c)`` in ``dtype``, computed in float64 (or exactly) and rounded once;
  with ``causal``, ``-inf`` where the relative position is positive;
- ``_bytes_per_pair(dtype, causal)``: the bytes its temporaries take per pair;
- ``_placement(dtype, device, tensors)``: the dtype, device and work device of the
  result, from the arguments (its defaults);
- or, instead of ``_block`` and ``_bytes_per_pair``, its own ``_fill``: T5's fills
  its buckets by blocks and reads its learned table once; ALiBi's takes a float32
  path where that is exact and the base's otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from . import _checks, _distributed, _runtime
from .positions import check_domain, resolve

__all__ = [
    "BLOCK_BYTES",
    "RelativeBias",
    "blockable",
    "by_blocks",
    "default_device",
    "masked_after",
    "pair_positions",
    "relative_positions",
]


def _batch_of(
    batch: int | None, offset: int | Tensor, positions: object, key_positions: object
) -> int | None:
    """The batch size that per-sequence arguments imply, checked against ``batch``."""
    if batch is not None:
        return _checks.positive_int("batch", batch)
    given = [
        (name, t.shape[0])
        for name, t, dims in (
            ("offset", offset, 1),
            ("positions", positions, 2),
            ("key_positions", key_positions, 2),
        )
        if isinstance(t, Tensor) and t.dim() == dims
    ]
    sizes = {rows for _, rows in given if rows != 1}
    if len(sizes) > 1:
        said = ", ".join(f"{name} {rows}" for name, rows in given)
        raise ValueError(
            f"the per-sequence arguments disagree on the batch size ({said} sequences): "
            f"give each B rows, or 1 to share it"
        )
    return max(rows for _, rows in given) if given else None


def pair_positions(
    query_length: int,
    key_length: int | None,
    offset: int | Tensor,
    positions: Tensor | None,
    key_positions: Tensor | None,
    batch: int | None,
    device: torch.device,
    work: torch.device,
) -> tuple[Tensor, Tensor, tuple[int, ...]]:
    """Query and key positions, int64 on ``work``, and the batch rows of their pairs.

    Queries and keys each go through :func:`~posenc.positions.resolve`, which checks
    that their tensors are on ``device`` (that of the bias) and in the position
    domain, so that every difference ``key - query`` fits in int64; the default
    places queries at ``offset, offset + 1, ...`` and keys at ``0, 1, ...``.
    Returns ``(q, k, rows)``: ``q`` ``(L_q,)`` or ``(B, L_q)``, ``k`` likewise,
    ``rows`` ``()`` or ``(B,)``.
    """
    lq = _checks.length("query_length", query_length)
    if key_positions is not None:
        key_positions = _checks.integer_tensor(
            "key_positions", key_positions, "an integer tensor of shape (L_k,) or (B, L_k)"
        )
    if key_length is None:
        lk = key_positions.shape[-1] if key_positions is not None else lq
    else:
        lk = _checks.length("key_length", key_length)
    b = _batch_of(batch, offset, positions, key_positions)
    if key_positions is not None:
        shape = tuple(key_positions.shape)
        if key_positions.dim() not in (1, 2) or shape[-1] != lk:
            raise ValueError(
                f"key_positions must have shape (L_k,) or (B, L_k) with L_k={lk}, "
                f"got shape {shape}"
            )
        if key_positions.dim() == 2 and shape[0] not in (1, b):
            raise ValueError(
                f"key_positions of shape {shape} gives {shape[0]} sequences, but the batch "
                f"has B={b} (give B rows, or 1 to share it)"
            )
    for name, t in (
        ("offset", offset),
        ("positions", positions),
        ("key_positions", key_positions),
    ):
        if not isinstance(t, Tensor) or t.device == device:
            continue
        if name == "offset" and t.dim() == 0 and t.device.type == "cpu":
            continue  # torch's own rule: a 0-d CPU tensor goes with tensors on any device
        raise ValueError(
            f"{name} must be on the device of the bias ({device}), got a tensor on "
            f"{t.device}: move it with {name}.to({str(device)!r})"
        )
    if key_positions is not None:
        check_domain("key_positions", key_positions)
    queries = resolve(lq, offset=offset, positions=positions, batch=b, device=device)
    keys = resolve(lk, positions=key_positions, batch=b, device=device)
    rows = [
        p.values.shape[0] for p in (queries, keys) if p.values is not None and p.values.dim() == 2
    ]
    return queries.tensor(work), keys.tensor(work), (max(rows),) if rows else ()


def relative_positions(q: Tensor, k: Tensor) -> Tensor:
    """``key position - query position`` for every pair, ``(L_q, L_k)`` or ``(B, L_q, L_k)``."""
    return k.unsqueeze(-2) - q.unsqueeze(-1)


# The temporaries of a block of the bias (int64 distances, float64 products, the
# rounding's) are kept near this size, whatever the size of the result.
BLOCK_BYTES = 1 << 24


def by_blocks(
    out: Tensor, q: Tensor, k: Tensor, per_pair: int, block: Callable[[Tensor], Tensor]
) -> Tensor:
    """Fill ``out`` ``(*rows, *heads, L_q, L_k)`` with ``block(key - query)``, a block at a time.

    ``block`` maps the int64 distances of a block of pairs, ``(r, c)``, to the
    block's values, ``(*heads, r, c)``; ``per_pair`` is the bytes its temporaries
    take per pair. Each value depends on its pair only, so the result is the one
    computed at once, with a peak of ``out`` plus a block.
    """
    lq, lk = out.shape[-2], out.shape[-1]
    if out.numel() == 0:
        return out
    q2, k2 = q.reshape(-1, lq), k.reshape(-1, lk)
    rows = q2.shape[0] if q2.shape[0] > 1 else k2.shape[0]
    out_ = out.view(rows, -1, lq, lk)
    pairs = max(1, BLOCK_BYTES // per_pair)
    cols = min(lk, pairs)
    step = max(1, min(lq, pairs // cols))
    for b in range(rows):
        qb, kb = q2[b if q2.shape[0] > 1 else 0], k2[b if k2.shape[0] > 1 else 0]
        for i in range(0, lq, step):
            for j in range(0, lk, cols):
                values = block(relative_positions(qb[i : i + step], kb[j : j + cols]))
                out_[b, :, i : i + step, j : j + cols].copy_(
                    values.reshape(-1, *values.shape[-2:])
                )
    return out


def blockable(device: torch.device) -> bool:
    """Whether to fill a bias block by block: eagerly, untransformed, on a real device."""
    return device.type != "meta" and _runtime.plain_eager()


def default_device(device: torch.device | str | None, *tensors: object) -> torch.device:
    if device is not None:
        return torch.device(device)
    for t in tensors:
        if isinstance(t, Tensor):
            return t.device
    return _runtime.default_device()


class RelativeBias(nn.Module):
    """Base of the attention biases that depend on ``key position - query position`` only.

    Subclasses set :attr:`n_heads` and ``_what`` (how the size guard names the
    result) and supply ``_placement``, ``_bytes_per_pair`` and ``_block``; see
    the module's docstring.
    """

    n_heads: int
    _what: str = "a relative position bias"

    def forward(
        self,
        query_length: int,
        key_length: int | None = None,
        *,
        offset: int | Tensor = 0,
        positions: Tensor | None = None,
        key_positions: Tensor | None = None,
        batch: int | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        causal: bool = False,
    ) -> Tensor:
        """The bias of ``query_length`` queries over ``key_length`` keys.

        Queries sit at ``offset, offset + 1, ...`` (Hugging Face's
        ``past_seen_tokens``) or at ``positions``, keys at ``0, 1, ...`` or at
        ``key_positions``: with a KV cache of ``n`` tokens and ``L`` new ones,
        call ``bias(L, n + L, offset=n)``.

        Args:
            query_length: Number of queries, L_q.
            key_length: Number of keys, L_k; by default ``L_q``, or the length of
                ``key_positions``.
            offset: Position of the first query: an int, or a ``(B,)`` integer
                tensor, one per sequence.
            positions: Position of every query, ``(L_q,)`` or ``(B, L_q)``.
            key_positions: Position of every key, ``(L_k,)`` or ``(B, L_k)``.
            batch: Batch size to check per-sequence arguments against; by
                default the number of rows they have.
            dtype: Floating dtype of the result. Default: that of the module's
                parameters (:class:`~posenc.RelativePositionBias`,
                :class:`~posenc.KERPLE`), or :func:`torch.get_default_dtype` for
                :class:`~posenc.ALiBi`, which has none.
            device: Device of the result. Default: that of the module's
                parameters; for :class:`~posenc.ALiBi`, that of ``positions``,
                ``key_positions`` or ``offset``, else torch's default device.
            causal: Whether to return the bias with ``-inf`` where the key comes
                after the query (key position > query position, by the positions
                above, so offsets, caches and padding positions count): the
                additive mask ``torch.nn.functional.scaled_dot_product_attention``
                takes as ``attn_mask``, bias and causal mask in one tensor.

        Returns:
            ``(H, L_q, L_k)``, or ``(B, H, L_q, L_k)`` for per-sequence positions.

        Raises:
            TypeError: a length is not an int, a position argument is not
                integer, ``dtype`` is not a floating dtype, or ``causal`` is not
                a bool.
            ValueError: a length is negative, both ``offset`` and ``positions``
                are given, or a shape does not match its length or the batch.

        Example:
            One call gives SDPA its mask; ask for the dtype of the queries. It
            is the attention of the bias with the causal mask:

            >>> import torch
            >>> from torch.nn.functional import scaled_dot_product_attention as sdpa
            >>> from posenc import ALiBi, attention, subsequent_mask
            >>> alibi = ALiBi(n_heads=4)
            >>> alibi(3, causal=True)[0]
            tensor([[ 0.0000,    -inf,    -inf],
                    [-0.2500,  0.0000,    -inf],
                    [-0.5000, -0.2500,  0.0000]])
            >>> q, k, v = torch.randn(3, 2, 4, 5, 8).unbind()  # (B, H, L, d_k) each
            >>> out = sdpa(q, k, v, attn_mask=alibi(5, causal=True, dtype=q.dtype))
            >>> want, _ = attention(q, k, v, mask=subsequent_mask(5), bias=alibi(5))
            >>> torch.allclose(out, want, atol=1e-6)
            True

            With a cache of 3 keys, 2 new queries at 3 and 4 see keys 0 .. 3 and 0 .. 4:

            >>> alibi(2, 5, offset=3, causal=True)[0]
            tensor([[-0.7500, -0.5000, -0.2500,  0.0000,    -inf],
                    [-1.0000, -0.7500, -0.5000, -0.2500,  0.0000]])

            Padding keys sit at real positions too: remove them with the padding
            mask, e.g. ``bias.masked_fill(~mask[:, None, None, :], -inf)``. A row
            whose every key is masked gives SDPA no key to attend to (NaN).
        """
        if any(_distributed.is_dtensor(t) for t in (positions, key_positions, offset)):
            return self._dtensor(
                query_length, key_length, offset, positions, key_positions, batch, dtype,
                device, causal,
            )  # fmt: skip
        return self._bias(
            query_length, key_length, offset, positions, key_positions, batch, dtype, device,
            causal,
        )  # fmt: skip

    def _dtensor(
        self,
        query_length: int,
        key_length: int | None,
        offset: int | Tensor,
        positions: Tensor | None,
        key_positions: Tensor | None,
        batch: int | None,
        dtype: torch.dtype | None,
        device: torch.device | str | None,
        causal: bool,
    ) -> Tensor:
        """DTensor positions: :func:`posenc._distributed.local_bias` over :meth:`_bias`."""

        def build(
            query_length: int,
            key_length: int | None,
            offset: int | Tensor,
            positions: Tensor | None,
            key_positions: Tensor | None,
        ) -> Tensor:
            return self._bias(
                query_length, key_length, offset, positions, key_positions, batch, dtype,
                device, causal,
            )  # fmt: skip

        out: Tensor = _distributed.local_bias(
            build, query_length, key_length, offset, positions, key_positions
        )
        return out

    def _bias(
        self,
        query_length: int,
        key_length: int | None,
        offset: int | Tensor,
        positions: Tensor | None,
        key_positions: Tensor | None,
        batch: int | None,
        dtype: torch.dtype | None,
        device: torch.device | str | None,
        causal: bool,
    ) -> Tensor:
        """The bias of plain tensors: positions resolved, then :meth:`_fill`."""
        out_dtype, where, work = self._placement(dtype, device, (positions, key_positions, offset))
        q, k, rows = pair_positions(
            query_length, key_length, offset, positions, key_positions, batch, where, work
        )
        causal = _checks.flag("causal", causal)
        shape = (*rows, self.n_heads, q.shape[-1], k.shape[-1])
        out = self._fill(q, k, shape, out_dtype, where, work, causal)
        return out if device is None else out.to(device)

    # -- what a scheme supplies ---------------------------------------------------------

    def _placement(
        self,
        dtype: torch.dtype | None,
        device: torch.device | str | None,
        tensors: tuple[object, ...],
    ) -> tuple[torch.dtype, torch.device, torch.device]:
        """``(dtype, device, work)``: the result's dtype and device, and where to compute."""
        raise NotImplementedError

    def _bytes_per_pair(self, dtype: torch.dtype, causal: bool) -> int:
        """The bytes that the temporaries of ``_block`` take per pair of a block."""
        raise NotImplementedError

    def _block(
        self, dtype: torch.dtype, work: torch.device, causal: bool
    ) -> Callable[[Tensor], Tensor]:
        """A function from the int64 relative positions of pairs to their ``(H, ...)`` bias."""
        raise NotImplementedError

    def _blockwise(self) -> bool:
        """Whether the values may come a block at a time now (not when a graph is recorded)."""
        return True

    def _fill(
        self,
        q: Tensor,
        k: Tensor,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
        work: torch.device,
        causal: bool,
    ) -> Tensor:
        """The bias ``shape`` on ``device``: by blocks when it may, else at once.

        By blocks, the temporaries stay near :data:`BLOCK_BYTES` and the peak is the
        result; at once (under autograd, a transform or the compiler), they are
        ``_bytes_per_pair`` for every pair, and the size guard counts them.
        """
        per_pair = self._bytes_per_pair(dtype, causal)
        blocks = blockable(device) and self._blockwise()
        result = self.n_heads * dtype.itemsize
        _runtime.allocation(
            shape,
            dtype,
            device,
            lambda: f"{self._what} of shape {shape}",
            peak=1.0 if blocks else (per_pair + result) / result,
        )
        block = self._block(dtype, work, causal)
        if not blocks:
            return block(relative_positions(q, k)).to(device)
        out = torch.empty(shape, dtype=dtype, device=device)
        return by_blocks(out, q, k, per_pair, block)


def masked_after(values: Tensor, relative: Tensor) -> Tensor:
    """``values`` ``(..., H, r, c)`` with ``-inf`` where ``relative`` ``(..., r, c)`` is positive.

    Out of place, so that autograd sees a zero gradient there (a product with an
    infinite distance would give NaN).
    """
    return values.masked_fill((relative > 0).unsqueeze(-3), -math.inf)
