"""The translations' catalogs: extract, update, check, draw the figures, count.

Run by ``nox -s docs-i18n`` (in the docs venv, from the repository root)::

    python docs/i18n.py extract          # English messages -> docs/_build/gettext/*.pot
    python docs/i18n.py update ko ja     # the catalogs in docs/locales follow them
    python docs/i18n.py check ko ja      # fail on what a translation dropped or left out
    python docs/i18n.py figures ko ja    # the gallery's figures, labelled in each language
    python docs/i18n.py theme ko ja      # the search page's strings (sphinx.js)
    python docs/i18n.py verify ko ja     # the built pages: no markup left as text
    python docs/i18n.py stats ko ja      # messages and words, translated and not

The catalogs are ``docs/locales/<language>/LC_MESSAGES/<page>.po``, one per page of the
learner's path (``_ext/i18n_site.LEARNERS_PATH``), ``api.po`` with the API page's own
text and the messages of the entries in ``API_ENTRIES`` only, ``figures.po`` (the
figures' text) and ``sphinx.po`` (the theme's and the search page's strings that Sphinx
and furo leave untranslated).
Every other page has no catalog and is shown in English, with a notice.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path

from babel.messages.catalog import Catalog, Message
from babel.messages.pofile import read_po, write_po

DOCS = Path(__file__).parent.resolve()
sys.path.insert(0, str(DOCS / "_ext"))

from i18n_site import API_ENTRIES, API_PAGE, CJK_RANGES, LANGUAGES, LEARNERS_PATH  # noqa: E402

LOCALES = DOCS / "locales"
GETTEXT = DOCS / "_build" / "gettext"
FIGURES_POT = GETTEXT / "figures.pot"
FIGURES = "figures"
THEME = "sphinx"  # Sphinx's own domain: the theme's and the search page's strings


def po_path(language: str, domain: str) -> Path:
    return LOCALES / language / "LC_MESSAGES" / f"{domain}.po"


def read(path: Path) -> Catalog:
    with path.open("rb") as file:
        return read_po(file)


def write(path: Path, catalog: Catalog) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    catalog.fuzzy = False  # the header: a fuzzy header is left out of the .mo
    buffer = io.BytesIO()
    write_po(buffer, catalog, width=0, omit_header=False, sort_output=False)
    # No dates and no placeholders in the header: a catalog changes only when a
    # message does.
    text = buffer.getvalue().decode("utf-8")
    head, _, rest = text.partition("\n\n")
    head = "\n".join(
        line for line in head.splitlines()
        if not re.match(r'^(#|"(POT-Creation-Date|PO-Revision-Date|Last-Translator|'
                        r'Report-Msgid-Bugs-To|Generated-By))', line)
    )  # fmt: skip
    title = f"# {catalog.locale_identifier or 'English'} messages of posenc's documentation.\n"
    path.write_text(title + head + "\n\n" + rest, encoding="utf-8")


# "src/posenc/embedding.py:docstring of posenc.embedding.Embeddings.forward:3", which
# babel reads as three locations, the last "posenc.embedding.Embeddings.forward".
API_LOCATION = re.compile(
    r"^posenc\.(?:\w+\.)*?(?P<name>" + "|".join(API_ENTRIES) + r")(?:\.\w+)*$"
)


def in_api_entries(message: Message) -> bool:
    """Whether a message of the API page is translated: the page's own text (its
    headings and the sentences between the entries) and the entries in API_ENTRIES."""
    own = all(name == f"../../{API_PAGE}.rst" and line for name, line in message.locations)
    return own or any(API_LOCATION.match(location) for location, _ in message.locations)


def path_figures(name: str) -> bool:
    """Whether a figure (by file name) belongs to an example on the learner's path."""
    examples = {page.rsplit("/", 1)[1] for page in LEARNERS_PATH if "/plot_" in page}
    return any(name.startswith(f"sphx_glr_{example}_") for example in examples)


def domains() -> list[str]:
    """The catalogs that have an English template: the path's pages, the API, figures."""
    return [*LEARNERS_PATH, API_PAGE, FIGURES]


def template(domain: str) -> Catalog:
    """The freshly extracted English messages of one catalog."""
    path = FIGURES_POT if domain == FIGURES else GETTEXT / f"{domain}.pot"
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run `python docs/i18n.py extract` first")
    catalog = read(path)
    if domain == API_PAGE:
        kept = Catalog(locale=None, project=catalog.project, version=catalog.version)
        for message in catalog:
            if message.id and in_api_entries(message):
                kept[message.id] = message
        catalog = kept
    return catalog


def messages(catalog: Catalog) -> Iterator[Message]:
    for message in catalog:
        if message.id:
            yield message


# -- extract -------------------------------------------------------------------


def extract() -> None:
    """The English messages of every page (sphinx-build -b gettext) and of the figures."""
    env = {**os.environ, "POSENC_DOCS_REUSE_EXAMPLES": "1"}
    if not (DOCS / "auto_examples" / "index.rst").is_file():
        raise SystemExit("the gallery's pages are missing: run `nox -s docs` first")
    subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "gettext", "-d",
         str(DOCS / "_build" / "doctrees-gettext"), str(DOCS), str(GETTEXT)],
        check=True, env=env,
    )  # fmt: skip
    from figures_i18n import figure_texts

    catalog = Catalog(project="posenc")
    for text, where in figure_texts(DOCS / "auto_examples", path_figures):
        if text in catalog:
            catalog[text].locations.append((where, 0))
        else:
            catalog.add(text, locations=[(where, 0)])
    write(FIGURES_POT, catalog)
    print(f"extracted {len(list(GETTEXT.rglob('*.pot')))} templates into {GETTEXT}")


# -- update --------------------------------------------------------------------


def update(languages: Iterable[str]) -> None:
    """Each catalog follows its template: new messages empty, gone ones dropped.

    No fuzzy matching: a changed English sentence is a new message, translated anew,
    never an old translation of another sentence marked for review.
    """
    for language in languages:
        for domain in domains():
            fresh = template(domain)
            path = po_path(language, domain)
            old = read(path) if path.is_file() else Catalog(locale=language)
            done = {m.id: m.string for m in messages(old) if m.string and "fuzzy" not in m.flags}
            catalog = Catalog(locale=language, project="posenc", version=fresh.version)
            catalog.language_team = LANGUAGE_TEAM[language]
            for message in messages(fresh):
                catalog.add(
                    message.id,
                    done.get(message.id, ""),
                    locations=message.locations,
                    auto_comments=message.auto_comments,
                )
            write(path, catalog)
            total = len(list(messages(catalog)))
            left = sum(1 for m in messages(catalog) if not m.string)
            print(f"{language} {domain}: {total} messages, {left} untranslated")


LANGUAGE_TEAM = {"ko": "posenc Korean <ko>", "ja": "posenc Japanese <ja>"}


# -- check ---------------------------------------------------------------------

# Korean and Japanese characters, and the full-width forms written beside them (：（）).
CJK = CJK_RANGES + "\uff00-\uffef"
# Inline markup of reST, outermost first: code, roles (with their target), references,
# substitutions, strong and emphasis, and a default-role `text`.
INLINE = re.compile(
    r"``.+?``"
    r"|:[\w:.+-]+:`[^`]+`"
    r"|`[^`]+`__?"
    r"|`[^`]+`"
    r"|\|[^|\s][^|]*\|_{0,2}"
    r"|\*\*[^*]+\*\*"
    r"|(?<![A-Za-z0-9_*])\*[^*\s][^*]*\*(?![A-Za-z0-9_*])"
)
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*")
GLUE = re.compile(f"[{CJK}]")


def kept_markup(text: str) -> list[str]:
    """What a translation must keep of a message, as it is: code, formulas, targets.

    Code (````x````), formulas (``:math:``) and role targets are kept whole; a role's
    shown text (``:doc:`the guide <guide/index>```) and a link's text are translated,
    so only their targets count; strong and emphasis text is translated.

    >>> kept_markup("See :doc:`the guide <guide/order>`, ``x = 1`` and :math:`k`.")
    [':doc:`<guide/order>`', ':math:`k`', '``x = 1``']
    >>> kept_markup(":doc:`안내서 <guide/order>`, ``x = 1``\\ 과 :math:`k`\\ 를 본다.")
    [':doc:`<guide/order>`', ':math:`k`', '``x = 1``']
    """
    kept = []
    for match in INLINE.finditer(text):
        token = match.group(0)
        if token.startswith("``"):
            kept.append(token)
        elif token.startswith(":"):
            role = token.partition(":`")[0]
            target = re.search(r"<([^<>]+)>`$", token)
            if role.endswith(":math") or role.endswith(":bench") or not target:
                kept.append(token)
            else:
                kept.append(f"{role}:`<{target.group(1)}>`")
        elif token.startswith("`") and token.endswith("_"):
            target = re.search(r"<([^<>]+)>`", token)
            if target:
                kept.append(f"link <{target.group(1)}>")
        elif token.startswith("|"):
            kept.append(token)
    return sorted(kept)


def prose(text: str) -> str:
    """The message without its inline markup: what is read as words."""
    return INLINE.sub(" ", text)


def glued(text: str) -> list[str]:
    """Inline markup that touches a Korean or Japanese character (reST would not see it).

    >>> glued("표는 ``x``는 1이다")
    ['는 ``x``는 ']
    >>> glued("표는 ``x``\\ 는 1이다, (``y``) **강조**\\ 다")
    []
    """
    found = []
    for match in INLINE.finditer(text):
        before = text[max(0, match.start() - 1) : match.start()]
        after = text[match.end() : match.end() + 1]
        if GLUE.match(before) or GLUE.match(after):
            found.append(text[max(0, match.start() - 2) : match.end() + 2])
    return found


def glossary() -> list[dict[str, str]]:
    """The rows of locales/GLOSSARY.md's table."""
    rows = []
    lines = (LOCALES / "GLOSSARY.md").read_text(encoding="utf-8").splitlines()
    table = [line for line in lines if line.startswith("|")]
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    for line in table[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


def _plural(word: str) -> str:
    return word[:-1] + "(?:y|ies)" if word.endswith("y") else word + "s?"


def english_term(term: str) -> re.Pattern[str]:
    """``positional encoding`` -> words in any case, plural too; the part before ( only.

    >>> bool(english_term("positional encoding").search("Positional-Encodings"))
    True
    >>> bool(english_term("frequency").search("the frequencies")), bool(
    ...     english_term("frequency").search("frequent"))
    (True, False)
    """
    words = term.split("(")[0].strip()
    alternatives = [w.strip() for w in words.split(",")]
    body = "|".join(_plural(re.escape(w).replace("\\ ", r"[\s-]+")) for w in alternatives)
    return re.compile(rf"\b(?:{body})\b", re.IGNORECASE)


def problems(
    language: str, message: Message, rows: list[dict[str, str]], *, rest: bool = True
) -> Iterator[str]:
    """What is wrong with one translated message (``rest``: the message is reST).

    The glossary's drifting variants are refused, and a factor is not an argument:

    >>> rows = glossary()
    >>> def check(language, english, translated):
    ...     return list(problems(language, Message(english, translated), rows))
    >>> check("ko", "Its arguments.", "그 인수.")
    ["glossary: '인수' is to be avoided, write '인자'", "glossary: 'argument' is '인자' here"]
    >>> check("ko", "Its two factors.", "그 두 인수.")
    []
    >>> check("ja", "The pair index ``k``.", "ペア番号 ``k``。")
    ["glossary: 'ペア' is to be avoided, write '組'", "glossary: 'ペア番号' is to be avoided, \
write '組の番号'", "glossary: 'pair index' is '組の番号' here"]
    >>> check("ja", "Token ids (default 0):", "トークン id (既定値は 0)：")
    ["glossary: 'id' is to be avoided, write 'ID'", "half-width parenthesis in Japanese text, \
write （…）: 'd ('", "ends with '：': a Japanese sentence ends with 。, before code too"]
    >>> check("ja", "Token ids (default 0):", "トークン ID（既定値は 0）。")
    []
    """
    english, translated = message.id, message.string
    if not translated:
        yield "not translated"
        return
    if "fuzzy" in message.flags:
        yield "fuzzy"
    if not rest:  # a figure's text: its numbers and terms, and no CJK beside a formula
        if "$" in translated and GLUE.search(translated):
            yield (
                "a figure's text with a formula ($...$) is drawn by mathtext, whose fonts "
                "have no Korean or Japanese: write the formula as text (2⁻²⁵, ω_k)"
            )
        # a keyword argument in a figure (``layout="half"``) is code, not a term to translate
        words = KEYWORD_ARGUMENT.sub(" ", english)
        yield from _numbers_and_terms(
            language, words, unicodedata.normalize("NFKC", translated), rows
        )
        if language == "ja":
            yield from japanese_style(translated)
        return
    if kept_markup(english) != kept_markup(translated):
        lost = sorted(set(kept_markup(english)) - set(kept_markup(translated)))
        added = sorted(set(kept_markup(translated)) - set(kept_markup(english)))
        yield f"code, roles or formulas differ: lost {lost}, added {added}"
    for piece in glued(translated):
        yield f"markup glued to the text (separate it with '\\ '): {piece!r}"
    yield from _numbers_and_terms(language, prose(english), translated, rows, prose(translated))
    if language == "ja":
        yield from japanese_style(prose(translated))


KEYWORD_ARGUMENT = re.compile(r"\b[A-Za-z_]\w*=(?:\"[^\"]*\"|'[^']*'|\S+)")
UNLESS = re.compile(r"^(?P<variant>.+?)\s*\(unless:\s*(?P<term>[^()]+)\)$")
# Code and formulas, which keep their own letters (``ids``, :math:`\mathrm{id}_t`).
CODE_OR_MATH = re.compile(r"``.+?``|:math:`[^`]+`")


def avoided_variants(cell: str) -> Iterator[tuple[re.Pattern[str], str, str | None]]:
    """The glossary's avoid cell: (pattern, variant, the English term that allows it).

    A variant in Latin letters is a whole word in its case; any other is found
    anywhere. ``word (unless: term)`` is allowed where the English has ``term``.

    >>> [(v, unless) for _, v, unless in avoided_variants("인수 (unless: factor); 항목")]
    [('인수', 'factor'), ('항목', None)]
    >>> pattern = next(avoided_variants("id"))[0]
    >>> [bool(pattern.search(s)) for s in ("トークン id で", "トークン ID", "ids", "grid")]
    [True, False, False, False]
    """
    for item in filter(None, (part.strip() for part in cell.split(";"))):
        match = UNLESS.match(item)
        variant, unless = (match["variant"], match["term"]) if match else (item, None)
        if re.fullmatch(r"[A-Za-z ]+", variant):
            pattern = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(variant)}(?![A-Za-z0-9_])")
        else:
            pattern = re.compile(re.escape(variant))
        yield pattern, variant, unless


def _numbers_and_terms(
    language: str,
    english: str,
    translated: str,
    rows: list[dict[str, str]],
    translated_prose: str | None = None,
) -> Iterator[str]:
    """Numbers of the English prose kept in the translation's; the glossary's terms.

    A term may be anywhere in the translation, in bold text too, where the translation
    of a title in the English's quotes can be. An avoided variant is looked for outside
    code and formulas, in a message that was translated (a formula copied as it is
    keeps its letters).
    """
    numbers = sorted(NUMBER.findall(english))
    there = NUMBER.findall(translated if translated_prose is None else translated_prose)
    missing = [n for n in numbers if n not in there]
    if missing:
        yield f"numbers dropped: {missing}"
    column = LANGUAGES[language]  # the glossary's column of that language, by its name
    words = CODE_OR_MATH.sub(" ", translated) if GLUE.search(translated) else ""
    for row in rows:
        target = row[column]
        for pattern, avoided, unless in avoided_variants(row[f"avoid ({language})"]):
            if pattern.search(words) and not (unless and english_term(unless).search(english)):
                yield f"glossary: {avoided!r} is to be avoided, write {target!r}"
        term = english_term(row["English"])
        if (
            row["checked"] == "yes"
            and term.search(english)
            and re.split(r" \(|（", target)[0] not in translated
        ):
            yield f"glossary: {row['English']!r} is {target!r} here"


# Kana and kanji: the Japanese letters a space separates from Latin letters and digits.
JAPANESE = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
HALF_WIDTH_PAREN = re.compile(rf"(?:^|(?<=[\s{JAPANESE}]))\(|\([^()]*[{JAPANESE}][^()]*\)")
# A label's colon beside Japanese text (``組 0: ζ``, ``sin: 偶数列``), as in a figure's text.
HALF_WIDTH_COLON = re.compile(rf"[{JAPANESE}）」]:|[^\s:]: ?[{JAPANESE}]")
TOUCHING = re.compile(rf"[A-Za-z0-9][{JAPANESE}]|[{JAPANESE}][A-Za-z0-9]")


def japanese_style(text: str) -> Iterator[str]:
    """Japanese punctuation in one style (locales/GLOSSARY.md): full-width parentheses
    around Japanese text, 。 at the end, a space between Latin letters or digits and
    Japanese. ``text`` is what is read as words (a reST message without its markup).

    >>> list(japanese_style("位置 (既定値は 0) です。"))
    ["half-width parenthesis in Japanese text, write （…）: '置 ('"]
    >>> list(japanese_style("位置（既定値は 0）で、PE(p) と cos((p − q) ω_k) です。"))
    []
    >>> list(japanese_style("次のとおりです："))
    ["ends with '：': a Japanese sentence ends with 。, before code too"]
    >>> list(japanese_style("学習される: テーブルのみ"))
    ["half-width colon in Japanese text, write ：: 'る:'"]
    >>> list(japanese_style("sin: 偶数列 2k"))
    ["half-width colon in Japanese text, write ：: 'n: 偶'"]
    >>> list(japanese_style("積2つと和 1 つ"))
    ["no space between Latin letters or digits and Japanese, write '積 2': '積2'"]
    """
    if not re.search(f"[{JAPANESE}]", text):
        return  # a formula or code copied as it is
    for match in HALF_WIDTH_PAREN.finditer(text):
        start = max(0, match.start() - 2)
        yield (
            "half-width parenthesis in Japanese text, write （…）: "
            f"{text[start : match.start() + 1]!r}"
        )
    for match in HALF_WIDTH_COLON.finditer(text):
        yield f"half-width colon in Japanese text, write ：: {match.group(0)!r}"
    end = text.rstrip()[-1:]
    if end in ("：", ":"):
        yield f"ends with {end!r}: a Japanese sentence ends with 。, before code too"
    for match in TOUCHING.finditer(text):
        pair = match.group(0)
        yield (
            "no space between Latin letters or digits and Japanese, write "
            f"{pair[0] + ' ' + pair[1]!r}: {text[max(0, match.start() - 1) : match.end()]!r}"
        )


def check(languages: Iterable[str]) -> None:
    """Fail if a catalog is behind its template, incomplete, or lost what it must keep."""
    rows = glossary()
    failures = 0
    for language in languages:
        for domain in domains():
            path = po_path(language, domain)
            fresh = {m.id for m in messages(template(domain))}
            if not path.is_file():
                print(f"{language} {domain}: no catalog ({path})")
                failures += 1
                continue
            catalog = read(path)
            have = {m.id for m in messages(catalog)}
            for gone in sorted(fresh - have):
                print(f"{language} {domain}: new English message: {gone[:70]!r}")
                failures += 1
            for stale in sorted(have - fresh):
                print(f"{language} {domain}: message no longer in English: {stale[:70]!r}")
                failures += 1
            for message in messages(catalog):
                found = problems(language, message, rows, rest=domain != FIGURES)
                for problem in found if message.id in fresh else ():
                    print(f"{path.relative_to(DOCS)}: {problem}\n    msgid {message.id[:90]!r}")
                    failures += 1
    if failures:
        raise SystemExit(
            f"{failures} problems in the catalogs (a new or changed English message: "
            "`python docs/i18n.py update`, then translate it)"
        )
    print("the catalogs are complete and keep their code, roles, numbers and terms")


# -- figures, theme, built pages ----------------------------------------------------


def figures(languages: Iterable[str]) -> None:
    """Every kept figure of the English run, saved again with its labels translated."""
    from figures_i18n import translate

    for language in languages:
        catalog = read(po_path(language, FIGURES))
        strings = {m.id: m.string for m in messages(catalog) if m.string}
        record = translate(DOCS / "auto_examples", language, strings.get, path_figures)
        print(f"{language}: {len(record)} figures drawn, {len(strings)} labels translated")


JS_CATALOG = re.compile(r"^Documentation\.addTranslations\((?P<json>.*)\);?\s*$", re.DOTALL)


def theme(languages: Iterable[str]) -> None:
    """The search page's script catalog (sphinx.js): Sphinx's own, with sphinx.po over it.

    Sphinx compiles ``sphinx.po`` for the templates itself, but takes the strings of
    its scripts (the search page) from a ``sphinx.js`` beside it; this writes that
    file from Sphinx's own and the overrides, so that, for one, the search page's
    summary ("found 3 pages") is not blank (Sphinx 9's Korean and Japanese catalogs
    have an empty translation for it).
    """
    import sphinx

    for language in languages:
        builtin = Path(sphinx.__file__).parent / "locale" / language / "LC_MESSAGES" / "sphinx.js"
        match = JS_CATALOG.match(builtin.read_text(encoding="utf-8"))
        if match is None:
            raise SystemExit(f"cannot read {builtin}")
        data = json.loads(match["json"])
        overrides = read(po_path(language, THEME))
        for message in overrides:
            if not message.id or not message.string:
                continue
            key = message.id[0] if isinstance(message.id, tuple) else message.id
            value = message.string
            data["messages"][key] = list(value) if isinstance(value, tuple) else value
        target = po_path(language, THEME).with_suffix(".js")
        target.write_text(
            "Documentation.addTranslations(" + json.dumps(data, ensure_ascii=False, indent=1)
            + ");\n", encoding="utf-8",
        )  # fmt: skip
        print(f"{language}: {target.relative_to(DOCS)} written")


# Markup reST did not read: code or role quotes, a link's `_, ** that is not 2**31.
RAW_MARKUP = re.compile(r"``|:[a-z]+:`|`_|(?<![\w)])\*\*(?!\d)|\\ ")


def verify(languages: Iterable[str]) -> None:
    """Read the built translated pages: markup left as text, and the notices.

    reST leaves inline markup that touches a CJK character as text; what the catalog
    check could not see (a new kind of markup) shows here. Every page off the
    learner's path must carry its one-line notice, every page on it none.
    """
    from html.parser import HTMLParser

    class Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.skip = 0
            self.parts: list[str] = []
            self.notice = False

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag in ("pre", "code", "script", "style", "math"):
                self.skip += 1
            if tag == "p" and "posenc-untranslated" in (dict(attrs).get("class") or ""):
                self.notice = True

        def handle_endtag(self, tag: str) -> None:
            if tag in ("pre", "code", "script", "style", "math") and self.skip:
                self.skip -= 1

        def handle_data(self, data: str) -> None:
            if not self.skip:
                self.parts.append(data)

    failures = 0
    for language in languages:
        site = DOCS / "_build" / "html" / language
        pages = 0
        for page in (*LEARNERS_PATH, API_PAGE, "guide/rotary"):
            parser = Text()
            parser.feed((site / f"{page}.html").read_text(encoding="utf-8"))
            text = "".join(parser.parts)
            text = re.sub(r"\\\(.*?\\\)|\\\[.*?\\\]", "", text, flags=re.DOTALL)  # MathJax
            for line in text.splitlines():
                if RAW_MARKUP.search(line):
                    print(f"{language}/{page}.html: markup shown as text: {line.strip()[:100]!r}")
                    failures += 1
            if parser.notice == (page in LEARNERS_PATH):
                state = "has" if parser.notice else "lacks"
                print(f"{language}/{page}.html {state} the not-translated notice")
                failures += 1
            pages += 1
        print(f"{language}: {pages} pages read")
    if failures:
        raise SystemExit(f"{failures} problems in the translated pages")


def stats(languages: Iterable[str]) -> None:
    """Messages and words per catalog group, translated."""
    for language in languages:
        groups: dict[str, list[int]] = {}
        for domain in domains():
            catalog = read(po_path(language, domain))
            group = (
                "gallery" if domain.startswith("auto_examples")
                else "guide" if domain.startswith("guide")
                else domain if domain in (API_PAGE, FIGURES) else "index and seeds"
            )  # fmt: skip
            counts = groups.setdefault(group, [0, 0, 0])
            for message in messages(catalog):
                counts[0] += 1
                counts[1] += len(re.findall(r"[A-Za-z]+", prose(message.id)))
                counts[2] += bool(message.string)
        for group, (count, words, done) in groups.items():
            print(f"{language} {group:16s} {count:5d} messages {words:6d} English words, "
                  f"{done} translated")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "command", choices=["extract", "update", "check", "figures", "theme", "verify", "stats"]
    )
    parser.add_argument("languages", nargs="*", default=["ko", "ja"])
    args = parser.parse_args(argv)
    if args.command == "extract":
        extract()
    elif args.command == "update":
        update(args.languages)
    else:
        {"check": check, "figures": figures, "theme": theme, "verify": verify,
         "stats": stats}[args.command](args.languages)  # fmt: skip


if __name__ == "__main__":
    main()
