"""RoPE timings: posenc against the copy floor and Hugging Face's apply_rotary_pos_emb.

Every case rotates one query tensor and one key tensor of shape (B, H, L, D), as an
attention layer does, and returns new tensors (nothing is rotated in place):

- floor: ``torch.empty_like(t).copy_(t)`` for q and k. Reading each input once and
  writing a *fresh* output is the least any rotation that returns a new tensor can do;
  the output is allocated on every call, as every candidate's is.
- floor, preallocated: ``out.copy_(t)`` into outputs allocated once (shows what the
  allocation costs: with the default glibc allocator each fresh 64 MiB output is new
  memory from the OS, page faults included).
- posenc eager: ``RotaryEmbedding(D).to(dtype)`` called on q and on k (its float32
  tables; bfloat16 is rotated in float32 and rounded once).
- posenc compiled: the same module under ``torch.compile(fullgraph=True)``.
- HF eager / HF compiled: ``transformers``' Llama ``apply_rotary_pos_emb(q, k, cos,
  sin)``, with cos and sin computed beforehand by ``LlamaRotaryEmbedding`` (in the
  input's dtype, as Hugging Face serves them); compiled with ``fullgraph=True``.
- bound: ``t * table`` compiled, one multiplication by a broadcast (L, D) table: what
  any rotation that reads a position table must do besides the copy. With D values
  per position the table is as large as one (b, h) slice of q, read again for each of
  the B·H slices (from cache, but it is read).
- (bf16/fp16 only) posenc's operations in the input's dtype: ``apply_rotary`` with
  tables rounded to bfloat16, so the products are rounded twice. posenc does not offer
  this; it prices the one-rounding contract.

``make_cases`` builds them for a harness; run this file to time them here, in
interleaved rounds (``torch.utils.benchmark``, one median per case per round; the
report gives the median of the rounds and their range)::

    python benchmarks/rotary_cases.py [--rounds 5] [--allocators both]

The inputs (64 MiB each in float32) are larger than the last-level cache: every call
streams them from memory, nothing is flushed between calls; the cos/sin tables
(0.5 MiB) stay in cache, as they do across the layers of a model.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable

import torch
from torch.utils import benchmark

import posenc

TUNED = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184"


def make_cases(
    dtype: torch.dtype,
    *,
    batch: int = 4,
    heads: int = 32,
    length: int = 1024,
    head_dim: int = 128,
) -> list[tuple[str, str, Callable[[], object]]]:
    """``(name, label, run)`` for each case; ``run()`` rotates one (q, k) pair."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    torch.manual_seed(0)
    q = torch.randn(batch, heads, length, head_dim).to(dtype)
    k = torch.randn(batch, heads, length, head_dim).to(dtype)
    out_q, out_k = torch.empty_like(q), torch.empty_like(k)

    rope = posenc.RotaryEmbedding(head_dim, max_len=max(length, 4096)).to(dtype)
    compiled_rope = torch.compile(rope, fullgraph=True, dynamic=False)

    config = LlamaConfig(
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        head_dim=head_dim,
        max_position_embeddings=max(length, 4096),
    )
    hf_rope = LlamaRotaryEmbedding(config).to(dtype)
    position_ids = torch.arange(length).expand(batch, -1)
    with torch.no_grad():
        cos, sin = hf_rope(q, position_ids)
    compiled_hf = torch.compile(apply_rotary_pos_emb, fullgraph=True, dynamic=False)
    table = torch.randn(length, head_dim).to(dtype)
    times_table = torch.compile(lambda t: t * table, fullgraph=True, dynamic=False)

    cases: list[tuple[str, str, Callable[[], object]]] = [
        (
            "floor",
            "floor: empty_like + copy_ (fresh output)",
            lambda: (torch.empty_like(q).copy_(q), torch.empty_like(k).copy_(k)),
        ),
        (
            "floor_prealloc",
            "copy_ into preallocated outputs",
            lambda: (out_q.copy_(q), out_k.copy_(k)),
        ),
        ("posenc", "posenc eager", lambda: (rope(q), rope(k))),
        ("posenc_compiled", "posenc compiled", lambda: (compiled_rope(q), compiled_rope(k))),
        ("hf", "HF apply_rotary_pos_emb eager", lambda: apply_rotary_pos_emb(q, k, cos, sin)),
        ("hf_compiled", "HF apply_rotary_pos_emb compiled", lambda: compiled_hf(q, k, cos, sin)),
        (
            "table_bound",
            "bound: t * (L, D) table, compiled",
            lambda: (times_table(q), times_table(k)),
        ),
    ]
    if dtype in (torch.bfloat16, torch.float16):
        low_cos, low_sin = rope.cos_sin(length, dtype=dtype)
        cases.append((
            "two_roundings",
            f"posenc ops in {str(dtype).removeprefix('torch.')} (two roundings)",
            lambda: (
                posenc.apply_rotary(q, low_cos, low_sin),
                posenc.apply_rotary(k, low_cos, low_sin),
            ),
        ))  # fmt: skip
    return cases


def training_cases(
    dtype: torch.dtype, *, batch: int, heads: int, length: int, head_dim: int
) -> list[tuple[str, str, Callable[[], object]]]:
    """Forward + backward of q and k, (B, H, L, D) each: posenc against plain rotate-half.

    - floor: the copy floor of both directions: q and k copied into fresh tensors, and
      their two gradients copied again (what any rotation and its backward must write).
    - plain: ``q * cos + rotate_half(q) * sin`` with (L, D) tables in the input's dtype,
      as the models' code and Hugging Face write it; autograd derives its backward.
    - posenc: ``RotaryEmbedding(D)`` on q and on k, whose backward is the rotation back.
    """
    torch.manual_seed(0)
    q, k, grad_q, grad_k = (torch.randn(batch, heads, length, head_dim).to(dtype) for _ in "qkgg")
    q.requires_grad_(True)
    k.requires_grad_(True)
    rope = posenc.RotaryEmbedding(head_dim, max_len=max(length, 4096))
    cos, sin = rope.cos_sin(length)
    cos, sin = torch.cat((cos, cos), -1).to(dtype), torch.cat((sin, sin), -1).to(dtype)
    h = head_dim // 2

    def rotate_half(t: torch.Tensor) -> torch.Tensor:
        return torch.cat((-t[..., h:], t[..., :h]), dim=-1)

    def step(rotate: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], object]:
        def run() -> None:
            torch.autograd.backward((rotate(q), rotate(k)), (grad_q, grad_k))
            q.grad = k.grad = None

        return run

    def floor() -> object:
        with torch.no_grad():
            return [torch.empty_like(t).copy_(t) for t in (q, k, grad_q, grad_k)]

    return [
        ("floor", "floor: 4 copies (q, k, their gradients)", floor),
        ("plain", "plain rotate-half, autograd", step(lambda t: t * cos + rotate_half(t) * sin)),
        ("posenc", "posenc RotaryEmbedding", step(rope)),
    ]


def token_cases(dtype: torch.dtype) -> list[tuple[str, str, Callable[[], object]]]:
    """One decoding step's rotation: q and k (1, 32, 1, 128) at position 4000, inference.

    - plain: rotate-half with the token's (1, D) cos and sin rows, precomputed in the
      input's dtype (the least a model's code does per step).
    - posenc: ``rope(q, offset=4000)`` and ``rope(k, offset=4000)``.
    """
    torch.manual_seed(0)
    q, k = (torch.randn(1, 32, 1, 128).to(dtype) for _ in "qk")
    rope = posenc.RotaryEmbedding(128, max_len=4096)
    cos, sin = rope.cos_sin(1, offset=4000)
    cos, sin = torch.cat((cos, cos), -1).to(dtype), torch.cat((sin, sin), -1).to(dtype)

    def plain() -> object:
        return [t * cos + torch.cat((-t[..., 64:], t[..., :64]), dim=-1) * sin for t in (q, k)]

    return [
        ("plain", "plain rotate-half, rows precomputed", plain),
        (
            "posenc",
            "posenc rope(q), rope(k)",
            lambda: (rope(q, offset=4000), rope(k, offset=4000)),
        ),
    ]


def time_cases(
    cases: list[tuple[str, str, Callable[[], object]]], rounds: int, min_run_time: float
) -> dict[str, list[float]]:
    """One median per case per round, the cases interleaved within each round."""
    for _, _, run in cases:  # compile and warm up
        for _ in range(3):
            run()
    medians: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    for _ in range(rounds):
        for name, _, run in cases:
            timer = benchmark.Timer("run()", globals={"run": run})
            medians[name].append(timer.blocked_autorange(min_run_time=min_run_time).median)
    return medians


def report(dtype: torch.dtype, args: argparse.Namespace) -> None:
    cases = make_cases(
        dtype, batch=args.batch, heads=args.heads, length=args.length, head_dim=args.head_dim
    )
    with torch.no_grad():
        medians = time_cases(cases, args.rounds, args.min_run_time)
    floor = statistics.median(medians["floor"])
    hf = statistics.median(medians["hf"])
    print(f"\n{str(dtype).removeprefix('torch.')}, (q, k) each "
          f"({args.batch}, {args.heads}, {args.length}, {args.head_dim}):")  # fmt: skip
    print(f"  {'case':44s} {'median ms':>10s} {'range ms':>17s} {'/ floor':>8s} {'/ HF':>6s}")
    for name, label, _ in cases:
        m = medians[name]
        mid = statistics.median(m)
        span = f"{min(m) * 1e3:.2f}-{max(m) * 1e3:.2f}"
        print(f"  {label:44s} {mid * 1e3:10.2f} {span:>17s} {mid / floor:8.2f} {mid / hf:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-run-time", type=float, default=0.3)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument(
        "--allocators", choices=["current", "both"], default="current",
        help="'both': run once with glibc's defaults and once with GLIBC_TUNABLES=" + TUNED,
    )  # fmt: skip
    args = parser.parse_args()
    if args.allocators == "both":
        argv = [a for a in sys.argv[1:] if a not in ("--allocators", "both")]
        for tuned in (False, True):
            env = dict(os.environ)
            env.pop("GLIBC_TUNABLES", None)
            if tuned:
                env["GLIBC_TUNABLES"] = TUNED
            subprocess.run([sys.executable, __file__, *argv], env=env, check=True)
        return
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    allocator = f"GLIBC_TUNABLES={tunables}" if tunables else "glibc defaults"
    print(f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads, "
          f"allocator: {allocator}")  # fmt: skip
    for name in args.dtypes.split(","):
        report(getattr(torch, name), args)


if __name__ == "__main__":
    main()
