"""Golden tests: posenc against the published formulas of other libraries.

Each ``*_reference`` function below evaluates, in float64 NumPy, the formula that
one library publishes, written out here from reading its source (no code copied).
The golden tests then check that :func:`posenc.sinusoidal_table`, with the
arguments the user guide's Conventions page gives for that library, reproduces
the formula: float64 tables to a few ulps of the angle, float32 tables to 3e-8.

Where the libraries stand (the paths are those of their public repositories):

==========================  =============================  ===============================
library                     posenc arguments               first position
==========================  =============================  ===============================
Annotated Transformer, XLM  defaults                       0
tensor2tensor, Whisper      ``layout="concatenated",       0
                            endpoint=True``
fairseq                     ``layout="concatenated",       ``padding_idx + 1``
                            endpoint=True``
Hugging Face Marian         ``layout="concatenated"``      0
==========================  =============================  ===============================

The published code of most of them computes in float32, whose tables drift from
the formula at large positions; these tests compare with the formula itself.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
import torch

from posenc import PositionalEncoding, positions_from_mask, sinusoidal_table

POSITIONS = (0, 1, 7, 511, 5000, 65_537, 1_000_003)
EPS64 = float(np.finfo(np.float64).eps)
FLOAT32_TOLERANCE = 3e-8
PADDING_IDX = 1  # fairseq's Dictionary puts <pad> at index 1


# --- the published formulas, in float64 ----------------------------------------------------


def _angles(positions: np.ndarray, frequencies: np.ndarray) -> np.ndarray:
    angles: np.ndarray = positions.astype(np.float64)[:, None] * frequencies[None, :]
    return angles


def annotated_transformer_reference(positions: np.ndarray, d_model: int) -> np.ndarray:
    """The Annotated Transformer's ``PositionalEncoding`` (the paper, §3.5).

    Source: harvardnlp/annotated-transformer, ``the_annotated_transformer.py``,
    class ``PositionalEncoding``. For each even column ``2i`` it takes the
    frequency ``exp(2i * -(ln 10000 / d_model))``; column ``2i`` holds the sine and
    column ``2i + 1`` the cosine of ``pos`` times that frequency. Positions are
    ``0 .. max_len - 1``. An odd ``d_model`` is not supported there (the cosine
    slice is one column short of the frequencies), so this reference is even-only.
    """
    assert d_model % 2 == 0
    frequencies = np.exp(
        np.arange(0, d_model, 2, dtype=np.float64) * -(math.log(10000.0) / d_model)
    )
    angles = _angles(positions, frequencies)
    out = np.empty((len(positions), d_model))
    out[:, 0::2] = np.sin(angles)
    out[:, 1::2] = np.cos(angles)
    return out


def xlm_reference(positions: np.ndarray, dim: int) -> np.ndarray:
    """XLM's ``create_sinusoidal_embeddings`` (also the paper's interleaving).

    Source: facebookresearch/XLM, ``xlm/model/transformer.py``,
    ``create_sinusoidal_embeddings``. Every column ``j`` gets the angle
    ``pos / 10000 ** (2 * (j // 2) / dim)``; even columns keep its sine, odd
    columns its cosine. Written per column, it is defined for an odd ``dim`` too
    (the last column is then a sine).
    """
    j = np.arange(dim)
    angles = positions.astype(np.float64)[:, None] / np.power(10000.0, 2 * (j // 2) / dim)
    return np.where(j % 2 == 0, np.sin(angles), np.cos(angles))


def tensor2tensor_reference(
    positions: np.ndarray,
    channels: int,
    min_timescale: float = 1.0,
    max_timescale: float = 1.0e4,
) -> np.ndarray:
    """tensor2tensor's timing signal.

    Source: tensorflow/tensor2tensor, ``tensor2tensor/layers/common_attention.py``,
    ``get_timing_signal_1d`` (and ``add_timing_signal_1d``). With
    ``n = channels // 2`` timescales, the increment is
    ``ln(max_timescale / min_timescale) / (n - 1)`` and timescale ``k`` has the
    inverse ``min_timescale * exp(-k * increment)``. The signal is all the sines of
    ``pos * inverse`` followed by all the cosines, right-padded with
    ``channels % 2`` zero columns. Positions are ``0 .. length - 1`` (plus
    ``start_index`` in later versions).
    """
    n = channels // 2
    increment = math.log(max_timescale / min_timescale) / (n - 1)
    inverse = min_timescale * np.exp(np.arange(n, dtype=np.float64) * -increment)
    angles = _angles(positions, inverse)
    signal = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    return np.pad(signal, [(0, 0), (0, channels % 2)])


def fairseq_rows(rows: np.ndarray, embedding_dim: int, padding_idx: int | None) -> np.ndarray:
    """Rows of fairseq's sinusoidal table.

    Source: facebookresearch/fairseq,
    ``fairseq/modules/sinusoidal_positional_embedding.py``,
    ``SinusoidalPositionalEmbedding.get_embedding``. With
    ``half = embedding_dim // 2``, frequency ``k`` is
    ``exp(-k * ln(10000) / (half - 1))``; row ``r`` is the sines of ``r`` times
    the frequencies, then the cosines, then one zero column if ``embedding_dim``
    is odd. The row ``padding_idx`` is all zeros. (Its docstring says it matches
    tensor2tensor and differs slightly from the paper.)
    """
    half = embedding_dim // 2
    frequencies = np.exp(np.arange(half, dtype=np.float64) * -(math.log(10000.0) / (half - 1)))
    angles = _angles(rows, frequencies)
    table = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    table = np.pad(table, [(0, 0), (0, embedding_dim % 2)])
    if padding_idx is not None:
        table[rows == padding_idx] = 0.0
    return table


def fairseq_make_positions(tokens: np.ndarray, padding_idx: int) -> np.ndarray:
    """fairseq's position numbers of a padded batch of token ids.

    Source: facebookresearch/fairseq, ``fairseq/utils.py``, ``make_positions``.
    Along each row, a real token gets ``padding_idx`` plus the number of real
    tokens up to and including it, so numbering starts at ``padding_idx + 1``
    whatever the padding side; a pad token gets ``padding_idx`` itself (whose row
    of the table is zero).
    """
    real = (tokens != padding_idx).astype(np.int64)
    numbers: np.ndarray = np.cumsum(real, axis=1) * real + padding_idx
    return numbers


def marian_reference(positions: np.ndarray, dim: int) -> np.ndarray:
    """Hugging Face Marian's sinusoidal position embeddings.

    Source: huggingface/transformers, ``src/transformers/models/marian/modeling_marian.py``,
    ``MarianSinusoidalPositionalEmbedding._init_weight``. Column ``j`` gets the angle
    ``pos / 10000 ** (2 * (j // 2) / dim)`` (XLM's); the sines of the even-``j``
    angles fill the first ``sentinel`` columns and the cosines of the odd-``j``
    angles the rest, where ``sentinel = dim // 2`` for an even ``dim`` and
    ``dim // 2 + 1`` for an odd one. Positions start at 0 (``forward`` counts from
    ``past_key_values_length``).
    """
    j = np.arange(dim)
    angles = positions.astype(np.float64)[:, None] / np.power(10000.0, 2 * (j // 2) / dim)
    sentinel = dim // 2 if dim % 2 == 0 else dim // 2 + 1
    out = np.empty((len(positions), dim))
    out[:, :sentinel] = np.sin(angles[:, 0::2])
    out[:, sentinel:] = np.cos(angles[:, 1::2])
    return out


def whisper_reference(
    positions: np.ndarray, channels: int, max_timescale: float = 10_000.0
) -> np.ndarray:
    """Whisper's ``sinusoids``, the audio encoder's fixed position embedding.

    Source: openai/whisper, ``whisper/model.py``, ``sinusoids`` (the buffer
    ``positional_embedding`` of ``AudioEncoder``; the text decoder's is learned).
    It asserts an even ``channels``; the increment is
    ``ln(max_timescale) / (channels // 2 - 1)``, inverse timescale ``k`` is
    ``exp(-increment * k)``, and the table is the sines of ``pos`` times those,
    then the cosines. Positions are ``0 .. length - 1``.
    """
    assert channels % 2 == 0
    n = channels // 2
    inverse = np.exp(-(np.log(max_timescale) / (n - 1)) * np.arange(n, dtype=np.float64))
    angles = _angles(positions, inverse)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


# --- comparison -----------------------------------------------------------------------------


def float64_tolerance(positions: np.ndarray) -> np.ndarray:
    """How far two correct float64 evaluations of the same table may be apart, per row.

    The angle ``pos * ω`` is a float64 number of magnitude up to ``pos``, and the
    published formulas round it differently from posenc (an exponential of a
    product of logarithms, or a division by a power, instead of ``base ** -x``):
    an ulp or so of the angle apart (measured: up to about ``0.5 * eps * pos``).
    The tolerance is ``1e-12`` plus 4 float64 epsilons per unit of position:
    1.2e-12 at position 511, 9e-10 at 1_000_003. A wrong convention is off by O(1).
    """
    return 1e-12 + 4 * EPS64 * np.abs(positions.astype(np.float64))


def assert_table_matches(
    positions: np.ndarray, reference: np.ndarray, d_model: int, **kwargs: object
) -> None:
    """posenc's float64 table is the reference; its float32 table is within 3e-8 of it."""
    pos = torch.from_numpy(positions)
    exact = sinusoidal_table(pos, d_model, dtype=torch.float64, **kwargs).numpy()  # type: ignore[arg-type]
    rounded = sinusoidal_table(pos, d_model, **kwargs).double().numpy()  # type: ignore[arg-type]
    assert exact.shape == reference.shape == (len(positions), d_model)
    error = np.abs(exact - reference)
    tolerance = float64_tolerance(positions)[:, None]
    bad = np.argwhere(~(error <= tolerance))
    assert bad.size == 0, (
        f"float64 table off at (row, column) {tuple(bad[0])}: error "
        f"{error[tuple(bad[0])]:.3g} > {tolerance[bad[0][0], 0]:.3g}"
    )
    error32 = float(np.abs(rounded - reference).max())
    assert error32 <= FLOAT32_TOLERANCE, f"float32 table off by {error32:.3g}"


def position_array(positions: tuple[int, ...] = POSITIONS) -> np.ndarray:
    return np.array(positions, dtype=np.int64)


# --- golden tests, one library each --------------------------------------------------------


@pytest.mark.parametrize("d_model", [8, 512])
def test_golden_annotated_transformer(d_model: int) -> None:
    positions = position_array()
    reference = annotated_transformer_reference(positions, d_model)
    assert_table_matches(positions, reference, d_model)


@pytest.mark.parametrize("d_model", [8, 512, 7])
def test_golden_xlm(d_model: int) -> None:
    positions = position_array()
    assert_table_matches(positions, xlm_reference(positions, d_model), d_model)


@pytest.mark.parametrize(("d_model", "max_timescale"), [(8, 1.0e4), (512, 1.0e4), (64, 500.0)])
def test_golden_tensor2tensor(d_model: int, max_timescale: float) -> None:
    positions = position_array()
    reference = tensor2tensor_reference(positions, d_model, max_timescale=max_timescale)
    assert_table_matches(
        positions, reference, d_model, layout="concatenated", endpoint=True, base=max_timescale
    )


@pytest.mark.parametrize("d_model", [8, 512])
def test_golden_fairseq_rows_are_positions_shifted_by_padding_idx_plus_one(d_model: int) -> None:
    # Token t (0-based, counting real tokens) reads fairseq's row t + padding_idx + 1.
    shifted = position_array() + PADDING_IDX + 1
    reference = fairseq_rows(shifted, d_model, PADDING_IDX)
    assert_table_matches(shifted, reference, d_model, layout="concatenated", endpoint=True)


@pytest.mark.parametrize("d_model", [8, 512])
def test_golden_fairseq_padded_batch_through_make_positions(d_model: int) -> None:
    pad = PADDING_IDX
    tokens = np.array(
        [
            [5, 6, 7, 8, pad, pad],  # right padding
            [pad, pad, 9, 10, 11, 12],  # left padding
            [13, 14, 15, 16, 17, 18],  # none
        ]
    )
    real = tokens != pad
    fairseq = fairseq_rows(fairseq_make_positions(tokens, pad).ravel(), d_model, pad)
    fairseq = fairseq.reshape(*tokens.shape, d_model)
    assert (fairseq[~real] == 0).all()  # pad tokens read the zeroed row padding_idx

    positions = positions_from_mask(torch.from_numpy(real)) + pad + 1
    ours = sinusoidal_table(positions, d_model, layout="concatenated", endpoint=True).double()
    assert np.abs(ours.numpy()[real] - fairseq[real]).max() <= FLOAT32_TOLERANCE

    # The same through the module: x + fairseq's embedding, for the real tokens.
    pe = PositionalEncoding(d_model, layout="concatenated", endpoint=True)
    x = torch.randn(*tokens.shape, d_model, generator=torch.Generator().manual_seed(0))
    out = pe(x, positions=positions)
    expected = x.double().numpy() + fairseq
    assert np.abs(out.double().numpy()[real] - expected[real]).max() <= 1e-6


@pytest.mark.parametrize(
    ("library", "reference"),
    [
        ("tensor2tensor", lambda p, d: tensor2tensor_reference(p, d)),
        ("fairseq", lambda p, d: fairseq_rows(p, d, None)),
    ],
)
@pytest.mark.parametrize("d_model", [7, 513])
def test_golden_tensor2tensor_and_fairseq_odd_dim_is_even_table_plus_zero_column(
    library: str, reference: Callable[[np.ndarray, int], np.ndarray], d_model: int
) -> None:
    # For an odd D, both use D // 2 frequencies and append a zero column: posenc's
    # odd-D table (ceil(D/2) frequencies) is not theirs, but its D - 1 table is.
    positions = position_array()
    theirs = reference(positions, d_model)
    assert (theirs[:, -1] == 0).all()
    assert_table_matches(
        positions, theirs[:, :-1], d_model - 1, layout="concatenated", endpoint=True
    )
    odd = sinusoidal_table(
        torch.from_numpy(positions), d_model, layout="concatenated", endpoint=True
    )
    assert np.abs(odd.double().numpy() - theirs).max() > 0.1, library


@pytest.mark.parametrize("d_model", [8, 512, 7, 513])
def test_golden_marian(d_model: int) -> None:
    positions = position_array()
    reference = marian_reference(positions, d_model)
    assert_table_matches(positions, reference, d_model, layout="concatenated")


@pytest.mark.parametrize("d_model", [8, 512, 384])
def test_golden_whisper(d_model: int) -> None:
    positions = position_array()
    reference = whisper_reference(positions, d_model)
    assert_table_matches(positions, reference, d_model, layout="concatenated", endpoint=True)


# --- the conventions are distinct, and each library maps to exactly one ------------------

CONVENTIONS: dict[str, dict[str, object]] = {
    "interleaved": {},
    "interleaved-endpoint": {"endpoint": True},
    "concatenated": {"layout": "concatenated"},
    "concatenated-endpoint": {"layout": "concatenated", "endpoint": True},
}

# Each library's table for the tokens at 0-based positions p, and its posenc convention.
LIBRARIES: dict[str, tuple[Callable[[np.ndarray, int], np.ndarray], str, int]] = {
    "annotated_transformer": (annotated_transformer_reference, "interleaved", 0),
    "xlm": (xlm_reference, "interleaved", 0),
    "tensor2tensor": (tensor2tensor_reference, "concatenated-endpoint", 0),
    "whisper": (whisper_reference, "concatenated-endpoint", 0),
    "fairseq": (
        lambda p, d: fairseq_rows(p + PADDING_IDX + 1, d, PADDING_IDX),
        "concatenated-endpoint",
        PADDING_IDX + 1,
    ),
    "marian": (marian_reference, "concatenated", 0),
}


@pytest.mark.parametrize(("first", "second"), list(itertools.combinations(CONVENTIONS, 2)))
@pytest.mark.parametrize("d_model", [8, 512])
def test_posenc_conventions_differ_pairwise(first: str, second: str, d_model: int) -> None:
    # At D = 512 the two spacings part only slowly: positions up to 10^6 show it.
    positions = torch.from_numpy(position_array())
    a = sinusoidal_table(positions, d_model, **CONVENTIONS[first])  # type: ignore[arg-type]
    b = sinusoidal_table(positions, d_model, **CONVENTIONS[second])  # type: ignore[arg-type]
    assert (a - b).abs().max() > 0.1


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("annotated_transformer", "tensor2tensor"),
        ("annotated_transformer", "fairseq"),
        ("annotated_transformer", "marian"),
        ("tensor2tensor", "fairseq"),
        ("tensor2tensor", "marian"),
        ("fairseq", "marian"),
    ],
)
@pytest.mark.parametrize("d_model", [8, 512])
def test_golden_references_of_distinct_conventions_differ(
    first: str, second: str, d_model: int
) -> None:
    # The golden tests can fail: the references of two conventions are O(1) apart.
    positions = position_array()
    a = LIBRARIES[first][0](positions, d_model)
    b = LIBRARIES[second][0](positions, d_model)
    assert np.abs(a - b).max() > 0.1


@pytest.mark.parametrize(
    ("same", "as_"), [("xlm", "annotated_transformer"), ("whisper", "tensor2tensor")]
)
@pytest.mark.parametrize("d_model", [8, 512])
def test_golden_references_of_one_convention_agree(same: str, as_: str, d_model: int) -> None:
    positions = position_array()
    a = LIBRARIES[same][0](positions, d_model)
    b = LIBRARIES[as_][0](positions, d_model)
    assert (np.abs(a - b) <= float64_tolerance(positions)[:, None]).all()


@pytest.mark.parametrize("library", list(LIBRARIES))
@pytest.mark.parametrize("d_model", [8, 512])
def test_each_library_matches_exactly_one_convention(library: str, d_model: int) -> None:
    reference, convention, shift = LIBRARIES[library]
    positions = position_array()
    theirs = reference(positions, d_model)
    matching = [
        name
        for name, kwargs in CONVENTIONS.items()
        if np.abs(
            sinusoidal_table(torch.from_numpy(positions + shift), d_model, **kwargs)  # type: ignore[arg-type]
            .double()
            .numpy()
            - theirs
        ).max()
        <= FLOAT32_TOLERANCE
    ]
    assert matching == [convention]


# --- the module ---------------------------------------------------------------------------


@pytest.mark.parametrize("convention", list(CONVENTIONS))
@pytest.mark.parametrize("d_model", [8, 7])
def test_module_forward_is_x_plus_the_table(convention: str, d_model: int) -> None:
    kwargs = CONVENTIONS[convention]
    pe = PositionalEncoding(d_model, dropout=0.1, max_len=6, **kwargs)  # type: ignore[arg-type]
    pe.eval()
    x = torch.randn(2, 10, d_model, generator=torch.Generator().manual_seed(1))
    # 10 > max_len: the first six rows come from the buffer, the others are computed.
    assert torch.equal(pe(x), x + sinusoidal_table(10, d_model, **kwargs))  # type: ignore[arg-type]
    assert torch.equal(
        pe(x, offset=5000),
        x + sinusoidal_table(torch.arange(5000, 5010), d_model, **kwargs),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("library", list(LIBRARIES))
def test_module_reproduces_each_library(library: str) -> None:
    reference, convention, shift = LIBRARIES[library]
    d_model = 16
    positions = position_array()
    pe = PositionalEncoding(d_model, **CONVENTIONS[convention])  # type: ignore[arg-type]
    out = pe(torch.zeros(len(positions), d_model), positions=torch.from_numpy(positions + shift))
    assert np.abs(out.double().numpy() - reference(positions, d_model)).max() <= FLOAT32_TOLERANCE


def test_module_records_its_convention() -> None:
    pe = PositionalEncoding(8, layout="concatenated", endpoint=True)
    assert (pe.layout, pe.endpoint) == ("concatenated", True)
    assert "layout='concatenated'" in repr(pe)
    assert "endpoint=True" in repr(pe)


@pytest.mark.parametrize("layout", ["interleave", "concat", "Concatenated", "", None, 0])
def test_bad_layout_is_a_value_error_naming_layout(layout: object) -> None:
    with pytest.raises(ValueError, match="layout"):
        sinusoidal_table(4, 8, layout=layout)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="layout"):
        PositionalEncoding(8, layout=layout)  # type: ignore[arg-type]
