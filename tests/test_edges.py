"""The edges of the contract: the position domain, peak memory, devices, MHA's copies, masks.

Each test here pins a class of issue 17: a position outside |p| < 2**62 is refused with
its value (int, int64 and uint64 alike); a large result peaks near its own size, or is
refused with it; a tensor on another device is refused by name; MultiHeadedAttention's
projections are drawn independently and its ``attn`` holds no graph; a checkpoint that
holds a weight twice is refused; a floating mask, which reads two ways, is refused.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import posenc
from posenc import (
    ALiBi,
    Embeddings,
    LearnedPositionalEmbedding,
    MultiHeadedAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
    RelativePositionBias,
    RotaryEmbedding,
    TokenAndPositionEmbedding,
    attention,
    clones,
    positions_from_lengths,
    positions_from_mask,
    relative_position_bucket,
    subsequent_mask,
)
from posenc import positions as pos

D = 8

# -- The position domain: |p| < 2**62 ---------------------------------------------------------

TOO_FAR = [
    ("int offset 2**62", {"offset": 2**62}, "offset=4611686018427387904 is outside"),
    ("int offset -2**62", {"offset": -(2**62)}, "offset=-4611686018427387904 is outside"),
    ("int offset whose last position is 2**62", {"offset": 2**62 - 2}, "the last at 2**62"),
    ("positions 2**62", {"positions": torch.tensor([0, 2**62, 1])}, "holds 4611686018427387904"),
    (
        "positions -2**63",
        {"positions": torch.tensor([0, -(2**63), 1])},
        "holds -9223372036854775808",
    ),
    (
        "uint64 positions 2**63",
        {"positions": torch.tensor([0, 2**63, 1], dtype=torch.uint64)},
        "holds 9223372036854775808",
    ),
    (
        "uint64 positions 2**64 - 1",
        {"positions": torch.tensor([0, 1, 2**64 - 1], dtype=torch.uint64)},
        "holds 18446744073709551615",
    ),
    ("tensor offset 2**62 - 2", {"offset": torch.tensor([2**62 - 2])}, "the last at 2**62"),
    ("0-d tensor offset -2**63", {"offset": torch.tensor(-(2**63))}, "holds -9223372036854775808"),
    (
        "uint64 tensor offset",
        {"offset": torch.tensor([2**63 + 7], dtype=torch.uint64)},
        "holds 9223372036854775815",
    ),
]


def _last_at_2_62(match: str) -> str:
    return re.escape(match).replace("2\\*\\*62", str(2**62))


@pytest.mark.parametrize(
    ("kwargs", "match"), [c[1:] for c in TOO_FAR], ids=[c[0] for c in TOO_FAR]
)
def test_resolve_refuses_positions_outside_the_domain(
    kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(ValueError, match=_last_at_2_62(match)) as info:
        pos.resolve(3, batch=1, **kwargs)  # type: ignore[arg-type]
    assert "position domain |p| < 2**62" in str(info.value)


@pytest.mark.parametrize(
    "call",
    [
        lambda kw: ALiBi(2)(3, **kw),
        lambda kw: RelativePositionBias(2)(3, **kw),
        lambda kw: TokenAndPositionEmbedding(D, 10)(torch.tensor([[1, 2, 3]]), **kw),
    ],
    ids=["ALiBi", "RelativePositionBias", "TokenAndPositionEmbedding"],
)
@pytest.mark.parametrize(
    ("kwargs", "match"), [c[1:] for c in TOO_FAR], ids=[c[0] for c in TOO_FAR]
)
def test_every_scheme_refuses_positions_outside_the_domain(
    call: Callable[[dict[str, object]], object], kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(ValueError, match=_last_at_2_62(match)):
        call(kwargs)


def test_the_edges_of_the_domain_are_accepted_and_their_differences_exact() -> None:
    edge = 2**62 - 1
    assert (-edge, edge) == (pos.POSITION_MIN, pos.POSITION_MAX)
    assert pos.resolve(2, offset=edge - 1).tensor().tolist() == [edge - 1, edge]
    ends = torch.tensor([-edge, edge])
    # The widest distance, 2**63 - 2, in both directions: no int64 overflow.
    alibi = ALiBi(1, symmetric=True)(2, positions=ends, key_positions=ends, dtype=torch.float64)
    far = -(2.0**-8) * float(2**63 - 2)
    assert alibi[0].tolist() == [[0.0, far], [far, 0.0]]
    t5 = RelativePositionBias(1)
    weight = t5.relative_attention_bias.weight[:, 0]
    bias = t5(2, positions=ends, key_positions=ends)[0]
    assert torch.equal(bias, torch.stack([weight[[0, 31]], weight[[15, 0]]]))
    with pytest.raises(ValueError, match="key_positions holds 4611686018427387904"):
        ALiBi(1)(1, key_positions=torch.tensor([2**62]))


def test_relative_position_bucket_refuses_what_has_no_opposite_in_int64() -> None:
    edge = 2**63 - 1
    got = relative_position_bucket(torch.tensor([-edge, edge, -edge, edge]).view(2, 2))
    assert got.tolist() == [[15, 31], [15, 31]]
    for bad, shown in [
        (torch.tensor([0, -(2**63)]), "-9223372036854775808"),
        (torch.tensor([2**63], dtype=torch.uint64), "9223372036854775808"),
        (torch.tensor([2**64 - 1], dtype=torch.uint64), "18446744073709551615"),
    ]:
        with pytest.raises(ValueError, match=f"relative_position holds {shown}.*2\\*\\*63"):
            relative_position_bucket(bad)


@pytest.mark.parametrize(
    ("length", "error", "match"),
    [
        (-1, ValueError, "length must be an int >= 0, got -1"),
        (3.5, TypeError, "length must be an int, got float 3.5"),
        (True, TypeError, "length must be an int, got bool True"),
        (2**63, ValueError, "length must be at most 2\\*\\*63 - 1"),
    ],
)
def test_resolve_checks_the_length(length: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        pos.resolve(length)  # type: ignore[arg-type]


def test_check_domain_is_one_function_for_ints_and_tensors() -> None:
    pos.check_domain("positions", torch.tensor([-(2**62) + 1, 2**62 - 1]))
    pos.check_domain("positions", torch.tensor([2**32 - 1], dtype=torch.uint32))  # never read
    pos.check_domain("offset", 5, count=10)
    with pytest.raises(ValueError, match="offset=4611686018427387900 puts positions outside"):
        pos.check_domain("offset", 2**62 - 4, count=10)
    with pytest.raises(ValueError, match="positions holds 9223372036854775808"):
        pos.check_domain("positions", torch.tensor([2**63], dtype=torch.uint64))


# -- Sizes: refused before any allocation, with the size -----------------------------------------


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: Embeddings(10**6, 10**6), "Embeddings(d_model=1000000, vocab=1000000)'s table"),
        (
            lambda: TokenAndPositionEmbedding(10**6, 10**6),
            "Embeddings(d_model=1000000, vocab=1000000)'s table",
        ),
        (lambda: RelativePositionBias(10**9), "RelativePositionBias(n_heads=1000000000"),
        (lambda: MultiHeadedAttention(1, 10**6), "MultiHeadedAttention(h=1, d_model=1000000)"),
        (
            lambda: PositionwiseFeedForward(10**6, 10**6),
            "PositionwiseFeedForward(d_model=1000000, d_ff=1000000)",
        ),
        (lambda: positions_from_lengths([2**40]), "lengths summing to 1099511627776"),
    ],
    ids=["Embeddings", "TokenAndPosition", "T5", "MHA", "FFN", "positions_from_lengths"],
)
def test_too_large_is_refused_with_its_size(make: Callable[[], object], words: str) -> None:
    with pytest.raises(ValueError, match=r"needs [\d.]+ [TPG]B") as info:
        make()
    assert words in str(info.value)
    if "lengths" not in words:
        with torch.device("meta"):  # no memory there: the same module builds
            module = make()
        assert isinstance(module, nn.Module)
        assert all(p.is_meta for p in module.parameters())


@pytest.mark.parametrize(
    ("lengths", "match"),
    [
        ([2**62, 2**62], "lengths sum to 9223372036854775808"),
        ([2**70], "lengths holds 1180591620717411303424"),
        (torch.tensor([3, 2**63], dtype=torch.uint64), "lengths holds 9223372036854775808"),
        (torch.tensor([2**61] * 5), "lengths sum to 11529215046068469760"),
    ],
)
def test_lengths_past_the_domain_are_refused_with_their_value(lengths: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        positions_from_lengths(lengths)  # type: ignore[arg-type]


def test_packed_positions_are_unchanged() -> None:
    assert positions_from_lengths([0, 2, 0, 3, 0]).tolist() == [0, 1, 0, 1, 2]
    assert positions_from_lengths(torch.tensor([1, 1, 2], dtype=torch.uint64)).tolist() == [
        0,
        0,
        0,
        1,
    ]
    with pytest.raises(
        ValueError, match=re.escape("lengths must be >= 0, got [3, -1] (holds -1)")
    ):
        positions_from_lengths([3, -1])


PEAK = """
import resource, torch
from posenc import ALiBi, RelativePositionBias, positions_from_lengths, timestep_embedding
{setup}
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = call()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) * 1024 / (out.numel() * out.element_size()))
"""


@pytest.mark.parametrize(
    "setup",
    [
        "call = lambda: ALiBi(1)(8000)",
        "call = lambda: ALiBi(8, symmetric=True)(3000, dtype=torch.bfloat16)",
        "t5 = RelativePositionBias(1)\ncall = lambda: t5(8000)\ntorch.set_grad_enabled(False)",
        "t5 = RelativePositionBias(2)\ncall = lambda: t5(6000)",
        "call = lambda: positions_from_lengths([2**24] * 4)",
        "t = torch.arange(2**16)\ncall = lambda: timestep_embedding(t, 1024)",
    ],
    ids=[
        "ALiBi",
        "ALiBi-bf16",
        "T5-inference",
        "T5-autograd",
        "positions_from_lengths",
        "timestep_embedding",
    ],
)
def test_a_large_result_peaks_below_twice_its_size(setup: str) -> None:
    # Measured in a fresh process: the growth of its peak resident memory over one call,
    # in units of the result (int64 distances and float64 products peaked at 3-18x).
    code = PEAK.format(setup=textwrap.dedent(setup))
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    ratio = float(run.stdout.strip())
    assert ratio < 2.0, ratio


# -- Devices ------------------------------------------------------------------------------------

META = torch.device("meta")


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: pos.resolve(3, positions=torch.arange(3, device=META), device="cpu"),
            r"positions must be on the device of the input \(cpu\), got a tensor on meta",
        ),
        (
            lambda: pos.resolve(3, offset=torch.tensor([1], device=META), batch=1, device="cpu"),
            r"offset must be on the device of the input \(cpu\), got a tensor on meta",
        ),
        (
            lambda: pos.resolve(3, positions=torch.arange(3), device="meta"),
            r"positions must be on the device of the input \(meta\), got a tensor on cpu",
        ),
        (
            lambda: ALiBi(2)(3, positions=torch.arange(3, device=META), device="cpu"),
            r"positions must be on the device of the bias \(cpu\), got a tensor on meta",
        ),
        (
            lambda: ALiBi(2)(3, key_positions=torch.arange(3, device=META), device="cpu"),
            r"key_positions must be on the device of the bias \(cpu\), got a tensor on meta",
        ),
        (
            lambda: RelativePositionBias(2)(3, offset=torch.tensor([1], device=META)),
            r"offset must be on the device of the bias \(cpu\), got a tensor on meta",
        ),
        (
            lambda: TokenAndPositionEmbedding(D, 10)(
                torch.tensor([1, 2]), positions=torch.arange(2, device=META)
            ),
            r"positions must be on the device of the input \(cpu\), got a tensor on meta",
        ),
        (
            lambda: Embeddings(D, 10)(torch.tensor([1, 2], device=META)),
            r"token ids must be on the device of the embedding table \(cpu\), got .* on meta",
        ),
        (
            lambda: attention(*[torch.zeros(3, 4)] * 3, mask=torch.ones(3, 3, device=META) > 0),
            r"mask must be on the device of the query \(cpu\), got a tensor on meta",
        ),
        (
            lambda: MultiHeadedAttention(2, D)(
                *[torch.zeros(1, 3, D)] * 3, mask=subsequent_mask(3).to(META)
            ),
            r"mask must be on the device of the query \(cpu\), got a tensor on meta",
        ),
        (
            lambda: positions_from_lengths(torch.tensor([2, 3], device=META)),
            "lengths is on the meta device, which holds no values",
        ),
    ],
    ids=[
        "resolve-positions",
        "resolve-offset",
        "resolve-cpu-positions-for-meta",
        "ALiBi-positions",
        "ALiBi-key_positions",
        "T5-offset",
        "TokenAndPosition-positions",
        "Embeddings-ids",
        "attention-mask",
        "MHA-mask",
        "positions_from_lengths",
    ],
)
def test_a_tensor_on_another_device_is_refused_by_name(
    call: Callable[[], object], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_a_0d_cpu_offset_goes_with_any_device_and_meta_results_stay_meta() -> None:
    where = pos.resolve(3, offset=torch.tensor(2), device="meta")
    assert where.tensor().device == META
    assert ALiBi(2)(3, 4, offset=torch.tensor(1), device="meta").device == META
    assert pos.resolve(3, offset=torch.tensor(2), device="cpu").tensor().tolist() == [2, 3, 4]


# -- Every entry that takes ids or positions takes every integer dtype (issue 27) ------------

_IDS = torch.tensor([[0, 3, 1, 7], [2, 2, 5, 0]])


def _entries() -> dict[str, Callable[[torch.Tensor], object]]:
    torch.manual_seed(0)
    learned = LearnedPositionalEmbedding(8, D)
    t5, kerple, tokens = (
        RelativePositionBias(2),
        posenc.KERPLE(2),
        TokenAndPositionEmbedding(D, 10),
    )
    x = torch.randn(2, 4, D)
    return {
        "PositionalEncoding": lambda p: PositionalEncoding(D)(x, positions=p),
        "sinusoidal_table": lambda p: posenc.sinusoidal_table(p, D),
        "learned positions=": lambda p: learned(x, positions=p),
        "learned ids": lambda p: learned(p),
        "learned rows": lambda p: learned.rows(p),
        "learned offset": lambda p: learned(x, offset=p[:, 0]),
        "rotary": lambda p: RotaryEmbedding(D)(x, positions=p),
        "rotary axes": lambda p: RotaryEmbedding(D, axes=(4, 4))(x, positions=p[:, None]),
        "rotary cos_sin": lambda p: RotaryEmbedding(D).cos_sin(4, positions=p, batch=2),
        "ALiBi": lambda p: ALiBi(2)(4, positions=p, key_positions=p),
        "RelativePositionBias": lambda p: t5(4, positions=p),
        "KERPLE": lambda p: kerple(4, key_positions=p),
        "relative_position_bucket": lambda p: relative_position_bucket(p),
        "timestep_embedding": lambda p: posenc.timestep_embedding(p[0], D),
        "TokenAndPositionEmbedding": lambda p: tokens(p, positions=p),
        "positions_from_mask": lambda p: positions_from_mask(p),
        "positions_from_lengths": lambda p: positions_from_lengths(p[0]),
    }


@pytest.mark.parametrize("name", list(_entries()))
@pytest.mark.parametrize(
    "dtype",
    [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64],
    ids=lambda d: str(d).removeprefix("torch."),
)
def test_every_entry_takes_every_integer_dtype_as_int64(name: str, dtype: torch.dtype) -> None:
    call = _entries()[name]
    want, got = call(_IDS), call(_IDS.to(dtype))
    pairs = zip(want, got, strict=True) if isinstance(want, tuple) else [(want, got)]
    for w, g in pairs:
        assert isinstance(g, torch.Tensor)
        assert torch.equal(g, w)


@pytest.mark.parametrize("name", [n for n in _entries() if n != "positions_from_mask"])
def test_every_entry_refuses_bool_ids_by_name(name: str) -> None:  # a bool mask is a mask
    with pytest.raises(TypeError, match=r"torch\.bool"):
        _entries()[name](_IDS.bool())


NO_VALUES = "positions is on the meta device, which holds no values, and is needed on cpu"
META_IDS = torch.arange(5, device="meta")


@pytest.mark.parametrize(
    "call",
    [
        lambda: PositionalEncoding(D).encoding(5, positions=META_IDS),
        lambda: LearnedPositionalEmbedding(8, 4)(
            torch.zeros(5, 4, device="meta"), positions=META_IDS
        ),
        lambda: LearnedPositionalEmbedding(8, 4)(META_IDS),
        lambda: LearnedPositionalEmbedding(8, 4).rows(META_IDS),
        lambda: RotaryEmbedding(8).cos_sin(5, positions=META_IDS),
        lambda: RotaryEmbedding(8).cos_sin(5, positions=META_IDS.double() / 2),
        lambda: RotaryEmbedding(8, axes=(4, 4)).cos_sin(5, positions=META_IDS.expand(2, 5)),
    ],
    ids=["encoding", "learned", "learned ids", "learned rows", "rotary", "fractional", "axes"],
)
def test_meta_positions_needed_with_values_are_refused_by_name(call: Callable[[], object]) -> None:
    # Was a raw NotImplementedError ("Cannot copy out of meta tensor"), issue 27.
    with pytest.raises(ValueError, match=re.escape(NO_VALUES)):
        call()


def test_meta_positions_and_masks_give_meta_results_of_the_known_shape() -> None:
    mask = torch.ones(2, 5, dtype=torch.uint8, device="meta")
    assert positions_from_mask(mask).shape == (2, 5)
    assert positions_from_mask(mask).is_meta
    where = pos.resolve(5, positions=META_IDS.to(torch.int16))
    assert where.tensor().is_meta
    assert where.tensor().dtype == torch.int64
    fractional = pos.resolve(5, positions=META_IDS.half(), fractional=True)
    assert fractional.tensor().is_meta
    assert fractional.tensor().dtype == torch.float64
    assert PositionalEncoding(D).encoding(5, positions=META_IDS, device="meta").shape == (5, D)
    assert LearnedPositionalEmbedding(8, 4).to("meta")(META_IDS).shape == (5, 4)
    cos, _ = RotaryEmbedding(8).cos_sin(2, positions=META_IDS[:2].float(), device="meta")
    assert cos.shape == (2, 4)
    assert cos.is_meta
    axes = RotaryEmbedding(8, axes=(4, 4)).to("meta")
    assert axes(torch.zeros(5, 8, device="meta"), positions=META_IDS.expand(2, 5)).is_meta


# -- Types and messages --------------------------------------------------------------------------


@pytest.mark.parametrize("base", [10**400, 10**5000], ids=["10**400", "10**5000"])
def test_a_base_past_the_float_range_is_a_value_error(base: int) -> None:
    with pytest.raises(ValueError, match=r"base must be a finite number > 1, got .*float range"):
        PositionalEncoding(D, base=base)


def test_attention_dropout_must_be_a_module() -> None:
    x = torch.zeros(3, 4)
    with pytest.raises(
        TypeError, match=r"dropout must be a module .*nn.Dropout\(0.1\).*float 0.1"
    ):
        attention(x, x, x, dropout=0.1)  # type: ignore[arg-type]
    out, _ = attention(x, x, x, dropout=nn.Dropout(0.0))
    assert out.shape == (3, 4)


@pytest.mark.parametrize(
    ("make", "run"),
    [
        (lambda: MultiHeadedAttention(2, D), lambda m, x: m(x, x, x)),
        (lambda: PositionwiseFeedForward(D, 16), lambda m, x: m(x)),
    ],
    ids=["MultiHeadedAttention", "PositionwiseFeedForward"],
)
def test_an_input_of_another_dtype_than_the_weights_says_how_to_cast(
    make: Callable[[], nn.Module], run: Callable[[nn.Module, torch.Tensor], torch.Tensor]
) -> None:
    module = make()
    x = torch.randn(1, 3, D, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"dtype torch.bfloat16 .*torch.float32.*\.to\("):
        run(module, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast casts: still allowed
        assert run(module, x).shape == x.shape
    assert run(module.to(torch.bfloat16), x).dtype == torch.bfloat16


# -- MultiHeadedAttention's projections and attn -------------------------------------------------


def test_the_four_projections_are_drawn_independently() -> None:
    mha = MultiHeadedAttention(2, D)
    weights = [lin.weight for lin in mha.linears]  # type: ignore[union-attr]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not torch.equal(weights[i], weights[j]), (i, j)
    assert list(mha.state_dict())[:2] == ["linears.0.weight", "linears.0.bias"]


@pytest.mark.parametrize(
    "make",
    [lambda: MultiHeadedAttention(2, D), lambda: PositionwiseFeedForward(D, 16)],
    ids=["MultiHeadedAttention", "PositionwiseFeedForward"],
)
def test_meta_init_then_reset_parameters_equals_normal_construction(
    make: Callable[[], nn.Module],
) -> None:
    torch.manual_seed(5)
    normal = make()
    with torch.device("meta"):
        late = make()
    late.to_empty(device="cpu")
    torch.manual_seed(5)
    late.reset_parameters()  # type: ignore[operator]
    for (name, a), b in zip(normal.state_dict().items(), late.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_attn_holds_no_graph_after_a_training_forward() -> None:
    mha = MultiHeadedAttention(2, D).train()
    x = torch.randn(2, 3, D, requires_grad=True)
    mha(x, x, x, mask=subsequent_mask(3)).sum().backward()
    assert mha.attn is not None
    assert mha.attn.grad_fn is None
    assert not mha.attn.requires_grad
    assert mha.attn.shape == (2, 2, 3, 3)
    twin = copy.deepcopy(mha)
    assert torch.equal(twin.attn, mha.attn)  # type: ignore[arg-type]
    assert len(clones(mha, 2)) == 2


# -- Checkpoints ---------------------------------------------------------------------------------


def test_a_checkpoint_with_both_names_of_a_weight_is_refused_as_ambiguous() -> None:
    layer = TokenAndPositionEmbedding(D, 10)
    state = {"embeddings.lut.weight": torch.zeros(10, D), "0.lut.weight": torch.ones(10, D)}
    with pytest.raises(RuntimeError, match=r"0\.lut\.weight and embeddings\.lut\.weight are both"):
        layer.load_state_dict(state)
    layer.load_state_dict({"0.lut.weight": torch.ones(10, D)})  # the legacy name alone: fine
    assert torch.equal(layer.embeddings.lut.weight, torch.ones(10, D))


# -- Masks that read two ways --------------------------------------------------------------------


def test_a_floating_mask_is_refused_with_how_to_convert_it() -> None:
    x = torch.randn(1, 3, D)
    additive = torch.zeros(3, 3).masked_fill(~subsequent_mask(3)[0], -torch.inf)
    for call in (
        lambda m: attention(x, x, x, mask=m),
        lambda m: MultiHeadedAttention(2, D)(x, x, x, mask=m),
        lambda m: positions_from_mask(m),
    ):
        for mask in (additive, subsequent_mask(3).float(), subsequent_mask(3).half()):
            with pytest.raises(TypeError, match=r"mask\.bool\(\).*additive == 0") as info:
                call(mask)
            assert "floating mask reads two ways" in str(info.value)
    # What the additive mask means, said as a bool mask or as a bias: the same attention.
    by_mask, _ = attention(x, x, x, mask=additive == 0)
    by_bias, _ = attention(x, x, x, bias=additive)
    by_int, _ = attention(x, x, x, mask=subsequent_mask(3).to(torch.int32))
    assert torch.equal(by_mask, by_int)
    torch.testing.assert_close(by_bias, by_mask, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "positions",
    [
        torch.tensor([0, -(2**63)]),
        torch.tensor([2**62]),
        torch.tensor([2**64 - 1], dtype=torch.uint64),
    ],
    ids=["-2**63", "2**62", "uint64-max"],
)
def test_the_sinusoid_and_timesteps_refuse_integers_outside_the_domain(
    positions: torch.Tensor,
) -> None:
    # -2**63 had its sines' sign flipped (abs overflows); 2**64 - 1 was read as -1.
    with pytest.raises(ValueError, match="position domain"):
        posenc.sinusoidal_table(positions, 8)
    with pytest.raises(ValueError, match="position domain"):
        posenc.timestep_embedding(positions, 8)
    edge = torch.tensor([2**62 - 1, -(2**62 - 1)])
    assert torch.equal(
        posenc.sinusoidal_table(edge, 8)[1, 1::2], posenc.sinusoidal_table(edge, 8)[0, 1::2]
    )


# -- NumPy's integers: every integer argument of the public API ----------------------------
# One test of what an integer is (_checks.as_integer): an int, NumPy's integers, a 0-d
# integer tensor; never a bool or a float. Each case calls one argument with a value v;
# NumPy's integers must give what the same int gives.

T = torch.tensor
Q = torch.ones(2, 3, 4, 8)


def _module_out(module: nn.Module) -> object:
    return (repr(module), [t.clone() for t in module.state_dict().values()])


def _seeded(cls: type, *args: object, **kwargs: object) -> nn.Module:
    torch.manual_seed(0)
    return cls(*args, **kwargs)  # type: ignore[no-any-return]


def _zero_t5() -> posenc.RelativePositionBias:
    torch.manual_seed(0)
    return posenc.RelativePositionBias(2)


def _learned() -> posenc.LearnedPositionalEmbedding:
    torch.manual_seed(0)
    return posenc.LearnedPositionalEmbedding(8, 4)


def _layer() -> posenc.TokenAndPositionEmbedding:
    torch.manual_seed(0)
    return posenc.TokenAndPositionEmbedding(4, 10)


def _dynamic() -> posenc.RotaryEmbedding:
    return posenc.RotaryEmbedding(
        8, scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 2}
    )


def _scores(score_mod: Callable[..., torch.Tensor]) -> torch.Tensor:
    """A score_mod's bias for 2 heads, 3 queries and 5 keys, by broadcasting its indices."""
    h, i, j = torch.arange(2)[:, None, None], torch.arange(3)[:, None], torch.arange(5)
    return score_mod(torch.zeros(()), torch.tensor(0), h, i, j)


def _mixed(*args: Any, **kwargs: Any) -> tuple[object, ...]:
    """RoPE-Mixed's sizes as read back, and its weight's shape (its values are random)."""
    mixed = posenc.MixedFrequencies(*args, **kwargs)
    return mixed.n_heads, mixed.n_axes, tuple(mixed.weight.shape)


INTEGER_CASES: dict[tuple[str, str], Callable[[Any], object]] = {
    ("MixedFrequencies.__init__", "head_dim"): lambda v: _mixed(v * 4, 2),
    ("MixedFrequencies.__init__", "n_heads"): lambda v: _mixed(8, v),
    ("MixedFrequencies.__init__", "n_axes"): lambda v: _mixed(8, 2, n_axes=v),
    ("MixedFrequencies.rows", "seq_len"): lambda v: _seeded(posenc.MixedFrequencies, 8, 2).rows(
        pos.Positions(3), torch.float32, torch.device("cpu"), v
    ),
    ("RotaryEmbedding.forward", "seq_dim"): lambda v: posenc.RotaryEmbedding(8)(
        torch.ones(2, 1, 1, 3, 1, 8), seq_dim=v
    ),
    ("ALiBi.__init__", "n_heads"): lambda v: posenc.ALiBi(v)(3),
    ("ALiBi.forward", "query_length"): lambda v: posenc.ALiBi(2)(v),
    ("ALiBi.forward", "key_length"): lambda v: posenc.ALiBi(2)(3, v),
    ("ALiBi.forward", "batch"): lambda v: posenc.ALiBi(2)(3, offset=T([1, 2, 3]), batch=v),
    ("KERPLE.__init__", "n_heads"): lambda v: _module_out(_seeded(posenc.KERPLE, v)),
    ("KERPLE.forward", "query_length"): lambda v: _seeded(posenc.KERPLE, 2)(v),
    ("KERPLE.forward", "key_length"): lambda v: _seeded(posenc.KERPLE, 2)(3, v),
    ("KERPLE.forward", "batch"): lambda v: _seeded(posenc.KERPLE, 2)(
        3, offset=T([1, 2, 3]), batch=v
    ),
    ("FIRE.__init__", "n_heads"): lambda v: _module_out(_seeded(posenc.FIRE, v)),
    ("FIRE.__init__", "width"): lambda v: _module_out(_seeded(posenc.FIRE, 2, width=v)),
    ("FIRE.forward", "query_length"): lambda v: _seeded(posenc.FIRE, 2)(v),
    ("FIRE.forward", "key_length"): lambda v: _seeded(posenc.FIRE, 2)(3, v),
    ("FIRE.forward", "batch"): lambda v: _seeded(posenc.FIRE, 2)(3, offset=T([1, 2, 3]), batch=v),
    ("CoPE.__init__", "head_dim"): lambda v: _module_out(posenc.CoPE(v, 5)),
    ("XPos.__init__", "head_dim"): lambda v: posenc.XPos(2 * v)(
        torch.ones(2, 3, 2 * 3), torch.ones(2, 3, 2 * 3)
    ),
    ("RotaryEmbedding.rotate_queries_and_keys", "seq_dim"): lambda v: posenc.RotaryEmbedding(
        8, xpos_scale_base=64
    ).rotate_queries_and_keys(
        torch.ones(2, 1, 1, 3, 1, 8), torch.ones(2, 1, 1, 3, 1, 8), seq_dim=v
    ),
    ("CoPE.__init__", "n_positions"): lambda v: _module_out(posenc.CoPE(2, v)),
    ("random_positions", "length"): lambda v: posenc.random_positions(
        v, 9, generator=torch.Generator().manual_seed(0)
    ),
    ("random_positions", "max_position"): lambda v: posenc.random_positions(
        2, v, generator=torch.Generator().manual_seed(0)
    ),
    ("random_positions", "batch"): lambda v: posenc.random_positions(
        2, 9, batch=v, generator=torch.Generator().manual_seed(0)
    ),
    ("RelativePositionBias.__init__", "n_heads"): lambda v: _module_out(
        _seeded(posenc.RelativePositionBias, v)
    ),
    ("RelativePositionBias.__init__", "num_buckets"): lambda v: _module_out(
        _seeded(posenc.RelativePositionBias, 2, num_buckets=v + 5)
    ),
    ("RelativePositionBias.__init__", "max_distance"): lambda v: repr(
        posenc.RelativePositionBias(2, max_distance=v + 30)
    ),
    ("RelativePositionBias.forward", "query_length"): lambda v: _zero_t5()(v),
    ("RelativePositionBias.forward", "key_length"): lambda v: _zero_t5()(3, v),
    ("RelativePositionBias.forward", "batch"): lambda v: _zero_t5()(
        3, offset=T([1, 2, 3]), batch=v
    ),
    ("Embeddings.__init__", "d_model"): lambda v: repr(posenc.Embeddings(v, 10)),
    ("Embeddings.__init__", "vocab"): lambda v: repr(posenc.Embeddings(4, v)),
    ("Embeddings.__init__", "padding_idx"): lambda v: (
        posenc.Embeddings(4, 10, padding_idx=v).lut.padding_idx
    ),
    ("LearnedPositionalEmbedding.__init__", "max_len"): lambda v: repr(
        posenc.LearnedPositionalEmbedding(v, 4)
    ),
    ("LearnedPositionalEmbedding.__init__", "d_model"): lambda v: repr(
        posenc.LearnedPositionalEmbedding(8, v)
    ),
    ("MultiHeadedAttention.__init__", "h"): lambda v: repr(posenc.MultiHeadedAttention(v - 1, 8)),
    ("MultiHeadedAttention.__init__", "d_model"): lambda v: repr(
        posenc.MultiHeadedAttention(2, v + 5)
    ),
    ("PositionwiseFeedForward.__init__", "d_model"): lambda v: repr(
        posenc.PositionwiseFeedForward(v, 8)
    ),
    ("PositionwiseFeedForward.__init__", "d_ff"): lambda v: repr(
        posenc.PositionwiseFeedForward(4, v)
    ),
    ("PositionalEncoding.__init__", "d_model"): lambda v: (
        posenc.PositionalEncoding(v, max_len=5).pe
    ),
    ("PositionalEncoding.__init__", "max_len"): lambda v: (
        posenc.PositionalEncoding(4, max_len=v).pe
    ),
    ("PositionalEncoding.encoding", "length"): lambda v: posenc.PositionalEncoding(4).encoding(v),
    ("PositionalEncoding.encoding", "batch"): lambda v: posenc.PositionalEncoding(4).encoding(
        2, offset=T([0, 1, 2]), batch=v
    ),
    ("RotaryEmbedding.__init__", "head_dim"): lambda v: posenc.RotaryEmbedding(v + 5).cos_sin(3),
    ("RotaryEmbedding.__init__", "max_len"): lambda v: posenc.RotaryEmbedding(
        8, max_len=v
    ).cos_sin(3),
    ("RotaryEmbedding.__init__", "axes"): lambda v: posenc.RotaryEmbedding(
        8, axes=(v + 1, 4)
    ).cos_sin(2, positions=T([[0, 1], [2, 3]])),
    ("RotaryEmbedding.forward", "seq_len"): lambda v: _dynamic()(Q, seq_len=v),
    ("RotaryEmbedding.cos_sin", "length"): lambda v: posenc.RotaryEmbedding(8).cos_sin(v),
    ("RotaryEmbedding.cos_sin", "batch"): lambda v: posenc.RotaryEmbedding(8).cos_sin(
        2, offset=T([0, 1, 2]), batch=v
    ),
    ("RotaryEmbedding.cos_sin", "seq_len"): lambda v: _dynamic().cos_sin(2, seq_len=v),
    ("TokenAndPositionEmbedding.__init__", "d_model"): lambda v: repr(
        posenc.TokenAndPositionEmbedding(v, 10)
    ),
    ("TokenAndPositionEmbedding.__init__", "vocab"): lambda v: repr(
        posenc.TokenAndPositionEmbedding(4, v)
    ),
    ("TokenAndPositionEmbedding.__init__", "max_len"): lambda v: (
        posenc.TokenAndPositionEmbedding(4, 10, max_len=v).positional.pe
    ),
    ("TokenAndPositionEmbedding.__init__", "padding_idx"): lambda v: (
        posenc.TokenAndPositionEmbedding(4, 10, padding_idx=v).embeddings.lut.padding_idx
    ),
    ("alibi_slopes", "n_heads"): lambda v: posenc.alibi_slopes(v),
    ("clones", "n"): lambda v: repr(posenc.clones(torch.nn.Linear(1, 1), v)),
    ("grid_positions", "sizes"): lambda v: posenc.grid_positions(v, 2),
    ("grid_positions", "offset"): lambda v: posenc.grid_positions(3, 2, offset=v),
    ("inverse_frequencies", "d_model"): lambda v: posenc.inverse_frequencies(v),
    ("multimodal_positions", "spatial_merge_size"): lambda v: posenc.multimodal_positions(
        T([[0, 1, 1, 0]]), image_grid_thw=T([[1, 4, 2]]), spatial_merge_size=v - 1
    ),
    ("positions_from_lengths", "lengths"): lambda v: posenc.positions_from_lengths([v, 2]),
    ("relative_position_bucket", "num_buckets"): lambda v: posenc.relative_position_bucket(
        T([-9, 0, 9]), num_buckets=v + 5
    ),
    ("relative_position_bucket", "max_distance"): lambda v: posenc.relative_position_bucket(
        T([-90, 0, 9]), max_distance=v + 30
    ),
    ("rope_attention_scale", "qk_head_dim"): lambda v: posenc.rope_attention_scale(v),
    ("rope_frequencies", "head_dim"): lambda v: posenc.rope_frequencies(v + 5),
    ("rope_frequencies", "seq_len"): lambda v: posenc.rope_frequencies(
        8, scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 2}, seq_len=v
    ),
    ("shard_order", "length"): lambda v: pos.shard_order(v + 1, 2),
    ("shard_order", "world_size"): lambda v: pos.shard_order(8, v - 1),
    ("shard_order", "lengths"): lambda v: pos.shard_order(7, 2, lengths=[v, 4]),
    ("shard_positions", "length"): lambda v: posenc.shard_positions(v + 1, 2, 1),
    ("shard_positions", "world_size"): lambda v: posenc.shard_positions(8, v - 1, 1),
    ("shard_positions", "rank"): lambda v: posenc.shard_positions(8, 2, v - 2),
    ("shard_positions", "lengths"): lambda v: posenc.shard_positions(7, 2, 1, lengths=[v, 4]),
    ("sincos_2d", "height"): lambda v: posenc.sincos_2d(v, 2, 8),
    ("sincos_2d", "width"): lambda v: posenc.sincos_2d(2, v, 8),
    ("sincos_2d", "d_model"): lambda v: posenc.sincos_2d(2, 2, v + 5),
    ("sinusoidal_table", "positions"): lambda v: posenc.sinusoidal_table(v, 4),
    ("sinusoidal_table", "d_model"): lambda v: posenc.sinusoidal_table(3, v),
    ("subsequent_mask", "size"): lambda v: posenc.subsequent_mask(v),
    ("timestep_embedding", "dim"): lambda v: posenc.timestep_embedding(T([1, 5]), v),
    ("check_domain", "value"): lambda v: pos.check_domain("offset", v),
    ("check_domain", "count"): lambda v: pos.check_domain("offset", 0, count=v),
    ("resolve", "length"): lambda v: pos.resolve(v).tensor(),
    ("resolve", "batch"): lambda v: pos.resolve(2, offset=T([0, 1, 2]), batch=v).tensor(),
    ("resolve_axes", "length"): lambda v: pos.resolve_axes(v, 2).tensor(),
    ("resolve_axes", "axes"): lambda v: pos.resolve_axes(2, v).tensor(),
    ("resolve_axes", "batch"): lambda v: pos.resolve_axes(
        2, 2, offset=T([0, 1, 2]), batch=v
    ).tensor(),
    ("cu_seqlens", "lengths"): lambda v: posenc.cu_seqlens([v, 2]),
    ("document_ids", "lengths"): lambda v: posenc.document_ids([v, 2]),
    ("document_mask", "window"): lambda v: posenc.document_mask(
        posenc.document_ids([4, 3]), window=v - 1
    ),
    ("document_block_mask", "window"): lambda v: posenc.document_block_mask(
        posenc.document_ids([4, 3]), window=v - 1, block_size=2
    ).to_dense(),
    ("document_block_mask", "length"): lambda v: posenc.document_block_mask(
        length=v + 2, block_size=2
    ).to_dense(),
    ("document_block_mask", "block_size"): lambda v: posenc.document_block_mask(
        posenc.document_ids([4, 3]), block_size=v - 1
    ).to_dense(),
}
# The offset of every scheme is checked where positions are resolved
# (posenc/positions/_resolve.py), which takes NumPy's integers as ints.
OFFSET_CASES: dict[tuple[str, str], Callable[[Any], object]] = {
    ("ALiBi.forward", "offset"): lambda v: posenc.ALiBi(2)(3, offset=v),
    ("KERPLE.forward", "offset"): lambda v: _seeded(posenc.KERPLE, 2)(3, offset=v),
    ("FIRE.forward", "offset"): lambda v: _seeded(posenc.FIRE, 2)(3, offset=v),
    ("XPos.forward", "offset"): lambda v: posenc.XPos(8)(Q, Q, offset=v),
    ("RotaryEmbedding.rotate_queries_and_keys", "offset"): lambda v: posenc.RotaryEmbedding(
        8, xpos_scale_base=512
    ).rotate_queries_and_keys(Q, Q, offset=v),
    ("FIRE.score_mod", "offset"): lambda v: _seeded(posenc.FIRE, 2).score_mod(offset=v)(
        torch.zeros(()), T(0), T(1), T(2), T(0)
    ),
    ("RelativePositionBias.forward", "offset"): lambda v: _zero_t5()(3, offset=v),
    ("ALiBi.score_mod", "offset"): lambda v: _scores(posenc.ALiBi(2).score_mod(offset=v)),
    ("KERPLE.score_mod", "offset"): lambda v: _scores(
        _seeded(posenc.KERPLE, 2).score_mod(offset=v)
    ),
    ("RelativePositionBias.score_mod", "offset"): lambda v: _scores(
        _zero_t5().score_mod(offset=v)
    ),
    ("LearnedPositionalEmbedding.forward", "offset"): lambda v: _learned()(
        torch.zeros(2, 4), offset=v
    ),
    ("PositionalEncoding.forward", "offset"): lambda v: posenc.PositionalEncoding(4)(
        torch.zeros(2, 4), offset=v
    ),
    ("PositionalEncoding.encoding", "offset"): lambda v: posenc.PositionalEncoding(4).encoding(
        2, offset=v
    ),
    ("RotaryEmbedding.forward", "offset"): lambda v: posenc.RotaryEmbedding(8)(Q, offset=v),
    ("RotaryEmbedding.cos_sin", "offset"): lambda v: posenc.RotaryEmbedding(8).cos_sin(
        2, offset=v
    ),
    ("TokenAndPositionEmbedding.forward", "offset"): lambda v: _layer()(T([[1, 2]]), offset=v),
    ("resolve", "offset"): lambda v: pos.resolve(2, offset=v).tensor(),
    ("resolve_axes", "offset"): lambda v: pos.resolve_axes(2, 2, offset=v).tensor(),
}


# Records declared in posenc.hf (a family's fields), not arguments a call checks.
RECORD_TYPES = {"Family", "Rotation"}
METHODS = (
    "forward",
    "cos_sin",
    "encoding",
    "rows",
    "add_encoding_",
    "score_mod",
    "rotate_queries_and_keys",
)


def _integer_arguments() -> set[tuple[str, str]]:
    """Every (callable, argument) of the public API whose annotation holds an int."""
    import inspect

    from posenc import hf

    found = set()
    for namespace in (posenc, pos, hf):
        for name in namespace.__all__:
            obj = getattr(namespace, name)
            if name in RECORD_TYPES or not callable(obj):
                continue
            targets = [(name, obj)]
            if inspect.isclass(obj):
                targets = [(f"{name}.__init__", obj.__init__)]
                targets += [(f"{name}.{m}", getattr(obj, m)) for m in METHODS if hasattr(obj, m)]
            for qualified, function in targets:
                for parameter in inspect.signature(function).parameters.values():
                    if re.search(r"\bint\b", str(parameter.annotation)):
                        found.add((qualified, parameter.name))
    return found


def test_every_integer_argument_of_the_public_api_has_a_numpy_case() -> None:
    assert _integer_arguments() == set(INTEGER_CASES) | set(OFFSET_CASES)


def _same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return (
            type(a) is type(b)
            and len(a) == len(b)  # type: ignore[arg-type]
            and all(_same(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[call-overload]
        )
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("kind", [np.int64, np.int32, np.uint8, np.intp])
@pytest.mark.parametrize("case", sorted(INTEGER_CASES | OFFSET_CASES), ids="-".join)
def test_numpy_integers_are_ints_for_every_integer_argument(
    case: tuple[str, str], kind: type
) -> None:
    call = (INTEGER_CASES | OFFSET_CASES)[case]
    assert _same(call(kind(3)), call(3))


# Each takes its argument as given (no arithmetic on it), to see what is refused.
REFUSED: dict[str, Callable[[Any], object]] = {
    "Embeddings(padding_idx=)": lambda v: posenc.Embeddings(4, 10, padding_idx=v),
    "RotaryEmbedding(axes=)": lambda v: posenc.RotaryEmbedding(8, axes=(v, 5)),
    "MixedFrequencies(n_axes=)": lambda v: posenc.MixedFrequencies(8, 2, n_axes=v),
    "PositionalEncoding(max_len=)": lambda v: posenc.PositionalEncoding(4, max_len=v),
    "rope_frequencies(head_dim)": lambda v: posenc.rope_frequencies(v),
    "shard_positions(rank)": lambda v: posenc.shard_positions(8, 2, v),
    "shard_positions(lengths=)": lambda v: posenc.shard_positions(7, 2, 1, lengths=[v, 4]),
    "grid_positions(offset=)": lambda v: posenc.grid_positions(3, 2, offset=v),
    "sinusoidal_table(positions)": lambda v: posenc.sinusoidal_table(v, 4),
    "positions_from_lengths": lambda v: posenc.positions_from_lengths([v, 2]),
}


@pytest.mark.parametrize("case", REFUSED)
@pytest.mark.parametrize("bad", [True, np.bool_(True), 3.0, np.float64(3.0), "3"])
def test_what_is_not_an_integer_is_still_refused(case: str, bad: object) -> None:
    with pytest.raises(TypeError, match=r"must be|ints, got"):
        REFUSED[case](bad)
