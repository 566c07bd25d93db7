"""Sessions: tests, doctests, lint. Dependencies live in pyproject.toml's dependency groups."""

from __future__ import annotations

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "virtualenv"
nox.options.sessions = ["tests", "doctests", "lint"]

PYPROJECT = nox.project.load_toml("pyproject.toml")
# torch is pinned for these venvs on the pip command line (-c): an unpinned torch pulls a
# multi-GB CUDA build, and PIP_CONSTRAINT would replace the machine's own constraints.
CONSTRAINTS = ("-c", "constraints.txt")


def install(session: nox.Session, *groups: str) -> None:
    deps = [dep for group in groups for dep in nox.project.dependency_groups(PYPROJECT, group)]
    session.install(*CONSTRAINTS, "-e", ".", *deps)


@nox.session(reuse_venv=True)
def tests(session: nox.Session) -> None:
    """Unit tests, seed tests and every docstring example."""
    install(session, "test")
    session.run("pytest", *session.posargs)


@nox.session(reuse_venv=True)
def doctests(session: nox.Session) -> None:
    """The docstring examples and the README example only."""
    install(session, "test")
    session.run("pytest", "src/posenc", "README.md", *session.posargs)


@nox.session(reuse_venv=True)
def lint(session: nox.Session) -> None:
    """ruff (check and format) and mypy on src."""
    install(session, "lint")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy", *session.posargs)
