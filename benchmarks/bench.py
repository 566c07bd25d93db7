"""posenc's timings in one report: the input layer, the sinusoidal table and RoPE, each as a
multiple of its floor, with both allocator settings (see harness.py for how).

Sections (``--sections``, comma-separated keys or prefixes):

- ``input-{float32,bfloat16}-{inference,training}``: token ids to a (B, L, D) tensor. The
  floor is the least an input layer does: ``F.embedding(ids, weight)`` into a fresh tensor,
  then one out-of-place add of the (L, D) table (two passes over (B, L, D), two fresh
  outputs); in training, then ``F.dropout(p=0.1)``, forward and backward. Every candidate
  trains with dropout 0.1, the paper's setting and the one users train with.
- ``fused-{float32,float64}``: the fused layer's CPU inference paths A/B, as operations on
  the same module: the plain in-place path (lookup into a fresh tensor, then one in-place
  scale and add) against the block-wise path it once had (a cache-sized block of tokens
  at a time: lookup into the output, then scale and add while the block is in cache),
  kept here as ``blockwise`` so that the comparison can be rerun.
- ``kernels-bfloat16``: the eager layer's scale and add in each form (in place, out of
  place, ``out=`` a fresh tensor, ``out=`` the lookup), the same values: which kernel form
  is fastest in bfloat16.
- ``table``: ``sinusoidal_table(2**20, 512)`` against the first-touch floor, writing a fresh
  2 GiB float32 tensor once (``torch.empty`` then ``fill_``, page faults included).
- ``rope-{float32,bfloat16}``: the cases of ``rotary_cases.py`` (this directory), when it is
  there.
- ``rope-train-{float32,bfloat16}-{small,large}``: forward + backward of q and k at
  (8, 8, 256, 32) and (4, 32, 1024, 128), posenc against plain rotate-half under autograd
  (``rotary_cases.training_cases``); ``rope-token-{float32,bfloat16}``: one decoding
  step's ``rope(q)``, ``rope(k)`` against rotate-half with precomputed rows, caches
  flushed; ``rope-token-warm-*``: the same, caches warm.
- ``hf-rotary-*``, ``decode-*``, ``bias-*``: the cases of ``peer_cases.py`` (this directory),
  each beside the code it replaces (transformers' rotary and T5 bias, the ALiBi one-liner,
  the plain input layer), which is the section's floor; with transformers installed.
- ``attention-{1,4,8}k``: causal ALiBi attention at L = 1024, 4096, 8192 three ways, the
  same values: SDPA with the dense bias as ``attn_mask``, compiled FlexAttention with
  ``ALiBi.score_mod()`` and a causal block mask, and the same kernel with a hand-written
  ALiBi ``score_mod`` (the floor); each section's note holds each case's peak memory.
  ``attention-decode``: one token's ALiBi row over 201 keys against the float32 one-liner.
- ``llama-*``, ``mrope``, ``flux``: also from ``peer_cases.py``: a small Llama's forward
  before and after ``patch_rotary``, Qwen2-VL's ``get_rope_index`` against
  ``multimodal_positions``, diffusers' ``FluxPosEmbed`` against posenc's 3-axis tables
  (with diffusers installed).

``nox -s bench`` prints the report; ``nox -s bench -- --save`` also writes
``benchmarks/results/cpu-<threads>threads.json``, which the docs' Performance page renders
(nothing else is written, and nothing there is edited by hand).
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import inspect
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from harness import Case, Section, Settings, machine, report, run_both, run_child
from torch import nn
from torch.nn.functional import dropout, embedding

import posenc

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


# -- The Annotated Transformer's input layer, as its readers write it --------------------


class BaselineEmbeddings(nn.Module):
    """The Annotated Transformer's recipe: look up, then multiply by sqrt(d_model)."""

    def __init__(self, d_model: int, vocab: int) -> None:
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.d_model = d_model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lut(ids) * math.sqrt(self.d_model)


class BaselinePositional(nn.Module):
    """The Annotated Transformer's recipe: a float32 table, sliced and added, then dropout."""

    def __init__(self, d_model: int, dropout: float, max_len: int = 5000) -> None:
        super().__init__()
        pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
        freq = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        table = torch.zeros(max_len, d_model)
        table[:, 0::2] = torch.sin(pos * freq)
        table[:, 1::2] = torch.cos(pos * freq)
        self.register_buffer("pe", table.unsqueeze(0))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x + self.pe[:, : x.size(1)])


# -- Sections ----------------------------------------------------------------------------

DROPOUT = 0.1


def input_layer(dtype: torch.dtype, training: bool, args: argparse.Namespace) -> Section:
    b, length, d, vocab = args.batch, args.length, args.d_model, args.vocab
    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (b, length))
    grad = torch.randn(b, length, d).to(dtype)
    p = DROPOUT if training else 0.0

    fused = posenc.TokenAndPositionEmbedding(d, vocab, p).to(dtype)
    weight = fused.embeddings.lut.weight
    baseline = nn.Sequential(BaselineEmbeddings(d, vocab), BaselinePositional(d, p)).to(dtype)
    pair = nn.Sequential(posenc.Embeddings(d, vocab), posenc.PositionalEncoding(d, p)).to(dtype)
    floor_weight = nn.Parameter(weight.detach().clone())
    table = posenc.sinusoidal_table(length, d, dtype=dtype)
    with torch.no_grad():
        for seq in (baseline, pair):
            seq[0].lut.weight.copy_(weight)
    for module in (baseline, pair, fused):
        module.train(training)
    compiled = torch.compile(fused, fullgraph=True, dynamic=False)
    weights = [floor_weight, weight] + [m[0].lut.weight for m in (baseline, pair)]

    def floor() -> torch.Tensor:
        out = embedding(ids, floor_weight) + table
        return dropout(out, p, training=True) if training else out

    def step(forward: Callable[[], torch.Tensor]) -> Callable[[], object]:
        if not training:
            return forward

        def forward_backward() -> None:
            forward().backward(grad)
            for w in weights:
                w.grad = None

        return forward_backward

    name = str(dtype).removeprefix("torch.")
    cases = [
        ("floor", "floor: lookup + one add" + (" + dropout" if training else ""), step(floor)),
        ("baseline", "Annotated-Transformer-style pair", step(lambda: baseline(ids))),
        ("pair", "posenc Embeddings -> PositionalEncoding", step(lambda: pair(ids))),
        ("fused", "TokenAndPositionEmbedding, eager", step(lambda: fused(ids))),
        ("compiled", "TokenAndPositionEmbedding, torch.compile", step(lambda: compiled(ids))),
    ]
    section = Section.of(
        f"input-{name}-{'training' if training else 'inference'}",
        f"Input layer, {name}, "
        + (f"forward + backward, dropout {DROPOUT}" if training else "forward, inference mode"),
        "floor",
        cases,
        baseline="baseline",
        training=training,
        note=(
            f"ids (B, L) = ({b}, {length}) -> (B, L, D), D = {d}, vocab {vocab}. Floor: "
            "F.embedding(ids, weight) into a fresh tensor, then one out-of-place add of the "
            "(L, D) table"
            + (
                f", then F.dropout(p={DROPOUT}); backward to the embedding weight."
                if training
                else "."
            )
        ),
    )
    if not training:
        # The same compiled call in a tight loop: what a benchmark without a flush reports.
        # Then the parts the eager layers are made of: the lookup alone, and one in-place
        # elementwise pass over (B, L, D) (the eager layer makes two, the floor one).
        x = embedding(ids, floor_weight.detach())
        section.cases += [
            Case("compiled_warm", "TokenAndPositionEmbedding, torch.compile (warm)",
                 section.cases[-1].run, warm=True),
            Case("lookup", "part: lookup alone (F.embedding)", lambda: embedding(ids, weight)),
            Case("pass", "part: one in-place pass (x.add_(table))", lambda: x.add_(table)),
        ]  # fmt: skip
    return section


BLOCK = 1 << 20  # elements per block: the block-wise path's setting (4 MiB of float32)


def blockwise(
    ids: torch.Tensor, weight: torch.Tensor, scale: float, rows: torch.Tensor
) -> torch.Tensor:
    """``weight[ids] * scale + rows``, a block of about BLOCK elements at a time (the
    block-wise path TokenAndPositionEmbedding had: same operations, same roundings)."""
    length, d_model = ids.shape[-1], weight.shape[1]
    out = torch.empty((*ids.shape, d_model), dtype=weight.dtype)
    ids_, out_ = ids.reshape(-1, length), out.view(-1, length, d_model)
    if length * d_model >= BLOCK:
        sequences, tokens = 1, max(1, BLOCK // d_model)
    else:
        sequences, tokens = BLOCK // (length * d_model), length
    for first in range(0, ids_.shape[0], sequences):
        for start in range(0, length, tokens):
            block = out_[first : first + sequences, start : start + tokens]
            index = ids_[first : first + sequences, start : start + tokens].reshape(-1)
            torch.index_select(weight, 0, index, out=block.view(-1, d_model))
            block.mul_(scale).add_(rows[start : start + tokens])
    return out


def fused_paths(dtype: torch.dtype, args: argparse.Namespace) -> Section:
    b, length, d, vocab = args.batch, args.length, args.d_model, args.vocab
    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (b, length))
    layer = posenc.TokenAndPositionEmbedding(d, vocab).to(dtype).eval()
    weight, scale = layer.embeddings.lut.weight.detach(), layer.embeddings.scale
    rows = layer.positional.encoding(length)

    def inplace() -> torch.Tensor:
        return embedding(ids, weight).mul_(scale).add_(rows)

    if not torch.equal(blockwise(ids, weight, scale, rows), inplace()):
        raise AssertionError("the two paths must give the same values")
    if not torch.equal(layer(ids), inplace()):
        raise AssertionError("the module's path is the in-place one")
    name = str(dtype).removeprefix("torch.")
    return Section.of(
        f"fused-{name}",
        f"Fused layer's CPU paths, {name}, inference: block-wise vs plain in-place",
        "inplace",
        [
            ("inplace", "plain in-place: lookup, then scale and add in place", inplace),
            (
                "blockwise",
                "block-wise: a 4 MiB block at a time",
                lambda: blockwise(ids, weight, scale, rows),
            ),
            ("module", "TokenAndPositionEmbedding, eager", lambda: layer(ids)),
        ],
        note=(
            f"ids (B, L) = ({b}, {length}) -> (B, L, D), D = {d}, vocab {vocab}; no autograd. "
            "The block-wise path stays only if it is at least 10% faster than the in-place "
            "one under both allocators."
        ),
    )


def kernel_forms(dtype: torch.dtype, args: argparse.Namespace) -> Section:
    """The eager layer's two elementwise passes, in each form torch offers, same values."""
    b, length, d, vocab = args.batch, args.length, args.d_model, args.vocab
    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (b, length))
    layer = posenc.TokenAndPositionEmbedding(d, vocab).to(dtype).eval()
    weight, scale = layer.embeddings.lut.weight.detach(), layer.embeddings.scale
    rows = layer.positional.encoding(length)

    def inplace() -> torch.Tensor:
        return embedding(ids, weight).mul_(scale).add_(rows)

    def out_of_place() -> torch.Tensor:
        return embedding(ids, weight) * scale + rows

    def out_fresh() -> torch.Tensor:
        looked_up = embedding(ids, weight)
        out = torch.empty_like(looked_up)
        torch.mul(looked_up, scale, out=out)
        return torch.add(out, rows, out=out)

    def out_self() -> torch.Tensor:
        out = embedding(ids, weight)
        torch.mul(out, scale, out=out)
        return torch.add(out, rows, out=out)

    forms = [inplace, out_of_place, out_fresh, out_self]
    if not all(torch.equal(form(), layer(ids)) for form in forms):
        raise AssertionError("every form must give the module's values")
    name = str(dtype).removeprefix("torch.")
    return Section.of(
        f"kernels-{name}",
        f"The eager layer's passes, {name}, inference: in place, out of place, out=",
        "inplace",
        [
            ("inplace", "lookup, then mul_ and add_ (the module's form)", inplace),
            ("out_of_place", "lookup, then * and + (two fresh outputs)", out_of_place),
            ("out_fresh", "lookup, then mul and add with out= a fresh tensor", out_fresh),
            ("out_self", "lookup, then mul and add with out= the lookup", out_self),
        ],
        note=(
            f"ids (B, L) = ({b}, {length}) -> (B, L, D), D = {d}, vocab {vocab}; no autograd. "
            "Every form gives the same values, checked before timing."
        ),
    )


def straightforward_table(n: int, d_model: int) -> torch.Tensor:
    """The previous method: float64 angles, one float64 sin or cos per entry, in slices."""
    freqs = posenc.inverse_frequencies(d_model)
    out = torch.empty(n, d_model)
    step = max(1, (1 << 22) // freqs.numel())
    for start in range(0, n, step):
        pos = torch.arange(start, min(start + step, n), dtype=torch.float64)
        angles = pos.unsqueeze(-1) * freqs
        rows = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1).flatten(-2)
        out[start : start + step] = rows[..., :d_model]
    return out


def table(args: argparse.Namespace) -> Section:
    n, d = 2**args.table_log2, args.d_model
    mib = n * d * 4 / 2**20
    return Section.of(
        "table",
        f"sinusoidal_table(2**{args.table_log2}, {d}), float32",
        "floor",
        [
            ("floor", "floor: torch.empty + fill_", lambda: torch.empty(n, d).fill_(1)),
            ("posenc", "sinusoidal_table", lambda: posenc.sinusoidal_table(n, d)),
            ("previous", "one float64 sin or cos per entry (previous method)",
             lambda: straightforward_table(n, d)),
        ],
        calls=1,
        note=(
            f"A {mib:,.0f} MiB float32 output per call. Floor: writing it once (torch.empty, "
            "then fill_)."
            + (
                " With glibc's defaults every call's output is fresh memory, so the floor is "
                "the first touch, page faults included; the stable allocator reuses the freed "
                "block, so its column shows the work without page faults."
                if mib > 32
                else ""
            )
        ),
    )  # fmt: skip


def rotary(dtype: torch.dtype) -> Section | tuple[str, str]:
    name = str(dtype).removeprefix("torch.")
    key = f"rope-{name}"
    try:
        import rotary_cases  # type: ignore[import-not-found]

        cases = rotary_cases.make_cases(dtype)
    except Exception as exc:  # e.g. transformers missing: say so in the report
        return key, f"{type(exc).__name__}: {exc}"
    floor = getattr(rotary_cases, "FLOOR", "floor")
    baseline = getattr(rotary_cases, "BASELINE", None)
    note = (rotary_cases.__doc__ or "").strip().splitlines()[0]
    shape = {
        k: v.default
        for k, v in inspect.signature(rotary_cases.make_cases).parameters.items()
        if k in ("batch", "heads", "length", "head_dim")
    }
    note += (
        " q and k of (B, H, L, D) = ({batch}, {heads}, {length}, {head_dim}), each rotated"
        " into a fresh tensor.".format(**shape)
    )
    return Section.of(key, f"RoPE, {name}", floor, cases, baseline=baseline, note=note)


TRAINING_SHAPES = {"small": (8, 8, 256, 32), "large": (4, 32, 1024, 128)}


def rotary_training(dtype: torch.dtype, size: str) -> Section:
    import rotary_cases

    name = str(dtype).removeprefix("torch.")
    batch, heads, length, head_dim = TRAINING_SHAPES[size]
    cases = rotary_cases.training_cases(
        dtype, batch=batch, heads=heads, length=length, head_dim=head_dim
    )
    return Section.of(
        f"rope-train-{name}-{size}", f"RoPE forward + backward, {name}, {size}", "floor",
        cases, baseline="plain", training=True,
        note=f"q and k of (B, H, L, D) = {TRAINING_SHAPES[size]}, each rotated, then the "
        "backward of both. Floor: q, k and their two gradients copied into fresh tensors.",
    )  # fmt: skip


def rotary_token(dtype: torch.dtype, warm: bool = False) -> Section:
    import rotary_cases

    name = str(dtype).removeprefix("torch.")
    cases = [Case(*case, warm=warm) for case in rotary_cases.token_cases(dtype)]
    if warm:
        return Section(
            f"rope-token-warm-{name}", f"RoPE, one token, {name}, caches warm", "plain",
            cases, calls=TINY_CALLS,
            note="As rope-token, timed back to back without flushing the caches: a small "
            "model, whose step leaves the code and rows in cache between calls.",
        )  # fmt: skip
    return Section(
        f"rope-token-{name}", f"RoPE, one token, {name}", "plain", cases, calls=TINY_CALLS,
        note="q, k (1, 32, 1, 128) at 4000, caches flushed before each call (a large "
        "model's step, whose weights pass through the caches between calls). Floor: "
        "rotate-half with the rows precomputed in the input's dtype.",
    )  # fmt: skip


# -- Where a bias meets attention: dense bias + SDPA, FlexAttention, a hand-written score_mod --


def peak_bytes(run: Callable[[], object]) -> int | None:
    """The growth of resident memory over one call of ``run``: Linux's high-water mark, reset.

    Writing 5 to ``/proc/self/clear_refs`` resets ``VmHWM`` to the current resident size;
    after the call, ``VmHWM`` minus that size is the call's peak. It counts memory the
    allocator takes from the OS, so it is read under glibc's default allocator only (which
    returns its large blocks at once); None elsewhere.
    """
    import gc
    import os

    status = Path("/proc/self/status")
    if "GLIBC_TUNABLES" in os.environ or not status.exists():
        return None

    def field(name: str) -> int:
        line = next(x for x in status.read_text().splitlines() if x.startswith(name))
        return int(line.split()[1]) * 1024

    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    before = field("VmRSS:")
    run()
    return field("VmHWM:") - before


def attention_kernels(length: int) -> Section | tuple[str, str]:
    """Causal ALiBi attention three ways, the same values: which kernel, at what memory."""
    key = f"attention-{length // 1024}k"
    try:
        from torch.nn.attention.flex_attention import flex_attention
    except ImportError as exc:
        return key, f"{type(exc).__name__}: {exc}"
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    heads, head_dim = 8, 64
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, length, head_dim, generator=g) for _ in range(3))
    alibi = posenc.ALiBi(heads)
    slopes = alibi.slopes.float()
    flex = torch.compile(flex_attention, dynamic=False)
    mask = posenc.document_block_mask(length=length)
    ours = alibi.score_mod()

    def by_hand(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, i: torch.Tensor,
                j: torch.Tensor) -> torch.Tensor:  # fmt: skip
        return score + slopes[h] * (j - i)

    cases = [
        ("hand", "FlexAttention, a hand-written score_mod",
         lambda: flex(q, k, v, score_mod=by_hand, block_mask=mask)),
        ("flex", "FlexAttention, ALiBi.score_mod()",
         lambda: flex(q, k, v, score_mod=ours, block_mask=mask)),
        ("dense", "SDPA, attn_mask=ALiBi(8)(L, causal=True)",
         lambda: sdpa(q, k, v, attn_mask=alibi(length, causal=True))),
    ]  # fmt: skip
    with torch.inference_mode():
        for _, _, run in cases:  # compiled before the memory is read
            run()
        peaks = {name: peak_bytes(run) for name, _, run in cases}
    memory = ", ".join(
        f"{name} {peak / 2**20:.0f} MiB" for name, peak in peaks.items() if peak is not None
    )
    note = (
        f"q, k, v (1, {heads}, {length}, {head_dim}) float32, causal (a block mask for "
        "FlexAttention, compiled once per length; -inf in the dense bias); the dense bias "
        f"alone is {heads * length * length * 4 / 2**20:.0f} MiB."
        + (
            f" Peak memory over one call (resident growth, default allocator): {memory}."
            if memory
            else ""
        )
    )
    return Section.of(
        key, f"Causal ALiBi attention, L = {length}", "hand", cases,
        calls=None if length <= 1024 else 1, note=note,
    )  # fmt: skip


def alibi_decoding_row() -> Section:
    """One new token's ALiBi row over a cache: posenc against the float32 one-liner."""
    alibi = posenc.ALiBi(8)
    slopes = posenc.alibi_slopes(8).float()[:, None, None]

    def one_liner() -> torch.Tensor:
        return slopes * (torch.arange(201) - 200)

    return Section.of(
        "attention-decode", "ALiBi's decoding row, float32, (8, 1, 201)", "one_liner",
        [("one_liner", "slopes * (arange(201) - 200), float32", one_liner),
         ("alibi", "posenc ALiBi(8)(1, 201, offset=200)", lambda: alibi(1, 201, offset=200))],
        calls=25,
        note="The row of the query at 200 over keys 0 .. 200; the one-liner's slopes are "
        "a float32 tensor built once, outside the timed call, and posenc's scores by "
        "distance are kept from the first call (the warm-up's) on.",
    )  # fmt: skip


# Timed calls per round for the calls of tens of microseconds (one token): the median of
# more calls, so that one slow moment of a shared machine moves a round's figure less.
TINY_CALLS = 25


def peer_sections() -> dict[str, Callable[[], Section | tuple[str, str]]]:
    """The sections of ``peer_cases.py``: the peer's code as the floor, posenc beside it."""
    import peer_cases  # type: ignore[import-not-found]

    note = (peer_cases.__doc__ or "").strip().splitlines()[0]
    builders: dict[str, Callable[[], Section | tuple[str, str]]] = {}
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        builders[f"hf-rotary-{name}-4096"] = lambda dtype=dtype, name=name: Section.of(
            f"hf-rotary-{name}-4096", f"HF rotary_emb, {name}, position_ids (1, 4096)", "hf",
            peer_cases.hf_rotary(dtype, 4096), note=note + " cos and sin (1, 4096, 128).",
        )  # fmt: skip
        builders[f"hf-rotary-{name}-1"] = lambda dtype=dtype, name=name: Section.of(
            f"hf-rotary-{name}-1", f"HF rotary_emb, {name}, one token at 4000", "hf",
            peer_cases.hf_rotary(dtype, 1), calls=TINY_CALLS,
            note=note + " cos and sin (1, 1, 128).",
        )  # fmt: skip
        builders[f"decode-{name}-rope"] = lambda dtype=dtype, name=name: Section.of(
            f"decode-{name}-rope", f"Decoding step, RoPE, {name}", "hf",
            peer_cases.decode_rope(dtype), calls=TINY_CALLS,
            note=note + " q, k (1, 32, 1, 128) at 4000.",
        )  # fmt: skip
        builders[f"decode-{name}-input"] = lambda dtype=dtype, name=name: Section.of(
            f"decode-{name}-input", f"Decoding step, input layer, {name}", "plain",
            peer_cases.decode_input(dtype), calls=TINY_CALLS,
            note=note + " ids (1, 1) at 4000, D = 512.",
        )  # fmt: skip
        builders[f"llama-{name}"] = lambda dtype=dtype, name=name: Section.of(
            f"llama-{name}", f"Small Llama forward, {name}, patch_rotary", "hf",
            peer_cases.llama(dtype), calls=1,
            note=note + " 4 layers, hidden 256, ids (1, 512).",
        )  # fmt: skip
    builders["mrope"] = lambda: Section.of(
        "mrope", "M-RoPE position ids, Qwen2-VL, (3, 2, 602)", "hf", peer_cases.mrope(),
        note=note + " Text, an image and a video: ids (3, 2, 602).",
    )  # fmt: skip

    def flux_section() -> Section | tuple[str, str]:
        try:
            cases = peer_cases.flux()
        except ImportError as exc:  # diffusers missing or not importable: say so
            return "flux", f"{type(exc).__name__}: {exc}"
        return Section.of(
            "flux", "FLUX rotary tables, axes (16, 56, 56), 4608 positions", "diffusers",
            cases, note=note + " cos and sin (4608, 128) and (4608, 64).",
        )  # fmt: skip

    builders["flux"] = flux_section
    for length in (512, 4096):
        builders[f"bias-{length}"] = lambda length=length: Section.of(
            f"bias-{length}", f"ALiBi and T5 biases, float32, (8, {length}, {length})",
            "one_liner", peer_cases.biases(length), baseline="t5",
            calls=None if length == 512 else 1,
            note=note + " ALiBi's floor is the one-liner; T5's reference is compute_bias.",
        )  # fmt: skip
    return builders


def sections(args: argparse.Namespace) -> Iterator[Section | tuple[str, str]]:
    """Each selected section, built only when it is its turn (one set of tensors at a time)."""
    builders: dict[str, Callable[[], Section | tuple[str, str]]] = {}
    for dtype in (torch.float32, torch.bfloat16):
        for training in (False, True):
            name = str(dtype).removeprefix("torch.")
            key = f"input-{name}-{'training' if training else 'inference'}"
            builders[key] = lambda dtype=dtype, training=training: input_layer(
                dtype, training, args
            )
    for dtype in (torch.float32, torch.float64):
        builders[f"fused-{str(dtype).removeprefix('torch.')}"] = lambda dtype=dtype: fused_paths(
            dtype, args
        )
    builders["kernels-bfloat16"] = lambda: kernel_forms(torch.bfloat16, args)
    builders["table"] = lambda: table(args)
    if importlib.util.find_spec("rotary_cases") is not None:
        for dtype in (torch.float32, torch.bfloat16):
            name = str(dtype).removeprefix("torch.")
            builders[f"rope-{name}"] = lambda dtype=dtype: rotary(dtype)
            for size in TRAINING_SHAPES:
                builders[f"rope-train-{name}-{size}"] = lambda dtype=dtype, size=size: (
                    rotary_training(dtype, size)
                )
            builders[f"rope-token-{name}"] = lambda dtype=dtype: rotary_token(dtype)
            builders[f"rope-token-warm-{name}"] = lambda dtype=dtype: rotary_token(dtype, True)
    if importlib.util.find_spec("transformers") is not None:
        builders.update(peer_sections())
    builders.update(
        {f"attention-{n}k": lambda n=n: attention_kernels(n * 1024) for n in (1, 4, 8)}
        | {"attention-decode": alibi_decoding_row}
    )
    patterns = args.sections.split(",")
    for key, build in builders.items():
        if any(fnmatch.fnmatch(key, p) or key.startswith(p) for p in patterns):
            yield build()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sections",
        default="input,fused,kernels,table,rope,hf-rotary,decode,bias,llama,mrope,flux,attention",
        help="keys or prefixes",
    )  # fmt: skip
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=32_000)
    parser.add_argument("--table-log2", type=int, default=20, help="the table has 2**N rows")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5, help="timed calls per case per round")
    parser.add_argument("--flush-mib", type=int, default=64)
    parser.add_argument(
        "--save", nargs="?", const="", metavar="NAME",
        help="write benchmarks/results/NAME.json (default NAME: cpu-<threads>threads)",
    )  # fmt: skip
    parser.add_argument("--child", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    settings = Settings(args.rounds, args.calls, args.flush_mib, args.threads)
    if args.child:
        run_child(lambda: sections(args), settings, args.child)
        return

    argv = [a for a in sys.argv[1:] if a not in ("--save", args.save)]
    results = {
        "posenc": posenc.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "settings": vars(settings),
        "shape": {
            "batch": args.batch,
            "length": args.length,
            "d_model": args.d_model,
            "vocab": args.vocab,
            "table_rows": 2**args.table_log2,
        },
        **run_both(__file__, argv),
    }
    print()
    print(report(results))
    if args.save is not None:
        path = RESULTS / f"{args.save or f'cpu-{args.threads}threads'}.json"
        path.write_text(json.dumps(results, indent=1) + "\n")
        print(f"\nwrote {path.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
