"""Make ``tests/reference.py`` importable as ``reference`` from the test modules.

pytest runs with ``--import-mode=importlib``, which does not put the test
directory on ``sys.path``; the helper module is found through this insertion.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
