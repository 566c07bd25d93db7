"""torch.compile, torch.export, ONNX, deepcopy and pickle of every module."""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

from posenc import Embeddings, PositionalEncoding, TokenAndPositionEmbedding

D, VOCAB, MAX_LEN = 32, 100, 64


def float_input(length: int) -> torch.Tensor:
    return torch.randn(2, length, D)


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
]
IDS = [name for name, _, _ in MODULES]


class CountingBackend:
    """A torch.compile backend that counts graph compilations and runs them eagerly."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: object) -> Callable[..., object]:
        self.graphs += 1
        return gm.forward


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


def test_compile_past_max_len_adds_one_graph_not_one_per_length() -> None:
    module = PositionalEncoding(D, max_len=MAX_LEN)
    backend = CountingBackend()
    compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=True)
    for length in (3, 10, MAX_LEN + 1, 100, 300):
        x = float_input(length)
        assert torch.equal(compiled(x), module(x))
    assert backend.graphs == 2  # rows from the buffer / rows computed on the fly


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
