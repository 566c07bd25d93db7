"""The derived-table mechanism that every caching module shares.

A table of sines and cosines (the sinusoid's ``pe``, RoPE's cos and sin) is data
derived from a module's configuration, not state: :class:`DerivedTables` keeps it in
non-persistent buffers and

- builds it when the module is built, in torch's default dtype on its default device
  (empty on the meta device), refusing a table larger than the device's memory;
- derives it again, never converts it, when a cast or a move gives the buffers new
  tensors (``.to()``, ``.half()``, ``.to_empty()``), and keeps it as it is when the
  cast is a no-op;
- serves it only to the dtype it was rounded for, on its device (one rounding: an
  fp16 table never feeds bf16); every other request is computed from float64;
- keeps, beside it, a table for each half-precision dtype it is asked for (bfloat16,
  float16): rounded once from float64 on first use, on the tables' device, held in a
  plain attribute (never in a state dict, never converted by a cast: a cast or a move
  that re-derives the tables drops them, and the next request derives them again).
  Each adds half the bytes of a float32 table: ``2 * sum(prod(shape))`` bytes;
- hands out new tensors from its accessors, never views a caller could write through.

A subclass says which buffers it has (``_table_names``), their shapes, how to derive
them from float64 in a dtype, and in which dtype a table serves a given dtype (the
sinusoid: that dtype; RoPE: float32, or float64 for float64).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from . import _runtime

__all__ = ["DerivedTables"]

# The dtypes served by a table of their own, beside the one the buffers hold.
_KEPT = (torch.bfloat16, torch.float16)


class DerivedTables(nn.Module):
    """A module whose buffers ``_table_names`` are derived from its configuration.

    Attributes:
        _dtype: The module's dtype: torch's default dtype when built, then the dtype of
            the last cast. Accessors default to it. The tables' own dtype is
            ``_storage_dtype(_dtype)``.
        _kept: The half-precision tables derived so far, by dtype (see the module's
            docstring): a plain attribute, on the buffers' device.
    """

    _table_names: tuple[str, ...] = ()
    _dtype: torch.dtype
    _kept: dict[torch.dtype, tuple[Tensor, ...]]

    # -- What a subclass says -------------------------------------------------------------

    def _table_shapes(self) -> tuple[tuple[int, ...], ...]:
        """The shape of each table, in the order of ``_table_names``."""
        raise NotImplementedError

    def _derive(self, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, ...]:
        """Each table, computed from float64 and rounded once to ``dtype``, on ``device``."""
        raise NotImplementedError

    def _describe(self) -> str:
        """What the tables are, for the size guard's message."""
        return f"{type(self).__name__}'s tables"

    @staticmethod
    def _storage_dtype(dtype: torch.dtype) -> torch.dtype:
        """The dtype of the tables that serve inputs of ``dtype``."""
        return dtype

    # -- The mechanism --------------------------------------------------------------------

    def _register_tables(self, advice: str = "choose a smaller max_len") -> None:
        """Build the tables and register them; the last step of a subclass's ``__init__``."""
        self._dtype = torch.get_default_dtype()  # as torch's own modules: float32 unless set
        self._kept = {}
        dtype, device = self._storage_dtype(self._dtype), _runtime.default_device()
        shapes = self._table_shapes()
        total = (sum(math.prod(shape) for shape in shapes),)
        _runtime.allocation(total, dtype, device, self._describe, advice)
        for name, table in zip(self._table_names, self._build(dtype, device), strict=True):
            self.register_buffer(name, table, persistent=False)

    def _build(self, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, ...]:
        if device.type == "meta":
            return tuple(torch.empty(s, dtype=dtype, device=device) for s in self._table_shapes())
        return self._derive(dtype, device)

    def _tables(self) -> tuple[Tensor, ...]:
        # From the buffers' dict, as nn.Module.__getattr__ would find them, without its
        # cost (microseconds a call): the decoding step asks on every call.
        buffers = self._buffers
        return tuple([buffers[name] for name in self._table_names])  # type: ignore[misc]

    def reset_parameters(self) -> None:
        """Derive the tables again, in the dtype that serves the module's, on their device.

        There are no parameters; the name is the one initialisation code calls.
        Casting or moving the module calls it by itself.
        """
        tables = self._tables()
        dtype, device = self._storage_dtype(self._dtype), tables[0].device
        self._kept = {}  # derived again on their next use, by the same rules
        with torch.no_grad():
            for name, old, new in zip(
                self._table_names, tables, self._build(dtype, device), strict=True
            ):
                if old.dtype == new.dtype and old.shape == new.shape:
                    old.copy_(new)  # in place: whoever holds the buffer sees the new values
                else:
                    setattr(self, name, new)

    def _apply(self, fn: Any, recurse: bool = True) -> DerivedTables:
        before = self._tables()[0]
        # The dtype this call asks for: the same function applied to an empty tensor of
        # the module's dtype (a table may be stored in another dtype than the module's).
        probe = fn(torch.empty(0, dtype=self._dtype, device=before.device))
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        if isinstance(probe, Tensor) and probe.is_floating_point():
            self._dtype = probe.dtype
        after = self._tables()[0]
        # A new tensor (another dtype or device, to_empty) holds converted or undefined
        # values: derive the tables again. The same tensor (a no-op .to()) is kept as is,
        # unless it no longer has the dtype that serves the module's.
        stale = after is not before or after.dtype != self._storage_dtype(self._dtype)
        if stale:
            self._kept = {}  # on the old device, or converted: derived again when asked for
        if stale and after.is_floating_point() and not after.is_meta:
            self.reset_parameters()
        return self

    def _table_for(self, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, ...] | None:
        """The tables that hold rows for ``dtype`` on ``device``, rounded once for it, or None.

        The buffers serve their own dtype; bfloat16 and float16 get a table of their
        own, derived from float64 on first use (read only where
        :func:`~posenc._runtime.fast_path` allows: while :func:`torch.compile` traces
        or a :mod:`torch.func` transform runs, their rows are computed, as for every
        dtype without a table).
        """
        tables: tuple[Tensor, ...] = tuple([self._buffers[n] for n in self._table_names])  # type: ignore[misc]
        first = tables[0]
        if device != first.device:
            return None
        if dtype == first.dtype:
            return tables
        if not _runtime.fast_path():
            # Neither read nor derived while compiling (a guard on them would recompile
            # when eager calls derive one) nor under a torch.func transform (a table
            # derived there would be wrapped by it, and kept past it): those rows are
            # computed, with the same values.
            return None
        kept = self._kept.get(dtype)
        if kept is not None or dtype not in _KEPT or first.is_meta:
            return kept
        shapes = self._table_shapes()
        total = (sum(math.prod(shape) for shape in shapes),)
        _runtime.allocation(total, dtype, device, self._describe)
        # Plain tensors even when first asked for in inference mode: autograd may save them.
        with torch.inference_mode(False), torch.no_grad():
            kept = self._derive(dtype, device)
        self._kept[dtype] = kept
        return kept

    def _unshared(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        """``tensors``, each cloned if it may share memory with a table.

        Where :func:`~posenc._runtime.fast_path` allows (eagerly, plain tensors, no
        :mod:`torch.func` transform), the storages are compared. Elsewhere every tensor
        is cloned: while :func:`torch.compile` traces, storages cannot be read (the
        compiler fuses the copy into the kernel that computes it); a tensor wrapped by
        ``vmap``, ``grad``, ``jvp`` or ``functionalize`` has no storage to read; and a
        tensor subclass decides itself what its storage is.
        """
        if not _runtime.fast_path(*tensors):
            return tuple(t.clone() for t in tensors)
        owners = {t.untyped_storage().data_ptr() for t in self._tables()}
        for kept in self._kept.values():
            owners.update(t.untyped_storage().data_ptr() for t in kept)
        return tuple(t.clone() if t.untyped_storage().data_ptr() in owners else t for t in tensors)
