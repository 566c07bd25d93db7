"""What each position scheme does to a model that learns with it: a trained comparison on CPU.

A byte-level decoder (2 pre-LayerNorm layers, d_model 64, 4 heads, FFN 256, 133K parameters,
``scaled_dot_product_attention``) is trained at L_train = 64 on ``pydoc_data.topics`` (the
English help text every CPython ships: nothing to download), once per scheme and seed, and
evaluated as in Press et al. (2022): the same 32,768 held-out bytes, cut into non-overlapping
chunks of 1, 2, 4 and 8 x L_train. RoPE is also evaluated with the inference-time scalings
users reach for (linear, dynamic NTK, YaRN), without further training.

The schemes come from posenc's public API only; each one's glue is marked ``# glue`` below.
Training uses the dropout users use (0.1: on the input sum, the attention weights and both
residual branches). Each run is one process with one thread: at a fixed thread count a rerun
is bit-identical. The full comparison runs in two single-thread worker processes (twice the
throughput of one process with two threads).

    python benchmarks/train.py                                # the full run (tens of minutes)
    python benchmarks/train.py --quick --out /tmp/quick.json  # one seed, 300 steps
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import multiprocessing
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional

import posenc

# -- the model and the run: the prototype --------------------------------------------
D_MODEL, HEADS, D_FF, LAYERS, VOCAB = 64, 4, 256, 2, 256
HEAD_DIM = D_MODEL // HEADS
L_TRAIN, BATCH, LR, DROPOUT = 64, 32, 3e-3, 0.1
MULTIPLES = (1, 2, 4, 8)  # evaluation lengths, in units of L_train
VALIDATION_BYTES = 32_768  # the same bytes at every length: 512 chunks of 64 ... 64 of 512
EVAL_BATCH = 32
STEPS, QUICK_STEPS = 2000, 300
SEEDS, QUICK_SEEDS = (0, 1, 2), (0,)
DATA = "pydoc_data.topics"
OUT = Path(__file__).parent / "results" / "train-cpu.json"

# What is trained; every scheme is one row of the report, and RoPE is also evaluated with
# each scaling of SCALINGS (rows "rope+linear", ...), which gets no training of its own.
SCHEMES = ("nope", "sinusoid", "learned", "rope", "alibi", "t5", "t5-128")
SCALINGS = ("linear", "dynamic", "yarn")
LABELS = {
    "nope": "NoPE",
    "sinusoid": "sinusoid",
    "learned": "learned",
    "rope": "RoPE",
    "rope+linear": "RoPE + linear",
    "rope+dynamic": "RoPE + dynamic NTK",
    "rope+yarn": "RoPE + YaRN",
    "alibi": "ALiBi",
    "t5": f"T5, max_distance = {L_TRAIN}",
    "t5-128": "T5, max_distance = 128 (default)",
}


def scaling(rope_type: str, multiple: int) -> dict[str, Any] | None:
    """The ``rope_parameters`` a user sets to run the L_train model at ``multiple`` x L_train.

    The factor is the length ratio, as model cards advise (Llama 2 long: 4 for 4x); at 1x
    there is nothing to extend and the model runs unscaled.
    """
    if multiple == 1:
        return None
    return {
        "rope_type": rope_type,
        "factor": float(multiple),
        "original_max_position_embeddings": L_TRAIN,
        "max_position_embeddings": L_TRAIN,  # dynamic reads the trained length from here
    }


# -- data ------------------------------------------------------------------------------------
def corpus() -> bytes:
    """The help topics of this CPython, in the order of their names, as UTF-8 bytes."""
    from pydoc_data.topics import topics

    return "".join(topics[name] for name in sorted(topics)).encode("utf-8")


@dataclass(frozen=True)
class Data:
    train: Tensor  # uint8 bytes, the first 90%
    validation: Tensor  # the first VALIDATION_BYTES + 1 bytes of the held-out 10%
    sha256: str
    size: int

    @classmethod
    def load(cls) -> Data:
        raw = corpus()
        data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()
        cut = int(0.9 * len(raw))
        if len(raw) - cut < VALIDATION_BYTES + 1:
            raise ValueError(f"{DATA} holds {len(raw)} bytes: too few for the held-out set")
        held_out = data[cut : cut + VALIDATION_BYTES + 1]
        return cls(data[:cut], held_out, hashlib.sha256(raw).hexdigest(), len(raw))

    def batch(self, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        starts = torch.randint(len(self.train) - L_TRAIN - 1, (BATCH,), generator=generator)
        rows = self.train[starts[:, None] + torch.arange(L_TRAIN + 1)]
        return rows[:, :-1], rows[:, 1:]

    def chunks(self, length: int) -> tuple[Tensor, Tensor]:
        """The validation bytes as ``VALIDATION_BYTES // length`` non-overlapping chunks."""
        inputs = self.validation[:-1].view(-1, length)
        return inputs, self.validation[1:].view(-1, length)


# -- the model -------------------------------------------------------------------------------
class Block(nn.Module):
    """Pre-LayerNorm decoder block; the only position glue is RoPE's line and the mask."""

    def __init__(self) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.qkv, self.proj = nn.Linear(D_MODEL, 3 * D_MODEL), nn.Linear(D_MODEL, D_MODEL)
        self.ff = nn.Sequential(nn.Linear(D_MODEL, D_FF), nn.GELU(), nn.Linear(D_FF, D_MODEL))
        self.drop = nn.Dropout(DROPOUT)

    def forward(
        self, x: Tensor, rope: posenc.RotaryEmbedding | None, mask: Tensor | None
    ) -> Tensor:
        b, length, _ = x.shape
        qkv = self.qkv(self.ln_1(x)).view(b, length, 3, HEADS, HEAD_DIM).transpose(1, 3)
        q, k, v = qkv.unbind(2)  # (B, H, L, head_dim) each
        if rope is not None:
            q, k = rope(q), rope(k)  # glue: RoPE
        p = DROPOUT if self.training else 0.0
        # glue: ALiBi and T5 give the causal additive mask; the others take the causal path
        a = functional.scaled_dot_product_attention(q, k, v, mask, p, is_causal=mask is None)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, length, D_MODEL)))
        return x + self.drop(self.ff(self.ln_2(x)))


class Decoder(nn.Module):
    """Byte-level language model; ``scheme`` picks the position scheme (see SCHEMES)."""

    def __init__(self, scheme: str) -> None:
        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
        self.scheme = scheme
        self.embed = posenc.Embeddings(D_MODEL, VOCAB)  # the seed's lut(x) * sqrt(d_model)
        self.absolute: nn.Module = nn.Dropout(DROPOUT)
        self.rope: posenc.RotaryEmbedding | None = None
        self.bias: nn.Module | None = None
        if scheme == "sinusoid":  # glue: sinusoid (adds the table, then dropout)
            self.absolute = posenc.PositionalEncoding(D_MODEL, dropout=DROPOUT)
        elif scheme == "learned":  # glue: learned (a table of L_train rows, then dropout)
            self.absolute = posenc.LearnedPositionalEmbedding(L_TRAIN, D_MODEL, dropout=DROPOUT)
        elif scheme == "rope":  # glue: RoPE
            self.rope = posenc.RotaryEmbedding(HEAD_DIM)
        elif scheme == "alibi":  # glue: ALiBi
            self.bias = posenc.ALiBi(HEADS)
        elif scheme in ("t5", "t5-128"):  # glue: T5, one table shared by the layers (as T5)
            distance = L_TRAIN if scheme == "t5" else 128
            self.bias = posenc.RelativePositionBias(
                HEADS, bidirectional=False, max_distance=distance
            )
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f, self.head = nn.LayerNorm(D_MODEL), nn.Linear(D_MODEL, VOCAB)
        # The Annotated Transformer's make_model: every matrix Xavier-uniform (the token
        # table too, so that lut(x) * sqrt(d_model) is of the size of the sinusoid's rows).
        for parameter in self.parameters():
            if parameter.dim() > 1:
                nn.init.xavier_uniform_(parameter)

    def forward(self, tokens: Tensor) -> Tensor:
        length = tokens.shape[-1]
        x = self.absolute(self.embed(tokens))
        mask = None if self.bias is None else self.bias(length, causal=True)  # glue: ALiBi, T5
        for block in self.blocks:
            x = block(x, self.rope, mask)
        logits: Tensor = self.head(self.ln_f(x))
        return logits


# -- one run ---------------------------------------------------------------------------------
def position_losses(model: Decoder, data: Data, length: int) -> Tensor:
    """Mean loss (nats per byte) at each position 0 .. length - 1 over the validation chunks."""
    inputs, targets = data.chunks(length)
    total = torch.zeros(length, dtype=torch.float64)
    with torch.no_grad():
        for start in range(0, len(inputs), EVAL_BATCH):
            logits = model(inputs[start : start + EVAL_BATCH])
            loss = functional.cross_entropy(
                logits.transpose(1, 2), targets[start : start + EVAL_BATCH], reduction="none"
            )
            total += loss.double().sum(0)
    return total / len(inputs)


def evaluate(model: Decoder, data: Data) -> dict[str, Any]:
    """Loss over all tokens, over tokens past L_train, and per position at 8x; None: refused."""
    loss: dict[str, float | None] = {}
    past: dict[str, float | None] = {}
    refused: str | None = None
    per_position: list[float] | None = None
    for multiple in MULTIPLES:
        try:
            losses = position_losses(model, data, multiple * L_TRAIN)
        except IndexError as error:  # the learned table past its rows: a clear refusal
            loss[str(multiple)] = None
            past[str(multiple)] = None
            refused = refused or str(error)
            continue
        loss[str(multiple)] = round(float(losses.mean()), 6)
        if multiple > 1:
            past[str(multiple)] = round(float(losses[L_TRAIN:].mean()), 6)
        if multiple == MULTIPLES[-1]:
            per_position = [round(float(value), 5) for value in losses]
    return {"loss": loss, "loss_past": past, "per_position": per_position, "refused": refused}


def evaluate_scaled(model: Decoder, data: Data, rope_type: str) -> dict[str, Any]:
    """The trained RoPE model with ``rope_type`` scaling at each length: no training."""
    trained = model.rope
    try:
        losses: dict[str, Any] = {"loss": {}, "loss_past": {}, "per_position": None}
        for multiple in MULTIPLES:
            config = scaling(rope_type, multiple)
            model.rope = posenc.RotaryEmbedding(HEAD_DIM, scaling=config)
            result = position_losses(model, data, multiple * L_TRAIN)
            losses["loss"][str(multiple)] = round(float(result.mean()), 6)
            if multiple > 1:
                losses["loss_past"][str(multiple)] = round(float(result[L_TRAIN:].mean()), 6)
            if multiple == MULTIPLES[-1]:
                losses["per_position"] = [round(float(value), 5) for value in result]
        losses["refused"] = None
        return losses
    finally:
        model.rope = trained


def fit(scheme: str, seed: int, steps: int) -> tuple[Decoder, Data, float]:
    """``scheme``'s model trained from ``seed`` for ``steps``: the model (in eval mode), the
    data, and the mean training loss of the last 100 steps."""
    data = Data.load()
    torch.manual_seed(seed)  # the weights and the dropout masks
    generator = torch.Generator().manual_seed(seed)  # the batches: equal for all schemes
    model = Decoder(scheme)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    model.train()
    recent: list[float] = []
    for _ in range(steps):
        inputs, targets = data.batch(generator)
        loss = functional.cross_entropy(model(inputs).transpose(1, 2), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        recent = [*recent[-99:], float(loss.detach())]
    model.eval()
    return model, data, round(sum(recent) / max(len(recent), 1), 6)


def train_one(scheme: str, seed: int, steps: int, threads: int = 1) -> list[dict[str, Any]]:
    """Train ``scheme`` from ``seed`` for ``steps`` and evaluate it: the report's rows.

    One row for the scheme; for RoPE also one per scaling. ``threads`` is torch's intra-op
    thread count for the run, restored afterwards: at a fixed count the run is bit-identical.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        start = time.perf_counter()
        model, data, train_loss = fit(scheme, seed, steps)
        train_seconds = time.perf_counter() - start
        common = {"seed": seed, "steps": steps, "threads": threads}
        rows = [{"scheme": scheme, **common, "train_loss": train_loss, **evaluate(model, data)}]
        if scheme == "rope":
            for rope_type in SCALINGS:
                scaled = evaluate_scaled(model, data, rope_type)
                rows.append({"scheme": f"rope+{rope_type}", **common, **scaled})
        seconds = time.perf_counter() - start
        for row in rows:
            row["seconds"] = {"train": round(train_seconds, 2), "total": round(seconds, 2)}
        return rows
    finally:
        torch.set_num_threads(before)


# -- the whole comparison --------------------------------------------------------------------
def _worker(job: tuple[str, int, int]) -> list[dict[str, Any]]:
    return train_one(*job, threads=1)


def progress(done: int, total: int, rows: list[dict[str, Any]]) -> str:
    row = rows[0]
    shown = " ".join(
        f"{m}x {'  -  ' if row['loss'][m] is None else format(row['loss'][m], '.3f')}"
        for m in row["loss"]
    )
    seconds = row["seconds"]["total"]
    return f"[{done:2d}/{total}] {row['scheme']:<9} seed {row['seed']}: {shown}  ({seconds:.0f} s)"


def run(
    schemes: Sequence[str],
    seeds: Sequence[int],
    steps: int,
    workers: int,
    out: Path | None = None,
) -> dict[str, Any]:
    """Every (scheme, seed) run, in ``workers`` single-thread processes; the report.

    The runs go seed by seed. With ``out``, the report so far is written after every run
    (``"complete": false`` until the last), so that an interrupted run leaves its numbers.
    """
    jobs = [(scheme, seed, steps) for seed in seeds for scheme in schemes]
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = [pool.submit(_worker, job) for job in jobs]
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            result = future.result()
            print(progress(done, len(jobs), result), flush=True)
            rows.extend(result)
            elapsed = time.perf_counter() - start
            report = make_report(rows, schemes, seeds, steps, workers, elapsed, len(jobs))
            if out is not None:
                write(report, out)
    return report


def make_report(
    rows: list[dict[str, Any]],
    schemes: Sequence[str],
    seeds: Sequence[int],
    steps: int,
    workers: int,
    elapsed: float,
    jobs: int,
) -> dict[str, Any]:
    order = {name: i for i, name in enumerate(LABELS)}
    rows = sorted(rows, key=lambda row: (order[row["scheme"]], row["seed"]))
    data = Data.load()
    return {
        "description": "trained comparison of position schemes: loss in nats per byte",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "complete": sum(row["scheme"] in SCHEMES for row in rows) == jobs,
        "versions": {
            "posenc": posenc.__version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
        },
        "threads": 1,
        "workers": workers,
        "data": {
            "name": DATA,
            "sha256": data.sha256,
            "bytes": data.size,
            "train_bytes": len(data.train),
            "validation_bytes": VALIDATION_BYTES,
        },
        "model": {
            "layers": LAYERS,
            "d_model": D_MODEL,
            "heads": HEADS,
            "d_ff": D_FF,
            "vocab": VOCAB,
            "norm": "pre-LayerNorm",
            "attention": "torch.nn.functional.scaled_dot_product_attention",
            "parameters": {s: sum(p.numel() for p in Decoder(s).parameters()) for s in schemes},
        },
        "training": {
            "steps": steps,
            "batch": BATCH,
            "L_train": L_TRAIN,
            "optimizer": "AdamW",
            "lr": LR,
            "dropout": DROPOUT,
        },
        "evaluation": {
            "multiples": list(MULTIPLES),
            "lengths": [m * L_TRAIN for m in MULTIPLES],
            "per_position": f"{MULTIPLES[-1]}x",
            "scalings": {t: scaling(t, MULTIPLES[-1]) for t in SCALINGS},
        },
        "labels": {
            name: label for name, label in LABELS.items() if name in {r["scheme"] for r in rows}
        },
        "seeds": list(seeds),
        "time": {"total_s": round(elapsed, 1), "runs": jobs},
        "runs": rows,
    }


def write(report: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    partial.replace(out)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, 300 steps")
    parser.add_argument("--out", type=Path, default=None, help=f"the report (default {OUT})")
    parser.add_argument("--steps", type=int, default=None, help="steps per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--schemes", nargs="+", choices=SCHEMES, default=list(SCHEMES))
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    steps = args.steps or (QUICK_STEPS if args.quick else STEPS)
    seeds = args.seeds or (QUICK_SEEDS if args.quick else SEEDS)
    out = args.out or (Path("/tmp/train-quick.json") if args.quick else OUT)
    report = run(args.schemes, seeds, steps, args.workers, out)
    print(f"wrote {out} ({report['time']['total_s']:.0f} s)")


if __name__ == "__main__":
    main()
