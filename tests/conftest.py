"""Make ``tests/reference.py`` importable as ``reference`` from the test modules.

pytest runs with ``--import-mode=importlib``, which does not put the test
directory on ``sys.path``; the helper module is found through this insertion.

``tests/peers/`` imports the peer libraries (transformers, diffusers, ...), which
only the venv of ``nox -s peers`` has; that session sets ``POSENC_PEERS=1``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

collect_ignore = [] if os.environ.get("POSENC_PEERS") == "1" else ["peers"]
