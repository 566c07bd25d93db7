"""From token ids to vectors: :class:`Embeddings` and :class:`TokenAndPositionEmbedding`.

A lookup table turns each token id into a learned ``d_model``-wide vector,
which is then multiplied by ``√d_model`` (Vaswani et al., 2017, §3.4). PyTorch
initialises the table from N(0, 1); after the scale the entries have a standard
deviation near ``√512 ≈ 22.6`` and the ±1 sinusoid added next does not drown them.

Seeded with ``torch.manual_seed(0)``, three tokens:

>>> import math
>>> import torch
>>> from posenc import Embeddings
>>> _ = torch.manual_seed(0)
>>> emb = Embeddings(d_model=512, vocab=1000)
>>> tokens = torch.tensor([[17, 42, 7]])
>>> e = emb(tokens)
>>> tuple(e.shape)
(1, 3, 512)
>>> f"{emb.lut(tokens).std():.3f}"  # the table's raw entries
'0.980'
>>> f"× {math.sqrt(512):.1f} → {e.std():.3f}"
'× 22.6 → 22.181'
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional

from . import _checks, _distributed, _runtime
from .positional import PositionalEncoding
from .positions import Positions, resolve
from .sinusoid import Layout

__all__ = ["Embeddings", "TokenAndPositionEmbedding"]


class Embeddings(nn.Module):
    """Looks up each token id and scales the vector by ``√d_model``.

    The arguments, the attribute ``lut`` and the outputs are those of the
    Annotated Transformer's ``Embeddings``, so code and checkpoints written for
    it work unchanged; bad ids raise errors that say what is wrong.

    Args:
        d_model: Width of the vectors, D.
        vocab: Number of token ids; valid ids are ``0 .. vocab-1``.
        padding_idx: Optional id whose vector is zero and receives no gradient
            (see :class:`torch.nn.Embedding`).

    Attributes:
        lut: The lookup table, a :class:`torch.nn.Embedding` ``(vocab, d_model)``.
        scale: ``math.sqrt(d_model)``.

    Shapes:
        - ids: ``(*)``, integer, typically ``(B, L)``
        - output: ``(*, D)``, the dtype of ``lut.weight``

        B is the batch size, L the sequence length, D = ``d_model``.

    Example:
        >>> from posenc import Embeddings
        >>> import torch
        >>> from posenc import PositionalEncoding
        >>> emb = Embeddings(512, 10_000)
        >>> x = emb(torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]))
        >>> x.shape
        torch.Size([2, 4, 512])
        >>> PositionalEncoding(512, max_len=4)(x).shape
        torch.Size([2, 4, 512])
        >>> emb
        Embeddings(
          d_model=512, vocab=10000, scale=22.627
          (lut): Embedding(10000, 512)
        )
        >>> emb(torch.tensor([10_000]))
        Traceback (most recent call last):
        ...
        IndexError: token id 10000 is out of range for vocab=10000: ids must be in [0, 10000)
    """

    def __init__(self, d_model: int, vocab: int, *, padding_idx: int | None = None) -> None:
        super().__init__()
        self.d_model: int = _checks.positive_int("d_model", d_model)
        self.vocab: int = _checks.positive_int("vocab", vocab)
        self.scale: float = math.sqrt(self.d_model)
        padding_idx = _checks.padding_idx(padding_idx, self.vocab)
        _runtime.allocation(
            (vocab, d_model),
            torch.get_default_dtype(),  # the dtype nn.Embedding gives its weight
            _runtime.default_device(),
            lambda: f"Embeddings(d_model={d_model}, vocab={vocab})'s table",
            "choose a smaller vocab or d_model",
        )
        self.lut: nn.Embedding = nn.Embedding(self.vocab, self.d_model, padding_idx=padding_idx)

    def extra_repr(self) -> str:
        """The configuration, shown in the module's repr."""
        return f"d_model={self.d_model}, vocab={self.vocab}, scale={self.scale:.5g}"

    def forward(self, ids: Tensor) -> Tensor:
        """Return ``lut(ids) * √d_model``.

        Args:
            ids: Token ids, an integer tensor of any shape.

        Returns:
            Tensor of shape ``(*ids.shape, d_model)``.

        Raises:
            TypeError: ``ids`` is a float or bool tensor.
            ValueError: ``ids`` is on another device than the table.
            IndexError: an id is negative or ``>= vocab`` (checked for CPU
                tensors in eager mode; elsewhere the embedding kernel checks).
        """
        return self._lookup(ids) * self.scale

    def _lookup(self, ids: Tensor) -> Tensor:
        """``lut(ids)``, unscaled, after the checks: the step both input layers share."""
        ids = _checks.token_ids(ids, self.vocab)
        _checks.same_device("token ids", ids, self.lut.weight.device, "the embedding table")
        out: Tensor = self.lut(ids)
        return out


class TokenAndPositionEmbedding(nn.Module):
    """Token ids to position-aware vectors in one module: embeddings, then their positions.

    ``TokenAndPositionEmbedding(d_model, vocab, dropout, max_len)`` computes
    ``PositionalEncoding(Embeddings(ids))`` with the same values, options and
    errors as the two modules, in fewer passes over memory: it scales and adds
    in place, into the lookup's fresh output. When a hook is registered on any
    child (``embeddings``, ``embeddings.lut``, ``positional``,
    ``positional.dropout``) or globally, when a child's ``forward`` is replaced
    on its instance (as accelerate's ``add_hook_to_module`` does), and under
    :func:`torch.compile` or a :mod:`torch.func` transform, it calls the two
    children one after the other instead, so every hook and every replaced
    ``forward`` sees what it would see on the unfused pair. A ``padding_idx``
    set on ``embeddings.lut`` later is read as :class:`torch.nn.Embedding`
    reads it (-1 is the last row).

    Checkpoints: its state dict holds ``embeddings.lut.weight`` only. One saved
    from the Annotated Transformer's ``nn.Sequential(Embeddings(d_model, vocab),
    PositionalEncoding(d_model, dropout))`` loads as it is: ``0.lut.weight`` is
    read as ``embeddings.lut.weight``, and ``1.pe`` (the table, of any
    ``max_len``) is checked against this module's sinusoid and dropped. A
    checkpoint that holds a weight under both names (``0.lut.weight`` and
    ``embeddings.lut.weight``) is ambiguous and refused.

    Args:
        d_model: Width of the vectors, D.
        vocab: Number of token ids; valid ids are ``0 .. vocab-1``.
        dropout: Dropout probability applied to the sum, in ``[0, 1)``.
        max_len: Number of positions precomputed; longer inputs still work.
        padding_idx: Optional id whose vector is zero and receives no gradient.
        base: Base of the geometric progression of wavelengths.
        layout: Column order, ``"interleaved"`` or ``"concatenated"``.
        endpoint: Frequency spacing; see :func:`~posenc.inverse_frequencies`.

    Attributes:
        embeddings: The :class:`Embeddings` (its ``lut`` holds the weights).
        positional: The :class:`~posenc.PositionalEncoding` (table and dropout).

    Shapes:
        - ids: ``(B, L)`` or, unbatched, ``(L,)``; integer
        - offset: int, or ``(B,)`` integer tensor
        - positions: ``(L,)`` or ``(B, L)`` integer tensor
        - output: ``(B, L, D)`` or ``(L, D)``, the dtype of the embedding weights

    Example:
        >>> from posenc import TokenAndPositionEmbedding
        >>> import torch
        >>> from posenc import PositionalEncoding
        >>> layer = TokenAndPositionEmbedding(d_model=16, vocab=100)
        >>> ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
        >>> unfused = PositionalEncoding(16)(layer.embeddings(ids))
        >>> torch.equal(layer(ids), unfused)
        True
        >>> layer(ids[:, 2:], offset=2).shape  # the third token of each, decoded alone
        torch.Size([2, 1, 16])
    """

    def __init__(
        self,
        d_model: int,
        vocab: int,
        dropout: float = 0.0,
        max_len: int = 5000,
        *,
        padding_idx: int | None = None,
        base: float = 10_000.0,
        layout: Layout = "interleaved",
        endpoint: bool = False,
    ) -> None:
        super().__init__()
        self.embeddings: Embeddings = Embeddings(d_model, vocab, padding_idx=padding_idx)
        self.positional: PositionalEncoding = PositionalEncoding(
            d_model, dropout, max_len, base=base, layout=layout, endpoint=endpoint
        )

    @_distributed.sequence_input(-1, ids=True)
    def forward(
        self, ids: Tensor, *, offset: int | Tensor = 0, positions: Tensor | None = None
    ) -> Tensor:
        """Return ``dropout(lut(ids) * √d_model + PE[positions])``.

        Args:
            ids: Token ids, ``(B, L)`` or ``(L,)``.
            offset: Position of the first token: an int, or a ``(B,)`` tensor.
            positions: Position of every token, ``(L,)`` or ``(B, L)``.

        Returns:
            Tensor of shape ``(*ids.shape, d_model)``.

        Raises:
            TypeError: ``ids`` is a float or bool tensor, or ``offset`` or
                ``positions`` is not integer.
            IndexError: an id is negative or ``>= vocab``.
            ValueError: ``ids`` is not 1-D or 2-D, both ``offset`` and
                ``positions`` are given, or their shapes do not match ``ids``;
                ``ids``, ``offset`` or ``positions`` is on another device than
                the table; a position lies outside the domain ``|p| < 2**62``.
        """
        if (
            type(ids) is Tensor
            and ids.dtype is torch.int64
            and positions is None
            and type(offset) is int
            and ids.dim() == 2
            and ids.is_cpu
        ):
            fast = self._step(ids, offset)
            if fast is not None:
                return fast
        ids = _checks.integer_tensor("token ids", ids, _checks.TOKEN_IDS)
        if ids.dim() not in (1, 2):
            raise ValueError(
                f"token ids must have shape (B, L) or (L,), got {ids.dim()}-D "
                f"shape {tuple(ids.shape)}"
            )
        found = self._children()
        tensors = [t for t in (ids, offset, positions) if isinstance(t, Tensor)]
        if found is None or not _runtime.fast_path(
            *tensors, found[1].weight, modules=found
        ):  # the two children, called as modules: hooks and replaced forwards see them
            plain: Tensor = self.positional(
                self.embeddings(ids), offset=offset, positions=positions
            )
            return plain
        emb, lut, pe, drop = found
        batch = ids.shape[0] if ids.dim() == 2 else None
        weight = lut.weight
        _checks.same_device("token ids", ids, weight.device, "the embedding table")
        at = resolve(
            ids.shape[-1], offset=offset, positions=positions, batch=batch, device=ids.device
        )
        # The children's calls without their module machinery (fast_path: no hook, no
        # forward replaced): the lookup nn.Embedding's forward makes, the dropout nn.Dropout's.
        vectors = functional.embedding(
            _checks.token_ids(ids, emb.vocab), weight, lut.padding_idx, lut.max_norm,
            lut.norm_type, lut.scale_grad_by_freq, lut.sparse,
        )  # fmt: skip
        # The lookup's result is a fresh tensor that nothing else holds (no hook could
        # see it) and that the embedding backward does not read: scaling and adding in
        # place give the unfused pair's values, rounding for rounding, without two
        # more (B, L, D) allocations.
        out = pe.add_encoding_(vectors.mul_(emb.scale), at)
        if drop.training and drop.p > 0:
            out = functional.dropout(out, drop.p, True, drop.inplace)
        return out

    def _step(self, ids: Tensor, offset: int) -> Tensor | None:
        """The fused path for plain int64 CPU ``(B, L)`` ids at an int offset, or None.

        The decoding step's case, with the checks of :meth:`forward` made on the
        children's public attributes. The range of the ids is left to the lookup
        kernel, which refuses an id outside ``[0, vocab)`` on the CPU; then, and in
        every case not covered here, this returns None and :meth:`forward` takes the
        full path, which raises the error that names the id. Same operations, so
        the same values, as the full path.
        """
        found = self._children()
        if found is None:
            return None
        emb, lut, pe, drop = found
        length = ids.shape[1]
        weight = _runtime.registered(lut, "weight")
        padding = _kernel_padding_idx(lut.padding_idx, weight.shape[0])
        if (
            padding is None
            or lut.max_norm is not None  # renormalises rows in place before the lookup
            or offset < 0
            or offset + length > pe.max_len
            or not weight.is_cpu
            or not _runtime.fast_path(ids, weight, modules=found)
        ):
            return None
        try:  # the kernel functional.embedding calls, with its padding_idx already read
            vectors = torch.embedding(weight, ids, padding, lut.scale_grad_by_freq, lut.sparse)
        except IndexError:
            return None  # an id out of range: the full path names it
        # In place, as in forward (see there): the lookup's output is fresh.
        out = pe.add_encoding_(vectors.mul_(emb.scale), Positions(length, offset))
        if drop.training and drop.p > 0:
            out = functional.dropout(out, drop.p, True, drop.inplace)
        return out

    def _children(
        self,
    ) -> tuple[Embeddings, nn.Embedding, PositionalEncoding, nn.Dropout] | None:
        """The four children when each is of its exact class; else None.

        The children are the embeddings, its lookup, the positional encoding and its
        dropout. A subclass of any may compute something else in its ``forward``: then
        the fused paths do not stand in for it. Hooks and a ``forward`` replaced on an
        instance are :func:`~posenc._runtime.fast_path`'s to see.
        """
        children = self._modules  # this module's own, without nn.Module.__getattr__
        emb, pe = children["embeddings"], children["positional"]
        if type(emb) is not Embeddings or type(pe) is not PositionalEncoding:
            return None
        lut, drop = _runtime.registered(emb, "lut"), _runtime.registered(pe, "dropout")
        if type(lut) is not nn.Embedding or type(drop) is not nn.Dropout:
            return None
        return emb, lut, pe, drop

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
        # nn.Sequential(Embeddings, PositionalEncoding) names its children "0" and "1".
        for old, new in (("0.", "embeddings."), ("1.", "positional.")):
            for key in [k for k in state_dict if k.startswith(prefix + old)]:
                renamed = prefix + new + key[len(prefix + old) :]
                if renamed in state_dict:  # both names: which one is meant is unknown
                    error_msgs.append(
                        f"{key} and {renamed} are both in the state dict: the checkpoint holds "
                        f"this entry twice, under the Annotated Transformer's name and under "
                        f"this module's, and loading either would be a guess; keep one"
                    )
                    continue
                state_dict[renamed] = state_dict.pop(key)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


def _kernel_padding_idx(padding_idx: int | None, rows: int) -> int | None:
    """``padding_idx`` as the embedding kernel takes it: -1 for none, else in ``[0, rows)``.

    A negative index counts from the end, as :class:`torch.nn.Embedding` and
    :func:`torch.nn.functional.embedding` read it (-1 is the last row, not "no
    padding"); one outside ``[-rows, rows)`` is None, for the full path to refuse.
    """
    if padding_idx is None:
        return -1
    if padding_idx < 0:
        padding_idx += rows
    return padding_idx if 0 <= padding_idx < rows else None
