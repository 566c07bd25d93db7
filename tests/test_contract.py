"""The position contract across modules: integer dtypes, casts, hooks, aliasing, sizes, flags.

Each test pins one class of defect that a module-by-module test could miss:
positions of every integer dtype, a module cast after construction compared with
a fresh one, PyTorch's hook contract on the fused layer, buffers handed out by
public methods, tables too large to allocate, flags of the wrong type.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from reference import round_once
from torch import nn

from posenc import (
    ALiBi,
    Embeddings,
    LearnedPositionalEmbedding,
    PositionalEncoding,
    RotaryEmbedding,
    TokenAndPositionEmbedding,
    inverse_frequencies,
    sincos_2d,
    sinusoidal_table,
    timestep_embedding,
)

D = 16


# -- Every integer dtype is a position ---------------------------------------------------
# Every integer dtype of inputs, positions and offsets equals int64 for every scheme in
# test_schemes.py; here, what is particular to the sinusoid.


def test_uint8_positions_are_positions_not_a_mask() -> None:
    # Indexing with a uint8 tensor means a mask to torch; to posenc it means positions.
    pe = PositionalEncoding(D, max_len=8)
    positions = torch.tensor([3, 1, 0, 2], dtype=torch.uint8)
    out = pe(torch.zeros(4, D), positions=positions)
    assert torch.equal(out, sinusoidal_table(torch.tensor([3, 1, 0, 2]), D))


@pytest.mark.parametrize("offset", [-3, -1, -10_000])
def test_negative_offsets_mean_the_same_as_int_and_as_tensor(offset: int) -> None:
    # Positions are any integers: the sinusoid is defined at negative positions too.
    pe = PositionalEncoding(D, max_len=8)
    x = torch.randn(2, 4, D)
    by_int = pe(x, offset=offset)
    assert torch.equal(by_int, pe(x, offset=torch.tensor(offset)))
    assert torch.equal(by_int, pe(x, offset=torch.tensor([offset, offset])))
    assert torch.equal(by_int, pe(x, positions=torch.arange(offset, offset + 4)))
    assert torch.equal(by_int, x + sinusoidal_table(torch.arange(offset, offset + 4), D))


def test_offsets_that_leave_the_position_domain_are_refused() -> None:
    # The domain is |p| < 2**62: every difference of two positions then fits in int64.
    pe = PositionalEncoding(D)
    x = torch.randn(1, 4, D)
    last = 2**62 - 4  # positions last .. last + 3 = 2**62 - 1: the largest position, fine
    assert pe(x, offset=last).shape == x.shape
    assert pe(x, offset=-(2**62) + 1).shape == x.shape
    with pytest.raises(ValueError, match=r"offset=4611686018427387901 .*outside int64"):
        pe(x, offset=last + 1)
    with pytest.raises(ValueError, match="outside int64"):
        pe(x, offset=-(2**62))
    with pytest.raises(ValueError, match="outside int64"):
        pe(x, offset=-(2**63) - 1)


# -- One rounding after any cast -----------------------------------------------------------


LOW = [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("cast_to", [*LOW, torch.float32, torch.float64])
@pytest.mark.parametrize("input_dtype", [*LOW, torch.float32, torch.float64])
def test_a_cast_module_equals_a_fresh_one_bit_for_bit(
    cast_to: torch.dtype, input_dtype: torch.dtype
) -> None:
    # A table rounded for one dtype never feeds another: fp16 values rounded again to
    # bf16 would be two roundings (and fp16's subnormals would show).
    fresh = PositionalEncoding(512)
    cast = PositionalEncoding(512).to(cast_to)
    x = torch.zeros(2, 5000, 512, dtype=input_dtype)
    assert torch.equal(cast(x), fresh(x))
    assert torch.equal(cast(x, offset=3), fresh(x, offset=3))
    positions = torch.randint(0, 6000, (2, 5000))
    assert torch.equal(cast(x, positions=positions), fresh(x, positions=positions))


def test_half_module_fed_bfloat16_is_the_float64_table_rounded_once() -> None:
    out = PositionalEncoding(512).half()(torch.zeros(5000, 512, dtype=torch.bfloat16))
    exact = sinusoidal_table(5000, 512, dtype=torch.float64)
    assert torch.equal(out, round_once(exact, torch.bfloat16))


@pytest.mark.parametrize("chain", [("half", "bfloat16"), ("bfloat16", "half", "float")])
def test_chains_of_casts_leave_the_table_of_the_last_dtype(chain: tuple[str, ...]) -> None:
    module = PositionalEncoding(64, max_len=300)
    for name in chain:
        getattr(module, name)()
    assert torch.equal(module.pe[0], sinusoidal_table(300, 64, dtype=module.pe.dtype))


@pytest.mark.parametrize("dtype", [*LOW, torch.float32])
def test_fused_layer_cast_equals_fresh_pair_with_the_same_weights(dtype: torch.dtype) -> None:
    layer = TokenAndPositionEmbedding(64, vocab=100, max_len=50).half().to(dtype)
    pair = nn.Sequential(Embeddings(64, 100), PositionalEncoding(64, max_len=50))
    pair[0].lut.weight.data = layer.embeddings.lut.weight.data.clone()
    ids = torch.randint(0, 100, (3, 70))  # past max_len too
    assert torch.equal(layer(ids), pair(ids))


def test_tables_follow_torchs_default_dtype_as_torchs_modules_do(float64_default: None) -> None:
    # nn.Embedding's weight is float64 under a float64 default; a float32 table beside it
    # would compute every row on the fly, and would not be the module that .double() gives.
    layer = TokenAndPositionEmbedding(D, vocab=30, max_len=20)
    assert layer.embeddings.lut.weight.dtype == torch.float64
    assert layer.positional.pe.dtype == torch.float64
    assert torch.equal(layer.positional.pe, PositionalEncoding(D, max_len=20).pe)
    torch.set_default_dtype(torch.float32)
    assert torch.equal(layer.positional.pe, PositionalEncoding(D, max_len=20).double().pe)
    rope32 = RotaryEmbedding(D, max_len=20)
    torch.set_default_dtype(torch.float64)
    rope = RotaryEmbedding(D, max_len=20)
    assert rope._cos.dtype == torch.float64  # the table float64 inputs are served from
    assert torch.equal(rope._cos, rope32.double()._cos)
    assert ALiBi(4)(3).dtype == torch.float64
    assert LearnedPositionalEmbedding(20, D).weight.dtype == torch.float64


def test_results_without_a_device_go_where_torchs_factories_put_them() -> None:
    # Inside `with torch.device("meta")` a model is built without memory; a table made
    # on the CPU there would be computed for nothing, and sit on the wrong device.
    with torch.device("meta"):
        made = {
            "sinusoidal_table": sinusoidal_table(5, D),
            "sincos_2d": sincos_2d(2, 3, D),
            "ALiBi": ALiBi(2)(3),
            "ALiBi, positions given": ALiBi(2)(3, positions=torch.arange(3)),
            "PositionalEncoding.pe": PositionalEncoding(D, max_len=10).pe,
            "RotaryEmbedding": RotaryEmbedding(D, max_len=10)(torch.zeros(2, 3, D)),
            "LearnedPositionalEmbedding": LearnedPositionalEmbedding(10, D).weight,
        }
    assert {name: t.device.type for name, t in made.items()} == dict.fromkeys(made, "meta")
    assert sinusoidal_table(5, D).device.type == "cpu"


# -- Hooks on the fused layer ------------------------------------------------------------


def _layer_and_ids() -> tuple[TokenAndPositionEmbedding, torch.Tensor]:
    torch.manual_seed(0)
    return TokenAndPositionEmbedding(D, vocab=30, max_len=20), torch.randint(0, 30, (2, 6))


def test_a_hook_that_keeps_the_lookup_sees_it_unchanged() -> None:
    layer, ids = _layer_and_ids()
    kept: list[torch.Tensor] = []
    layer.embeddings.lut.register_forward_hook(lambda m, i, out: kept.append(out))
    out = layer(ids)
    assert torch.equal(kept[0], layer.embeddings.lut.weight[ids])  # not scaled, nothing added
    unfused = PositionalEncoding(D, max_len=20)(layer.embeddings(ids))
    assert torch.equal(out, unfused)


def test_a_loss_added_on_a_hooked_lookup_backpropagates() -> None:
    layer, ids = _layer_and_ids()
    extra: list[torch.Tensor] = []
    layer.embeddings.lut.register_forward_hook(lambda m, i, out: extra.append(out.pow(2).sum()))
    loss = layer(ids).sum() + extra[0]
    loss.backward()  # an in-place write on the hooked output would fail here
    grad = layer.embeddings.lut.weight.grad
    assert grad is not None
    # d/dW of (scale * W[ids]).sum() + (W[ids] ** 2).sum(), row by row
    w = layer.embeddings.lut.weight.detach()
    expected = torch.zeros_like(w)
    for i in ids.flatten().tolist():
        expected[i] += layer.embeddings.scale + 2 * w[i]
    torch.testing.assert_close(grad, expected)


@pytest.mark.parametrize(
    "child", ["embeddings", "positional", "embeddings.lut", "positional.dropout"]
)
def test_hooks_on_every_child_fire_as_on_the_unfused_pair(child: str) -> None:
    layer, ids = _layer_and_ids()
    calls: list[str] = []
    module = layer.get_submodule(child)
    module.register_forward_pre_hook(lambda m, args: calls.append("pre"))
    module.register_forward_hook(lambda m, args, out: calls.append("post"))
    layer(ids)
    assert calls == ["pre", "post"]


def test_a_pre_hook_that_changes_the_input_is_respected() -> None:
    layer, ids = _layer_and_ids()
    layer.positional.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    assert torch.equal(layer(ids), sinusoidal_table(6, D).expand(2, 6, D))


def test_a_global_forward_hook_sees_every_child() -> None:
    layer, ids = _layer_and_ids()
    seen: list[type] = []
    handle = nn.modules.module.register_module_forward_hook(lambda m, i, o: seen.append(type(m)))
    try:
        layer(ids)
    finally:
        handle.remove()
    assert {Embeddings, nn.Embedding, PositionalEncoding, nn.Dropout} <= set(seen)


def test_removing_the_hook_restores_the_same_values() -> None:
    layer, ids = _layer_and_ids()
    plain = layer(ids)
    handle = layer.embeddings.lut.register_forward_hook(lambda m, i, o: None)
    hooked = layer(ids)
    handle.remove()
    assert torch.equal(hooked, plain)
    assert torch.equal(layer(ids), plain)


def test_full_backward_hook_on_a_child_fires() -> None:
    layer, ids = _layer_and_ids()
    grads: list[torch.Tensor] = []
    layer.positional.register_full_backward_hook(lambda m, gi, go: grads.append(go[0]))
    out = layer(ids)
    out.sum().backward()
    assert len(grads) == 1
    assert torch.equal(grads[0], torch.ones_like(out))


def test_a_replaced_lookup_module_is_called() -> None:
    layer, ids = _layer_and_ids()

    class Shifted(nn.Embedding):
        def forward(self, input: torch.Tensor) -> torch.Tensor:
            return super().forward(input) + 1

    shifted = Shifted(30, D)
    shifted.weight.data = layer.embeddings.lut.weight.data.clone()
    expected = PositionalEncoding(D, max_len=20)((shifted(ids)) * layer.embeddings.scale)
    layer.embeddings.lut = shifted
    assert torch.equal(layer(ids), expected)


# -- Nothing handed out aliases a buffer -----------------------------------------------------


@pytest.mark.parametrize("kwargs", [{}, {"offset": 2}, {"positions": torch.tensor([0, 3, 1])}])
def test_encoding_returns_a_fresh_tensor(kwargs: dict[str, object]) -> None:
    pe = PositionalEncoding(D, max_len=10)
    x = torch.zeros(3, D)
    before = pe(x, **kwargs)  # type: ignore[arg-type]
    rows = pe.encoding(3, **kwargs)  # type: ignore[arg-type]
    assert torch.equal(rows, before)
    rows.fill_(7.0)
    assert torch.equal(pe(x, **kwargs), before)  # type: ignore[arg-type]


# -- Tables too large to allocate ----------------------------------------------------------


SIZE_GUARD = """
import resource, sys, time
import torch, posenc
start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
try:
    {call}
except ValueError as exc:
    message = str(exc)
else:
    sys.exit("no error")
grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start_rss) / 1024
print(repr(message))
print(grown_mb)
"""


@pytest.mark.parametrize(
    ("call", "words"),
    [
        ("posenc.PositionalEncoding(512, max_len=10**9)", ["max_len=1000000000", "d_model=512"]),
        ("posenc.TokenAndPositionEmbedding(512, 10, max_len=10**9)", ["max_len=1000000000"]),
        ("posenc.sinusoidal_table(10**9, 512)", ["1000000000 positions", "d_model=512"]),
        ("posenc.sinusoidal_table(torch.arange(10**6), 10**7)", ["d_model=10000000"]),
    ],
)
def test_a_table_too_large_is_refused_at_once(call: str, words: list[str]) -> None:
    code = textwrap.dedent(SIZE_GUARD).format(call=call)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr + run.stdout
    message, grown = run.stdout.strip().splitlines()
    for word in [*words, "TB", "more than the", "of memory on cpu"]:
        assert word in message
    assert float(grown) < 100  # MB: nothing of the table's size was allocated first


# -- Flags and choices are type-checked --------------------------------------------------------


@pytest.mark.parametrize("value", ["False", 0, 1, None, torch.tensor(True)])
def test_endpoint_must_be_a_bool(value: object) -> None:
    for build in (
        lambda: PositionalEncoding(D, endpoint=value),  # type: ignore[arg-type]
        lambda: TokenAndPositionEmbedding(D, 10, endpoint=value),  # type: ignore[arg-type]
        lambda: sinusoidal_table(3, D, endpoint=value),  # type: ignore[arg-type]
        lambda: inverse_frequencies(D, endpoint=value),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match="endpoint must be a bool"):
            build()


@pytest.mark.parametrize("value", [1, "Interleaved", None, ("interleaved",)])
def test_layout_must_be_one_of_the_names(value: object) -> None:
    with pytest.raises(
        ValueError, match=r"layout must be one of \('interleaved', 'concatenated'\)"
    ):
        PositionalEncoding(D, layout=value)  # type: ignore[arg-type]


# -- Every scheme rounds once to half precision ------------------------------------------------


def _tables(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """About 2**18 values of each scheme's table in ``dtype``: enough for a double rounding
    (one value in about 2**16) to show."""
    rope = RotaryEmbedding(128, base=500_000.0)
    return {
        "sinusoidal_table": sinusoidal_table(1024, 256, dtype=dtype),
        "sincos_2d": sincos_2d(32, 32, 256, dtype=dtype),
        "timestep_embedding": timestep_embedding(torch.linspace(0, 999, 1024), 256, dtype=dtype),
        "ALiBi": ALiBi(16)(128, dtype=dtype),
        "RotaryEmbedding.cos_sin": torch.cat(rope.cos_sin(4096, offset=10**6, dtype=dtype)),
    }


@pytest.mark.parametrize("dtype", LOW)
def test_every_scheme_rounds_its_float64_table_once(dtype: torch.dtype) -> None:
    exact = _tables(torch.float64)
    twice = 0
    for name, got in _tables(dtype).items():
        assert torch.equal(got, round_once(exact[name], dtype)), name
        twice += int((exact[name].to(dtype) != got).sum())
    # PyTorch's own float64 -> half conversion goes through float32: it rounds some of
    # these values twice, which is what the tables above must not do.
    assert twice > 0


# -- Nothing heavy at import time ----------------------------------------------------------------


def test_importing_posenc_loads_no_compiler_and_computes_nothing() -> None:
    # torch._dynamo takes about a second to import; torch.compile loads it when it is used.
    code = (
        "import sys, torch; import posenc; "
        "from posenc import frequencies; "
        "print('torch._dynamo' in sys.modules, frequencies._exact.cache_info().currsize)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["False", "0"]
