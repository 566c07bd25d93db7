"""What each position scheme does to a model that learns with it: a trained comparison on CPU.

The method (data splits, model, evaluation, passkey) is ``train_method.py``; the analysis
(paired t-intervals, verdicts on the papers' findings) is ``train_analysis.py``. This
file is the set of runs and the command that builds it, one file per run in
``benchmarks/results/train/`` (the schema: DESIGN.md, "Saved results"):

1. **sweep**: every scheme at each scale, seed 0, at each of ``SWEEP_LRS``; the learning rate
   with the lowest validation loss at L_train is the scheme's choice at that scale;
2. **main**: every scheme at its chosen rate, seeds 1-5 at the first scale, 1-3 at the second
   (read from the sweep's files: a main run waits until its sweep is complete). RoPE's main
   runs also give the inference-time scalings' rows (no training);
3. **fine-tune**: a RoPE model of 4 layers pretrained at L_train = 64 with half of its rows
   passkey examples (at 3e-3, ``finetune_lr``: see Choices), seeds 1-3, then fine-tuned at
   4 x L_train with each scaling (none, linear/PI, dynamic NTK, YaRN), recorded after 0, 50,
   200 and 1000 steps. Pretrained models are cached under ``results/train/checkpoints/``
   (ignored by git; recomputed, bit for bit, when absent).

A run's identity is its config (``Config``): a run whose file holds an equal config is done and
skipped, a file with another config is redone, so the set is built over several sittings.
Each run is one process with one thread (two worker processes by default): at a fixed thread
count a rerun is bit-identical on the same CPU.

Choices, and what they rest on (the figures: ``--measure``, 1 thread, on this project's
2-core Intel Xeon VM shared with other work, load 3-5; an idle machine is faster):

- **The second scale** is today's model at L_train = 256, not 4 layers of d_model 128 at 128:
  a step of either costs ~10x a step of the first scale (453 and 338 ms against 43), and the
  training length is what Press et al. vary (ALiBi's lead in distribution grows with it); at
  1000 steps it sees twice the first scale's tokens.
- **The passkey model** retrieves only after a sudden change, at a step that differs from
  seed to seed (the rate is constant, so a longer run is a shorter one continued). At rate
  3e-3 seed 1 retrieved 100% at 32 and 64 bytes after 4000 steps; seeds 2 and 3 retrieved
  6-11%, and fine-tuning them for 1000 steps at 256 bytes, with any scaling, left them at
  0-3%: fine-tuning does not teach what pretraining did not. After 8000 steps seed 2
  retrieved 41% and 25%; after 16000, 100%. So the passkey models pretrain 16000 steps, at
  3e-3 (``finetune_lr``). At RoPE's chosen rate at the small scale, 1e-2, the models of
  seeds 1-3 retrieved nothing after 4000 steps, at any input length from 32 bytes (seed 1's
  digits each right 14-28% of the time, against 10% by chance), and fine-tuning seed 1's
  for 1000 steps with any scaling changed nothing.
- **torch.compile** of the model (inductor, the first scale's RoPE step, 1 thread) took 41 s to
  compile and 126 ms a step against eager's 43-91 ms on the same machine; two compiled runs
  are bit-identical to each other, not to eager. It is slower here, so it is not used.

    python benchmarks/train.py --plan                         # what remains, and its time
    python benchmarks/train.py                                # build (or resume) the whole set
    python benchmarks/train.py --scales small --roles sweep   # a part of it
    python benchmarks/train.py --quick --out /tmp/quick.json  # the pipeline in ~1-2 minutes
    python benchmarks/train.py --analyse                      # the verdicts of the saved runs
    python benchmarks/train.py --measure                      # per-step costs, 1 thread
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import multiprocessing
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import train_analysis  # benchmarks/ is not a package: its folder is on the path
import train_method as method
from train_method import SCALES, SCHEMES, Config, Finetune

FOLDER = Path(__file__).parent / "results" / "train"
SWEEP_LRS = (1e-3, 3e-3, 1e-2)
SWEEP_SEED = 0


@dataclass(frozen=True)
class Plan:
    """The set of runs: per scale its steps, sweep rates and main seeds; the fine-tune arms."""

    scales: dict[str, tuple[int, tuple[float, ...], tuple[int, ...]]]
    schemes: tuple[str, ...] = SCHEMES
    finetune_steps: int = 16000  # pretraining of the passkey model (see the docstring)
    finetune_seeds: tuple[int, ...] = (1, 2, 3)
    finetune_scalings: tuple[str, ...] = method.FINETUNE_SCALINGS
    finetune_checkpoints: tuple[int, ...] = (0, 50, 200, 1000)
    finetune_from: str = "small"  # the scale whose RoPE rate the passkey model trains at...
    finetune_lr: float | None = None  # ...unless this is set (see the docstring)
    finetune_scale: str = "passkey"  # the pretrained model's scale
    device: str = "cpu"
    lr: dict[str, float] = field(default_factory=dict)  # fixed rates (no sweep), by scheme


# The whole set; the budget (``--plan``) is in the module's README below.
FULL = Plan(
    scales={
        "small": (2000, SWEEP_LRS, (1, 2, 3, 4, 5)),
        "long": (1000, SWEEP_LRS, (1, 2, 3)),
    },
    finetune_lr=3e-3,
)
# The quick mode: every part of the pipeline, on a short budget (CI runs it).
QUICK = Plan(
    scales={"small": (300, (3e-3,), (0,))},
    finetune_steps=100,
    finetune_seeds=(0,),
    finetune_scalings=("none", "yarn"),
    finetune_checkpoints=(0, 10),
)

# Seconds per training step, 1 thread (``--measure``): RoPE on this project's 2-core Intel Xeon
# VM at load 0.7; ALiBi's and T5's steps cost about the same. Under load 4-5 every figure is
# 1.4-1.7x larger. Fine-tuning (8 rows of 256 bytes) costs 2.0x the passkey model's 64-byte
# step, measured under load. ``--plan`` prefers the saved runs' own times.
STEP_SECONDS = {("small", 64): 0.043, ("long", 256): 0.453, ("passkey", 64): 0.080}
FINETUNE_STEP_SECONDS = {256: 0.16}
# One evaluation (validation or test at 1-8x; the passkey's distances), loaded machine: at the
# long scale an additive mask (ALiBi, T5) takes attention's slow path to 2048 bytes (10 s).
EVAL_SECONDS = {"small": 2.0, "long": 10.0, "passkey": 4.0}
START_SECONDS = 3.0  # a worker's job: import, data, model


@dataclass(frozen=True)
class Job:
    """One process's work: train ``config`` (and fine-tune it, at ``checkpoints``); the files
    it writes are those of ``outputs``."""

    config: Config
    outputs: tuple[Config, ...]
    checkpoints: tuple[int, ...] = ()

    @property
    def kind(self) -> str:
        if self.config.finetune is not None:
            return "finetune"
        return self.config.role

    def label(self) -> str:
        c = self.config
        text = f"{c.role:<5} {c.scale.name:<7} {c.scheme:<8} seed {c.seed} lr {c.lr:g}"
        if c.finetune is not None:
            text += f" fine-tune {c.finetune.scaling} x{c.finetune.length} to {c.finetune.steps}"
        return text


@dataclass(frozen=True)
class Blocked:
    """A run that waits for others: its learning rate comes from a sweep not yet complete, or
    it fine-tunes a model not yet trained."""

    kind: str
    scale: str
    scheme: str
    seed: int
    cost: float  # estimated seconds
    finetune: str | None = None


# -- saved runs ------------------------------------------------------------------------------
def normal(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(value))


def saved(folder: Path, config: Config) -> dict[str, Any] | None:
    """The saved record of ``config``, or None: absent, unreadable, or of another config."""
    path = folder / config.name()
    try:
        record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if record.get("config") == normal(config.identity()) else None


def write(folder: Path, record: dict[str, Any]) -> Path:
    path = folder / method.config_from_identity(record["config"]).name()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    partial.replace(path)
    return path


def done(folder: Path, job: Job) -> bool:
    return all(saved(folder, output) is not None for output in job.outputs)


def chosen_lr(folder: Path, plan: Plan, scheme: str, scale: str) -> float | None:
    """The rate of ``scheme`` at ``scale``: the sweep's lowest validation loss at L_train.
    None while a sweep run is missing."""
    rates = plan.scales[scale][1]
    if scheme in plan.lr:
        return plan.lr[scheme]
    if len(rates) == 1:
        return rates[0]
    found = []
    for lr in rates:
        record = saved(folder, sweep_config(plan, scheme, scale, lr))
        if record is None:
            return None
        loss = record["validation"]["1"]
        found.append((loss if loss is not None and math.isfinite(loss) else math.inf, lr))
    return min(found)[1]  # a diverged run (nan) is never chosen


def sweep_config(plan: Plan, scheme: str, scale: str, lr: float) -> Config:
    steps = plan.scales[scale][0]
    return Config(scheme, SWEEP_SEED, lr, "sweep", SCALES[scale], steps, device=plan.device)


def main_outputs(config: Config) -> tuple[Config, ...]:
    if config.scheme != "rope":
        return (config,)
    scaled = tuple(replace(config, scheme=f"rope+{kind}") for kind in method.SCALINGS)
    return (config, *scaled)


# -- the plan --------------------------------------------------------------------------------
def jobs(plan: Plan, folder: Path) -> list[Job | Blocked]:
    """Every run of ``plan``, in order: sweeps, main runs, the passkey models, fine-tuning."""
    found: list[Job | Blocked] = []
    for scale, (_, rates, _) in plan.scales.items():
        if len(rates) > 1:
            for scheme in plan.schemes:
                if scheme in plan.lr:
                    continue
                for lr in rates:
                    config = sweep_config(plan, scheme, scale, lr)
                    found.append(Job(config, (config,)))
    for scale, (steps, _, seeds) in plan.scales.items():
        for scheme in plan.schemes:
            main_lr = chosen_lr(folder, plan, scheme, scale)
            for seed in seeds:
                if main_lr is None:
                    cost = estimate_training(scale, steps, SCALES[scale].L_train)
                    found.append(Blocked("main", scale, scheme, seed, cost))
                    continue
                config = Config(
                    scheme, seed, main_lr, "main", SCALES[scale], steps, device=plan.device
                )
                found.append(Job(config, main_outputs(config)))
    if not plan.finetune_scalings:
        return found
    rope_lr = (
        plan.finetune_lr
        if plan.finetune_lr is not None
        else chosen_lr(folder, plan, "rope", plan.finetune_from)
    )
    passkey = SCALES[plan.finetune_scale]
    length = method.FINETUNE_MULTIPLE * passkey.L_train
    last = max(plan.finetune_checkpoints)
    for seed in plan.finetune_seeds:
        if rope_lr is None:
            cost = estimate_training("passkey", plan.finetune_steps, passkey.L_train)
            found.append(Blocked("main", passkey.name, "rope", seed, cost))
            for kind in plan.finetune_scalings:
                ft_cost = estimate_finetune(plan, length)
                found.append(Blocked("finetune", passkey.name, "rope", seed, ft_cost, kind))
            continue
        base = Config(
            "rope",
            seed,
            rope_lr,
            "main",
            passkey,
            plan.finetune_steps,
            passkey=method.PASSKEY_FRACTION,
            device=plan.device,
        )
        found.append(Job(base, (base,)))
        for kind in plan.finetune_scalings:
            if saved(folder, base) is None:  # fine-tuning starts from the saved base model
                ft_cost = estimate_finetune(plan, length)
                found.append(Blocked("finetune", passkey.name, "rope", seed, ft_cost, kind))
                continue
            config = replace(base, finetune=Finetune(kind, last, length))
            outputs = tuple(
                replace(base, finetune=Finetune(kind, n, length))
                for n in sorted(plan.finetune_checkpoints)
            )
            found.append(Job(config, outputs, tuple(sorted(plan.finetune_checkpoints))))
    return found


def select(
    found: list[Job | Blocked],
    schemes: Sequence[str] | None = None,
    roles: Sequence[str] | None = None,
    scales: Sequence[str] | None = None,
    scalings: Sequence[str] | None = None,
) -> list[Job | Blocked]:
    """The jobs of the chosen schemes, roles (sweep, main, finetune), scales and fine-tune
    scalings; None keeps all."""
    kept = []
    for job in found:
        if isinstance(job, Job):
            c = job.config
            kind, scale, scheme = job.kind, c.scale.name, c.scheme
            scaling = c.finetune.scaling if c.finetune is not None else None
        else:
            kind, scale, scheme, scaling = job.kind, job.scale, job.scheme, job.finetune
        if schemes is not None and scheme not in schemes:
            continue
        if roles is not None and kind not in roles:
            continue
        if scales is not None and scale not in scales:
            continue
        if scalings is not None and scaling is not None and scaling not in scalings:
            continue
        kept.append(job)
    return kept


# -- the budget ------------------------------------------------------------------------------
def estimate_training(scale: str, steps: int, length: int) -> float:
    per_step = STEP_SECONDS.get((scale, length), 0.05)
    evaluations = 2  # validation and test (RoPE's main runs: 3 more, the scalings)
    return START_SECONDS + steps * per_step + evaluations * EVAL_SECONDS.get(scale, 10.0)


def estimate_finetune(plan: Plan, length: int) -> float:
    steps = max(plan.finetune_checkpoints)
    per_step = FINETUNE_STEP_SECONDS.get(length, 0.16 * length / 256)
    evaluations = len(plan.finetune_checkpoints) * EVAL_SECONDS["passkey"]
    return START_SECONDS + steps * per_step + evaluations


Observed = dict[tuple[str, int, int], float]


def observed(folder: Path) -> Observed:
    """Seconds a job took, from the saved runs: the median per (scale, pretraining steps,
    fine-tuning steps), where 0 fine-tuning steps is a pretraining job."""
    times: dict[tuple[str, int, int], list[float]] = {}
    for record in train_analysis.load(folder):
        config = record.get("config") or {}
        total = (record.get("time") or {}).get("total_s")
        if not config or total is None:
            continue
        tuned = config["finetune"]["steps"] if config.get("finetune") else 0
        key = (config["scale"]["name"], config["steps"], tuned)
        times.setdefault(key, []).append(float(total))
    return {key: statistics.median(values) for key, values in times.items()}


def estimate(job: Job | Blocked, plan: Plan, seen: Observed | None = None) -> float:
    """A job's seconds: as long as the saved jobs of its kind took, else from STEP_SECONDS."""
    if isinstance(job, Blocked):
        return job.cost
    c = job.config
    tuned = c.finetune.steps if c.finetune is not None else 0
    if seen and (c.scale.name, c.steps, tuned) in seen:
        return seen[(c.scale.name, c.steps, tuned)]
    if c.finetune is not None:
        return estimate_finetune(plan, c.finetune.length)
    return estimate_training(c.scale.name, c.steps, c.scale.L_train)


def wall_time(costs: Sequence[float], workers: int) -> float:
    """The wall time of ``costs`` on ``workers`` (longest first, each to the least loaded)."""
    loads = [0.0] * max(workers, 1)
    for cost in sorted(costs, reverse=True):
        loads[loads.index(min(loads))] += cost
    return max(loads)


def describe_plan(found: list[Job | Blocked], plan: Plan, folder: Path, workers: int) -> str:
    remaining = [job for job in found if isinstance(job, Blocked) or not done(folder, job)]
    seen = observed(folder)
    finished = len(found) - len(remaining)
    groups: dict[tuple[str, str], list[float]] = {}
    for job in remaining:
        scale = job.config.scale.name if isinstance(job, Job) else job.scale
        key = (job.kind, scale)
        groups.setdefault(key, []).append(estimate(job, plan, seen))
    lines = [f"{finished} of {len(found)} jobs done; remaining, estimated at 1 thread a worker:"]
    for (kind, scale), costs in groups.items():
        lines.append(f"  {kind:<8} {scale:<7} {len(costs):3d} jobs  {sum(costs) / 60:7.1f} min")
    blocked = sum(isinstance(job, Blocked) for job in remaining)
    costs = [estimate(job, plan, seen) for job in remaining]
    wall = wall_time(costs, workers) if costs else 0.0
    lines.append(
        f"  total {sum(costs) / 3600:.2f} h of work, about {wall / 3600:.2f} h wall at "
        f"{workers} workers ({blocked} jobs wait for others)"
    )
    return "\n".join(lines)


def measure_costs(steps: int = 10) -> str:
    """Seconds per training step at each scale and fine-tuning length, and per evaluation, at
    one thread (what STEP_SECONDS, FINETUNE_STEP_SECONDS and EVAL_SECONDS hold)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        lines = ["1 thread; per step (after a warm-up step), and one evaluation (test + passkey):"]
        data = method.Data.load()
        cases = [
            (name, SCALES[name].L_train, scheme)
            for name in ("small", "long")
            for scheme in ("rope", "alibi")
        ]
        cases.append(("passkey", SCALES["passkey"].L_train, "rope"))
        cases.append(("passkey", method.FINETUNE_MULTIPLE * SCALES["passkey"].L_train, "rope"))
        for name, length, scheme in cases:
            scale = SCALES[name]
            fraction = method.PASSKEY_FRACTION if name == "passkey" else 0.0
            cost = method.step_cost(scale, length, steps, fraction, scheme)
            model = method.Decoder(scheme, scale).eval()
            start = time.perf_counter()
            method.evaluate(model, data, "test")
            if name == "passkey":
                method.passkey_accuracy(model, 0)
            evaluation = time.perf_counter() - start
            rows = method.BATCH * scale.L_train // length
            lines.append(
                f"  {name:<8} {scheme:<5} {rows:2d} x {length:4d}: {1000 * cost:7.1f} ms/step, "
                f"evaluation {evaluation:5.1f} s"
            )
        return "\n".join(lines)
    finally:
        torch.set_num_threads(before)


# -- running ---------------------------------------------------------------------------------
def work(job: Job, folder: Path | None, threads: int = 1) -> list[dict[str, Any]]:
    """Run ``job`` at ``threads`` intra-op threads (restored afterwards): its records."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        if job.config.finetune is not None:
            return method.execute_finetune(job.config, job.checkpoints, folder)
        return method.execute_base(job.config, folder)
    finally:
        torch.set_num_threads(before)


def _worker(job: Job, folder: Path) -> list[dict[str, Any]]:
    return work(job, folder, threads=1)


def progress(job: Job, records: list[dict[str, Any]]) -> str:
    row = records[-1]
    shown = " ".join(
        f"{m}x {'  -  ' if value is None else format(value, '.3f')}"
        for m, value in row["loss"].items()
    )
    if row.get("passkey"):
        shown += " passkey " + " ".join(f"{d}:{a:.2f}" for d, a in row["passkey"].items())
    return f"{job.label()}: {shown} ({row['time']['total_s']:.0f} s)"


def build(
    plan: Plan,
    folder: Path,
    workers: int,
    choose: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Run every job of ``plan`` not yet done, in rounds (a round's sweeps unblock the next
    round's main runs), in ``workers`` single-thread processes; the records written."""
    written: list[dict[str, Any]] = []
    context = multiprocessing.get_context("spawn")
    attempted: set[str] = set()
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        while True:
            found = select(jobs(plan, folder), **(choose or {}))
            ready = [
                job
                for job in found
                if isinstance(job, Job)
                and job.config.name() not in attempted
                and not done(folder, job)
            ]
            if not ready:
                break
            attempted.update(job.config.name() for job in ready)
            futures = {pool.submit(_worker, job, folder): job for job in ready}
            for future in concurrent.futures.as_completed(futures):
                job = futures[future]
                records = future.result()
                for record in records:
                    write(folder, record)
                written.extend(records)
                print(progress(job, records), flush=True)
    return written


def summary(found: list[Job | Blocked], folder: Path, seconds: float) -> dict[str, Any]:
    """A report of the selected runs saved in ``folder`` (schema records without the per-block
    losses), with the analysis."""
    records = [
        record
        for job in found
        if isinstance(job, Job)
        for output in job.outputs
        if (record := saved(folder, output)) is not None
    ]
    runs = [{k: v for k, v in r.items() if k not in ("blocks", "config")} for r in records]
    runs.sort(key=lambda r: (r["role"], r["scale"]["L_train"], r["scheme"], r["seed"]))
    return {
        "description": "trained comparison of position schemes: loss in nats per byte",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "folder": str(folder),
        "complete": all(isinstance(job, Job) and done(folder, job) for job in found),
        **method.environment(),
        "data": method.Data.load().summary(),
        "time": {"total_s": round(seconds, 1), "runs": len(runs)},
        "runs": runs,
        "analysis": train_analysis.analyse(records),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the pipeline on a short budget")
    parser.add_argument("--out", type=Path, default=None, help="also write a summary here")
    parser.add_argument("--folder", type=Path, default=None, help=f"the runs (default {FOLDER})")
    parser.add_argument("--plan", action="store_true", help="print what remains; run nothing")
    parser.add_argument("--analyse", action="store_true", help="the verdicts of the saved runs")
    parser.add_argument("--measure", action="store_true", help="per-step costs at 1 thread")
    parser.add_argument("--schemes", nargs="+", choices=SCHEMES, default=None)
    parser.add_argument("--roles", nargs="+", choices=("sweep", "main", "finetune"))
    parser.add_argument("--scales", nargs="+", choices=tuple(SCALES), default=None)
    parser.add_argument("--scalings", nargs="+", choices=method.FINETUNE_SCALINGS)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda when one is present")
    args = parser.parse_args(argv)
    if args.device != "cpu" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch sees no CUDA device")
    plan = replace(QUICK if args.quick else FULL, device=args.device)
    if args.quick:
        default = (args.out.with_suffix("") if args.out else Path("/tmp/train-quick")) / "runs"
    else:
        default = FOLDER
    folder = args.folder or default
    if args.analyse:
        print(train_analysis.report(train_analysis.load(folder)))
        return
    if args.measure:
        print(measure_costs())
        return
    choose = {
        "schemes": args.schemes,
        "roles": args.roles,
        "scales": args.scales,
        "scalings": args.scalings,
    }
    if args.plan:
        found = select(jobs(plan, folder), **choose)
        print(describe_plan(found, plan, folder, args.workers))
        return
    start = time.perf_counter()
    records = build(plan, folder, args.workers, choose)
    seconds = time.perf_counter() - start
    print(f"{len(records)} runs written to {folder} ({seconds:.0f} s)")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        report = summary(select(jobs(plan, folder), **choose), folder, seconds)
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    print(train_analysis.report(train_analysis.load(folder)))


if __name__ == "__main__":
    main()
