"""The gallery's figures in each language, drawn from the English run's figures.

The English build (``nox -s docs``) keeps every figure it saves, pickled beside its
PNG (:func:`keep`). ``nox -s docs-i18n`` loads each one, puts the translation of
every text in it that ``figures.po`` translates (titles, axis labels, legends,
annotations; numbers and formulas are left as they are), and saves it again as
``<name>.<language>.png`` and its 2x twin, with the same size and resolution
(:func:`translate`). The examples are not run again, and stay English.
"""

from __future__ import annotations

import json
import logging
import pickle
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from i18n_site import CJK_RANGES

# The fonts that draw Korean and Japanese (Debian's fonts-noto-cjk). Latin letters
# and digits keep matplotlib's own DejaVu Sans, as in the English figures; a
# character DejaVu Sans lacks is drawn from the CJK font.
CJK_FONT = {"ko": "Noto Sans CJK KR", "ja": "Noto Sans CJK JP"}
LATIN_FONT = "DejaVu Sans"
KEPT = ".figure.pickle"
# Per language, the alt text of each translated figure (its translated titles, as
# sphinx-gallery makes the English one from the English titles), by the English
# figure's file name: ``auto_examples/figure_alt.<language>.json``.
FIGURE_ALT = "figure_alt"
# A gallery card's thumbnail is made from its example's first figure, at this size
# (sphinx-gallery's default ``thumbnail_size``); the translated one from the
# translated figure: ``images/thumb/sphx_glr_<example>_thumb.<language>.png``.
THUMBNAIL_SIZE = (400, 280)
# A text worth translating has a word in it once its formulas ($...$) are removed;
# "0", "−1.0", "$10^{-3}$" and "2**20" are not.
WORD = re.compile(r"[A-Za-z]{2,}")
MATH = re.compile(r"\$[^$]*\$")
CJK_TEXT = re.compile(f"[{CJK_RANGES}]")


def require_font(language: str) -> None:
    """Fail, saying what to install, unless matplotlib can draw ``language``'s font.

    A font installed after matplotlib last listed the fonts is not in its cache yet:
    the list is rebuilt once before giving up.
    """
    from matplotlib import font_manager

    family = CJK_FONT[language]
    wanted = font_manager.FontProperties(family=family)
    for attempt in range(2):
        try:
            font_manager.fontManager.findfont(wanted, fallback_to_default=False)
            return
        except ValueError:
            if attempt == 0:  # matplotlib's own rebuild of its font list (and its cache)
                manager = font_manager._load_fontmanager(try_read_cache=False)
                font_manager.fontManager, font_manager.findfont = manager, manager.findfont
    raise SystemExit(
        f"matplotlib has no font {family!r} to draw the {language} figures: install "
        "Debian's fonts-noto-cjk (apt-get install fonts-noto-cjk), as .ci/run does"
    )


def translatable(text: str) -> bool:
    return bool(WORD.search(MATH.sub("", text)))


def keep(fig: Any, image_path: str | Path, srcset: list[float]) -> None:
    """Pickle a figure as the English build saves it, with what its saving needs."""
    import matplotlib

    to_rgba = matplotlib.colors.to_rgba
    savefig: dict[str, Any] = {}
    for attr in ("facecolor", "edgecolor"):  # as sphinx-gallery's scraper decides
        value = getattr(fig, f"get_{attr}")()
        if to_rgba(value) != to_rgba(matplotlib.rcParams[f"figure.{attr}"]):
            savefig[attr] = value
    dpi = matplotlib.rcParams["savefig.dpi"]
    record = {
        "figure": fig,
        "savefig": savefig,
        "dpi": fig.dpi if dpi == "figure" else dpi,
        "srcset": [m for m in srcset if m != 1],
        "rc": {k: v for k, v in matplotlib.rcParams.items() if k.startswith("savefig.")},
    }
    Path(image_path).with_suffix(KEPT).write_bytes(pickle.dumps(record))


def kept_figures(
    auto_examples: Path, wanted: Callable[[str], bool]
) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The kept figures whose PNG's name is ``wanted``, each loaded only if it is."""
    for path in sorted(auto_examples.rglob(f"images/*{KEPT}")):
        if wanted(path.name.removesuffix(KEPT) + ".png"):
            yield path, pickle.loads(path.read_bytes())


def _texts(fig: Any) -> Iterator[Any]:
    from matplotlib.text import Text

    seen: set[int] = set()
    for text in fig.findobj(Text):
        if id(text) not in seen and translatable(text.get_text()):
            seen.add(id(text))
            yield text


def figure_texts(auto_examples: Path, wanted: Callable[[str], bool]) -> Iterator[tuple[str, str]]:
    """Every translatable text of the wanted kept figures, with the figure's file name."""
    for path, record in kept_figures(auto_examples, wanted):
        name = path.name.removesuffix(KEPT) + ".png"
        for text in _texts(record["figure"]):
            yield text.get_text(), name


def translate(
    auto_examples: Path,
    language: str,
    lookup: Callable[[str], str | None],
    wanted: Callable[[str], bool] = lambda name: True,
) -> dict[str, Any]:
    """Save the kept figures (those ``wanted``, by file name) with their texts in
    ``language``; return the text record.

    ``lookup`` gives the translation of a text, or None where there is none (the text
    is then drawn as it is). The record has, per saved image, its width and its
    smallest text, as ``gallery_hooks.figure_scraper`` records the English figures.
    """
    require_font(language)
    missing = _MissingGlyphs()
    logging.getLogger("matplotlib").addHandler(missing)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            record = _translate(auto_examples, language, lookup, wanted)
    finally:
        logging.getLogger("matplotlib").removeHandler(missing)
    missing.found += [str(w.message) for w in caught if "missing from font" in str(w.message)]
    if missing.found:
        raise SystemExit(
            f"{language} figures: characters drawn as boxes (no font has them): "
            + "; ".join(sorted(set(missing.found))[:5])
        )
    return record


def _translate_ticks(fig: Any, lookup: Callable[[str], str | None], family: list[str]) -> None:
    """Tick labels that are words ("left-padded"): a formatter redraws them, so the
    translated ones are fixed at the same places (and the same view limits)."""
    fig.draw_without_rendering()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = [label.get_text() for label in axis.get_ticklabels()]
            if not any(translatable(label) for label in labels):
                continue
            limits = axis.get_view_interval()
            translated = [lookup(label) or label for label in labels]
            axis.set_ticks(axis.get_ticklocs(), labels=translated, fontfamily=family)
            axis.set_view_interval(*limits, ignore=True)


def _check_inside(fig: Any, name: str, language: str) -> None:
    """Every text drawn in the reader's language lies inside the figure (a translation
    longer than the English may run past its edge, where savefig cuts it off)."""
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    frame = fig.bbox
    for text in fig.findobj(Text):
        if not text.get_visible() or not CJK_TEXT.search(text.get_text()):
            continue
        box = text.get_window_extent(renderer)
        inside = (
            box.x0 >= frame.x0 - 1
            and box.x1 <= frame.x1 + 1
            and box.y0 >= frame.y0 - 1
            and box.y1 <= frame.y1 + 1
        )
        if not inside:
            raise SystemExit(
                f"{name} ({language}): {text.get_text()!r} runs past the figure's edge: "
                "shorten its translation in figures.po"
            )


class _MissingGlyphs(logging.Handler):
    """matplotlib's reports of a character its font lacks (mathtext logs them)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "does not have a glyph" in record.getMessage():
            self.found.append(record.getMessage())


# Between two titles of a figure's alt text (sphinx-gallery joins the English ones with
# ", "), in the reader's language.
TITLE_SEPARATOR = {"ko": ", ", "ja": "、"}


def alt_text(fig: Any, language: str) -> str:
    """A figure's alt text as sphinx-gallery makes it, the suptitle and then every
    axes' titles, in one line; joined as ``language`` writes a list."""
    titles = [fig._suptitle.get_text()] if getattr(fig, "_suptitle", None) else []
    for ax in fig.axes:
        titles += [ax.get_title(loc=loc) for loc in ("left", "center", "right")]
    return TITLE_SEPARATOR[language].join(" ".join(t.split()) for t in titles if t)


def _translate(
    auto_examples: Path,
    language: str,
    lookup: Callable[[str], str | None],
    wanted: Callable[[str], bool],
) -> dict[str, Any]:
    import matplotlib
    import matplotlib.pyplot as plt
    from gallery_hooks import FIGURE_TEXT, smallest_text, text_record
    from sphinx_gallery.utils import scale_image

    record: dict[str, Any] = {}
    alt: dict[str, str] = {}
    family = [LATIN_FONT, CJK_FONT[language]]
    for path, kept in kept_figures(auto_examples, wanted):
        fig = kept["figure"]
        _translate_ticks(fig, lookup, family)
        for text in _texts(fig):
            translated = lookup(text.get_text())
            if translated:
                text.set_text(translated)
            text.set_fontfamily(family)
        stem = path.name.removesuffix(KEPT)
        with matplotlib.rc_context(kept["rc"]):
            target = path.with_name(f"{stem}.{language}.png")
            fig.savefig(target, dpi=kept["dpi"], **kept["savefig"])
            for multiplier in kept["srcset"]:
                times = f"{multiplier:.2f}".replace(".", "_")  # as sphinx-gallery names it
                twin = path.with_name(f"{stem}_{times}x.{language}.png")
                fig.savefig(twin, dpi=kept["dpi"] * multiplier, **kept["savefig"])
            points, sample = smallest_text(fig)
            _check_inside(fig, path.name.removesuffix(KEPT), language)
        width = round(fig.get_figwidth() * kept["dpi"])
        record[target.name] = text_record(width, points, kept["dpi"], sample)
        alt[f"{stem}.png"] = alt_text(fig, language)
        if stem.endswith("_001"):  # the card's thumbnail, as sphinx-gallery makes it
            thumb = path.parent / "thumb" / f"{stem.removesuffix('_001')}_thumb.{language}.png"
            scale_image(str(target), str(thumb), *THUMBNAIL_SIZE)
        plt.close(fig)
    (auto_examples / f"{FIGURE_ALT}.{language}.json").write_text(
        json.dumps(alt, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (auto_examples / f"{Path(FIGURE_TEXT).stem}.{language}.json").write_text(
        json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return record
