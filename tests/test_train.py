"""The trained comparison's quick mode (benchmarks/train.py): what holds at 300 steps, one seed.

Press et al. (2022, Figure 1): trained at L_train, ALiBi's loss stays flat to many times
L_train while the sinusoid's rises. Both show after a few hundred steps of this small model;
the full run (``nox -s train``) measures the rest. No timing is asserted. The budgets, checked
single-threaded on seeds 0-3: ALiBi's 8x loss is within 0.01 of its 1x loss from 100 steps
on; the sinusoid's 8x loss is 0.26-0.30 above its 1x loss at 200 steps, 0.37-0.42 at 250
and 0.48-0.57 at 300, so it trains for 300.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import posenc

HARNESS = Path(__file__).resolve().parents[1] / "benchmarks" / "train.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("posenc_train_harness", HARNESS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


train = _load()
SEED = 0


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """The budgets were checked single-threaded: the same arithmetic here."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def ends(scheme: str, steps: int) -> tuple[float, float]:
    """Loss at 1x and 8x L_train of ``scheme`` trained for ``steps`` from SEED."""
    model, data, _ = train.fit(scheme, SEED, steps)
    short = train.position_losses(model, data, train.L_TRAIN)
    long = train.position_losses(model, data, 8 * train.L_TRAIN)
    return float(short.mean()), float(long.mean())


@pytest.mark.usefixtures("one_thread")
def test_alibi_stays_flat_to_8x_the_training_length() -> None:
    at_1x, at_8x = ends("alibi", 100)
    assert at_1x < 2.5  # it learned something: the untrained loss is log(256) = 5.5
    assert abs(at_8x - at_1x) <= 0.05, (at_1x, at_8x)


@pytest.mark.usefixtures("one_thread")
def test_sinusoid_degrades_past_the_training_length() -> None:
    at_1x, at_8x = ends("sinusoid", train.QUICK_STEPS)
    assert at_1x < 2.5
    assert at_8x >= at_1x + 0.3, (at_1x, at_8x)


def test_learned_table_refuses_past_its_rows() -> None:
    torch.manual_seed(SEED)
    model = train.Decoder("learned").eval()
    tokens = torch.zeros(1, train.L_TRAIN + 1, dtype=torch.long)
    with torch.no_grad():
        assert model(tokens[:, :-1]).shape == (1, train.L_TRAIN, train.VOCAB)
        with pytest.raises(IndexError, match=r"position 64 .*learned table of max_len=64"):
            model(tokens)


def test_learned_table_is_null_past_its_rows_in_the_report() -> None:
    torch.manual_seed(SEED)
    model = train.Decoder("learned").eval()
    result = train.evaluate(model, train.Data.load())
    assert result["loss"]["1"] is not None
    assert [result["loss"][m] for m in ("2", "4", "8")] == [None, None, None]
    assert result["per_position"] is None
    assert "cannot extrapolate" in result["refused"]


def _without_times(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: value for key, value in row.items() if key != "seconds"} for row in rows]


def test_rerun_at_a_fixed_thread_count_is_bit_identical() -> None:
    # The learned table: its evaluation stops at 1x, so the check costs little.
    first = train.train_one("learned", SEED, 3, threads=1)
    again = train.train_one("learned", SEED, 3, threads=1)
    assert _without_times(first) == _without_times(again)
    assert first[0]["threads"] == 1
    other = train.train_one("learned", SEED + 1, 3, threads=1)
    assert other[0]["loss"]["1"] != first[0]["loss"]["1"]  # the seed is used


def test_every_scheme_comes_from_the_public_api() -> None:
    kinds = {
        "nope": torch.nn.Dropout,
        "sinusoid": posenc.PositionalEncoding,
        "learned": posenc.LearnedPositionalEmbedding,
    }
    for scheme in train.SCHEMES:
        model = train.Decoder(scheme)
        absolute = kinds.get(scheme, torch.nn.Dropout)
        assert type(model.absolute) is absolute, scheme
        assert (model.rope is not None) == (scheme == "rope")
        biases = {"alibi": posenc.ALiBi, "t5": posenc.RelativePositionBias}
        expected = biases.get(scheme.split("-")[0])
        assert (type(model.bias) if model.bias is not None else None) is expected, scheme
    distance = train.Decoder("t5").bias.max_distance, train.Decoder("t5-128").bias.max_distance
    assert distance == (train.L_TRAIN, 128)


def test_unknown_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match=r"scheme must be one of .*'alibi'.*got 'xpos'"):
        train.Decoder("xpos")
