"""torch.compile, torch.export and ONNX of the position family's modules and functions."""

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

from posenc import (
    ALiBi,
    LearnedPositionalEmbedding,
    RelativePositionBias,
    sincos_2d,
    timestep_embedding,
)

H, D, MAX_LEN = 4, 16, 64


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()


BIASES: list[tuple[str, Callable[[], nn.Module]]] = [
    ("ALiBi", lambda: ALiBi(H)),
    ("ALiBi-symmetric", lambda: ALiBi(H, symmetric=True)),
    ("RelativePositionBias", lambda: RelativePositionBias(H)),
    (
        "RelativePositionBias-decoder",
        lambda: RelativePositionBias(H, bidirectional=False, num_buckets=16, max_distance=40),
    ),
]
BIAS_IDS = [name for name, _ in BIASES]


class FromPositions(nn.Module):
    """A bias module called with query and key positions, the tensors an export takes."""

    def __init__(self, bias: nn.Module) -> None:
        super().__init__()
        self.bias = bias

    def forward(self, positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.bias(
            positions.shape[-1], positions=positions, key_positions=key_positions
        )
        return out


@pytest.mark.parametrize(("name", "make"), BIASES, ids=BIAS_IDS)
def test_bias_compiles_to_one_graph_for_all_lengths(
    name: str, make: Callable[[], nn.Module]
) -> None:
    module = make()
    backend = CountingBackend()
    compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=True)
    for lq, lk in ((3, 5), (7, 20), (17, 17), (40, 300)):
        assert torch.equal(compiled(lq, lk, offset=lk - lq), module(lq, lk, offset=lk - lq))
    assert backend.graphs == 1


@pytest.mark.parametrize(("name", "make"), BIASES, ids=BIAS_IDS)
def test_bias_compiles_with_position_tensors(name: str, make: Callable[[], nn.Module]) -> None:
    module = FromPositions(make())
    backend = CountingBackend()
    compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=True)
    for length in (3, 9, 33):
        p = torch.randint(0, 500, (2, length))
        k = torch.randint(0, 500, (2, length + 4))
        assert torch.equal(compiled(p, k), module(p, k))
    assert backend.graphs == 1


@pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")
@pytest.mark.parametrize(("name", "make"), BIASES, ids=BIAS_IDS)
def test_bias_onnx_export_runs_in_onnxruntime(name: str, make: Callable[[], nn.Module]) -> None:
    import onnxruntime

    module = FromPositions(make()).eval()
    lq, lk = torch.export.Dim("lq", min=2, max=512), torch.export.Dim("lk", min=2, max=512)
    example = (torch.arange(8).expand(2, 8), torch.arange(10).expand(2, 10))
    program = torch.onnx.export(
        module, example, dynamic_shapes=({1: lq}, {1: lk}), dynamo=True, verbose=False
    )
    assert program is not None
    session = onnxruntime.InferenceSession(
        program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    names = [i.name for i in session.get_inputs()]
    for length, keys in ((5, 7), (61, 300)):
        p = torch.randint(0, 1000, (2, length))
        k = torch.randint(0, 1000, (2, keys))
        (got,) = session.run(None, dict(zip(names, (p.numpy(), k.numpy()), strict=True)))
        expected = module(p, k).detach().numpy()
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("name", "make"), BIASES, ids=BIAS_IDS)
def test_bias_torch_export_with_dynamic_lengths(name: str, make: Callable[[], nn.Module]) -> None:
    module = FromPositions(make()).eval()
    lq, lk = torch.export.Dim("lq", min=2, max=512), torch.export.Dim("lk", min=2, max=512)
    example = (torch.arange(8).expand(2, 8), torch.arange(10).expand(2, 10))
    exported = torch.export.export(module, example, dynamic_shapes=({1: lq}, {1: lk})).module()
    for length, keys in ((3, 4), (50, 200)):
        p, k = torch.randint(0, 99, (2, length)), torch.randint(0, 99, (2, keys))
        assert torch.equal(exported(p, k), module(p, k))


def learned() -> nn.Module:
    torch.manual_seed(0)
    return LearnedPositionalEmbedding(MAX_LEN, D)


def test_learned_compiles_to_one_graph_for_all_lengths() -> None:
    module = learned().eval()
    backend = CountingBackend()
    compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=True)
    for length in (3, 5, 17, 40, MAX_LEN):
        x = torch.randn(2, length, D)
        assert torch.equal(compiled(x), module(x))
    assert backend.graphs == 1


def test_learned_compiles_with_positions() -> None:
    module = learned().eval()
    backend = CountingBackend()
    compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=True)
    for length in (3, 9, 33):
        x, p = torch.randn(2, length, D), torch.randint(0, MAX_LEN, (2, length))
        assert torch.equal(compiled(x, positions=p), module(x, positions=p))
    assert backend.graphs == 1


@pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")
def test_learned_onnx_export_runs_in_onnxruntime() -> None:
    import onnxruntime

    module = learned().eval()
    length = torch.export.Dim("length", min=2, max=MAX_LEN)
    program = torch.onnx.export(
        module, (torch.randn(2, 8, D),), dynamic_shapes=({1: length},), dynamo=True
    )
    assert program is not None
    session = onnxruntime.InferenceSession(
        program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    name = session.get_inputs()[0].name
    for n in (5, MAX_LEN):
        x = torch.randn(2, n, D)
        (got,) = session.run(None, {name: x.numpy()})
        np.testing.assert_allclose(got, module(x).detach().numpy(), rtol=1e-6, atol=1e-6)


class Timesteps(nn.Module):
    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return timestep_embedding(t, 33, flip_sin_to_cos=True, downscale_freq_shift=0)


class Patches(nn.Module):
    """Patches of a 14 × 14 grid plus their 2-D encoding."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + sincos_2d(14, 14, x.shape[-1], convention="timm", dtype=x.dtype)


def test_timesteps_and_grid_compile_fullgraph() -> None:
    backend = CountingBackend()
    steps = torch.compile(Timesteps(), backend=backend, fullgraph=True, dynamic=True)
    for batch in (3, 5, 17):
        t = torch.rand(batch) * 1000
        assert torch.equal(steps(t), Timesteps()(t))
    assert backend.graphs == 1
    patches = torch.compile(Patches(), backend=CountingBackend(), fullgraph=True)
    x = torch.randn(2, 196, D)
    assert torch.equal(patches(x), Patches()(x))


@pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")
@pytest.mark.parametrize(
    ("module", "example", "dims"),
    [
        (Timesteps(), torch.rand(4) * 1000, {0: torch.export.Dim("batch", min=2, max=256)}),
        (Patches(), torch.randn(3, 196, D), {0: torch.export.Dim("batch", min=2, max=256)}),
    ],
    ids=["timestep_embedding", "sincos_2d"],
)
def test_timesteps_and_grid_onnx_export(
    module: nn.Module, example: torch.Tensor, dims: dict[int, object]
) -> None:
    import onnxruntime

    module.eval()
    program = torch.onnx.export(module, (example,), dynamic_shapes=(dims,), dynamo=True)
    assert program is not None
    session = onnxruntime.InferenceSession(
        program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    name = session.get_inputs()[0].name
    x = torch.cat([example, example, example])
    (got,) = session.run(None, {name: x.numpy()})
    np.testing.assert_allclose(got, module(x).numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "make",
    [lambda: ALiBi(H), lambda: RelativePositionBias(H), learned],
    ids=["ALiBi", "RelativePositionBias", "LearnedPositionalEmbedding"],
)
def test_deepcopy_pickle_and_save_round_trips(make: Callable[[], nn.Module]) -> None:
    module = make().eval()

    def run(m: nn.Module) -> torch.Tensor:
        if isinstance(m, LearnedPositionalEmbedding):
            return m(torch.ones(2, 5, D))
        out: torch.Tensor = m(5, 7, offset=2)
        return out

    expected = run(module)
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    for other in (copy.deepcopy(module), pickle.loads(pickle.dumps(module)), loaded):
        assert torch.equal(run(other), expected)
        assert repr(other) == repr(module)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: ALiBi(8)(10**7), ["an ALiBi bias of shape (8, 10000000, 10000000)"]),
        (
            lambda: RelativePositionBias(8)(
                10**7, positions=torch.zeros(2, 10**7, dtype=torch.long)
            ),
            ["a relative position bias of shape (2, 8, 10000000, 10000000)"],
        ),
        (lambda: sincos_2d(10**5, 10**5, 1024), ["100000 × 100000 grid"]),
        (lambda: timestep_embedding(torch.zeros(10**4), 10**12), ["a timestep embedding"]),
        (lambda: LearnedPositionalEmbedding(10**9, 10**6), ["max_len=1000000000"]),
    ],
    ids=["ALiBi", "RelativePositionBias", "sincos_2d", "timestep_embedding", "Learned"],
)
def test_a_result_too_large_is_refused_before_any_work(
    call: Callable[[], object], words: list[str]
) -> None:
    with pytest.raises(ValueError, match="ask for fewer positions") as info:
        call()
    for word in words:
        assert word in str(info.value)
