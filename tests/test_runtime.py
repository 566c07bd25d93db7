"""posenc._runtime: each private torch API it reads is still there and still means the same.

A torch release that moves one of them fails here, by name, rather than as a wrong
fast path somewhere else.
"""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn
from torch.autograd import forward_ad
from torch.nn.modules import module as torch_module

from posenc import _runtime


def test_functorch_wrapped_tensor_predicate_sees_vmap() -> None:
    predicate = torch._C._functorch.is_functorch_wrapped_tensor
    seen: list[bool] = []

    def probe(t: torch.Tensor) -> torch.Tensor:
        seen.append(predicate(t))
        return t

    assert not predicate(torch.zeros(2))
    torch.func.vmap(probe)(torch.zeros(3, 2))
    assert seen == [True]
    assert _runtime.readable(torch.zeros(2))


def test_functorch_transforms_active_predicate_sees_vmap_and_grad() -> None:
    active = torch._C._are_functorch_transforms_active
    seen: list[bool] = []

    def probe(t: torch.Tensor) -> torch.Tensor:
        seen.append(active())
        seen.append(_runtime.plain_eager(t))
        return t.sum()

    assert not active()
    torch.func.vmap(probe)(torch.zeros(3, 2))
    torch.func.grad(probe)(torch.zeros(2))
    assert seen == [True, False, True, False]


def test_forward_ad_current_level_is_minus_one_outside_a_dual_level() -> None:
    assert forward_ad._current_level == -1
    assert _runtime.plain_eager(torch.zeros(2))
    with forward_ad.dual_level():
        assert forward_ad._current_level >= 0
        assert not _runtime.plain_eager(torch.zeros(2))
    assert forward_ad._current_level == -1


@pytest.mark.parametrize("name", _runtime.GLOBAL_HOOKS)
def test_global_hook_dicts_are_where_torch_registers_global_hooks(name: str) -> None:
    assert isinstance(getattr(torch_module, name), dict), name
    register = {
        "_global_forward_hooks": lambda: nn.modules.module.register_module_forward_hook(
            lambda m, i, o: None
        ),
        "_global_forward_pre_hooks": lambda: nn.modules.module.register_module_forward_pre_hook(
            lambda m, i: None
        ),
        "_global_backward_hooks": lambda: nn.modules.module.register_module_full_backward_hook(
            lambda m, gi, go: None
        ),
        "_global_backward_pre_hooks": (
            lambda: nn.modules.module.register_module_full_backward_pre_hook(lambda m, go: None)
        ),
    }[name]
    module = nn.Linear(2, 2)
    assert not _runtime.has_hooks(module)
    handle = register()
    try:
        assert getattr(torch_module, name), f"{name} stays empty after registering a hook"
        assert _runtime.has_hooks(module)
    finally:
        handle.remove()
    assert not _runtime.has_hooks(module)


@pytest.mark.parametrize("name", _runtime.MODULE_HOOKS)
def test_module_hook_dicts_are_where_a_module_keeps_its_hooks(name: str) -> None:
    module = nn.Linear(2, 2)
    register = {
        "_forward_hooks": lambda: module.register_forward_hook(lambda m, i, o: None),
        "_forward_pre_hooks": lambda: module.register_forward_pre_hook(lambda m, i: None),
        "_backward_hooks": lambda: module.register_full_backward_hook(lambda m, gi, go: None),
        "_backward_pre_hooks": lambda: module.register_full_backward_pre_hook(lambda m, go: None),
    }[name]
    assert not getattr(module, name)
    handle = register()
    assert getattr(module, name), f"nn.Module keeps no hook in {name} any more"
    assert _runtime.has_hooks(nn.Linear(1, 1), module)
    handle.remove()
    assert not _runtime.has_hooks(module)


def test_constant_result_sets_the_attribute_that_assume_constant_result_sets() -> None:
    def fn() -> int:
        return 1

    def marked() -> int:
        return 1

    torch.compiler.assume_constant_result(fn)
    _runtime.constant_result(marked)
    public = {k for k in vars(fn) if k.startswith("_dynamo")}
    assert public == {"_dynamo_marked_constant"}, public
    assert vars(marked) == {k: vars(fn)[k] for k in public}


def test_the_compilers_specialize_float_flag_is_where_it_is_read() -> None:
    import torch._dynamo.config  # noqa: F401 (the module constant() reads)

    config = sys.modules["torch._dynamo.config"]
    assert isinstance(config.specialize_float, bool)


def test_results_without_a_device_go_to_torchs_default_device() -> None:
    assert _runtime.default_device() == torch.device("cpu")
    with torch.device("meta"):
        assert _runtime.default_device() == torch.device("meta")
    assert _runtime.default_device("meta") == torch.device("meta")


def test_default_dtype_is_torchs() -> None:
    assert _runtime.default_dtype() == torch.float32
    assert _runtime.default_dtype(torch.bfloat16) == torch.bfloat16
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert _runtime.default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(previous)


def test_peak_memory_counts_in_the_guard() -> None:
    limit = _runtime.memory_of(torch.device("cpu"))
    assert limit is not None
    shape = (limit // 8 // 2,)  # half the memory as float64: fits, but not four times over
    _runtime.allocation(shape, torch.float64, torch.device("cpu"), lambda: "x")
    with pytest.raises(ValueError, match="while it is computed"):
        _runtime.allocation(shape, torch.float64, torch.device("cpu"), lambda: "x", peak=4.0)


class _Subclass(torch.Tensor):
    """A tensor subclass that changes nothing: the fast paths still refuse it."""


def test_fast_paths_and_reads_are_for_plain_tensors_and_parameters_only() -> None:
    x = torch.randn(3)
    sub = x.as_subclass(_Subclass)
    weight = nn.Parameter(torch.randn(3), requires_grad=False)
    assert _runtime.plain_eager(x, weight)
    assert _runtime.readable(x)
    # A subclass (a DTensor, say) may hand out copies for slices: no out= or in-place
    # path, and no free read of its values.
    assert not _runtime.plain_eager(x, sub)
    assert not _runtime.readable(sub)
    assert not _runtime.plain(nn.Parameter(sub, requires_grad=False))
