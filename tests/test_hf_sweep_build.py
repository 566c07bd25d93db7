"""The sweep's tiny-config builder (benchmarks/hf_sweep.py): how it reads a config class's
refusal and mends it, without transformers."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

_PATH = Path(__file__).parents[1] / "benchmarks" / "hf_sweep.py"


def _sweep() -> Any:
    spec = importlib.util.spec_from_file_location("hf_sweep_build", _PATH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Part:
    """A stand-in for a sub-config: what the builder asks of one is ``to_dict``."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@pytest.mark.parametrize(
    ("message", "path", "value"),
    [  # the refusals of transformers 5.24's config classes, as they read
        ("ValueError: `flow_head_config.condition_dim` (768) must equal the backbone "
         "`hidden_size` (64).", "flow_head_config.condition_dim", 64),
        ("ValueError: vision_config.out_hidden_size (1024) must equal text_config.hidden_size "
         "(64).", "vision_config.out_hidden_size", 64),
        ("ValueError: `head_config.audio_hidden_size` (512) must match `audio_config."
         "hidden_size` (48).", "head_config.audio_hidden_size", 48),
    ],
)  # fmt: skip
def test_a_refusal_names_the_size_to_mend_and_its_value(
    message: str, path: str, value: int
) -> None:
    match = _sweep()._MUST_EQUAL.search(message)
    assert match is not None
    assert (match[1], int(match[4])) == (path, value)


def test_other_refusals_are_not_read_as_sizes() -> None:
    sweep = _sweep()
    assert sweep._MUST_EQUAL.search("num_key_value_heads must match num_attention_heads") is None
    assert sweep._MUST_EQUAL.search("`blank_token_id` (23862) must be a class below") is None


def test_a_size_is_set_in_the_part_it_names() -> None:
    sweep = _sweep()
    part = _Part(condition_dim=768, other=3)
    given: dict[str, Any] = {"hidden_size": 64, "flow_head_config": part}
    assert sweep._set_size(given, "flow_head_config.condition_dim", 64)
    assert part.to_dict() == {"condition_dim": 64, "other": 3}
    assert sweep._set_size(given, "hidden_size", 32)
    assert given["hidden_size"] == 32
    assert given["flow_head_config"] is part
    # a part the kwargs do not hold, or one that is no config, is not invented
    assert not sweep._set_size(given, "audio_config.hidden_size", 64)
    assert "audio_config" not in given
    given["plain"] = {"hidden_size": 1}
    assert not sweep._set_size(given, "plain.hidden_size", 64)
    assert given["plain"] == {"hidden_size": 1}


def test_the_text_part_is_the_shallowest_language_model() -> None:
    import torch

    sweep = _sweep()

    def model() -> torch.nn.Module:
        module = torch.nn.Linear(2, 2)
        module.config = _Part(model_type="llama")  # what a transformers model has: a config
        return module

    outer = torch.nn.Module()
    outer.decoder = torch.nn.Linear(2, 2)  # a part of that name that is no model: passed over
    outer.model = torch.nn.Module()
    outer.model.vision = torch.nn.Module()
    outer.model.vision.language_model = model()  # deeper: passed over
    outer.model.projector = model()  # a model of another name: passed over
    assert sweep.text_part(outer) == "model.vision.language_model"
    outer.model.language_model = model()
    assert sweep.text_part(outer) == "model.language_model"
    assert sweep.text_part(torch.nn.Linear(2, 2)) is None


def _row(**more: Any) -> dict[str, Any]:
    """A measured row within the issue's bar as written; ``more`` changes it."""
    row: dict[str, Any] = {
        "generate_equal": True,
        "logits_diff": {"0": 1e-7, "4096": 5e-6},
        "error_0": {"hf": 3e-6, "posenc": 3e-6},
        "error_4096": {"hf": 6e-6, "posenc": 4e-7},
        "error_1e6": {"hf": 5e-2, "posenc": 5e-6, "floor": 4e-6},
    }
    return {**row, **more}


def test_the_bar_as_the_issue_writes_it() -> None:
    sweep = _sweep()
    row = _row()
    assert sweep.bar(row) == {"generate": "equal", "0": "1e-5", "4096": "1e-5", "1e6": "100x"}
    assert sweep.holds(row)
    assert sweep.bar({"covered": False}) is None
    assert not sweep.holds({"covered": False})
    assert sweep.bar(_row(generate_equal=None))["generate"] == "none"  # an encoder
    assert not sweep.holds(_row(generate_equal=False))


def test_a_difference_past_1e5_holds_only_as_the_unpatched_models_own_error() -> None:
    sweep = _sweep()
    diff = {"0": 1e-7, "4096": 2e-5}
    # the unpatched model 2e-5 from float64, the patched one 10x closer: its own error
    row = _row(logits_diff=diff, error_4096={"hf": 2e-5, "posenc": 2e-6})
    assert sweep.bar(row)["4096"] == "float64"
    assert sweep.holds(row)
    # 8x closer, and more than twice its floor (1e-6) from float64: not explained
    row = _row(
        logits_diff=diff,
        error_0={"hf": 1e-6, "posenc": 1e-6},
        error_4096={"hf": 2e-5, "posenc": 2.5e-6},
    )
    assert sweep.bar(row)["4096"] is None
    assert not sweep.holds(row)
    # the same with a floor of 3e-6 (its error at positions 0-23): at the floor
    row = {**row, "error_0": {"hf": 3e-6, "posenc": 3e-6}}
    assert sweep.bar(row)["4096"] == "float64"
    assert sweep.holds(row)
    # at the floor but not 2x closer than the unpatched model: not explained either
    row = _row(logits_diff=diff, error_4096={"hf": 2e-5, "posenc": 1.1e-5},
               error_0={"hf": 6e-6, "posenc": 6e-6})  # fmt: skip
    assert sweep.bar(row)["4096"] is None
    # the window at 0 is held to the same rule
    row = _row(logits_diff={"0": 2e-5, "4096": 1e-6})
    assert sweep.bar(row)["0"] is None


def test_at_a_million_100x_closer_or_at_the_float32_floor() -> None:
    sweep = _sweep()
    # 99x closer and far above its floor: fails
    row = _row(error_1e6={"hf": 9.9e-4, "posenc": 1e-5, "floor": 1e-6})
    assert sweep.bar(row)["1e6"] is None
    assert not sweep.holds(row)
    # the same errors with a floor of 6e-6 (linear attention): nothing left to remove
    row = _row(error_1e6={"hf": 9.9e-4, "posenc": 1e-5, "floor": 6e-6})
    assert sweep.bar(row)["1e6"] == "floor"
    assert sweep.holds(row)
    # at the floor, but the unpatched model as close: the rotary changed nothing
    row = _row(error_1e6={"hf": 1e-5, "posenc": 1e-5, "floor": 1e-5})
    assert sweep.bar(row)["1e6"] is None
    row = _row(error_1e6={"hf": 1.9e-5, "posenc": 1e-5, "floor": 1e-5})
    assert sweep.bar(row)["1e6"] is None
