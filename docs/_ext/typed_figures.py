"""Check the figures typed in gallery comments and figure captions against the run.

A gallery example's comments and a guide page's caption of a gallery figure are prose,
written by hand beside numbers that a script computes. The build holds them to those
numbers: every decimal figure or percentage typed there (``0.78``, ``1.4%``, ``3e-08``,
``40%``) must be one
that the example prints or writes in its code, at the precision it is typed. A comment
may round what the script prints (``1.4%`` for a printed ``0.01378``) but not say a
number the run does not give.

What is checked:

- on each example's page, the text of its comments (paragraphs, not code), against
  the page's code and printed output;
- on every page, the caption of a ``.. figure::`` that shows a gallery image
  (``sphx_glr_plot_NN_...``), against that example's code and printed output.

A figure after a word of bound (*under 1e-7*, *below 0.32*, *above 0.9*) agrees with a
printed number on the bound's side of it, within a factor of ten. A figure that is not
a result (a version, a constant of a paper's formula, an input the example states) is
listed in :data:`NOT_RESULTS`, with the reason.

Not checked: integers (sizes, counts, head numbers: most are the script's own
parameters), numbers written as words ("three quarters"), and what a figure's pixels
show. Only builds that run the examples check (not ``-D plot_gallery=0``: without a
run there is no output to check against).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx

#: A typed decimal figure, possibly in scientific notation, or a percentage.
TYPED = re.compile(
    r"(?<![\w.\-§])(\d+\.\d+(?:e[-+]?\d+)?|\d+e[-+]?\d+|\d+(?=\s?%))(\s?%)?(?![\w.]?\d)"
)
#: Words before a figure that make it a bound: (word, side), -1 for an upper bound.
BOUNDS = re.compile(
    r"\b(under|below|within|at most|less than|smaller than|above|over|more than|at least)\s+$"
)
UPPER = ("under", "below", "within", "at most", "less than", "smaller than")
#: The same bounds in Korean and Japanese, which follow the figure (and its unit):
#: "0.32 rad 미만", "0.32 rad 未満".
BOUNDS_AFTER = re.compile(
    r"^\s*(?:[A-Za-z%]+\s*)?(?P<upper>미만|이하|이내|未満|以下|以内|を下回)|"
    r"^\s*(?:[A-Za-z%]+\s*)?(?P<lower>초과|이상|を超え|以上)"
)
#: Figures typed in an example's comments or a caption of its figure that are not results
#: of its run, by example, with the reason.
NOT_RESULTS: dict[str, dict[str, str]] = {
    "plot_11_rotary_scores": {"1e-9": "the precision asked of the comparison (its check prints)"},
    "plot_13_rotary_scalings": {"3.1": "Llama 3.1, a model's name"},
    "plot_18_text_after_video": {
        "5.2": "a transformers version",
        "5.3": "a transformers version",
        "2.4": "the video's frame rate, an input of the example",
    },
    "plot_19_trained_comparison": {
        "0.01": "the margin of a claim, quoted",
        "0.05": "the margin of a claim, quoted",
    },
    "plot_27_xpos_scales": {
        "0.4": "a constant of xPos's formula (Sun et al., 2023)",
        "1.4": "a constant of xPos's formula (Sun et al., 2023)",
    },
}
#: The classes of sphinx-gallery's own paragraphs (links, timings, signature).
GALLERY_FURNITURE = (
    "sphx-glr-download",
    "sphx-glr-footer",
    "sphx-glr-timing",
    "sphx-glr-signature",
)
#: Any number the script writes or prints.
PRINTED = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
#: A gallery image: sphinx-gallery names it after its example.
GALLERY_IMAGE = re.compile(r"sphx_glr_(plot_\d+[\w]*?)_\d{3}\.")


def _decimals(figure: str) -> int:
    mantissa = figure.split("e")[0]
    return len(mantissa.split(".")[1]) if "." in mantissa else 0


def agrees(typed: str, percent: bool, printed: list[float]) -> bool:
    """Whether a typed figure is one of the printed numbers at its own precision.

    A percentage agrees with a printed fraction (``1.4%`` with ``0.01378``) or with a
    printed percentage (``1.4%`` with ``1.378``).

    >>> agrees("0.78", False, [0.782, 64.0])
    True
    >>> agrees("0.75", False, [0.782])
    False
    >>> agrees("1.4", True, [0.01378])
    True
    >>> agrees("75", True, [0.782])
    False
    >>> agrees("3e-08", False, [2.98e-08])
    True
    """
    value = float(typed)
    if "e" in typed:
        scale = 10.0 ** (int(typed.split("e")[1]) - _decimals(typed))
        return any(abs(p - value) <= scale / 2 for p in printed)
    digits = _decimals(typed)
    candidates = [p * 100 for p in printed] + printed if percent else printed
    return any(round(c, digits) == value or abs(c - value) < 0.5 * 10**-digits for c in candidates)


def bound_holds(word: str, value: float, printed: list[float]) -> bool:
    """Whether a printed number lies on the bound's side of ``value``, within 10 times.

    >>> bound_holds("under", 1e-7, [3e-08, 64.0]), bound_holds("under", 1e-7, [0.2])
    (True, False)
    >>> bound_holds("above", 0.9, [0.95])
    True
    """
    if word in UPPER:
        return any(value / 10 <= abs(p) <= value for p in printed)
    return any(value <= abs(p) <= value * 10 for p in printed)


def unsupported(prose: str, source: str, allowed: dict[str, str] | None = None) -> list[str]:
    r"""The decimal figures typed in ``prose`` that ``source`` (code and output) lacks.

    >>> unsupported("The first token gets 1.4% of the weight (0.78 of the nearest key's).",
    ...             "print(w)  # 0.013780\nfactor: 0.782")
    []
    >>> unsupported("it gives 0.75 of its weight", "factor: 0.782")
    ['0.75']
    >>> unsupported("head 7, 64 tokens, three quarters", "")
    []
    >>> unsupported("0.32 rad 미만으로", "0.313 rad"), unsupported("0.32 rad 未満", "0.5")
    ([], ['0.32'])
    """
    printed = [float(m.group()) for m in PRINTED.finditer(source)]
    missing = []
    for match in TYPED.finditer(prose):
        figure, percent = match.group(1), bool(match.group(2))
        if figure in (allowed or {}):
            continue
        bound = BOUNDS.search(prose[max(0, match.start() - 20) : match.start()])
        value = float(figure) / (100 if percent else 1)
        if bound and bound_holds(bound.group(1), value, printed):
            continue
        after = BOUNDS_AFTER.search(prose[match.end() : match.end() + 16])
        side = None if after is None else "under" if after["upper"] else "above"
        if side and bound_holds(side, value, printed):
            continue
        if not agrees(figure, percent, printed):
            missing.append(match.group().strip())
    return missing


def _prose(node: nodes.Element) -> str:
    """A node's text, without its code, maths and references' targets."""
    parts = []
    for text in node.findall(nodes.Text):
        ancestor: Any = text.parent
        skip = False
        while ancestor is not None and ancestor is not node:
            if isinstance(
                ancestor, (nodes.literal, nodes.math, nodes.literal_block, nodes.reference)
            ):
                skip = True
            ancestor = ancestor.parent
        parts.append(" " if skip else str(text))
    return "".join(parts)


def code_blocks(rst: str) -> str:
    r"""The content of the ``code-block`` directives of a page's source: for a generated
    gallery page, the example's code and its printed output.

    >>> code_blocks("Prose 0.5.\n\n.. code-block:: none\n\n    0.25\n\nProse.\n")
    '\n    0.25\n\n'
    """
    out, inside = [], False
    for line in rst.splitlines():
        if line.lstrip().startswith(".. code-block::"):
            inside, indent = True, len(line) - len(line.lstrip())
            continue
        if inside and line.strip() and len(line) - len(line.lstrip()) <= indent:
            inside = False
        if inside:
            out.append(line)
    return "\n".join(out) + "\n"


def example_source(srcdir: Path, example: str) -> str | None:
    """A gallery example's code and printed output, from its generated page, if built."""
    found = sorted((srcdir / "auto_examples").glob(f"*/{example}.rst"))
    return code_blocks(found[0].read_text()) if found else None


def check_typed_figures(app: Sphinx, doctree: nodes.document) -> None:
    """Warn (an error under -W) where a gallery comment or caption types an unrun figure."""
    from sphinx.util import logging

    if str(getattr(app.config, "plot_gallery", "0")).lower() in ("0", "false"):
        return  # no run to check against (or no gallery)
    log = logging.getLogger("posenc-docs")
    docname = app.env.docname
    srcdir = Path(app.srcdir)
    if docname.startswith("auto_examples/") and Path(docname).name.startswith("plot_"):
        source = "\n".join(block.astext() for block in doctree.findall(nodes.literal_block))
        allowed = NOT_RESULTS.get(Path(docname).name, {})
        for para in doctree.findall(nodes.paragraph):
            if any(
                isinstance(a, nodes.literal_block) or _gallery_furniture(a)
                for a in [para, *_ancestors(para)]
            ):
                continue
            for figure in unsupported(_prose(para), source, allowed):
                log.warning(
                    "gallery comment types %r, which the example neither prints nor "
                    "writes in its code: print it, or say it from what is printed",
                    figure,
                    location=para,
                )
    for figure_node in doctree.findall(nodes.figure):
        images = list(figure_node.findall(nodes.image))
        captions = list(figure_node.findall(nodes.caption))
        if not images or not captions:
            continue
        match = GALLERY_IMAGE.search(images[0]["uri"])
        if not match:
            continue
        example = example_source(srcdir, match.group(1))
        if example is None:
            continue
        allowed = NOT_RESULTS.get(match.group(1), {})
        for figure in unsupported(_prose(captions[0]), example, allowed):
            log.warning(
                "caption types %r, which %s neither prints nor writes in its code",
                figure,
                match.group(1),
                location=captions[0],
            )


def _gallery_furniture(node: nodes.Node) -> bool:
    """Whether a node is sphinx-gallery's own (download links, timings), not a comment."""
    classes = node.get("classes", []) if isinstance(node, nodes.Element) else []
    # not sphx-glr-example-title: that class marks the whole section of the example
    return any(str(c).startswith(GALLERY_FURNITURE) for c in classes)


def _ancestors(node: nodes.Node) -> list[nodes.Node]:
    out = []
    while node.parent is not None:
        node = node.parent
        out.append(node)
    return out


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("doctree-read", check_typed_figures)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
