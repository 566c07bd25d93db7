"""Sessions: tests, peers, lint, docs, browser, build, bench, train; dependencies in pyproject."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "virtualenv"
nox.options.sessions = ["tests", "lint", "docs", "docs-i18n"]

PYPROJECT = nox.project.load_toml("pyproject.toml")
# torch (and transformers, where a session installs it) is pinned for these venvs on the
# pip command line (-c constraints.txt), so every venv tests the same torch. The machines
# this project runs on carry that release as a CPU wheel; elsewhere pip takes it from
# PyPI, where the Linux wheel is the CUDA build
# (see the README for the CPU wheel). PIP_CONSTRAINT is not used: it would replace a
# machine's own pip constraints.
CONSTRAINTS = ("-c", "constraints.txt")


def install(session: nox.Session, *groups: str, package: bool = True) -> None:
    deps = [dep for group in groups for dep in nox.project.dependency_groups(PYPROJECT, group)]
    session.install(*CONSTRAINTS, *(("-e", ".") if package else ()), *deps)


@nox.session(reuse_venv=True)
def tests(session: nox.Session) -> None:
    """Unit tests, seed tests and every docstring example (and the README's).

    The docstring examples alone: ``nox -s tests -- src/posenc README.md``.
    """
    install(session, "test")
    # -v: every test by name (golden conventions, decoding, padding, compile/export) in the log
    session.run("pytest", "-v", *session.posargs)


@nox.session(reuse_venv=True)
def peers(session: nox.Session) -> None:
    """Golden tests against the peer libraries' own functions (tests/peers/), in their own venv."""
    install(session, "peers")
    # timm's pos_embed_sincos is loaded as a file (tests/peers/test_vision_peers.py): its
    # dependencies (torchvision) fail to import on torch 2.13, so it comes without them.
    session.install("--no-deps", "timm==1.0.31")
    # torchtune's Llama 3 / Llama 4 scaling rule, loaded as a file too (tests/peers/
    # test_hf_peers.py): its package imports torchao, which is not installed here.
    session.install("--no-deps", "torchtune==0.6.1")
    # transformers 5.2 (the last get_rope_index with the Qwen team's text-after-vision
    # rule) in a directory of its own, run in a subprocess: it needs huggingface_hub < 2,
    # tokenizers <= 0.23.0 and httpx, which the venv's transformers does not
    legacy = str(Path(session.virtualenv.location) / "transformers-5.2")
    session.install("--no-deps", "--upgrade", "--target", legacy, *TRANSFORMERS_5_2)
    env = {"POSENC_PEERS": "1", "POSENC_TRANSFORMERS_5_2": legacy}
    session.run("pytest", "-v", "tests/peers", *session.posargs, env=env)


TRANSFORMERS_5_2 = ("transformers==5.2.0", "huggingface_hub==1.33.0", "tokenizers==0.22.2",
                    "httpx==0.28.1", "httpcore==1.0.9")  # fmt: skip


# The public API's type completeness as pyright sees it from outside the package, over
# posenc's own symbols (unknown types inside torch are torch's: --ignoreexternal).
MIN_TYPE_COMPLETENESS = 0.95


@nox.session(reuse_venv=True)
def lint(session: nox.Session) -> None:
    """ruff (check and format), mypy on src, and pyright's type completeness of the API."""
    install(session, "lint")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy", *session.posargs)
    verify = ("pyright", "--verifytypes", "posenc", "--ignoreexternal")
    report = session.run(*verify, "--outputjson", silent=True, success_codes=[0, 1])
    if report is None:  # `nox --install-only`: nothing ran
        return
    score = json.loads(str(report))["typeCompleteness"]["completenessScore"]
    session.log(f"pyright --verifytypes posenc: type completeness {score:.1%}")
    if score < MIN_TYPE_COMPLETENESS:
        session.run(*verify, success_codes=[0, 1])  # the symbols it flags, readable
        session.error(f"type completeness {score:.1%} < {MIN_TYPE_COMPLETENESS:.0%}")


# Everything a docs build writes; removed first, so that each build starts clean and
# runs every example (a stale page or figure cannot survive a build).
DOCS_OUTPUTS = ("docs/_build", "docs/auto_examples", "docs/gen_modules")
SPHINX_STRICT = ("-n", "-W", "--keep-going")


@nox.session(reuse_venv=True)
def docs(session: nox.Session) -> None:
    """The English site in docs/_build/html/en, every gallery example run; the guide's doctests."""
    install(session, "docs")
    # the comparison words and their check (docs/_ext/bench_results.py), in three languages
    session.run("python", "-m", "doctest", "docs/_ext/bench_results.py")
    for path in DOCS_OUTPUTS:
        shutil.rmtree(path, ignore_errors=True)
    session.run(
        "sphinx-build", "-b", "html", *SPHINX_STRICT,
        "-d", "docs/_build/doctrees", "docs", "docs/_build/html/en", *session.posargs,
    )  # fmt: skip
    # The narrative pages' ``.. doctest::`` blocks. The gallery ran above: not again.
    session.run(
        "sphinx-build", "-b", "doctest", *SPHINX_STRICT, "-D", "plot_gallery=0",
        "-d", "docs/_build/doctrees-doctest", "docs", "docs/_build/doctest", *session.posargs,
    )  # fmt: skip
    session.log("open docs/_build/html/index.html (Korean and Japanese: nox -s docs-i18n)")


TRANSLATIONS = ("ko", "ja")


@nox.session(name="docs-i18n", reuse_venv=True)
def docs_i18n(session: nox.Session) -> None:
    """The site in Korean and Japanese, from docs/locales, beside English: run after `docs`.

    The English run's gallery pages and figures are read as they are (the examples are
    not run again). Fails if a catalog of the learner's path is behind the English, is
    incomplete or fuzzy, or dropped code, roles, numbers or glossary terms.
    """
    install(session, "docs")
    if not Path("docs/_build/html/en/index.html").is_file():
        session.error("the English site is missing: run `nox -s docs` first")
    i18n = ("python", "docs/i18n.py")
    session.run("python", "-m", "doctest", "docs/i18n.py", "docs/_ext/i18n_site.py")  # the checks
    session.run(*i18n, "extract")  # the English messages, freshly, into docs/_build/gettext
    session.run(*i18n, "check", *TRANSLATIONS)
    session.run(*i18n, "figures", *TRANSLATIONS)
    session.run(*i18n, "theme", *TRANSLATIONS)
    for language in TRANSLATIONS:  # each from scratch, as `docs` builds English
        shutil.rmtree(f"docs/_build/html/{language}", ignore_errors=True)
        shutil.rmtree(f"docs/_build/doctrees-{language}", ignore_errors=True)
        session.run(
            "sphinx-build", "-b", "html", *SPHINX_STRICT, "-D", f"language={language}",
            "-d", f"docs/_build/doctrees-{language}", "docs", f"docs/_build/html/{language}",
            env={"POSENC_DOCS_REUSE_EXAMPLES": "1"},
        )  # fmt: skip
    session.run(*i18n, "verify", *TRANSLATIONS)
    session.run(*i18n, "stats", *TRANSLATIONS)
    session.log("open docs/_build/html/index.html")


@nox.session(reuse_venv=True)
def browser(session: nox.Session) -> None:
    """Every page of every language in headless Chromium (Debian's): after docs and docs-i18n."""
    install(session, "browser", package=False)  # serves built HTML: no torch needed
    session.run("python", "docs/browser_check.py", *session.posargs)


@nox.session(reuse_venv=True)
def build(session: nox.Session) -> None:
    """sdist and wheel, `twine check --strict`, and the wheel installed in a fresh venv."""
    install(session, "build", package=False)
    dist = Path("dist")
    shutil.rmtree(dist, ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", str(dist))  # the wheel from the sdist
    built = sorted(str(path) for path in dist.iterdir())
    session.run("twine", "check", "--strict", *built)
    (wheel,) = dist.glob("posenc-*.whl")
    # A venv with nothing in it but the wheel and what it depends on, torch pinned as in
    # the other sessions; run from outside the checkout, so that `src/` cannot be imported.
    fresh = Path(session.create_tmp()).resolve() / "wheel-venv"
    shutil.rmtree(fresh, ignore_errors=True)
    session.run("virtualenv", "--quiet", str(fresh))
    python = str(fresh / "bin" / "python")
    constraints = str(Path("constraints.txt").resolve())
    install_wheel = ("-m", "pip", "install", "--quiet", "-c", constraints, str(wheel.resolve()))
    session.run(python, *install_wheel, external=True)
    (fresh / "check_wheel.py").write_text(IMPORT_CHECK, encoding="utf-8")
    with session.chdir(fresh):
        session.run(python, "check_wheel.py", wheel.name, external=True)


# What the fresh venv checks: the installed package is the wheel's version, comes from
# site-packages, carries py.typed, and every public name imports and works.
IMPORT_CHECK = """
import sys
from importlib import metadata
from pathlib import Path

import torch

import posenc

wheel_version = sys.argv[1].split("-")[1]
assert posenc.__version__ == metadata.version("posenc") == wheel_version, posenc.__version__
assert "site-packages" in posenc.__file__, posenc.__file__
assert (Path(posenc.__file__).parent / "py.typed").is_file(), "py.typed is missing"
missing = [name for name in posenc.__all__ if not hasattr(posenc, name)]
assert not missing, missing
x = posenc.PositionalEncoding(8)(torch.zeros(1, 3, 8))
assert x.shape == (1, 3, 8), x.shape
print(f"posenc {posenc.__version__} from {posenc.__file__}, torch {torch.__version__}: ok")
"""


@nox.session(name="hf-sweep", reuse_venv=True)
def hf_sweep(session: nox.Session) -> None:
    """Every causal-LM family of the pinned transformers patched by posenc.hf; saves
    benchmarks/results/hf-families.json (``-- --sample`` for the CI sample). Not a test."""
    install(session, "peers")
    session.run("python", "benchmarks/hf_sweep.py", *session.posargs)


@nox.session(reuse_venv=True)
def bench(session: nox.Session) -> None:
    """Every timing (input layer, table, RoPE) against its floor, both allocators; --save."""
    install(session, "bench")
    session.run("python", "benchmarks/bench.py", *session.posargs)


@nox.session(reuse_venv=True)
def train(session: nox.Session) -> None:
    """The trained comparison (hours, resumable): one file a run in benchmarks/results/train/.

    Runs already saved with the same config are skipped, so the set is built over several
    sittings; two single-thread worker processes, a line per run. ``-- --plan`` prints what
    remains and its estimated time; ``--schemes``, ``--roles``, ``--scales``, ``--scalings``
    choose a part; ``--analyse`` prints the findings' verdicts. The pipeline on a short budget
    (one seed, 300 steps, a short fine-tune; ~1-2 minutes): ``nox -s train -- --quick --out FILE``.
    """
    install(session, "train")  # the data ships with CPython: nothing is downloaded
    session.run("python", "benchmarks/train.py", *session.posargs)


@nox.session(reuse_venv=True)
def tasks(session: nox.Session) -> None:
    """Length generalization on the papers' tasks (hours, resumable): benchmarks/results/tasks/.

    One file a run; runs already saved with the same config are skipped. ``-- --plan`` prints
    what remains and its estimated time (per-step costs measured then); ``--tasks``,
    ``--schemes``, ``--seeds`` choose a part; ``--quick --out DIR``: copy, one seed, 300
    steps, then the checks that held in measured seeds.
    """
    install(session, "train")
    session.run("python", "benchmarks/tasks.py", *session.posargs)
