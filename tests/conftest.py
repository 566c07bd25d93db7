"""Make ``tests/reference.py`` importable as ``reference`` from the test modules.

pytest runs with ``--import-mode=importlib``, which does not put the test
directory on ``sys.path``; the helper module is found through this insertion.

``float64_default`` is a fixture shared by the test modules.

``tests/peers/`` imports the peer libraries (transformers, diffusers, ...), which
only the venv of ``nox -s peers`` has; that session sets ``POSENC_PEERS=1``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

collect_ignore = [] if os.environ.get("POSENC_PEERS") == "1" else ["peers"]


@pytest.fixture
def float64_default() -> Iterator[None]:
    """torch's default dtype set to float64 for the test, and set back after it."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)
