"""Sessions: tests, doctests, peers, lint, docs, browser, bench; dependencies live in pyproject."""

from __future__ import annotations

import shutil

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "virtualenv"
nox.options.sessions = ["tests", "doctests", "lint", "docs"]

PYPROJECT = nox.project.load_toml("pyproject.toml")
# torch is pinned for these venvs on the pip command line (-c): an unpinned torch pulls a
# multi-GB CUDA build, and PIP_CONSTRAINT would replace the machine's own constraints.
CONSTRAINTS = ("-c", "constraints.txt")


def install(session: nox.Session, *groups: str, package: bool = True) -> None:
    deps = [dep for group in groups for dep in nox.project.dependency_groups(PYPROJECT, group)]
    session.install(*CONSTRAINTS, *(("-e", ".") if package else ()), *deps)


@nox.session(reuse_venv=True)
def tests(session: nox.Session) -> None:
    """Unit tests, seed tests and every docstring example."""
    install(session, "test")
    # -v: every test by name (golden conventions, decoding, padding, compile/export) in the log
    session.run("pytest", "-v", *session.posargs)


@nox.session(reuse_venv=True)
def doctests(session: nox.Session) -> None:
    """The docstring examples and the README example only."""
    install(session, "test")
    session.run("pytest", "src/posenc", "README.md", *session.posargs)


@nox.session(reuse_venv=True)
def peers(session: nox.Session) -> None:
    """Golden tests against the peer libraries' own functions (tests/peers/), in their own venv."""
    install(session, "peers")
    session.run("pytest", "-v", "tests/peers", *session.posargs, env={"POSENC_PEERS": "1"})


@nox.session(reuse_venv=True)
def lint(session: nox.Session) -> None:
    """ruff (check and format) and mypy on src."""
    install(session, "lint")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy", *session.posargs)


# Everything a docs build writes; removed first, so that each build starts clean and
# runs every example (a stale page or figure cannot survive a build).
DOCS_OUTPUTS = ("docs/_build", "docs/auto_examples", "docs/gen_modules")
SPHINX_STRICT = ("-n", "-W", "--keep-going")


@nox.session(reuse_venv=True)
def docs(session: nox.Session) -> None:
    """The HTML site in docs/_build/html, every gallery example run; then the guide's doctests."""
    install(session, "docs")
    for path in DOCS_OUTPUTS:
        shutil.rmtree(path, ignore_errors=True)
    session.run(
        "sphinx-build", "-b", "html", *SPHINX_STRICT,
        "-d", "docs/_build/doctrees", "docs", "docs/_build/html", *session.posargs,
    )  # fmt: skip
    # The narrative pages' ``.. doctest::`` blocks. The gallery ran above: not again.
    session.run(
        "sphinx-build", "-b", "doctest", *SPHINX_STRICT, "-D", "plot_gallery=0",
        "-d", "docs/_build/doctrees-doctest", "docs", "docs/_build/doctest", *session.posargs,
    )  # fmt: skip
    session.log("open docs/_build/html/index.html")


@nox.session(reuse_venv=True)
def browser(session: nox.Session) -> None:
    """Every built page in headless Chromium (the Debian package): run after `nox -s docs`."""
    install(session, "browser", package=False)  # serves built HTML: no torch needed
    session.run("python", "docs/browser_check.py", *session.posargs)


@nox.session(reuse_venv=True)
def bench(session: nox.Session) -> None:
    """Every timing (input layer, table, RoPE) against its floor, both allocators; --save."""
    install(session, "bench")
    session.run("python", "benchmarks/bench.py", *session.posargs)
