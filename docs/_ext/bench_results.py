"""Render the saved benchmark run (``benchmarks/results/*.json``) as tables, at build time.

Every number the Performance page shows comes from the JSON file that
``nox -s bench -- --save`` writes; the page holds none of them. Three markups:

- ``.. bench-machine::`` — where and when the run was measured, and how;
- ``.. bench-tables:: PREFIX`` — one table per section whose key starts with PREFIX
  (``input-float32``, ``table``, ``rope-``), or a line saying the run has none;
- ``.. bench-chart:: KEY`` — one section's ratios to its floor as bars (HTML and CSS,
  no image), for the cases named in ``:cases:``, with ``:allocator:`` (``stable``);
- ``:bench:`KEY CASE ALLOCATOR STAT``` — one figure inline, STAT being ``ms``,
  ``range`` or ``floor`` (the ratio to the section's floor) or ``baseline``;
- ``:bench-vs:`NOUN <KEY CASE ALLOCATOR REF>``` — a comparison written from the
  ratio, in the page's language: ``10% slower than NOUN (1.10× its time, stable
  allocator)``, REF being ``floor`` or ``baseline``. NOUN is prose, translated
  with the sentence; the comparison word, the percentage and the allocator come
  from the number;
- ``:bench-load:`cores``` — the load average the saved run was measured at, and on how
  many cores (``load averages 0.83–1.94 on 2 cores``); ``.. bench-machine::`` adds a
  caution when the run was loaded (:data:`LOADED`);
- ``:bench-goal:`1.10×``` — a number set by hand (a goal, a threshold), not measured:
  shown as typed, and exempt from the check of typed figures;
- ``:bench-meets:`GOAL KEY CASE ALLOCATOR REF``` — whether the saved ratio is within a
  goal set by hand: ``meets it (1.21×)`` or ``misses it (1.56×)``.

On a page that shows any figure of the run, the build fails (under -W) where
(:func:`check_comparison_words`):

- a typed comparison word contradicts a ratio of its sentence (*faster* beside
  1.10×, *slower* beside 0.60×);
- a figure of the run (``:bench:``) stands in a sentence that does not name its
  allocator (the two give other ratios, and other ranges);
- a ratio, a percentage or a time in ms is typed in the prose rather than read
  from the run (``1.19×``, ``19%``, ``9.5 ms``), outside code, maths and
  ``:bench-goal:``.

The file is ``bench_results_file`` in conf.py, relative to the docs directory.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective, SphinxRole

ALLOCATOR_HEADS = {"default": "glibc defaults", "stable": "stable allocator"}

#: Within this much of 1, a ratio is "as fast": the rounds' ranges are wider than that.
SAME = 0.005

#: A run whose load average reached this share of its cores is flagged as loaded: other
#: work then shared the cores during some of its rounds.
LOADED = 0.5

#: Whether a ratio is within a goal, by language (``{ratio}`` as the tables print it).
GOAL_WORDS: dict[str, dict[bool, str]] = {
    "en": {True: "meets it ({ratio}×)", False: "misses it ({ratio}×)"},
    "ko": {True: "목표 안이다({ratio}배)", False: "목표에 못 미친다({ratio}배)"},
    "ja": {True: "目標を満たします（{ratio} 倍）", False: "目標に届きません（{ratio} 倍）"},
}


def against_goal(goal: float, ratio: float, language: str) -> str:
    """Whether ``ratio`` (as the tables print it, two decimals) is within ``goal``.

    >>> against_goal(1.30, 1.2104, "en"), against_goal(1.30, 1.5561, "en")
    ('meets it (1.21×)', 'misses it (1.56×)')
    >>> against_goal(1.30, 1.304, "en")  # as printed, 1.30: within
    'meets it (1.30×)'
    """
    shown = f"{ratio:.2f}"
    words = GOAL_WORDS.get(language, GOAL_WORDS["en"])
    return words[float(shown) <= goal].format(ratio=shown)


class BenchMeetsRole(SphinxRole):
    """``:bench-meets:`GOAL KEY CASE ALLOCATOR REF``` — a saved ratio against a goal."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        try:
            goal, key, case_name, allocator, ref = self.text.replace("×", "").split()
            if ref not in ("floor", "baseline"):
                raise ValueError("GOAL KEY CASE ALLOCATOR floor|baseline")
            ratio = _ratio(self.env, key, case_name, allocator, ref)
            text = against_goal(float(goal), ratio, self.env.config.language or "en")
        except (ValueError, KeyError, StopIteration) as exc:
            message = self.inliner.reporter.error(
                f"bench-meets: cannot read {self.text!r} from the saved run: {exc!r}",
                line=self.lineno,
            )
            return [nodes.problematic(self.rawtext, self.rawtext)], [message]
        return [nodes.inline(text, text, classes=["bench-figure"])], []


#: The allocator's name as a sentence must hold it, by language, for each figure.
ALLOCATOR_NAMES: dict[str, dict[str, str]] = {
    "en": {"default": "glibc", "stable": "stable allocator"},
    "ko": {"default": "glibc", "stable": "안정 할당자"},
    "ja": {"default": "glibc", "stable": "安定アロケータ"},
}

#: A figure typed by hand: a ratio (``1.19×``, ``2×``), a percentage or a time in ms.
TYPED_FIGURE = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:×|\s?%|\s?ms\b)")

#: The words of a comparison, by language: the allocator's name, and the clause for a
#: ratio above 1, below 1 and within SAME of it (``{noun}``, ``{pct}`` in percent, the
#: ratio ``{ratio}`` as the tables print it, ``{times}`` for ratios of 2 and more, and
#: ``{allocator}``). Korean and Japanese name the allocator first and end the clause,
#: in the style of their pages (plain -다 and です・ます), so a sentence ends with it.
COMPARISONS: dict[str, dict[str, Any]] = {
    "en": {
        "allocators": {"default": "glibc's default allocator", "stable": "stable allocator"},
        "slower": "{pct}% slower than {noun} ({ratio}× its time, {allocator})",
        "much slower": "{times} times as slow as {noun} ({allocator})",
        "faster": "{pct}% faster than {noun} ({ratio}× its time, {allocator})",
        "same": "as fast as {noun} ({ratio}× its time, {allocator})",
    },
    "ko": {
        "allocators": {"default": "glibc 기본 할당자", "stable": "안정 할당자 설정"},
        "slower": "{allocator}에서는 {noun}보다 {pct}% 느리다(시간 {ratio}배)",
        "much slower": "{allocator}에서는 {noun}보다 {times}배 느리다",
        "faster": "{allocator}에서는 {noun}보다 {pct}% 빠르다(시간 {ratio}배)",
        "same": "{allocator}에서는 {noun}만큼 빠르다(시간 {ratio}배)",
    },
    "ja": {
        "allocators": {"default": "glibc 既定のアロケータ", "stable": "安定アロケータ設定"},
        "slower": "{allocator}では、{noun}より {pct}% 遅くなります（所要時間 {ratio} 倍）",
        "much slower": "{allocator}では、{noun}より {times} 倍遅くなります",
        "faster": "{allocator}では、{noun}より {pct}% 速くなります（所要時間 {ratio} 倍）",
        "same": "{allocator}では、{noun}と同じ速さです（所要時間 {ratio} 倍）",
    },
}

#: Comparison words typed by hand, by language, with the direction each one claims
#: (+1: takes longer, -1: takes less time). Checked against the sentence's ratios.
TYPED_WORDS: dict[str, tuple[tuple[str, int], ...]] = {
    "en": (
        ("faster", -1), ("quicker", -1), ("less time", -1), ("outperform", -1),
        ("slower", 1), ("more time", 1), ("slowdown", 1),
    ),
    "ko": (("빠르", -1), ("빠른", -1), ("빨라", -1), ("느리", 1), ("느린", 1), ("느려", 1)),
    "ja": (("速い", -1), ("速く", -1), ("高速", -1), ("遅い", 1), ("遅く", 1)),
}  # fmt: skip


def comparison(noun: str, ratio: float, allocator: str, language: str) -> str:
    """The clause that compares a candidate with NOUN, from its time ratio.

    >>> comparison("the floor", 1.1036, "stable", "en")
    '10% slower than the floor (1.10× its time, stable allocator)'
    >>> comparison("the floor", 0.5966, "default", "en")
    "40% faster than the floor (0.60× its time, glibc's default allocator)"
    >>> comparison("the floor", 2.18, "stable", "en")
    '2.2 times as slow as the floor (stable allocator)'
    >>> comparison("하한", 1.1036, "stable", "ko")
    '안정 할당자 설정에서는 하한보다 10% 느리다(시간 1.10배)'
    >>> comparison("下限", 0.5966, "default", "ja")
    'glibc 既定のアロケータでは、下限より 40% 速くなります（所要時間 0.60 倍）'
    """
    words = COMPARISONS.get(language, COMPARISONS["en"])
    if abs(ratio - 1) < SAME:
        kind = "same"
    elif ratio >= 2:
        kind = "much slower"
    else:
        kind = "slower" if ratio > 1 else "faster"
    return words[kind].format(
        noun=noun,
        pct=f"{abs(ratio - 1) * 100:.0f}",
        ratio=f"{ratio:.2f}",
        times=f"{ratio:.1f}",
        allocator=words["allocators"].get(allocator, allocator),
    )


def load_words(results: dict[str, Any]) -> tuple[str, bool]:
    """The load the run was measured at, in words, and whether it was loaded.

    >>> load_words({"machine": {"cores": 2}, "load": {"default": [0.83, 1.94],
    ...                                                "stable": [1.86, 1.89]}})
    ('load averages 0.83–1.94 on 2 cores', True)
    >>> load_words({"machine": {"cores": 16}, "load": {"default": [0.1, 0.4]}})
    ('load averages 0.1–0.4 on 16 cores', False)
    """
    values = [v for pair in results["load"].values() for v in pair]
    cores = results["machine"]["cores"]
    low, high = min(values), max(values)
    return f"load averages {low:g}–{high:g} on {cores} cores", high >= LOADED * cores


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


def cell(*lines: str, strong: bool = False) -> nodes.entry:
    """A table cell: one paragraph a line, the first a value, the others its range."""
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
        row += cell(head)
    thead += row
    group += thead
    body = nodes.tbody()
    for case in section["cases"]:
        row = nodes.row()
        row += cell(case["label"], strong=case["name"] == section["floor"])
        for allocator in allocators:
            figures = case["allocators"][allocator]
            row += cell(
                _ms(figures["median_ms"]),
                f"{_ms(figures['min_ms'])}–{_ms(figures['max_ms'])}",
            )
            row += cell(f"{figures['vs_floor']:.2f}")
        if has_base:
            ratio = case["allocators"]["stable"]["vs_baseline"]
            row += cell(f"{ratio:.2f}")
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
                out.append(nodes.paragraph(text, text, classes=["bench-generated"]))
                continue
            if section.get("note"):
                note = section["note"]
                out.append(nodes.paragraph(note, note, classes=["bench-generated"]))
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
        out: list[nodes.Node] = [
            nodes.paragraph(line, line, classes=["bench-generated"]) for line in lines
        ]
        words, loaded = load_words(results)
        if loaded:
            text = (
                f"This run was measured on a loaded machine ({words}): other work shared "
                "the cores during some of its rounds. The candidates of a section are "
                "interleaved, so a busy moment is shared by all of them, but the ranges "
                "are wider than a quiet machine gives, and two candidates whose ranges "
                "overlap are not told apart by this run."
            )
            caution = nodes.caution()
            caution += nodes.paragraph(text, text, classes=["bench-generated"])
            out.append(caution)
        return out


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
        node = nodes.inline(text, text, classes=["bench-figure"])
        node["bench_allocator"] = allocator
        if stat in ("floor", "baseline"):
            node["bench_ratio"] = case["allocators"][allocator][f"vs_{stat}"]
        return [node], []


def _ratio(env: Any, key: str, case_name: str, allocator: str, ref: str) -> float:
    """The saved run's time ratio of one case to its floor or baseline (``ref``)."""
    results, _ = _load(env)
    case = next(c for c in _section(results, key)["cases"] if c["name"] == case_name)
    ratio: float | None = case["allocators"][allocator][f"vs_{ref}"]
    if ratio is None:
        raise ValueError(f"case {case_name!r} has no ratio to a {ref}")
    return ratio


class BenchCompareRole(SphinxRole):
    """``:bench-vs:`NOUN <KEY CASE ALLOCATOR REF>``` — a comparison from one ratio."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        try:
            noun, _, spec = self.text.rstrip(">").rpartition("<")
            key, case_name, allocator, ref = spec.split()
            if not noun.strip() or ref not in ("floor", "baseline"):
                raise ValueError("NOUN <KEY CASE ALLOCATOR floor|baseline>")
            ratio = _ratio(self.env, key, case_name, allocator, ref)
            language = self.env.config.language or "en"
            text = comparison(noun.strip(), ratio, allocator, language)
        except (ValueError, KeyError, StopIteration) as exc:
            message = self.inliner.reporter.error(
                f"bench-vs: cannot read {self.text!r} from the saved run: {exc!r}",
                line=self.lineno,
            )
            return [nodes.problematic(self.rawtext, self.rawtext)], [message]
        node = nodes.inline(text, text, classes=["bench-figure", "bench-comparison"])
        # its words are written from the ratio; the typed words beside it are checked
        # against it, and it names its allocator itself
        node["bench_ratio"], node["bench_allocator"] = ratio, allocator
        return [node], []


class BenchLoadRole(SphinxRole):
    """``:bench-load:`cores``` — the load averages the saved run was measured at."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        try:
            results, _ = _load(self.env)
            text, _loaded = load_words(results)
        except (ValueError, KeyError) as exc:
            message = self.inliner.reporter.error(
                f"bench-load: cannot read the load from the saved run: {exc!r}",
                line=self.lineno,
            )
            return [nodes.problematic(self.rawtext, self.rawtext)], [message]
        return [nodes.inline(text, text, classes=["bench-figure"])], []


class BenchGoalRole(SphinxRole):
    """``:bench-goal:`1.10×``` — a number set by hand (a goal, a threshold), as typed."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        return [nodes.inline(self.text, self.text, classes=["bench-goal"])], []


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


# A sentence ends at . or ; followed by a space, or at 。 or ；. Not at a colon: what
# follows a colon is the sentence's own figure ("faster: 1.10× the time").
SENTENCE_END = re.compile(r"(?<=[.;])\s+|(?<=[。；])")


def contradictions(text: str, ratios: list[tuple[int, float]], language: str) -> list[str]:
    """The typed comparison words of ``text`` that contradict a ratio of their sentence.

    ``ratios`` are (offset in ``text``, ratio) pairs. A word claims a direction (faster:
    less time); a sentence whose ratios all lie on the other side of 1 contradicts it.

    >>> contradictions("It is faster than the floor: X the time.", [(29, 1.10)], "en")
    ["'faster' beside 1.10×"]
    >>> contradictions("It is slower: X the floor. It is faster.", [(14, 1.10)], "en")
    []
    >>> contradictions("이 층은 더 빠르다: X.", [(13, 0.60)], "ko")
    []
    """
    found = []
    start = 0
    bounds = [m.start() for m in SENTENCE_END.finditer(text)] + [len(text)]
    for end in bounds:
        sentence = text[start:end].lower()
        mine = [r for at, r in ratios if start <= at < end]
        start = end
        if not mine:
            continue
        for word, claim in TYPED_WORDS.get(language, TYPED_WORDS["en"]):
            if word not in sentence:
                continue
            sides = {1 if r > 1 + SAME else -1 if r < 1 - SAME else 0 for r in mine}
            if claim not in sides:
                found.append(f"{word!r} beside " + ", ".join(f"{r:.2f}×" for r in mine))
    return found


def unnamed_allocators(text: str, figures: list[tuple[int, str]], language: str) -> list[str]:
    """The figures of ``text`` whose sentence does not name their allocator.

    ``figures`` are (offset in ``text``, allocator) pairs.

    >>> unnamed_allocators("With the stable allocator it takes X; glibc's, Y.",
    ...                    [(35, "stable"), (48, "default")], "en")
    []
    >>> unnamed_allocators("It takes X the floor.", [(9, "stable")], "en")
    ['a figure of the stable allocator']
    >>> unnamed_allocators("With the stable\\nallocator, X.", [(27, "stable")], "en")
    []
    >>> unnamed_allocators("With the stable allocator, X.", [(27, "stable")], "ko")
    []
    """
    # a page's language, or English where the page is not translated
    names = ALLOCATOR_NAMES.get(language, ALLOCATOR_NAMES["en"])
    english = ALLOCATOR_NAMES["en"]
    found = []
    start = 0
    bounds = [m.start() for m in SENTENCE_END.finditer(text)] + [len(text)]
    for end in bounds:
        sentence = " ".join(text[start:end].lower().split())  # a name may span lines
        for at, allocator in figures:
            named = (names.get(allocator, allocator), english.get(allocator, allocator))
            if start <= at < end and not any(n.lower() in sentence for n in named):
                found.append(f"a figure of the {COMPARISONS['en']['allocators'][allocator]}")
        start = end
    return found


def typed_figures(text: str) -> list[str]:
    """The ratios, percentages and times typed by hand in ``text``.

    >>> typed_figures("It takes 1.19× the floor, 19 % more, 9.5 ms; a (1, 32, 1024) shape.")
    ['1.19×', '19 %', '9.5 ms']
    >>> typed_figures("a 2 × 2 merge, 64 MiB, x2")
    []
    """
    return [m.group() for m in TYPED_FIGURE.finditer(text)]


#: Nodes whose text is not prose typed about the run: code, maths, and what the roles and
#: directives write from it.
_NOT_TYPED = (nodes.literal, nodes.math, nodes.math_block, nodes.literal_block)


def _paragraph_text(para: nodes.paragraph) -> tuple[str, str, list[Any], list[Any]]:
    """A paragraph as (text, typed text, ratios, figures).

    ``text`` has every node's words; ``typed`` blanks what was not typed by hand (the
    roles' figures and comparisons, code, maths). ``ratios`` holds (offset, ratio) of
    each ``:bench:`` ratio, ``figures`` (offset, allocator) of each ``:bench:`` figure.
    """
    text, typed = "", ""
    ratios: list[tuple[int, float]] = []
    figures: list[tuple[int, str]] = []
    for node in para.findall(nodes.Text):
        parent = node.parent
        words = str(node)
        generated = False
        ancestor: Any = parent
        while ancestor is not None and ancestor is not para:
            classes = ancestor.get("classes", []) if isinstance(ancestor, nodes.Element) else []
            if isinstance(ancestor, _NOT_TYPED) or {"bench-figure", "bench-goal"} & set(classes):
                generated = True
            ancestor = ancestor.parent
        if isinstance(parent, nodes.inline) and "bench_ratio" in parent:
            ratios.append((len(text), float(parent["bench_ratio"])))
        if isinstance(parent, nodes.inline) and "bench_allocator" in parent:
            figures.append((len(text), str(parent["bench_allocator"])))
        text += words
        typed += " " * len(words) if generated else words
    return text, typed, ratios, figures


def check_comparison_words(app: Sphinx, doctree: nodes.document) -> None:
    """Fail the build (under -W) where the prose of a page that shows the run's figures
    does not hold to them.

    On a page with any figure of the saved run: a typed comparison word that contradicts
    a ratio of its sentence (the words that :bench-vs: writes are not typed, and are not
    checked: they come from the number); a ``:bench:`` figure whose sentence does not
    name its allocator; a ratio, percentage or time typed by hand. Each paragraph is read
    as text, with every figure of ``:bench:`` at its place.
    """
    from sphinx.util import logging

    log = logging.getLogger("posenc-docs")
    language = app.config.language or "en"
    shows_run = any("bench-figure" in node["classes"] for node in doctree.findall(nodes.inline))
    if not shows_run:
        return
    for para in doctree.findall(nodes.paragraph):
        if "bench-generated" in para["classes"]:
            continue
        text, typed, ratios, figures = _paragraph_text(para)
        # what :bench-vs: wrote is blanked for the comparison words, kept for the names
        for problem in contradictions(typed, ratios, language):
            log.warning(
                "comparison word contradicts its number: %s (write it with :bench-vs:)",
                problem,
                location=para,
            )
        for problem in unnamed_allocators(text, figures, language):
            log.warning(
                "%s in a sentence that does not name it: name the allocator",
                problem,
                location=para,
            )
        for figure in typed_figures(typed):
            log.warning(
                "figure typed by hand: %r (read it from the run with :bench:, or mark a "
                "goal with :bench-goal:)",
                figure,
                location=para,
            )


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("bench_results_file", "../benchmarks/results/cpu-2threads.json", "env")
    app.add_directive("bench-tables", BenchTables)
    app.add_directive("bench-machine", BenchMachine)
    app.add_directive("bench-chart", BenchChart)
    app.add_role("bench", BenchRole())
    app.add_role("bench-info", BenchInfoRole())
    app.add_role("bench-vs", BenchCompareRole())
    app.add_role("bench-load", BenchLoadRole())
    app.add_role("bench-goal", BenchGoalRole())
    app.add_role("bench-meets", BenchMeetsRole())
    app.connect("doctree-read", check_comparison_words)
    # the same check for the gallery's comments and the captions of its figures
    app.setup_extension("typed_figures")
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
