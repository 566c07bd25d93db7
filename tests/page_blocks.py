"""Run one docs page's doctest blocks in order, the random state disturbed between them.

Used by ``tests/test_page_blocks.py``, which starts one fresh interpreter per page::

    python tests/page_blocks.py PAGE.json RESULT.json

``PAGE.json`` holds the page's groups as ``sphinx.ext.doctest`` forms them (setup,
tests and cleanup blocks, each with its source, its first line in the page and its
doctest flags) and the flags of ``docs/conf.py``. Each group runs in a namespace of its
own, in the order of its first block, as the doctest builder runs them; before every
block, torch's, NumPy's and Python's random generators draw a different number of
values, so that a block which prints random numbers without seeding them itself prints
something else. ``RESULT.json`` gets one entry per failed example: the line in the page,
the source and the difference between what the page shows and what ran.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import json
import random
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

PARSER = doctest.DocTestParser()


def disturb(index: int) -> None:
    """Draw a different number of values from each generator before block ``index``."""
    torch.rand(1 + (37 * index + 11) % 89)
    np.random.rand(1 + (53 * index + 5) % 97)  # noqa: NPY002 (the global generator)
    for _ in range(1 + (29 * index + 3) % 83):
        random.random()


class Collecting(doctest.DocTestRunner):
    """A runner that records each failure with its line in the page."""

    def __init__(self, flags: int, failures: list[dict[str, Any]]) -> None:
        super().__init__(verbose=False, optionflags=flags)
        self.failed: list[dict[str, Any]] = failures
        self.first_line = 0

    def _record(self, example: doctest.Example, text: str) -> None:
        self.failed.append(
            {"line": self.first_line + example.lineno, "source": example.source, "diff": text}
        )

    def report_failure(
        self, out: Any, test: doctest.DocTest, example: doctest.Example, got: str
    ) -> None:
        self._record(example, self._checker.output_difference(example, got, self.optionflags))

    def report_unexpected_exception(
        self, out: Any, test: doctest.DocTest, example: doctest.Example, exc_info: Any
    ) -> None:
        self._record(example, "raised:\n" + "".join(traceback.format_exception(*exc_info[:2])))


def flags_of(options: dict[str, bool]) -> dict[int, bool]:
    return {doctest.OPTIONFLAGS_BY_NAME[name]: on for name, on in options.items()}


def run_code(code: str, name: str, ns: dict[str, Any]) -> str:
    """Run a ``testsetup``/``testcode``/``testcleanup`` block; what it printed or raised."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, name, "exec"), ns)
    except Exception as error:
        lines = traceback.format_exception_only(type(error), error)
        return out.getvalue() + "Traceback (most recent call last):\n" + "".join(lines)
    return out.getvalue()


def run_page(page: dict[str, Any]) -> list[dict[str, Any]]:
    failures: list[dict[str, Any]] = []
    runner = Collecting(page["flags"], failures)
    checker = doctest.OutputChecker()
    index = 0
    for group in page["groups"]:
        ns: dict[str, Any] = {"__name__": "__main__"}
        for block in group["setup"]:
            disturb(index)
            index += 1
            got = run_code(block["source"], page["name"], ns)
            if "Traceback" in got:
                failures.append({"line": block["line"], "source": block["source"], "diff": got})
        for test in group["tests"]:
            disturb(index)
            index += 1
            code, output = test[0], test[1] if len(test) > 1 else None
            if code["type"] == "doctest":
                parsed = PARSER.get_doctest(code["source"], {}, group["name"], page["name"], 0)
                for example in parsed.examples:
                    example.options = {**flags_of(code["options"]), **example.options}
                parsed.globs = ns
                runner.first_line = code["line"]
                runner.run(parsed, clear_globs=False)
                continue
            # testcode, compared with the testoutput that follows it (if any)
            want = output["source"] if output else ""
            flags = page["flags"]
            for flag, on in flags_of(output["options"] if output else {}).items():
                flags = flags | flag if on else flags & ~flag
            got = run_code(code["source"], page["name"], ns)
            if not checker.check_output(want, got, flags | doctest.DONT_ACCEPT_BLANKLINE):
                example = doctest.Example(code["source"], want)
                diff = checker.output_difference(example, got, flags)
                failures.append({"line": code["line"], "source": code["source"], "diff": diff})
        for block in group["cleanup"]:
            got = run_code(block["source"], page["name"], ns)
            if "Traceback" in got:
                failures.append({"line": block["line"], "source": block["source"], "diff": got})
    return failures


if __name__ == "__main__":
    page = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    failures = run_page(page)
    Path(sys.argv[2]).write_text(json.dumps(failures), encoding="utf-8")
