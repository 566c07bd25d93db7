"""The build's checks of typed figures: the Performance page's prose against the saved run
(docs/_ext/bench_results.py) and the gallery's comments and captions against the examples'
output (docs/_ext/typed_figures.py)."""

from __future__ import annotations

import doctest
import json
import sys
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import bench_results  # noqa: E402  (docs/_ext is not a package: its folder is on the path)
import typed_figures  # noqa: E402
from docutils import nodes  # noqa: E402
from docutils.core import publish_doctree  # noqa: E402


@pytest.mark.parametrize("module", [bench_results, typed_figures])
def test_the_examples_of_the_checks_hold(module: Any) -> None:
    failed, attempted = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert attempted > 0
    assert failed == 0


def paragraph(*parts: str | tuple[str, dict[str, Any]]) -> nodes.paragraph:
    """A paragraph of typed text and (text, attributes) figures as the roles make them."""
    para = nodes.paragraph()
    for part in parts:
        if isinstance(part, str):
            para += nodes.Text(part)
        else:
            text, attributes = part
            node = nodes.inline(text, text, classes=attributes.pop("classes", ["bench-figure"]))
            for key, value in attributes.items():
                node[key] = value
            para += node
    return para


def warnings_of(para: nodes.paragraph, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    found: list[str] = []

    class Log:
        def warning(self, message: str, *args: Any, **_: Any) -> None:
            found.append(message % args)

    class App:
        class config:  # noqa: N801 (sphinx's attribute name)
            language = "en"

    import sphinx.util.logging

    monkeypatch.setattr(sphinx.util.logging, "getLogger", lambda _name: Log())
    document = publish_doctree("")
    document += para
    bench_results.check_comparison_words(App(), document)  # type: ignore[arg-type]
    return found


def ratio(text: str, value: float, allocator: str) -> tuple[str, dict[str, Any]]:
    return text, {"bench_ratio": value, "bench_allocator": allocator}


def test_a_figure_whose_sentence_names_its_allocator_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    para = paragraph(
        "With the stable allocator it takes ", ratio("1.19×", 1.19, "stable"),
        " the floor; with glibc's defaults, ", ratio("0.64×", 0.64, "default"), ".",
    )  # fmt: skip
    assert warnings_of(para, monkeypatch) == []


def test_a_figure_without_its_allocator_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    para = paragraph(
        "With the stable allocator it takes ", ratio("1.19×", 1.19, "stable"),
        " the floor. It takes ", ratio("0.64×", 0.64, "default"), " elsewhere.",
    )  # fmt: skip
    found = warnings_of(para, monkeypatch)
    assert found == ["a figure of the glibc's default allocator in a sentence that does not "
                     "name it: name the allocator"]  # fmt: skip


def test_a_typed_ratio_fails_and_a_goal_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    para = paragraph(
        "With the stable allocator it takes ", ratio("1.19×", 1.19, "stable"),
        " the floor, 19% more, 9.5 ms, against a goal of ",
        ("1.30×", {"classes": ["bench-goal"]}), ".",
    )  # fmt: skip
    found = warnings_of(para, monkeypatch)
    assert [f.split("'")[1] for f in found] == ["19%", "9.5 ms"]


def test_a_word_against_its_ratio_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    para = paragraph("The stable allocator makes it faster: ", ratio("1.19×", 1.19, "stable"), ".")
    found = warnings_of(para, monkeypatch)
    assert found == [
        "comparison word contradicts its number: 'faster' beside 1.19× (write it with :bench-vs:)"
    ]


def test_a_page_without_figures_of_the_run_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    assert warnings_of(paragraph("It is 19% faster, 1.19×."), monkeypatch) == []


def test_the_saved_run_s_load_is_flagged() -> None:
    results = json.loads((DOCS.parent / "benchmarks/results/cpu-2threads.json").read_text())
    words, loaded = bench_results.load_words(results)
    values = [v for pair in results["load"].values() for v in pair]
    assert words.startswith(f"load averages {min(values):g}–{max(values):g}")
    assert loaded == (max(values) >= bench_results.LOADED * results["machine"]["cores"])


def test_the_alibi_example_s_comment_agrees_with_its_output() -> None:
    # the sentence of plot_20 that the stranger's read found wrong, and what it says now
    printed = "[0.0, 0.0, 0.0, 0.019, 0.14, 0.374, 0.611, 0.782]\n[0.12, 0.5, 0.92, 1.21, 1.38]"
    assert typed_figures.unsupported("gives it 0.75 of its weight", printed) == ["0.75"]
    now = "a factor of 0.78 of the nearest key's; the first token 1.4% of its attention"
    assert typed_figures.unsupported(now, printed) == []
    assert typed_figures.unsupported("the first token 25% of its attention", printed) == ["25%"]


def test_a_caption_is_read_against_its_example_s_output(tmp_path: Path) -> None:
    page = tmp_path / "auto_examples" / "schemes" / "plot_99_demo.rst"
    page.parent.mkdir(parents=True)
    page.write_text(
        "The prose says 0.5.\n\n.. code-block:: Python\n\n    x = 0.25\n\n"
        ".. rst-class:: sphx-glr-script-out\n\n .. code-block:: none\n\n    lowest: 0.661\n"
    )
    source = typed_figures.example_source(tmp_path, "plot_99_demo")
    assert source is not None
    assert typed_figures.unsupported("the lowest is 0.66", source) == []
    assert typed_figures.unsupported("the prose's own 0.5", source) == ["0.5"]
    assert typed_figures.unsupported("stays below 0.7", source) == []
    assert typed_figures.unsupported("stays below 0.1", source) == ["0.1"]
    match = typed_figures.GALLERY_IMAGE.search(
        "/auto_examples/schemes/images/sphx_glr_plot_99_demo_001.png"
    )
    assert match is not None
    assert match.group(1) == "plot_99_demo"


def test_a_gallery_page_s_comments_are_read_and_its_furniture_is_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    found: list[str] = []

    class Log:
        def warning(self, message: str, *args: Any, **_: Any) -> None:
            found.append(message % args)

    class App:
        srcdir = str(tmp_path)

        class config:  # noqa: N801 (sphinx's attribute name)
            plot_gallery = "True"

        class env:  # noqa: N801
            docname = "auto_examples/schemes/plot_99_demo"

    import sphinx.util.logging

    monkeypatch.setattr(sphinx.util.logging, "getLogger", lambda _name: Log())
    document = publish_doctree("")
    section = nodes.section(classes=["sphx-glr-example-title"])  # the whole example
    section += nodes.paragraph(text="Head 7 gives the first token 0.75 of its weight, 0.78.")
    section += nodes.literal_block(text="factor: 0.782")
    footer = nodes.container(classes=["sphx-glr-footer"])
    footer += nodes.paragraph(text="Total running time: 1.234 seconds")
    section += footer
    document += section
    typed_figures.check_typed_figures(App(), document)  # type: ignore[arg-type]
    assert len(found) == 1
    assert "'0.75'" in found[0]
    App.config.plot_gallery = "0"  # no run: nothing to check against
    found.clear()
    typed_figures.check_typed_figures(App(), document)  # type: ignore[arg-type]
    assert found == []
