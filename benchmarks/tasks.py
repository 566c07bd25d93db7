"""Length generalization on the papers' own tasks: train on lengths <= n, test at 1, 2, 4 x n.

The tasks where the claims for NoPE (Kazemnejad et al., 2023), randomized positions (Ruoss
et al., 2023) and contextual positions (Golovneva et al., 2024) were made, at a size this CPU
runs: a small decoder learns each task on instances of size 1 .. n and is tested on instances
of size exactly n, 2n and 4n. One file per run in ``benchmarks/results/tasks/`` (the schema:
DESIGN.md, "Saved results"), named ``{task}-{scheme}-{seed}.json``; a run whose file holds an
equal config is done and skipped, so the set is built over several sittings. Each run is one
process with one thread (two worker processes by default).

The tasks (each a prompt, then the answer; the loss and the accuracy are on the answer's
tokens, teacher-forced; "exact" is the share of instances whose every answer token is right):

- **copy** and **reverse** (Kazemnejad et al.): ``n`` symbols, a separator, the symbols again
  (reversed);
- **count** (Golovneva et al.'s counting, simplified): ``n`` symbols, a separator, a query
  symbol; the answer is its number of occurrences modulo 10 (one token: a fixed answer
  vocabulary at every length);
- **select** (selective copy, Golovneva et al.): ``n`` slots of noise holding ``max(1, n // 4)``
  symbols at random places, a separator, the symbols in order;
- **flipflop** (Liu et al., 2023, *Exposing Attention Glitches with Flip-Flop Language
  Modeling*): ``n`` instructions ``w b`` (write bit b), ``i b`` (ignore), ``r b`` (read: b is
  the last written bit), the first a write, then reads and writes each with probability 0.1
  (their FFL(0.8): ignore with probability 0.8); the answers are the bits after every ``r``.

The schemes (named as in the trained comparison, plus the ones these papers proposed):
NoPE, the sinusoid, a learned table (of the longest training sequence's rows: refused past
them and saved as null, "n/a"), RoPE, ALiBi, T5's buckets, KERPLE, FIRE, xPos (its scales'
center at 0: these sequences are far inside float32's range), CoPE, and RoPE and the
sinusoid at randomized positions (``posenc.random_positions``: sorted positions from
``[0, 4 x the longest test sequence)``, in training and at test, as Ruoss et al.'s code
applies them).

    python benchmarks/tasks.py --plan                     # what remains, and its time
    python benchmarks/tasks.py                            # build (or resume) the whole set
    python benchmarks/tasks.py --tasks copy --schemes rope alibi   # a part of it
    python benchmarks/tasks.py --quick --out /tmp/tasks   # copy, one seed, 300 steps, checked
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional

import posenc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_method import environment  # benchmarks/ is not a package: its folder is on the path

FOLDER = Path(__file__).parent / "results" / "tasks"
METHOD = 1  # the method's version, part of every run's identity
TASKS = ("copy", "reverse", "count", "select", "flipflop")
SCHEMES = (
    "nope", "sinusoid", "learned", "rope", "alibi", "t5", "kerple", "fire", "xpos", "cope",
    "rope+random", "sinusoid+random",
)  # fmt: skip
MULTIPLES = (1, 2, 4)
SEEDS = (0, 1, 2)
WORKERS = 2

# Tokens: the symbols, then the task's own.
SYMBOLS = 8
SEP, NOISE, WRITE, IGNORE, READ = range(SYMBOLS, SYMBOLS + 5)
DIGIT = SYMBOLS + 5  # DIGIT + c: the count c (mod 10)
VOCAB = DIGIT + 10


@dataclass(frozen=True)
class Config:
    """One run: its identity (a file with an equal config is this run, done)."""

    task: str
    scheme: str
    seed: int
    n: int = 16  # train on sizes 1 .. n
    # The whole set (12 schemes x 5 tasks x 3 seeds) in <= 3 h at 2 single-thread workers
    # on idle cores: `--plan` measured 1.8 h for these sizes (CPU time per step, see
    # step_seconds); 2 layers and 3,000 steps were 0.97 h, and NoPE needs depth and steps.
    steps: int = 4000
    batch: int = 64
    layers: int = 3
    d_model: int = 64
    heads: int = 4
    lr: float = 1e-3
    eval_instances: int = 128
    method: int = METHOD

    def identity(self) -> dict[str, Any]:
        return asdict(self)


# -- the tasks ---------------------------------------------------------------------------------
def instances(task: str, size: int, count: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """``count`` instances of ``size``: tokens ``(count, T)`` and the answer mask ``(count, T)``.

    The mask is True where a token is an answer: the model predicts it from the tokens before.
    """
    sym = torch.randint(0, SYMBOLS, (count, size), generator=g)
    sep = torch.full((count, 1), SEP)
    if task in ("copy", "reverse"):
        answer = sym if task == "copy" else sym.flip(-1)
        prompt = torch.cat([sym, sep], -1)
    elif task == "count":
        query = torch.randint(0, SYMBOLS, (count, 1), generator=g)
        answer = DIGIT + (sym == query).sum(-1, keepdim=True) % 10
        prompt = torch.cat([sym, sep, query], -1)
    elif task == "select":
        k = max(1, size // 4)
        where = torch.rand(count, size, generator=g).argsort(-1)[:, :k].sort(-1).values
        slots = torch.full((count, size), NOISE)
        slots.scatter_(1, where, sym[:, :k])
        answer, prompt = sym[:, :k], torch.cat([slots, sep], -1)
    elif task == "flipflop":
        u = torch.rand(count, size, generator=g)
        op = torch.where(u < 0.1, WRITE, torch.where(u < 0.2, READ, IGNORE))
        op[:, 0] = WRITE
        bits = torch.randint(0, 2, (count, size), generator=g)
        # the last written bit at each step: the bit at the last write so far
        last_write = torch.where(op == WRITE, torch.arange(size), 0).cummax(-1).values
        bits = torch.where(op == READ, bits.gather(1, last_write), bits)
        tokens = torch.stack([op, bits], -1).reshape(count, 2 * size)
        is_answer = torch.zeros_like(tokens, dtype=torch.bool)
        is_answer[:, 1::2] = op == READ
        return tokens, is_answer
    else:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    tokens = torch.cat([prompt, answer], -1)
    is_answer = torch.zeros_like(tokens, dtype=torch.bool)
    is_answer[:, prompt.shape[1] :] = True
    return tokens, is_answer


def sequence_length(task: str, size: int) -> int:
    """Tokens in an instance of ``size``."""
    return int(instances(task, size, 1, torch.Generator().manual_seed(0))[0].shape[1])


# -- the model ---------------------------------------------------------------------------------
class Block(nn.Module):
    """Pre-LayerNorm decoder block; attention written out, so that CoPE can read the logits."""

    def __init__(self, config: Config, cope: posenc.CoPE | None) -> None:
        super().__init__()
        d, self.heads = config.d_model, config.heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.cope = cope

    def forward(
        self,
        x: Tensor,
        rope: posenc.RotaryEmbedding | None,
        xpos: posenc.XPos | None,
        mask: Tensor,
        pos: Tensor | None,
    ) -> Tensor:
        b, length, d = x.shape
        qkv = self.qkv(self.ln_1(x)).view(b, length, 3, self.heads, d // self.heads)
        q, k, v = qkv.transpose(1, 3).unbind(2)  # (B, H, L, head_dim)
        if rope is not None:
            q, k = rope(q, positions=pos), rope(k, positions=pos)  # glue: RoPE
        if xpos is not None:
            q, k = xpos(q, k, positions=pos)  # glue: xPos
        logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + mask
        if self.cope is not None:
            logits = logits + self.cope(q, logits)  # glue: CoPE
        a = torch.softmax(logits, -1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, length, d))
        out: Tensor = x + self.ff(self.ln_2(x))
        return out


class Model(nn.Module):
    """A small decoder; ``scheme`` picks the position scheme."""

    def __init__(self, config: Config, train_tokens: int, max_position: int) -> None:
        super().__init__()
        if config.scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {config.scheme!r}")
        s, d, h = config.scheme, config.d_model, config.heads
        self.scheme, self.max_position = s, max_position
        self.embed = nn.Embedding(VOCAB, d)
        self.absolute: nn.Module | None = None
        self.rope = posenc.RotaryEmbedding(d // h) if s.startswith("rope") else None
        self.xpos = posenc.XPos(d // h) if s == "xpos" else None
        self.bias: nn.Module | None = None
        if s.startswith("sinusoid"):
            self.absolute = posenc.PositionalEncoding(d, dropout=0.0)
        elif s == "learned":  # the rows of the longest training sequence
            self.absolute = posenc.LearnedPositionalEmbedding(train_tokens, d, dropout=0.0)
        elif s == "alibi":
            self.bias = posenc.ALiBi(h)
        elif s == "t5":
            self.bias = posenc.RelativePositionBias(h, bidirectional=False)
        elif s == "kerple":
            self.bias = posenc.KERPLE(h)
        elif s == "fire":
            self.bias = posenc.FIRE(h)
        self.blocks = nn.ModuleList(
            Block(config, posenc.CoPE(d // h, train_tokens + 1) if s == "cope" else None)
            for _ in range(config.layers)
        )
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, VOCAB)

    def forward(self, tokens: Tensor, generator: torch.Generator | None = None) -> Tensor:
        length = tokens.shape[-1]
        pos = None
        if self.scheme.endswith("+random"):  # glue: randomized positions, one draw a batch
            pos = posenc.random_positions(length, self.max_position, generator=generator)
        x = self.embed(tokens)
        if self.absolute is not None:
            x = self.absolute(x, positions=pos)
        if self.bias is not None:
            mask = self.bias(length, causal=True)
        else:
            mask = torch.zeros(length, length).masked_fill(
                torch.ones(length, length, dtype=torch.bool).triu(1), -math.inf
            )
        for block in self.blocks:
            x = block(x, self.rope, self.xpos, mask, pos)
        out: Tensor = self.head(self.ln_f(x))
        return out


# -- one run -----------------------------------------------------------------------------------
def lengths(config: Config) -> tuple[int, int]:
    """Tokens of the longest training instance; the randomized range (4 x the longest test)."""
    longest_test = sequence_length(config.task, max(MULTIPLES) * config.n)
    return sequence_length(config.task, config.n), 4 * longest_test


def train_steps(model: Model, config: Config, steps: int, g: torch.Generator) -> None:
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        size = int(torch.randint(1, config.n + 1, (), generator=g))
        tokens, answer = instances(config.task, size, config.batch, g)
        logits = model(tokens[:, :-1], generator=g)
        target = tokens[:, 1:].masked_fill(~answer[:, 1:], -100)
        loss = functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()


@torch.no_grad()
def evaluate(model: Model, config: Config, g: torch.Generator) -> dict[str, Any]:
    """Per-token and exact-match accuracy at each multiple of n (null where refused)."""
    model.eval()
    accuracy: dict[str, float | None] = {}
    exact: dict[str, float | None] = {}
    for m in MULTIPLES:
        tokens, answer = instances(config.task, m * config.n, config.eval_instances, g)
        try:
            logits = model(tokens[:, :-1], generator=g)
        except (ValueError, IndexError):  # the learned table's rows end: n/a
            accuracy[str(m)] = exact[str(m)] = None
            continue
        right = (logits.argmax(-1) == tokens[:, 1:]) | ~answer[:, 1:]
        accuracy[str(m)] = float(right[answer[:, 1:]].float().mean())
        exact[str(m)] = float(right.all(-1).float().mean())
    return {"accuracy": accuracy, "exact": exact}


def run(config: Config) -> dict[str, Any]:
    """Train and evaluate ``config``: its record."""
    torch.set_num_threads(1)
    start = time.perf_counter()
    torch.manual_seed(config.seed)
    train_tokens, max_position = lengths(config)
    model = Model(config, train_tokens, max_position)
    g = torch.Generator().manual_seed(config.seed)
    train_steps(model, config, config.steps, g)
    trained = time.perf_counter() - start
    result = evaluate(model, config, torch.Generator().manual_seed(10_000 + config.seed))
    return {
        "task": config.task,
        "scheme": config.scheme,
        "seed": config.seed,
        "train_length": config.n,
        **result,
        "config": config.identity(),
        **environment(),
        "time": {
            "train_s": round(trained, 2),
            "total_s": round(time.perf_counter() - start, 2),
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    }


# -- the set -----------------------------------------------------------------------------------
def path(folder: Path, config: Config) -> Path:
    return folder / f"{config.task}-{config.scheme}-{config.seed}.json"


def done(folder: Path, config: Config) -> bool:
    try:
        saved = json.loads(path(folder, config).read_text())
    except (OSError, ValueError):
        return False
    return bool(saved.get("config") == config.identity())


def configs(
    tasks: Sequence[str], schemes: Sequence[str], seeds: Sequence[int], base: Config
) -> list[Config]:
    return [
        replace(base, task=t, scheme=s, seed=seed)
        for t, s, seed in itertools.product(tasks, schemes, seeds)
    ]


def step_seconds(config: Config, steps: int = 20) -> float:
    """CPU seconds per training step of ``config``, one thread (after two warm-up steps).

    The process's CPU time, not the wall clock: on an idle core the two are the same, and
    on a loaded machine the CPU time is what the step costs, the wall clock that plus
    the waits for a core (cache sharing still inflates it somewhat).
    """
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Model(config, *lengths(config))
    g = torch.Generator().manual_seed(0)
    train_steps(model, config, 2, g)
    start = time.process_time()
    train_steps(model, config, steps, g)
    return (time.process_time() - start) / steps


def plan(todo: list[Config], workers: int) -> str:
    """What remains, and its wall time at ``workers`` single-thread workers (measured now)."""
    cost: dict[tuple[str, str], float] = {}
    for c in todo:
        if (c.task, c.scheme) not in cost:
            cost[c.task, c.scheme] = step_seconds(c)
    seconds = [cost[c.task, c.scheme] * c.steps * 1.05 for c in todo]  # + evaluation
    lines = [f"{len(todo)} runs remain; per-step cost (CPU ms, 1 thread, measured now):"]
    for (t, s), value in sorted(cost.items()):
        lines.append(f"  {t:9} {s:16} {1000 * value:6.1f}")
    wall = sum(seconds) / workers
    lines.append(
        f"estimated wall time at {workers} workers on idle cores: {wall / 3600:.2f} h "
        f"(a loaded machine takes longer)"
    )
    return "\n".join(lines)


def build(todo: list[Config], folder: Path, workers: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with concurrent.futures.ProcessPoolExecutor(workers) as pool:
        futures = {pool.submit(run, c): c for c in todo}
        for future in concurrent.futures.as_completed(futures):
            record = future.result()
            target = path(folder, futures[future])
            target.write_text(json.dumps(record, indent=1) + "\n")
            acc = {k: (None if v is None else round(v, 3)) for k, v in record["accuracy"].items()}
            print(f"{target.name}: {acc} ({record['time']['total_s']} s)", flush=True)


# What the quick mode (copy, one seed, 300 steps) asserts: measured before asserting, on
# seeds 0, 1 and 2 (per-token accuracy on copy at 300 steps, 3 layers):
# - every scheme learns something at n: above chance (1/8) in all three seeds, by 0.19 or
#   more (the lowest: the learned table, 0.32 / 0.35 / 0.38);
# - randomized positions beat plain RoPE at 2n and at 4n (Ruoss et al.): at 2n 0.43 /
#   0.42 / 0.42 against 0.28 / 0.31 / 0.28, at 4n 0.32 / 0.30 / 0.28 against 0.12 / 0.13
#   / 0.13.
QUICK_CHANCE = 1 / SYMBOLS


def quick_checks(records: Sequence[dict[str, Any]]) -> list[tuple[bool, str]]:
    """The quick mode's assertions on the copy runs in ``records``: (holds, what) each."""
    copy = {r["scheme"]: r["accuracy"] for r in records if r["task"] == "copy"}
    checks = [
        (acc["1"] > QUICK_CHANCE, f"{scheme} above chance (1/8) at n on copy: {acc['1']:.3f}")
        for scheme, acc in sorted(copy.items())
    ]
    if "rope" in copy and "rope+random" in copy:
        for m in ("2", "4"):
            randomized, plain = copy["rope+random"][m], copy["rope"][m]
            checks.append(
                (
                    randomized > plain,
                    f"randomized RoPE above plain RoPE at {m}n on copy: "
                    f"{randomized:.3f} > {plain:.3f}",
                )
            )
    return checks


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=None, choices=TASKS, help="(all)")
    parser.add_argument("--schemes", nargs="+", default=SCHEMES, choices=SCHEMES)
    parser.add_argument("--seeds", nargs="+", type=int, default=SEEDS)
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--out", type=Path, default=FOLDER)
    parser.add_argument("--plan", action="store_true", help="print what remains and its time")
    parser.add_argument(
        "--quick", action="store_true", help="copy (or --tasks), one seed, 300 steps; checked"
    )
    args = parser.parse_args(argv)
    base = Config(task="copy", scheme="nope", seed=0)
    seeds, chosen = args.seeds, args.tasks or TASKS
    if args.quick:
        base, seeds, chosen = replace(base, steps=300), seeds[:1], args.tasks or ("copy",)
    wanted = configs(chosen, args.schemes, seeds, base)
    todo = [c for c in wanted if not done(args.out, c)]
    if args.plan:
        print(plan(todo, args.workers))
        return
    build(todo, args.out, args.workers)
    if args.quick:
        records = [json.loads(path(args.out, c).read_text()) for c in wanted]
        checks = quick_checks(records)
        for holds, what in checks:
            print(f"{'ok  ' if holds else 'FAIL'} {what}")
        if not all(holds for holds, _ in checks):
            raise SystemExit("the quick mode's checks failed")


if __name__ == "__main__":
    main()
