"""The saved family sweep (``benchmarks/results/hf-families.json``) as tables, at build time.

``nox -s hf-sweep`` builds a tiny model of every family of the pinned transformers whose
modeling code has a rotary (and every causal LM), patches it with :mod:`posenc.hf` and
writes what it measured; no page types a family's row. One markup:

- ``.. hf-families::`` — the run's versions and counts, the covered families with their
  figures, the families with a rotary not covered with the reason, and the causal LMs
  without a rotary.

Reading the JSON needs no transformers. The file is ``hf_families_file`` in conf.py,
relative to the docs directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def _e(value: float | None) -> str:
    return "–" if value is None else f"{value:.0e}"


def _cell(text: str) -> str:
    """One line of a list-table cell: no character of the reason's text is markup."""
    line = " ".join(str(text).split()).replace("`", "'")
    return "".join(f"\\{ch}" if ch in "\\*|_[]<>:" else ch for ch in line)


def _table(title: str, heads: list[str], rows: list[list[str]], widths: str) -> list[str]:
    lines = [
        f".. list-table:: {title}",
        "   :header-rows: 1",
        "   :widths: auto",
        "   :class: hf-families",
        "",
    ]
    for row in [heads, *rows]:
        lines.append(f"   * - {row[0]}")
        lines += [f"     - {cell}" for cell in row[1:]]
    return [*lines, ""]


#: How each clause of the bar reads in the table (see benchmarks/hf_sweep.py's ``bar``).
_CLAUSES = {"float64": "HF's own error", "floor": "at the floor"}


def _bar(row: dict[str, Any]) -> str:
    """``yes`` where the issue's bar holds as written, else by which clause; ``no``."""
    found = row.get("bar") or {}
    if not row.get("holds"):
        return "no"
    why = [_CLAUSES[c] for c in dict.fromkeys(found.values()) if c in _CLAUSES]
    return "yes" + (f": {', '.join(why)}" if why else "")


def _name(row: dict[str, Any]) -> str:
    """The family, and the model type swept where it is not the family's name."""
    family, model_type = row["family"], row["model_type"]
    return family if model_type == family else f"{family} (``{model_type}``)"


def lines(results: dict[str, Any]) -> list[str]:
    """The reStructuredText of the run: a summary, then the tables."""
    rows = results["families"]
    rotary = [r for r in rows if r.get("rotary")]
    families = sorted({r["family"] for r in rotary})
    holding = sorted({r["family"] for r in rotary if r.get("holds")})
    measured = [r for r in rotary if r.get("covered") and "error_1e6" in r]
    literal = [r for r in measured if r.get("holds") and _bar(r) == "yes"]
    out = [
        f"Run of {results['date']}: transformers {results['transformers']}, torch "
        f"{results['torch']}, {results['threads']} threads, {results['seconds']:.0f} s. "
        f"{len(families)} families (modeling folders) have a rotary; "
        f"{len({r['family'] for r in measured})} are patched and measured, {len(holding)} "
        f"of them within the bar below ({len(literal)} within the issue's bar as written).",
        "",
    ]
    covered = [
        [
            _name(r),
            r["how"],
            _e(r["logits_max_diff"]),
            _e(r.get("error_4096", {}).get("hf")),
            _e(r.get("error_4096", {}).get("posenc")),
            {True: "=", False: "≠", None: "–"}[r["generate_equal"]],
            _e(r["error_1e6"]["hf"]),
            _e(r["error_1e6"]["posenc"]),
            _e(r["error_1e6"].get("floor")),
            f"{r['error_1e6']['hf'] / max(r['error_1e6']['posenc'], 1e-300):.0f}×",
            _bar(r),
        ]
        for r in measured
    ]
    out += _table(
        "Covered: patched, and measured",
        [
            "family",
            "by",
            "diff < 4096",
            "4096 HF",
            "4096 posenc",
            "generate",
            "10\\ :sup:`6` HF",
            "10\\ :sup:`6` posenc",
            "floor",
            "closer",
            "bar",
        ],
        covered,
        "14 6 8 8 8 7 8 8 8 7 10",
    )
    left = [[_name(r), _cell((r.get("reason") or "")[:240])] for r in rotary if r not in measured]
    out += _table("Not covered: why", ["family", "reason"], left, "25 75")
    none = [f"``{r['model_type']}``" for r in rows if not r.get("rotary")]
    out += [f"Causal LMs without a rotary ({len(none)}, not counted): " + ", ".join(none), ""]
    return out


class HFFamilies(SphinxDirective):
    """``.. hf-families::``: the saved sweep's summary and tables."""

    def run(self) -> list[nodes.Node]:
        path = (Path(self.env.app.confdir) / self.env.config.hf_families_file).resolve()
        self.env.note_dependency(str(path))
        results = json.loads(path.read_text(encoding="utf-8"))
        source, _ = self.get_source_info()
        holder = nodes.container()
        self.state.nested_parse(
            StringList(lines(results), source=source), self.content_offset, holder
        )
        return list(holder.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("hf_families_file", "../benchmarks/results/hf-families.json", "env")
    app.add_directive("hf-families", HFFamilies)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
