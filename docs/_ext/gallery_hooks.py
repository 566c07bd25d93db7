"""Hooks that sphinx-gallery calls around every example (named by string in conf.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Where the figures are shown: furo's content column is 742 CSS px wide in a 1280 px
# window, and a figure wider than that is scaled down to it.
COLUMN_PX = 742
# The smallest text a reader should have to read, in CSS px as displayed.
MIN_TEXT_PX = 9.0
# On a 390 px phone the column is 358 px wide and every figure is shrunk to it; the
# text there may be smaller, but not under 7 px.
PHONE_COLUMN_PX = 358
MIN_PHONE_TEXT_PX = 7.0
# The record of every figure's smallest text, read by docs/browser_check.py, which
# measures how wide each figure is shown and so checks the text as displayed.
FIGURE_TEXT = "figure_text.json"
# How many panels (axes, colorbars aside) each figure has, read by docs/conf.py: a
# figure of PHONE_PANELS or more is shown wider than a phone's column, in a box that
# scrolls sideways, so that each panel stays readable.
FIGURE_PANELS = "figure_panels.json"
PHONE_PANELS = 6
# Pages being rebuilt on their own schedule: the checks of code lines, figure text and
# layout report what they find there without failing the build. Empty it once they
# are rebuilt.
PENDING_PAGES: tuple[str, ...] = ()


def text_record(width_px: int, points: float, dpi: float, sample: str) -> dict[str, Any]:
    """One figure's entry in ``FIGURE_TEXT``: its width and its smallest text at 1x."""
    return {
        "width_px": width_px,
        "min_text_pt": round(points, 3),
        "min_text_px": round(points * dpi / 72, 3),
        "text": sample[:60],
    }


def reset_state(gallery_conf: dict[str, Any], fname: str) -> None:
    """Start every example from the same state, so that its figures are byte-identical.

    Runs after sphinx-gallery's own matplotlib reset (``rcdefaults``): seeds torch
    and numpy, restores torch's print options, and removes what varies from one
    build to the next in a saved figure (the SVG hash salt; PNGs carry no date).
    """
    import matplotlib
    import numpy as np
    import torch

    torch.manual_seed(0)
    torch.set_printoptions(profile="default")
    np.random.seed(0)  # noqa: NPY002 (the legacy global state is what np.random.* uses)
    matplotlib.rcParams["svg.hashsalt"] = "posenc"


def smallest_text(fig: Any) -> tuple[float, str]:
    """The font size, in points, of the smallest visible text in a figure, and the text.

    Every text artist that is drawn counts: titles, axis labels, tick labels, legend
    entries, colour-bar labels, annotations. Text that is hidden, empty, or lies
    outside the figure (tick labels beyond the axis limits are laid out but not
    drawn) does not.
    """
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()  # lays out the figure as savefig will
    frame = fig.bbox
    smallest, sample = float("inf"), ""
    for text in fig.findobj(Text):
        if not text.get_text().strip() or not _drawn(text):
            continue
        box = text.get_window_extent(renderer)
        if box.width == 0 or not box.overlaps(frame):
            continue
        if text.get_fontsize() < smallest:
            smallest, sample = float(text.get_fontsize()), text.get_text().strip()
    return smallest, sample


def _drawn(artist: Any) -> bool:
    while artist is not None:
        if not artist.get_visible():
            return False
        artist = getattr(artist, "axes", None) if artist is not artist.axes else None
    return True


def figure_scraper(block: Any, block_vars: dict[str, Any], gallery_conf: dict[str, Any]) -> str:
    """sphinx-gallery's matplotlib scraper, recording each figure's smallest text first.

    For every figure an example draws, the record (``auto_examples/figure_text.json``)
    holds its width in pixels and the size in pixels of its
    smallest text, both at the 1x resolution. A figure whose smallest text would be
    under 9 px when shown ``COLUMN_PX`` wide, or under 7 px when shown
    ``PHONE_COLUMN_PX`` wide on a phone, is reported here, at build time; the browser
    check then measures the width each figure is really shown at.
    """
    import matplotlib
    import matplotlib.pyplot as plt
    from figures_i18n import keep
    from sphinx.util import logging
    from sphinx_gallery.scrapers import matplotlib_scraper

    paths = block_vars["image_path_iterator"]
    done = len(paths)
    measured, panels = [], []
    for i, num in enumerate(plt.get_fignums()):
        fig = plt.figure(num)
        # for the translated sites, which draw it again with their labels
        # (the path that matplotlib_scraper below saves it under)
        keep(fig, paths.image_path.format(done + i + 1), gallery_conf["image_srcset"])
        points, sample = smallest_text(fig)
        dpi = matplotlib.rcParams["savefig.dpi"]  # the resolution of the 1x image
        dpi = fig.dpi if dpi == "figure" else dpi
        measured.append(text_record(round(fig.get_figwidth() * dpi), points, dpi, sample))
        panels.append(sum(1 for ax in fig.axes if ax.get_label() != "<colorbar>"))
    rst = matplotlib_scraper(block, block_vars, gallery_conf)
    # one record for the whole gallery, beside its index (the images are in one folder
    # per section)
    record_path = Path(gallery_conf["src_dir"]) / "auto_examples" / FIGURE_TEXT
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    for path, entry in zip(paths.paths[done:], measured, strict=True):
        name = Path(path).name
        record[name] = entry
        width, pixels = entry["width_px"], entry["min_text_px"]
        points, sample = entry["min_text_pt"], entry["text"]
        shown = pixels * min(1.0, COLUMN_PX / width)
        on_phone = pixels * min(1.0, PHONE_COLUMN_PX / width)
        # the example's page, e.g. "auto_examples/sinusoid/plot_01_waveforms"
        page = Path(block_vars["target_file"]).relative_to(gallery_conf["src_dir"])
        example = page.with_suffix("").as_posix()
        log = logging.getLogger("posenc-docs")
        report = log.info if example in PENDING_PAGES else log.warning
        if shown < MIN_TEXT_PX:
            report(
                "%s: its smallest text (%r, %.1f pt) is a %.1f px font when the %d px figure "
                "is shown %d px wide; at least %.0f px is needed",
                name, sample[:40], points, shown, width, min(width, COLUMN_PX), MIN_TEXT_PX,
            )  # fmt: skip
        if on_phone < MIN_PHONE_TEXT_PX:
            report(
                "%s: its smallest text (%r, %.1f pt) is a %.1f px font on a phone, where the "
                "%d px figure is shown %d px wide; at least %.0f px is needed",
                name, sample[:40], points, on_phone, width, min(width, PHONE_COLUMN_PX),
                MIN_PHONE_TEXT_PX,
            )  # fmt: skip
    record_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    panels_path = record_path.with_name(FIGURE_PANELS)
    counts = json.loads(panels_path.read_text()) if panels_path.is_file() else {}
    for path, count in zip(paths.paths[done:], panels, strict=True):
        counts[Path(path).name] = count
    panels_path.write_text(json.dumps(counts, indent=1, sort_keys=True) + "\n")
    return rst
