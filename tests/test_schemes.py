"""The contracts every public scheme keeps, run over the registry in tests/schemes.py.

A scheme added to ``schemes.SCHEMES`` gets each of these tests; what a scheme does
that no other does is tested in its own file.
"""

from __future__ import annotations

import copy
import io
import pickle
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import chain

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwad
from reference import INTEGER_DTYPES, CountingBackend
from schemes import BATCH, MAX_LEN, Call, Scheme, having, public
from torch import Tensor, nn
from torch.func import jvp, vmap

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]

# torch's forward AD loads its decompositions through torch.jit.script on first use,
# which warns in torch >= 2.10: a warning of torch's, not of posenc's.
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning"
)


def over(contract: str) -> pytest.MarkDecorator:
    """Parametrize a test over the schemes that take part in ``contract``."""
    schemes = having(contract)
    return pytest.mark.parametrize("scheme", schemes, ids=[s.name for s in schemes])


@pytest.fixture(autouse=True)
def _fresh_state() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)


def _as(args: tuple[Tensor, ...], dtype: torch.dtype | None) -> tuple[Tensor, ...]:
    """The floating arguments in ``dtype`` (None: as they are); integer ones unchanged."""
    return tuple(a.to(dtype) if dtype is not None and a.is_floating_point() else a for a in args)


def _input_dtypes(scheme: Scheme, dtypes: list[torch.dtype]) -> list[torch.dtype | None]:
    """``dtypes`` for a scheme with a floating input, else [None] (its inputs as they are)."""
    with torch.random.fork_rng():
        floating = any(a.is_floating_point() for a in scheme.sample(3))
    return list(dtypes) if floating else [None]


def _positions(scheme: Scheme, shape: tuple[int, ...]) -> Tensor:
    """Positions ``shape = (..., B, L)``; on a scheme's axes ``(..., A, B, L)``."""
    low, high = scheme.position_range
    if scheme.axes:
        shape = (*shape[:-2], scheme.axes, *shape[-2:])
    return torch.randint(low, high, shape)


def _each(fn: Callable[..., Tensor], *batched: Tensor) -> Tensor:
    """``fn`` called on each sample (dim 0) of ``batched``, the results stacked."""
    return torch.stack([fn(*sample) for sample in zip(*batched, strict=True)])


def _equal(got: Tensor, want: Tensor) -> None:
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def _with_weights_of(source: nn.Module, make: Callable[[], nn.Module]) -> nn.Module:
    """A fresh module holding ``source``'s parameters (their tensors, in their dtype)."""
    fresh = make()
    fresh.load_state_dict(source.state_dict(), assign=True)
    return fresh


# -- torch.compile ---------------------------------------------------------------------------


@over("compile")
def test_compile_fullgraph_one_graph_for_all_lengths(scheme: Scheme) -> None:
    module = scheme.make().eval()
    for dtype in _input_dtypes(scheme, [torch.float32, torch.bfloat16]):
        torch._dynamo.reset()
        backend = CountingBackend()
        compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=True)
        top = scheme.table_rows or MAX_LEN  # within the table: one graph
        for length in sorted({*(n for n in (3, 5, 17, 40) if n < top), top}):
            args = _as(scheme.sample(length), dtype)
            _equal(compiled(*args), module(*args))
            if scheme.positions and length + 7 <= top:  # an int offset, within the table
                _equal(compiled(*args, offset=7), module(*args, offset=7))
        assert backend.graphs == 1, dtype


@over("compile_positions")
def test_compile_with_tensor_positions_and_offsets_one_graph_each(scheme: Scheme) -> None:
    module = scheme.make().eval()
    lengths = (3, 9, 33, 100) if scheme.extrapolates else (3, 9, 33)  # not 2: duck sizing
    # Nor A, the size of the positions' axes dim (a constant of the module): duck sizing.
    lengths = tuple(n + 2 if n == scheme.axes else n for n in lengths)
    for keyword in ("positions", "offset"):
        torch._dynamo.reset()
        backend = CountingBackend()
        compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=True)
        for length in lengths:
            args = scheme.sample(length)
            if keyword == "positions":
                where = _positions(scheme, (BATCH, length))
            else:
                low, high = scheme.position_range
                where = torch.tensor([max(low, 0), high - length])
            kwargs = {keyword: where}
            _equal(compiled(*args, **kwargs), module(*args, **kwargs))
        assert backend.graphs == 1, keyword


@over("compile_past_max_len")
def test_compile_past_max_len_adds_one_graph_not_one_per_length(scheme: Scheme) -> None:
    module = scheme.make().eval()
    assert scheme.table_rows is not None
    for dtype in _input_dtypes(scheme, [torch.float32, torch.bfloat16]):
        torch._dynamo.reset()
        backend = CountingBackend()
        compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=True)
        for length in (3, 10, scheme.table_rows + 1, 100, 300):
            args = _as(scheme.sample(length), dtype)
            _equal(compiled(*args), module(*args))
            _equal(compiled(*args, offset=7), module(*args, offset=7))
        if dtype in (None, torch.float32):
            assert backend.graphs == 2  # rows from the table / rows computed on the fly
        else:  # a table of another dtype serves no rows: one graph, or two
            assert backend.graphs <= 2


# -- torch.export and ONNX ------------------------------------------------------------------


def _dynamic_shapes(scheme: Scheme, module: nn.Module) -> tuple[object, ...]:
    top = scheme.table_rows or 512
    dims = {name: torch.export.Dim(name, min=2, max=top) for _, name in filter(None, scheme.dims)}
    shapes = tuple(None if d is None else {d[0]: dims[d[1]]} for d in scheme.dims)
    return (shapes,) if isinstance(module, Call) else shapes  # Call.forward(*args)


@over("export")
def test_export_with_dynamic_length(scheme: Scheme) -> None:
    module = scheme.make().eval()
    program = torch.export.export(
        module, scheme.sample(8), dynamic_shapes=_dynamic_shapes(scheme, module)
    )
    exported = program.module()
    for length in (3, min(50, (scheme.table_rows or 512))):
        args = scheme.sample(length)
        _equal(exported(*args), module(*args))


@pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")
# torch.onnx, told that tensors share a length (apply_rotary's x, cos and sin), keeps one name.
@pytest.mark.filterwarnings("ignore:# The axis name.*will not be used:UserWarning")
@over("onnx")
def test_onnx_export_runs_in_onnxruntime_at_two_lengths(scheme: Scheme) -> None:
    import onnxruntime

    module = scheme.make().eval()
    program = torch.onnx.export(
        module,
        scheme.sample(8),
        dynamic_shapes=_dynamic_shapes(scheme, module),
        dynamo=True,
        verbose=False,
    )
    assert program is not None
    session = onnxruntime.InferenceSession(
        program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    names = [i.name for i in session.get_inputs()]
    for length in (5, min(MAX_LEN, (scheme.table_rows or 512))):
        args = scheme.sample(length)
        (got,) = session.run(None, dict(zip(names, (a.numpy() for a in args), strict=True)))
        expected = module(*args).detach().numpy()
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


# -- torch.func --------------------------------------------------------------------------------


@over("vmap")
def test_vmap_over_inputs_equals_each_sample(scheme: Scheme) -> None:
    module = scheme.make().eval()
    kwargs: dict[str, object] = {"offset": 4} if scheme.positions else {}
    samples = [scheme.sample(5) for _ in range(3)]
    stacked = tuple(torch.stack(parts) for parts in zip(*samples, strict=True))

    def call(*a: Tensor) -> Tensor:
        out: Tensor = module(*a, **kwargs)
        return out

    # Every input batched, then (for several inputs) each one alone, the others shared.
    batched = [tuple(range(len(stacked)))]
    if len(stacked) > 1:
        batched += [(i,) for i in range(len(stacked))]
    for dtype in _input_dtypes(scheme, [torch.float32, torch.bfloat16]):
        full = _as(stacked, dtype)
        for which in batched:
            args = tuple(a if i in which else a[0] for i, a in enumerate(full))
            in_dims = tuple(0 if i in which else None for i in range(len(args)))
            got = vmap(call, in_dims=in_dims)(*args)
            each = [
                call(*(a[k] if i in which else a for i, a in enumerate(args)))
                for k in range(len(samples))
            ]
            _equal(got, torch.stack(each))


@over("vmap_positions")
def test_vmap_over_positions_equals_each_sample(scheme: Scheme) -> None:
    module = scheme.make().eval()
    args = scheme.sample(4)
    # Inside and past max_len, where the rows are computed instead of looked up.
    positions = _positions(scheme, (5, BATCH, 4))
    got = vmap(lambda p: module(*args, positions=p))(positions)
    _equal(got, _each(lambda p: module(*args, positions=p), positions))


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
@over("forward_ad")
def test_forward_ad_through_the_linear_input(scheme: Scheme, grad_mode: bool) -> None:
    module = scheme.make().eval()
    for length in (5, MAX_LEN + 6) if scheme.extrapolates else (5, MAX_LEN):
        x, *rest = scheme.sample(length)
        v = torch.randn_like(x)

        def f(t: Tensor, rest: list[Tensor] = rest) -> Tensor:
            out: Tensor = module(t, *rest)
            return out

        with torch.set_grad_enabled(grad_mode):
            out, tangent = jvp(f, (x,), (v,))
            with fwad.dual_level():
                primal, dual_tangent = fwad.unpack_dual(f(fwad.make_dual(x, v)))
        _equal(out, f(x))
        _equal(primal, f(x))
        for t in (tangent, dual_tangent):
            if scheme.linear == "adds":  # x + f(positions): the input's tangent, exactly
                _equal(t, v)
            else:  # a linear map: the map of the tangent
                torch.testing.assert_close(t, f(v), rtol=1e-6, atol=1e-6)


# -- Casts and integer dtypes ----------------------------------------------------------------


@pytest.mark.parametrize("cast_to", FLOATS)
@over("cast")
def test_a_cast_module_equals_a_fresh_one_bit_for_bit(
    scheme: Scheme, cast_to: torch.dtype
) -> None:
    # A fresh module given the cast one's parameters (learned tables round when cast, as
    # any weight): every derived table must be what a fresh module computes.
    cast = scheme.make().to(cast_to)
    fresh = _with_weights_of(cast, scheme.make)
    for dtype in _input_dtypes(scheme, FLOATS):
        for length in (MAX_LEN, 3 * MAX_LEN) if scheme.extrapolates else (MAX_LEN,):
            args = _as(scheme.sample(length), dtype)
            _equal(cast(*args), fresh(*args))
            if scheme.positions:
                shorter = _as(scheme.sample(length - 3), dtype)  # within a learned table
                _equal(cast(*shorter, offset=3), fresh(*shorter, offset=3))
                positions = _positions(scheme, (BATCH, length))
                _equal(cast(*args, positions=positions), fresh(*args, positions=positions))


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
@over("integer_dtypes")
def test_integers_of_every_dtype_equal_int64(scheme: Scheme, dtype: torch.dtype) -> None:
    module = scheme.make().eval()
    # Values every integer dtype holds (uint8 and int8 included).
    args = tuple(
        a if a.is_floating_point() else a.remainder(100).to(torch.int64) for a in scheme.sample(4)
    )

    def as_dtype(t: Tensor) -> Tensor:
        return t if t.is_floating_point() else t.to(dtype)

    _equal(module(*map(as_dtype, args)), module(*args))
    if not scheme.positions:
        return
    top = scheme.table_rows or MAX_LEN
    inside = torch.tensor([3, 1, top - 1, 0])
    past = torch.tensor([top + 36, top + 37, 5, 9])  # past the table, where it extrapolates
    for values in (inside, past) if scheme.extrapolates else (inside,):
        forms = [values, torch.stack([values, values.flip(0)])]
        if scheme.axes:  # (A, L) and (A, B, L): each axis its own positions
            on_axes = torch.stack([values.roll(a) for a in range(scheme.axes)])
            forms += [on_axes, torch.stack([on_axes, on_axes.flip(-1)], dim=1)]
        for where in forms:
            _equal(
                module(*map(as_dtype, args), positions=as_dtype(where)),
                module(*args, positions=where),
            )
    # Per sequence, the last one across the table's end where it extrapolates.
    last = top - 2 if scheme.extrapolates else top - 4
    for offset in (torch.tensor([1, last]), torch.tensor(5)):
        _equal(module(*map(as_dtype, args), offset=as_dtype(offset)), module(*args, offset=offset))


# -- Construction, copies, hooks, threads ------------------------------------------------------


@pytest.mark.parametrize("where", ["meta", "cpu"])
@over("meta")
def test_to_empty_then_parameters_equals_normal_construction(scheme: Scheme, where: str) -> None:
    normal = scheme.make().eval()
    with torch.device(where):
        module = scheme.make().eval()
    if where == "meta":
        assert all(t.is_meta for t in chain(module.parameters(), module.buffers()))
    module.to_empty(device="cpu")
    # Derived tables are derived again; parameters are undefined until loaded.
    module.load_state_dict(normal.state_dict())
    lengths = (MAX_LEN, 3 * MAX_LEN) if scheme.extrapolates else (MAX_LEN,)
    for length in lengths:
        args = scheme.sample(length)
        _equal(module(*args), normal(*args))


@over("copies")
def test_deepcopy_pickle_and_save_round_trips(scheme: Scheme) -> None:
    module = scheme.make().eval()
    args = scheme.sample(7)
    expected = module(*args)
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    for other in (copy.deepcopy(module), pickle.loads(pickle.dumps(module)), loaded):
        _equal(other(*args), expected)
        assert repr(other) == repr(module)


@over("hooks")
def test_forward_hooks_fire_and_see_the_output(scheme: Scheme) -> None:
    module = scheme.make().eval()
    args = scheme.sample(6)
    plain = module(*args)
    seen: list[object] = []
    target = public(module)
    target.register_forward_pre_hook(lambda m, a: seen.append("pre"))
    target.register_forward_hook(lambda m, a, out: seen.append(out))
    out = module(*args)
    assert len(seen) == 2
    assert seen[0] == "pre"
    assert seen[1] is out
    _equal(out, plain)


@over("threads")
def test_threads_at_once_give_the_serial_results(scheme: Scheme) -> None:
    module = scheme.make().eval()
    lengths = (3, 17, MAX_LEN, 100) if scheme.extrapolates else (3, 17, MAX_LEN)
    # Calls of the same shapes with other values: a result computed for another call shows.
    work: list[tuple[tuple[Tensor, ...], dict[str, object]]] = []
    for length in lengths * 2:
        work.append((scheme.sample(length), {}))
        if scheme.positions:
            where = _positions(scheme, (BATCH, length))
            work.append((scheme.sample(length), {"positions": where}))
    serial = [module(*args, **kwargs) for args, kwargs in work]
    start = threading.Barrier(len(work))

    def run(i: int) -> list[Tensor]:
        args, kwargs = work[i]
        start.wait()
        return [module(*args, **kwargs) for _ in range(25)]

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as Python can: races show
    try:
        with ThreadPoolExecutor(len(work)) as pool:
            results = list(pool.map(run, range(len(work))))
    finally:
        sys.setswitchinterval(switch)
    for got, want in zip(results, serial, strict=True):
        for out in got:
            _equal(out, want)


# -- Buffers and accessors ------------------------------------------------------------------


@over("no_op_to")
def test_no_op_moves_and_casts_keep_every_tensor(scheme: Scheme) -> None:
    module = scheme.make()
    before = dict(chain(module.named_buffers(), module.named_parameters()))
    assert before
    with torch.no_grad():
        for t in before.values():
            t.view(-1)[0] = 42.0  # a recomputation would repair this: it must not happen
    module.to("cpu")
    module.float()
    module.to(torch.float32)
    module.to(device="cpu", dtype=torch.float32)
    module.cpu()
    after = dict(chain(module.named_buffers(), module.named_parameters()))
    assert after.keys() == before.keys()
    for name, t in before.items():
        assert after[name] is t, name
        assert after[name].view(-1)[0] == 42.0, name


@over("fresh_accessor")
def test_accessors_return_fresh_tensors(scheme: Scheme) -> None:
    module = scheme.make().eval()
    assert scheme.accessor is not None
    args = scheme.sample(3)
    for kwargs in ({}, {"offset": 2}, {"positions": torch.tensor([0, 3, 1])}):
        before = module(*args, **kwargs)
        first = scheme.accessor(module, 3, kwargs)
        kept = [t.clone() for t in first]
        for t in first:
            t.fill_(7.0)
        _equal(module(*args, **kwargs), before)
        for again, want in zip(scheme.accessor(module, 3, kwargs), kept, strict=True):
            _equal(again, want)
