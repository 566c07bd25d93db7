"""The site in English, Korean and Japanese (named by string in conf.py).

English is the source and is built by ``nox -s docs`` into ``docs/_build/html/en/``;
``nox -s docs-i18n`` builds each translation from the catalogs in
``docs/locales/<language>/LC_MESSAGES/`` (one per page) into
``docs/_build/html/<language>/``. This extension gives every page:

- a language switcher in the sidebar (``_templates/sidebar/languages.html``) that
  links to the same page in each language, by a relative link, so that it works
  offline and from ``file://``;
- in a translation, a one-line notice at the top of each page that is not
  translated yet (every page off the learner's path);
- in a translation, the gallery's figures drawn with translated labels
  (``<name>.<language>.png``, from ``docs/i18n.py figures``), where they exist;

and writes, after each build, the root page ``docs/_build/html/index.html`` that
picks the reader's language.
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path
from typing import Any

# Set by `nox -s docs-i18n`: read the English run's gallery pages and figures as they
# are, rather than run the examples again.
REUSE_EXAMPLES = os.environ.get("POSENC_DOCS_REUSE_EXAMPLES") == "1"

# Every language of the site: its code, and its name as its readers write it.
LANGUAGES = {"en": "English", "ko": "한국어", "ja": "日本語"}
TRANSLATIONS = ("ko", "ja")

# The learner's path: the pages that are translated completely, in every language
# (with the index pages that lead to them: the guide's and the gallery's).
LEARNERS_PATH = (
    "index",
    "seeds",
    "guide/index",
    "auto_examples/index",
    "auto_examples/sinusoid/index",
    "auto_examples/practice/index",
    "guide/tokens",
    "guide/order",
    "guide/positions",
    "guide/precision",
    "auto_examples/sinusoid/plot_01_waveforms",
    "auto_examples/sinusoid/plot_02_heatmap",
    "auto_examples/sinusoid/plot_03_step05_demo",
    "auto_examples/sinusoid/plot_04_similarity",
    "auto_examples/sinusoid/plot_05_wavelengths",
    "auto_examples/sinusoid/plot_06_attention_order",
    "auto_examples/practice/plot_07_precision",
    "auto_examples/practice/plot_08_layouts",
    "auto_examples/practice/plot_09_decoding_with_offsets",
    # The second path: the schemes after the sinusoid, and what a model learns with each.
    "auto_examples/rotary/index",
    "auto_examples/schemes/index",
    "guide/rotary",
    "guide/bias",
    "guide/learned",
    "guide/grid",
    "guide/timesteps",
    "guide/trained",
    "guide/extending",
    "guide/tasks",
    "auto_examples/rotary/plot_11_rotary_scores",
    "auto_examples/rotary/plot_12_rotary_precision",
    "auto_examples/rotary/plot_13_rotary_scalings",
    "auto_examples/schemes/plot_19_trained_comparison",
    "auto_examples/schemes/plot_20_alibi_bias",
    "auto_examples/schemes/plot_21_t5_buckets",
    "auto_examples/schemes/plot_22_learned_vs_sinusoid",
    "auto_examples/schemes/plot_23_grid_similarity",
    "auto_examples/schemes/plot_24_timestep_heatmap",
    "auto_examples/schemes/plot_26_context_extension",
    "auto_examples/schemes/plot_27_xpos_scales",
    "auto_examples/schemes/plot_28_tasks",
)
# On the API page, the entries of these objects (their docstrings and their members').
API_PAGE = "api"
API_ENTRIES = (
    "Embeddings",
    "PositionalEncoding",
    "TokenAndPositionEmbedding",
    "sinusoidal_table",
    "RotaryEmbedding",
    "apply_rotary",
    "rope_frequencies",
    "ALiBi",
    "alibi_slopes",
    "RelativePositionBias",
    "relative_position_bucket",
    "LearnedPositionalEmbedding",
    "sincos_2d",
    "timestep_embedding",
)

# The notice at the top of a page that is not translated, in the reader's language.
NOT_TRANSLATED = {
    "ko": "이 페이지는 아직 번역되지 않았다. 아래는 영어 원문이다.",
    "ja": "このページはまだ翻訳されていません。以下は英語の原文です。",
}
PARTLY_TRANSLATED = {
    "ko": "이 페이지는 제목과 설명, 그리고 {names} 항목만 번역되었다. "
    "나머지 항목은 영어 원문이다.",
    "ja": "このページで翻訳済みなのは、見出しと説明、および {names} の項目だけです。"
    "ほかの項目は英語の原文です。",
}
NAME_SEPARATOR = {"ko": ", ", "ja": "、"}
# The switcher's label, read by screen readers and shown above it.
SWITCHER_LABEL = {"en": "Language", "ko": "언어", "ja": "言語"}

FIGURE = re.compile(r"(?P<stem>sphx_glr_\w+?_\d{3}(?:_\d_\d\dx)?)\.png")
THUMBNAIL = re.compile(r"(?P<stem>sphx_glr_\w+?_thumb)\.png")
# A figure of an example page and its alt text, as sphinx-gallery writes them.
FIGURE_ALT_LINE = re.compile(
    r"(?P<head>\.\. image-sg:: \S*/(?P<stem>sphx_glr_\w+?_\d{3})(?:\.\w+)?\.png\n"
    r"\s+:alt: )(?P<alt>[^\n]*)"
)

# -- Search in Korean and Japanese ------------------------------------------------
# Neither language separates its words the way the search page splits a query: Korean
# writes particles onto the word (위치를, 위치는), and Japanese has no spaces at all
# (Sphinx's TinySegmenter cuts 正弦波 into 正弦 and 波 in one sentence and keeps it
# whole in the next, so a search for 正弦波 missed pages that hold it). Both the index
# and the query therefore take every run of Korean or Japanese characters as its
# overlapping pairs of characters (正弦波 -> 正弦, 弦波), as CJK search engines do,
# and other words whole; a page is found when it has every pair of the query.
CJK_RANGES = (
    "\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf"  # jamo, kana, CJK extension A
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f"  # CJK, Hangul, half-width kana
)
CJK_RUN = re.compile(f"[{CJK_RANGES}]+")


def cjk_terms(text: str) -> list[str]:
    """The search terms of a text: pairs of CJK characters, other words whole.

    >>> cjk_terms("位置は正弦波です")
    ['位置', '置は', 'は正', '正弦', '弦波', '波で', 'です']
    >>> cjk_terms("正弦波")
    ['正弦', '弦波']
    >>> cjk_terms("위치를 d_model 로, RoPE는")
    ['위치', '치를', 'd_model', '로', 'RoPE', '는']
    """
    terms: list[str] = []
    for word in re.split(r"[^\w]+", text):
        for piece in re.split(f"([{CJK_RANGES}]+)", word):
            if not piece:
                continue
            if CJK_RUN.fullmatch(piece):
                pairs = [piece[i : i + 2] for i in range(len(piece) - 1)]
                terms.extend(pairs or [piece])
            else:
                terms.append(piece)
    return terms


# The same, for the query, in the search page (it must split as cjk_terms does).
SPLIT_QUERY_JS = """
var splitQuery = (query) => {  // var: searchtools.js declares it only if undefined
  const cjk = /^[RANGES]+$/u;
  const out = [];
  for (const word of query.split(/[^\\p{Letter}\\p{Number}_\\p{Mark}]+/gu)) {
    for (const piece of word.split(/([RANGES]+)/u)) {
      if (!piece) continue;
      if (cjk.test(piece) && piece.length > 1) {
        for (let i = 0; i + 1 < piece.length; i++) out.push(piece.slice(i, i + 2));
      } else out.push(piece);
    }
  }
  return out;
};
""".replace("RANGES", CJK_RANGES)


def _gallery_images(app: Any) -> Path:
    return Path(app.srcdir) / "auto_examples"


def localise_figures(app: Any, docname: str, source: list[str]) -> None:
    """In a translation, show each gallery figure drawn in its language, if it was,
    with its alt text in that language, and each card's thumbnail made from it."""
    language = app.config.language
    if language not in TRANSLATIONS or "sphx_glr_" not in source[0]:
        return
    gallery = _gallery_images(app)

    def swap(match: re.Match[str]) -> str:
        stem = match["stem"]
        found = list(gallery.glob(f"*/images/{stem}.{language}.png"))
        return f"{stem}.{language}.png" if found else match.group(0)

    def swap_thumbnail(match: re.Match[str]) -> str:
        stem = match["stem"]
        found = list(gallery.glob(f"*/images/thumb/{stem}.{language}.png"))
        return f"{stem}.{language}.png" if found else match.group(0)

    alt_path = gallery / f"figure_alt.{language}.json"
    alt = json.loads(alt_path.read_text(encoding="utf-8")) if alt_path.is_file() else {}

    def swap_alt(match: re.Match[str]) -> str:
        translated = alt.get(f"{match['stem']}.png")
        return match["head"] + translated if translated else match.group(0)

    text = FIGURE_ALT_LINE.sub(swap_alt, source[0])
    source[0] = THUMBNAIL.sub(swap_thumbnail, FIGURE.sub(swap, text))


def add_notice(app: Any, doctree: Any) -> None:
    """In a translation, a one-line notice under the title of a page not translated."""
    from docutils import nodes

    language = app.config.language
    docname = app.env.docname
    if language not in TRANSLATIONS or docname in LEARNERS_PATH:
        return
    if docname == API_PAGE:
        names = NAME_SEPARATOR[language].join(API_ENTRIES)
        text = PARTLY_TRANSLATED[language].format(names=names)
    else:
        text = NOT_TRANSLATED[language]
    notice = nodes.paragraph(text, text, classes=["posenc-untranslated"])
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        doctree.insert(0, notice)
    else:
        section.insert(1, notice)  # after its title


GALLERY_SECTION = re.compile(r"^auto_examples/\w+/index$")


def gallery_headings(app: Any) -> dict[str, str]:
    """English -> translated, for the section headings of the gallery's own page."""
    from babel.messages.pofile import read_po

    path = Path(app.srcdir) / "locales" / app.config.language / "LC_MESSAGES"
    with (path / "auto_examples" / "index.po").open("rb") as file:
        return {m.id: m.string for m in read_po(file) if isinstance(m.id, str) and m.string}


def translate_section_titles(app: Any, doctree: Any) -> None:
    """In a translation, a gallery section off the learner's path has, in the sidebar,
    the name the gallery's page gives it (which translates its heading): its page
    stays English, with its notice, but the two lists of sections read the same."""
    from docutils import nodes

    docname = app.env.docname
    if (
        app.config.language not in TRANSLATIONS
        or docname in LEARNERS_PATH
        or not GALLERY_SECTION.match(docname)
    ):
        return
    title = app.env.titles.get(docname)
    translated = gallery_headings(app).get(title.astext()) if title is not None else None
    if not translated:
        return
    app.env.titles[docname] = nodes.title(translated, translated)
    # A toctree entry without a title of its own shows the page's first heading, from
    # the page's table of contents.
    toc = app.env.tocs.get(docname)
    for reference in toc.findall(nodes.reference) if toc is not None else ():
        if not reference.get("anchorname"):
            reference.children[:] = [nodes.Text(translated)]
            break


def language_links(pagename: str) -> list[tuple[str, str, str]]:
    """Each language's (code, name, relative link) to the same page."""
    up = "../" * (pagename.count("/") + 1)  # from this page to the languages' folder
    return [(code, name, f"{up}{code}/{pagename}.html") for code, name in LANGUAGES.items()]


def add_switcher(
    app: Any, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    language = app.config.language or "en"
    if not _site_layout(app):
        context["posenc_languages"] = []
        return
    context["posenc_languages"] = links = language_links(pagename)
    # the same page in the other languages, for browsers and search engines
    context["metatags"] = context.get("metatags", "") + "".join(
        f'\n<link rel="alternate" hreflang="{code}" href="{href}">'
        for code, _, href in links
        if code != language
    )
    context["posenc_language"] = language
    context["posenc_language_label"] = SWITCHER_LABEL.get(language, "Language")


def _site_layout(app: Any) -> bool:
    """Whether this build writes one language of the site (``.../html/<language>``)."""
    return Path(app.outdir).name == (app.config.language or "en")


THUMB_TITLE = re.compile(r'(<div class="sphx-glr-thumbnail-title">)([^<]*)(</div>)')
THUMB_TOOLTIP = re.compile(r'(<div class="sphx-glr-thumbcontainer" tooltip=")([^"]*)(")')
ROLE = re.compile(r":[\w:.+-]+:`([^`]*)`")
LINK = re.compile(r"`([^`<]+?)\s*<[^<>`]+>`__?")
TARGET = re.compile(r"\s*<[^<>]+>$")  # a role's explicit target, ``:ref:`text <target>```


def plain(text: str) -> str:
    """A message as sphinx-gallery writes it in a thumbnail: no markup, one line.

    A link keeps its text, as in the tooltip sphinx-gallery writes:

    >>> plain("ALiBi (`Press et al., 2022 <https://arxiv.org/abs/2108.12409>`__) adds")
    'ALiBi (Press et al., 2022) adds'
    >>> plain("``x`` and `Su et al. <https://arxiv.org/abs/2104.09864>`_, :math:`m`")
    'x and Su et al., m'

    A formula keeps its comparisons; a role's target is dropped:

    >>> plain(":math:`|p| < 2^{31}` and :ref:`the guide <guide-rotary>`")
    '|p| < 2^{31} and the guide'
    """
    text = ROLE.sub(
        lambda m: m.group(1) if m.group(0).startswith(":math:") else TARGET.sub("", m.group(1)),
        text,
    )
    text = LINK.sub(r"\1", text)
    text = text.replace("\\ ", "").replace("``", "").replace("**", "").replace("`", "")
    text = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*", r"\1", text)  # *emphasis*
    return " ".join(text.split())


_CARDS: dict[str, dict[str, str]] = {}


def card_texts(app: Any) -> dict[str, str]:
    """English -> translated, for the titles and first paragraphs of the translated examples."""
    language = app.config.language
    if language not in _CARDS:
        from babel.messages.pofile import read_po

        found: dict[str, str] = {}
        catalogs = Path(app.srcdir) / "locales" / language / "LC_MESSAGES" / "auto_examples"
        for path in sorted(catalogs.rglob("plot_*.po")):
            with path.open("rb") as file:
                for message in read_po(file):
                    if message.id and message.string and isinstance(message.id, str):
                        found[plain(message.id)] = plain(message.string)
        _CARDS[language] = found
    return _CARDS[language]


def translate_cards(
    app: Any, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """In a translation, the gallery's cards (thumbnails) with the examples' translated
    titles and tooltips: sphinx-gallery writes them as raw HTML, which no catalog reaches."""
    body = context.get("body")
    if app.config.language not in TRANSLATIONS or not body or "sphx-glr-thumb" not in body:
        return
    texts = card_texts(app)

    def swap(match: re.Match[str]) -> str:
        english = plain(html.unescape(match.group(2)))
        translated = texts.get(english)
        if translated is None:
            return match.group(0)
        return match.group(1) + html.escape(translated, quote=True) + match.group(3)

    context["body"] = THUMB_TOOLTIP.sub(swap, THUMB_TITLE.sub(swap, body))


# furo writes some interface text into its templates without gettext (the icons' titles,
# the sidebar toggles' labels, "Skip to content", the footer). Their translations are
# in sphinx.po beside the theme's gettext strings; after a translated build they are put
# in the written pages, where they stand: an icon's <title>, an aria-label, a link's
# text. "Toggle navigation of {name}" is one message for every section of the sidebar.
THEME_TEXT = (
    "Skip to content",
    "Contents",
    "Menu",
    "Expand",
    "Light mode",
    "Dark mode",
    "Auto light/dark, in light mode",
    "Auto light/dark, in dark mode",
    "Toggle site navigation sidebar",
    "Toggle table of contents sidebar",
    "Toggle Light / Dark / Auto color theme",
    "Copyright",
)
TOGGLE_SECTION = "Toggle navigation of {name}"
POSSESSIVE = "{name}'s"  # the footer's "@pradyunsg's Furo"


def _theme_translations(app: Any) -> dict[str, str]:
    from babel.messages.pofile import read_po

    path = Path(app.srcdir) / "locales" / app.config.language / "LC_MESSAGES" / "sphinx.po"
    with path.open("rb") as file:
        return {m.id: m.string for m in read_po(file) if isinstance(m.id, str) and m.string}


def translate_theme_text(app: Any, exception: Exception | None) -> None:
    """Put the translations of furo's hard-coded interface text into the written pages."""
    if exception is not None or app.builder.format != "html":
        return
    if app.config.language not in TRANSLATIONS:
        return
    found = _theme_translations(app)
    missing = [text for text in (*THEME_TEXT, TOGGLE_SECTION, POSSESSIVE) if text not in found]
    if missing:
        raise RuntimeError(f"locales/{app.config.language}/LC_MESSAGES/sphinx.po lacks {missing}")
    rules: list[tuple[re.Pattern[str], Any]] = []
    for text in THEME_TEXT:
        where = re.escape(text)
        pattern = re.compile(
            rf'(<title>|aria-label="|title="|>\s*){where}(</title>|"|\s*<|\s*&#169;)'
        )
        rules.append((pattern, lambda m, t=found[text]: m.group(1) + html.escape(t) + m.group(2)))
    toggle = re.compile(r'aria-label="Toggle navigation of ([^"]*)"')
    rules.append(
        (toggle, lambda m: 'aria-label="' + found[TOGGLE_SECTION].format(name=m.group(1)) + '"')
    )
    owner = re.compile(r"(>@pradyunsg</a>)'s")
    rules.append((owner, lambda m: m.group(1) + found[POSSESSIVE].format(name="").strip()))
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        new = text
        for pattern, replace in rules:
            new = pattern.sub(replace, new)
        if new != text:
            page.write_text(new, encoding="utf-8")


PICKER = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>posenc</title>
<link rel="icon" href="{icon}">
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
  display: grid; place-items: center; min-height: 100vh; background: #fff; color: #222; }}
main {{ padding: 2rem; text-align: center; }}
h1 {{ font-size: 1.6rem; margin: 0 0 1.5rem; }}
ul {{ list-style: none; padding: 0; margin: 0; display: flex; flex-wrap: wrap; gap: 1rem;
  justify-content: center; align-items: stretch; }}
li {{ display: flex; }}
/* A fixed line height: the Korean and Japanese names come from other fonts than the
   English one, whose own line heights would make their buttons taller. */
a {{ display: flex; align-items: center; padding: .8rem 1.6rem; border: 1px solid #bbb;
  border-radius: .4rem; color: inherit; text-decoration: none; font-size: 1.1rem;
  line-height: 1.5rem; }}
a:hover, a:focus {{ border-color: #2962ff; color: #2962ff; }}
@media (prefers-color-scheme: dark) {{ body {{ background: #131416; color: #ddd; }}
  a {{ border-color: #555; }} }}
</style>
</head>
<body>
<main>
<h1>posenc</h1>
<ul>
{links}
</ul>
</main>
<script>
// The first of the reader's languages that the site has, else English; a choice made
// with the switcher (kept in localStorage) comes first. Without JavaScript: the links.
(function () {{
  var have = {codes};
  var wanted = [];
  try {{ var chosen = localStorage.getItem("posenc-language"); if (chosen) wanted.push(chosen); }}
  catch (e) {{}}
  wanted = wanted.concat(navigator.languages || [navigator.language || "en"]);
  for (var i = 0; i < wanted.length; i++) {{
    var code = String(wanted[i]).toLowerCase().split("-")[0];
    if (have.indexOf(code) >= 0) {{ location.replace(code + "/index.html"); return; }}
  }}
  if (have.indexOf("en") >= 0) location.replace("en/index.html");  // the source language
}})();
</script>
</body>
</html>
"""


def write_picker(app: Any, exception: Exception | None) -> None:
    """The site's root page: the languages that are built, and a pick of the reader's."""
    if exception is not None or app.builder.format != "html" or not _site_layout(app):
        return
    root = Path(app.outdir).parent
    built = [code for code in LANGUAGES if (root / code / "index.html").is_file()]
    links = "\n".join(
        f'<li><a href="{code}/index.html" hreflang="{code}" lang="{code}">'
        f"{html.escape(LANGUAGES[code])}</a></li>"
        for code in built
    )
    page = PICKER.format(
        links=links, codes=json.dumps(built), icon=f"{built[0]}/_static/favicon.svg"
    )
    (root / "index.html").write_text(page, encoding="utf-8")


def search_language(code: str, name: str) -> type:
    from sphinx.search import SearchLanguage

    class SearchCJK(SearchLanguage):
        lang = code
        language_name = name
        js_splitter_code = SPLIT_QUERY_JS

        def split(self, input: str) -> list[str]:
            return cjk_terms(input)

        def word_filter(self, stemmed_word: str) -> bool:
            return len(stemmed_word) > 1 or bool(CJK_RUN.fullmatch(stemmed_word))

        def stem(self, word: str) -> str:
            return word.lower()  # as the search page lowers the query

    SearchCJK.__name__ = SearchCJK.__qualname__ = f"Search{name}"
    return SearchCJK


def visit_gallery_image(self: Any, node: Any) -> None:
    """sphinx-gallery's HTML for a figure, with its alt text escaped.

    sphinx-gallery writes the ``<img>`` tag of its ``image-sg`` node by hand and puts
    the alt text (the figure's titles) in it as it is, so a title with a quote
    (``layout="interleaved"``) ended the attribute early.
    """
    from sphinx_gallery.directives import visit_imgsg_html

    alt = node["alt"]
    node["alt"] = html.escape(alt, quote=True)
    try:
        visit_imgsg_html(self, node)
    finally:
        node["alt"] = alt


def setup(app: Any) -> dict[str, Any]:
    from sphinx_gallery.directives import depart_imgsg_html, imgsgnode

    app.add_node(imgsgnode, override=True, html=(visit_gallery_image, depart_imgsg_html))
    app.add_search_language(search_language("ko", "Korean"))
    app.add_search_language(search_language("ja", "Japanese"))
    app.connect("source-read", localise_figures)
    app.connect("doctree-read", add_notice)
    app.connect("doctree-read", translate_section_titles, priority=600)  # after the titles
    app.connect("html-page-context", add_switcher)
    app.connect("html-page-context", translate_cards)
    app.connect("build-finished", write_picker)
    app.connect("build-finished", translate_theme_text)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
