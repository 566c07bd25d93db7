"""The trained comparison's method: data splits, the model, one training run and its evaluation.

A byte-level decoder (pre-LayerNorm, ``scaled_dot_product_attention``) is trained on
``pydoc_data.topics`` (the English help text every CPython ships: nothing to download) and
evaluated as in Press et al. (2022): non-overlapping chunks of 1, 2, 4 and 8 x L_train.
Everything a run depends on is one :class:`Config`; :func:`execute` trains and evaluates it and
returns the run's record (the schema of ``benchmarks/results/train/*.json``).

What changed from the first saved run (``benchmarks/results/train-cpu.json``), and why:

- **Held-out bytes.** The last 10% of the text is split in two halves: *validation* (the
  learning rate is chosen on it) and *test* (every reported loss, over the whole half, not
  the first 32,768 bytes). The test half is also cut into blocks of 8 x L_train bytes, and each
  block's loss is saved, so that an interval can count the test text's variation as well as
  the seeds'.
- **The learned table's initialisation.** It was Xavier-uniform (std 0.125 at 64 x 64) while
  the token rows, scaled by sqrt(d_model), have std ~0.63 and the sinusoid's rows an RMS of
  sqrt(1/2) = 0.71: the learned positions started ~5x weaker than every other scheme's
  position signal. The table now starts from N(0, 0.71^2), the sinusoid's RMS.
- **Weight decay** (AdamW, 0.01 as before) now applies to the matrices of the linear layers and
  the token table only; position tables (the learned table, the T5 buckets), LayerNorms and
  biases are excluded, as GPT-2-style training does (Radford et al., 2019; the split of
  minGPT/nanoGPT). Before, decay pulled the learned table and the T5 buckets toward zero.
- **Dynamic NTK** is evaluated with a fixed ``factor`` (2, the example of Hugging Face's
  documentation), as users run it: the base grows with the length by itself. The first run
  set ``factor`` = the length multiple m, which counts the length twice (alpha = m^2 - m + 1).
  Linear and YaRN keep ``factor`` = the multiple: they are configured for a target length.
- **Learning rate** per scheme, chosen by a sweep on validation (see ``train.py``).

Fine-tuned context extension (Chen et al., 2023, Position Interpolation; Peng et al., 2023,
YaRN): a RoPE model pretrained at L_train with half of its rows passkey examples is fine-tuned
at 4 x L_train with each scaling, and evaluated on loss and on passkey retrieval (Chen et al.
2023, section 3.3, after Mohtashami and Jaggi 2023: a number hidden in filler text near the
start, asked for at the end) against the input's length.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional

import posenc

VOCAB, BATCH, DROPOUT, WEIGHT_DECAY = 256, 32, 0.1, 0.01
MULTIPLES = (1, 2, 4, 8)  # evaluation lengths, in units of L_train
DATA = "pydoc_data.topics"
HELD_OUT = 0.1  # the last 10% of the text: validation, then test

METHOD = 1  # the method's version, part of every run's identity

SCHEMES = ("nope", "sinusoid", "learned", "rope", "alibi", "t5", "t5-128")
# Inference-time scalings of the trained RoPE model (rows "rope+linear", ...): no training.
SCALINGS = ("linear", "dynamic", "yarn")
DYNAMIC_FACTOR = 2.0  # fixed, as users set it; 2 is a common choice in published configs
# Fine-tuning arms: the RoPE model trained at L_train, fine-tuned at FINETUNE_MULTIPLE x L_train.
FINETUNE_SCALINGS = ("none", "linear", "dynamic", "yarn")
FINETUNE_MULTIPLE = 4
FINETUNE_BATCH = BATCH // FINETUNE_MULTIPLE
EVAL_TOKENS = 8192  # per evaluation batch: rows = EVAL_TOKENS // length
# The passkey is evaluated at these input lengths, in bytes: every example at a length fills it
# exactly, the key near its start and the question at its end (see ``passkey_examples``), so
# 64 and 256 are the pretraining and fine-tuning windows to the byte.
PASSKEY_LENGTHS = (32, 64, 128, 256, 512)
PASSKEY_EXAMPLES = 64  # per length
PASSKEY_FRACTION = 0.5  # of each batch's rows, in pretraining and fine-tuning (the prototype)


@dataclass(frozen=True)
class Scale:
    """The model's size and the training length."""

    name: str
    layers: int
    d_model: int
    heads: int
    d_ff: int
    L_train: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def summary(self) -> dict[str, int]:
        """The schema's ``scale``: layers, d_model, L_train."""
        return {"layers": self.layers, "d_model": self.d_model, "L_train": self.L_train}


SCALES = {
    # the first saved run's model (133K parameters)
    "small": Scale("small", layers=2, d_model=64, heads=4, d_ff=256, L_train=64),
    # the second scale: today's model at a 4x longer training length (see train.py's budget)
    "long": Scale("long", layers=2, d_model=64, heads=4, d_ff=256, L_train=256),
    # passkey retrieval needs 4 layers (the prototype: 2 layers never retrieved)
    "passkey": Scale("passkey", layers=4, d_model=64, heads=4, d_ff=256, L_train=64),
    # the same with head size 32: does PI's slow start come from dividing the one fast pair
    # that local detail depends on? (the hypothesis; not in the full set)
    "passkey-h32": Scale("passkey-h32", layers=4, d_model=64, heads=2, d_ff=256, L_train=64),
}


@dataclass(frozen=True)
class Finetune:
    """Fine-tuning of a pretrained RoPE model at ``length`` with ``scaling`` for ``steps``."""

    scaling: str  # one of FINETUNE_SCALINGS
    steps: int
    length: int
    batch: int = FINETUNE_BATCH  # rows: as many tokens a step as in pretraining


@dataclass(frozen=True)
class Config:
    """One run: everything its numbers depend on. Two runs with equal configs are the same run.

    ``steps`` are the pretraining steps; with ``finetune`` the run is the pretrained model of
    the same config without ``finetune``, then fine-tuned. ``passkey`` is the fraction of
    every batch's rows that are passkey examples.
    """

    scheme: str
    seed: int
    lr: float
    role: str  # "sweep" | "main"
    scale: Scale
    steps: int
    finetune: Finetune | None = None
    passkey: float = 0.0
    batch: int = BATCH
    dropout: float = DROPOUT
    weight_decay: float = WEIGHT_DECAY
    device: str = "cpu"
    data: str = DATA
    method: int = METHOD  # a change of the method that changes numbers raises it

    def identity(self) -> dict[str, Any]:
        """The config as JSON data: a saved run matches this config iff its identity is equal."""
        return asdict(self)

    @property
    def base(self) -> Config:
        """The pretrained run a fine-tuning run starts from (itself if none)."""
        return replace(self, finetune=None)

    def name(self) -> str:
        """The file name of the run's record (unique within a plan)."""
        parts = [self.role, self.scale.name, self.scheme, f"seed{self.seed}", f"lr{self.lr:g}"]
        if self.finetune is not None:
            ft = self.finetune
            parts += [f"ft{ft.length}", ft.scaling, f"n{ft.steps}"]
        return "-".join(parts) + ".json"


def config_from_identity(identity: dict[str, Any]) -> Config:
    fields = dict(identity)
    fields["scale"] = Scale(**fields["scale"])
    if fields.get("finetune") is not None:
        fields["finetune"] = Finetune(**fields["finetune"])
    return Config(**fields)


# -- data ------------------------------------------------------------------------------------
def corpus() -> bytes:
    """The help topics of this CPython, in the order of their names, as UTF-8 bytes."""
    from pydoc_data.topics import topics

    return "".join(topics[name] for name in sorted(topics)).encode("utf-8")


@dataclass(frozen=True)
class Data:
    """The text as three disjoint parts: train (the first 90%), validation and test (the rest,
    halved). ``train``, ``validation`` and ``test`` are slices of ``text`` at ``bounds``."""

    text: Tensor  # int64 bytes
    bounds: tuple[int, int, int, int]  # 0, end of train, end of validation, end of test
    sha256: str

    @classmethod
    def load(cls) -> Data:
        raw = corpus()
        text = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()
        cut = len(raw) - int(HELD_OUT * len(raw))
        middle = cut + (len(raw) - cut) // 2
        return cls(text, (0, cut, middle, len(raw)), hashlib.sha256(raw).hexdigest())

    def part(self, name: str) -> Tensor:
        index = ("train", "validation", "test").index(name)
        return self.text[self.bounds[index] : self.bounds[index + 1]]

    def summary(self) -> dict[str, Any]:
        sizes = {name: len(self.part(name)) for name in ("train", "validation", "test")}
        return {"name": DATA, "sha256": self.sha256, "bytes": len(self.text), **sizes}

    def batch(
        self, generator: torch.Generator, rows: int, length: int, passkey: float = 0.0
    ) -> tuple[Tensor, Tensor]:
        """``rows`` random windows of the train part; the first ``passkey`` of them passkey
        examples (:func:`passkey_row`)."""
        train = self.part("train")
        starts = torch.randint(len(train) - length - 1, (rows,), generator=generator)
        windows = train[starts[:, None] + torch.arange(length + 1)]
        for row in range(round(passkey * rows)):
            windows[row] = passkey_row(generator, length + 1)[0]
        return windows[:, :-1], windows[:, 1:]

    def blocks(self, name: str, block: int) -> Tensor:
        """The part as whole blocks of ``block`` + 1 bytes (inputs and next-byte targets), the
        remainder dropped: ``(n, block + 1)``, consecutive blocks sharing one byte."""
        part = self.part(name)
        count = (len(part) - 1) // block
        index = torch.arange(count)[:, None] * block + torch.arange(block + 1)
        return part[index]


# -- passkey retrieval (Chen et al. 2023, section 3.3) ------------------------------------------
FILLER = (
    b"The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
)
KEY, QUERY, DIGITS = b"KEY=", b"KEY?", 5
# distance: from the key's first digit to the answer's first digit = DIGITS + len(". ") + gap +
# len(QUERY), where gap is the filler between the key sentence and the query.
FIXED_DISTANCE = DIGITS + 2 + len(QUERY)


def filler(generator: torch.Generator, size: int) -> bytes:
    """``size`` bytes of the filler text from a random place in it."""
    start = int(torch.randint(len(FILLER), (), generator=generator))
    repeated = FILLER * (2 + (start + size) // len(FILLER))
    return repeated[start : start + size]


def passkey_row(
    generator: torch.Generator, length: int, distance: int | None = None, prefix: int | None = None
) -> tuple[Tensor, int]:
    """A passkey example of ``length`` bytes ending with the answer; and the answer's first index.

    ``filler KEY=12345. filler KEY?12345``: the key's digits are at the answer's index minus
    ``distance`` (random when None, as far as ``length`` allows).
    """
    most = length - len(KEY) - DIGITS - (0 if prefix is None else prefix)
    if distance is None:
        distance = int(torch.randint(FIXED_DISTANCE, most + 1, (), generator=generator))
    if not FIXED_DISTANCE <= distance <= most:
        raise ValueError(f"distance must be in [{FIXED_DISTANCE}, {most}], got {distance}")
    digits = bytes(48 + int(d) for d in torch.randint(10, (DIGITS,), generator=generator))
    gap = distance - FIXED_DISTANCE
    before = length - len(KEY) - DIGITS - distance
    row = (
        filler(generator, before) + KEY + digits + b". " + filler(generator, gap) + QUERY + digits
    )
    assert len(row) == length, (len(row), length)
    return torch.tensor(list(row)), length - DIGITS


def passkey_examples(seed: int, length: int, count: int, prefix: int = 8) -> tuple[Tensor, int]:
    """``count`` examples whose input (every byte but the last) is ``length`` bytes: (examples,
    the answer's index). ``prefix`` bytes of filler come before the key, so the key's first digit
    is ``length + 1 - prefix - len(KEY) - DIGITS`` bytes before the answer's."""
    generator = torch.Generator().manual_seed(10_000 + seed * 1_000 + length)
    distance = length + 1 - prefix - len(KEY) - DIGITS
    rows = [passkey_row(generator, length + 1, distance, prefix) for _ in range(count)]
    return torch.stack([row for row, _ in rows]), rows[0][1]


def passkey_correct(logits: Tensor, examples: Tensor, answer: int) -> Tensor:
    """Per example: every digit of the answer is the argmax given the bytes before it.

    ``logits`` are the model's outputs for ``examples[:, :-1]``. Under teacher forcing this is
    exactly what greedy decoding gets right: the first wrong digit fails both.
    """
    predicted = logits[:, answer - 1 : answer - 1 + DIGITS].argmax(-1)
    return (predicted == examples[:, answer : answer + DIGITS]).all(-1)


# -- the model -------------------------------------------------------------------------------
class Block(nn.Module):
    """Pre-LayerNorm decoder block; the only position glue is RoPE's line and the mask."""

    def __init__(self, scale: Scale, dropout: float) -> None:
        super().__init__()
        d = scale.d_model
        self.heads, self.head_dim, self.p = scale.heads, scale.head_dim, dropout
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, scale.d_ff), nn.GELU(), nn.Linear(scale.d_ff, d))
        self.drop = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, rope: posenc.RotaryEmbedding | None, mask: Tensor | None
    ) -> Tensor:
        b, length, d = x.shape
        qkv = self.qkv(self.ln_1(x)).view(b, length, 3, self.heads, self.head_dim).transpose(1, 3)
        q, k, v = qkv.unbind(2)  # (B, H, L, head_dim) each
        if rope is not None:
            q, k = rope(q), rope(k)  # glue: RoPE
        p = self.p if self.training else 0.0
        # glue: ALiBi and T5 give the causal additive mask; the others take the causal path
        a = functional.scaled_dot_product_attention(q, k, v, mask, p, is_causal=mask is None)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, length, d)))
        out: Tensor = x + self.drop(self.ff(self.ln_2(x)))
        return out


def learned_init_std(scale: Scale) -> float:
    """The RMS of the sinusoid's rows over L_train positions: the learned table's init std."""
    table = posenc.sinusoidal_table(
        torch.arange(scale.L_train), scale.d_model, dtype=torch.float64
    )
    return float(table.pow(2).mean().sqrt())


class Decoder(nn.Module):
    """Byte-level language model; ``scheme`` picks the position scheme (see SCHEMES)."""

    def __init__(self, scheme: str, scale: Scale = SCALES["small"], dropout: float = DROPOUT):
        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
        self.scheme, self.scale = scheme, scale
        d = scale.d_model
        self.embed = posenc.Embeddings(d, VOCAB)  # the seed's lut(x) * sqrt(d_model)
        self.absolute: nn.Module = nn.Dropout(dropout)
        self.rope: posenc.RotaryEmbedding | None = None
        self.bias: nn.Module | None = None
        if scheme == "sinusoid":  # glue: sinusoid (adds the table, then dropout)
            self.absolute = posenc.PositionalEncoding(d, dropout=dropout)
        elif scheme == "learned":  # glue: learned (a table of L_train rows, then dropout)
            self.absolute = posenc.LearnedPositionalEmbedding(scale.L_train, d, dropout=dropout)
        elif scheme == "rope":  # glue: RoPE
            self.rope = posenc.RotaryEmbedding(scale.head_dim)
        elif scheme == "alibi":  # glue: ALiBi
            self.bias = posenc.ALiBi(scale.heads)
        elif scheme in ("t5", "t5-128"):  # glue: T5, one table shared by the layers (as T5)
            distance = scale.L_train if scheme == "t5" else 128
            self.bias = posenc.RelativePositionBias(
                scale.heads, bidirectional=False, max_distance=distance
            )
        self.blocks = nn.ModuleList(Block(scale, dropout) for _ in range(scale.layers))
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, VOCAB)
        # The Annotated Transformer's make_model: every matrix Xavier-uniform (the token
        # table too, so that lut(x) * sqrt(d_model) is of the size of the sinusoid's rows);
        # the learned table then at the sinusoid's RMS (see the module's docstring).
        for parameter in self.parameters():
            if parameter.dim() > 1:
                nn.init.xavier_uniform_(parameter)
        for parameter in self.absolute.parameters():
            nn.init.normal_(parameter, std=learned_init_std(scale))

    def position_parameters(self) -> list[nn.Parameter]:
        """The parameters of the position scheme (learned table, T5 buckets): no decay."""
        modules = [m for m in (self.absolute, self.rope, self.bias) if m is not None]
        return [p for module in modules for p in module.parameters()]

    def forward(self, tokens: Tensor) -> Tensor:
        length = tokens.shape[-1]
        x = self.absolute(self.embed(tokens))
        mask = None  # glue: ALiBi and T5 build the causal additive mask where x lives
        if self.bias is not None:
            mask = self.bias(length, causal=True, device=tokens.device)
        for block in self.blocks:
            x = block(x, self.rope, mask)
        logits: Tensor = self.head(self.ln_f(x))
        return logits


def parameter_groups(model: Decoder, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups, GPT-2 style: decay on matrices, none on position tables, norms, biases."""
    exempt = {id(p) for p in model.position_parameters()}
    decay = [p for p in model.parameters() if p.dim() >= 2 and id(p) not in exempt]
    chosen = {id(p) for p in decay}
    rest = [p for p in model.parameters() if id(p) not in chosen]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]


def rope_scaling(kind: str, factor: float, trained: int) -> dict[str, Any] | None:
    """The ``rope_parameters`` a user sets to run a model trained at ``trained`` longer."""
    if kind == "none" or factor == 1:
        return None
    return {
        "rope_type": kind,
        "factor": float(factor),
        "original_max_position_embeddings": trained,
        "max_position_embeddings": trained,  # dynamic reads the trained length from here
    }


def inference_scaling(kind: str, multiple: int, trained: int) -> dict[str, Any] | None:
    """The main comparison's inference-time rows: linear and YaRN at ``factor`` = the length
    multiple (configured for the target length); dynamic at its fixed DYNAMIC_FACTOR."""
    if multiple == 1:
        return None
    factor = DYNAMIC_FACTOR if kind == "dynamic" else float(multiple)
    return rope_scaling(kind, factor, trained)


# -- training and evaluation -------------------------------------------------------------------
def set_rope(model: Decoder, scaling: dict[str, Any] | None) -> None:
    model.rope = posenc.RotaryEmbedding(model.scale.head_dim, scaling=scaling)
    model.rope.to(next(model.parameters()).device)


def train_steps(
    model: Decoder,
    optimizer: torch.optim.Optimizer,
    data: Data,
    generator: torch.Generator,
    config: Config,
    shape: tuple[int, int],
    steps: int,
) -> Iterator[tuple[int, float]]:
    """Yield (step, loss) after each of ``steps`` optimizer steps on batches of ``shape``
    (rows, length)."""
    device = torch.device(config.device)
    model.train()
    for step in range(1, steps + 1):
        inputs, targets = data.batch(generator, *shape, config.passkey)
        inputs, targets = inputs.to(device), targets.to(device)
        loss = functional.cross_entropy(model(inputs).transpose(1, 2), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        yield step, float(loss.detach())
    model.eval()


def pretrain(config: Config) -> tuple[Decoder, Data, dict[str, Any]]:
    """``config.base`` trained: the model (eval mode), the data, and the training summary."""
    config = config.base
    device = torch.device(config.device)
    data = Data.load()
    torch.manual_seed(config.seed)  # the weights and the dropout masks
    generator = torch.Generator().manual_seed(config.seed)  # the batches: equal across schemes
    model = Decoder(config.scheme, config.scale, config.dropout).to(device)
    optimizer = torch.optim.AdamW(parameter_groups(model, config.weight_decay), lr=config.lr)
    start, recent = time.perf_counter(), list[float]()
    shape = (config.batch, config.scale.L_train)
    for _, loss in train_steps(model, optimizer, data, generator, config, shape, config.steps):
        recent = [*recent[-99:], loss]
    seconds = time.perf_counter() - start
    model.eval()
    summary = {
        "train_loss": round(sum(recent) / max(len(recent), 1), 6),
        "seconds": round(seconds, 2),
        "ms_per_step": round(1000 * seconds / max(config.steps, 1), 2),
    }
    return model, data, summary


def block_losses(model: Decoder, data: Data, part: str, multiple: int) -> Tensor:
    """Per block of 8 x L_train bytes of ``part``: its loss at ``multiple`` x L_train, the mean
    over the tokens of its non-overlapping chunks; and, in a second row, over the tokens past
    L_train. Shape (2, blocks)."""
    trained, largest = model.scale.L_train, MULTIPLES[-1]
    length = multiple * trained
    blocks = data.blocks(part, largest * trained)
    per = largest // multiple
    inputs = blocks[:, :-1].reshape(-1, length)
    targets = blocks[:, 1:].reshape(-1, length)
    device = next(model.parameters()).device
    rows = max(1, EVAL_TOKENS // length)
    losses = []
    with torch.no_grad():
        for start in range(0, len(inputs), rows):
            logits = model(inputs[start : start + rows].to(device))
            loss = functional.cross_entropy(
                logits.transpose(1, 2), targets[start : start + rows].to(device), reduction="none"
            )
            losses.append(loss.double().cpu())
    chunks = torch.cat(losses).view(len(blocks), per, length)
    past = chunks[..., trained:] if multiple > 1 else chunks[..., :0]
    return torch.stack([chunks.mean((1, 2)), past.mean((1, 2))])


def evaluate(
    model: Decoder, data: Data, part: str = "test", scaling: str | None = None
) -> dict[str, Any]:
    """Loss at every multiple (None where refused: the learned table past its rows), over
    ``part``; for RoPE with ``scaling`` (an inference-time row), the scaling at each length."""
    loss: dict[str, float | None] = {}
    past: dict[str, float | None] = {}
    blocks: dict[str, list[float] | None] = {}
    refused: str | None = None
    trained_rope = model.rope
    try:
        for multiple in MULTIPLES:
            key = str(multiple)
            if scaling is not None:
                set_rope(model, inference_scaling(scaling, multiple, model.scale.L_train))
            try:
                result = block_losses(model, data, part, multiple)
            except IndexError as error:  # the learned table past its rows: a clear refusal
                loss[key], blocks[key] = None, None
                if multiple > 1:
                    past[key] = None
                refused = refused or str(error)
                continue
            loss[key] = round(float(result[0].mean()), 6)
            blocks[key] = [round(float(value), 5) for value in result[0]]
            if multiple > 1:
                past[key] = round(float(result[1].mean()), 6)
    finally:
        model.rope = trained_rope
    return {"loss": loss, "loss_past": past, "blocks": blocks, "refused": refused}


def passkey_accuracy(model: Decoder, seed: int, count: int = PASSKEY_EXAMPLES) -> dict[str, float]:
    """Exact-match retrieval at each input length of PASSKEY_LENGTHS (examples fixed by seed)."""
    device = next(model.parameters()).device
    accuracy = {}
    with torch.no_grad():
        for length in PASSKEY_LENGTHS:
            examples, answer = passkey_examples(seed, length, count)
            hits, size = [], max(1, EVAL_TOKENS // examples.shape[1])
            for start in range(0, count, size):
                rows = examples[start : start + size]
                logits = model(rows[:, :-1].to(device)).cpu()
                hits.append(passkey_correct(logits, rows, answer))
            accuracy[str(length)] = round(float(torch.cat(hits).double().mean()), 4)
    return accuracy


# -- checkpoints of pretrained models (fine-tuning starts from them) -----------------------------
def checkpoint_path(folder: Path, config: Config) -> Path:
    return folder / "checkpoints" / config.base.name().replace(".json", ".pt")


def pretrained(config: Config, folder: Path | None) -> tuple[Decoder, Data, dict[str, Any]]:
    """``config.base`` trained, from its checkpoint under ``folder`` when one matches; else
    trained (deterministically) and, with ``folder``, saved."""
    base = config.base
    path = checkpoint_path(folder, base) if folder is not None else None
    if path is not None and path.exists():
        saved = torch.load(path, map_location=base.device, weights_only=True)
        if saved["identity"] == _jsonable(base.identity()):
            model = Decoder(base.scheme, base.scale, base.dropout).to(base.device)
            model.load_state_dict(saved["state"])
            return model.eval(), Data.load(), saved["summary"]
    model, data, summary = pretrain(base)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {"identity": _jsonable(base.identity()), "state": model.state_dict()}
        # two workers may train the same model at once (its cache deleted): a file each
        partial = path.with_suffix(f".{os.getpid()}.partial")
        torch.save({**state, "summary": summary}, partial)
        partial.replace(path)
    return model, data, summary


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


# -- the record ------------------------------------------------------------------------------
def cpu_info() -> dict[str, Any]:
    """The CPU's model name and instruction-set flags (/proc/cpuinfo), torch's capability."""
    model, flags = platform.processor() or platform.machine(), []
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = sorted(value.split())
                    break
    except OSError:
        pass
    return {
        "cpu": model,
        "flags": flags,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cores": os.cpu_count(),
        "os": platform.platform(terse=True),
    }


def environment() -> dict[str, Any]:
    return {
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "posenc": posenc.__version__,
        },
        "machine": cpu_info(),
        "threads": torch.get_num_threads(),
    }


def record(
    config: Config, result: dict[str, Any], summary: dict[str, Any], data: Data
) -> dict[str, Any]:
    """A run's file: the schema's keys first, then what it was measured on."""
    ft = config.finetune
    return {
        "scheme": config.scheme,
        "seed": config.seed,
        "lr": config.lr,
        "role": config.role,
        "scale": config.scale.summary(),
        "finetune": None if ft is None else asdict(ft),
        "loss": result["loss"],
        "loss_past": result["loss_past"],
        "passkey": result.get("passkey"),
        "validation": result.get("validation"),
        "blocks": result["blocks"],
        "refused": result["refused"],
        "config": config.identity(),
        "steps": config.steps,
        "data": data.summary(),
        **environment(),
        "time": {**summary, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    }


def execute_base(config: Config, folder: Path | None = None) -> list[dict[str, Any]]:
    """Train ``config`` (no fine-tuning) and evaluate: its record; for RoPE (without passkey
    rows) also the inference-time scalings' records (schemes "rope+linear", ...)."""
    start = time.perf_counter()
    if config.passkey:
        model, data, summary = pretrained(config, folder)
    else:
        model, data, summary = pretrain(config)
    validation = evaluate(model, data, "validation")
    result = {**evaluate(model, data, "test"), "validation": validation["loss"]}
    if config.passkey:
        result["passkey"] = passkey_accuracy(model, config.seed)
    records = [record(config, result, summary, data)]
    if config.scheme == "rope" and config.role == "main" and not config.passkey:
        for kind in SCALINGS:
            scaled = {**evaluate(model, data, "test", kind), "validation": None}
            records.append(record(replace(config, scheme=f"rope+{kind}"), scaled, summary, data))
    total = round(time.perf_counter() - start, 2)
    for entry in records:
        entry["time"]["total_s"] = total
    return records


def execute_finetune(
    config: Config, checkpoints: Sequence[int], folder: Path | None = None
) -> list[dict[str, Any]]:
    """Fine-tune ``config``'s pretrained model with its scaling, recording it after each number
    of steps in ``checkpoints`` (0: the scaling alone). Fine-tuning continues at the
    pretraining rate, constant (pretraining has no decay to undo), on ``ft.batch`` rows of
    ``ft.length`` bytes (the tokens of a pretraining step), half of them passkey examples as in
    pretraining; so the model after n of N steps is the model of a run of n steps: one run gives
    every arm."""
    assert config.finetune is not None
    ft = config.finetune
    model, data, summary = pretrained(config, folder)
    factor = ft.length / config.scale.L_train
    set_rope(model, rope_scaling(ft.scaling, factor, config.scale.L_train))
    torch.manual_seed(config.seed + 1)  # the dropout masks of fine-tuning
    generator = torch.Generator().manual_seed(config.seed + 1)
    optimizer = torch.optim.AdamW(parameter_groups(model, config.weight_decay), lr=config.lr)
    records: list[dict[str, Any]] = []
    start = time.perf_counter()

    def measure(steps: int) -> None:
        model.eval()  # no dropout, and no draw from the generators training uses
        arm = replace(config, finetune=replace(ft, steps=steps))
        result = {**evaluate(model, data, "test"), "validation": None}
        result["passkey"] = passkey_accuracy(model, config.seed)
        seconds = time.perf_counter() - start
        per_step = round(1000 * trained[0] / steps, 2) if steps else None
        tuned = {"seconds": round(seconds, 2), "ms_per_step": per_step}
        times = {"pretrain": summary, "finetune": tuned, "total_s": round(seconds, 2)}
        records.append(record(arm, result, times, data))

    wanted = sorted(set(checkpoints))
    trained, evaluating = [0.0], [0.0]  # seconds spent training and evaluating so far
    if 0 in wanted:
        measure(0)
        evaluating[0] = time.perf_counter() - start
    shape = (ft.batch, ft.length)
    steps = train_steps(model, optimizer, data, generator, config, shape, max(wanted))
    for step, _ in steps:
        trained[0] = time.perf_counter() - start - evaluating[0]
        if step in wanted:
            before = time.perf_counter()
            measure(step)
            evaluating[0] += time.perf_counter() - before
            model.train()
    model.eval()
    return records


def step_cost(
    scale: Scale, length: int, steps: int = 5, passkey: float = 0.0, scheme: str = "rope"
) -> float:
    """Seconds per training step of ``scheme`` at ``scale`` and ``length``, in batches of as
    many tokens as pretraining's (after one warm-up step)."""
    data = Data.load()
    config = Config(scheme, 0, 1e-3, "main", scale, steps, passkey=passkey)
    model = Decoder(scheme, scale)
    optimizer = torch.optim.AdamW(parameter_groups(model, WEIGHT_DECAY), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    rows = BATCH * scale.L_train // length  # the tokens of a pretraining step
    run = train_steps(model, optimizer, data, generator, config, (rows, length), steps + 1)
    next(run)
    start = time.perf_counter()
    for _ in run:
        pass
    return (time.perf_counter() - start) / steps
