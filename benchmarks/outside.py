"""One case of a bench section, called N times in a process of its own: for timing from outside.

``bench.py`` times each case inside one process, with caches flushed before every call.
This script gives the same cases to a timer outside the process, which sees none of
that machinery: run it for two cases of a section, and for zero calls, under
``/usr/bin/time`` (or any timer of whole commands), and the difference of the whole
runs is the difference of the calls; ``(t_A - t_0) / (t_B - t_0)`` is their ratio,
with ``t_0`` the run of zero calls (the imports and the building of the section, the
same for every case). The calls run back to back, in inference mode as in the bench,
with warm caches: the bench's cold-cache figures and these bracket what a model sees.

    python benchmarks/outside.py decode-float32-input fused 20000
    python benchmarks/outside.py decode-float32-input plain 20000
    python benchmarks/outside.py decode-float32-input plain 0

The section keys are those of ``bench.py --sections`` (``hf-rotary-float32-1``,
``decode-bfloat16-rope``, ``bias-512``, ...) and the case names those of its cases
(``--list`` prints them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench  # type: ignore[import-not-found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("section", help="a section key of bench.py")
    parser.add_argument("case", nargs="?", help="a case name of that section")
    parser.add_argument("calls", nargs="?", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--list", action="store_true", help="print the section's case names")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    builders = bench.peer_sections()
    if args.section not in builders:
        parser.error(f"no section {args.section!r}; the sections: {', '.join(builders)}")
    section = builders[args.section]()
    if isinstance(section, tuple):
        parser.error(f"section {args.section!r} cannot be built here: {section[1]}")
    cases = {case.name: case for case in section.cases}
    if args.list or args.case is None:
        print("\n".join(f"{name}: {case.label}" for name, case in cases.items()))
        return
    if args.case not in cases:
        parser.error(f"no case {args.case!r} in {args.section}; its cases: {', '.join(cases)}")
    run = cases[args.case].run
    context = torch.enable_grad() if section.training else torch.inference_mode()
    with context:
        for _ in range(args.calls):
            run()


if __name__ == "__main__":
    main()
