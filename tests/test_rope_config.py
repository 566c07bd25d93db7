"""posenc.rope_config: rope_parameters parsed by type, strict about what posenc does not know."""

from __future__ import annotations

import copy
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from posenc import ROPE_TYPES, RotaryEmbedding, rope_frequencies
from posenc.rope_config import (
    EXAMPLE_HEAD_DIM,
    KNOWN_KEYS,
    RECORDS,
    parse,
    reading,
    type_list,
)

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}


def test_each_records_example_exercises_its_type() -> None:
    # A complete config of the type: it parses, and moves the frequencies off the plain
    # ladder base ** (-2k / d) (past the trained length for the types that have one),
    # except for the default type, which is that ladder.
    d = EXAMPLE_HEAD_DIM
    k = torch.arange(0, d, 2, dtype=torch.float64) / d
    plain = 10_000.0**-k
    for name, record in RECORDS.items():
        example = copy.deepcopy(dict(record.example))
        assert example["rope_type"] == name
        assert "rope_theta" not in example  # the tests choose the base
        config = parse(example, d, 10_000.0)
        assert config.rope_type is record
        trained = config.trained_length()
        freqs = config.frequencies(None if trained is None else 2 * trained)
        moved = freqs.shape != plain.shape or not torch.allclose(freqs, plain, rtol=1e-12, atol=0)
        assert moved == (name != "default"), name


def test_a_records_hugging_face_name_is_its_own_or_none() -> None:
    # posenc reads Hugging Face configs by their rope_type: a type Hugging Face has is
    # posenc's under the same name (tests/peers compares the set with transformers').
    for name, record in RECORDS.items():
        assert record.hf_name in (name, None)


def test_one_record_per_type_and_every_type_has_one() -> None:
    assert tuple(RECORDS) == ROPE_TYPES
    for name, record in RECORDS.items():
        assert record.name == name
        if any(spec.required for spec in record.keys.values()):
            with pytest.raises(ValueError, match="needs the key"):
                parse({"rope_type": name}, 16, 10_000.0)
        else:
            assert parse({"rope_type": name}, 16, 10_000.0).rope_type is record


@pytest.mark.parametrize(
    ("key", "near"),
    [("factr", "factor"), ("beta_fsat", "beta_fast"), ("rope_thet", "rope_theta"), ("zzz", None)],
)
def test_an_unknown_key_warns_naming_the_nearest_known_key(key: str, near: str | None) -> None:
    scaling = {**YARN, key: 2.0}
    hint = f" (did you mean {near!r}?)" if near else ""
    with pytest.warns(
        UserWarning, match=re.escape(f"scaling has the key {key!r}") + ".*" + re.escape(hint)
    ):
        freqs, _ = rope_frequencies(16, scaling=scaling)
    assert torch.equal(freqs, rope_frequencies(16, scaling=YARN)[0])
    with pytest.warns(UserWarning, match=re.escape(key)):
        RotaryEmbedding(16, scaling=scaling)


def test_a_misspelt_required_key_warns_and_then_says_what_is_missing() -> None:
    with (
        pytest.warns(UserWarning, match="did you mean 'factor'"),
        pytest.raises(ValueError, match="rope_type='linear' needs the key 'factor'"),
    ):
        rope_frequencies(16, scaling={"rope_type": "linear", "factr": 2.0})


def test_every_key_of_hugging_faces_rope_parameters_is_known() -> None:
    transformers_keys = {  # RopeParameters of transformers 5.x, and the older 'type'
        "rope_theta", "rope_type", "partial_rotary_factor", "factor",
        "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
        "short_factor", "long_factor", "low_freq_factor", "high_freq_factor", "mscale",
        "mscale_all_dim", "truncate", "type",
    }  # fmt: skip
    assert transformers_keys <= KNOWN_KEYS


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rope_type", ["default", "linear"])
def test_multimodal_keys_build_m_rope_not_1d(interleaved: bool, rope_type: str) -> None:
    # A standardised Qwen2-VL / Qwen3-VL config: building 1-D RoPE from it would be
    # silently wrong. The type still gives the frequencies; the sections, the axes.
    scaling = {"rope_type": rope_type, "factor": 2.0, "mrope_section": [16, 24, 24]}
    if interleaved:
        scaling["mrope_interleaved"] = True
    config = parse(scaling, 128, 10_000.0)
    assert config.sections == (16, 24, 24)
    assert config.interleaved is interleaved
    axes = config.pair_axes()
    assert axes is not None
    assert len(axes) == 64
    # Interleaved, as Hugging Face's Qwen3-VL: h and w take every third pair up to 3 ×
    # their count (here past the 64 pairs: 21 each), t takes the rest (22, not 16).
    counts = [22, 21, 21] if interleaved else [16, 24, 24]
    assert [axes.count(a) for a in range(3)] == counts
    plain = {k: v for k, v in scaling.items() if not k.startswith("mrope")}
    assert torch.equal(config.frequencies(), parse(plain, 128, 10_000.0).frequencies())
    # None counts as missing, as everywhere in Hugging Face's configs: 1-D RoPE.
    assert parse({**plain, "mrope_section": None}, 128, 10_000.0).pair_axes() is None


@pytest.mark.parametrize(
    ("extra", "error", "match"),
    [
        ({"mrope_section": [16, 24, 23]}, ValueError, r"summing to the rotated pairs, 64"),
        ({"mrope_section": [32, 32]}, ValueError, r"three ints >= 0"),
        ({"mrope_section": [16, 24.0, 24]}, TypeError, r"list of three ints"),
        ({"mrope_section": "16,24,24"}, TypeError, r"list of three ints"),
        ({"mrope_interleaved": True}, ValueError, r"no 'mrope_section'"),
        ({"mrope_section": [16, 24, 24], "mrope_interleaved": 1}, TypeError, r"must be a bool"),
    ],
)
def test_multimodal_keys_are_checked(extra: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        parse({"rope_type": "default", **extra}, 128, 10_000.0)


def test_interleaved_sections_follow_hugging_face_pattern() -> None:
    # Qwen3-VL: pair k turns with h when k % 3 == 1 and k < 3 * 20, with w when
    # k % 3 == 2 and k < 3 * 20, else with t; the last 4 pairs all with t.
    config = parse(
        {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": True},
        128,
        5_000_000.0,
    )
    axes = config.pair_axes()
    assert axes == (0, 1, 2) * 20 + (0, 0, 0, 0)


def test_numpy_values_are_numbers_and_numpy_strings_are_strings() -> None:
    plain = rope_frequencies(16, scaling=YARN)
    numpy_ = {
        "rope_type": np.str_("yarn"),
        "factor": np.float64(4.0),
        "original_max_position_embeddings": np.int64(64),
    }
    got = rope_frequencies(16, scaling=numpy_)
    assert torch.equal(got[0], plain[0])
    assert got[1] == plain[1]


@pytest.mark.parametrize(
    ("scaling", "error", "message"),
    [
        (
            {"rope_type": "linear", "factor": 2.0, "rope_theta": "10000"},
            TypeError,
            "scaling['rope_theta'] (rope_type='linear') must be a number, got str '10000'",
        ),
        (
            {**YARN, "beta_fast": 1.0, "beta_slow": 32.0},
            ValueError,
            "scaling['beta_fast'] must be >= scaling['beta_slow'] (rope_type='yarn'",
        ),
        (
            {"rope_type": 7},
            ValueError,
            "scaling['rope_type'] must be one of",
        ),
    ],
)
def test_wrong_values_are_named(
    scaling: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        rope_frequencies(16, scaling=scaling)


def test_the_modules_scaling_is_a_deep_copy() -> None:
    factors = [1.0, 2.0, 3.0, 4.0]
    scaling = {
        "rope_type": "longrope",
        "original_max_position_embeddings": 16,
        "short_factor": factors,
        "long_factor": list(factors),
        "factor": 2.0,
    }
    rope = RotaryEmbedding(8, scaling=scaling, max_len=64)
    x = torch.randn(1, 40, 8)
    before = rope(x)
    factors[0] = 100.0
    scaling["factor"] = 9.0
    assert rope.scaling is not None
    assert rope.scaling["short_factor"][0] == 1.0
    assert rope.scaling["factor"] == 2.0
    assert torch.equal(rope(x), before)


@pytest.mark.parametrize("rope_type", ROPE_TYPES)
def test_a_parsed_configuration_pickles_by_type_name(rope_type: str) -> None:
    config = parse(RECORDS[rope_type].example, EXAMPLE_HEAD_DIM, 10_000.0)
    restored = pickle.loads(pickle.dumps(config))
    assert restored.rope_type is RECORDS[rope_type]
    long = 2 * (config.trained_length() or 50)  # past the trained length, where there is one
    assert torch.equal(restored.frequencies(long), config.frequencies(long))
    assert copy.deepcopy(config).attention_factor() == config.attention_factor()


def test_dynamic_frequencies_equal_the_default_up_to_the_trained_length() -> None:
    dynamic = {"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": 64}
    plain = rope_frequencies(96)[0]
    for seq_len in (None, 1, 64):
        assert torch.equal(rope_frequencies(96, scaling=dynamic, seq_len=seq_len)[0], plain)
    longer = rope_frequencies(96, scaling=dynamic, seq_len=256)[0]
    growth = (4.0 * 256 / 64 - 3.0) ** (96 / 94)
    k = torch.arange(0, 96, 2, dtype=torch.float64) / 96
    torch.testing.assert_close(longer, (10_000.0 * growth) ** -k, rtol=1e-15, atol=0)


# -- Llama 4: llama3 with equal factors ---------------------------------------------------


def _llama4(low: float, high: float, trained: int = 8192) -> dict[str, object]:
    return {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": low,
            "high_freq_factor": high, "original_max_position_embeddings": trained}  # fmt: skip


@pytest.mark.parametrize(("head_dim", "base"), [(128, 500_000.0), (64, 10_000.0), (16, 1e6)])
def test_llama3_with_equal_factors_has_no_band(head_dim: int, base: float) -> None:
    # Llama 4 (low_freq_factor == high_freq_factor == 1, factor 16, trained 8192): the
    # blend band [trained / high, trained / low] is one wavelength wide, so a pair is
    # kept (wavelength 2 pi / theta <= trained / low) or divided by the factor (longer),
    # Meta's llama-models apply_scaling and transformers' _compute_llama3_parameters.
    ours, factor = rope_frequencies(head_dim, base=base, scaling=_llama4(1.0, 1.0))
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    wavelength = 2 * np.pi / theta
    expected = torch.where(wavelength > 8192, theta / 16.0, theta)
    torch.testing.assert_close(ours, expected, rtol=1e-15, atol=0)
    assert 0 < int((wavelength > 8192).sum()) < head_dim // 2
    assert factor == 1.0
    assert torch.isfinite(ours).all()


def test_llama3_equal_factors_keep_the_boundary_wavelength() -> None:
    # The boundary wavelength itself (pair 0: theta 1, wavelength 2 pi = trained / low) is
    # kept, as Hugging Face's `wavelen > low_freq_wavelen` keeps it (its blend is 0 / 0
    # there; torchtune's rule asserts).
    low = 8192 / (2 * np.pi)
    assert 8192 / low == 2 * np.pi
    ours, _ = rope_frequencies(16, base=500_000.0, scaling=_llama4(low, low))
    theta = 500_000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    assert ours[0] == 1.0
    assert torch.equal(ours[1:], theta[1:] / 16.0)


def test_llama3_low_above_high_is_refused_and_equal_builds_a_module() -> None:
    with pytest.raises(
        ValueError,
        match=re.escape(
            "scaling['high_freq_factor'] must be at least scaling['low_freq_factor'] "
            "(rope_type='llama3'; equal ones, as Llama 4's, leave no blend band), got "
            "high_freq_factor=1.0 and low_freq_factor=2.0"
        ),
    ):
        parse(_llama4(2.0, 1.0), 64, 500_000.0)
    rope = RotaryEmbedding(128, base=500_000.0, scaling=_llama4(1.0, 1.0), layout="interleaved")
    cos, sin = rope.cos_sin(3, positions=torch.tensor([0, 8192, 10**6]))
    assert torch.isfinite(cos).all()
    assert torch.isfinite(sin).all()


# -- Integral numbers (one helper for every integer argument) ------------------------------


def test_integer_helper_takes_integral_numbers_and_refuses_bools_and_floats() -> None:
    from posenc import _checks

    for value in (64, np.int64(64), np.uint16(64), np.int8(64), torch.tensor(64)):
        got = _checks.integer("head_dim", value)
        assert (type(got), got) == (int, 64)
    for value, shown in (
        (True, "bool True"),
        (np.True_, "bool np.True_"),
        (64.0, "float 64.0"),
        (np.float32(64), "float32"),
        (torch.tensor(64.0), "Tensor tensor(64.)"),
        (torch.tensor([64]), "Tensor tensor([64])"),
        ("64", "str '64'"),
        (None, "NoneType None"),
    ):
        with pytest.raises(TypeError, match=re.escape(f"head_dim must be an int, got {shown}")):
            _checks.integer("head_dim", value)
    # The rope parameters' counts and the modules' sizes use it.
    assert (
        parse(_llama4(1.0, 1.0, np.int32(4096)), 64, 1e4)["original_max_position_embeddings"]
        == 4096
    )
    refused = "(rope_type='llama3') must be an int (a number of positions), got bool True"
    with pytest.raises(TypeError, match=re.escape(refused)):
        parse(_llama4(1.0, 1.0, True), 64, 1e4)  # type: ignore[arg-type]
    assert RotaryEmbedding(np.int64(16)).head_dim == 16  # type: ignore[arg-type]


# -- The records are the one source of what the types are -------------------------------

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _words(text: str) -> str:
    return " ".join(text.split())


def test_every_record_has_a_doc_line_and_the_lists_are_written_from_them() -> None:
    lines = type_list().splitlines()
    assert len(lines) == len(RECORDS)
    for line, record in zip(lines, RECORDS.values(), strict=True):
        assert record.doc.strip()
        assert "\n" not in record.doc
        assert line.startswith(f'- ``"{record.name}"``')
        assert line.endswith(record.doc)


def test_rope_frequencies_docstring_lists_the_records() -> None:
    # The docstring holds the records' list, word for word, and names as the types
    # that read the trained length the records that read it.
    doc = _words(rope_frequencies.__doc__ or "")
    assert _words(type_list()) in doc
    readers = reading("original_max_position_embeddings")
    named = ", ".join(readers[:-1]) + f" and {readers[-1]}"
    assert f"``original_max_position_embeddings`` for {named}." in doc


def test_the_api_page_and_the_hf_guide_write_the_types_from_the_records() -> None:
    api = (DOCS / "api.rst").read_text()
    entry = api[api.index(".. py:data:: ROPE_TYPES") :].split("\n\n.. ", 1)[0]
    assert ":rope-types:`*`" in entry  # the names, from ROPE_TYPES
    guide = (DOCS / "guide" / "hf.rst").read_text()
    assert "\n.. rope-types::\n" in guide  # the list, from the records
    assert ":rope-types:`original_max_position_embeddings`" in guide
    for name in RECORDS:  # no name typed on either: the markups write them
        assert name == "default" or f'"{name}"' not in entry  # (Hugging Face's, and "default")
        assert f"({name}," not in guide


def test_the_rotary_guide_describes_every_scaled_type() -> None:
    guide = (DOCS / "guide" / "rotary.rst").read_text()
    terms = re.findall(r'^``"(\w+)"``', guide, flags=re.MULTILINE)
    assert terms == [name for name in RECORDS if name != "default"]


def test_reading_names_the_records_that_read_a_key() -> None:
    assert reading("original_max_position_embeddings") == ("yarn", "llama3", "longrope")
    assert reading("max_position_embeddings") == ("dynamic", "yarn", "longrope")
    assert reading("low_freq_factor") == ("llama3",)
    assert reading("no such key") == ()
    for name, record in RECORDS.items():
        for key in record.keys:
            assert name in reading(key)
            assert record.reads(key)
