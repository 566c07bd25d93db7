"""The version, the changelog's releases and the citation agree; the policy is linked."""

from __future__ import annotations

import re
from pathlib import Path

import posenc

ROOT = Path(__file__).resolve().parents[1]
SECTION = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?$", re.M)


def sections() -> list[tuple[str, str | None]]:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return [(m["version"], m["date"]) for m in SECTION.finditer(text)]


def test_the_version_is_the_latest_release_of_the_changelog_and_the_citation() -> None:
    found = sections()
    assert found[0] == ("Unreleased", None)
    version, date = found[1]
    assert posenc.__version__ == version
    citation = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    assert f'\nversion: "{version}"\n' in citation
    assert f'\ndate-released: "{date}"\n' in citation


def test_every_changelog_section_has_its_link_and_dates_go_back() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    found = sections()
    for version, _ in found:
        assert re.search(rf"^\[{re.escape(version)}\]: https://", text, re.M), version
    dates = [date for _, date in found[1:]]
    assert all(date is not None for date in dates)
    assert dates == sorted(dates, reverse=True)  # type: ignore[type-var]


def test_the_deprecation_policy_is_where_the_readme_and_changelog_point() -> None:
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    assert "\n## Releases and deprecations\n" in contributing
    for name in ("README.md", "CHANGELOG.md"):
        assert "(CONTRIBUTING.md#releases-and-deprecations)" in (ROOT / name).read_text(
            encoding="utf-8"
        ), name
