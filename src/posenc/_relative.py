r"""The relative-bias base: one score function per scheme, served to every kernel.

An attention bias such as ALiBi, T5's buckets, KERPLE or FIRE is a number per head
for each query-key pair. A scheme defines it once, as its :meth:`RelativeBias.score`:
a function of the head ``h``, the query's position ``q`` and the key's position
``k`` (integer tensors that broadcast), and of the scheme's parameters, which
:meth:`RelativeBias.parameters_in` gives in a dtype. Everything around that number
is written here, once:

- the position arguments of ``forward`` (lengths, ``offset``, ``positions``,
  ``key_positions``, ``documents``, the batch), and the default dtype and device;
- what no query may see: with ``causal=True`` a key in a later *slot* (bottom-right
  aligned: query ``i`` of ``L_q`` sits at key slot ``i + L_k - L_q``, the KV-cache
  convention), and with ``documents`` a key of another document. Positions never
  decide it, so packed documents whose positions restart at 0 see no later slot;
- the dense bias: the score in float64, rounded once, by blocks or at once (the
  choice is made in :meth:`RelativeBias._fill`, and only there; T5's, a lookup of
  a learned table, replaces it to look the table up once), under the size guard;
  DTensor positions (:func:`posenc._distributed.local_bias`);
- the same score as a FlexAttention ``score_mod`` (:meth:`RelativeBias.score_mod`),
  computed in the kernel's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from . import _checks, _distributed, _runtime
from ._rounding import round_once
from .positions import POSITION_MAX, POSITION_MIN, check_domain, resolve

__all__ = [
    "BLOCK_BYTES",
    "RelativeBias",
    "by_blocks",
    "pair_positions",
    "relative_positions",
]

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def _batch_of(batch: int | None, *named: tuple[str, object, int]) -> int | None:
    """The batch size that per-sequence arguments imply, checked against ``batch``."""
    if batch is not None:
        return _checks.positive_int("batch", batch)
    given = [
        (name, t.shape[0]) for name, t, dims in named if isinstance(t, Tensor) and t.dim() == dims
    ]
    sizes = {rows for _, rows in given if rows != 1}
    if len(sizes) > 1:
        said = ", ".join(f"{name} {rows}" for name, rows in given)
        raise ValueError(
            f"the per-sequence arguments disagree on the batch size ({said} sequences): "
            f"give each B rows, or 1 to share it"
        )
    return max(rows for _, rows in given) if given else None


def _rows_of(name: str, t: Tensor, length: int, b: int | None, what: str) -> None:
    """``t`` is ``(L,)`` or ``(B, L)`` with ``L = length`` and ``B`` in ``(1, b)``."""
    shape = tuple(t.shape)
    if t.dim() not in (1, 2) or shape[-1] != length:
        raise ValueError(
            f"{name} must have shape ({what},) or (B, {what}) with {what}={length}, "
            f"got shape {shape}"
        )
    if t.dim() == 2 and shape[0] not in (1, b):
        raise ValueError(
            f"{name} of shape {shape} gives {shape[0]} sequences, but the batch "
            f"has B={b} (give B rows, or 1 to share it)"
        )


def pair_positions(
    query_length: int,
    key_length: int | None,
    offset: int | Tensor,
    positions: Tensor | None,
    key_positions: Tensor | None,
    documents: Tensor | None,
    batch: int | None,
    device: torch.device,
    work: torch.device,
) -> tuple[Tensor, Tensor, Tensor | None, tuple[int, ...]]:
    """Query and key positions and the documents, int64 ``(R, L)`` on ``work``; the batch rows.

    Queries and keys each go through :func:`~posenc.positions.resolve`, which checks
    that their tensors are on ``device`` (that of the bias) and in the position
    domain, so that every difference ``key - query`` fits in int64. Queries sit at
    ``offset, offset + 1, ...`` or at ``positions``; keys at ``0, 1, ...``, or at
    ``key_positions``, or, for self-attention with ``positions`` given (``L_k = L_q``),
    at the query positions: never at ``0, 1, ...`` behind the caller's back.
    Returns ``(q, k, documents, rows)``: ``q`` ``(R, L_q)``, ``k`` ``(R, L_k)``,
    ``documents`` ``(R, L_k)`` or None, with ``R`` 1 or B, and ``rows`` ``()`` or ``(B,)``.
    """
    lk = query_length if key_length is None else key_length
    # The steady call: int lengths and offset, in the domain; the general path checks the rest.
    given = positions is not None or key_positions is not None or documents is not None
    ints = not given and batch is None and type(offset) is type(query_length) is type(lk) is int
    if (
        ints
        and min(query_length, lk, offset - POSITION_MIN) >= 0
        and max(lk, offset + query_length) <= POSITION_MAX + 1
    ):
        q = torch.arange(offset, offset + query_length, device=work).view(1, -1)  # type: ignore[arg-type]
        return q, torch.arange(lk, device=work).view(1, -1), None, ()
    lq = _checks.length("query_length", query_length)
    if key_positions is not None:
        key_positions = _checks.integer_tensor(
            "key_positions", key_positions, "an integer tensor of shape (L_k,) or (B, L_k)"
        )
    if documents is not None:
        documents = _checks.integer_tensor(
            "documents", documents, "an integer tensor of shape (L_k,) or (B, L_k)"
        )
    if key_length is None:
        lk = key_positions.shape[-1] if key_positions is not None else lq
    else:
        lk = _checks.length("key_length", key_length)
    if positions is not None and key_positions is None:
        if lk != lq:
            raise ValueError(
                f"positions are given for the {lq} queries but no key_positions for the "
                f"{lk} keys: give key_positions (keys at 0 .. {lk - 1} would be a guess)"
            )
        key_positions = positions  # self-attention: the keys are the queries
    b = _batch_of(
        batch,
        ("offset", offset, 1),
        ("positions", positions, 2),
        ("key_positions", key_positions, 2),
        ("documents", documents, 2),
    )
    if key_positions is not None:
        _rows_of("key_positions", key_positions, lk, b, "L_k")
    if documents is not None:
        _rows_of("documents", documents, lk, b, "L_k")
        if lq > lk:
            raise ValueError(
                f"documents label the {lk} keys, and the {lq} queries are the last of them: "
                f"L_q={lq} > L_k={lk} leaves queries without a document"
            )
    for name, t in (
        ("offset", offset),
        ("positions", positions),
        ("key_positions", key_positions),
        ("documents", documents),
    ):
        if not isinstance(t, Tensor) or t.device == device:
            continue
        if name == "offset" and t.dim() == 0 and t.device.type == "cpu":
            continue  # torch's own rule: a 0-d CPU tensor goes with tensors on any device
        raise ValueError(
            f"{name} must be on the device of the bias ({device}), got a tensor on "
            f"{t.device}: move it with {name}.to({str(device)!r})"
        )
    if key_positions is not None and key_positions is not positions:
        check_domain("key_positions", key_positions)
    queries = resolve(lq, offset=offset, positions=positions, batch=b, device=device)
    keys = resolve(lk, positions=key_positions, batch=b, device=device)
    q, k = queries.tensor(work), keys.tensor(work)
    batched = q.dim() == 2 or k.dim() == 2 or (documents is not None and documents.dim() == 2)
    rows = [t.shape[0] for t in (q, k, documents) if t is not None and t.dim() == 2]
    docs = None if documents is None else documents.to(work, torch.int64)
    docs = None if docs is None else docs if docs.dim() == 2 else docs.unsqueeze(0)
    q, k = (t if t.dim() == 2 else t.unsqueeze(0) for t in (q, k))
    return q, k, docs, (max(rows),) if batched else ()


def relative_positions(q: Tensor, k: Tensor) -> Tensor:
    """``key position - query position`` for every pair, ``(L_q, L_k)`` or ``(B, L_q, L_k)``."""
    return k.unsqueeze(-2) - q.unsqueeze(-1)


def hidden(
    i: Tensor, j: Tensor, shift: int, causal: bool, dq: Tensor | None, dk: Tensor | None
) -> Tensor | None:
    """Which pairs no query may see: query slot ``i``, key slot ``j`` (broadcast).

    With ``causal``, keys in a slot after the query's (query ``i`` at key slot
    ``i + shift``); with documents ``dq``, ``dk`` (ids of the query and of the key),
    keys of another document. None when nothing is hidden.
    """
    out = (j - i > shift) if causal else None
    if dq is not None and dk is not None:
        other = dq != dk
        out = other if out is None else out | other
    return out


# The temporaries of a block of the bias (int64 positions, float64 values, the
# rounding's) are kept near this size, whatever the size of the result.
BLOCK_BYTES = 1 << 24


def by_blocks(out: Tensor, per_pair: int, block: Callable[[int, slice, slice], Tensor]) -> Tensor:
    """Fill ``out`` ``(R, *heads, L_q, L_k)`` with ``block(row, queries, keys)`` by blocks.

    ``block`` gives the values ``(*heads, r, c)`` of the pairs of a slice of queries
    and a slice of keys of one row; ``per_pair`` is the bytes its temporaries take
    per pair. Each value depends on its pair only, so the result is the one computed
    at once, with a peak of ``out`` plus a block.
    """
    lq, lk = out.shape[-2], out.shape[-1]
    if out.numel() == 0:
        return out
    pairs = max(1, BLOCK_BYTES // per_pair)
    cols = min(lk, pairs)
    step = max(1, min(lq, pairs // cols))
    for b in range(out.shape[0]):
        for i in range(0, lq, step):
            for j in range(0, lk, cols):
                rows, keys = slice(i, i + step), slice(j, j + cols)
                out[b, ..., rows, keys] = block(b, rows, keys)
    return out


class RelativeBias(nn.Module):
    """Base of the attention biases: a score of (head, query position, key position).

    Subclasses set :attr:`n_heads` and ``_what`` (how the size guard names the
    result) and supply ``score`` and :meth:`parameters_in`.
    """

    n_heads: int
    _what: str = "a relative position bias"

    # -- what a scheme supplies -----------------------------------------------------------

    def score(self, h: Tensor, q: Tensor, k: Tensor, *params: Tensor) -> Tensor:
        """The bias of head ``h`` for the query at ``q`` and the key at ``k``.

        ``h``, ``q`` and ``k`` are integer tensors that broadcast together (0-d ones
        inside a FlexAttention kernel); ``params`` are :meth:`parameters_in`'s, and
        the result is in their dtype.
        """
        raise NotImplementedError

    def parameters_in(self, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, ...]:
        """The scheme's parameters in ``dtype`` on ``device``, as ``score`` takes them."""
        raise NotImplementedError

    def _exact_in_float32(self, q: Tensor, k: Tensor) -> bool:
        """Whether ``score`` in float32 gives its float64 values for these positions.

        Optional: a large dense bias is then computed in float32 (ALiBi's, whose
        products of power-of-two slopes and distances below ``2**24`` are exact).
        """
        return False

    # -- the dense bias ---------------------------------------------------------------------

    def forward(
        self,
        query_length: int,
        key_length: int | None = None,
        *,
        offset: int | Tensor = 0,
        positions: Tensor | None = None,
        key_positions: Tensor | None = None,
        documents: Tensor | None = None,
        batch: int | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        causal: bool = False,
    ) -> Tensor:
        """The bias of ``query_length`` queries over ``key_length`` keys.

        Queries sit at ``offset, offset + 1, ...`` (Hugging Face's
        ``past_seen_tokens``) or at ``positions``, keys at ``0, 1, ...`` or at
        ``key_positions``: with a KV cache of ``n`` tokens and ``L`` new ones,
        call ``bias(L, n + L, offset=n)``. Self-attention with ``positions`` and
        no ``key_positions`` puts the keys at the query positions.

        Args:
            query_length: Number of queries, L_q.
            key_length: Number of keys, L_k; by default ``L_q``, or the length of
                ``key_positions``.
            offset: Position of the first query: an int, or a ``(B,)`` integer
                tensor, one per sequence.
            positions: Position of every query, ``(L_q,)`` or ``(B, L_q)``.
            key_positions: Position of every key, ``(L_k,)`` or ``(B, L_k)``;
                required when ``positions`` is given and ``L_k != L_q``.
            documents: Document id of every key, ``(L_k,)`` or ``(B, L_k)``, for
                packed rows (:func:`~posenc.document_ids`); the queries are the
                last ``L_q`` keys. A key of another document gets ``-inf``.
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
                after the query *by slot*: query ``i`` sits at key slot
                ``i + L_k - L_q`` (the last ``L_q`` keys are the queries, as with a
                KV cache), and sees the keys up to it. Positions play no part, so
                packed documents that restart at 0 do not see later slots. The
                result is the additive mask
                ``torch.nn.functional.scaled_dot_product_attention`` takes as
                ``attn_mask``, bias and causal mask in one tensor.

        Returns:
            ``(H, L_q, L_k)``, or ``(B, H, L_q, L_k)`` for per-sequence positions
            or documents.

        Raises:
            TypeError: a length is not an int, a position argument or
                ``documents`` is not integer, ``dtype`` is not a floating dtype, or
                ``causal`` is not a bool.
            ValueError: a length is negative, both ``offset`` and ``positions``
                are given, ``positions`` come without ``key_positions`` for
                ``L_k != L_q``, or a shape does not match its length or the batch.

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

            A packed row of two documents (3 and 2 tokens): no query sees the
            other document.

            >>> from posenc import document_ids
            >>> alibi(5, documents=document_ids([3, 2]), causal=True)[0]
            tensor([[ 0.0000,    -inf,    -inf,    -inf,    -inf],
                    [-0.2500,  0.0000,    -inf,    -inf,    -inf],
                    [-0.5000, -0.2500,  0.0000,    -inf,    -inf],
                    [   -inf,    -inf,    -inf,  0.0000,    -inf],
                    [   -inf,    -inf,    -inf, -0.2500,  0.0000]])

            Padding keys sit at real positions too: remove them with the padding
            mask, e.g. ``bias.masked_fill(~mask[:, None, None, :], -inf)``. A row
            whose every key is masked gives SDPA no key to attend to (NaN).
        """
        tensors = positions is not None or key_positions is not None or type(offset) is not int
        if tensors and any(_distributed.is_dtensor(t) for t in (positions, key_positions, offset)):
            if (
                positions is not None
                and key_positions is None
                and key_length in (None, query_length)
            ):
                key_positions = positions  # self-attention: the keys are the queries

            def build(lq: int, lk: int | None, off: object, p: object, kp: object) -> Tensor:
                return self._bias(lq, lk, off, p, kp, documents, batch, dtype, device, causal)  # type: ignore[arg-type]

            out: Tensor = _distributed.local_bias(
                build, query_length, key_length, offset, positions, key_positions
            )
            return out
        return self._bias(
            query_length, key_length, offset, positions, key_positions, documents, batch,
            dtype, device, causal,
        )  # fmt: skip

    def _placement(
        self,
        dtype: torch.dtype | None,
        device: torch.device | str | None,
        tensors: tuple[object, ...],
    ) -> tuple[torch.dtype, torch.device, torch.device]:
        """``(dtype, device, work)``: those of the first parameter, else the defaults."""
        first = next(self.parameters(), None) if self._parameters or self._modules else None
        if first is not None:
            default, where = first.dtype, first.device
        else:
            default = torch.get_default_dtype()
            given = [t.device for t in tensors if isinstance(t, Tensor)]
            where = _runtime.default_device(device or (given[0] if given else None))
        out_dtype = _checks.floating_dtype("dtype", default if dtype is None else dtype)
        return out_dtype, where, _runtime.work_device(where)

    def _bias(
        self,
        query_length: int,
        key_length: int | None,
        offset: int | Tensor,
        positions: Tensor | None,
        key_positions: Tensor | None,
        documents: Tensor | None,
        batch: int | None,
        dtype: torch.dtype | None,
        device: torch.device | str | None,
        causal: bool,
    ) -> Tensor:
        """The bias of plain tensors: positions resolved, then :meth:`_fill`."""
        out_dtype, where, work = self._placement(dtype, device, (positions, key_positions, offset))
        q, k, docs, rows = pair_positions(
            query_length, key_length, offset, positions, key_positions, documents, batch,
            where, work,
        )  # fmt: skip
        causal = _checks.flag("causal", causal)
        lq, lk = q.shape[-1], k.shape[-1]
        shape = (*rows, self.n_heads, lq, lk)
        out = self._fill(q, k, docs, shape, out_dtype, where, work, causal)
        return out if device is None else out.to(device)

    def _fill(
        self,
        q: Tensor,
        k: Tensor,
        docs: Tensor | None,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
        work: torch.device,
        causal: bool,
    ) -> Tensor:
        """The bias ``shape`` on ``device``: the one place its strategy is chosen.

        By blocks when nothing records the operations (eagerly, no autograd graph for
        the parameters, no transform): the temporaries stay near
        :data:`BLOCK_BYTES` and the peak is the result. Otherwise at once, as one
        expression that autograd and the compiler see whole; the size guard then
        counts the temporaries of every pair.
        """
        params = self.parameters_in(torch.float64, work)
        lq, lk = shape[-2], shape[-1]
        # Bytes of temporaries per pair of a block: int64 positions and their difference,
        # a bool, and per head the float64 score, two float64 temporaries, the rounding's.
        result = self.n_heads * dtype.itemsize
        per_pair = 25 + self.n_heads * (24 + (40 if dtype.itemsize < 4 else dtype.itemsize))
        # One block holds the whole: at once, and too small for the guard to refuse.
        big = math.prod(shape) // self.n_heads * per_pair > BLOCK_BYTES
        blocks = big and device.type != "meta" and _runtime.plain_eager(*params)
        if blocks and dtype.itemsize <= 4 and device == work and self._exact_in_float32(q, k):
            params = self.parameters_in(torch.float32, work)  # the same values, faster
        if big:
            _runtime.allocation(
                shape, dtype, device, lambda: f"{self._what} of shape {shape}",
                peak=1.0 if blocks else (per_pair + result) / result,
            )  # fmt: skip
        heads = torch.arange(self.n_heads, device=work).view(-1, 1, 1)
        shift = lk - lq
        dq = None if docs is None else docs[:, shift:]

        def values(b: slice, i: slice, j: slice) -> Tensor:
            """Rows ``b``, queries ``i``, keys ``j``: ``(R, H, r, c)``, rounded and masked."""
            out = self.score(heads, q[b, None, i, None], k[b, None, None, j], *params)
            out = round_once(out, dtype) if out.dtype == torch.float64 else out.to(dtype)
            if not causal and docs is None:
                return out
            ids = (None, None) if dq is None else (dq[b, i, None], docs[b, None, j])  # type: ignore[index]
            slots_q, slots_k = torch.arange(lq, device=work)[i], torch.arange(lk, device=work)[j]
            mask = hidden(slots_q[:, None], slots_k, shift, causal, *ids)
            return out.masked_fill(mask.unsqueeze(-3), -math.inf)  # type: ignore[union-attr]

        if not blocks:
            out = values(slice(None), slice(None), slice(None))
            return (out if out.shape == shape else out.reshape(shape)).to(device)
        rows = max(len(q), len(k), 1 if docs is None else len(docs))
        q, k = q.expand(rows, lq), k.expand(rows, lk)
        dq, docs = (
            (None, None)
            if docs is None or dq is None
            else (dq.expand(rows, lq), docs.expand(rows, lk))
        )
        out = torch.empty((rows, *shape[-3:]), dtype=dtype, device=device)
        blocked = by_blocks(out, per_pair, lambda b, i, j: values(slice(b, b + 1), i, j)[0])
        return blocked.view(shape)

    # -- FlexAttention ----------------------------------------------------------------------

    def score_mod(
        self,
        *,
        offset: int | Tensor = 0,
        positions: Tensor | None = None,
        key_positions: Tensor | None = None,
        documents: Tensor | None = None,
        causal: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> ScoreMod:
        """The bias as a FlexAttention ``score_mod(score, b, h, q_idx, kv_idx)``.

        The same ``score`` as the dense bias, computed in ``dtype`` (that of the
        kernel's scores: float32 for float32, bfloat16 and float16 inputs) from the
        parameters rounded once to it. Query ``q_idx`` sits at key slot
        ``q_idx + offset`` (a KV cache of ``offset`` keys), at that position, or at
        ``positions[b, q_idx]`` (then at slot ``q_idx``); keys at ``kv_idx``, or
        ``key_positions[b, kv_idx]``, or, with ``positions`` and no
        ``key_positions``, at the query positions (self-attention). ``documents``
        (ids by key slot) and ``causal`` (a key slot after the query's) put ``-inf``
        where a query may not look; pass the same to
        :func:`~posenc.document_block_mask` so that the kernel skips those blocks.

        Precision, float32: ALiBi's score is one rounding of the exact product
        while ``|key - query| < 2**24``; KERPLE's is within ``2**-21·(1 + |bias|)``
        of the float64 value; T5's buckets are exact (an integer table from
        distance to bucket) and its values are the table's, rounded once.

        Args:
            offset: Position of the first query, an int or ``(B,)``.
            positions: Query positions by slot, ``(L,)`` or ``(B, L)``.
            key_positions: Key positions by slot, ``(L,)`` or ``(B, L)``.
            documents: Document id of every slot, ``(L,)`` or ``(B, L)``.
            causal: Whether keys in a later slot get ``-inf``.
            dtype: The dtype the score is computed in.

        Returns:
            A function for ``flex_attention(q, k, v, score_mod=...)``.

        Raises:
            TypeError: a position argument or ``documents`` is not an integer
                tensor, or ``causal`` is not a bool.
            ValueError: a ``(B,)`` offset with ``causal`` or ``documents``.

        Example:
            >>> import torch
            >>> from torch.nn.attention.flex_attention import flex_attention
            >>> from posenc import ALiBi
            >>> alibi = ALiBi(4)
            >>> q, k, v = torch.randn(3, 1, 4, 6, 8).unbind()
            >>> import warnings  # eager FlexAttention warns: compile it for speed
            >>> with warnings.catch_warnings(action="ignore"):
            ...     out = flex_attention(q, k, v, score_mod=alibi.score_mod(causal=True))
            >>> want = torch.nn.functional.scaled_dot_product_attention(
            ...     q, k, v, attn_mask=alibi(6, causal=True))
            >>> torch.allclose(out, want, atol=1e-5)
            True
        """
        causal = _checks.flag("causal", causal)
        dtype = _checks.floating_dtype("dtype", dtype)
        tensors = {"positions": positions, "key_positions": key_positions, "documents": documents}
        for name, t in tensors.items():
            if t is not None:
                tensors[name] = _checks.integer_tensor(
                    name, t, "an integer tensor of shape (L,) or (B, L)"
                ).to(torch.int64)
                check_domain(name, t)
        pos, kpos, docs = tensors["positions"], tensors["key_positions"], tensors["documents"]
        if kpos is None:
            kpos = pos
        first = next(self.parameters(), None)
        device = (
            first.device
            if first is not None
            else next(
                (t.device for t in (pos, kpos, docs, offset) if isinstance(t, Tensor)),
                _runtime.default_device(),
            )
        )
        params = self.parameters_in(dtype, device)
        off = (
            offset.to(torch.int64)
            if isinstance(offset, Tensor)
            else _checks.integer("offset", offset)
        )
        if isinstance(off, Tensor) and off.dim() and (causal or docs is not None):
            raise ValueError(
                "score_mod with a per-sequence offset has no slot for its queries: causal "
                "and documents need the key slot of each query (the dense bias's last L_q); "
                "give positions=, or leave causality to the block mask"
            )

        def at(t: Tensor, b: Tensor, i: Tensor) -> Tensor:
            return t[i] if t.dim() == 1 else t[b if t.shape[0] > 1 else 0, i]

        def score_mod(
            score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor
        ) -> Tensor:
            # the query's key slot: q_idx + offset (a cache), or q_idx with positions
            slot = (
                q_idx
                if pos is not None
                else q_idx + (off[b] if isinstance(off, Tensor) and off.dim() else off)
            )
            q = slot if pos is None else at(pos, b, q_idx)
            k = kv_idx if kpos is None else at(kpos, b, kv_idx)
            out = score + self.score(h, q, k, *params).to(score.dtype)
            if causal:
                out = torch.where(kv_idx > slot, -math.inf, out)
            if docs is not None:
                out = torch.where(at(docs, b, slot) != at(docs, b, kv_idx), -math.inf, out)
            return out

        return score_mod

    def _hidden(
        self, out: Tensor, docs: Tensor | None, causal: bool, rows: tuple[int, ...]
    ) -> Tensor:
        """``out`` ``(*rows, H, L_q, L_k)`` with ``-inf`` on the pairs :func:`hidden` names.

        In place where nothing records the operations, else out of place, so that
        autograd sees a zero gradient there.
        """
        lq, lk = out.shape[-2], out.shape[-1]
        slots_q, slots_k = torch.arange(lq, device=out.device), torch.arange(lk, device=out.device)
        dq = None if docs is None else docs[:, lk - lq :, None].to(out.device)
        dk = None if docs is None else docs[:, None, :].to(out.device)
        mask = hidden(slots_q[:, None], slots_k, lk - lq, causal, dq, dk)
        if mask is None:
            return out
        mask = mask.unsqueeze(-3)
        if not rows and mask.dim() == 4:
            mask = mask[0]
        if _runtime.plain_eager(out) and mask.dim() <= out.dim():
            return out.masked_fill_(mask, -math.inf)
        return out.masked_fill(mask, -math.inf)
