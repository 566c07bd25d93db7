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


def _measured(**more: Any) -> dict[str, Any]:
    return {"covered": True, "how": "rule", "logits_max_diff": 2e-7,
            "generate_equal": True, "error_1e6": {"hf": 3e-2, "posenc": 3e-6, "floor": 2e-6},
            "bar": {"generate": "equal", "0": "1e-5", "4096": "1e-5", "1e6": "100x"},
            "holds": True, **more}  # fmt: skip


def test_the_page_lists_every_row_by_what_was_measured() -> None:
    measured = _measured()
    results = {
        "date": "today", "transformers": "5.24.0", "torch": "2.13", "threads": 2,
        "seconds": 12.0,
        "families": [
            _row("llama", **measured),
            _row("flint", **{**measured, "error_1e6": {"hf": 1e-5, "posenc": 1e-5, "floor": 1e-5},
                             "bar": {**measured["bar"], "1e6": None}, "holds": False}),
            {**_row("gemma4_text", **{**measured, "bar": {**measured["bar"], "4096": "float64"}}),
             "family": "gemma4"},
            _row("qwen3_next", **{**measured, "bar": {**measured["bar"], "1e6": "floor"}}),
            _row("pixtral", covered=False, reason="takes `pixel_values` *only*"),
            {"model_type": "gpt2", "family": "gpt2", "rotary": False, "reason": "no rotary"},
        ],
    }  # fmt: skip
    text = "\n".join(_extension().lines(results))
    assert "5 families (modeling folders) have a rotary; 4 are patched and measured, 3 of" in text
    assert "(1 within the issue's bar as written)" in text
    assert "   * - llama\n" in text
    assert "10000×" in text  # 3e-2 / 3e-6
    assert "   * - flint\n" in text
    assert "     - 1×\n     - no" in text
    # the model type shows only where it is not the family's name; the clause that holds
    assert "   * - gemma4 (``gemma4_text``)\n" in text
    assert "     - yes: HF's own error\n" in text
    assert "     - yes: at the floor\n" in text
    assert text.count("     - yes\n") == 1
    # a reason's own backquotes and stars are no markup
    assert "takes 'pixel\\_values' \\*only\\*" in text
    assert "Causal LMs without a rotary (1, not counted): ``gpt2``" in text


def _closer(errors: dict[str, float], floor: float, times: float) -> bool:
    """The patched model closer to float64 by ``times``, or at its floor and 2x closer."""
    hf, posenc = errors["hf"], errors["posenc"]
    return posenc * times <= hf or (posenc <= 2 * floor and posenc * 2 <= hf)


def test_the_saved_sweep_lists_every_family_with_figures_or_a_reason() -> None:
    results = json.loads(SAVED.read_text())
    rows = results["families"]
    assert not results["sample"]
    by_type = {row["model_type"]: row for row in rows}
    assert len(by_type) == len(rows)
    # one row a family (of several causal LMs, one is swept)
    assert len({row["family"] for row in rows}) == len(rows)
    for row in rows:
        if row.get("covered"):  # measured: the bar as its figures say
            floor = row["error_0"]["posenc"]
            windows = [
                row["logits_diff"][w] <= 1e-5 or _closer(row[f"error_{w}"], floor, 10)
                for w in ("0", "4096")
            ]
            e = row["error_1e6"]
            bar = (
                all(windows) and row["generate_equal"] is not False and _closer(e, e["floor"], 100)
            )
            assert row["holds"] is bar, row["model_type"]
            assert row["logits_max_diff"] == max(row["logits_diff"].values())
            # no family holds by logits that do not move
            assert not (row["holds"] and e["hf"] == e["posenc"]), row["model_type"]
        else:  # not measured: why
            assert not row.get("holds"), row["model_type"]
            assert row["reason"], row["model_type"]
    # the newest families, each covered or listed with its reason
    newest = ("deepseek_v3", "deepseek_v4", "gpt_oss", "gemma4_text", "qwen3_next",
              "qwen3_5_text", "glm4_moe")  # fmt: skip
    for name in newest:
        assert by_type[name]["covered"] or by_type[name]["reason"], name
    # the count: at least 150 families covered, within the bar
    assert len({row["family"] for row in rows if row.get("holds")}) >= 150
