"""Where and how work runs: devices, dtypes, the eager/compile/transform predicates, memory.

:func:`fast_path` is the one predicate a module's fast path asks (a fused in-place
add, a view served without a copy, a storage compared, a table kept): plain tensors,
eagerly, no :mod:`torch.func` transform, no hook and no ``forward`` replaced on the
modules involved; a fast path that writes with ``out=`` or in place passes the tensors
it must not differentiate as ``constants``. :func:`readable` (may values be read for
free) answers the narrower question of checks.

This is the one module of posenc that reads torch's private API. Each use says in a
line why no public API does the job, and ``tests/test_runtime.py`` fails loudly, naming
the attribute, when a torch release moves one:

- ``torch._C._functorch.is_functorch_wrapped_tensor``: whether a tensor is wrapped by a
  :mod:`torch.func` transform (its values cannot be read there); no public predicate.
- ``torch._C._are_functorch_transforms_active``: whether a transform is running (``out=``
  and in-place writes have no batching rule under ``vmap``); no public predicate.
- ``torch.autograd.forward_ad._current_level``: whether a ``dual_level()`` is open
  (tensors may carry tangents that an ``out=`` write would drop); no public getter.
- ``torch.nn.modules.module._global_*_hooks`` and a module's ``_forward_hooks`` (and the
  three other hook dicts): whether any hook could see a fused path's intermediate
  tensors; :class:`torch.nn.Module` exposes registration, not a query.
- ``_dynamo_marked_constant``, the attribute :func:`torch.compiler.assume_constant_result`
  sets: setting it directly spares ``import posenc`` the import of ``torch._dynamo``
  (about a second).
- ``torch._dynamo.config.specialize_float``, read only when the compiler is already
  imported: whether the compiler traces Python floats as symbols.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from torch.autograd import forward_ad
from torch.compiler import is_compiling as _is_compiling
from torch.nn.modules import module as _module

# private: no public way to ask whether a tensor is wrapped by a torch.func transform,
# nor whether a transform is running
_is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_transforms_active = torch._C._are_functorch_transforms_active

__all__ = [
    "allocation",
    "constant",
    "constant_result",
    "default_device",
    "default_dtype",
    "empty",
    "fast_path",
    "readable",
    "registered",
    "work_device",
]

F = TypeVar("F", bound=Callable[..., Any])
Describe = Callable[[], str]


# -- Devices and dtypes ------------------------------------------------------------------


def default_device(device: torch.device | str | None = None) -> torch.device:
    """``device``, or where torch's factories put a tensor given no device.

    That is the CPU, unless :func:`torch.set_default_device` or a ``with
    torch.device(...)`` block says otherwise (``"meta"`` for building a model
    without memory).
    """
    return torch.empty(0).device if device is None else torch.device(device)


def default_dtype(dtype: torch.dtype | None = None) -> torch.dtype:
    """``dtype``, or torch's default dtype (float32 unless :func:`torch.set_default_dtype`)."""
    return torch.get_default_dtype() if dtype is None else dtype


def work_device(device: torch.device) -> torch.device:
    """Where float64 work for a result on ``device`` runs: MPS has no float64, so the CPU."""
    return torch.device("cpu") if device.type == "mps" else device


# -- What may be read, and what may be written in place -----------------------------------


# The plain tensor types, exactly (``type(t) in _PLAIN_TYPES``): a tensor subclass
# (:class:`~torch.distributed.tensor.DTensor`, a fake or functional tensor) decides
# itself what an operation does: a slice of a sharded DTensor may be a copy, so a write
# into it never reaches the tensor sliced, and reading its values may be a collective.
# A parameter that wraps a subclass has the subclass's type.
_PLAIN_TYPES = (Tensor, nn.Parameter)


def registered(module: nn.Module, name: str) -> Any:
    """The parameter, buffer or child ``name`` of ``module`` (None if none), from its registry.

    What ``getattr(module, name)`` returns for them, without ``nn.Module.__getattr__``'s
    cost (several microseconds a read with cold caches), which a decoding step would
    pay on every call for each child's weight or grandchild it checks.
    """
    # private: nn.Module keeps them in these dicts, which __getattr__ reads in this order
    for found in (module._parameters, module._buffers, module._modules):
        if name in found:
            return found[name]
    return None


def readable(t: Tensor) -> bool:
    """Whether the values of ``t`` can be read on the host for free.

    True on the CPU, eagerly, for a plain tensor. False on an accelerator (a read is a
    sync), under :func:`torch.compile` (it would break the graph), for a tensor wrapped
    by a :mod:`torch.func` transform (under :func:`torch.func.vmap` a read is
    data-dependent control flow, which vmap refuses) and for a tensor subclass (a
    DTensor's read is a collective). Where it is False, a check of
    values is left to the indexing kernel, and positions are computed rather than
    looked up.
    """
    return type(t) in _PLAIN_TYPES and t.is_cpu and not _is_compiling() and not _is_wrapped(t)


#: The dicts in which torch keeps hooks registered for every module.
GLOBAL_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)
# The dicts themselves: torch registers into them and never rebinds them (checked in
# tests/test_runtime.py).
_GLOBAL_HOOK_DICTS = tuple(getattr(_module, name) for name in GLOBAL_HOOKS)
#: The dicts in which a module keeps its own hooks.
MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def fast_path(
    *tensors: Tensor,
    modules: tuple[nn.Module, ...] = (),
    constants: tuple[Tensor, ...] = (),
) -> bool:
    """Whether a fast path may run on ``tensors`` inside ``modules``: the one predicate.

    A fast path (a fused in-place add, a view of a table served without a copy, a
    storage compared, a table derived and kept for later calls) gives the values of
    the readable path only where nothing else watches or records the operations.
    True only when all of these hold:

    - eager: not under :func:`torch.compile` (a graph records the operations);
    - no :mod:`torch.func` transform active (``vmap``, ``grad``, ``jvp``,
      ``functionalize``, and their compositions), no forward-mode AD level open,
      and none of ``tensors`` wrapped by a transform: a wrapped tensor has no
      storage to compare, and ``vmap`` has no rule for some in-place writes;
    - each of ``tensors`` a plain tensor, not a subclass: a tensor subclass
      (DTensor, a fake or functional tensor) decides itself what an operation
      does, and may hand out a copy where a view is expected;
    - no module hook registered globally, nor on any of ``modules`` (a hook could
      hold a tensor the fast path writes into, or expect to see a child called);
    - no ``forward`` replaced on the instance of any of ``modules`` (``"forward"``
      in its ``__dict__``: what accelerate's ``add_hook_to_module`` does for device
      maps and offloading), whose replacement the fast path would bypass;
    - none of ``constants`` needing a gradient while autograd records (a fast path
      that differentiates only ``tensors``, as the rotation's custom backward does,
      would drop the gradient of a table that requires one; an ``out=`` write into
      a result would drop the gradient of what it is computed from).

    The module's class is the caller's to check: a subclass may override
    ``forward`` on the class.

    Args:
        tensors: The tensors the fast path reads or writes.
        modules: The modules whose forward the fast path stands in for.
        constants: Tensors the fast path does not differentiate (tables, what an
            ``out=`` write is computed from), held to every rule for ``tensors``
            and, besides, to need no gradient.

    Returns:
        Whether the fast path gives exactly what the modules' own calls would.
    """
    # private: no public predicate for "a functorch transform is running", no public
    # getter for the current dual level (-1 outside dual_level()); nn.Module has hook
    # registration but no public query of what is registered. Each test on one line: a
    # short path for a reader, and the decoding step asks on every call.
    if _is_compiling() or _transforms_active() or forward_ad._current_level >= 0:
        return False
    for t in tensors + constants if constants else tensors:
        if type(t) not in _PLAIN_TYPES or _is_wrapped(t):
            return False
    if constants and torch.is_grad_enabled() and any(t.requires_grad for t in constants):
        return False
    if any(_GLOBAL_HOOK_DICTS):
        return False
    return not modules or _unwatched(modules)


def _unwatched(modules: tuple[nn.Module, ...]) -> bool:
    """Whether no module of ``modules`` has a hook or a ``forward`` replaced on the instance.

    Read on every call, from each module's own dicts: five lookups a module, fewer
    than keeping an answer between calls would take.
    """
    for m in modules:
        if (
            "forward" in m.__dict__
            or m._forward_hooks
            or m._forward_pre_hooks
            or m._backward_hooks
            or m._backward_pre_hooks
        ):
            return False
    return True


# -- Constants for torch.compile ----------------------------------------------------------


def constant_result(fn: F) -> F:
    """Mark ``fn`` as :func:`torch.compiler.assume_constant_result` does.

    That function sets this one attribute, after importing ``torch._dynamo``, which takes
    about a second: here at import time it would be most of ``import posenc``.
    """
    fn._dynamo_marked_constant = True  # type: ignore[attr-defined]
    return fn


def constant(value: float) -> float:
    """``value``, as a constant of a graph that torch.compile traces.

    Releases of torch.compile that trace float attributes as symbols
    (``specialize_float=False``, the default since about 2.6) make a constant of their
    exact ratio of integers again; older ones hold floats as constants already, and
    cannot trace that ratio.
    """
    if torch.compiler.is_compiling():
        # private: read only when the compiler is imported (it is, while compiling)
        config = sys.modules.get("torch._dynamo.config")
        if not getattr(config, "specialize_float", True):
            numerator, denominator = value.as_integer_ratio()
            return numerator / denominator
    return value


# -- Memory ------------------------------------------------------------------------------


def human(nbytes: float) -> str:
    """``2.05 TB``: a number of bytes in decimal units."""
    for unit in ("bytes", "KB", "MB", "GB", "TB", "PB"):
        if nbytes < 1000 or unit == "PB":
            return f"{nbytes:.3g} {unit}" if unit != "bytes" else f"{int(nbytes)} bytes"
        nbytes /= 1000
    raise AssertionError  # pragma: no cover


def memory_of(device: torch.device) -> int | None:
    """Bytes of memory a tensor on ``device`` can use at most; None when unknown."""
    if device.type == "cpu":
        try:
            limit = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):  # pragma: no cover (not POSIX)
            return None
        try:  # a container's cgroup (v2) limit, where it is lower
            with open("/sys/fs/cgroup/memory.max") as f:
                text = f.read().strip()
            if text.isdigit():
                limit = min(limit, int(text))
        except OSError:
            pass
        return int(limit)
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info(device)[1])
    return None


def _count(shape: tuple[int, ...]) -> int:
    """The elements of a tensor of ``shape``, counted in Python ints.

    Sizes given as NumPy's integers (``np.uint8(200)``) would otherwise multiply in
    their own width, and wrap.
    """
    return math.prod(int(n) for n in shape)


def size(shape: tuple[int, ...], dtype: torch.dtype) -> str:
    """``'2.05 TB (1000000000 × 512 torch.float32)'``: the bytes, then the shape and dtype."""
    nbytes = _count(shape) * dtype.itemsize
    return f"{human(nbytes)} ({' × '.join(map(str, shape))} {dtype})"


def allocation(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    what: Describe,
    advice: str = "ask for fewer positions",
    *,
    peak: float = 1.0,
) -> None:
    """Refuse, before any work, a tensor larger than the memory of its device.

    ``what`` says, when called, what the tensor is: the message is built only on
    failure (formatting a size would fix it in a compiled graph). ``peak`` is the
    memory the computation holds at its highest, in units of the result's size (a
    bias computed from int64 distances and float64 products peaks above the result).
    """
    if torch.compiler.is_compiling():  # sizes are symbolic there, and the graph is built
        return
    nbytes = _count(shape) * dtype.itemsize
    limit = memory_of(device)
    if limit is not None and nbytes * peak > limit:
        needs = size(shape, dtype)
        if peak != 1.0:
            needs += f", and about {human(nbytes * peak)} while it is computed"
        raise ValueError(
            f"{what()} needs {needs}, more than the {human(limit)} of memory on {device}: {advice}"
        )


def empty(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, what: Describe
) -> Tensor:
    """``torch.empty``, with the size guard before and an allocation failure explained."""
    allocation(shape, dtype, device, what)
    try:
        return torch.empty(shape, dtype=dtype, device=device)
    except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        raise ValueError(
            f"{what()} needs {size(shape, dtype)}, which could not be allocated on {device}: "
            "ask for fewer positions"
        ) from exc
