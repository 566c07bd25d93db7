"""The saved family sweep (benchmarks/results/hf-families.json) and the docs extension that
renders it on the Hugging Face page: read without transformers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[1]
SAVED = ROOT / "benchmarks" / "results" / "hf-families.json"


def _extension() -> Any:
    spec = importlib.util.spec_from_file_location("hf_families", ROOT / "docs/_ext/hf_families.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(model_type: str, **more: Any) -> dict[str, Any]:
    return {"model_type": model_type, "family": model_type, "rotary": True, **more}


def test_the_page_lists_every_row_by_what_was_measured() -> None:
    measured = {"covered": True, "how": "rule", "logits_max_diff": 2e-7,
                "generate_equal": True, "error_1e6": {"hf": 3e-2, "posenc": 3e-6},
                "holds": True}  # fmt: skip
    results = {
        "date": "today", "transformers": "5.24.0", "torch": "2.13", "threads": 2,
        "seconds": 12.0,
        "families": [
            _row("llama", **measured),
            _row("flint", **{**measured, "error_1e6": {"hf": 1e-5, "posenc": 1e-5},
                             "holds": False}),
            _row("pixtral", covered=False, reason="takes `pixel_values` *only*"),
            {"model_type": "gpt2", "family": "gpt2", "rotary": False, "reason": "no rotary"},
        ],
    }  # fmt: skip
    text = "\n".join(_extension().lines(results))
    assert "3 families (modeling folders) have a rotary; 2 are patched and measured, 1 of" in text
    assert "``llama``" in text
    assert "10000×" in text  # 3e-2 / 3e-6
    assert "``flint``" in text
    assert "     - 1×\n     - no" in text
    # a reason's own backquotes and stars are no markup
    assert "takes 'pixel\\_values' \\*only\\*" in text
    assert "Causal LMs without a rotary (1, not counted): ``gpt2``" in text


def test_the_saved_sweep_lists_every_family_with_figures_or_a_reason() -> None:
    results = json.loads(SAVED.read_text())
    rows = results["families"]
    assert not results["sample"]
    by_type = {row["model_type"]: row for row in rows}
    assert len(by_type) == len(rows)
    for row in rows:
        if "error_1e6" in row:  # measured: the bar as its figures say
            e = row["error_1e6"]
            bar = (
                row["logits_max_diff"] <= 1e-5
                and row["generate_equal"] is not False
                and e["posenc"] * 100 <= e["hf"]
            )
            assert row["holds"] is bar, row["model_type"]
            assert row["covered"], row["model_type"]
        else:  # not measured: why
            assert not row.get("holds"), row["model_type"]
            assert row["reason"], row["model_type"]
    # the newest families, each covered or listed with its reason
    newest = ("deepseek_v3", "deepseek_v4", "gpt_oss", "gemma4_text", "qwen3_next",
              "qwen3_5_text", "glm4_moe")  # fmt: skip
    for name in newest:
        assert by_type[name]["covered"] or by_type[name]["reason"], name
