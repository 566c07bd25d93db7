"""torch.compile, torch.export, ONNX, deepcopy and pickle of every module."""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable

import numpy as np
import pytest
import torch
from reference import CountingBackend
from torch import nn

from posenc import Embeddings, PositionalEncoding, RotaryEmbedding, TokenAndPositionEmbedding

D, VOCAB, MAX_LEN = 32, 100, 64
HEADS = 4


def float_input(length: int) -> torch.Tensor:
    return torch.randn(2, length, D)


def head_input(length: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(2, HEADS, length, D).to(dtype)


def id_input(length: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, length))


MODULES: list[tuple[str, Callable[[], nn.Module], Callable[[int], torch.Tensor]]] = [
    ("PositionalEncoding", lambda: PositionalEncoding(D, max_len=MAX_LEN), float_input),
    ("Embeddings", lambda: Embeddings(D, VOCAB), id_input),
    (
        "TokenAndPositionEmbedding",
        lambda: TokenAndPositionEmbedding(D, VOCAB, max_len=MAX_LEN, layout="concatenated"),
        id_input,
    ),
    (
        "RotaryEmbedding",
        lambda: RotaryEmbedding(
            D, max_len=MAX_LEN, scaling={"rope_type": "linear", "factor": 2.0}
        ),
        float_input,
    ),
]
IDS = [name for name, _, _ in MODULES]


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()


@pytest.mark.parametrize(("name", "make", "inputs"), MODULES, ids=IDS)
def test_compile_fullgraph_one_graph_for_all_lengths(
    name: str, make: Callable[[], nn.Module], inputs: Callable[[int], torch.Tensor]
) -> None:
    module = make().eval()
    backend = CountingBackend()
    compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=True)
    for length in (3, 5, 17, 40, MAX_LEN):
        x = inputs(length)
        assert torch.equal(compiled(x), module(x))
    assert backend.graphs == 1


@pytest.mark.parametrize(
    ("make", "inputs"),
    [
        (lambda: PositionalEncoding(D, max_len=MAX_LEN), float_input),
        (lambda: RotaryEmbedding(D, max_len=MAX_LEN), head_input),
    ],
    ids=["PositionalEncoding", "RotaryEmbedding"],
)
def test_compile_past_max_len_adds_one_graph_not_one_per_length(
    make: Callable[[], nn.Module], inputs: Callable[[int], torch.Tensor]
) -> None:
    module = make()
    backend = CountingBackend()
    compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=True)
    for length in (3, 10, MAX_LEN + 1, 100, 300):
        x = inputs(length)
        assert torch.equal(compiled(x), module(x))
    assert backend.graphs == 2  # rows from the table / rows computed on the fly


def test_compile_with_tensor_offsets_and_positions() -> None:
    module = TokenAndPositionEmbedding(D, VOCAB, max_len=MAX_LEN)
    backend = CountingBackend()
    compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=True)
    for length in (3, 9, 33):  # not 2: duck sizing would tie L to the batch size
        ids = id_input(length)
        positions = torch.randint(0, 3 * MAX_LEN, (2, length))
        offset = torch.tensor([0, 70])
        assert torch.equal(compiled(ids, positions=positions), module(ids, positions=positions))
        assert torch.equal(compiled(ids, offset=offset), module(ids, offset=offset))
    assert backend.graphs <= 2  # one graph per keyword used, none per length


# Inductor's CPU backend imports torch.utils.mkldnn, which warns about TorchScript.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_compile_inductor_matches_eager() -> None:
    module = TokenAndPositionEmbedding(D, VOCAB, max_len=MAX_LEN).eval()
    compiled = torch.compile(module, fullgraph=True, dynamic=True)
    for length in (4, 9):
        ids = id_input(length)
        torch.testing.assert_close(compiled(ids), module(ids), rtol=0, atol=1e-6)


@pytest.mark.parametrize(("name", "make", "inputs"), MODULES, ids=IDS)
def test_export_with_dynamic_length(
    name: str, make: Callable[[], nn.Module], inputs: Callable[[int], torch.Tensor]
) -> None:
    module = make().eval()
    length = torch.export.Dim("length", min=2, max=MAX_LEN)
    program = torch.export.export(module, (inputs(8),), dynamic_shapes=({1: length},))
    exported = program.module()
    for n in (3, 50):
        x = inputs(n)
        assert torch.equal(exported(x), module(x))


@pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")
@pytest.mark.parametrize(("name", "make", "inputs"), MODULES, ids=IDS)
def test_onnx_export_runs_in_onnxruntime_at_two_lengths(
    name: str, make: Callable[[], nn.Module], inputs: Callable[[int], torch.Tensor]
) -> None:
    import onnxruntime

    module = make().eval()
    length = torch.export.Dim("length", min=2, max=MAX_LEN)
    program = torch.onnx.export(
        module, (inputs(8),), dynamic_shapes=({1: length},), dynamo=True, verbose=False
    )
    assert program is not None
    session = onnxruntime.InferenceSession(
        program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    feed_name = session.get_inputs()[0].name
    for n in (5, 61):
        x = inputs(n)
        (got,) = session.run(None, {feed_name: x.numpy()})
        expected = module(x).detach().numpy()
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize(("name", "make", "inputs"), MODULES, ids=IDS)
def test_deepcopy_and_pickle_round_trips(
    name: str, make: Callable[[], nn.Module], inputs: Callable[[int], torch.Tensor]
) -> None:
    module = make().eval()
    x = inputs(7)
    expected = module(x)
    clone = copy.deepcopy(module)
    restored = pickle.loads(pickle.dumps(module))
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    for other in (clone, restored, loaded):
        assert torch.equal(other(x), expected)
        assert repr(other) == repr(module)


# --- RotaryEmbedding on (B, H, L, D) inputs ---------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_compile_one_graph_for_all_lengths_and_dtype(
    layout: str, dtype: torch.dtype
) -> None:
    module = RotaryEmbedding(D, layout=layout, max_len=MAX_LEN)  # type: ignore[arg-type]
    backend = CountingBackend()
    compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=True)
    for length in (3, 5, 17, 40, MAX_LEN):
        x = head_input(length, dtype)
        assert torch.equal(compiled(x), module(x))
        assert torch.equal(compiled(x, offset=7), module(x, offset=7))
    assert backend.graphs <= 2  # offset 0 and 7 may specialise; no graph per length


@pytest.mark.parametrize(
    "scaling",
    [None, {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 32}],
    ids=["default", "dynamic"],
)
def test_rotary_compile_with_tensor_offsets_and_positions(
    scaling: dict[str, object] | None,
) -> None:
    module = RotaryEmbedding(D, max_len=MAX_LEN, scaling=scaling)
    backend = CountingBackend()
    compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=True)
    for length in (3, 9, 33, 100):  # past max_len too: computed on the fly, in the graph
        x = head_input(length)
        positions = torch.randint(0, 3 * MAX_LEN, (2, length))
        offset = torch.tensor([0, 70])
        assert torch.equal(compiled(x, positions=positions), module(x, positions=positions))
        assert torch.equal(compiled(x, offset=offset), module(x, offset=offset))
    assert backend.graphs <= 2  # one graph per keyword used, none per length


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_compile_inductor_matches_eager(dtype: torch.dtype) -> None:
    module = RotaryEmbedding(D, max_len=MAX_LEN)
    compiled = torch.compile(module, fullgraph=True, dynamic=True)
    for length in (4, 9):
        x = head_input(length, dtype)
        got, expected = compiled(x, offset=10**5), module(x, offset=10**5)
        assert got.dtype == dtype
        # Inductor may round the two products differently (no fused multiply-add): at most
        # an ulp apart in float32; in bfloat16, where the float32 result sits on a
        # rounding boundary, one bfloat16 ulp.
        ulps = 2.0**-23 * 8 if dtype == torch.float32 else 2.0**-7 * 8
        torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=ulps)


@pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")
def test_rotary_export_and_onnx_on_four_dimensional_inputs() -> None:
    import onnxruntime

    module = RotaryEmbedding(D, max_len=MAX_LEN, layout="interleaved").eval()
    length = torch.export.Dim("length", min=2, max=MAX_LEN)
    program = torch.export.export(module, (head_input(8),), dynamic_shapes=({2: length},))
    for n in (3, 50):
        x = head_input(n)
        assert torch.equal(program.module()(x), module(x))
    onnx_program = torch.onnx.export(
        module, (head_input(8),), dynamic_shapes=({2: length},), dynamo=True, verbose=False
    )
    assert onnx_program is not None
    session = onnxruntime.InferenceSession(
        onnx_program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    for n in (5, 61):
        x = head_input(n)
        (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        np.testing.assert_allclose(got, module(x).numpy(), rtol=0, atol=1e-6)
