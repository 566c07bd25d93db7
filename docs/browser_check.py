"""Open every page of the built site in headless Chromium and check what a reader sees.

Usage: ``python docs/browser_check.py [HTML_DIR] [--languages=en,ko,ja]
[--pages=index.html,guide/*]`` (default ``docs/_build/html``, every language, every
page), run by ``nox -s browser`` after ``nox -s docs``
and ``nox -s docs-i18n``. Each language is a site of its own in ``HTML_DIR/<language>/``
and every check below runs on each, in a process and browser of its own, the
languages side by side; ``HTML_DIR/index.html`` picks the language. The site is
served by
``python -m http.server`` on 127.0.0.1, and the browser may load nothing else:
any request that leaves the site is aborted and reported.

Every page is opened twice: in a 1280 x 900 window, as on a laptop, and in a
390 x 844 window, as on a phone.

At 1280 px, on every page:
- no console error, no uncaught exception, no failed request, no HTTP error;
- the page declares an icon (``<link rel="icon">``) that loads: without one a
  browser asks for ``/favicon.ico``, which is not there;
- every image has loaded (natural width > 0);
- where the page has math, MathJax has typeset it and no raw TeX delimiter is
  left in the text; no formula holds a MathJax error (an unknown macro, a brace
  that does not close) and none shows a backslash as text (``\\text{max\\_period}``
  without the ``textmacros`` package shows ``max\\_period``): MathJax's own tree of
  every formula is read back as MathML and searched;
- no table of contents in the page lists two entries with the same text;
- nothing in the page's content is cut off: no element hides part of its content
  (``overflow`` hidden or clip, or an ellipsis, with content wider than the box);
- nothing needs horizontal scrolling: no code box (``pre``), table or formula whose
  content is wider than its box, and the page is no wider than the window (the
  highlighted source files under ``_modules/`` excepted: their lines are the
  files' own, up to ruff's 99 characters);
- every gallery figure (``sphx_glr_*_NNN.png``, wherever it is shown) has a 2x
  image in its ``srcset``, which loads and has twice the 1x image's pixels;
- the text of every gallery figure is at least 9 CSS px tall as shown. A browser
  cannot measure text inside an image, so the docs build records, per figure, the
  size of its smallest drawn text (every title, label, tick label, legend entry
  and annotation, measured from the figure's own artists: points x dpi / 72, in
  pixels of the 1x image) in ``_static/figure_text.json``; this check measures the
  width the image is shown at, divides it by the image's width and asserts
  smallest text x that scale >= 9 px. Thumbnails on the gallery's index are
  previews and not checked.
- no text, code, formula or image reaches past the content column, unless it
  sits inside a box (reported above when that box hides or scrolls);
At 390 px, on every page: nothing in the content is cut off (as above), and no
element of the content reaches past the window's edges, unless it sits inside a
box that scrolls (a code box, a table or a formula may scroll sideways on a phone);
- every displayed formula is shown whole: none is taller than its box (cut at the
  top or bottom), and one wider than its box scrolls in it and shows that it does
  (the edge shadow of ``_static/posenc.css``), rather than ending at the screen's
  edge as if the rest were not there;
- the text of every gallery figure is at least 7 CSS px tall as shown on the phone
  (measured as at 1280 px, against the width the figure has there).
Once per language:
- the search page finds a term of that language on the pages that hold it
  ("PositionalEncoding"; 위치 인코딩; 正弦波) and its summary line is not blank;
- the language switcher links every page to the same page in each language (read
  from the HTML of every page), and clicking it, served and from ``file://``, opens
  that page in that language;
- in Korean and Japanese, the page's own text is drawn with a font that has its
  characters (Chromium's own account of the fonts each element used, through the
  DevTools protocol): no missing glyph is drawn as a box ("tofu").
And once: no ``<script src>`` or ``<link href>`` in the built HTML points outside the
site; the root page lists the languages and sends a browser to its own language
(Korean for a Korean browser, English for others).
Pages listed in ``PENDING_PAGES`` (``docs/_ext/gallery_hooks.py``), being rebuilt,
are checked and their problems printed, but they do not fail the check.
Saved: full-page screenshots of the index, the guide's pages, the API page, the
seeds page and each gallery example, at both widths, in
``docs/_build/screenshots/<language>/1280/`` and ``.../390/``, for a person to look
at; no check reads them, and ``--screenshots=no`` (CI) leaves them out.

Chromium is the Debian package (``/usr/bin/chromium``, or ``$CHROMIUM``), driven by
Playwright; Playwright's own browser downloads are never used.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from playwright.sync_api import ConsoleMessage, Page, Request, sync_playwright

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "_ext"))
from gallery_hooks import PENDING_PAGES  # noqa: E402 (pages being rebuilt: reported only)
from i18n_site import CJK_RANGES  # noqa: E402 (the characters of Korean and Japanese)
from i18n_site import LANGUAGES as SITE_LANGUAGES  # noqa: E402

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
LANGUAGES = tuple(SITE_LANGUAGES)  # en, ko, ja
# Per language: a term its readers would search for, and a page that must be found.
SEARCH = {
    "en": ("PositionalEncoding", "api.html"),
    "ko": ("위치 인코딩", "guide/order.html"),
    "ja": ("正弦波", "guide/order.html"),
}
# Fonts that draw Korean and Japanese (Debian's fonts-noto-cjk, or a system's own).
CJK_FONT = re.compile(r"CJK|Gothic|Mincho|Malgun|Meiryo|Hiragino|Nanum|Noto Sans (JP|KR)", re.I)
CJK_CHAR = re.compile(f"[{CJK_RANGES}]")
# Pages written by Sphinx that are not documentation a reader lands on by a link.
SKIP = {"search.html"}  # checked separately, with a query
# The highlighted source files ("[source]" links): the files as they are, whose lines
# may be as long as ruff allows (99 characters); their code boxes may scroll.
SOURCE_PAGES = "_modules/"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
MIN_TEXT_PX = 9.0  # the smallest figure text a reader should have to read, in CSS px
MIN_PHONE_TEXT_PX = 7.0  # the same on a phone, where every figure is shrunk to the window
FIGURE_TEXT = "_static/figure_text.json"  # written by the docs build (docs/conf.py)
# A gallery figure (not a thumbnail): sphx_glr_plot_01_waveforms_001.png
# (sphx_glr_plot_01_waveforms_001.ko.png in Korean, with its labels translated)
GALLERY_FIGURE = re.compile(r"sphx_glr_\w+_\d{3}(\.[a-z]{2})?\.png$")

# Text nodes outside code that still hold a TeX delimiter, after MathJax has run.
RAW_TEX_JS = r"""
() => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const bad = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement.closest("pre, code, script, style, textarea, mjx-container, .highlight"))
      continue;
    const t = n.textContent;
    if (/\\\(|\\\)|\\\[|\\\]|\$\$/.test(t)) bad.push(t.trim().slice(0, 80));
  }
  return bad;
}
"""

# Every formula MathJax typeset, read back from its internal tree as MathML: errors
# (<merror>, with MathJax's message) and token elements that show a backslash, which a
# formula's source names as a macro and should never print (``\\_`` in ``\\text{}``).
MATH_ERRORS_JS = r"""
async () => {
  if (!window.MathJax || !MathJax.startup || !MathJax.startup.document) return [];
  await MathJax.startup.promise;
  if (!MathJax.startup.toMML) return [{kind: "setup", tex: "", detail: "no toMML"}];
  const out = [];
  for (const item of MathJax.startup.document.math) {
    const mml = MathJax.startup.toMML(item.root);
    const tex = String(item.math).trim().replace(/\s+/g, " ").slice(0, 90);
    const error = mml.match(/<merror([^>]*)>/);
    if (error) {
      const message = error[1].match(/data-mjx-error="([^"]*)"/);
      out.push({kind: "error", tex: tex, detail: message ? message[1] : "merror"});
      continue;  // the message names the macro: one report
    }
    const shown = mml.match(/<(mi|mo|mn|mtext|ms)\b[^>]*>([^<]*\\[^<]*)</);
    if (shown) out.push({kind: "backslash", tex: tex, detail: shown[2].trim()});
  }
  return out;
}
"""

# Displayed formulas on a phone: each one's box and the formula as drawn (MathJax's
# <mjx-math>; its screen-reader copy is hidden and not measured), and whether a box
# that scrolls shows it (posenc.css draws a shadow on the side where more of it is).
DISPLAY_MATH_JS = """
() => Array.from(document.querySelectorAll("article[role=main] div.math")).map(el => {
  const cs = getComputedStyle(el);
  const section = el.closest("section[id]");
  const box = el.getBoundingClientRect();
  const drawn = el.querySelector("mjx-math") || el;
  const r = drawn.getBoundingClientRect();
  return {
    where: section ? section.id : "", text: (el.textContent || "").trim().slice(0, 70),
    box: el.clientWidth, wide: Math.round(r.width),
    above: Math.round(box.top - r.top), below: Math.round(r.bottom - box.bottom),
    ox: cs.overflowX, oy: cs.overflowY,
    cue: cs.backgroundAttachment.includes("local") && cs.backgroundImage.includes("gradient"),
  };
})
"""

IMAGES_JS = """
async () => {
  const imgs = Array.from(document.images);
  for (const img of imgs) { img.loading = "eager"; }
  await Promise.all(imgs.map(img => img.decode().catch(() => null)));
  return imgs.filter(img => !(img.naturalWidth > 0)).map(img => img.getAttribute("src"));
}
"""

MATH_JS = """
async () => {
  const math = document.querySelectorAll(".math");
  if (math.length === 0) return {math: 0, typeset: 0};
  if (!window.MathJax || !window.MathJax.startup) return {math: math.length, typeset: -1};
  await window.MathJax.startup.promise;
  const typeset = Array.from(math).filter(el => el.querySelector("mjx-container")).length;
  return {math: math.length, typeset: typeset};
}
"""

# Boxes in the page's content whose content is wider than the box: "clipped" when the
# box hides the rest (overflow hidden or clip, which is also what an ellipsis needs),
# "scrolls" when the reader has to scroll the box sideways. Screen-reader-only copies
# (MathJax's assistive MathML, hidden by a `clip` rectangle) are never seen and not
# measured. Then the elements outside any such box that reach past the window's edges
# on a phone; on a desktop, the text, code, formulas and images (inline content) that
# reach past the content column (furo's block boxes have negative margins that are
# part of its design). And the page's own width.
LAYOUT_JS = """
(phone) => {
  const content = document.querySelector("article[role=main]") || document.body;
  const vw = document.documentElement.clientWidth;
  const column = content.getBoundingClientRect();
  const right = phone ? vw : column.right;
  const left = phone ? 0 : column.left;
  const name = el => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += "#" + el.id;
    const cls = Array.from(el.classList).slice(0, 2);
    if (cls.length) s += "." + cls.join(".");
    const section = el.closest("section[id]");
    return section ? s + " in #" + section.id : s;
  };
  const text = el => (el.innerText || el.textContent || "").trim().replace(/\\s+/g, " ");
  const unseen = new Set();  // inside an element hidden by a clip rectangle
  const boxed = new Map();  // element -> whether an ancestor in the content hides or scrolls
  const inBox = el => {
    const parent = el.parentElement;
    if (!parent || el === content) return false;
    if (boxed.has(parent)) return boxed.get(parent);
    const ox = getComputedStyle(parent).overflowX;
    const answer = ox !== "visible" || inBox(parent);
    boxed.set(parent, answer);
    return answer;
  };
  const out = [];
  const reported = new Set();  // one report for an element and what it holds
  if (document.documentElement.scrollWidth > vw + 1)
    out.push({kind: "page", what: "the page", wide: document.documentElement.scrollWidth,
              box: vw, text: ""});
  for (const el of content.querySelectorAll("*")) {
    const cs = getComputedStyle(el);
    if (unseen.has(el.parentElement) || cs.clip !== "auto" || cs.clipPath !== "none") {
      unseen.add(el);
      continue;
    }
    if (cs.display === "none" || cs.visibility === "hidden") continue;
    if (el.clientWidth > 1 && el.clientHeight > 1 && el.scrollWidth > el.clientWidth + 1) {
      const ox = cs.overflowX;
      const kind = ox === "hidden" || ox === "clip" ? "clipped"
                 : ox === "auto" || ox === "scroll" ? "scrolls" : null;
      if (kind) out.push({kind: kind, what: name(el), wide: el.scrollWidth,
                          box: el.clientWidth, text: text(el).slice(0, 70)});
    }
    const inline = cs.display.startsWith("inline") || el.matches("img, svg, table");
    if (reported.has(el.parentElement)) {
      reported.add(el);
    } else if ((phone || inline) && !inBox(el)) {
      const r = el.getBoundingClientRect();
      if (r.width > 0 && (r.right > right + 1 || r.left < left - 1) && reported.add(el))
        out.push({kind: "edge", what: name(el), wide: Math.round(r.right - left),
                  box: Math.round(right - left), text: text(el).slice(0, 70)});
    }
  }
  return out;
}
"""

# Entries that a table of contents in the page lists more than once, by their text.
CONTENTS_JS = """
() => Array.from(document.querySelectorAll("article .toctree-wrapper")).flatMap(toc => {
  const seen = new Set();
  const twice = new Set();
  for (const a of toc.querySelectorAll("a")) {
    const text = a.innerText.trim();
    (seen.has(text) ? twice : seen).add(text);
  }
  return Array.from(twice);
})
"""

# The page's icon, as the browser would ask for it.
ICON_JS = """
async () => {
  const link = document.querySelector("link[rel~='icon']");
  if (!link) return {href: null};
  const response = await fetch(link.href);
  return {href: link.href, status: response.status, type: response.headers.get("content-type")};
}
"""

# Every image in the page's content: its file, srcset, natural (1x, density-corrected)
# width and the width it is shown at, in CSS px.
FIGURES_JS = """
async () => Array.from(document.querySelectorAll("article[role=main] img")).map(img => ({
  src: img.getAttribute("src"), url: img.src, srcset: img.getAttribute("srcset") || "",
  natural: img.naturalWidth, shown: img.getBoundingClientRect().width,
}))
"""

# Load one image by URL, as a srcset candidate would be, and give its pixel width.
LOAD_JS = """
async (url) => {
  const img = new Image();
  img.src = url;
  try { await img.decode(); } catch (e) { return 0; }
  return img.naturalWidth;
}
"""


# <script src=...> and <link href=...> must stay on the site; links (<a href>) may leave it.
RESOURCE_RE = re.compile(r"<(script|link)\b[^>]*?\b(src|href)=[\"']([^\"']+)[\"']", re.I)


def external_resources(html: Path) -> list[str]:
    """Scripts and stylesheets of the built HTML that point outside the site."""
    bad = []
    for path in sorted(html.rglob("*.html")):
        for tag, _, url in RESOURCE_RE.findall(path.read_text(encoding="utf-8")):
            if urlsplit(url).scheme or url.startswith("//"):
                bad.append(f"{path.relative_to(html)}: <{tag}> {url}")
    return bad


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=directory,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(base, timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"the server on {base} did not start")
        yield base
    finally:
        server.terminate()
        server.wait(timeout=10)


class Problems:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.pending: list[str] = []
        self.page = "(none)"
        self.icon = re.compile(r"/_static/favicon\.\w+$")
        self._asked: dict[Request, int] = {}  # each request in flight: the page that asked
        self._shown = [0]  # the pages opened so far
        self._aborted: list[tuple[str, int]] = []  # aborted requests: the URL, the page

    def add(self, what: str) -> None:
        pending = self.page.removesuffix(".html") in PENDING_PAGES
        (self.pending if pending else self.items).append(f"{self.page}: {what}")

    def watch(self, page: Page, origin: str) -> None:
        def on_console(msg: ConsoleMessage) -> None:
            if msg.type == "error":
                self.add(f"console error: {msg.text}")

        def on_response(response) -> None:  # type: ignore[no-untyped-def]
            if response.status >= 400:
                self.add(f"HTTP {response.status} for {response.url}")

        # Which document asked for each request: the main frame's navigations, counted
        # as each is asked for. A request that a page still had in flight when the next
        # page was opened (its icon, a font MathJax asked for late) is dropped by Chromium
        # as ERR_ABORTED: the reader left, nothing failed. A request of the page being
        # read that is lost fails.
        shown, asked = self._shown, self._asked

        def on_request(request: Request) -> None:
            if request.is_navigation_request() and request.frame == page.main_frame:
                shown[0] += 1
            asked[request] = shown[0]
            if not request.url.startswith((origin, "data:", "blob:", "about:")):
                self.add(f"request outside the site: {request.url}")

        def on_failed(request: Request) -> None:
            by = asked.pop(request, shown[0])
            if request.failure == "net::ERR_ABORTED":
                if by < shown[0] or self.icon.search(request.url):
                    return  # check_icon loads the icon itself
                # Chromium may report the abort before the navigation that caused it:
                # judged once the page has settled, when that navigation is counted
                self._aborted.append((request.url, by))
                return
            self.add(f"request failed: {request.url} ({request.failure})")

        page.on("console", on_console)
        page.on("pageerror", lambda exc: self.add(f"page error: {exc}"))
        page.on("response", on_response)
        page.on("request", on_request)
        page.on("requestfinished", lambda request: asked.pop(request, None))
        page.on("requestfailed", on_failed)
        # A request outside the site is refused (on_request reports it). Only those are
        # routed, matched in the browser: routing every request through Python would cost
        # a round trip each, dozens a page.
        outside = rf"^(?!{re.escape(origin)}|data:|blob:|about:)"
        page.route(re.compile(outside), lambda r: r.abort())

    def settle(self, page: Page) -> None:
        """Wait until no request of the page shown is in flight (what Playwright's
        ``networkidle`` waits for, without its fixed half second of quiet a page)."""
        deadline = time.monotonic() + WAIT_MS / 1000
        while any(n == self._shown[0] for n in self._asked.values()):
            if time.monotonic() > deadline:
                self.add("requests still in flight after the page's time")
                break
            page.wait_for_timeout(20)
        # an abort is a failure only where the page that asked is still the one shown
        for url, by in self._aborted:
            if by == self._shown[0]:
                self.add(f"request failed: {url} (net::ERR_ABORTED)")
        self._aborted.clear()


def pages(html: Path) -> list[str]:
    found = []
    for path in sorted(html.rglob("*.html")):
        rel = path.relative_to(html).as_posix()
        if rel.startswith(("_static/", "_sources/", "_images/")) or rel in SKIP:
            continue
        found.append(rel)
    return found


def screenshot_name(rel: str) -> str | None:
    """The key pages: the index, the guide, the API, the seeds and every example."""
    if rel in ("index.html", "api.html", "seeds.html") or rel.startswith("guide/"):
        return rel.removesuffix(".html").replace("/", "-") + ".png"
    if rel.startswith("auto_examples/") and Path(rel).name.startswith("plot_"):
        return Path(rel).stem + ".png"
    return None


def load(page: Page, url: str, problems: Problems) -> None:
    page.goto(url, wait_until="load")
    problems.settle(page)
    page.evaluate(IMAGES_JS)  # every image decoded before anything is measured
    page.evaluate(MATH_JS)  # and the math typeset
    problems.settle(page)  # and what those asked for (a font MathJax needed) arrived


def check_layout(page: Page, problems: Problems, width: int, *, scroll: bool) -> None:
    """Nothing cut off; at the desktop width, nothing to scroll either (unless `scroll`)."""
    where = "the window's edge" if width < DESKTOP["width"] else "the content column"
    for box in page.evaluate(LAYOUT_JS, width < DESKTOP["width"]):
        size = f"{box['wide']} px of content in {box['box']} px"
        if box["kind"] == "clipped":
            problems.add(f"cut off at {width} px: {box['what']} ({size}): {box['text']!r}")
        elif box["kind"] == "scrolls" and width >= DESKTOP["width"] and not scroll:
            problems.add(f"scrolls sideways at {width} px: {box['what']} ({size})")
        elif box["kind"] == "page":
            problems.add(f"the page is {box['wide']} px wide in a {width} px window")
        elif box["kind"] == "edge":
            problems.add(
                f"past {where} at {width} px: {box['what']} "
                f"({box['wide']} px wide from the left of a {box['box']} px one): "
                f"{box['text']!r}"
            )


def srcset_candidates(srcset: str) -> dict[float, str]:
    """``"a.png, b.png 2x"`` -> ``{1.0: "a.png", 2.0: "b.png"}``."""
    found = {}
    for item in srcset.split(","):
        parts = item.split()
        if not parts:
            continue
        density = parts[1] if len(parts) > 1 else "1x"
        if density.endswith("x"):
            found[float(density[:-1])] = parts[0]
    return found


def check_figures(
    page: Page, problems: Problems, text: dict[str, dict[str, float]], *, phone: bool = False
) -> int:
    """Gallery figures: a 2x image that loads, and text at least 9 px as shown (7 on a phone).

    The 2x images are checked once, at the desktop width.
    """
    checked = 0
    minimum = MIN_PHONE_TEXT_PX if phone else MIN_TEXT_PX
    where = f" at {PHONE['width']} px" if phone else ""
    for img in page.evaluate(FIGURES_JS):
        name = Path(urlsplit(img["src"]).path).name
        if not GALLERY_FIGURE.search(name) or not img["natural"]:
            continue  # thumbnails and other images; an image that did not load is reported
        checked += 1
        hi = {d: url for d, url in srcset_candidates(img["srcset"]).items() if d >= 2}
        if phone:
            hi = {}
        elif not hi:
            problems.add(f"{name}: no 2x image in its srcset ({img['srcset']!r})")
        for density, url in hi.items():
            pixels = page.evaluate(LOAD_JS, urljoin(page.url, url))
            if abs(pixels - density * img["natural"]) > density:
                problems.add(
                    f"{name}: its {density:g}x image {url} is {pixels} px wide, "
                    f"not {density:g} x {img['natural']} px"
                )
        record = text.get(name)
        if record is None:
            problems.add(f"{name}: the build recorded no text size for it ({FIGURE_TEXT})")
            continue
        scale = img["shown"] / img["natural"]
        shown = record["min_text_px"] * scale
        if shown < minimum:
            problems.add(
                f"{name}: its smallest text ({record['text']!r}, {record['min_text_pt']:g} pt) "
                f"is a {shown:.1f} px font as shown{where} ({img['natural']} px wide image "
                f"shown {img['shown']:.0f} px wide); at least {minimum:g} px is needed"
            )
    return checked


def check_page(page: Page, problems: Problems, url: str) -> None:
    for src in page.evaluate(IMAGES_JS):
        problems.add(f"image not loaded: {src}")
    math = page.evaluate(MATH_JS)
    if math["math"]:
        if math["typeset"] < 0:
            problems.add("the page has math but MathJax is not loaded")
        elif math["typeset"] != math["math"]:
            problems.add(f"MathJax typeset {math['typeset']} of {math['math']} math elements")
    for text in page.evaluate(RAW_TEX_JS):
        problems.add(f"raw TeX left in the text: {text!r}")
    for bad in page.evaluate(MATH_ERRORS_JS):
        if bad["kind"] == "error":
            problems.add(f"MathJax error in {bad['tex']!r}: {bad['detail']}")
        elif bad["kind"] == "backslash":
            shown = bad["detail"]
            problems.add(f"a formula shows a backslash as text ({shown!r}): {bad['tex']!r}")
        else:
            problems.add(f"MathJax cannot be read back ({bad['detail']})")
    for text in page.evaluate(CONTENTS_JS):
        problems.add(f"the table of contents lists {text!r} more than once")


def check_display_math(page: Page, problems: Problems) -> None:
    """On a phone, every displayed formula whole: not cut at its box nor silently at its side."""
    width = PHONE["width"]
    for m in page.evaluate(DISPLAY_MATH_JS):
        where = f"#{m['where']}: {m['text']!r}"
        if max(m["above"], m["below"]) > 1 and m["oy"] in ("hidden", "clip"):
            problems.add(
                f"display math cut off at {width} px: the formula reaches {m['above']} px "
                f"above and {m['below']} px below its box, which hides it, {where}"
            )
        if m["wide"] <= m["box"] + 1:
            continue
        if m["ox"] not in ("auto", "scroll"):
            problems.add(
                f"display math cut off at {width} px: {m['wide']} px of formula in {m['box']} px "
                f"that does not scroll, {where}"
            )
        elif not m["cue"]:
            problems.add(
                f"display math cut off at {width} px: {m['wide']} px of formula in {m['box']} px, "
                f"scrolling with nothing to show that more of it is to the side, {where}"
            )


def check_icon(page: Page, problems: Problems) -> None:
    icon = page.evaluate(ICON_JS)
    if icon["href"] is None:
        problems.add("no <link rel='icon'>: browsers ask for /favicon.ico, which is not there")
    elif icon["status"] != 200 or not (icon["type"] or "").startswith("image/"):
        problems.add(f"the icon {icon['href']} gives HTTP {icon['status']} ({icon['type']})")


def check_search(page: Page, problems: Problems, base: str, language: str) -> None:
    """The search page finds the language's term on the page that holds it, and says so."""
    term, where = SEARCH[language]
    page.goto(f"{base}search.html?q={term}", wait_until="load")
    try:  # Sphinx's search writes its summary once every result is listed
        page.wait_for_function(
            "() => (document.querySelector('#search-results .search-summary') || {})"
            ".innerText?.length > 0",
            timeout=15_000,
        )
    except Exception:
        problems.add(f"the search for {term!r} did not finish (or its summary is blank)")
        return
    summary = page.inner_text("#search-results .search-summary")
    links = page.eval_on_selector_all(
        "#search-results ul.search li a", "as => as.map(a => a.getAttribute('href'))"
    )
    found = [urlsplit(link).path for link in links]
    if where not in found:
        problems.add(f"the search for {term!r} does not list {where}: {summary} {found[:8]}")
    else:
        print(f"{language}: search {term!r}: {summary}")


SWITCHER_JS = """
() => Array.from(document.querySelectorAll('.posenc-languages a'))
  .map(a => ({language: a.dataset.language, href: a.getAttribute('href'), url: a.href}))
"""

# Marks (data-glyph-check) up to 40 shown elements whose own text has CJK characters.
MARK_CJK_JS = """
({selector, pattern}) => {
  const cjk = new RegExp(pattern);
  let n = 0;
  for (const el of document.querySelectorAll(selector)) {
    if (n >= 40) break;
    if (!el.getClientRects().length || getComputedStyle(el).visibility === "hidden") continue;
    // the element's own text: the fonts Chromium reports are those of its own text nodes
    let own = "";
    for (const child of el.childNodes) if (child.nodeType === Node.TEXT_NODE) own += child.data;
    const count = (own.match(new RegExp(pattern, "g")) || []).length;
    if (!count) continue;
    el.setAttribute("data-glyph-check", String(count));
    n++;
  }
  return n;
}
"""
# Per element with text of the page's language: the characters, and the fonts Chromium
# drew them with (CSS.getPlatformFontsForNode counts the glyphs of each font).
TEXT_ELEMENTS = "h1, article p, article li, .sidebar-tree a, .toc-tree a"


def switcher_links(site: Path, language: str) -> list[str]:
    """Every page's switcher, read from the HTML: a link per language, to a built page."""
    bad = []
    link = re.compile(r'<a href="([^"]+)" hreflang="(\w+)"[^>]*data-language')
    for path in sorted(site.rglob("*.html")):
        rel = path.relative_to(site).as_posix()
        if rel.startswith(("_static/", "_sources/", "_images/")):
            continue
        found = dict((code, href) for href, code in link.findall(path.read_text("utf-8")))
        if sorted(found) != sorted(LANGUAGES):
            bad.append(f"{language}/{rel}: the switcher links to {sorted(found)}")
            continue
        for code, href in found.items():
            target = (path.parent / href).resolve()
            if target != (site.parent / code / rel).resolve() or not target.is_file():
                bad.append(f"{language}/{rel}: the {code} link {href} is not {code}/{rel}")
    return bad


def check_switcher(page: Page, problems: Problems, base: str, language: str) -> None:
    """Click the switcher to each other language: the same page opens, in that language."""
    rel = "guide/order.html"
    for target in LANGUAGES:
        if target == language:
            continue
        load(page, f"{base}{language}/{rel}", problems)
        page.click(f'.posenc-languages a[data-language="{target}"]', force=True)
        page.wait_for_load_state("load")
        problems.settle(page)
        lang = page.evaluate("() => document.documentElement.lang")
        if not page.url.endswith(f"/{target}/{rel}") or lang != target:
            problems.add(f"the switcher's {target} link opened {page.url} (lang {lang!r})")


def check_file_switcher(browser, problems: Problems, html: Path, language: str) -> None:  # type: ignore[no-untyped-def]
    """The same from file://, as a reader who opened the built site from disk."""
    rel = "guide/order.html"
    context = browser.new_context()
    page = context.new_page()
    page.goto((html / language / rel).as_uri(), wait_until="load")
    target = "en" if language != "en" else "ko"
    page.click(f'.posenc-languages a[data-language="{target}"]', force=True)
    page.wait_for_load_state("load")
    want = (html / target / rel).as_uri()
    lang = page.evaluate("() => document.documentElement.lang")
    if page.url != want or lang != target:
        problems.add(f"from file://, the switcher's {target} link opened {page.url}")
    context.close()


def check_glyphs(page: Page, problems: Problems, client: object) -> None:
    """Every Korean or Japanese character of the page drawn from a font that has it."""
    marked = page.evaluate(MARK_CJK_JS, {"selector": TEXT_ELEMENTS, "pattern": CJK_CHAR.pattern})
    if not marked:
        problems.add("no Korean or Japanese text is shown on the page")
        return
    send = client.send  # type: ignore[attr-defined]
    send("DOM.enable")
    send("CSS.enable")
    root = send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
    nodes = send("DOM.querySelectorAll", {"nodeId": root, "selector": "[data-glyph-check]"})
    nodes = nodes["nodeIds"]
    for node in nodes[:60]:
        outer = send("DOM.getOuterHTML", {"nodeId": node})["outerHTML"]
        wanted = int(re.search(r'data-glyph-check="(\d+)"', outer).group(1))  # type: ignore[union-attr]
        text = re.sub(r"<[^>]+>", "", outer)
        fonts = send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
        drawn = sum(f["glyphCount"] for f in fonts if CJK_FONT.search(f["familyName"]))
        if drawn < wanted:
            used = ", ".join(f"{f['familyName']} ({f['glyphCount']})" for f in fonts)
            problems.add(
                f"{wanted} Korean or Japanese characters, {drawn} drawn from a font that has "
                f"them (fonts: {used}): {text.strip()[:60]!r}"
            )
            return


def check_picker(problems: Problems, base: str, built: list[str], context_of) -> None:  # type: ignore[no-untyped-def]
    """The root page: a link per language, and a browser sent to its own language."""
    problems.page = "index.html (the language picker)"
    for locale, want in (("ko-KR", "ko"), ("ja-JP", "ja"), ("en-US", "en"), ("fr-FR", "en")):
        if want not in built:
            continue
        context = context_of(locale)
        picker = context.new_page()
        # (not watched for failed requests: its own load is cut short by the redirect)
        picker.on("pageerror", lambda exc: problems.add(f"page error: {exc}"))
        picker.goto(base, wait_until="load")
        picker.wait_for_url(f"**/{want}/index.html", timeout=10_000)
        lang = picker.evaluate("() => document.documentElement.lang")
        if lang != want:
            problems.add(f"a {locale} browser was sent to {picker.url} (lang {lang!r})")
        context.close()


WAIT_MS = 180_000  # the longest a page may take to load, or to be drawn in a screenshot
PART = "--part=language"  # how the run of all languages starts each language's


def main(argv: list[str]) -> int:
    options = dict(a[2:].split("=", 1) for a in argv[1:] if a.startswith("--") and "=" in a)
    args = [a for a in argv[1:] if not a.startswith("--")]
    languages = options["languages"].split(",") if "languages" in options else list(LANGUAGES)
    # --pages=index.html,guide/*: only these pages (a quicker look while writing one)
    patterns = options["pages"].split(",") if "pages" in options else ["*"]
    # --screenshots=no: check every page, save no picture of it (what CI needs)
    if options.get("screenshots", "yes") not in ("yes", "no"):
        print("--screenshots takes yes or no", file=sys.stderr)
        return 2
    pictures = options.get("screenshots", "yes") == "yes"
    html = Path(args[0]).resolve() if args else ROOT / "_build" / "html"
    shots = ROOT / "_build" / "screenshots"
    missing = [code for code in languages if not (html / code / "index.html").is_file()]
    if missing:
        print(
            f"no built site for {', '.join(missing)} in {html}: run `nox -s docs` (English) "
            "and `nox -s docs-i18n` (Korean, Japanese) first",
            file=sys.stderr,
        )
        return 2
    if not Path(CHROMIUM).is_file():
        print(f"no Chromium at {CHROMIUM}: apt-get install chromium", file=sys.stderr)
        return 2
    if PART in argv:  # one language's pages, for the run below
        (language,) = languages
        shutil.rmtree(shots / language, ignore_errors=True)
        return check_language(html, language, patterns, shots if pictures else None)
    shutil.rmtree(shots, ignore_errors=True)
    # Each language in a process of its own, side by side: a page check mostly waits
    # (for its requests, fonts, MathJax and the screenshot), so three
    # browsers at once take about the time of one. Their reports are printed in order.
    pages_option = f"--pages={','.join(patterns)}"
    shots_option = f"--screenshots={'yes' if pictures else 'no'}"
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                str(html),
                f"--languages={code}",
                pages_option,
                shots_option,
                PART,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for code in languages
    ]
    failed = 0
    for language, run in zip(languages, runs, strict=True):
        report, _ = run.communicate()
        print(f"--- {language}\n{report.rstrip()}", flush=True)
        failed += run.returncode != 0
    problems = Problems()
    for item in external_resources(html):
        problems.items.append(f"resource outside the site: {item}")
    with serve(html) as root, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        check_picker(problems, root, languages, lambda locale: browser.new_context(locale=locale))
        browser.close()
    print("--- the whole site: its resources and the root page's language picker")
    for item in problems.items:
        print("FAIL", item, file=sys.stderr)
    print(f"{len(problems.items)} problems; {failed} of {len(languages)} languages failed")
    return 1 if problems.items or failed else 0


def check_language(html: Path, language: str, patterns: list[str], shots: Path | None) -> int:
    """Every page of one language at both widths, its search and its switchers; each
    page's screenshot in ``shots`` (none if None)."""
    problems = Problems()
    total_pages = figures = 0
    with serve(html) as root, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        site = html / language
        base = f"{root}{language}/"
        for item in switcher_links(site, language):
            problems.items.append(item)
        record = site / FIGURE_TEXT
        text = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else {}
        if not text:
            problems.items.append(f"no record of the figures' text sizes in {record}")
        todo = [rel for rel in pages(site) if any(fnmatch(rel, p) for p in patterns)]
        total_pages += len(todo)
        for viewport in (DESKTOP, PHONE):
            width = viewport["width"]
            if shots is not None:
                (shots / language / str(width)).mkdir(parents=True, exist_ok=True)
            context = browser.new_context(viewport=viewport, locale=language)
            # Three browsers share the machine's cores: a full-page screenshot of the
            # API page can take longer than Playwright's 30 s when they all draw at once.
            context.set_default_timeout(WAIT_MS)
            page = context.new_page()
            client = context.new_cdp_session(page)
            problems.watch(page, root.rstrip("/"))
            for rel in todo:
                problems.page = f"{language}/{rel}"
                load(page, base + rel, problems)
                check_layout(page, problems, width, scroll=rel.startswith(SOURCE_PAGES))
                if viewport is DESKTOP:
                    check_page(page, problems, base + rel)
                    check_icon(page, problems)
                    figures += check_figures(page, problems, text)
                    if language != "en":
                        check_glyphs(page, problems, client)
                else:
                    check_display_math(page, problems)
                    check_figures(page, problems, text, phone=True)
                name = screenshot_name(rel)
                if name and shots is not None:
                    shot = shots / language / str(width) / name
                    page.screenshot(path=str(shot), full_page=True)
            if viewport is DESKTOP:
                problems.page = f"{language}/search.html"
                check_search(page, problems, base, language)
                problems.page = f"{language}/guide/order.html (the switcher)"
                check_switcher(page, problems, root, language)
                check_file_switcher(browser, problems, html, language)
            context.close()
        browser.close()
    saved = f"screenshots in {shots / language}" if shots is not None else "no screenshots"
    print(
        f"checked {total_pages} pages in {language} at {DESKTOP['width']} and "
        f"{PHONE['width']} px, {figures} gallery figures, the search page and the "
        f"switchers; {saved}"
    )
    for item in problems.pending:
        print("PENDING (not failing: the page is being rebuilt)", item)
    for item in problems.items:
        print("FAIL", item)
    print(f"{len(problems.items)} problems")
    return 1 if problems.items else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
