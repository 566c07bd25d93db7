"""Every gallery script runs alone: downloaded into an empty folder, with posenc installed.

The docs build runs each script from its folder of ``examples/``, in the repository; a
reader who downloads one runs it anywhere. Here each runs in an empty temporary folder,
posenc importable (from wherever the suite imports it) and nothing else of the
repository: neither the repository's root nor ``examples/`` on the path or as the
working directory. A script whose data is a saved run of ``benchmarks/`` must say so
and compute a quick version itself.

The scripts that read saved files run in every ``nox -s tests`` (their quick versions
take seconds each, on one thread); the others read no file, which is checked here, and
compute everything they draw (the docs build runs them all, from the repository). They
run alone too where ``POSENC_GALLERY_ALONE=all`` is set (every script), or ``=rest``
(only those others: what CI adds, in ``.ci/run``, to the ``nox -s tests`` it has run).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import posenc

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "examples").rglob("plot_*.py"))
# A script that names the repository's benchmarks (its saved results or its harness).
READS_SAVED = [path for path in SCRIPTS if "benchmarks" in path.read_text(encoding="utf-8")]
CHOICES = {
    "": READS_SAVED,
    "all": SCRIPTS,
    "rest": [path for path in SCRIPTS if path not in READS_SAVED],
}
ASKED = os.environ.get("POSENC_GALLERY_ALONE", "")
if ASKED not in CHOICES:
    raise ValueError(f"POSENC_GALLERY_ALONE is 'all', 'rest' or unset, not {ASKED!r}")
CHOSEN = CHOICES[ASKED]


def test_the_scripts_that_read_saved_runs_are_found() -> None:
    names = {path.name for path in READS_SAVED}
    assert {"plot_19_trained_comparison.py", "plot_26_context_extension.py"} <= names
    assert {"plot_25_packed_kernels.py", "plot_28_tasks.py"} <= names


FILES = re.compile(r"\bPath\(|\bopen\(|__file__|sys\.path|os\.environ|read_text|read_bytes")


@pytest.mark.parametrize("script", SCRIPTS, ids=[path.name for path in SCRIPTS])
def test_only_the_scripts_that_read_saved_runs_touch_files(script: Path) -> None:
    """The others compute all they draw: nothing of the repository to find when alone."""
    text = script.read_text(encoding="utf-8")
    if script not in READS_SAVED:
        assert not FILES.findall(text), f"{script.name} reads files: {FILES.findall(text)}"


# What draws from torch's generator: its random functions, and the modules whose weights
# are drawn when they are built (torch's and posenc's).
DRAWS = re.compile(
    r"torch\.(randn|rand|randint|randperm|normal|bernoulli|multinomial)\(|\.(normal|uniform)_\("
    r"|nn\.(Linear|Embedding)\(|\b(Embeddings|TokenAndPositionEmbedding|LearnedPositionalEmbedding"
    r"|RelativePositionBias|KERPLE|FIRE|CoPE|MultiHeadedAttention)\("
)


@pytest.mark.parametrize("script", SCRIPTS, ids=[path.name for path in SCRIPTS])
def test_a_script_that_draws_random_numbers_seeds_them(script: Path) -> None:
    """The docs build seeds the generators before each script; a reader's run does not, so
    a script that draws seeds torch itself, or its figure changes from run to run."""
    text = script.read_text(encoding="utf-8")
    if DRAWS.search(text):
        assert "torch.manual_seed(" in text, f"{script.name} draws {DRAWS.findall(text)[:3]}"


@pytest.mark.parametrize("script", CHOSEN, ids=[path.name for path in CHOSEN])
def test_gallery_script_runs_alone(script: Path, tmp_path: Path) -> None:
    alone = tmp_path / script.name
    alone.write_bytes(script.read_bytes())
    env = {
        key: value
        for key, value in os.environ.items()
        # nothing that points a script at the repository's saved runs
        if key not in ("TRAIN_RESULTS", "TRAIN_PLAN", "POSENC_TASK_RESULTS", "PYTHONPATH")
    }
    env["PYTHONPATH"] = str(Path(posenc.__file__).resolve().parents[1])
    env["MPLBACKEND"] = "agg"
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    done = subprocess.run(
        [sys.executable, alone.name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{script.name} alone:\n{done.stderr[-4000:]}"
    # the repository's benchmarks are not found from here: a script that reads them
    # says that it computes a quick version instead
    if script in READS_SAVED:
        assert "quick version" in done.stdout, done.stdout
