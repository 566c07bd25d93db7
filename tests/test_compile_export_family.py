"""torch.compile of the biases called with int lengths, ONNX of a fixed 2-D grid, size guards.

The contracts every scheme keeps (compile graph counts, export, ONNX, copies) run over the
registry of schemes, in test_schemes.py.
"""

from __future__ import annotations

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

H, D = 4, 16


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


class Patches(nn.Module):
    """Patches of a 14 × 14 grid plus their 2-D encoding."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + sincos_2d(14, 14, x.shape[-1], convention="timm", dtype=x.dtype)


# The registry's sincos_2d takes its grid size from the input, which does not export
# (tests/schemes.py says why); a fixed grid, with a dynamic batch, does.
@pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")
def test_a_fixed_grid_onnx_export() -> None:
    import onnxruntime

    module, example = Patches().eval(), torch.randn(3, 196, D)
    dims = {0: torch.export.Dim("batch", min=2, max=256)}
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
