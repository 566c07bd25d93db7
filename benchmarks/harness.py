"""Timing machinery for posenc's benchmarks: sections of cases, each measured against a floor.

A *section* is a title, the name of its floor case and a list of cases, each a zero-argument
callable; ``Section.of(key, title, floor, [(name, label, run), ...])`` builds one from the
tuples that ``make_cases`` functions return. Every section is measured the same way:

- the cases of a section run in interleaved rounds (every case once per round, in order), so
  that a slow moment of the machine is shared by all of them; each round times ``calls``
  calls of each case and keeps their median; a figure is the median of the rounds, shown
  with the rounds' range (min–max);
- before every timed call a 64 MiB buffer is written, so that no case finds its inputs,
  weights or tables in the caches left by the previous call (a 31 MiB table stays in a
  32 MiB L3 in a tight loop); the flush is not timed. A case marked ``warm`` is timed in a
  tight loop instead, and its label says so;
- every figure is also a ratio to the section's floor (and to its baseline, if it has one),
  measured in the same run;
- the whole measurement runs twice, in two child processes: with glibc's default allocator,
  and with ``GLIBC_TUNABLES`` set so that freed memory is kept. glibc hands every freed
  block over 32 MiB back to the OS, so each fresh output of that size page-faults again on
  first touch; whether a case pays that depends on what ran before it, and the default
  figures of large outputs are bimodal. The two runs are merged into one report.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch

TUNABLES = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184"
# The two allocator settings every figure is measured with, in the report's order.
ALLOCATORS = {
    "default": "glibc's default allocator",
    "stable": f"GLIBC_TUNABLES={TUNABLES}",
}


@dataclass
class Case:
    """One candidate: ``run()`` does the work once."""

    name: str
    label: str
    run: Callable[[], object]
    warm: bool = False  # timed back to back, without flushing the caches


@dataclass
class Section:
    """Cases measured together against the floor case named ``floor``."""

    key: str
    title: str
    floor: str
    cases: list[Case]
    note: str = ""  # the shapes, the mode, and the floor stated as operations
    baseline: str | None = None
    training: bool = False  # autograd on (forward and backward); else inference mode
    calls: int | None = None  # timed calls per round; None: the run's setting

    @classmethod
    def of(
        cls,
        key: str,
        title: str,
        floor: str,
        cases: Iterable[tuple[str, str, Callable[[], object]]],
        **options: Any,
    ) -> Section:
        return cls(key, title, floor, [Case(*case) for case in cases], **options)

    def __post_init__(self) -> None:
        names = [case.name for case in self.cases]
        for name in (self.floor, self.baseline):
            if name is not None and name not in names:
                raise ValueError(f"section {self.key!r} has no case {name!r} (it has {names})")


@dataclass
class Settings:
    rounds: int = 7
    calls: int = 5
    flush_mib: int = 64
    threads: int = 2


class Flush:
    """Writes a buffer larger than the last-level cache, evicting whatever a case left."""

    def __init__(self, mib: int) -> None:
        self.buffer = torch.empty(mib * 2**20 // 4, dtype=torch.float32)
        self.value = 0.0

    def __call__(self) -> None:
        self.value += 1.0
        self.buffer.fill_(self.value)


@dataclass
class Timings:
    rounds: dict[str, list[float]] = field(default_factory=dict)  # seconds, per case


def _context(section: Section) -> AbstractContextManager[Any]:
    return torch.enable_grad() if section.training else torch.inference_mode()


def measure(section: Section, settings: Settings, flush: Flush) -> Timings:
    """Interleaved rounds; each round keeps the median of ``calls`` timed calls per case."""
    calls = section.calls or settings.calls
    timings = Timings({case.name: [] for case in section.cases})
    with _context(section):
        for case in section.cases:  # warm-up, and torch.compile's compilation
            for _ in range(2):
                case.run()
        gc.collect()
        gc.disable()  # no collection inside a timed call
        try:
            for _ in range(settings.rounds):
                for case in section.cases:
                    times = []
                    if case.warm:
                        case.run()
                    for _ in range(calls):
                        if not case.warm:
                            flush()
                        start = time.perf_counter()
                        case.run()
                        times.append(time.perf_counter() - start)
                    timings.rounds[case.name].append(statistics.median(times))
        finally:
            gc.enable()
    return timings


def summary(section: Section, timings: Timings) -> list[dict[str, Any]]:
    """Per case: the rounds, their median and range, and the ratios to floor and baseline."""
    medians = {name: statistics.median(times) for name, times in timings.rounds.items()}
    floor = medians[section.floor]
    base = medians[section.baseline] if section.baseline else None
    rows = []
    for case in section.cases:
        times = timings.rounds[case.name]
        rows.append(
            {
                "rounds_ms": [t * 1e3 for t in times],
                "median_ms": medians[case.name] * 1e3,
                "min_ms": min(times) * 1e3,
                "max_ms": max(times) * 1e3,
                "vs_floor": medians[case.name] / floor,
                "vs_baseline": medians[case.name] / base if base else None,
            }
        )
    return rows


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory = None
    with contextlib.suppress(ValueError, OSError, AttributeError):
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    caps = torch.backends.cpu.get_cpu_capability()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory / 2**30, 1) if memory else None,
        "cpu_capability": caps,
        "os": platform.platform(terse=True),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def load() -> float | None:
    """The machine's 1-minute load average (other work running alongside), if known."""
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


# -- The two allocator runs -------------------------------------------------------------


def run_child(
    sections: Callable[[], Iterable[Section | tuple[str, str]]],
    settings: Settings,
    out_path: str,
) -> None:
    """Measure every section in this process; write the results to ``out_path``.

    ``sections()`` yields sections, or ``(key, reason)`` for a section that could not
    be built here (reported, not measured).
    """
    torch.set_num_threads(settings.threads)
    flush = Flush(settings.flush_mib)
    results: list[dict[str, Any]] = []
    load_before = load()
    for section in sections():
        if isinstance(section, tuple):
            key, reason = section
            print(f"  {key}: skipped ({reason})", flush=True)
            results.append({"key": key, "skipped": reason})
            continue
        started = time.perf_counter()
        timings = measure(section, settings, flush)
        print(f"  {section.key}: {time.perf_counter() - started:.0f} s", flush=True)
        results.append(
            {
                "key": section.key,
                "title": section.title,
                "note": section.note,
                "floor": section.floor,
                "baseline": section.baseline,
                "cases": [
                    {"name": c.name, "label": c.label, "warm": c.warm, **row}
                    for c, row in zip(section.cases, summary(section, timings), strict=True)
                ],
            }
        )
    with open(out_path, "w") as f:
        json.dump({"load": [load_before, load()], "sections": results}, f)


def run_both(script: str, argv: list[str]) -> dict[str, Any]:
    """Run ``script argv --child PATH`` once per allocator setting; merge what they wrote."""
    runs: dict[str, Any] = {}
    for allocator, description in ALLOCATORS.items():
        env = dict(os.environ)
        env.pop("GLIBC_TUNABLES", None)
        if allocator == "stable":
            env["GLIBC_TUNABLES"] = TUNABLES
        print(f"{allocator} allocator ({description}):", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.json")
            subprocess.run([sys.executable, script, *argv, "--child", path], env=env, check=True)
            with open(path) as f:
                runs[allocator] = json.load(f)
    return merge(runs)


def merge(runs: dict[str, Any]) -> dict[str, Any]:
    """One list of sections whose cases carry one summary per allocator setting."""
    first = next(iter(runs.values()))
    sections = []
    for i, section in enumerate(first["sections"]):
        if "skipped" in section:
            sections.append(section)
            continue
        merged = {k: v for k, v in section.items() if k != "cases"}
        merged["cases"] = []
        for j, case in enumerate(section["cases"]):
            entry = {k: case[k] for k in ("name", "label", "warm")}
            entry["allocators"] = {
                allocator: {
                    k: v
                    for k, v in run["sections"][i]["cases"][j].items()
                    if k not in ("name", "label", "warm")
                }
                for allocator, run in runs.items()
            }
            merged["cases"].append(entry)
        sections.append(merged)
    return {
        "allocators": ALLOCATORS,
        "load": {allocator: run["load"] for allocator, run in runs.items()},
        "sections": sections,
    }


# -- The report --------------------------------------------------------------------------


def report(results: dict[str, Any]) -> str:
    """The merged results as text: one table per section, both allocator settings."""
    m, s = results["machine"], results["settings"]
    lines = [
        f"posenc {results['posenc']} benchmark, {results['date']}",
        f"{m['cpu']}, {m['cores']} cores ({m['cpu_capability']}), {m['os']}; "
        f"Python {m['python']}, torch {m['torch']}; {s['threads']} threads",
        f"{s['rounds']} interleaved rounds of {s['calls']} calls (table: 1 call); a figure is "
        "the median of the rounds' medians, [min-max] of the rounds;",
        f"caches flushed ({s['flush_mib']} MiB written) before every call unless 'warm'.",
        "Allocator settings: " + "; ".join(f"{k} = {v}" for k, v in results["allocators"].items()),
        "Load average (1 min) at start and end of each run: "
        + "; ".join(f"{k} {v[0]} -> {v[1]}" for k, v in results["load"].items()),
    ]
    for section in results["sections"]:
        lines.append("")
        if "skipped" in section:
            lines.append(f"## {section['key']}: not measured ({section['skipped']})")
            continue
        lines.append(f"## {section['title']}")
        if section["note"]:
            lines.append(section["note"])
        width = max(len(c["label"]) for c in section["cases"]) + 2
        head = f"{'':{width}}"
        for allocator in results["allocators"]:
            head += f"| {allocator:^31}"
        lines.append(head)
        sub = f"{'case':{width}}" + "| median ms [min-max]     x floor " * len(
            results["allocators"]
        )
        if section.get("baseline"):
            sub += "| x baseline (stable)"
        lines.append(sub)
        for case in section["cases"]:
            row = f"{case['label']:{width}}"
            for allocator in results["allocators"]:
                a = case["allocators"][allocator]
                spread = f"[{a['min_ms']:.4g}-{a['max_ms']:.4g}]"
                row += f"| {a['median_ms']:8.4g} {spread:<16} {a['vs_floor']:5.2f} "
            if section.get("baseline"):
                row += f"| {case['allocators']['stable']['vs_baseline']:5.2f}"
            lines.append(row)
    return "\n".join(lines)
