"""posenc.sinusoid: the float64-computed table, its dtypes, shapes, errors and properties."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import annotated_table, round_once, sinusoid_reference, ulp

from posenc import inverse_frequencies, sinusoidal_table

FP32_TOLERANCE = 3e-8  # half an fp32 ulp in [0.5, 1) is 2**-25 ≈ 2.98e-8

# 916927: the hardest case found for d_model=512 (column 17 sits ~1e-10 from an fp32 midpoint,
# so the float64 angle's own rounding decides the fp32 result; error 2.989e-8 per mpmath).
SPECIAL_POSITIONS = [0, 1, 2, 3, 4999, 5000, 65535, 65536, 916927, 2**20 - 1, 2**20]
RANDOM_POSITIONS = np.random.default_rng(20240601).integers(0, 2**20 + 1, size=64).tolist()
POSITIONS = torch.tensor(sorted(set(SPECIAL_POSITIONS + RANDOM_POSITIONS)), dtype=torch.int64)

PROPERTY_SETTINGS = settings(max_examples=40, deadline=None)


def max_error(table: torch.Tensor, positions: torch.Tensor, d_model: int) -> float:
    """Largest absolute difference between ``table`` and the float64 reference."""
    exact = sinusoid_reference(positions, d_model)
    return float(np.abs(table.double().numpy() - exact).max())


# --- accuracy -------------------------------------------------------------------------------


@pytest.mark.parametrize("d_model", [20, 21, 512])
def test_fp32_table_within_half_ulp_of_float64_reference_up_to_2_pow_20(d_model: int) -> None:
    table = sinusoidal_table(POSITIONS, d_model)
    assert table.dtype == torch.float32
    assert table.shape == (len(POSITIONS), d_model)
    err = max_error(table, POSITIONS, d_model)
    print(f"\nposenc fp32, d_model={d_model}: worst |error| up to 2**20 = {err:.6g}")
    assert err <= FP32_TOLERANCE


@pytest.mark.parametrize(("d_model", "at_least"), [(20, 1e-5), (512, 1e-4)])
def test_float32_computed_table_is_measurably_worse(d_model: int, at_least: float) -> None:
    """The check above has teeth: float32 math (the Annotated Transformer's) fails it."""
    at_5000 = torch.tensor([5000])
    at_max = torch.tensor([2**20])
    err_5000 = max_error(annotated_table(at_5000, d_model), at_5000, d_model)
    err_max = max_error(annotated_table(at_max, d_model), at_max, d_model)
    ours_5000 = max_error(sinusoidal_table(at_5000, d_model), at_5000, d_model)
    print(
        f"\nAnnotated-Transformer-style fp32 table, d_model={d_model}: "
        f"|error| {err_5000:.3g} at 5000, {err_max:.3g} at 2**20 (posenc: {ours_5000:.3g})"
    )
    assert err_5000 > at_least
    assert err_max > err_5000
    assert err_5000 > 100 * FP32_TOLERANCE
    assert ours_5000 <= FP32_TOLERANCE


def test_float64_table_matches_reference() -> None:
    table = sinusoidal_table(POSITIONS, 64, dtype=torch.float64)
    assert table.dtype == torch.float64
    # float64 angles near 2**20 carry ~1e-10 of rounding; both sides compute in float64.
    np.testing.assert_allclose(table.numpy(), sinusoid_reference(POSITIONS, 64), rtol=0, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.float32])
def test_dtypes_are_the_reference_rounded_once(dtype: torch.dtype) -> None:
    table = sinusoidal_table(256, 24, dtype=dtype)
    assert table.dtype == dtype
    expected = torch.from_numpy(sinusoid_reference(256, 24)).to(dtype)
    if dtype == torch.float64:
        torch.testing.assert_close(table, expected, rtol=0, atol=1e-13)
    else:
        assert torch.equal(table, expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_dtypes_are_within_half_an_ulp(dtype: torch.dtype) -> None:
    positions = torch.tensor(SPECIAL_POSITIONS)
    exact = sinusoid_reference(positions, 32)
    got = sinusoidal_table(positions, 32, dtype=dtype).double().numpy()
    assert np.all(np.abs(got - exact) <= 0.5 * ulp(exact, dtype) + 1e-12)


# --- positions and shapes -------------------------------------------------------------------


@pytest.mark.parametrize("positions_dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_int_length_equals_tensor_of_positions(positions_dtype: torch.dtype) -> None:
    from_int = sinusoidal_table(50, 16)
    from_tensor = sinusoidal_table(torch.arange(50, dtype=positions_dtype), 16)
    assert from_int.shape == (50, 16)
    assert torch.equal(from_int, from_tensor)


def test_int_zero_gives_empty_table() -> None:
    assert sinusoidal_table(0, 8).shape == (0, 8)


def test_tensor_positions_keep_their_shape() -> None:
    positions = torch.tensor([[0, 7, 3], [5000, 2, 7]])
    table = sinusoidal_table(positions, 10)
    assert table.shape == (2, 3, 10)
    expected = torch.from_numpy(sinusoid_reference(positions, 10)).float()
    assert torch.equal(table, expected)
    # The same position gives the same row wherever it appears.
    assert torch.equal(table[0, 1], table[1, 2])


def test_scalar_tensor_position_gives_one_row() -> None:
    table = sinusoidal_table(torch.tensor(3), 6)
    assert table.shape == (6,)
    assert torch.equal(table, torch.from_numpy(sinusoid_reference([3], 6)[0]).float())


def test_negative_tensor_positions_follow_the_formula() -> None:
    positions = torch.tensor([-3, -1, 0, 1, 3])
    table = sinusoidal_table(positions, 8, dtype=torch.float64)
    np.testing.assert_allclose(table.numpy(), sinusoid_reference(positions, 8), atol=1e-15)
    # sin is odd, cos is even.
    torch.testing.assert_close(table[0, 0::2], -table[4, 0::2], rtol=0, atol=1e-15)
    torch.testing.assert_close(table[0, 1::2], table[4, 1::2], rtol=0, atol=1e-15)


@pytest.mark.parametrize("d_model", [1, 3, 5, 21])
def test_odd_d_model_ends_with_a_sine_column(d_model: int) -> None:
    table = sinusoidal_table(100, d_model, dtype=torch.float64)
    assert table.shape == (100, d_model)
    last = d_model - 1
    angle = np.arange(100) * 10_000.0 ** (-2.0 * (last // 2) / d_model)
    np.testing.assert_allclose(table[:, last].numpy(), np.sin(angle), rtol=0, atol=1e-13)
    np.testing.assert_allclose(table.numpy(), sinusoid_reference(100, d_model), atol=1e-13)


def test_d_model_one_is_sin_of_the_position() -> None:
    table = sinusoidal_table(10, 1, dtype=torch.float64)
    assert table.shape == (10, 1)
    np.testing.assert_allclose(table[:, 0].numpy(), np.sin(np.arange(10.0)), atol=1e-15)


def test_position_zero_is_zero_one_pattern() -> None:
    row = sinusoidal_table(1, 9)[0]
    assert row.tolist() == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]


def test_base_changes_the_frequencies() -> None:
    table = sinusoidal_table(40, 8, base=100.0, dtype=torch.float64)
    np.testing.assert_allclose(table.numpy(), sinusoid_reference(40, 8, base=100.0), atol=1e-13)
    assert not torch.allclose(table, sinusoidal_table(40, 8, dtype=torch.float64))


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [-1, -5000])
def test_negative_int_length_is_a_value_error(length: int) -> None:
    with pytest.raises(ValueError, match=rf"positions.*{length}"):
        sinusoidal_table(length, 8)


@pytest.mark.parametrize(
    ("positions", "match"),
    [
        (torch.tensor([0.0, 1.0]), r"positions.*float32"),
        (torch.tensor([0, 1], dtype=torch.float64), r"positions.*float64"),
        (torch.tensor([True, False]), r"positions.*bool"),
        (2.0, r"positions.*float"),
        (True, r"positions.*bool"),
        ([0, 1], r"positions.*list"),
    ],
)
def test_non_integer_positions_are_a_type_error(positions: object, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        sinusoidal_table(positions, 8)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("d_model", "error"),
    [(0, ValueError), (-1, ValueError), (2.5, TypeError), (True, TypeError), ("8", TypeError)],
)
def test_bad_d_model_names_d_model(d_model: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=rf"d_model.*{d_model!r}"):
        sinusoidal_table(4, d_model)  # type: ignore[arg-type]
    with pytest.raises(error, match=r"d_model"):
        inverse_frequencies(d_model)  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_non_floating_dtype_is_a_type_error(dtype: torch.dtype) -> None:
    with pytest.raises(TypeError, match=r"dtype"):
        sinusoidal_table(4, 8, dtype=dtype)


@pytest.mark.parametrize(
    ("base", "error"), [(1.0, ValueError), (0.5, ValueError), ("e", TypeError)]
)
def test_bad_base(base: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"base"):
        sinusoidal_table(4, 8, base=base)  # type: ignore[arg-type]


# --- inverse_frequencies --------------------------------------------------------------------


@pytest.mark.parametrize("d_model", [1, 2, 7, 20, 21, 512])
def test_inverse_frequencies_values(d_model: int) -> None:
    w = inverse_frequencies(d_model)
    assert w.dtype == torch.float64
    assert w.shape == (math.ceil(d_model / 2),)
    expected = [10_000.0 ** (-2.0 * k / d_model) for k in range(math.ceil(d_model / 2))]
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-15, atol=0)
    assert w[0].item() == 1.0
    assert bool((w[1:] < w[:-1]).all())


def test_inverse_frequencies_longest_wavelength_for_512() -> None:
    w = inverse_frequencies(512)
    assert w[-1].item() == pytest.approx(10_000.0 ** (-510 / 512), rel=1e-15)
    assert 2 * math.pi / w[-1].item() == pytest.approx(2 * math.pi * 10_000 ** (510 / 512))


def test_inverse_frequencies_base() -> None:
    np.testing.assert_allclose(
        inverse_frequencies(8, base=100.0).numpy(),
        [100.0 ** (-k / 4) for k in range(4)],
        rtol=1e-15,
    )


# --- properties -----------------------------------------------------------------------------

position_lists = st.lists(st.integers(-(2**20), 2**20), min_size=1, max_size=32)
even_d_model = st.sampled_from([2, 4, 8, 20, 64, 512])


@PROPERTY_SETTINGS
@given(positions=position_lists, d_model=even_d_model)
def test_each_sin_cos_pair_lies_on_the_unit_circle(positions: list[int], d_model: int) -> None:
    table = sinusoidal_table(torch.tensor(positions), d_model, dtype=torch.float64)
    radius = table[..., 0::2] ** 2 + table[..., 1::2] ** 2
    torch.testing.assert_close(radius, torch.ones_like(radius), rtol=0, atol=1e-12)
    table32 = sinusoidal_table(torch.tensor(positions), d_model)
    radius32 = table32[..., 0::2].double() ** 2 + table32[..., 1::2].double() ** 2
    torch.testing.assert_close(radius32, torch.ones_like(radius32), rtol=0, atol=2e-7)


@pytest.mark.parametrize("shift", [1, 17, 1000])
@PROPERTY_SETTINGS
@given(positions=st.lists(st.integers(0, 2**20), min_size=1, max_size=32), d_model=even_d_model)
def test_shift_by_k_is_a_fixed_block_rotation(
    shift: int, positions: list[int], d_model: int
) -> None:
    """PE(p + k) = R(k) PE(p), with R(k) block-diagonal and independent of p."""
    pos = torch.tensor(positions)
    here = sinusoidal_table(pos, d_model, dtype=torch.float64).numpy()
    there = sinusoidal_table(pos + shift, d_model, dtype=torch.float64).numpy()
    # One 2x2 rotation per (sin, cos) pair, built from the reference angle k * w_i:
    # [sin(a + b), cos(a + b)] = [[cos b, sin b], [-sin b, cos b]] @ [sin a, cos a].
    freqs = np.array([10_000.0 ** (-2.0 * i / d_model) for i in range(d_model // 2)])
    beta = shift * freqs
    rotation = np.stack(
        (np.stack((np.cos(beta), np.sin(beta)), -1), np.stack((-np.sin(beta), np.cos(beta)), -1)),
        -2,
    )  # (pairs, 2, 2)
    pairs = here.reshape(len(positions), d_model // 2, 2)
    rotated = np.einsum("kab,pkb->pka", rotation, pairs).reshape(len(positions), d_model)
    np.testing.assert_allclose(there, rotated, rtol=0, atol=1e-9)


@PROPERTY_SETTINGS
@given(
    positions=st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=32),
    d_model=st.integers(1, 96),
)
def test_table_is_bounded_by_one(positions: list[int], d_model: int) -> None:
    table = sinusoidal_table(torch.tensor(positions), d_model)
    assert table.shape == (len(positions), d_model)
    assert bool(torch.isfinite(table).all())
    assert float(table.abs().max()) <= 1.0


# --- the error bound, in exact arithmetic (docs: Precision, "its error bound") ---------------

mpmath.mp.prec = 120
U = 2.0**-53  # float64 unit roundoff
FLOAT64_BOUND = 26.4 * U  # the float64 entry against the exact value, |position| < 2**31
FLOAT32_BOUND = 2.0**-25 + FLOAT64_BOUND


def exact_frequency(k: int, d_model: int, base: float = 10_000.0, endpoint: bool = False):
    """ω_k = base ** (-2k / d_model), or base ** (-k / (K - 1)) with endpoint (K pairs)."""
    pairs = (d_model + 1) // 2
    exponent = mpmath.mpf(k) / (pairs - 1) if endpoint else mpmath.mpf(2 * k) / d_model
    return mpmath.power(mpmath.mpf(base), -exponent)


def exact_entry(position: int, column: int, d_model: int) -> mpmath.mpf:
    """Column j of the sinusoid: sin (even j) or cos (odd j) of position * ω_{j // 2}."""
    angle = position * exact_frequency(column // 2, d_model)
    return mpmath.sin(angle) if column % 2 == 0 else mpmath.cos(angle)


def nearest_float32(value: mpmath.mpf) -> float:
    guess = np.float32(float(value))
    around = (np.nextafter(guess, np.float32(-2)), guess, np.nextafter(guess, np.float32(2)))
    return float(min(around, key=lambda f: abs(mpmath.mpf(float(f)) - value)))


def straightforward_fp32(positions: list[int], d_model: int) -> np.ndarray:
    """The usual float64 method, as posenc computed the table before: ``torch.pow``
    frequencies, one float64 angle per entry, its float64 sin or cos, rounded to float32."""
    k = torch.arange((d_model + 1) // 2, dtype=torch.float64)
    freqs = torch.pow(10_000.0, -k / (d_model / 2))
    angles = torch.tensor(positions, dtype=torch.float64)[:, None] * freqs
    table = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1).flatten(-2)
    return table[:, :d_model].float().numpy()


# Found by tests/hard_positions.py over the whole 2**20 x 512 table: (position, column).
# Where posenc's float32 table is farthest from the exact value (exact values within
# 1e-16 of a float32 rounding midpoint), and its one entry that is not the nearest
# float32 number (294739, 163: 1.3e-16 from a midpoint, inside the bound):
HARDEST_FOR_POSENC = [(477576, 255), (205618, 507), (142401, 348), (294739, 163)]
# Where one float64 angle per entry rounds to the wrong float32 neighbour, by the most:
HARDEST_FOR_ONE_ANGLE = [(916927, 17), (996009, 7), (934042, 2), (1033525, 30)]


@pytest.mark.parametrize(("position", "column"), HARDEST_FOR_POSENC + HARDEST_FOR_ONE_ANGLE)
def test_fp32_entry_within_the_proven_bound_at_the_hardest_entries(
    position: int, column: int
) -> None:
    got = sinusoidal_table(torch.tensor([position]), 512)[0, column].item()
    exact = exact_entry(position, column, 512)
    error = float(abs(mpmath.mpf(got) - exact))
    assert error <= FLOAT32_BOUND < 3e-8
    wide = sinusoidal_table(torch.tensor([position]), 512, dtype=torch.float64)[0, column]
    assert float(abs(mpmath.mpf(wide.item()) - exact)) <= FLOAT64_BOUND


@pytest.mark.parametrize(("position", "column"), HARDEST_FOR_ONE_ANGLE)
def test_one_float64_angle_per_entry_breaks_that_bound(position: int, column: int) -> None:
    """The bound has teeth: the straightforward float64 method rounds these the wrong way."""
    exact = exact_entry(position, column, 512)
    theirs = float(straightforward_fp32([position], 512)[0, column])
    ours = sinusoidal_table(torch.tensor([position]), 512)[0, column].item()
    assert theirs != nearest_float32(exact)
    assert float(abs(mpmath.mpf(theirs) - exact)) > FLOAT32_BOUND
    assert ours == nearest_float32(exact)


def test_the_float32_table_against_one_float64_angle_per_entry() -> None:
    """The two methods agree but where the straightforward one rounds the wrong way.

    Over the last 2048 positions below 2**20, the two differ in few entries, by at most
    one float32 ulp of a value near 1 (more ulps of values near 0, where the
    straightforward method's angle error of ~1e-10 spans several), and wherever they
    differ, posenc's entry is the float32 number nearest to the exact value.
    """
    positions = list(range(2**20 - 2048, 2**20))
    ours = sinusoidal_table(torch.tensor(positions), 512).numpy()
    theirs = straightforward_fp32(positions, 512)
    differ = np.argwhere(ours != theirs)
    print(f"\n{len(differ)} of {ours.size} entries differ")
    assert 0 < len(differ) < 1e-3 * ours.size
    assert np.abs(ours - theirs).max() <= 2.0**-24
    for row, column in differ.tolist():
        exact = exact_entry(positions[row], column, 512)
        assert float(ours[row, column]) == nearest_float32(exact)


@pytest.mark.parametrize("d_model", [21, 512, 768])
def test_float64_table_within_its_bound_up_to_2_pow_31(d_model: int) -> None:
    positions = [0, 1, 1023, 1024, 1025, -1025, 916927, 2**20, 2**24 + 3, 2**31 - 1, -(2**31 - 1)]
    wanted = {0, 1, 2, 3, 17, 34, 35, d_model // 2, d_model - 2, d_model - 1}
    columns = sorted(wanted & set(range(d_model)))
    table = sinusoidal_table(torch.tensor(positions), d_model, dtype=torch.float64)
    for row, position in enumerate(positions):
        for column in columns:
            exact = exact_entry(position, column, d_model)
            assert float(abs(mpmath.mpf(table[row, column].item()) - exact)) <= FLOAT64_BOUND


@pytest.mark.parametrize(
    ("d_model", "base", "endpoint"),
    [(512, 10_000.0, False), (20, 10_000.0, False), (21, 10_000.0, False),
     (768, 10_000.0, False), (768, 10_000.0, True), (64, 500_000.0, False), (8, 1.0001, True)],
)  # fmt: skip
def test_inverse_frequencies_are_correctly_rounded(
    d_model: int, base: float, endpoint: bool
) -> None:
    got = inverse_frequencies(d_model, base=base, endpoint=endpoint).tolist()
    for k, w in enumerate(got):
        exact = exact_frequency(k, d_model, base, endpoint)
        assert abs(mpmath.mpf(w) - exact) <= math.ulp(w) / 2


def test_torch_pow_frequencies_are_not() -> None:
    """The previous frequencies, pow of a rounded exponent, are off by several ulps here."""
    k = torch.arange(384, dtype=torch.float64)
    pow_freqs = torch.pow(10_000.0, -k / 384).tolist()
    worst = max(
        float(abs(mpmath.mpf(w) - exact_frequency(i, 768)) / math.ulp(w))
        for i, w in enumerate(pow_freqs)
    )
    assert worst > 2


# --- every entry is a function of its position and column alone ------------------------------


@pytest.mark.parametrize(("d_model", "n"), [(21, 30_000), (513, 20_000)])
def test_rows_do_not_depend_on_which_rows_share_the_call(d_model: int, n: int) -> None:
    """In float64, where no final rounding could hide a difference: one call for a length,
    for shuffled positions with repeats, in other pieces, one row at a time."""
    table = sinusoidal_table(n, d_model, dtype=torch.float64)
    order = torch.randperm(n)
    shuffled = sinusoidal_table(torch.cat([order, order[:77]]), d_model, dtype=torch.float64)
    assert torch.equal(shuffled[:n], table[order])
    assert torch.equal(shuffled[n:], table[order[:77]])
    some = [0, 1, 1023, 1024, n // 2, n - 1]
    for p in some:
        row = sinusoidal_table(torch.tensor([p]), d_model, dtype=torch.float64)[0]
        assert torch.equal(row, table[p])


def test_negative_positions_mirror_positive_ones_exactly() -> None:
    positions = torch.tensor([1, 3, 1023, 1024, 1025, 916_927, 2**20, 2**30 + 12_345])
    plus = sinusoidal_table(positions, 64, dtype=torch.float64)
    minus = sinusoidal_table(-positions, 64, dtype=torch.float64)
    assert torch.equal(minus[:, 0::2], -plus[:, 0::2])
    assert torch.equal(minus[:, 1::2], plus[:, 1::2])


# --- float16 and bfloat16: rounded once ------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_tables_are_rounded_once(dtype: torch.dtype) -> None:
    """PyTorch's own float64 -> float16/bfloat16 conversion goes through float32 and rounds
    some values twice; the table does not."""
    wide = sinusoidal_table(8192, 64, dtype=torch.float64)
    expected = round_once(wide, dtype)
    twice = (wide.to(dtype) != expected).sum().item()
    print(f"\n{dtype}: {twice} of {wide.numel()} entries rounded twice by .to()")
    assert twice > 0  # the check below has something to catch
    assert torch.equal(sinusoidal_table(8192, 64, dtype=dtype), expected)
