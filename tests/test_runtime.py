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
        seen.append(_runtime.fast_path())  # the transform alone
        return t.sum()

    assert not active()
    torch.func.vmap(probe)(torch.zeros(3, 2))
    torch.func.grad(probe)(torch.zeros(2))
    assert seen == [True, False, True, False]


def test_forward_ad_current_level_is_minus_one_outside_a_dual_level() -> None:
    assert forward_ad._current_level == -1
    assert _runtime.fast_path(torch.zeros(2))
    with forward_ad.dual_level():
        assert forward_ad._current_level >= 0
        assert not _runtime.fast_path(torch.zeros(2))
    assert forward_ad._current_level == -1


@pytest.mark.parametrize("name", _runtime.GLOBAL_HOOKS)
def test_global_hook_dicts_are_where_torch_registers_global_hooks(name: str) -> None:
    assert isinstance(getattr(torch_module, name), dict), name
    # fast_path holds the dicts themselves: torch must still hold the same objects
    assert any(d is getattr(torch_module, name) for d in _runtime._GLOBAL_HOOK_DICTS), name
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
    assert _runtime.fast_path(modules=(module,))
    handle = register()
    try:
        assert getattr(torch_module, name), f"{name} stays empty after registering a hook"
        assert not _runtime.fast_path(modules=(module,))
    finally:
        handle.remove()
    assert _runtime.fast_path(modules=(module,))


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
    assert not _runtime.fast_path(modules=(nn.Linear(1, 1), module))
    handle.remove()
    assert _runtime.fast_path(modules=(module,))


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
    assert _runtime.fast_path(x, weight)
    assert _runtime.readable(x)
    # A subclass (a DTensor, say) may hand out copies for slices: no out= or in-place
    # path, and no free read of its values.
    assert not _runtime.fast_path(x, sub)
    assert not _runtime.readable(sub)
    assert not _runtime.fast_path(nn.Parameter(sub, requires_grad=False))
    assert not _runtime.fast_path(x, constants=(nn.Parameter(sub, requires_grad=False),))


# -- fast_path: the one predicate every fast path asks ---------------------------------------

# torch's forward AD loads its decompositions through torch.jit.script on first use,
# which warns in torch >= 2.10: a warning of torch's, not of posenc's.
_JIT_WARNING = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning"
)


def test_fast_path_is_true_for_plain_tensors_and_unhooked_modules_eagerly() -> None:
    x, weight = torch.randn(3), nn.Parameter(torch.randn(3))
    assert _runtime.fast_path()
    assert _runtime.fast_path(x, weight, modules=(nn.Linear(2, 2), nn.Dropout()))


def test_fast_path_is_false_for_constants_that_need_a_gradient_while_autograd_records() -> None:
    x, table = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    assert _runtime.fast_path(x, constants=(table.detach(),))
    assert not _runtime.fast_path(x, constants=(table,))
    with torch.no_grad():
        assert _runtime.fast_path(x, constants=(table,))
    assert not _runtime.fast_path(x, constants=(table.detach().as_subclass(_Subclass),))


def test_fast_path_is_false_for_a_tensor_subclass() -> None:
    x = torch.randn(3)
    assert not _runtime.fast_path(x, x.as_subclass(_Subclass))
    assert not _runtime.fast_path(nn.Parameter(x.as_subclass(_Subclass), requires_grad=False))


@_JIT_WARNING
@pytest.mark.parametrize("transform", ["vmap", "grad", "jvp", "functionalize", "vjp"])
def test_fast_path_is_false_under_every_torch_func_transform(transform: str) -> None:
    seen: list[tuple[bool, bool]] = []

    def probe(t: torch.Tensor) -> torch.Tensor:
        # with the transform's tensor, and with none: the transform alone says no
        seen.append((_runtime.fast_path(t), _runtime.fast_path()))
        return (t * 2).sum() if transform == "grad" else t * 2

    x = torch.randn(3)
    func = torch.func
    if transform == "vmap":
        func.vmap(probe)(torch.randn(2, 3))
    elif transform == "grad":
        func.grad(probe)(x)
    elif transform == "jvp":
        func.jvp(probe, (x,), (torch.ones(3),))
    elif transform == "vjp":
        func.vjp(probe, x)
    else:
        func.functionalize(probe)(x)
    assert seen == [(False, False)]
    assert _runtime.fast_path(x)  # and true again after it


@_JIT_WARNING
def test_fast_path_is_false_inside_a_forward_ad_level_and_for_a_wrapped_tensor() -> None:
    x = torch.randn(3)
    with forward_ad.dual_level():
        assert not _runtime.fast_path(forward_ad.make_dual(x, torch.ones(3)))
        assert not _runtime.fast_path(x)
    escaped: list[torch.Tensor] = []
    torch.func.vmap(lambda t: escaped.append(t) or t)(torch.randn(2, 3))
    # a tensor wrapped by a transform that has ended: no storage to read, not plain
    assert not _runtime.fast_path(escaped[0])


def test_fast_path_is_false_under_compile() -> None:
    seen: list[bool] = []

    @torch.compiler.disable
    def record(value: bool) -> None:
        seen.append(value)

    def f(t: torch.Tensor) -> torch.Tensor:
        record(_runtime.fast_path(t))
        return t + 1

    torch.compile(f, backend="eager", fullgraph=False)(torch.randn(3))
    assert seen == [False]


@pytest.mark.parametrize(
    "register",
    [
        lambda m: m.register_forward_hook(lambda *a: None),
        lambda m: m.register_forward_pre_hook(lambda *a: None),
        lambda m: m.register_full_backward_hook(lambda *a: None),
        lambda m: m.register_full_backward_pre_hook(lambda *a: None),
        lambda m: torch_module.register_module_forward_hook(lambda *a: None),
        lambda m: torch_module.register_module_forward_pre_hook(lambda *a: None),
        lambda m: torch_module.register_module_full_backward_hook(lambda *a: None),
        lambda m: torch_module.register_module_full_backward_pre_hook(lambda *a: None),
    ],
    ids=[
        "forward", "forward_pre", "backward", "backward_pre",
        "global_forward", "global_forward_pre", "global_backward", "global_backward_pre",
    ],
)  # fmt: skip
def test_fast_path_is_false_for_any_hook_on_a_module_or_globally(
    register, request: pytest.FixtureRequest
) -> None:  # type: ignore[no-untyped-def]
    modules = (nn.Linear(2, 2), nn.Dropout())
    handle = register(modules[1])
    try:
        assert not _runtime.fast_path(modules=modules)
        # a global hook reaches every module; a module's own, that module only
        on_every_module = "global" in request.node.callspec.id
        assert _runtime.fast_path(modules=modules[:1]) is not on_every_module
    finally:
        handle.remove()
    assert _runtime.fast_path(modules=modules)


def test_fast_path_reads_the_hooks_and_forwards_on_every_call() -> None:
    import copy

    first, second = nn.Linear(1, 1), nn.Dropout()
    assert _runtime.fast_path(modules=(first, second))
    handle = second.register_forward_pre_hook(lambda m, args: None)
    assert not _runtime.fast_path(modules=(first, second))  # registered after a call
    twin = copy.deepcopy(second)  # a copy has the hook too
    assert not _runtime.fast_path(modules=(first, twin))
    handle.remove()
    assert _runtime.fast_path(modules=(first, second))
    assert not _runtime.fast_path(modules=(first, twin))
    second.forward = second.forward  # type: ignore[method-assign]
    assert not _runtime.fast_path(modules=(first, second))
    del second.forward
    assert _runtime.fast_path(modules=(first, second))


def test_fast_path_is_false_for_a_forward_replaced_on_the_instance() -> None:
    module = nn.Dropout()
    original = module.forward

    def wrapped(*args: object, **kwargs: object) -> object:  # as accelerate's add_hook_to_module
        return original(*args, **kwargs)

    module.forward = wrapped  # type: ignore[method-assign]
    assert not _runtime.fast_path(modules=(nn.Linear(2, 2), module))
    del module.forward
    assert _runtime.fast_path(modules=(module,))
