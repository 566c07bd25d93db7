"""Adding position to token vectors: :class:`PositionalEncoding` and position helpers.

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

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional

from . import _checks, _distributed, _runtime
from ._tables import DerivedTables
from .positions import Positions, _resolve, resolve
from .sinusoid import LAYOUTS, Layout, sinusoidal_table

__all__ = ["LearnedPositionalEmbedding", "PositionalEncoding"]


class PositionalEncoding(DerivedTables):
    """Adds the sinusoidal encoding of each position, then applies dropout.

    ``PositionalEncoding(d_model, dropout, max_len)`` takes the arguments of the
    Annotated Transformer's module and gives the same outputs, within float32
    rounding, without its defects: the table is computed in float64 and rounded
    once, the output keeps the input's dtype, any ``d_model >= 1`` works,
    sequences longer than ``max_len`` get their rows computed on the fly, and
    the table is never written into checkpoints.

    By default token ``t`` of each sequence sits at position ``t``. ``offset``
    shifts that (decoding one token at a time with a cache), and ``positions``
    gives every token its own (padding, packed sequences).

    Args:
        d_model: Width of the token vectors, D.
        dropout: Dropout probability applied to the sum, in ``[0, 1)``. The
            paper uses 0.1.
        max_len: Number of positions precomputed in :attr:`pe`. Longer inputs
            still work: their rows are computed on the fly, with the same values.
        base: Base of the geometric progression of wavelengths.
        layout: Column order, ``"interleaved"`` (the paper's) or
            ``"concatenated"``; see :func:`~posenc.sinusoidal_table`.
        endpoint: Frequency spacing; see :func:`~posenc.inverse_frequencies`.

    Attributes:
        pe: The precomputed table, shape ``(1, max_len, d_model)``, in
            torch's default dtype when built (float32 unless
            :func:`torch.set_default_dtype` changed it, as for torch's own
            modules), then in the dtype the module is cast to. A
            non-persistent buffer: it follows
            ``.to()`` (derived again, not converted, when the dtype or device
            changes) but is not in ``state_dict()``, and there are no
            parameters. It serves inputs of its own dtype; others get their
            rows computed from float64, rounded once to their dtype.

    Shapes:
        - x: ``(B, L, D)`` or, unbatched, ``(L, D)``; any floating dtype
        - offset: int, or ``(B,)`` integer tensor
        - positions: ``(L,)`` or ``(B, L)`` integer tensor
        - output: same shape and dtype as ``x``

        B is the batch size, L the sequence length, D = ``d_model``.

    Example:
        The buffer holds ``max_len`` rows and nothing is trained:

        >>> from posenc import PositionalEncoding
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
        >>> x = torch.zeros(6, 8)
        >>> torch.equal(short(x)[4:], PositionalEncoding(8)(x)[4:])
        True

        Decoding one token at a time gives the rows of the whole sequence:

        >>> x = torch.randn(2, 5, 8)
        >>> steps = [short(x[:, t : t + 1], offset=t) for t in range(5)]
        >>> torch.equal(torch.cat(steps, dim=1), short(x))
        True
    """

    pe: Tensor
    _table_names = ("pe",)

    def __init__(
        self,
        d_model: int,
        dropout: float = 0.0,
        max_len: int = 5000,
        *,
        base: float = 10_000.0,
        layout: Layout = "interleaved",
        endpoint: bool = False,
    ) -> None:
        super().__init__()
        self.d_model: int = _checks.positive_int("d_model", d_model)
        self.max_len: int = _checks.positive_int("max_len", max_len)
        self.base: float = _checks.base(base)
        self.layout: Layout = _checks.choice("layout", layout, LAYOUTS)
        self.endpoint: bool = _checks.flag("endpoint", endpoint)
        self.dropout: nn.Dropout = nn.Dropout(p=_checks.dropout(dropout))
        self._register_tables(
            "choose a smaller max_len (longer inputs still work: rows past max_len are "
            "computed on the fly)"
        )

    def _table_shapes(self) -> tuple[tuple[int, ...], ...]:
        return ((1, self.max_len, self.d_model),)

    def _derive(self, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, ...]:
        return (self._sinusoid(self.max_len, dtype, device)[None],)

    def _describe(self) -> str:
        return f"PositionalEncoding(d_model={self.d_model}, max_len={self.max_len})'s table"

    def reset_parameters(self) -> None:
        """Recompute :attr:`pe` in place, in its current dtype and device.

        There are no parameters; the name is the one that initialisation code
        calls. Moving or casting the module (``.to()``, ``.half()``,
        ``.to_empty()``) recomputes the table by itself: it is derived data, so
        it is derived again rather than converted, and ``.half().float()``
        leaves a float32 table, not a float16 one in float32 clothes.

        Example:
            >>> from posenc import PositionalEncoding
            >>> import torch
            >>> with torch.device("meta"):
            ...     pe = PositionalEncoding(8, max_len=16)
            >>> pe = pe.to_empty(device="cpu")  # uninitialised memory, then recomputed
            >>> torch.equal(pe.pe, PositionalEncoding(8, max_len=16).pe)
            True
            >>> torch.equal(pe.half().float().pe, pe.pe)
            True
        """
        super().reset_parameters()

    def _sinusoid(
        self, positions: int | Tensor, dtype: torch.dtype, device: torch.device
    ) -> Tensor:
        return sinusoidal_table(
            positions,
            self.d_model,
            base=self.base,
            layout=self.layout,
            endpoint=self.endpoint,
            dtype=dtype,
            device=device,
        )

    def extra_repr(self) -> str:
        """The configuration, shown in the module's repr."""
        parts = [f"d_model={self.d_model}", f"max_len={self.max_len}"]
        if self.base != 10_000.0:
            parts.append(f"base={self.base:g}")
        if self.layout != "interleaved":
            parts.append(f"layout={self.layout!r}")
        if self.endpoint:
            parts.append("endpoint=True")
        return ", ".join(parts)

    def encoding(
        self,
        length: int,
        *,
        offset: int | Tensor = 0,
        positions: Tensor | None = None,
        batch: int | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> Tensor:
        """The rows that :meth:`forward` adds to an input of ``length`` tokens, as a new tensor.

        The result never shares memory with :attr:`pe`: writing into it changes
        nothing in the module.

        Args:
            length: Number of tokens, L.
            offset: Position of the first token: an int, or one per sequence.
            positions: The position of every token; not with ``offset``.
            batch: Batch size B of the input, to check per-sequence ``offset``
                and ``positions`` against; None for an unbatched input.
            dtype: Floating dtype of the result (default: the module's, that of
                :attr:`pe`; rows for another dtype are computed from float64 and
                rounded once to it).
            device: Device of the result (default: that of :attr:`pe`).

        Returns:
            ``(L, D)`` when every sequence shares its positions, else ``(B, L, D)``.

        Raises:
            TypeError: ``offset`` or ``positions`` is not integer.
            ValueError: both are given, or a shape does not match ``length`` and
                ``batch``.

        Example:
            >>> from posenc import PositionalEncoding
            >>> pe = PositionalEncoding(4)
            >>> rows = pe.encoding(2, offset=1)
            >>> rows
            tensor([[ 0.8415,  0.5403,  0.0100,  0.9999],
                    [ 0.9093, -0.4161,  0.0200,  0.9998]])
            >>> rows.zero_().data_ptr() != pe.pe.data_ptr(), pe.pe[0, 1, 0].item() != 0
            (True, True)
        """
        length = _checks.nonnegative_int("length", length)
        dtype = _checks.floating_dtype("dtype", self._dtype if dtype is None else dtype)
        device = self.pe.device if device is None else torch.device(device)
        at = resolve(length, offset=offset, positions=positions, batch=batch)
        (rows,) = self._unshared(self._rows(at, dtype, device))
        return rows

    def add_encoding_(self, out: Tensor, at: Positions) -> Tensor:
        """Add the rows at ``at`` into ``out``, in place, and return ``out``.

        The sum :meth:`forward` computes, ``out + PE[positions]`` rounding for
        rounding, written into ``out`` instead of a new tensor: what a layer that
        owns a fresh ``out`` (:class:`~posenc.TokenAndPositionEmbedding`'s lookup)
        uses to add the encoding without a second ``(B, L, D)`` allocation. The rows
        come from :attr:`pe` where it holds them for ``out``'s dtype, else from
        float64, rounded once; the table is read, never handed out. No dropout.

        Args:
            out: Token vectors, ``(B, L, D)`` or ``(L, D)``, written in place.
            at: The positions of its L tokens, as
                :func:`~posenc.positions.resolve` returns them (checked there).

        Returns:
            ``out``.

        Shapes:
            - out: ``(B, L, D)`` or ``(L, D)``; any floating dtype
            - output: ``out`` itself

            B is the batch size, L the sequence length, D = ``d_model``.

        Raises:
            ValueError: the last dimension of ``out`` is not ``d_model``, or its
                length is not ``at.length``.

        Example:
            >>> import torch
            >>> from posenc import PositionalEncoding
            >>> from posenc.positions import resolve
            >>> pe = PositionalEncoding(4)
            >>> x = torch.zeros(1, 2, 4)
            >>> pe.add_encoding_(x, resolve(2, offset=1)) is x
            True
            >>> torch.equal(x[0], pe.encoding(2, offset=1))
            True
        """
        shape = out.shape
        if len(shape) < 2 or shape[-1] != self.d_model or shape[-2] != at.length:
            raise ValueError(
                f"out must have shape (B, L, {self.d_model}) or (L, {self.d_model}) with "
                f"L = {at.length} (d_model and the positions' length), got {tuple(shape)}"
            )
        start, table = at.start, self._buffers["pe"]
        if (  # the decoding step's case: rows the table holds in out's dtype, one view
            table is not None
            and start is not None
            and table.dtype is out.dtype
            and 0 <= start <= self.max_len - at.length
            and table.device == out.device
        ):
            return out.add_(table[0, start : start + at.length])
        return out.add_(self._rows(at, out.dtype, out.device))

    def _rows(self, at: Positions, dtype: torch.dtype, device: torch.device) -> Tensor:
        """The table's rows at ``at``, possibly a view of :attr:`pe`: read, never written.

        :attr:`pe` holds the table rounded once to its own dtype (see ``_apply``), so
        it serves that dtype only, and bfloat16 and float16 have tables of their own
        (``DerivedTables._table_for``); other dtypes, positions it does not hold, and
        tensor positions that cannot be range-checked for free are computed from
        float64, with the same values.
        """
        tables = self._table_for(dtype, device) if at.within(self.max_len) else None
        if tables is not None:
            return at.take(tables[0][0])
        return self._sinusoid(at.tensor(device), dtype, device)

    @_distributed.sequence_input(-2)
    def forward(
        self, x: Tensor, *, offset: int | Tensor = 0, positions: Tensor | None = None
    ) -> Tensor:
        """Return ``dropout(x + PE[positions])``.

        Args:
            x: Token vectors, ``(B, L, D)`` or ``(L, D)``.
            offset: Position of the first token, as an int for all sequences or
                a ``(B,)`` integer tensor, one per sequence. Token ``t`` then
                sits at ``offset + t``. Any integer: negative positions are the
                sinusoid's too.
            positions: Integer tensor ``(L,)`` or ``(B, L)`` (B may be 1) with
                the position of every token, e.g. from
                :func:`~posenc.positions_from_mask`. Any integers, also past
                ``max_len``; any integer dtype.

        Returns:
            Tensor of the shape and dtype of ``x``.

        Raises:
            TypeError: ``x`` is not a floating tensor, or ``offset`` or
                ``positions`` is not integer.
            ValueError: ``x`` is not 2-D or 3-D, its last dimension is not
                ``d_model``, both ``offset`` and ``positions`` are given, or
                their shapes do not match ``x``.
        """
        x = _checks.features(x, self.d_model)
        batch = x.shape[0] if x.dim() == 3 else None
        at = resolve(x.shape[-2], offset=offset, positions=positions, batch=batch, device=x.device)
        out: Tensor = self.dropout(x + self._rows(at, x.dtype, x.device))
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
            problem = _check_stored_table(
                stored,
                self.d_model,
                lambda n: self._sinusoid(n, torch.float64, torch.device("cpu")),
                self.extra_repr(),
            )
            if problem:
                error_msgs.append(f"{prefix}pe: {problem}")
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


def _check_stored_table(
    stored: object, d_model: int, exact_table: Callable[[int], Tensor], described: str
) -> str:
    """Why a table found in a checkpoint is not the module's sinusoid, or ``""`` when it is.

    ``exact_table(n)`` is the module's first ``n`` rows in float64 on the CPU;
    ``described`` its configuration, for the message.
    """
    if not isinstance(stored, Tensor) or not stored.is_floating_point():
        return f"expected a floating tensor holding the sinusoidal table, got {stored!r:.60}"
    if stored.dim() != 3 or stored.shape[0] != 1 or stored.shape[2] != d_model:
        return (
            f"expected a table of shape (1, max_len, {d_model}) for d_model={d_model}, "
            f"got shape {tuple(stored.shape)}"
        )
    dtype = stored.dtype
    stored = stored.detach().to("cpu", torch.float64)
    exact = exact_table(stored.shape[1])
    # Tables computed in float32 (the Annotated Transformer's) drift from the exact
    # values by about 1e-7 per position; a table saved in a narrower dtype is also
    # rounded to it, by up to one unit in its last place (bfloat16: 2**-8 near 1). A
    # table of another convention (layout, base, learned) differs by O(1).
    pos = torch.arange(stored.shape[1], dtype=torch.float64).unsqueeze(-1)
    ulp = torch.finfo(dtype).eps * exact.abs().clamp(min=torch.finfo(dtype).tiny)
    tolerance = 1e-3 + 4e-7 * pos + ulp
    bad = ~((stored[0] - exact).abs() <= tolerance)  # NaN counts as bad
    if bool(bad.any()):
        row, col = divmod(int(bad.flatten().nonzero()[0]), d_model)
        return (
            "the stored table is not the sinusoidal encoding this module computes "
            f"({described}): at position {row}, column {col} it holds "
            f"{stored[0, row, col].item():.6g} instead of {exact[row, col].item():.6g}"
        )
    return ""


class LearnedPositionalEmbedding(nn.Module):
    """Adds a trained vector for each position, then applies dropout.

    Instead of a formula, a table with one row per position, learned with the
    rest of the model: BERT's ``position_embeddings``, GPT-2's ``wpe``.
    Vaswani et al. (2017, §3.5 and Table 3, row E) found it works about as well
    as the sinusoid, and kept the sinusoid because it may extrapolate to
    sequences longer than those seen in training. A learned table cannot: it
    has no row for a position past ``max_len``, and asking for one is an
    :class:`IndexError`.

    The ``forward`` arguments are those of :class:`~posenc.PositionalEncoding`:
    ``offset`` for decoding with a cache (GPT-2's ``past_length``),
    ``positions`` for padding and packing.

    Checkpoints: the table is the parameter :attr:`weight`. State dicts that
    name it ``position_embeddings.weight`` (BERT, RoBERTa) or ``wpe.weight``
    (GPT-2) load too, e.g. ``{"wpe.weight": sd["transformer.wpe.weight"]}``.
    RoBERTa numbers the real tokens from ``padding_idx + 1`` (fairseq's
    ``make_positions``): with its table, pass
    ``positions=positions_from_mask(mask) + padding_idx + 1``.

    Args:
        max_len: Number of positions the table holds, ``0 .. max_len - 1``.
        d_model: Width of the token vectors, D.
        dropout: Dropout probability applied to the sum, in ``[0, 1)``.

    Attributes:
        weight: The table, a parameter ``(max_len, d_model)``, initialised
            from N(0, 1) as :class:`torch.nn.Embedding` is. Casting the
            module converts it, as any trained weight.

    Shapes:
        - x: ``(B, L, D)`` or, unbatched, ``(L, D)``; any floating dtype
        - offset: int, or ``(B,)`` integer tensor
        - positions: ``(L,)`` or ``(B, L)`` integer tensor
        - output: same shape and dtype as ``x``

    Example:
        >>> from posenc import LearnedPositionalEmbedding
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> learned = LearnedPositionalEmbedding(max_len=8, d_model=4)
        >>> learned
        LearnedPositionalEmbedding(
          max_len=8, d_model=4
          (dropout): Dropout(p=0.0, inplace=False)
        )
        >>> y = learned(torch.zeros(2, 3, 4))
        >>> torch.equal(y[1], learned.weight[:3])
        True
        >>> learned(torch.zeros(1, 4), offset=7).shape  # the last row
        torch.Size([1, 4])
        >>> learned(torch.zeros(2, 4), offset=7)
        Traceback (most recent call last):
        ...
        IndexError: position 8 is outside the learned table of max_len=8: ...
    """

    def __init__(self, max_len: int, d_model: int, *, dropout: float = 0.0) -> None:
        super().__init__()
        self.max_len: int = _checks.positive_int("max_len", max_len)
        self.d_model: int = _checks.positive_int("d_model", d_model)
        _runtime.allocation(
            (max_len, d_model),
            torch.get_default_dtype(),  # the dtype torch.empty gives the weight below
            _runtime.default_device(),
            lambda: f"LearnedPositionalEmbedding(max_len={max_len}, d_model={d_model})'s table",
        )
        self.weight: nn.Parameter = nn.Parameter(torch.empty(self.max_len, self.d_model))
        self.dropout: nn.Dropout = nn.Dropout(p=_checks.dropout(dropout))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw :attr:`weight` again from N(0, 1), as :class:`torch.nn.Embedding` does."""
        nn.init.normal_(self.weight)

    def extra_repr(self) -> str:
        """The configuration, shown in the module's repr."""
        return f"max_len={self.max_len}, d_model={self.d_model}"

    def rows(self, positions: Tensor) -> Tensor:
        """The table's rows at ``positions``, as :class:`torch.nn.Embedding` looks them up.

        GPT-2 calls its ``wpe(position_ids)`` and adds the rows itself; so does
        ``forward`` on an integer tensor, which makes this module a drop-in for
        ``wpe`` (its key, ``weight``, is ``wpe``'s). No dropout: the model applies
        its own to the sum.

        Args:
            positions: Integer tensor of any shape, e.g. Hugging Face's
                ``position_ids`` ``(1, L)`` or ``(B, L)``; each in ``[0, max_len)``.

        Returns:
            ``(*positions.shape, d_model)``, in the table's dtype, differentiable
            with respect to :attr:`weight`.

        Raises:
            TypeError: ``positions`` is not an integer tensor.
            IndexError: a position lies outside ``[0, max_len)`` (checked where
                ``forward`` checks it).

        Example:
            >>> import torch
            >>> from posenc import LearnedPositionalEmbedding
            >>> learned = LearnedPositionalEmbedding(max_len=8, d_model=4)
            >>> ids = torch.tensor([[0, 1, 2]])                  # GPT-2's position_ids
            >>> torch.equal(learned(ids), learned.weight[:3][None])
            True
        """
        index = _resolve.as_int64("positions", positions, "an integer tensor")
        _checks.learned_positions(index, self.max_len)
        return functional.embedding(
            _resolve.values_to("positions", index, self.weight.device), self.weight
        )

    @_distributed.sequence_input(-2, position_ids=True)
    def forward(
        self, x: Tensor, *, offset: int | Tensor = 0, positions: Tensor | None = None
    ) -> Tensor:
        """Return ``dropout(x + weight[positions])``; on integer ``x``, :meth:`rows`.

        Args:
            x: Token vectors, ``(B, L, D)`` or ``(L, D)``; or an integer tensor of
                positions, whose rows are returned (:meth:`rows`: GPT-2's
                ``wpe(position_ids)``), without ``offset`` or ``positions``.
            offset: Position of the first token, as an int for all sequences or
                a ``(B,)`` integer tensor, one per sequence.
            positions: Integer tensor ``(L,)`` or ``(B, L)`` (B may be 1) with the
                position of every token, each in ``[0, max_len)``.

        Returns:
            Tensor of the shape and dtype of ``x``: the rows are rounded to
            ``x``'s dtype before the sum. For integer ``x``, its rows.

        Raises:
            TypeError: ``x`` is not a floating tensor, or ``offset`` or
                ``positions`` is not integer.
            ValueError: ``x`` is not 2-D or 3-D, its last dimension is not
                ``d_model``, both ``offset`` and ``positions`` are given, or
                their shapes do not match ``x``.
            IndexError: a position lies outside ``[0, max_len)``. Checked for
                int offsets always and for CPU tensors in eager mode; on an
                accelerator or under :func:`torch.compile` the embedding
                kernel's own bounds check stands (a device-side assert on CUDA).
        """
        # Integer x: positions, as nn.Embedding takes them (with offset/positions: refused).
        # Floating x: always token vectors (a floating tensor of ids is not read as ids).
        if isinstance(x, Tensor):
            _check_ids_or_features(x, offset, positions, self.d_model)
            if not (x.is_floating_point() or x.is_complex()):
                return self.rows(x)
        x = _checks.features(x, self.d_model)
        batch = x.shape[0] if x.dim() == 3 else None
        at = resolve(x.shape[-2], offset=offset, positions=positions, batch=batch, device=x.device)
        if at.start is not None:
            first, last = at.start, at.start + at.length - 1
            if at.length and (first < 0 or last >= self.max_len):
                _checks.learned_position_error(first if first < 0 else last, self.max_len)
            rows = self.weight[first : first + at.length]
        else:
            index = at.tensor(self.weight.device)
            _checks.learned_positions(index, self.max_len)
            rows = functional.embedding(index, self.weight)
        out: Tensor = self.dropout(x + rows.to(x.dtype))
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
        # BERT and RoBERTa name the table "position_embeddings.weight", GPT-2 "wpe.weight".
        if prefix + "weight" not in state_dict:
            for name in _PEER_KEYS:
                if prefix + name in state_dict:
                    state_dict[prefix + "weight"] = state_dict.pop(prefix + name)
                    break
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


_PEER_KEYS = ("position_embeddings.weight", "wpe.weight")


def _check_ids_or_features(x: Tensor, offset: object, positions: object, d_model: int) -> None:
    """What ``LearnedPositionalEmbedding.forward`` reads ``x`` as: by dtype, never silently.

    An integer ``x`` is position ids (``wpe(position_ids)``), which take no ``offset`` or
    ``positions``; a bool ``x`` is neither; a floating ``x`` is token vectors, and one whose
    shape cannot be token vectors is refused with the conversion that reads it as ids.
    """
    plain = (
        positions is None and not isinstance(offset, Tensor) and _checks.as_integer(offset) == 0
    )
    if x.dtype == torch.bool:
        raise TypeError(
            "x must be token vectors (a floating tensor (..., L, D)) or position ids (an "
            "integer tensor), got dtype torch.bool: for ids, convert with x.long()"
        )
    if x.is_complex():
        return  # refused as token vectors, by dtype
    if x.is_floating_point():
        # The shapes position ids come in, (L,) and (B, L), read as token vectors: refused
        # with the conversion to ids. (A (B, L) of ids with L == d_model is token vectors:
        # the documented reading of a floating x.)
        if x.dim() == 1 or (x.dim() == 2 and x.shape[-1] != d_model):
            raise ValueError(
                f"x is a {x.dtype} tensor of shape {tuple(x.shape)}, read as token vectors "
                f"(B, L, D) or (L, D): its last dimension must be d_model={d_model}. Position "
                f"ids are an integer tensor: pass x.long() for the rows at those positions"
            )
        return
    if not plain:
        given, fix = (
            ("positions=", "pass the ids alone")
            if positions is not None
            else ("offset=", "add the offset to the ids (x + offset)")
        )
        raise ValueError(
            f"x is an integer tensor, which forward reads as position ids (the rows at "
            f"x, as GPT-2's wpe(position_ids)), and {given} was given too: the ids are the "
            f"positions already. For their rows, {fix}; to add the rows at {given} to "
            f"token vectors, pass those (a floating tensor) as x"
        )
