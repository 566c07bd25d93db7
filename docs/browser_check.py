"""Open every page of the built site in headless Chromium and check what a reader sees.

Usage: ``python docs/browser_check.py [HTML_DIR]`` (default ``docs/_build/html``),
run by ``nox -s browser`` after ``nox -s docs``. The site is served by
``python -m http.server`` on 127.0.0.1, and the browser may load nothing else:
any request that leaves the site is aborted and reported.

Checked on every page:
- no console error, no uncaught exception, no failed request, no HTTP error;
- every image has loaded (natural width > 0);
- where the page has math, MathJax has typeset it and no raw TeX delimiter is
  left in the text.
Checked once: the search page finds "PositionalEncoding", and no ``<script src>`` or
``<link href>`` in the built HTML points outside the site.
Saved: full-page screenshots of the index, the API page and each gallery example,
in ``docs/_build/screenshots/``.

Chromium is the Debian package (``/usr/bin/chromium``, or ``$CHROMIUM``), driven by
Playwright; Playwright's own browser downloads are never used.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from playwright.sync_api import ConsoleMessage, Page, Request, Route, sync_playwright

ROOT = Path(__file__).resolve().parent
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
SEARCH_TERM = "PositionalEncoding"
# Pages written by Sphinx that are not documentation a reader lands on by a link.
SKIP = {"search.html"}  # checked separately, with a query

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
        self.page = "(none)"

    def add(self, what: str) -> None:
        self.items.append(f"{self.page}: {what}")

    def watch(self, page: Page, origin: str) -> None:
        def on_console(msg: ConsoleMessage) -> None:
            if msg.type == "error":
                self.add(f"console error: {msg.text}")

        def on_response(response) -> None:  # type: ignore[no-untyped-def]
            if response.status >= 400:
                self.add(f"HTTP {response.status} for {response.url}")

        def on_failed(request: Request) -> None:
            self.add(f"request failed: {request.url} ({request.failure})")

        def route(r: Route) -> None:
            url = r.request.url
            if url.startswith(origin) or url.startswith(("data:", "blob:", "about:")):
                r.continue_()
            else:
                self.add(f"request outside the site: {url}")
                r.abort()

        page.on("console", on_console)
        page.on("pageerror", lambda exc: self.add(f"page error: {exc}"))
        page.on("response", on_response)
        page.on("requestfailed", on_failed)
        page.route("**/*", route)


def pages(html: Path) -> list[str]:
    found = []
    for path in sorted(html.rglob("*.html")):
        rel = path.relative_to(html).as_posix()
        if rel.startswith(("_static/", "_sources/", "_images/")) or rel in SKIP:
            continue
        found.append(rel)
    return found


def screenshot_name(rel: str) -> str | None:
    if rel == "index.html":
        return "index.png"
    if rel == "api.html":
        return "api.png"
    if rel.startswith("auto_examples/plot_"):
        return Path(rel).stem + ".png"
    return None


def check_page(page: Page, problems: Problems, url: str) -> None:
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
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


def check_search(page: Page, problems: Problems, base: str) -> None:
    page.goto(f"{base}search.html?q={SEARCH_TERM}", wait_until="load")
    try:  # Sphinx's search writes its summary once every result is listed
        page.wait_for_function(
            "() => (document.querySelector('#search-results .search-summary') || {})"
            ".innerText?.length > 0",
            timeout=15_000,
        )
    except Exception:
        problems.add(f"the search for {SEARCH_TERM!r} did not finish")
        return
    summary = page.inner_text("#search-results .search-summary")
    texts = page.locator("#search-results ul.search li").all_inner_texts()
    if not any(SEARCH_TERM in t for t in texts):
        problems.add(f"no search result mentions {SEARCH_TERM!r}: {summary}")
    else:
        print(f"search {SEARCH_TERM!r}: {summary}")


def main(argv: list[str]) -> int:
    html = Path(argv[1]).resolve() if len(argv) > 1 else ROOT / "_build" / "html"
    shots = ROOT / "_build" / "screenshots"
    if not (html / "index.html").is_file():
        print(f"no built site in {html}: run `nox -s docs` first", file=sys.stderr)
        return 2
    if not Path(CHROMIUM).is_file():
        print(f"no Chromium at {CHROMIUM}: apt-get install chromium", file=sys.stderr)
        return 2
    shots.mkdir(parents=True, exist_ok=True)
    for old in shots.glob("*.png"):
        old.unlink()
    problems = Problems()
    for item in external_resources(html):
        problems.items.append(f"resource outside the site: {item}")
    todo = pages(html)
    with serve(html) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        problems.watch(page, base.rstrip("/"))
        for rel in todo:
            problems.page = rel
            check_page(page, problems, base + rel)
            name = screenshot_name(rel)
            if name:
                page.screenshot(path=str(shots / name), full_page=True)
        problems.page = "search.html"
        check_search(page, problems, base)
        browser.close()
    print(f"checked {len(todo)} pages and the search page; screenshots in {shots}")
    for item in problems.items:
        print("FAIL", item, file=sys.stderr)
    return 1 if problems.items else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
