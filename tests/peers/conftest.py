"""Golden tests against the peers' own code, run by ``nox -s peers`` only.

Each test imports a peer library's function and compares posenc with it. No test
here re-types a peer's formula: where a peer's function is used, it is called.
The peers run offline: models are built from small configs, nothing is downloaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DIFFUSERS_OFFLINE", "1")

# Measurements the peers' tests make (their errors against float64), printed at the end
# of the run: `nox -s peers` shows them without -s.
_REPORT: list[str] = []


@pytest.fixture
def peer_report() -> Callable[[str], None]:
    """Append a line to the report printed after the tests."""
    return _REPORT.append


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _REPORT:
        terminalreporter.section("peers measured against float64")
        for line in _REPORT:
            terminalreporter.write_line(line)
