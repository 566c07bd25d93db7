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
- the dense bias: the score in float64, rounded once, under the size guard, by
  distance, by lookup, by blocks or at once. The choice is made in
  :meth:`RelativeBias._fill`, and only there, from what a scheme declares it can
  do: :attr:`~RelativeBias.relative_only` (its score reads ``k - q`` only: each
  distance is scored once and the rows are windows of those scores) and
  :attr:`~RelativeBias.looked_up` (its score reads a learned table: the indices of
  every pair first, then one lookup, T5's). No scheme overrides it. ALiBi, which
  holds no tensor, keeps its scores by distance between calls, so that a decoding
  step's row is a window of them (:meth:`RelativeBias._kept`, behind
  :func:`posenc._runtime.fast_path`);
- DTensor positions (:func:`posenc._distributed.local_bias`);
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
#: Positions of one row given as a ``range`` (the steady call) or as ``(R, L)`` tensors.
Positions = range | Tensor
#: The largest distance ``|key - query|`` of two positions of the domain.
_FARTHEST = POSITION_MAX - POSITION_MIN


def as_tensor(p: Positions, work: torch.device) -> Tensor:
    """Positions as an int64 ``(R, L)`` tensor on ``work``."""
    if isinstance(p, range):
        return torch.arange(p.start, p.stop, device=work).view(1, -1)
    return p


def _windows(table: Tensor, first: int, nearest: int, shape: tuple[int, ...]) -> Tensor:
    """``out[h, i, j] = table[h, nearest + j - i + L_q - 1 - first]``: a new ``(H, L_q, L_k)``.

    ``table[h, d - first]`` holds the bias of distance ``d``, and ``nearest`` is the
    distance of the last query to the first key: each row is a window of the table.
    """
    windows = table.as_strided(
        shape, (table.stride(0), 1, 1), table.storage_offset() + nearest - first
    )
    return windows.flip(-2)  # a new tensor, row i at distance index L_q - 1 - i


def consecutive(q: Positions, k: Positions) -> tuple[int, int] | None:
    """The first positions of one row of consecutive queries over consecutive keys.

    Ranges say so; tensors are read where that is free (:func:`~posenc._runtime.readable`).
    None where it does not hold, or cannot be known for free.
    """
    if isinstance(q, range) and isinstance(k, range):
        return q.start, k.start
    if isinstance(q, range) or isinstance(k, range) or len(q) != 1 or len(k) != 1:
        return None
    if not (_runtime.readable(q) and _runtime.readable(k)):
        return None
    q0, k0 = int(q[0, 0]), int(k[0, 0])
    steps = torch.arange(max(q.shape[-1], k.shape[-1]), dtype=q.dtype, device=q.device)
    if not torch.equal(q[0] - q0, steps[: q.shape[-1]]) or not torch.equal(
        k[0] - k0, steps[: k.shape[-1]]
    ):
        return None
    return q0, k0


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
) -> tuple[Positions, Positions, Tensor | None, tuple[int, ...]]:
    """Query and key positions and the documents, int64 ``(R, L)`` on ``work``; the batch rows.

    Queries and keys each go through :func:`~posenc.positions.resolve`, which checks
    that their tensors are on ``device`` (that of the bias) and in the position
    domain, so that every difference ``key - query`` fits in int64. Queries sit at
    ``offset, offset + 1, ...`` or at ``positions``; keys at ``0, 1, ...``, or at
    ``key_positions``, or, for self-attention with ``positions`` given (``L_k = L_q``),
    at the query positions: never at ``0, 1, ...`` behind the caller's back.
    Returns ``(q, k, documents, rows)``: ``q`` ``(R, L_q)``, ``k`` ``(R, L_k)``,
    ``documents`` ``(R, L_k)`` or None, with ``R`` 1 or B, and ``rows`` ``()`` or ``(B,)``.
    The steady call (int lengths and offset, nothing else) gives ``q`` and ``k`` as
    ``range`` objects, which :func:`as_tensor` turns into those tensors where needed.
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
        if torch.compiler.is_compiling():  # a range would fix its symbolic bounds
            q = torch.arange(offset, offset + query_length, device=work).view(1, -1)  # type: ignore[arg-type]
            return q, torch.arange(lk, device=work).view(1, -1), None, ()
        return range(offset, offset + query_length), range(lk), None, ()
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
    result) and supply ``score`` and :meth:`parameters_in`; they may declare the
    capabilities :attr:`relative_only` and :attr:`looked_up` (with :meth:`index` and
    :meth:`lookup`), from which the base chooses how to fill the dense bias.
    """

    n_heads: int
    _what: str = "a relative position bias"

    #: A capability: ``score`` reads the positions only through ``k - q`` (ALiBi, T5,
    #: KERPLE; not FIRE, which needs the query's own position). The base then scores
    #: each distance of a row of consecutive queries once and copies its windows.
    relative_only: bool = False
    #: A capability: ``score`` reads a learned table at an integer index of the pair
    #: (T5's buckets); the scheme supplies :meth:`index` and :meth:`lookup`, and the
    #: base computes the indices, then reads the table once for every pair.
    looked_up: bool = False
    # The rounded scores of a range of distances, by (dtype, device): (first, (H, N)),
    # kept for a scheme that holds no tensor (ALiBi), whose scores never change.
    _per_distance: dict[tuple[torch.dtype, torch.device], tuple[int, Tensor]] | None = None

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

    def index(self, q: Tensor, k: Tensor) -> Tensor:
        """With :attr:`looked_up`: the index ``(..., L_q, L_k)`` of the row each pair reads.

        ``q`` ``(..., L_q)`` and ``k`` ``(..., L_k)`` are int64 positions.
        """
        raise NotImplementedError

    def lookup(self, index: Tensor, dtype: torch.dtype) -> Tensor:
        """With :attr:`looked_up`: the table's rows at ``index``, ``(*index.shape, H)``.

        Rounded once to ``dtype``, and read as the table's module reads them.
        """
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
        if (
            positions is None
            and key_positions is None
            and documents is None
            and batch is None
            and device is None
            and _runtime.fast_path()  # first: the compiler then never reads the table
            and self._per_distance is not None
        ):
            kept = self._kept(query_length, key_length, offset, dtype, causal)
            if kept is not None:
                return kept
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

    def _kept(
        self, lq: object, lk: object, offset: object, dtype: torch.dtype | None, causal: object
    ) -> Tensor | None:
        """The steady call served from the kept table of :meth:`_distances`, else None.

        Int lengths and offset in the domain, a bool ``causal``, a kept dtype and the
        default device, a small result: anything else is the general path's, which
        checks it (the error contract is there, whole).
        """
        lk = lq if lk is None else lk
        dtype = torch.get_default_dtype() if dtype is None else dtype
        if type(dtype) is not torch.dtype:
            return None
        held = self._per_distance.get((dtype, _runtime.default_device()))  # type: ignore[union-attr]
        if (
            held is None
            or not (type(lq) is type(lk) is type(offset) is int)
            or not (causal is True or causal is False)
            or not (lq > 0 and lk > 0 and offset >= POSITION_MIN)
            or max(lk, offset + lq) > POSITION_MAX + 1
            or lq * lk * self.n_heads * dtype.itemsize > BLOCK_BYTES
        ):
            return None
        nearest = -(offset + lq - 1)
        first, table = held
        if not (first <= nearest and nearest + lq + lk - 1 <= first + table.shape[-1]):
            return None
        out = _windows(table, first, nearest, (self.n_heads, lq, lk))
        return self._hidden(out, None, True, ()) if causal and lq > 1 else out

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
        lq, lk = (len(p) if isinstance(p, range) else p.shape[-1] for p in (q, k))
        shape = (*rows, self.n_heads, lq, lk)
        out = self._fill(q, k, docs, shape, out_dtype, where, work, causal)
        return out if device is None else out.to(device)

    def _fill(
        self,
        q: Positions,
        k: Positions,
        docs: Tensor | None,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
        work: torch.device,
        causal: bool,
    ) -> Tensor:
        """The bias ``shape`` on ``device``: the one place its strategy is chosen.

        - By distance: for a :attr:`relative_only` scheme, one row of consecutive
          queries over consecutive keys, where nothing watches or records the work
          (:meth:`_quiet`): each of the ``L_q + L_k - 1`` distances is scored once
          (:meth:`_distances`) and every row of the result is a window of them. The
          peak is the result.
        - By lookup, for a :attr:`looked_up` scheme: the int32 indices of every pair,
          by blocks eagerly, then one :meth:`lookup` of the table (the indices are
          all that autograd keeps).
        - By blocks, when nothing records the operations (eagerly, no autograd graph
          for the parameters, no transform): the temporaries stay near
          :data:`BLOCK_BYTES` and the peak is the result.
        - Otherwise at once, as one expression that autograd and the compiler see
          whole; the size guard then counts the temporaries of every pair.
        """
        rows, (lq, lk) = shape[:-3], shape[-2:]
        what = lambda: f"{self._what} of shape {shape}"  # noqa: E731
        starts = None
        if self.relative_only and lq and lk and not rows and self._quiet():
            starts = consecutive(q, k)
        if starts is not None:
            if math.prod(shape) * dtype.itemsize > BLOCK_BYTES:  # else too small to refuse
                _runtime.allocation(shape, dtype, device, what)
            nearest = starts[1] - (starts[0] + lq - 1)  # the last query's distance to key 0
            first, table = self._distances(nearest, lq + lk - 1, dtype, device, work)
            out = _windows(table, first, nearest, shape)
            if docs is None and not (causal and lq > 1):  # nothing hidden
                return out
            return self._hidden(out, docs, causal, ())
        q, k = as_tensor(q, work), as_tensor(k, work)
        if self.looked_up:
            return self._looked_up(q, k, docs, shape, dtype, device, causal)
        return self._scored(q, k, docs, shape, dtype, device, work, causal)

    def _scored(
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
        """The bias from :meth:`score` pair by pair: by blocks, or at once (see :meth:`_fill`)."""
        lq, lk = shape[-2], shape[-1]
        what = lambda: f"{self._what} of shape {shape}"  # noqa: E731
        params = self.parameters_in(torch.float64, work)
        # Bytes of temporaries per pair of a block: int64 positions and their difference,
        # a bool, and per head the float64 score, two float64 temporaries, the rounding's.
        result = self.n_heads * dtype.itemsize
        per_pair = 25 + self.n_heads * (24 + (40 if dtype.itemsize < 4 else dtype.itemsize))
        # One block holds the whole: at once, and too small for the guard to refuse.
        big = math.prod(shape) // self.n_heads * per_pair > BLOCK_BYTES
        blocks = big and device.type != "meta" and _runtime.fast_path(constants=params)
        if blocks and dtype.itemsize <= 4 and device == work and self._exact_in_float32(q, k):
            params = self.parameters_in(torch.float32, work)  # the same values, faster
        if big:
            _runtime.allocation(
                shape, dtype, device, what, peak=1.0 if blocks else (per_pair + result) / result
            )
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
        n = max(len(q), len(k), 1 if docs is None else len(docs))
        q, k = q.expand(n, lq), k.expand(n, lk)
        dq, docs = (
            (None, None) if docs is None or dq is None else (dq.expand(n, lq), docs.expand(n, lk))
        )
        out = torch.empty((n, *shape[-3:]), dtype=dtype, device=device)
        blocked = by_blocks(out, per_pair, lambda b, i, j: values(slice(b, b + 1), i, j)[0])
        return blocked.view(shape)

    def _looked_up(
        self,
        q: Tensor,
        k: Tensor,
        docs: Tensor | None,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
        causal: bool,
    ) -> Tensor:
        """The bias of a :attr:`looked_up` scheme: every pair's index, then one lookup.

        Eagerly the indices are int32, filled by blocks, and one lookup reads every
        pair (as Hugging Face's T5 ``compute_bias`` does): the peak is the result and
        the indices, with autograd too. Under a transform or the compiler, at once.
        """
        blocks = device.type != "meta" and _runtime.fast_path()
        rows, (lq, lk) = shape[:-3], shape[-2:]
        result = self.n_heads * dtype.itemsize
        temporaries = (4 if blocks else 56) + (1 + result if causal or docs is not None else 0)
        _runtime.allocation(
            shape, dtype, device, lambda: f"{self._what} of shape {shape}",
            peak=(temporaries + result) / result,
        )  # fmt: skip
        if blocks:
            index = torch.empty((*rows, lq, lk), dtype=torch.int32, device=device)
            by_blocks(
                index.view(rows[0] if rows else 1, 1, lq, lk), 48,
                lambda b, i, j: self.index(q[min(b, len(q) - 1), i], k[min(b, len(k) - 1), j]),
            )  # fmt: skip
        else:
            index = self.index(q, k)
            index = index.expand(*rows, lq, lk) if rows else index[0]
        out = self.lookup(index, dtype).movedim(-1, -3)  # (B?, Lq, Lk, H) -> (B?, H, Lq, Lk)
        return self._hidden(out, docs, causal, rows)

    def _quiet(self) -> bool:
        """Whether nothing watches or records the scheme's work, so that a fast path may run.

        :func:`~posenc._runtime.fast_path` over the module's parameters and its
        children (no hook, no ``forward`` replaced on them, no transform, eagerly),
        and no autograd graph to build for the parameters.
        """
        if not (self._parameters or self._modules):
            return _runtime.fast_path()
        tensors = tuple(self.parameters())
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        return not grad and _runtime.fast_path(*tensors, modules=tuple(self.children()))

    def _distances(
        self, first: int, n: int, dtype: torch.dtype, device: torch.device, work: torch.device
    ) -> tuple[int, Tensor]:
        """``(start, table)``: ``table[h, d - start]`` is the bias of distance ``d``.

        It holds the distances ``first .. first + n - 1`` at least: the scores of
        :meth:`score` at ``q = 0``, ``k = d``, in float64, rounded once to ``dtype``,
        ``(H, N)`` on ``device``. A scheme that holds no tensor keeps the table
        (a wider one: a decoding step's row is then a window of the last step's).
        """
        held = None if self._per_distance is None else self._per_distance.get((dtype, device))
        if held is not None and held[0] <= first and first + n <= held[0] + held[1].shape[-1]:
            return held
        keep = not (self._parameters or self._buffers or self._modules)
        lo, hi = first, first + n - 1
        if keep:  # room for as many distances again on either side, within the domain
            lo, hi = max(lo - n, -_FARTHEST), min(hi + n, _FARTHEST)
        params = self.parameters_in(torch.float64, work)
        distances = torch.arange(lo, hi + 1, device=work)
        heads = torch.arange(self.n_heads, device=work).view(-1, 1)
        table = self.score(heads, distances.new_zeros(()), distances, *params)
        table = round_once(table, dtype) if table.dtype == torch.float64 else table.to(dtype)
        table = table.to(device).contiguous()
        if keep:
            self._per_distance = {**(self._per_distance or {}), (dtype, device): (lo, table)}
        return lo, table

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
        if not causal and docs is None:
            return out
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
        if _runtime.fast_path(constants=(out,)) and mask.dim() <= out.dim():
            return out.masked_fill_(mask, -math.inf)
        return out.masked_fill(mask, -math.inf)
