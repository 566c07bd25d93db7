"""Time the input layer against the memory floor and an Annotated-Transformer-style baseline.

Every figure is a median from ``torch.utils.benchmark``, measured in this run, with the
candidates interleaved round by round so that drift of the machine is shared. The floor
is one out-of-place ``a + b`` of two (B, L, D) tensors: producing a (B, L, D) output
from token ids cannot cost less than reading two such tensors and writing one.

Run ``nox -s bench`` or ``python benchmarks/bench_input_layer.py --help``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils import benchmark

import posenc


class BaselineEmbeddings(nn.Module):
    """The Annotated Transformer's recipe: look up, then multiply by sqrt(d_model)."""

    def __init__(self, d_model: int, vocab: int) -> None:
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.d_model = d_model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lut(ids) * math.sqrt(self.d_model)


class BaselinePositional(nn.Module):
    """The Annotated Transformer's recipe: a float32 table, sliced and added."""

    def __init__(self, d_model: int, max_len: int = 5000) -> None:
        super().__init__()
        pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
        freq = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        table = torch.zeros(max_len, d_model)
        table[:, 0::2] = torch.sin(pos * freq)
        table[:, 1::2] = torch.cos(pos * freq)
        self.register_buffer("pe", table.unsqueeze(0))
        self.dropout = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x + self.pe[:, : x.size(1)])


REPORT: list[str] = []


def say(line: str = "") -> None:
    """Print a line of the report and keep it for --save."""
    print(line, flush=True)
    REPORT.append(line)


@dataclass
class Case:
    name: str
    label: str
    run: Callable[[], object]
    medians: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.medians)


def make_cases(
    dtype: torch.dtype, training: bool, args: argparse.Namespace
) -> tuple[list[Case], Callable[[], None]]:
    """The five candidates (plus PositionalEncoding alone) for one dtype and mode."""
    b, length, d, vocab = args.batch, args.length, args.d_model, args.vocab
    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (b, length))
    a = torch.randn(b, length, d, dtype=dtype)
    x = torch.randn(b, length, d, dtype=dtype)
    grad = torch.randn(b, length, d, dtype=dtype)

    baseline = nn.Sequential(BaselineEmbeddings(d, vocab), BaselinePositional(d)).to(dtype)
    pair = nn.Sequential(posenc.Embeddings(d, vocab), posenc.PositionalEncoding(d)).to(dtype)
    fused = posenc.TokenAndPositionEmbedding(d, vocab).to(dtype)
    pe_alone = posenc.PositionalEncoding(d).to(dtype)
    for seq in (baseline, pair):
        seq[0].lut.weight.data.copy_(fused.embeddings.lut.weight.data)
    for module in (baseline, pair, fused):
        module.train(training)
    compiled = torch.compile(fused, fullgraph=True, dynamic=False)
    weights = [m[0].lut.weight for m in (baseline, pair)] + [fused.embeddings.lut.weight]

    def reset_grads() -> None:
        for w in weights:
            w.grad = None

    def step(
        module: Callable[[torch.Tensor], torch.Tensor], inp: torch.Tensor
    ) -> Callable[[], object]:
        if not training:
            return lambda: module(inp)

        def fwd_bwd() -> None:
            module(inp).backward(grad)
            reset_grads()

        return fwd_bwd

    cases = [
        Case("floor", "(a) floor: a + b", lambda: a + x),
        Case("baseline", "(b) Annotated-Transformer-style pair", step(baseline, ids)),
        Case("pair", "(c) posenc Embeddings -> PositionalEncoding", step(pair, ids)),
        Case("fused", "(d) TokenAndPositionEmbedding, eager", step(fused, ids)),
        Case("compiled", "(e) TokenAndPositionEmbedding, torch.compile", step(compiled, ids)),
    ]
    if not training:
        cases.append(Case("pe_alone", "PositionalEncoding.forward alone", step(pe_alone, x)))
    return cases, reset_grads


def measure(cases: list[Case], rounds: int, min_run_time: float, training: bool) -> None:
    context = torch.enable_grad() if training else torch.inference_mode()
    with context:
        for case in cases:  # warm-up, and torch.compile's compilation
            case.run()
            case.run()
        for _ in range(rounds):
            for case in cases:
                timer = benchmark.Timer(
                    "run()", globals={"run": case.run}, num_threads=torch.get_num_threads()
                )
                case.medians.append(timer.blocked_autorange(min_run_time=min_run_time).median)


def report(dtype: torch.dtype, training: bool, cases: list[Case]) -> list[dict[str, object]]:
    by_name = {c.name: c for c in cases}
    floor, base = by_name["floor"].median, by_name["baseline"].median
    mode = "forward+backward, training" if training else "forward, inference mode"
    say(f"\n### {str(dtype).removeprefix('torch.')}, {mode}\n")
    say("| candidate | median (ms) | × floor (a) | × baseline (b) | rounds' range (ms) |")
    say("|---|---:|---:|---:|---:|")
    rows = []
    for c in cases:
        ms, vs_a, vs_b = c.median * 1e3, c.median / floor, c.median / base
        spread = f"{min(c.medians) * 1e3:.2f}–{max(c.medians) * 1e3:.2f}"
        say(f"| {c.label} | {ms:.2f} | {vs_a:.2f} | {vs_b:.2f} | {spread} |")
        rows.append(
            {
                "dtype": str(dtype).removeprefix("torch."),
                "mode": "train" if training else "inference",
                "case": c.name,
                "label": c.label,
                "median_ms": c.median * 1e3,
                "vs_floor": c.median / floor,
                "vs_baseline": c.median / base,
            }
        )
    return rows


def import_time(repeats: int = 5) -> float:
    """Seconds that ``import posenc`` adds to ``import torch``, median of fresh interpreters."""
    code = (
        "import time; import torch; t = time.perf_counter(); import posenc; "
        "print(time.perf_counter() - t)"
    )
    runs = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], check=True, capture_output=True, text=True
            ).stdout
        )
        for _ in range(repeats)
    ]
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=32_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--min-run-time", type=float, default=0.3)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--no-training", action="store_true", help="skip forward+backward")
    parser.add_argument(
        "--save", metavar="STEM", help="also write STEM.md (this report) and STEM.json (the rows)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    say(f"# posenc {posenc.__version__} input-layer benchmark")
    say(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{args.threads} threads, {time.strftime('%Y-%m-%d')}; B={args.batch}, L={args.length}, "
        f"D={args.d_model}, vocab={args.vocab}; {args.rounds} interleaved rounds"
    )
    rows: list[dict[str, object]] = []
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        for training in (False, True) if not args.no_training else (False,):
            cases, _ = make_cases(dtype, training, args)
            measure(cases, args.rounds, args.min_run_time, training)
            rows += report(dtype, training, cases)

    d = args.d_model

    def nbytes(state: dict[str, torch.Tensor]) -> float:
        return sum(t.numel() * t.element_size() for t in state.values()) / 1e6

    fused = posenc.TokenAndPositionEmbedding(d, args.vocab)
    pe = posenc.PositionalEncoding(d)
    say("\n### Sizes and one-off costs\n")
    say(f"- state_dict of TokenAndPositionEmbedding: {nbytes(fused.state_dict()):.1f} MB")
    say(f"- state_dict of PositionalEncoding: {nbytes(pe.state_dict()):.1f} MB")
    baseline_mb = nbytes(BaselinePositional(d).state_dict())
    say(f"- state_dict of the baseline's table: {baseline_mb:.1f} MB")
    say(f"- `pe` buffer {tuple(pe.pe.shape)}, not saved: {pe.pe.numel() * 4 / 1e6:.1f} MB")
    say(f"- `import posenc` after `import torch`: {import_time() * 1e3:.1f} ms")
    start = time.perf_counter()
    posenc.sinusoidal_table(2**20, d)
    seconds = time.perf_counter() - start
    say(f"- sinusoidal_table(2**20, {d}), float64 math to float32: {seconds:.2f} s")
    if args.save:
        with open(f"{args.save}.md", "w") as f:
            f.write("\n".join(REPORT).strip() + "\n")
        with open(f"{args.save}.json", "w") as f:
            meta = {
                "torch": torch.__version__,
                "threads": args.threads,
                "date": time.strftime("%Y-%m-%d"),
            }
            json.dump({**meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
