"""Positions on axes: multi-axis RoPE, multimodal RoPE (M-RoPE) and their position ids.

The references here are written from the published descriptions, independently of
posenc's code: FLUX / HunyuanVideo / Wan's per-axis ladders (each axis ``a`` its own
``base ** (-2j / d_a)``, its features following the previous axis's), Qwen2-VL's
M-RoPE (Wang et al., 2024: one ladder, its pairs split into bands for t, h and w) and
Qwen3-VL's interleaved allocation (pairs cycling t, h, w). The peers' own code is in
tests/peers/test_axes_peers.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from reference import CountingBackend
from torch import Tensor, nn

import posenc
from posenc import (
    RotaryEmbedding,
    _sources,
    grid_positions,
    multimodal_positions,
    rope_attention_scale,
)
from posenc.positions import AxisPositions, Positions, resolve_axes

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
QWEN2 = {"rope_type": "default", "mrope_section": [4, 6, 6]}  # 32 features, 16 pairs
QWEN3 = {"rope_type": "default", "mrope_section": [6, 5, 5], "mrope_interleaved": True}


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


# -- Independent references -------------------------------------------------------------


def axes_reference(
    x: Tensor, positions: Tensor, axes: tuple[int, ...], base: float, layout: str
) -> Tensor:
    """Multi-axis RoPE in float64: pair k of axis a turns by p_a · base**(-2j/d_a)."""
    freqs, owner = [], []
    for a, d in enumerate(axes):
        for j in range(d // 2):
            freqs.append(base ** (-2 * j / d))
            owner.append(a)
    return pairs_reference(x, positions, torch.tensor(freqs, dtype=torch.float64), owner, layout)


def pairs_reference(
    x: Tensor, positions: Tensor, freqs: Tensor, owner: list[int], layout: str
) -> Tensor:
    """Rotate pair k of ``x`` (float64) by ``positions[owner[k]] * freqs[k]``.

    ``positions`` is ``(A, L)``; ``x`` is ``(..., L, D)``.
    """
    x = x.double()
    h = len(owner)
    angles = torch.stack([positions[a].double() * freqs[k] for k, a in enumerate(owner)], -1)
    cos, sin = angles.cos(), angles.sin()
    if layout == "half":
        first, second = x[..., :h], x[..., h : 2 * h]
    else:
        first, second = x[..., 0 : 2 * h : 2], x[..., 1 : 2 * h : 2]
    new_first = first * cos - second * sin
    new_second = second * cos + first * sin
    out = x.clone()
    if layout == "half":
        out[..., :h], out[..., h : 2 * h] = new_first, new_second
    else:
        out[..., 0 : 2 * h : 2], out[..., 1 : 2 * h : 2] = new_first, new_second
    return out


def mrope_owner(sections: list[int], interleaved: bool, pairs: int | None = None) -> list[int]:
    """The axis of each pair: bands (Qwen2-VL) or t, h, w cycling (Qwen3-VL).

    Qwen3-VL's code overwrites the pairs 1, 4, 7, ... below 3 · sections[1] with h and
    2, 5, 8, ... below 3 · sections[2] with w; t keeps the others, those past the
    sections' sum included when ``pairs`` is larger.
    """
    t, h, w = sections
    if not interleaved:
        return [0] * t + [1] * h + [2] * w
    owner = [0] * (t + h + w if pairs is None else pairs)
    for k in range(1, 3 * h, 3):
        if k < len(owner):
            owner[k] = 1
    for k in range(2, 3 * w, 3):
        if k < len(owner):
            owner[k] = 2
    return owner


def mixed_positions(length: int, axes: int = 3, low: int = -50, high: int = 300) -> Tensor:
    return torch.randint(low, high, (axes, length))


# -- Multi-axis RoPE ----------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize(
    ("axes", "base"), [((8, 12, 12), 10_000.0), ((16, 8, 8), 256.0), ((16, 16), 10_000.0)]
)
def test_each_axis_turns_its_features_by_its_own_ladder(
    layout: str, axes: tuple[int, ...], base: float
) -> None:
    rope = RotaryEmbedding(sum(axes), base=base, layout=layout, max_len=64, axes=axes)
    x = torch.randn(4, 3, 40, sum(axes), dtype=torch.float64)  # B = 4: not A
    positions = mixed_positions(40, len(axes))  # negative, in the table and past it
    want = axes_reference(x, positions, axes, base, layout)
    torch.testing.assert_close(rope(x, positions=positions), want, rtol=0, atol=1e-12)
    per_sequence = torch.stack([positions, positions.flip(-1)] * 2, dim=1)  # (A, B, L)
    got = rope(x, positions=per_sequence)
    torch.testing.assert_close(
        got[1], axes_reference(x[1], positions.flip(-1), axes, base, layout)
    )


def test_axial_is_two_axes_in_their_order() -> None:
    # The vision towers' axial form: the first half of the pairs turn with the row,
    # the second half with the column, each at base ** (-2j / (D / 2)).
    rope = RotaryEmbedding(16, axes=(8, 8))
    x = torch.randn(6, 16, dtype=torch.float64)
    rows = grid_positions(2, 3)
    got = rope(x, positions=rows)
    swapped = rope(x, positions=rows.flip(0))
    assert not torch.allclose(got, swapped)
    torch.testing.assert_close(got, axes_reference(x, rows, (8, 8), 10_000.0, "half"))


def _score(rope: RotaryEmbedding, q: Tensor, k: Tensor, pq: Tensor, pk: Tensor) -> Tensor:
    return (rope(q, positions=pq) * rope(k, positions=pk)).sum(-1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: RotaryEmbedding(32, layout="interleaved", max_len=64, axes=(8, 12, 12)),
        lambda: RotaryEmbedding(32, max_len=64, scaling=QWEN2),
        lambda: RotaryEmbedding(32, max_len=64, scaling=QWEN3),
    ],
    ids=["axes", "mrope", "mrope-interleaved"],
)
def test_scores_depend_only_on_the_per_axis_differences(
    make: Callable[[], RotaryEmbedding],
) -> None:
    rope = make().double()
    q, k = torch.randn(20, 32, dtype=torch.float64), torch.randn(20, 32, dtype=torch.float64)
    pq, pk = mixed_positions(20), mixed_positions(20)
    score = _score(rope, q, k, pq, pk)
    # Each axis shifted by its own amount, into and past the table: nothing changes.
    shift = torch.tensor([[7], [-3_000], [100_000]])
    torch.testing.assert_close(
        _score(rope, q, k, pq + shift, pk + shift), score, rtol=1e-9, atol=1e-9
    )
    # One axis's difference changed: the score changes (each axis is seen).
    for axis in range(3):
        moved = pk.clone()
        moved[axis] += 5
        assert not torch.allclose(_score(rope, q, k, pq, moved), score, atol=1e-6), axis


def test_a_grid_is_gathered_from_the_table_not_recomputed(monkeypatch: pytest.MonkeyPatch) -> None:
    rope = RotaryEmbedding(32, layout="interleaved", max_len=64, axes=(8, 12, 12))
    x = torch.randn(1, 2, 48, 32)
    grid = torch.cat([torch.zeros(1, 48, dtype=torch.long), grid_positions(6, 8)])
    calls: list[int] = []
    real = _sources._cos_sin

    def counting(*args: object, **kwargs: object) -> tuple[Tensor, Tensor]:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_sources, "_cos_sin", counting)
    served = rope(x, positions=grid)
    assert calls == []  # gathered from the table built once
    rope(x, positions=grid + 64)  # past the table: computed
    assert calls == [1]
    # A table of one row serves nothing: the computed rows are the gathered ones.
    small = RotaryEmbedding(32, layout="interleaved", max_len=1, axes=(8, 12, 12))
    _same(served, small(x, positions=grid))


# -- M-RoPE -------------------------------------------------------------------------------


SHORT = [8, 12, 12]  # 32 of the 36 pairs of a head of 72 (timm's GenLIP): 4 left to t


@pytest.mark.parametrize(
    ("scaling", "head_dim"),
    [
        (QWEN2, 32),
        (QWEN3, 32),
        ({"rope_type": "default", "mrope_section": SHORT, "mrope_interleaved": True}, 72),
        ({"rope_type": "default", "mrope_section": [2, 12, 8], "mrope_interleaved": True}, 72),
    ],
    ids=["chunked", "interleaved", "interleaved-short", "interleaved-short-w"],
)
def test_m_rope_allocates_one_ladder_among_the_axes(
    scaling: dict[str, object], head_dim: int
) -> None:
    rope = RotaryEmbedding(head_dim, base=1_000_000.0, max_len=64, scaling=scaling)
    sections = scaling["mrope_section"]
    interleaved = bool(scaling.get("mrope_interleaved"))
    owner = mrope_owner(sections, interleaved, head_dim // 2)  # type: ignore[arg-type]
    assert rope._config.pair_axes() == tuple(owner)
    freqs = torch.tensor(
        [1_000_000.0 ** (-2 * k / head_dim) for k in range(head_dim // 2)], dtype=torch.float64
    )
    x = torch.randn(2, 30, head_dim, dtype=torch.float64)
    positions = mixed_positions(30)
    want = pairs_reference(x, positions, freqs, owner, "half")
    torch.testing.assert_close(rope.double()(x, positions=positions), want, rtol=0, atol=1e-12)


SCALINGS = [
    {"rope_type": "default"},
    {"rope_type": "linear", "factor": 2.0},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 32},
]


@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: s["rope_type"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["chunked", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_text_only_m_rope_is_1d_rope_bit_for_bit(
    scaling: dict[str, object], interleaved: bool, dtype: torch.dtype
) -> None:
    sections: dict[str, object] = {"mrope_section": [4, 6, 6]}
    if interleaved:
        sections["mrope_interleaved"] = True
    mrope = RotaryEmbedding(32, max_len=64, scaling={**scaling, **sections})
    plain = RotaryEmbedding(32, max_len=64, scaling=scaling)
    x = torch.randn(2, 4, 50, 32, dtype=dtype)
    for start in (0, 40, 5_000):  # in the table, across its end, past it
        steps = torch.arange(50) + start
        streams = steps.expand(3, 2, 50)
        _same(mrope(x, positions=streams), plain(x, positions=steps))
        _same(mrope(x, positions=steps.expand(2, 50)), plain(x, positions=steps))
        _same(mrope(x, offset=start), plain(x, offset=start))
        _same(mrope(x, offset=torch.tensor([start, 3])), plain(x, offset=torch.tensor([start, 3])))
    assert mrope.attention_factor == plain.attention_factor


def _same(got: Tensor, want: Tensor) -> None:
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_decoding_with_the_deltas_equals_the_whole_sequence() -> None:
    # Two rows, the second left-padded, each with its own image; then 4 generated tokens.
    rope = RotaryEmbedding(32, max_len=64, scaling=QWEN3)
    prompt_types = torch.tensor(
        [[0, 0, 1, 1, 1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1, 0, 0]], dtype=torch.int32
    )
    mask = torch.tensor([[1] * 10, [0, 0, 1, 1, 1, 1, 1, 1, 1, 1]])
    grids = torch.tensor([[1, 4, 6], [1, 4, 4]])
    generated = 4
    types = torch.cat([prompt_types, torch.zeros(2, generated, dtype=torch.int32)], 1)
    full_mask = torch.cat([mask, torch.ones(2, generated, dtype=torch.long)], 1)
    whole, _ = multimodal_positions(types, image_grid_thw=grids, attention_mask=full_mask)
    _, deltas = multimodal_positions(prompt_types, image_grid_thw=grids, attention_mask=mask)
    x = torch.randn(2, 3, 10 + generated, 32)
    everything = rope(x, positions=whole)
    _same(rope(x[:, :, :10], positions=whole[:, :, :10]), everything[:, :, :10])
    real = mask.sum(-1)
    for step in range(generated):
        token = x[:, :, 10 + step : 11 + step]
        got = rope(token, offset=real + step + deltas[:, 0])
        _same(got, everything[:, :, 10 + step : 11 + step])


@pytest.mark.parametrize("cast_to", FLOATS)
@pytest.mark.parametrize(
    "make",
    [
        lambda: RotaryEmbedding(32, layout="interleaved", max_len=64, axes=(8, 12, 12)),
        lambda: RotaryEmbedding(32, max_len=64, scaling=QWEN3),
    ],
    ids=["axes", "mrope"],
)
def test_a_cast_module_is_a_fresh_one_on_axes(
    cast_to: torch.dtype, make: Callable[[], RotaryEmbedding]
) -> None:
    cast, fresh = make().to(cast_to), make()
    positions = mixed_positions(70, low=-10, high=200)  # inside and past the 64 rows
    for dtype in FLOATS:
        x = torch.randn(2, 70, 32, dtype=dtype)
        _same(cast(x, positions=positions), fresh(x, positions=positions))
        inside = positions.clamp(0, 63)
        _same(cast(x, positions=inside), fresh(x, positions=inside))


def test_bf16_on_axes_is_one_rounding_of_the_exact_rotation() -> None:
    axes = (8, 12, 12)
    rope = RotaryEmbedding(32, layout="interleaved", max_len=64, axes=axes).bfloat16()
    x = torch.randn(4, 200, 32).bfloat16()
    positions = torch.randint(0, 2**20, (3, 200))
    exact = axes_reference(x, positions, axes, 10_000.0, "interleaved")
    got = rope(x, positions=positions).double()
    # Within one bf16 ulp of the exact value (2**-7 relative at most, and a floor for ~0).
    ulp = exact.abs().clamp(min=2**-20).log2().floor().exp2() * 2**-7
    assert bool(((got - exact).abs() <= ulp).all())


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32, torch.uint64])
def test_axis_positions_of_every_integer_dtype_equal_int64(dtype: torch.dtype) -> None:
    rope = RotaryEmbedding(32, max_len=64, scaling=QWEN2)
    x = torch.randn(2, 20, 32)
    positions = torch.randint(0, 120, (3, 2, 20))
    _same(rope(x, positions=positions.to(dtype)), rope(x, positions=positions))


def test_on_the_meta_device_nothing_is_read() -> None:
    with torch.device("meta"):
        rope = RotaryEmbedding(32, max_len=64, scaling=QWEN3)
        x = torch.empty(2, 4, 9, 32)
        positions = torch.empty(3, 2, 9, dtype=torch.long)
    out = rope(x, positions=positions)
    assert out.is_meta
    assert out.shape == x.shape


# -- Compile and export -----------------------------------------------------------------


@pytest.mark.parametrize("scaling", [QWEN2, QWEN3], ids=["chunked", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_m_rope_equals_eager_bit_for_bit_in_two_graphs(
    scaling: dict[str, object], dtype: torch.dtype
) -> None:
    rope = RotaryEmbedding(32, max_len=64, scaling=scaling).eval()
    for keyword in ("positions", "offset"):
        torch._dynamo.reset()
        backend = CountingBackend()
        compiled = torch.compile(rope, backend=backend, fullgraph=True, dynamic=True)
        for length in (5, 9, 33, 100):  # within the table's 64 rows and past them
            x = torch.randn(2, 4, length, 32, dtype=dtype)
            where = torch.randint(0, 2 * length, (3, 2, length)) if keyword == "positions" else 3
            _same(compiled(x, **{keyword: where}), rope(x, **{keyword: where}))
        # Tensor positions are never read under compile (one graph); an int offset
        # serves the table's rows or computes them (two).
        assert backend.graphs == (1 if keyword == "positions" else 2), keyword


# Inductor's CPU backend imports torch.utils.mkldnn, which warns about TorchScript.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("scaling", [QWEN2, QWEN3], ids=["chunked", "interleaved"])
def test_inductor_allocates_the_pairs_as_eager_does(scaling: dict[str, object]) -> None:
    # vllm 40680: Inductor miscompiled an interleaved M-RoPE built by strided slice
    # writes. posenc gathers each pair's position (index_select). Rotating the pairs
    # (1, 0) gives (cos, sin) exactly, whatever products Inductor fuses: its tables are
    # eager's, bit for bit; any input is within Inductor's usual ulps.
    torch._dynamo.reset()
    rope = RotaryEmbedding(32, max_len=64, scaling=scaling).eval()
    compiled = torch.compile(rope, fullgraph=True, dynamic=True)
    for length in (5, 9, 100):
        positions = torch.randint(0, 3 * length, (3, 2, length))
        unit = torch.zeros(2, 1, length, 32)
        unit[..., :16] = 1.0  # every pair (x_k, x_{k+16}) = (1, 0)
        _same(compiled(unit, positions=positions), rope(unit, positions=positions))
        x = torch.randn(2, 4, length, 32)
        torch.testing.assert_close(
            compiled(x, positions=positions), rope(x, positions=positions), rtol=0, atol=2e-6
        )


def test_export_with_positions_on_axes() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rope = RotaryEmbedding(32, layout="interleaved", max_len=64, axes=(8, 12, 12))

        def forward(self, x: Tensor, positions: Tensor) -> Tensor:
            out: Tensor = self.rope(x, positions=positions)
            return out

    model = Model().eval()
    length = torch.export.Dim("L", min=2, max=512)
    x, positions = torch.randn(2, 4, 8, 32), torch.randint(0, 50, (3, 2, 8))
    program = torch.export.export(model, (x, positions), dynamic_shapes=({2: length}, {2: length}))
    for n in (5, 70):
        x, positions = torch.randn(2, 4, n, 32), torch.randint(-5, 300, (3, 2, n))
        _same(program.module()(x, positions), model(x, positions))


# -- Positions on axes: the rules ----------------------------------------------------------


def test_resolve_axes_reads_every_form() -> None:
    steps = torch.arange(4)
    assert resolve_axes(4, 3, offset=2) == Positions(4, 2, None)
    assert isinstance(resolve_axes(4, 3, positions=steps), Positions)
    assert isinstance(resolve_axes(4, 3, positions=steps.expand(2, 4), batch=2), Positions)
    on_axes = resolve_axes(4, 3, positions=steps.expand(3, 4), batch=2)
    assert isinstance(on_axes, AxisPositions)
    assert on_axes.values.shape == (3, 4)
    per_sequence = resolve_axes(4, 3, positions=steps.expand(3, 2, 4), batch=2)
    assert isinstance(per_sequence, AxisPositions)
    assert per_sequence.values.shape == (3, 2, 4)
    shared = resolve_axes(4, 3, positions=steps.expand(1, 2, 4), batch=2)
    assert isinstance(shared, Positions)
    assert shared.values is not None
    assert resolve_axes(4, 2, positions=steps.expand(2, 4)).values.shape == (2, 4)  # unbatched


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"positions": torch.zeros(3, 4, dtype=torch.long), "batch": 3},
            ValueError,
            r"could be \(A, L\) for the 3 axes or \(B, L\) for the batch of 3",
        ),
        (
            {"positions": torch.zeros(2, 2, 4, dtype=torch.long), "batch": 2},
            ValueError,
            r"shape \(A, L\) or \(A, B, L\) with A=3 and L=4, got shape \(2, 2, 4\)",
        ),
        (
            {"positions": torch.zeros(3, 3, 4, dtype=torch.long), "batch": 2},
            ValueError,
            r"needs 3 sequences, but the input has a batch of B=2",
        ),
        ({"positions": torch.zeros(3, 4)}, TypeError, r"positions must be an integer tensor"),
        (
            {"positions": torch.zeros(3, 4, dtype=torch.long), "offset": 1},
            ValueError,
            r"give either offset or positions",
        ),
        (
            {"positions": torch.tensor([[0, 0, 0, 2**62]] * 3)},
            ValueError,
            r"positions holds 4611686018427387904, which is outside",
        ),
        (
            {"positions": torch.zeros(3, 4, dtype=torch.long), "device": "meta"},
            ValueError,
            r"positions must be on the device of the input \(meta\)",
        ),
    ],
)
def test_resolve_axes_refuses_what_it_cannot_read(
    kwargs: dict[str, object], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        resolve_axes(4, 3, **kwargs)  # type: ignore[arg-type]


def test_the_module_refuses_ambiguous_and_misshapen_positions() -> None:
    rope = RotaryEmbedding(32, max_len=64, scaling=QWEN2)
    with pytest.raises(ValueError, match=re.escape("give positions.unsqueeze(1), (A, 1, L)")):
        rope(torch.randn(3, 4, 32), positions=torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"shape \(A, L\) or \(A, B, L\) with A=3 and L=5"):
        rope(torch.randn(2, 5, 32), positions=torch.zeros(3, 2, 4, dtype=torch.long))


@pytest.mark.parametrize("batched", [False, True], ids=["(L, A)", "(B, L, A)"])
def test_diffusers_order_is_refused_with_the_transpose_named(batched: bool) -> None:
    # diffusers builds its ids as (L, A) (FLUX's img_ids, get_1d_rotary_pos_embed per
    # column); posenc's axes come first. The message names the order and the fix.
    rope = RotaryEmbedding(32, layout="interleaved", axes=(8, 12, 12))
    ids = grid_positions(2, 3, 4)  # (3, 24)
    x = torch.randn(2, 2, 24, 32)
    given = ids.T[None].expand(2, -1, -1) if batched else ids.T
    want = "(B, L, A)" if batched else "(L, A)"
    fix = "ids.permute(2, 0, 1)" if batched else "ids.T"
    first = "(A, B, L)" if batched else "(A, L)"
    with pytest.raises(ValueError, match=r"positions on axes come axes first") as info:
        rope(x, positions=given)
    message = str(info.value)
    assert f"axes first, {first};" in message
    assert f"which is {want} with L=24 and A=3" in message
    assert f"pass {fix}" in message
    fixed = given.permute(2, 0, 1) if batched else given.T
    _same(rope(x, positions=fixed), rope(x, positions=ids))
    with pytest.raises(ValueError, match=re.escape("pass ids.T")):
        resolve_axes(24, 3, positions=ids.T, batch=2)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"axes": (8, 12, 10)}, ValueError, r"summing to head_dim=32, got \(8, 12, 10\)"),
        ({"axes": (7, 13, 12)}, ValueError, r"an even number >= 2"),
        ({"axes": ()}, ValueError, r"an even number >= 2"),
        ({"axes": 32}, TypeError, r"axes must be None or a tuple of ints, got int"),
        ({"axes": (8.0, 12, 12)}, TypeError, r"tuple of ints"),
        (
            {"axes": (8, 12, 12), "scaling": {"rope_type": "linear", "factor": 2.0}},
            ValueError,
            r"axes= takes no scaling",
        ),
        (
            {"axes": (8, 12, 12), "scaling": QWEN2},
            ValueError,
            r"for M-RoPE give scaling with 'mrope_section' and no axes",
        ),
        # interleaved: at most the 16 pairs; chunked: exactly (Hugging Face's split)
        (
            {"scaling": {**QWEN3, "mrope_section": [6, 6, 5]}},
            ValueError,
            r"with mrope_interleaved .* summing to at most the rotated pairs, 16 .*\[6, 6, 5\]",
        ),
        (
            {"scaling": {**QWEN2, "mrope_section": [4, 6, 4]}},
            ValueError,
            r"summing to the rotated pairs, 16 .*\[4, 6, 4\] \(with mrope_interleaved, fewer",
        ),
        ({"scaling": {**QWEN3, "mrope_section": [6, -1, 5]}}, ValueError, r"three ints >= 0"),
    ],
)
def test_axes_are_checked(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        RotaryEmbedding(32, **kwargs)  # type: ignore[arg-type]


def test_repr_and_cos_sin_on_axes() -> None:
    rope = RotaryEmbedding(32, max_len=64, scaling=QWEN3)
    assert repr(rope) == (
        "RotaryEmbedding(head_dim=32, max_len=64, mrope_section=[6, 5, 5], mrope_interleaved=True)"
    )
    positions = mixed_positions(7, low=0, high=60)
    cos, sin = rope.cos_sin(7, positions=positions)
    assert cos.shape == (7, 16)
    x = torch.randn(7, 32)
    _same(posenc.apply_rotary(x, cos, sin), rope(x, positions=positions))
    cos_b, _ = rope.cos_sin(7, positions=positions.expand(2, 3, 7).transpose(0, 1), batch=2)
    assert cos_b.shape == (2, 7, 16)


# -- grid_positions ---------------------------------------------------------------------


def test_grid_positions_are_row_major_coordinates() -> None:
    t, h, w = 2, 3, 4
    got = grid_positions(t, h, w)
    want = [(i, j, k) for i in range(t) for j in range(h) for k in range(w)]
    assert got.dtype == torch.int64
    assert got.T.tolist() == [list(c) for c in want]
    centred = grid_positions(4, 5, offset=(-(4 - 4 // 2), -(5 - 5 // 2)))
    assert centred[0].unique().tolist() == [-2, -1, 0, 1]
    assert centred[1].unique().tolist() == [-3, -2, -1, 0, 1]
    assert grid_positions(3, offset=7).tolist() == [[7, 8, 9]]
    assert grid_positions(0, 5).shape == (2, 0)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((), {}, ValueError, "at least one axis"),
        ((2, -1), {}, ValueError, r"sizes\[1\] must be an int >= 0, got -1"),
        ((2, 2.0), {}, TypeError, r"sizes\[1\] must be an int"),
        ((2, 2), {"offset": (1,)}, ValueError, "one int per axis"),
        ((2, 2), {"offset": 1.5}, TypeError, "offset must be an int"),
        ((2, 2), {"offset": (0, 2**62 - 1)}, ValueError, r"offset\[1\]=4611686018427387903"),
        ((10**7, 10**7), {}, ValueError, r"needs .* more than the"),
    ],
)
def test_grid_positions_refuse_bad_sizes(
    args: tuple[object, ...], kwargs: dict[str, object], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        grid_positions(*args, **kwargs)  # type: ignore[arg-type]


# -- multimodal_positions ---------------------------------------------------------------


# Where the text after a video resumes (the video starts at 1 and ends at t = 3 here,
# 2 × 2 tokens a frame): "max", 1 + the largest position on any axis (transformers
# <= 5.2's and vLLM's `st_idx = llm_pos_ids_list[-1].max() + 1`); "spatial", start +
# max(h, w) / m (transformers >= 5.3's `current_pos += max(h, w) // merge`).
@pytest.mark.parametrize(
    ("rule", "after", "after_seconds"), [("max", 4, 7), ("spatial", 3, 3)]
)  # fmt: skip
def test_a_video_in_frames_seconds_and_timestamps(
    rule: str, after: int, after_seconds: int
) -> None:
    # Qwen2-VL: a 3-frame 4 × 4 video (2 × 2 tokens a frame after the merge), then text.
    video = torch.tensor([[3, 4, 4]])
    types = torch.tensor([[0] + [2] * 12 + [0, 0]])
    rules: dict[str, Any] = {"text_after_vision": rule}
    positions, deltas = multimodal_positions(types, video_grid_thw=video, **rules)
    row = positions[:, 0]
    assert row[0].tolist() == [0] + [1] * 4 + [2] * 4 + [3] * 4 + [after, after + 1]
    assert row[1].tolist() == [0] + [1, 1, 2, 2] * 3 + [after, after + 1]
    assert row[2].tolist() == [0] + [1, 2, 1, 2] * 3 + [after, after + 1]
    assert deltas.tolist() == [[after + 2 - 15]]
    # Qwen2.5-VL: frame i at floor(i × tokens_per_second × seconds per grid).
    seconds, deltas = multimodal_positions(
        types, video_grid_thw=video, temporal="seconds", tokens_per_second=2,
        second_per_grid_ts=torch.tensor([1.25]), **rules,
    )  # fmt: skip
    assert seconds[0, 0].tolist() == [0] + [1] * 4 + [3] * 4 + [6] * 4 + [
        after_seconds, after_seconds + 1
    ]  # fmt: skip
    # the largest position, 6 on t, counts for the delta under both rules
    assert deltas.tolist() == [[max(after_seconds + 1, 6) + 1 - 15]]
    # In float32, as Hugging Face multiplies: frame 3 at 5/6 s and 2 tokens a second sits
    # at 3 · 2 · float32(5/6) = 4.99999988, rounded to 5 in float32 (4 in float64).
    four = torch.tensor([[0] + [2] * 16])
    fives, _ = multimodal_positions(
        four, video_grid_thw=torch.tensor([[4, 4, 4]]), temporal="seconds",
        tokens_per_second=2, second_per_grid_ts=torch.tensor([5 / 6]),
    )  # fmt: skip
    assert fives[0, 0, 1::4].tolist() == [1, 2, 4, 6]
    # Qwen3-VL: each frame its own grid, between timestamp text tokens.
    stamped = torch.tensor([[0, 2, 2, 2, 2, 0, 2, 2, 2, 2, 0]])
    ids, _ = multimodal_positions(
        stamped, video_grid_thw=torch.tensor([[2, 4, 4]]), temporal="timestamps"
    )
    assert ids[0, 0].tolist() == [0, 1, 1, 1, 1, 3, 4, 4, 4, 4, 6]
    assert ids[2, 0].tolist() == [0, 1, 2, 1, 2, 3, 4, 5, 4, 5, 6]


def test_the_qwen2_5_vl_docstring_example_resumes_text_at_101() -> None:
    # Hugging Face's Qwen2.5-VL pull request (#35569), get_rope_index's docstring: 3
    # temporal patches of 2 × 2 tokens, tokens_per_second 25, 2 frames a patch at 1 fps
    # (2 s a patch): vision t ids 0, 50, 100, then text at 101, 102, ..., 105.
    types = torch.tensor([[2] * 12 + [0] * 5])
    positions, deltas = multimodal_positions(
        types, video_grid_thw=torch.tensor([[3, 4, 4]]), temporal="seconds",
        tokens_per_second=25, second_per_grid_ts=torch.tensor([2.0]),
    )  # fmt: skip
    assert positions[0, 0, :12].tolist() == [0] * 4 + [50] * 4 + [100] * 4
    assert positions[:, 0, 12:].tolist() == [list(range(101, 106))] * 3
    assert deltas.tolist() == [[106 - 17]]
    spatial, _ = multimodal_positions(
        types, video_grid_thw=torch.tensor([[3, 4, 4]]), temporal="seconds",
        tokens_per_second=25, second_per_grid_ts=torch.tensor([2.0]),
        text_after_vision="spatial",
    )  # fmt: skip
    assert spatial[0, 0, 12:].tolist() == list(range(2, 7))  # inside the video's t range


def _qwen_rule(
    rows: list[list[int]], grids: list[tuple[int, int, int]], steps: list[float]
) -> list[list[list[int]]]:
    """The Qwen team's rule, re-derived from its statement: each block (a text run, or
    one grid) starts at 1 + the largest position of the block before it (0 first); a
    grid's token (i, j, k) sits at start + (floor(i × step), j, k), step in float32.
    """
    queue = iter(zip(grids, steps, strict=True))
    out = []
    for row in rows:
        axes: list[list[int]] = [[], [], []]
        start, i = 0, 0
        while i < len(row):
            if row[i] == 0:
                for a in axes:
                    a.append(start)
                start += 1
                i += 1
                continue
            (t, h, w), step = next(queue)
            h, w = h // 2, w // 2
            top = start
            for f in range(t):
                tau = int(torch.tensor(f, dtype=torch.float32) * torch.tensor(step))
                for j in range(h):
                    for k in range(w):
                        for a, v in zip(axes, (tau, j, k), strict=True):
                            a.append(start + v)
                        top = max(top, start + tau, start + j, start + k)
            start = top + 1
            i += t * h * w
        out.append(axes)
    return out


@pytest.mark.parametrize(
    ("rows", "grids", "seconds"),
    [
        # Qwen2-VL: t > max(h, w) / m (8 frames of 2 × 2), t < (2 frames of 4 × 3)
        ([[0, 0] + [2] * 32 + [0] * 3], [(8, 4, 4)], None),
        ([[0] + [2] * 24 + [0] * 2], [(2, 8, 6)], None),
        # several blocks: an image, a video, an image; text between and after
        ([[0] + [1] * 6 + [0] + [2] * 20 + [0] * 2 + [1] * 4 + [0]],
         [(1, 4, 6), (5, 4, 4), (1, 4, 4)], None),
        # Qwen2.5-VL: fps 2.4 with 2 frames a patch (5/6 s a patch), 48 patches; 1.25 s;
        # 0.5 s (1 t position a patch)
        ([[0] + [2] * 48 * 4 + [0] * 2], [(48, 4, 4)], [5 / 6]),
        ([[0] * 3 + [2] * 12 + [0] + [2] * 8 + [0]], [(3, 4, 4), (2, 4, 4)], [1.25, 0.5]),
    ],
    ids=["t-above-hw", "t-below-hw", "several-blocks", "fps-2.4-48", "two-videos-seconds"],
)  # fmt: skip
def test_text_after_vision_max_is_the_qwen_rule(
    rows: list[list[int]], grids: list[tuple[int, int, int]], seconds: list[float] | None
) -> None:
    # The rule as the Qwen team states it (transformers #35569's docstring: "the text
    # start position_ids as the max vision position_ids plus 1") and vLLM computes it
    # (vllm/model_executor/layers/rotary_embedding.py, MRotaryEmbedding.
    # _vl_get_input_positions_tensor: st_idx = llm_pos_ids_list[-1].max() + 1).
    images = [g for g, row_kind in zip(grids, _kinds(rows), strict=True) if row_kind == 1]
    videos = [g for g, row_kind in zip(grids, _kinds(rows), strict=True) if row_kind == 2]
    video_steps = iter([2 * s for s in seconds] if seconds else [1.0] * len(videos))
    steps = [1.0 if kind == 1 else next(video_steps) for kind in _kinds(rows)]
    kwargs: dict[str, Any] = {}
    if seconds is not None:
        kwargs = {"temporal": "seconds", "tokens_per_second": 2,
                  "second_per_grid_ts": torch.tensor(seconds)}  # fmt: skip
    types = torch.tensor(rows)
    positions, deltas = multimodal_positions(
        types, image_grid_thw=torch.tensor(images) if images else None,
        video_grid_thw=torch.tensor(videos) if videos else None, **kwargs,
    )  # fmt: skip
    expected = torch.tensor(_qwen_rule(rows, grids, steps)).transpose(0, 1)
    assert torch.equal(positions, expected)
    assert deltas.tolist() == [
        [int(expected[:, b].max()) + 1 - len(r)] for b, r in enumerate(rows)
    ]
    spatial, _ = multimodal_positions(
        types, image_grid_thw=torch.tensor(images) if images else None,
        video_grid_thw=torch.tensor(videos) if videos else None,
        text_after_vision="spatial", **kwargs,
    )  # fmt: skip
    # the two rules differ exactly where a video's last frame reaches max(h, w) / m
    reaches = any(
        int(torch.tensor(t - 1, dtype=torch.float32) * torch.tensor(step)) >= max(h, w) // 2
        for (t, h, w), step in zip(grids, steps, strict=True)
    )
    assert torch.equal(spatial, positions) != reaches


def _kinds(rows: list[list[int]]) -> list[int]:
    """The kind (1 image, 2 video) of each vision run, in order (one grid a run here)."""
    kinds = []
    for row in rows:
        for i, kind in enumerate(row):
            if kind and (i == 0 or row[i - 1] != kind):
                kinds.append(kind)
    return kinds


def test_decoding_a_video_with_the_deltas_equals_the_whole_sequence_under_max() -> None:
    # Left-padded prompts ending in text after a video; the next tokens' positions from
    # the deltas equal the positions of the whole sequence under "max". Under "spatial"
    # they do not for the row whose video reaches past max(h, w) / m on t: the delta
    # (largest position + 1 - length, as transformers computes it) continues past the
    # video's last frame, the whole sequence past the text that overlaps it.
    prompt = [[0] + [2] * 24 + [0], [0, 0, 0] + [2] * 8 + [0]]
    grids = torch.tensor([[6, 4, 4], [2, 4, 4]])  # t 6 > 2 = max(h, w) / m; t 2 = 2
    width, new = 29, 3
    types = torch.zeros(2, width + new, dtype=torch.long)
    mask = torch.zeros(2, width + new, dtype=torch.long)
    for b, row in enumerate(prompt):
        types[b, width - len(row) : width] = torch.tensor(row)
        mask[b, width - len(row) :] = 1
    real = torch.tensor([len(r) for r in prompt]).view(2, 1)
    gaps = {}
    for rule in ("max", "spatial"):
        rules: dict[str, Any] = {"text_after_vision": rule, "video_grid_thw": grids}
        whole, _ = multimodal_positions(types, attention_mask=mask, **rules)
        _, deltas = multimodal_positions(types[:, :width], attention_mask=mask[:, :width], **rules)
        decoded = (real + torch.arange(new) + deltas).expand(3, -1, -1)
        gaps[rule] = (decoded - whole[:, :, width:]).unique().tolist()
    assert gaps["max"] == [0]
    # row 0: the video's t ends at 1 + 5 = 6, its text sat at 1 + 2 = 3: 3 apart
    assert gaps["spatial"] == [0, 3]


def test_text_only_rows_are_arange_and_touching_images_take_a_grid_each() -> None:
    positions, deltas = multimodal_positions(torch.zeros(2, 5, dtype=torch.long))
    assert torch.equal(positions, torch.arange(5).expand(3, 2, 5))
    assert deltas.tolist() == [[0], [0]]
    touching = torch.tensor([[1, 1, 1, 1, 1, 1]])
    ids, _ = multimodal_positions(touching, image_grid_thw=torch.tensor([[1, 4, 4], [1, 2, 4]]))
    assert ids[2, 0].tolist() == [0, 1, 0, 1, 2, 3]


@pytest.mark.parametrize(
    ("types", "kwargs", "error", "match"),
    [
        ([[0, 1, 1, 1]], {"image_grid_thw": [[1, 4, 4]]}, ValueError, "grids give 4"),
        ([[0, 1, 1, 1, 1]], {}, ValueError, "more image tokens than image_grid_thw"),
        (
            [[0, 1, 1, 1, 1]],
            {"image_grid_thw": [[1, 4, 4], [1, 4, 4]]},
            ValueError,
            "describes 2 grids, but token_types holds the tokens of 1",
        ),
        ([[0, 3]], {}, ValueError, r"0 \(text\), 1 \(image\) or 2 \(video\)"),
        ([[0, 2, 2, 2, 2]], {"video_grid_thw": [[1, 4, 4]], "temporal": "seconds"},
         ValueError, "needs tokens_per_second"),
        ([[0, 0]], {"tokens_per_second": 2}, ValueError, "temporal='seconds'"),
        ([[0, 0]], {"temporal": "minutes"}, ValueError, "temporal must be one of"),
        ([[0, 0]], {"text_after_vision": "min"}, ValueError,
         r"text_after_vision must be one of \('max', 'spatial'\), got 'min'"),
        ([[0, 0]], {"text_after_vision": None}, ValueError, "text_after_vision must be one of"),
        ([[0, 0]], {"attention_mask": [[1.0, 1.0]]}, TypeError, "attention_mask"),
        ([[0, 0]], {"attention_mask": [[1, 1, 1]]}, ValueError, "the shape of token_types"),
        ([[0, 0]], {"image_grid_thw": [4, 4]}, ValueError, r"shape \(N, 3\)"),
    ],
)  # fmt: skip
def test_multimodal_positions_refuse_what_does_not_match(
    types: list[list[int]], kwargs: dict[str, object], error: type, match: str
) -> None:
    args = {k: torch.tensor(v) if isinstance(v, list) else v for k, v in kwargs.items()}
    with pytest.raises(error, match=match):
        multimodal_positions(torch.tensor(types), **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name", ["token_types", "image_grid_thw", "attention_mask", "second_per_grid_ts"]
)
def test_multimodal_positions_refuse_meta_tensors_by_name(name: str) -> None:
    types = torch.tensor([[0, 1, 1, 1, 1, 0]])
    args: dict[str, object] = {
        "token_types": types,
        "image_grid_thw": torch.tensor([[1, 4, 4]]),
        "attention_mask": torch.ones(1, 6, dtype=torch.bool),
    }
    if name == "second_per_grid_ts":  # a video in seconds
        args = {
            "token_types": torch.tensor([[0, 2, 2, 2, 2, 0]]),
            "video_grid_thw": torch.tensor([[1, 4, 4]]),
            "temporal": "seconds",
            "tokens_per_second": 2,
            "second_per_grid_ts": torch.tensor([1.0]),
        }
    args[name] = torch.as_tensor(args[name]).to("meta")
    with pytest.raises(ValueError, match=f"{name} is on the meta device"):
        multimodal_positions(**args)  # type: ignore[arg-type]


def test_multimodal_positions_refuse_float_types() -> None:
    with pytest.raises(TypeError, match="token_types"):
        multimodal_positions(torch.zeros(1, 3))


# -- MLA's softmax scale ----------------------------------------------------------------


def test_rope_attention_scale_has_yarn_mscale_squared() -> None:
    v3 = {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
          "original_max_position_embeddings": 4096}  # fmt: skip
    m = 0.1 * 1.0 * math.log(40.0) + 1.0
    assert rope_attention_scale(192, v3) == pytest.approx(m * m / math.sqrt(192), rel=1e-15)
    assert rope_attention_scale(192) == 192**-0.5
    assert rope_attention_scale(192, {"rope_type": "yarn", "factor": 40.0}) == 192**-0.5
    assert rope_attention_scale(192, {**v3, "factor": 1.0}) == 192**-0.5
    assert rope_attention_scale(192, {**v3, "rope_type": "default"}) == 192**-0.5
    with pytest.raises(ValueError, match="no 'factor'"):
        rope_attention_scale(192, {"rope_type": "yarn", "mscale_all_dim": 1.0})
    with pytest.raises(TypeError, match="qk_head_dim must be an int"):
        rope_attention_scale(192.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="scaling must be None or a dict"):
        rope_attention_scale(192, [("rope_type", "yarn")])  # type: ignore[arg-type]
