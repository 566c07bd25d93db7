"""Sphinx configuration of the posenc documentation.

The site builds and reads offline: intersphinx reads the inventories committed in
``_intersphinx/`` (their links still point at the real sites), MathJax is copied
from the ``sphinx-mathjax-offline`` wheel into ``_static/mathjax`` and nothing is
loaded from a CDN. Every gallery example is executed on every build, from the
same seeds, so its figures are the same bytes each time.
"""

from __future__ import annotations

import doctest
import json
import re
import shutil
import sys
from importlib import metadata
from pathlib import Path

import matplotlib

import posenc

matplotlib.use("agg")

HERE = Path(__file__).parent.resolve()
sys.path.insert(0, str(HERE / "_ext"))  # gallery_hooks, bench_results, train_results, i18n_site,
# rope_types

from i18n_site import REUSE_EXAMPLES  # noqa: E402 (from _ext/, put on the path above)

# -- Project ------------------------------------------------------------------
project = "posenc"
author = "posenc developers"
copyright = "posenc developers"  # no year: the build does not depend on the date
release = version = posenc.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx_copybutton",
    "sphinx_gallery.gen_gallery",
    "bench_results",  # _ext/: the saved benchmark run as tables
    "train_results",  # _ext/: the saved trained comparison as tables, its claims checked
    "task_results",  # _ext/: the saved task runs as tables and verdicts, claims checked
    "rope_types",  # _ext/: the rope types' lists, written from posenc.rope_config's records
    "hf_families",  # _ext/: the saved family sweep of posenc.hf as tables
    "i18n_site",  # _ext/: the language switcher, the untranslated-page notice, figures
]

root_doc = "index"
exclude_patterns = ["_build", "_ext", "_intersphinx", "**/*.md5", "**/*.ipynb"]
templates_path = ["_templates"]
nitpicky = True
# Nothing is ignored: every cross-reference, including the types in signatures,
# must resolve, either here or in the local inventories.
nitpick_ignore: list[tuple[str, str]] = [
    # torch.Generator's class is torch._C.Generator, which torch's inventory does not
    # list (it lists torch.Generator): autodoc writes the class's own name.
    ("py:class", "torch._C.Generator"),
]
pygments_style = "friendly"
pygments_dark_style = "monokai"

# -- Autodoc and napoleon (Google-style docstrings) ---------------------------
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True
autodoc_default_options = {"exclude-members": "extra_repr"}
# Signatures name the alias, documented on the API page, rather than spell out the Literal.
autodoc_type_aliases = {
    "Layout": "posenc.Layout",
    "RotaryLayout": "posenc.RotaryLayout",
    "GridConvention": "posenc.GridConvention",
    "TableForm": "posenc.hf.TableForm",
}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = False
# The docstrings' "Shapes:" legend (B batch, L length, D d_model), rendered as a section.
napoleon_custom_sections = ["Shapes"]

# -- Intersphinx, offline ------------------------------------------------------
# The inventories are small files committed in _intersphinx/ (see make_inventories.py
# there); the first element of each pair is where the links point.
intersphinx_mapping = {
    "python": ("https://docs.python.org/3/", "_intersphinx/python.inv"),
    "torch": ("https://docs.pytorch.org/docs/stable/", "_intersphinx/torch.inv"),
}
intersphinx_timeout = 5

# -- Doctest -------------------------------------------------------------------
# `sphinx-build -b doctest` checks the ``.. doctest::`` blocks of the narrative pages.
# The docstrings' examples are run by pytest (``nox -s tests``), with their module's
# globals, so plain ``>>>`` blocks (those that autodoc brings in) are not tested here.
doctest_test_doctest_blocks = ""
doctest_default_flags = (
    doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE | doctest.DONT_ACCEPT_TRUE_FOR_1
)  # no IGNORE_EXCEPTION_DETAIL: error messages are part of what the pages show
# No hidden setup: each page's blocks run as a reader copies them into a fresh
# interpreter, so a page imports what it uses and seeds where its printed numbers
# depend on random draws (``torch.manual_seed`` in its own blocks). Each page is one
# group with a namespace of its own; what torch keeps between pages (the random
# generator, the print options) is reset by the page that depends on it.
doctest_global_setup = ""

# -- Sphinx-gallery --------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"__init__\.py",
    "backreferences_dir": "gen_modules/backreferences",
    "doc_module": ("posenc",),
    # Every English build runs every example: an example is documentation of the code
    # as it is now.
    "abort_on_example_error": True,
    "only_warn_on_example_error": False,
    "reset_modules": ("matplotlib", "gallery_hooks.reset_state"),
    "reset_modules_order": "before",
    # One section per folder of examples/, in this order (each has a GALLERY_HEADER.rst).
    "subsection_order": [
        "../examples/sinusoid",
        "../examples/practice",
        "../examples/rotary",
        "../examples/schemes",
    ],
    "within_subsection_order": "FileNameSortKey",
    # A translated build (``nox -s docs-i18n``) reads the English run's pages and
    # figures rather than running the examples again (i18n_site.REUSE_EXAMPLES).
    "run_stale_examples": not REUSE_EXAMPLES,
    "remove_config_comments": True,
    "download_all_examples": False,
    "write_computation_times": False,
    # No "Total running time" line: it changes on every run, so it would be a new
    # message for the translations each time (the timings are on the Performance page).
    "min_reported_time": float("inf"),
    "show_signature": False,
    # Each figure also at twice the resolution, for high-density screens; and the
    # size of each figure's smallest text recorded (gallery_hooks.figure_scraper).
    "image_srcset": ["2x"],
    "image_scrapers": ("gallery_hooks.figure_scraper",),
    "log_level": {"backreference_missing": "warning"},
}

# -- Languages -----------------------------------------------------------------
# English is the source; Korean and Japanese are built by `nox -s docs-i18n` from the
# catalogs in locales/ (one per page; locales/GLOSSARY.md is the terms they follow).
# locale_dirs must be absolute: sphinx-gallery's pages are read from another folder.
language = "en"
locale_dirs = [str(HERE / "locales")]
gettext_compact = False  # one catalog per page: guide/order.po, api.po, ...
gettext_uuid = False
gettext_auto_build = True

# -- HTML ----------------------------------------------------------------------
html_theme = "furo"
html_title = f"posenc {release}"
# The icon and the stylesheet (MathJax is copied into _static by copy_mathjax).
html_static_path = ["_static"]
html_favicon = "_static/favicon.svg"
html_css_files = ["posenc.css"]
html_last_updated_fmt = None
html_show_sourcelink = False
html_copy_source = False
html_theme_options = {"navigation_with_keys": True}
# furo's sidebar, with the language switcher (_templates/sidebar/languages.html) under
# the search box.
html_sidebars = {
    "**": [
        "sidebar/brand.html",
        "sidebar/search.html",
        "sidebar/languages.html",
        "sidebar/scroll-start.html",
        "sidebar/navigation.html",
        "sidebar/scroll-end.html",
        "sidebar/variant-selector.html",
    ]
}

# MathJax 3 from the site itself (copied by copy_mathjax below). With the textmacros
# package, \text{} reads text-mode macros as LaTeX does: \text{max\_period} shows
# max_period, where plain MathJax shows the backslash.
mathjax_path = "mathjax/tex-chtml.js"
mathjax3_config = {
    "loader": {"load": ["[tex]/textmacros"]},
    "tex": {"packages": {"[+]": ["textmacros"]}},
}

# Copy buttons copy the code without prompts and without the outputs.
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = True
copybutton_exclude = ".linenos, .gp, .go"

# The combined component tex-chtml.js, the fonts and the components it may load later
# (TeX extensions on demand, the menu's accessibility tools); not the other bundles.
MATHJAX_DIST = "sphinx-mathjax-offline"
MATHJAX_SKIP = (
    "mml-chtml.js",
    "mml-svg.js",
    "node-main.js",
    "tex-chtml-full-speech.js",
    "tex-chtml-full.js",
    "tex-mml-chtml.js",
    "tex-mml-svg.js",
    "tex-svg-full.js",
    "tex-svg.js",
)


def _mathjax_source() -> Path:
    try:
        dist = metadata.distribution(MATHJAX_DIST)
    except metadata.PackageNotFoundError:
        raise RuntimeError(
            f"MathJax is served from the site: install {MATHJAX_DIST} "
            "(pyproject.toml, dependency group 'docs')"
        ) from None
    source = Path(str(dist.locate_file("sphinx-mathjax-offline/static/mathjax")))
    if not (source / "tex-chtml.js").is_file():
        raise RuntimeError(f"{MATHJAX_DIST} has no tex-chtml.js under {source}")
    return source


def copy_mathjax(app, exception) -> None:  # type: ignore[no-untyped-def]
    if exception is not None or app.builder.format != "html":
        return
    source = _mathjax_source()
    target = Path(app.outdir) / "_static" / "mathjax"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(
        source, target, ignore=lambda d, names: [n for n in names if n in MATHJAX_SKIP]
    )


def resolve_reexported(app, env, node, contnode):  # type: ignore[no-untyped-def]
    """Resolve a short name in a posenc submodule's docstring to the public object.

    Every public object is documented under the name users import it by,
    ``posenc.sinusoidal_table``, while its docstring lives in ``posenc.sinusoid`` and
    says ``:func:`sinusoidal_table```. A reference that found nothing in the
    submodule is looked up once more under ``posenc.``; what still fails is reported.
    """
    module = node.get("py:module") or ""
    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or not module.startswith("posenc"):
        return None
    if target.startswith(("posenc.", "~", ".")) or "." in target.split("(")[0]:
        return None
    domain = env.get_domain("py")
    retry = node.deepcopy()
    retry["reftarget"] = f"posenc.{target}"
    return domain.resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], retry["reftarget"], retry, contnode
    )


def add_minigallery(app, what, name, obj, options, lines) -> None:  # type: ignore[no-untyped-def]
    """End the docstring of each public object with the gallery examples that use it.

    sphinx-gallery has written, before any page is read, one backreferences file per
    object that the examples use; objects that no example uses get no section.
    """
    short = name.removeprefix("posenc.")
    if not name.startswith("posenc.") or short not in posenc.__all__:
        return
    backrefs = HERE / sphinx_gallery_conf["backreferences_dir"] / f"{name}.examples"
    if not backrefs.is_file() or not backrefs.read_text(encoding="utf-8").strip():
        return
    lines.extend(["", ".. rubric:: Gallery examples", "", f".. minigallery:: {name}", ""])


def check_public_api(app, env) -> None:  # type: ignore[no-untyped-def]
    """Fail the build (under -W) if a name in ``posenc.__all__`` has no entry in the API page."""
    from sphinx.util import logging

    documented = set(env.get_domain("py").objects)
    for name in posenc.__all__:
        if name.startswith("__"):
            continue
        if f"posenc.{name}" not in documented:
            logging.getLogger("posenc-docs").warning(
                "posenc.%s is public (in posenc.__all__) but not documented: add it to api.rst",
                name,
                location="api",
            )


def check_gallery_figures(app, env) -> None:  # type: ignore[no-untyped-def]
    """Fail the build (under -W) if an executed example drew no figure."""
    from sphinx.util import logging

    if str(app.config.plot_gallery).lower() in ("0", "false"):
        return  # the examples were not run in this build (sphinx-build -D plot_gallery=0)
    examples = HERE / sphinx_gallery_conf["examples_dirs"]
    for script in sorted(examples.rglob("plot_*.py")):
        folder = script.parent.relative_to(examples)
        images = HERE / sphinx_gallery_conf["gallery_dirs"] / folder / "images"
        if not any(images.glob(f"sphx_glr_{script.stem}_[0-9][0-9][0-9].png")):
            logging.getLogger("posenc-docs").warning(
                "gallery example examples/%s drew no figure", script.relative_to(examples)
            )


def copy_figure_text(app, exception) -> None:  # type: ignore[no-untyped-def]
    """Put the record of the figures' text sizes in the site, for the browser check.

    A translation's site gets the English record and, over it, that of the figures
    drawn in its language (``figure_text.<language>.json``, from docs/i18n.py figures).
    """
    import json

    from gallery_hooks import FIGURE_TEXT

    if exception is not None or app.builder.format != "html":
        return
    gallery = HERE / sphinx_gallery_conf["gallery_dirs"]
    record_path = gallery / FIGURE_TEXT
    if not record_path.is_file():
        return
    record = json.loads(record_path.read_text(encoding="utf-8"))
    translated = gallery / f"{Path(FIGURE_TEXT).stem}.{app.config.language}.json"
    if translated.is_file():
        record.update(json.loads(translated.read_text(encoding="utf-8")))
    target = Path(app.outdir) / "_static" / FIGURE_TEXT
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    target.write_text(text, encoding="utf-8")


# The widest code line a page may show: at 88 characters a code box fits the 742 px
# content column at 1280 px, also inside a class's docstring. Every literal block and
# doctest block is checked: the pages, the docstrings that autodoc brings in, and the
# gallery's code and printed output.
MAX_CODE_LINE = 88


def check_code_lines(app, doctree) -> None:  # type: ignore[no-untyped-def]
    """Fail the build (under -W) if a code line shown in the docs is over 88 characters."""
    from docutils import nodes
    from gallery_hooks import PENDING_PAGES
    from sphinx.util import logging

    log = logging.getLogger("posenc-docs")
    report = log.info if app.env.docname in PENDING_PAGES else log.warning
    code = (nodes.literal_block, nodes.doctest_block)
    for node in doctree.findall(lambda n: isinstance(n, code)):
        for line in node.astext().splitlines():
            if len(line) > MAX_CODE_LINE:
                report(
                    "code line of %d characters (at most %d are shown without scrolling): %s",
                    len(line), MAX_CODE_LINE, line, location=node,
                )  # fmt: skip


# A gallery figure in a page's HTML, by file name: sphx_glr_plot_01_waveforms_001.png.
# In a translation, the figure drawn in its language: sphx_glr_plot_01_waveforms_001.ko.png.
GALLERY_IMG = re.compile(
    r"<img\b[^>]*?\bsrc=\"(?P<src>[^\"]*?(?P<name>sphx_glr_\w+_\d{3})(?P<lang>\.[a-z]{2})?\.png)\"[^>]*>"
)


def add_srcset(app, pagename, templatename, context, doctree) -> None:  # type: ignore[no-untyped-def]
    """Give a gallery figure shown by a page's own ``.. figure::`` its 2x image too.

    sphinx-gallery writes a ``srcset`` on the example pages only; a guide page that
    shows the same figure gets the same 2x file, copied next to the 1x one.
    """
    body = context.get("body")
    if not body or "sphx_glr_" not in body:
        return
    gallery = HERE / sphinx_gallery_conf["gallery_dirs"]

    def with_srcset(match: re.Match[str]) -> str:
        tag, src, name = match.group(0), match["src"], match["name"]
        suffix = f"{match['lang'] or ''}.png"
        found = sorted(gallery.glob(f"*/images/{name}_2_00x{suffix}"))  # one per section
        if "srcset=" in tag or not found:
            return tag
        double = found[0]
        target = Path(app.outdir) / app.builder.imagedir / double.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(double, target)
        src2 = src[: -len(f"{name}{suffix}")] + double.name
        return tag.replace(f'src="{src}"', f'src="{src}" srcset="{src}, {src2} 2x"', 1)

    context["body"] = GALLERY_IMG.sub(with_srcset, body)


# A gallery card's thumbnail, by the example's number: sphx_glr_plot_14_..._thumb.png.
CARD_THUMB = re.compile(
    r"<img\b[^>]*\bsrc=\"[^\"]*sphx_glr_plot_(?P<number>\d+)_\w*?_thumb\.png\"[^>]*>"
)


def number_cards(app, pagename, templatename, context, doctree) -> None:  # type: ignore[no-untyped-def]
    """Put each gallery card's example number on its thumbnail.

    The pages cite examples by number ("example 14"); the cards, which sphinx-gallery
    writes as raw HTML, show only titles. The number is the file's (``plot_14_*``),
    the same in every language.
    """
    body = context.get("body")
    if not body or "sphx-glr-thumbcontainer" not in body:
        return

    def numbered(match: re.Match[str]) -> str:
        number = int(match["number"])
        return f'{match[0]}<span class="posenc-card-number">{number}</span>'

    context["body"] = CARD_THUMB.sub(numbered, body)


def wrap_panels(app, pagename, templatename, context, doctree) -> None:  # type: ignore[no-untyped-def]
    """Put a gallery figure of many panels in a box of its own (``posenc-panels``).

    On a phone, posenc.css shows such a figure wider than the column, in that box,
    which scrolls sideways: shrunk to the column, six panels would each be a thumbnail.
    The panels are counted when the example draws the figure (gallery_hooks).
    """
    from gallery_hooks import FIGURE_PANELS, PHONE_PANELS

    body = context.get("body")
    record = HERE / sphinx_gallery_conf["gallery_dirs"] / FIGURE_PANELS
    if not body or "sphx_glr_" not in body or not record.is_file():
        return
    counts = json.loads(record.read_text(encoding="utf-8"))

    def boxed(match: re.Match[str]) -> str:
        if counts.get(f"{match['name']}.png", 0) < PHONE_PANELS:
            return match[0]
        return f'<span class="posenc-panels">{match[0]}</span>'

    context["body"] = GALLERY_IMG.sub(boxed, body)


TABLE = re.compile(r"<table\b.*?</table>", re.DOTALL)
CODE_TEXT = re.compile(r'(<span class="pre">)([^<]*)(</span>)')


def break_table_code(app, pagename, templatename, context, doctree) -> None:  # type: ignore[no-untyped-def]
    """Let inline code in a table cell wrap after ``/ _ . = ,`` rather than mid-name.

    A path or an argument list is one long word; ``<wbr>`` marks where a line may
    break inside it, and the stylesheet breaks elsewhere only if a piece is still
    wider than its cell.
    """
    body = context.get("body")
    if not body or "<table" not in body:
        return

    def breakable(code: re.Match[str]) -> str:
        text = re.sub(r"([/_.=,])(?=.)", r"\1<wbr>", code[2])
        return f"{code[1]}{text}{code[3]}"

    context["body"] = TABLE.sub(lambda table: CODE_TEXT.sub(breakable, table[0]), body)


def say_which_pass_ran_the_examples(app, exception) -> None:  # type: ignore[no-untyped-def]
    """Follow Sphinx-Gallery's "no examples were executed" with the pass that ran them.

    ``nox -s docs`` runs the examples in its HTML pass and builds the doctest pass
    with ``-D plot_gallery=0``; the log of the second pass says so, rather than
    seeming to say that no example ran at all.
    """
    from sphinx.util import logging

    if exception is not None or str(app.config.plot_gallery).lower() not in ("0", "false"):
        return
    logging.getLogger("posenc-docs").info(
        "Sphinx-Gallery's line above is about this %s pass only: the examples ran in "
        "the HTML pass (sphinx-build -b html, the first step of nox -s docs), which "
        "drew every figure the site shows.",
        app.builder.name,
    )


def public_bases(app, name, obj, options, bases) -> None:  # type: ignore[no-untyped-def]
    """Show a private base of posenc's (``_tables.DerivedTables``) as what it derives from."""
    for i, base in enumerate(list(bases)):
        module = getattr(base, "__module__", "")
        if module.startswith("posenc.") and module.split(".")[1].startswith("_"):
            bases[i : i + 1] = [b for b in base.__bases__ if b is not object]


def setup(app) -> None:  # type: ignore[no-untyped-def]
    _mathjax_source()  # fail early, before the examples run, if MathJax is missing
    app.connect("build-finished", copy_mathjax)
    app.connect("build-finished", copy_figure_text)
    app.connect("build-finished", say_which_pass_ran_the_examples)
    app.connect("doctree-read", check_code_lines)
    app.connect("html-page-context", add_srcset)
    app.connect("html-page-context", break_table_code)
    app.connect("html-page-context", number_cards)
    app.connect("html-page-context", wrap_panels)
    app.connect("missing-reference", resolve_reexported)
    app.connect("autodoc-process-docstring", add_minigallery, priority=600)
    app.connect("autodoc-process-bases", public_bases)
    app.connect("env-check-consistency", check_public_api)
    app.connect("env-check-consistency", check_gallery_figures)
