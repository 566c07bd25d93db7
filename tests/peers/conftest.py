"""Golden tests against the peers' own code, run by ``nox -s peers`` only.

Each test imports a peer library's function and compares posenc with it. No test
here re-types a peer's formula: where a peer's function is used, it is called.
The peers run offline: models are built from small configs, nothing is downloaded.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DIFFUSERS_OFFLINE", "1")
