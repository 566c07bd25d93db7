"""Render the saved benchmark run (``benchmarks/results/*.json``) as tables, at build time.

Every number the Performance page shows comes from the JSON file that
``nox -s bench -- --save`` writes; the page holds none of them. Three markups:

- ``.. bench-machine::`` — where and when the run was measured, and how;
- ``.. bench-tables:: PREFIX`` — one table per section whose key starts with PREFIX
  (``input-float32``, ``table``, ``rope-``), or a line saying the run has none;
- ``.. bench-chart:: KEY`` — one section's ratios to its floor as bars (HTML and CSS,
  no image), for the cases named in ``:cases:``, with ``:allocator:`` (``stable``);
- ``:bench:`KEY CASE ALLOCATOR STAT``` — one figure inline, STAT being ``ms``,
  ``range`` or ``floor`` (the ratio to the section's floor) or ``baseline``.

The file is ``bench_results_file`` in conf.py, relative to the docs directory.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective, SphinxRole

ALLOCATOR_HEADS = {"default": "glibc defaults", "stable": "stable allocator"}


def _load(env: Any) -> tuple[dict[str, Any], Path]:
    path = (Path(env.app.confdir) / env.config.bench_results_file).resolve()
    env.note_dependency(str(path))
    return json.loads(path.read_text()), path


def _ms(value: float) -> str:
    """Three significant digits (four from 1,000 on): 0.982, 4.72, 15.0, 141, 5,603."""
    if value >= 99.95:
        return f"{value:,.0f}"
    if value >= 9.995:
        return f"{value:.1f}"
    return f"{value:.2f}" if value >= 0.9995 else f"{value:.3f}"


def _figure(case: dict[str, Any], allocator: str, stat: str) -> str:
    figures = case["allocators"][allocator]
    if stat == "ms":
        return f"{_ms(figures['median_ms'])} ms"
    if stat == "range":
        return f"{_ms(figures['min_ms'])}–{_ms(figures['max_ms'])} ms"
    if stat in ("floor", "baseline"):
        ratio = figures[f"vs_{stat}"]
        if ratio is None:
            raise ValueError(f"case {case['name']!r} has no ratio to a baseline")
        return f"{ratio:.2f}×"
    raise ValueError(f"unknown figure {stat!r}: ms, range, floor or baseline")


def _section(results: dict[str, Any], key: str) -> dict[str, Any]:
    for section in results["sections"]:
        if section["key"] == key:
            return section
    raise KeyError(key)


def _cell(*lines: str, strong: bool = False) -> nodes.entry:
    entry = nodes.entry()
    for i, line in enumerate(lines):
        para = nodes.paragraph()
        text: nodes.Node = nodes.Text(line)
        if strong:
            text = nodes.strong(line, line)
        elif i:
            text = nodes.inline(line, line, classes=["bench-range"])
        para += text
        entry += para
    return entry


def _table(section: dict[str, Any], allocators: list[str]) -> nodes.table:
    has_base = section.get("baseline") is not None
    heads = ["Candidate"]
    for allocator in allocators:
        heads += [f"{ALLOCATOR_HEADS.get(allocator, allocator)}: ms", "× floor"]
    if has_base:
        heads.append("× baseline (stable)")
    widths = [34] + [14, 9] * len(allocators) + ([9] if has_base else [])

    table = nodes.table(classes=["bench-table"])
    title = nodes.title(section["title"], section["title"])
    table += title
    group = nodes.tgroup(cols=len(heads))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    thead = nodes.thead()
    row = nodes.row()
    for head in heads:
        row += _cell(head)
    thead += row
    group += thead
    body = nodes.tbody()
    for case in section["cases"]:
        row = nodes.row()
        row += _cell(case["label"], strong=case["name"] == section["floor"])
        for allocator in allocators:
            figures = case["allocators"][allocator]
            row += _cell(
                _ms(figures["median_ms"]),
                f"{_ms(figures['min_ms'])}–{_ms(figures['max_ms'])}",
            )
            row += _cell(f"{figures['vs_floor']:.2f}")
        if has_base:
            ratio = case["allocators"]["stable"]["vs_baseline"]
            row += _cell(f"{ratio:.2f}")
        body += row
    group += body
    return table


class BenchTables(SphinxDirective):
    """One table per saved section whose key starts with the argument."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        results, path = _load(self.env)
        prefix = self.arguments[0]
        allocators = list(results["allocators"])
        out: list[nodes.Node] = []
        found = [s for s in results["sections"] if s["key"].startswith(prefix)]
        for section in found:
            if "skipped" in section:
                text = f"{section['key']}: not measured in this run ({section['skipped']})."
                out.append(nodes.paragraph(text, text))
                continue
            if section.get("note"):
                out.append(nodes.paragraph(section["note"], section["note"]))
            out.append(_table(section, allocators))
        if not found:
            text = f"Not measured in the saved run ({path.name})."
            out.append(nodes.paragraph(text, text))
        return out


class BenchMachine(SphinxDirective):
    """Where, when and how the saved run was measured."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        results, path = _load(self.env)
        m, s = results["machine"], results["settings"]
        memory = f", {m['memory_gib']:g} GiB" if m.get("memory_gib") else ""
        lines = [
            f"Measured on {results['date']} on {m['cpu']} ({m['cores']} cores{memory}, "
            f"{m['cpu_capability']}), {m['os']}; Python {m['python']}, torch {m['torch']}, "
            f"posenc {results['posenc']}; {s['threads']} threads.",
            f"Each figure is the median of {s['rounds']} interleaved rounds (each round the "
            f"median of {s['calls']} calls; 1 call for the table), with the rounds' range "
            f"below it; {s['flush_mib']} MiB were written before every call, so that no call "
            "finds the previous one's data in the caches, except in rows marked warm.",
            "Load average (1 minute) on the machine at the start and end of each run: "
            + "; ".join(
                f"{ALLOCATOR_HEADS.get(a, a)} {v[0]} → {v[1]}" for a, v in results["load"].items()
            )
            + f". Source: benchmarks/results/{path.name}.",
        ]
        return [nodes.paragraph(line, line) for line in lines]


class BenchChart(SphinxDirective):
    """One section's ratios to its floor as horizontal bars, with the floor marked.

    The bars are HTML and CSS (``bench-chart`` in ``_static/posenc.css``), so their
    text is the page's text at every width; builders other than HTML get the
    caption only.
    """

    required_arguments = 1
    option_spec: ClassVar[dict[str, Callable[[str], str]]] = {
        "cases": directives.unchanged_required,
        "allocator": directives.unchanged,
    }
    has_content = False

    def run(self) -> list[nodes.Node]:
        results, path = _load(self.env)
        key = self.arguments[0]
        allocator = self.options.get("allocator", "stable")
        try:
            section = _section(results, key)
            by_name = {case["name"]: case for case in section["cases"]}
            names = self.options.get("cases", "").split() or list(by_name)
            cases = [by_name[name] for name in names]
            ratios = [case["allocators"][allocator]["vs_floor"] for case in cases]
        except KeyError as exc:
            raise self.error(
                f"bench-chart: {exc!r} is not in the saved run ({path.name})"
            ) from exc
        top = max([*ratios, 1.0])

        def pct(value: float) -> str:
            return f"{100 * value / top:.1f}%"

        rows = []
        for case, ratio in zip(cases, ratios, strict=True):
            floor = " bench-bar-floor" if case["name"] == section["floor"] else ""
            rows.append(
                f'<div class="bench-chart-row{floor}">'
                f'<span class="bench-chart-label">{html.escape(case["label"])}</span>'
                f'<span class="bench-chart-track"><span class="bench-chart-bar" '
                f'style="width: {pct(ratio)}"></span><span class="bench-chart-mark" '
                f'style="left: {pct(1.0)}"></span></span>'
                f'<span class="bench-chart-value">{ratio:.2f}×</span></div>'
            )
        head = ALLOCATOR_HEADS.get(allocator, allocator)
        caption = (
            f"{section['title']}: the time of each candidate as a multiple of the floor's "
            f"(the line), {head}; shorter is faster. From the saved run, "
            f"benchmarks/results/{path.name}."
        )
        body = "".join(rows)
        markup = (
            f'<figure class="bench-chart" role="img" aria-label="{html.escape(caption)}">'
            f"{body}<figcaption>{html.escape(caption)}</figcaption></figure>"
        )
        return [nodes.raw("", markup, format="html")]


class BenchRole(SphinxRole):
    """``:bench:`KEY CASE ALLOCATOR STAT``` — one figure of the saved run."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        try:
            key, case_name, allocator, stat = self.text.split()
            results, _ = _load(self.env)
            section = _section(results, key)
            case = next(c for c in section["cases"] if c["name"] == case_name)
            text = _figure(case, allocator, stat)
        except (ValueError, KeyError, StopIteration) as exc:
            message = self.inliner.reporter.error(
                f"bench: cannot read {self.text!r} from the saved run: {exc!r}",
                line=self.lineno,
            )
            return [nodes.problematic(self.rawtext, self.rawtext)], [message]
        return [nodes.inline(text, text, classes=["bench-figure"])], []


class BenchInfoRole(SphinxRole):
    """``:bench-info:`GROUP.NAME``` — how the saved run was made: ``settings.threads``,
    ``machine.cpu``, ``shape.batch``."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        try:
            group, name = self.text.split(".")
            results, _ = _load(self.env)
            value = results[group][name]
            text = f"{value:,}" if isinstance(value, int) else str(value)
        except (ValueError, KeyError) as exc:
            message = self.inliner.reporter.error(
                f"bench-info: cannot read {self.text!r} from the saved run: {exc!r}",
                line=self.lineno,
            )
            return [nodes.problematic(self.rawtext, self.rawtext)], [message]
        return [nodes.inline(text, text, classes=["bench-figure"])], []


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("bench_results_file", "../benchmarks/results/cpu-2threads.json", "env")
    app.add_directive("bench-tables", BenchTables)
    app.add_directive("bench-machine", BenchMachine)
    app.add_directive("bench-chart", BenchChart)
    app.add_role("bench", BenchRole())
    app.add_role("bench-info", BenchInfoRole())
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
