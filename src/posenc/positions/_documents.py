"""Packed rows: lengths, ``cu_seqlens``, document ids and positions, and their masks.

A packed row holds several documents end to end. The same packing has four
descriptions, and kernels ask for different ones:

- ``lengths``: the number of tokens of each document, ``[3, 2]``;
- ``cu_seqlens``: the offsets where documents start, and the total, int32
  ``[0, 3, 5]`` (the varlen convention of flash-attn and TransformerEngine, which
  Hugging Face's ``prepare_fa_kwargs_from_position_ids`` builds too);
- document ids: the document of every token, ``[0, 0, 0, 1, 1]``;
- positions: each token's place in its document, ``[0, 1, 2, 0, 1]``
  (:func:`~posenc.positions_from_lengths`).

A row of ``(B, N)`` lengths is a batch of packed rows, each summing to the same
length L (pad with a last document of padding tokens where they do not).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .. import _checks, _runtime
from ._lengths import _lengths_tensor, positions_from_lengths

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


def document_ids(lengths: Tensor | list[int] | tuple[int, ...]) -> Tensor:
    """The document of every token of packed rows: ``[3, 2] -> [0, 0, 0, 1, 1]``.

    Args:
        lengths: Length of each document, in order: a list of ints or an integer
            tensor ``(N,)``, or ``(B, N)`` for a batch of packed rows of the same
            total length. Zero lengths are allowed (their id is skipped).

    Returns:
        ``torch.long`` tensor ``(T,)`` or ``(B, T)``, ``T`` the total length.

    Raises:
        TypeError: ``lengths`` is not a sequence of ints or an integer tensor.
        ValueError: a length is negative, or the rows of a batch differ in total.

    Shapes:
        - lengths: ``(N,)`` or ``(B, N)``
        - output: ``(T,)`` or ``(B, T)``

    Example:
        >>> import torch
        >>> from posenc import document_ids
        >>> document_ids([3, 2])
        tensor([0, 0, 0, 1, 1])
        >>> document_ids(torch.tensor([[1, 3], [2, 2]]))
        tensor([[0, 1, 1, 1],
                [0, 0, 1, 1]])
    """
    lens = _lengths_tensor(lengths)
    if lens.dim() == 2:
        total = _same_total(lens)
        return (
            torch.stack([_ids(row, total) for row in lens])
            if lens.shape[0]
            else lens.new_zeros(0, 0)
        )
    return _ids(lens, int(lens.sum()))


def _ids(lens: Tensor, total: int) -> Tensor:
    return torch.repeat_interleave(
        torch.arange(lens.numel(), device=lens.device), lens, output_size=total
    )


def _same_total(lens: Tensor) -> int:
    totals = lens.sum(-1)
    if totals.numel() and not bool((totals == totals[0]).all()):
        raise ValueError(
            f"the packed rows of lengths must have the same total length, got totals "
            f"{totals.tolist()!r:.80}: pad the shorter rows with a document of padding"
        )
    return int(totals[0]) if totals.numel() else 0


def cu_seqlens(lengths: Tensor | list[int] | tuple[int, ...]) -> Tensor:
    """Cumulative lengths with a leading 0, int32: ``[3, 2] -> [0, 3, 5]``.

    flash-attn's ``flash_attn_varlen_func`` and TransformerEngine take a batch of
    documents flattened into one row, with ``cu_seqlens`` ``(N + 1,)`` int32:
    document ``n`` occupies tokens ``cu_seqlens[n] .. cu_seqlens[n + 1] - 1``.
    ``(B, N)`` lengths are flattened row after row, as their rows are laid out in
    a ``(B * L)`` token dimension.

    Args:
        lengths: Length of each document: ints, ``(N,)`` or ``(B, N)``.

    Returns:
        ``torch.int32`` tensor ``(N + 1,)``, or ``(B * N + 1,)``.

    Raises:
        TypeError: ``lengths`` is not a sequence of ints or an integer tensor.
        ValueError: a length is negative, or the total does not fit in int32.

    Example:
        >>> from posenc import cu_seqlens
        >>> cu_seqlens([3, 2])
        tensor([0, 3, 5], dtype=torch.int32)
    """
    lens = _lengths_tensor(lengths).reshape(-1)
    ends = lens.cumsum(0)
    if ends.numel() and int(ends[-1]) >= 2**31:
        raise ValueError(f"lengths sum to {int(ends[-1])}, past int32's cu_seqlens (2**31 - 1)")
    return torch.cat([ends.new_zeros(1), ends]).to(torch.int32)


def lengths_from_cu_seqlens(cu: Tensor) -> Tensor:
    """The lengths that :func:`cu_seqlens` was built from: ``[0, 3, 5] -> [3, 2]`` (int64).

    Example:
        >>> import torch
        >>> from posenc import lengths_from_cu_seqlens
        >>> lengths_from_cu_seqlens(torch.tensor([0, 3, 5], dtype=torch.int32))
        tensor([3, 2])
    """
    cu = _checks.integer_tensor("cu_seqlens", cu, "a 1-D integer tensor starting at 0")
    if cu.dim() != 1 or cu.numel() < 1:
        raise ValueError(
            f"cu_seqlens must be 1-D with at least one entry, got shape {tuple(cu.shape)}"
        )
    return cu.to(torch.int64).diff()


def lengths_from_documents(documents: Tensor) -> Tensor:
    """The length of each run of equal ids: ``[0, 0, 0, 1, 1] -> [3, 2]`` (1-D, int64).

    Example:
        >>> import torch
        >>> from posenc import lengths_from_documents
        >>> lengths_from_documents(torch.tensor([0, 0, 0, 1, 1]))
        tensor([3, 2])
    """
    documents = _checks.integer_tensor("documents", documents, "a 1-D integer tensor of ids")
    if documents.dim() != 1:
        raise ValueError(f"documents must be 1-D, got shape {tuple(documents.shape)}")
    counts: Tensor = torch.unique_consecutive(documents, return_counts=True)[1]
    return counts


def positions_from_documents(documents: Tensor) -> Tensor:
    """Each token's place in its document (its run of equal ids), ``(L,)`` or ``(B, L)``.

    Example:
        >>> import torch
        >>> from posenc import positions_from_documents
        >>> positions_from_documents(torch.tensor([[0, 0, 0, 1, 1], [4, 4, 7, 7, 7]]))
        tensor([[0, 1, 2, 0, 1],
                [0, 1, 0, 1, 2]])
    """
    documents = _checks.integer_tensor("documents", documents, "an integer tensor (L,) or (B, L)")
    slots = torch.arange(documents.shape[-1], device=documents.device).expand_as(documents)
    starts = torch.ones_like(documents, dtype=torch.bool)
    starts[..., 1:] = documents[..., 1:] != documents[..., :-1]
    first = torch.where(starts, slots, 0).cummax(-1).values
    return slots - first


def documents_from_positions(positions: Tensor) -> Tensor:
    """Document ids from packed positions: a document starts where a position is not the last + 1.

    The rule of Hugging Face's ``find_packed_sequence_indices`` (``masking_utils``):
    ids count from 0 in each row. Positions that restart at 0 (or anywhere) start a
    new document; a row of consecutive positions is one document.

    Args:
        positions: Integer positions ``(L,)`` or ``(B, L)``.

    Returns:
        ``torch.long`` tensor of the shape of ``positions``.

    Raises:
        TypeError: ``positions`` is not an integer tensor.

    Example:
        >>> import torch
        >>> from posenc import documents_from_positions, positions_from_lengths
        >>> documents_from_positions(positions_from_lengths([3, 2, 1]))
        tensor([0, 0, 0, 1, 1, 2])
    """
    positions = _checks.integer_tensor("positions", positions, "an integer tensor (L,) or (B, L)")
    p = positions.to(torch.int64)
    starts = torch.zeros_like(p)
    starts[..., 1:] = (p[..., 1:] != p[..., :-1] + 1).to(torch.int64)
    return starts.cumsum(-1)


def _visible(documents: Tensor | None, causal: bool, window: int | None) -> MaskMod:
    """FlexAttention's ``mask_mod``: may query slot ``q`` see key slot ``k``?"""
    docs = None if documents is None else documents.reshape(-1, documents.shape[-1])

    def mask_mod(b: Tensor, h: Tensor, q: Tensor, k: Tensor) -> Tensor:
        ok = k <= q if causal else q == q
        if window is not None:
            ok = ok & (q - k < window) & (k - q < window)
        if docs is not None:
            row = docs[b if docs.shape[0] > 1 else 0]
            ok = ok & (row[q] == row[k])
        return ok

    return mask_mod


def _mask_args(
    documents: object, causal: object, window: object
) -> tuple[Tensor | None, bool, int | None]:
    docs = None
    if documents is not None:
        docs = _checks.integer_tensor("documents", documents, "an integer tensor (L,) or (B, L)")
        if docs.dim() not in (1, 2):
            raise ValueError(
                f"documents must have shape (L,) or (B, L), got shape {tuple(docs.shape)}"
            )
    causal = _checks.flag("causal", causal)
    if window is not None:
        window = _checks.positive_int("window", window)
    return docs, causal, window


def document_mask(documents: Tensor, *, causal: bool = True, window: int | None = None) -> Tensor:
    """Which keys each query may see in packed rows: a bool mask, True = may attend.

    A query sees the keys of its own document (equal ids) and, with ``causal``,
    only those in its slot or before; with ``window``, only those fewer than
    ``window`` slots away. It is the ``attn_mask`` that
    ``torch.nn.functional.scaled_dot_product_attention`` takes (bool: True takes
    part), and the mask of :func:`document_block_mask`, dense.

    Args:
        documents: Document id of every token, ``(L,)`` or ``(B, L)``
            (:func:`document_ids`).
        causal: Whether keys in later slots are hidden.
        window: Keep only keys fewer than this many slots away, or None.

    Returns:
        ``torch.bool`` ``(L, L)``, or ``(B, 1, L, L)`` for ``(B, L)`` ids.

    Raises:
        TypeError: ``documents`` is not an integer tensor, ``causal`` not a bool.
        ValueError: ``documents`` is not 1-D or 2-D, or ``window < 1``.

    Shapes:
        - documents: ``(L,)`` or ``(B, L)``
        - output: ``(L, L)`` or ``(B, 1, L, L)``

    Example:
        >>> from posenc import document_ids, document_mask
        >>> document_mask(document_ids([2, 2])).int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [0, 0, 1, 0],
                [0, 0, 1, 1]], dtype=torch.int32)
    """
    docs, causal, window = _mask_args(documents, causal, window)
    assert docs is not None
    length = docs.shape[-1]
    _runtime.allocation(
        (*docs.shape[:-1], length, length), torch.bool, docs.device,
        lambda: f"a document mask of {length} tokens",
    )  # fmt: skip
    slots = torch.arange(length, device=docs.device)
    q, k = slots[:, None], slots[None, :]
    ok = k <= q if causal else torch.ones(length, length, dtype=torch.bool, device=docs.device)
    if window is not None:
        ok = ok & ((q - k).abs() < window)
    same = docs.unsqueeze(-1) == docs.unsqueeze(-2)
    out = ok & same
    return out.unsqueeze(1) if docs.dim() == 2 else out


def document_block_mask(
    documents: Tensor | None = None,
    *,
    causal: bool = True,
    window: int | None = None,
    length: int | None = None,
    block_size: int = 128,
) -> Any:
    """:func:`document_mask` as a FlexAttention ``BlockMask``: blocks no query sees are skipped.

    Args:
        documents: Document id of every token, ``(L,)`` or ``(B, L)``, or None for
            one document of ``length`` tokens.
        causal: Whether keys in later slots are hidden.
        window: Keep only keys fewer than this many slots away, or None.
        length: Number of tokens, L, when ``documents`` is None.
        block_size: FlexAttention's block size.

    Returns:
        A FlexAttention ``BlockMask`` (``torch.nn.attention.flex_attention``) for every head.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: neither ``documents`` nor ``length`` is given.

    Example:
        >>> from posenc import document_block_mask, document_ids
        >>> mask = document_block_mask(document_ids([300, 212]))
        >>> mask.shape
        (1, 1, 512, 512)
    """
    from torch.nn.attention.flex_attention import create_block_mask

    docs, causal, window = _mask_args(documents, causal, window)
    if docs is None:
        if length is None:
            raise ValueError(
                "document_block_mask needs documents, or the length L of one document"
            )
        length = _checks.positive_int("length", length)
        batch, device = None, _runtime.default_device()
    else:
        length = docs.shape[-1]
        batch, device = (docs.shape[0] if docs.dim() == 2 else None), docs.device
    block_size = _checks.positive_int("block_size", block_size)
    return create_block_mask(
        _visible(docs, causal, window), batch, None, length, length, device=device,
        BLOCK_SIZE=block_size,
    )  # fmt: skip


__all__ = [
    "cu_seqlens",
    "document_block_mask",
    "document_ids",
    "document_mask",
    "documents_from_positions",
    "lengths_from_cu_seqlens",
    "lengths_from_documents",
    "positions_from_documents",
    "positions_from_lengths",
]
