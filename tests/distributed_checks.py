"""The checks that tests/test_distributed.py runs in each of its spawned ranks (not a test module).

:func:`main` is the body of each process: it joins a gloo group through a FileStore in
the test's temporary directory (no network port), builds a 1-D CPU mesh over the ranks,
runs every check of :data:`CHECKS` in order (the same order on every rank, so that their
collectives meet), and saves ``{name: None or the traceback}`` for the parent to assert.
Every check compares the ranks with one process computing the whole input, bit for bit
where the arithmetic is the same and with a stated tolerance where a sum over ranks
reorders additions.
"""

from __future__ import annotations

import os
import tempfile
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

import posenc
from posenc import shard_order, shard_positions

D, HEADS, VOCAB, MAX_LEN, B, L = 16, 2, 50, 64, 2, 16
TRAINED = 8  # dynamic and longrope: the trained length, below L, so that the length matters
SCALINGS: dict[str, dict[str, Any] | None] = {
    "rope": None,
    "rope_dynamic": {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": TRAINED},
    "rope_longrope": {
        "rope_type": "longrope",
        "factor": 4.0,
        "original_max_position_embeddings": TRAINED,
        "short_factor": [1.0, 1.5, 2.0, 2.5],
        "long_factor": [3.0, 5.0, 7.0, 9.0],
    },
}
SCHEMES = ("sinusoid", "fused", "learned", *SCALINGS, "alibi", "t5")
LAYOUTS = ("contiguous", "zigzag")


class Net(nn.Module):
    """A linear layer and one scheme: the smallest model that trains through the scheme."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.embed = posenc.TokenAndPositionEmbedding(D, VOCAB) if kind == "fused" else None
        self.proj = nn.Linear(D, D)
        scheme: nn.Module | None
        if kind == "sinusoid":
            scheme = posenc.PositionalEncoding(D)
        elif kind == "learned":
            scheme = posenc.LearnedPositionalEmbedding(MAX_LEN, D)
        elif kind in SCALINGS:
            scheme = posenc.RotaryEmbedding(D // HEADS, scaling=SCALINGS[kind], max_len=MAX_LEN)
        elif kind == "alibi":
            scheme = posenc.ALiBi(HEADS)
        elif kind == "t5":
            scheme = posenc.RelativePositionBias(HEADS)
        else:
            scheme = None
        self.scheme = scheme

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        key_positions: Tensor | None = None,
        seq_len: int | None = None,
    ) -> Tensor:
        if self.embed is not None:  # x: token ids (B, L_r)
            # tanh: a fresh output (a linear layer's output of (B, L, D) is a view, which
            # FSDP2 warns about)
            return torch.tanh(self.proj(self.embed(x, positions=positions)))
        h = self.proj(x)
        if self.kind in ("sinusoid", "learned"):
            out = self.scheme(h, positions=positions)
            return out
        b, n = h.shape[:2]
        heads = h.view(b, n, HEADS, D // HEADS).transpose(1, 2)  # (B, H, L_r, D/H)
        if self.kind in SCALINGS:
            out = self.scheme(heads, positions=positions, seq_len=seq_len)
            return out
        bias = self.scheme(n, positions=positions, key_positions=key_positions)
        return heads.sum(-1, keepdim=True) + bias  # (B, H, L_r, L_k)

    def inputs(self, generator: torch.Generator) -> Tensor:
        if self.kind == "fused":
            return torch.randint(0, VOCAB, (B, L), generator=generator)
        return torch.randn(B, L, D, generator=generator)


class Models(nn.Module):
    """Several models under one root, for one checkpoint."""

    def __init__(self, **models: nn.Module) -> None:
        super().__init__()
        self.models = nn.ModuleDict(models)

    def forward(self, x: Tensor) -> list[Tensor]:
        return [m(x) for m in self.models.values()]


@dataclass
class Ranks:
    rank: int
    world: int
    mesh: DeviceMesh
    root: str

    def shard(self, t: Tensor, dim: int, layout: str) -> Tensor:
        """This rank's piece of ``t`` along ``dim``, in ``layout``."""
        order = shard_order(t.shape[dim], self.world, layout=layout)  # type: ignore[arg-type]
        return t.index_select(dim, order).chunk(self.world, dim)[self.rank]

    def gather(self, t: Tensor) -> list[Tensor]:
        out = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(out, t.contiguous())
        return out


def expect_equal(got: Tensor, want: Tensor, what: str) -> None:
    got = got.full_tensor() if isinstance(got, DTensor) else got
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(
            f"{what}: got {tuple(got.shape)} {got.dtype}, want {tuple(want.shape)} {want.dtype}"
        )
    if not torch.equal(got, want):
        diff = (got.double() - want.double()).abs().nan_to_num(float("inf")).max().item()
        raise AssertionError(f"{what}: not bit-equal to one process (max difference {diff:.3g})")


def expect_close(got: Tensor, want: Tensor, what: str, rtol: float = 1e-5) -> None:
    got = got.full_tensor() if isinstance(got, DTensor) else got
    if not torch.allclose(got, want, rtol=rtol, atol=rtol * want.abs().max().item()):
        diff = (got - want).abs().max().item()
        raise AssertionError(f"{what}: differs from one process by {diff:.3g} (rtol {rtol})")


def made(kind: str, seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net(kind)


def full_params(model: nn.Module) -> dict[str, Tensor]:
    return {
        name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
        for name, p in model.named_parameters()
    }


def train(model: nn.Module, x: Tensor, steps: int = 3, **kwargs: Any) -> Tensor:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = model(x, **kwargs)
    for _ in range(steps):
        opt.zero_grad()
        (model(x, **kwargs) ** 2).mean().backward()
        opt.step()
    return first.detach()


# -- The checks ------------------------------------------------------------------------------


def check_balancers(r: Ranks) -> None:
    """shard_order / shard_positions against torch's own load balancers and context_parallel."""
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import (
        _HeadTailLoadBalancer,
        _PerDocumentHeadTailLoadBalancer,
    )

    for length, world in ((8, 2), (24, 3), (32, 4), (0, 2)):
        torch_order = _HeadTailLoadBalancer(length, world, "cpu")._generate_indices()[0]
        back = _HeadTailLoadBalancer(length, world, "cpu")._generate_indices(restore=True)[0]
        expect_equal(
            shard_order(length, world, layout="zigzag"), torch_order.long(), f"zigzag {length}"
        )
        expect_equal(
            shard_order(length, world, layout="zigzag", inverse=True),
            back.long(),
            f"zigzag inverse {length}",
        )
    for docs, world in (([4, 8, 12], 2), ([6, 12], 3), ([8], 4)):
        torch_order = _PerDocumentHeadTailLoadBalancer([docs], world, "cpu")._generate_indices()[0]
        # torch lists each document's chunks rank by rank; rank-major takes, for each
        # rank, its two chunks of every document.
        starts = [sum(docs[:i]) for i in range(len(docs))]
        rank_major = torch.cat(
            [
                torch_order[s + k * (n // world) : s + (k + 1) * (n // world)]
                for k in range(world)
                for s, n in zip(starts, docs, strict=True)
            ]
        )
        ours = shard_order(sum(docs), world, layout="zigzag", lengths=docs)
        expect_equal(ours, rank_major.long(), f"per-document {docs}")
        within = posenc.positions_from_lengths(docs)
        for rank in range(world):
            n = sum(docs) // world
            expect_equal(
                shard_positions(sum(docs), world, rank, layout="zigzag", lengths=docs),
                within[rank_major[rank * n : (rank + 1) * n].long()],
                f"per-document positions {docs} rank {rank}",
            )
    # torch's context_parallel shards its buffers head-tail: each rank keeps the tokens
    # at the positions shard_positions names.
    buf = torch.arange(L).expand(B, L).clone()
    with context_parallel(r.mesh, buffers=[buf], buffer_seq_dims=[1], no_restore_buffers={buf}):
        expect_equal(
            buf[0], shard_positions(L, r.world, r.rank, layout="zigzag"), "context_parallel"
        )


def check_torch_sdpa_context_parallel(r: Ranks) -> None:
    """torch's experimental context parallelism: its SDPA path has no CPU sharding rule.

    (Its FlexAttention path runs on CPU, but builds its block mask with the inductor
    compiler, too slow for this test; docs/guide/ranks.rst says how it was checked.)
    When this starts to run, the guide's note on CPU needs updating.
    """
    import torch.nn.functional as F  # noqa: N812
    from torch.distributed.tensor.experimental import context_parallel

    q, k, v = (torch.randn(1, HEADS, L, 8) for _ in range(3))
    rope = posenc.RotaryEmbedding(8)
    pos = shard_positions(L, r.world, r.rank, layout="zigzag")
    try:
        with context_parallel(r.mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            rq, rk = rope(q, positions=pos), rope(k, positions=pos)
            F.scaled_dot_product_attention(rq, rk, v, is_causal=True)
    except NotImplementedError as exc:
        if "does not have a sharding strategy" not in str(exc):
            raise
    else:
        raise AssertionError("torch's SDPA context parallelism ran on CPU: update the guide")


def check_fsdp(r: Ranks, kind: str) -> None:
    """fully_shard: forward and 3 AdamW steps bit-equal to one process, every rank one batch."""
    data = torch.Generator().manual_seed(1)
    reference = made(kind)
    x = reference.inputs(data)
    want = train(reference, x)
    model = made(kind)
    fully_shard(model, mesh=r.mesh)
    got = train(model, x)
    expect_equal(got, want, f"{kind}: forward")
    final = full_params(model)
    for name, p in full_params(reference).items():
        expect_equal(final[name], p, f"{kind}: {name} after 3 AdamW steps")


def check_meta_init(r: Ranks) -> None:
    """meta init -> fully_shard -> to_empty derives every table again, bit for bit."""
    for kind in ("sinusoid", "fused", "rope", "rope_dynamic"):
        with torch.device("meta"):
            model = Net(kind)
        fully_shard(model, mesh=r.mesh)
        model.to_empty(device="cpu")
        fresh = Net(kind)
        tables = dict(fresh.named_buffers())
        assert tables, kind
        for name, buf in model.named_buffers():
            expect_equal(buf, tables[name], f"{kind}: {name} after meta init")


def check_checkpoint(r: Ranks) -> None:
    """A distributed checkpoint round-trips the parameters and holds no table."""
    path = os.path.join(r.root, "dcp_posenc")
    model = Models(pe=made("sinusoid"), rope=made("rope"), learned=made("learned", seed=1))
    fully_shard(model, mesh=r.mesh)
    dcp.save(model.state_dict(), checkpoint_id=path)
    keys = set(dcp.FileSystemReader(path).read_metadata().state_dict_metadata)
    tables = [k for k in keys if k.endswith((".pe", "._cos", "._sin"))]
    assert not tables, f"the checkpoint holds tables: {tables}"
    assert keys == set(model.state_dict()), keys
    other = Models(pe=made("sinusoid", 5), rope=made("rope", 6), learned=made("learned", 7))
    fully_shard(other, mesh=r.mesh)
    state = other.state_dict()
    dcp.load(state, checkpoint_id=path)
    other.load_state_dict(state)
    want = full_params(model)
    for name, p in full_params(other).items():
        expect_equal(p, want[name], f"loaded {name}")


def check_annotated_checkpoint(r: Ranks) -> None:
    """Annotated Transformer keys ("0.lut.weight", "1.pe") through torch.distributed.checkpoint.

    dcp.load reads the keys of the state dict it is given: rename them to the
    checkpoint's (the recipe of docs/guide/ranks.rst), load, and let
    load_state_dict map them back.
    """
    path = os.path.join(r.root, "dcp_annotated")
    torch.manual_seed(3)
    lut = torch.randn(VOCAB, D)
    saved = {"0.lut.weight": lut, "1.pe": posenc.PositionalEncoding(D).pe.clone()}
    dcp.save(saved, checkpoint_id=path)
    layer = posenc.TokenAndPositionEmbedding(D, VOCAB)
    fully_shard(layer, mesh=r.mesh)
    ours = layer.state_dict()
    renamed = {"0." + k.removeprefix("embeddings."): v for k, v in ours.items()}
    dcp.load(renamed, checkpoint_id=path)
    layer.load_state_dict(renamed)
    expect_equal(layer.embeddings.lut.weight.full_tensor(), lut, "lut after the recipe")


def check_learned_init(r: Ranks) -> None:
    """The recipe for a learned table initialised after sharding: draw it whole, distribute it."""
    with torch.device("meta"):
        model = posenc.LearnedPositionalEmbedding(MAX_LEN, D)
    fully_shard(model, mesh=r.mesh)
    model.to_empty(device="cpu")
    torch.manual_seed(11)
    whole = posenc.LearnedPositionalEmbedding(MAX_LEN, D).weight  # one process's draw
    with torch.no_grad():
        model.weight.copy_(distribute_tensor(whole.detach(), r.mesh, model.weight.placements))
    table = model.weight.full_tensor()
    expect_equal(table, whole.detach(), "the table after the recipe")
    half = MAX_LEN // r.world
    assert not torch.equal(table[:half], table[half:]), "the shards drew the same rows"


def check_context_parallel(r: Ranks, kind: str, layout: str) -> None:
    """Each rank's shard with positions= from shard_positions gives its rows of one process."""
    data = torch.Generator().manual_seed(2)
    model = made(kind)
    x = model.inputs(data)
    pos = shard_positions(L, r.world, r.rank, layout=layout)  # type: ignore[arg-type]
    seq_len = L if kind in SCALINGS else None
    with torch.no_grad():
        whole = model(x, seq_len=seq_len)
        if kind in ("alibi", "t5"):
            mine = model(r.shard(x, 1, layout), positions=pos, key_positions=torch.arange(L))
            want = r.shard(whole, 2, layout)
        else:
            mine = model(r.shard(x, 1, layout), positions=pos, seq_len=seq_len)
            want = r.shard(whole, 1 if kind in ("sinusoid", "fused", "learned") else 2, layout)
    expect_equal(mine, want, f"{kind}, {layout}")


def check_rope_seq_len(r: Ranks) -> None:
    """dynamic and longrope: the global seq_len gives every rank the frequencies of one process."""
    for kind in ("rope_dynamic", "rope_longrope"):
        rope = made(kind).scheme
        assert rope is not None
        q = torch.randn(B, HEADS, L, D // HEADS)
        for layout in LAYOUTS:
            pos = shard_positions(L, r.world, r.rank, layout=layout)  # type: ignore[arg-type]
            mine = rope(r.shard(q, 2, layout), positions=pos, seq_len=L)
            expect_equal(mine, r.shard(rope(q), 2, layout), f"{kind}, {layout}")
            cos, _ = rope.cos_sin(pos.numel(), positions=pos, seq_len=L)
            expect_equal(cos, r.shard(rope.cos_sin(L)[0], 0, layout), f"{kind} cos, {layout}")


def check_bias_blocks(r: Ranks) -> None:
    """Ring attention: each step's bias block from query positions + key_positions.

    At ring step s a rank holds the keys of rank (rank - s) % W; the bias block of its
    queries over those keys is the block of the whole bias. T5's table gradient, summed
    over the ranks (as FSDP and DDP reduce it), is one process's gradient.
    """
    for layout in LAYOUTS:
        pos = shard_positions(L, r.world, r.rank, layout=layout)  # type: ignore[arg-type]
        key_blocks = r.gather(pos)
        for bias in (posenc.ALiBi(HEADS), made("t5").scheme):
            assert bias is not None
            with torch.no_grad():
                whole = bias(L)
                for step in range(r.world):
                    keys = key_blocks[(r.rank - step) % r.world]
                    block = bias(pos.numel(), positions=pos, key_positions=keys)
                    want = whole[:, pos][:, :, keys]
                    expect_equal(block, want, f"{type(bias).__name__} {layout} step {step}")
        t5 = made("t5").scheme
        assert t5 is not None
        weights = torch.randn(HEADS, L, L, generator=torch.Generator().manual_seed(4))
        (t5(L) * weights).sum().backward()
        want = t5.relative_attention_bias.weight.grad.clone()
        t5.zero_grad()
        loss = sum(
            (
                t5(pos.numel(), positions=pos, key_positions=keys) * weights[:, pos][:, :, keys]
            ).sum()
            for keys in key_blocks
        )
        loss.backward()
        grad = t5.relative_attention_bias.weight.grad.clone()
        dist.all_reduce(grad)
        expect_close(grad, want, f"T5 gradient summed over ranks, {layout}", rtol=1e-5)


def check_fsdp_with_context_parallel(r: Ranks) -> None:
    """FSDP2 and context parallelism together: one mesh, each rank its zigzag shard."""
    for kind in ("sinusoid", "rope_dynamic"):
        data = torch.Generator().manual_seed(5)
        reference = made(kind)
        x = reference.inputs(data)
        seq_len = L if kind in SCALINGS else None
        opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
        for _ in range(3):
            opt.zero_grad()
            (reference(x, seq_len=seq_len) ** 2).sum().backward()
            opt.step()
        model = made(kind)
        fully_shard(model, mesh=r.mesh)
        pos = shard_positions(L, r.world, r.rank, layout="zigzag")
        mine = r.shard(x, 1, "zigzag")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(3):
            opt.zero_grad()
            # FSDP2 averages the gradients over the ranks, which hold one batch between
            # them: the sum of their losses is the loss, so each counts W times
            # (gloo has no premultiplied sum for set_gradient_divide_factor(1.0)).
            (r.world * (model(mine, positions=pos, seq_len=seq_len) ** 2).sum()).backward()
            opt.step()
        final = full_params(model)
        for name, p in full_params(reference).items():
            expect_close(final[name], p, f"{kind}: {name} after FSDP2 + CP steps", rtol=1e-4)


Case = tuple[str, Callable[[Tensor], Any], Tensor, Any]


def dtensor_cases() -> list[Case]:
    """(name, the call, its whole input, the input's placement when sharded)."""
    x = torch.randn(B, L, D)
    q = torch.randn(B, HEADS, L, D // HEADS)
    ids = torch.randint(0, VOCAB, (B, L))
    pos = torch.randperm(MAX_LEN)[:L]
    pe, learned = posenc.PositionalEncoding(D), posenc.LearnedPositionalEmbedding(MAX_LEN, D)
    fused = posenc.TokenAndPositionEmbedding(D, VOCAB)
    alibi, t5 = posenc.ALiBi(HEADS), posenc.RelativePositionBias(HEADS)
    cos, sin = posenc.RotaryEmbedding(D // HEADS).cos_sin(L, offset=3)
    cases: list[Case] = [
        ("PositionalEncoding", pe, x, Shard(1)),
        ("PositionalEncoding positions", lambda t: pe(t, positions=pos), x, Shard(1)),
        ("PositionalEncoding batch shards", lambda t: pe(t, offset=2), x, Shard(0)),
        ("LearnedPositionalEmbedding", learned, x, Shard(1)),
        ("LearnedPositionalEmbedding offset", lambda t: learned(t, offset=5), x, Shard(1)),
        ("TokenAndPositionEmbedding", fused, ids, Shard(1)),
        ("apply_rotary plain tables", lambda t: posenc.apply_rotary(t, cos, sin), q, Shard(2)),
        ("apply_rotary heads shards", lambda t: posenc.apply_rotary(t, cos, sin), q, Shard(1)),
        ("ALiBi positions", lambda t: alibi(L, positions=t), pos, Shard(0)),
        (
            "RelativePositionBias positions",
            lambda t: t5(L, positions=t, key_positions=t),
            pos,
            Shard(0),
        ),
    ]
    for kind in SCALINGS:
        rope = made(kind).scheme
        assert rope is not None
        cases += [
            (kind, rope, q, Shard(2)),
            (f"{kind} positions", lambda t, rope=rope: rope(t, positions=pos), q, Shard(2)),
        ]
    return cases


def expect_dtensor_call(
    r: Ranks,
    what: str,
    call: Callable[[Tensor], Any],
    whole: Tensor,
    placement: Any,
    *,
    same_placements: bool = False,
) -> None:
    """``call`` on ``whole`` distributed with ``placement`` is one process's ``call(whole)``.

    The output is a DTensor (of the input's placements with ``same_placements``), and
    the gradient (for a floating input) is one process's, bit for bit.
    """
    what = f"{what}, {placement}"
    floating = whole.is_floating_point()
    x = whole.clone().requires_grad_(floating)
    xd = distribute_tensor(whole, r.mesh, [placement]).requires_grad_(floating)
    want, got = call(x), call(xd)
    assert isinstance(got, DTensor), f"{what}: got a {type(got).__name__}, not a DTensor"
    if same_placements:
        assert got.placements == xd.placements, f"{what}: placements {got.placements}"
    expect_equal(got, want.detach(), what)
    if floating:
        weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(6))
        (g_want,) = torch.autograd.grad((want * weights).sum(), x)
        wd = distribute_tensor(weights, r.mesh, got.placements)
        (g_got,) = torch.autograd.grad((got * wd).sum(), xd)
        expect_equal(g_got, g_want, f"{what}: gradient")


def check_dtensor_inputs(r: Ranks) -> None:
    """Every module takes Replicate and sequence-sharded DTensors, and equals one process."""
    for name, call, whole, sharded in dtensor_cases():
        for placement in (Replicate(), sharded):
            expect_dtensor_call(r, name, call, whole, placement)


def check_dtensor_position_ids(r: Ranks) -> None:
    """A DTensor of position ids into a learned table: its rows, as GPT-2's wpe(position_ids)."""
    learned = posenc.LearnedPositionalEmbedding(MAX_LEN, D)
    ids = torch.stack([torch.randperm(MAX_LEN)[:L] for _ in range(B)])  # (B, L)
    hf = torch.arange(3, 3 + L).unsqueeze(0)  # Hugging Face's position_ids, (1, L)
    for name, whole, placements in (
        ("(B, L) ids", ids, (Replicate(), Shard(1), Shard(0))),
        ("(1, L) position_ids", hf, (Replicate(), Shard(1))),
    ):
        for placement in placements:
            what = f"LearnedPositionalEmbedding, {name}"
            expect_dtensor_call(r, what, learned, whole, placement, same_placements=True)


#: RoPE on position axes: A = 2 (axes=) and A = 3 (M-RoPE, and its interleaved order).
AXIS_ROPES: dict[str, dict[str, Any]] = {
    "axes=(4, 4)": {"axes": (4, 4)},
    "M-RoPE": {"scaling": {"rope_type": "default", "mrope_section": [2, 1, 1]}},
    "interleaved M-RoPE": {
        "scaling": {"rope_type": "default", "mrope_section": [2, 1, 1], "mrope_interleaved": True}
    },
}


def axis_positions(axes: int, *shape: int) -> Tensor:
    """Positions on ``axes`` axes, ``(axes, *shape)``: a different stream on each axis."""
    return torch.randint(-3, MAX_LEN + 8, (axes, *shape))  # some outside the tables too


def check_dtensor_axes(r: Ranks) -> None:
    """RoPE on axes, DTensor input sharded on the sequence or the batch: one process's.

    Positions (A, L) (shared by the batch) with a batch of 2A, so that each rank's
    batch is A; (A, B, L) with B = A, the batch size equal to the number of axes;
    and (B, L), one stream per sequence, with a batch of 2A. (A, L) positions with a
    batch of A are ambiguous, and refused as one process refuses them.
    """
    heads, dh = HEADS, D // HEADS
    for name, kwargs in AXIS_ROPES.items():
        rope = posenc.RotaryEmbedding(dh, max_len=MAX_LEN, **kwargs)
        a = rope.n_axes
        shared, per_sequence = axis_positions(a, L), axis_positions(a, a, L)
        streams = torch.randint(0, MAX_LEN, (2 * a, L))
        cases = (
            ("(A, L)", shared, 2 * a),
            ("(A, B, L), B = A", per_sequence, a),
            ("(B, L), B = 2A", streams, 2 * a),
        )
        for form, pos, batch in cases:
            q = torch.randn(batch, heads, L, dh)
            for placement in (Replicate(), Shard(2), Shard(0)):
                expect_dtensor_call(
                    r,
                    f"{name}, {form}",
                    lambda t, rope=rope, pos=pos: rope(t, positions=pos),
                    q,
                    placement,
                    same_placements=True,
                )
        q = torch.randn(a, heads, L, dh)
        try:
            rope(q, positions=shared)
        except ValueError as error:
            want = str(error)
        else:
            raise AssertionError(f"{name}: one process took (A, L) positions with a batch of A")
        qd = distribute_tensor(q, r.mesh, [Shard(0)])
        try:
            rope(qd, positions=shared)
        except ValueError as error:
            if str(error) != want:
                raise AssertionError(f"{name}: refused with {error}, not {want}") from error
        else:
            raise AssertionError(f"{name}: took (A, L) positions with a batch of A, sharded")


def check_mrope_context_parallel(r: Ranks) -> None:
    """M-RoPE under context parallelism: each axis's row at the rank's positions.

    Text, then an image, then text (laid out as multimodal_positions lays them); each rank holds
    the tokens at shard_positions and rotates them at their columns of the whole
    sequence's (A, L) or (A, B, L) positions.
    """
    for name in ("M-RoPE", "interleaved M-RoPE"):
        rope = posenc.RotaryEmbedding(D // HEADS, max_len=MAX_LEN, **AXIS_ROPES[name])
        a = rope.n_axes
        image = posenc.grid_positions(1, 2, 4, offset=4)  # (3, 8): 8 patches after 4 tokens
        text = torch.arange(L - 12).expand(a, -1)
        shared = torch.cat((torch.arange(4).expand(a, -1), image, text + 8), dim=1)  # (A, L)
        per_sequence = torch.stack((shared, shared.roll(1, dims=-1)), dim=1)  # (A, B, L)
        for layout in LAYOUTS:
            held = shard_positions(L, r.world, r.rank, layout=layout)  # type: ignore[arg-type]
            for form, pos in (("(A, L)", shared), ("(A, B, L)", per_sequence)):
                q = torch.randn(B, HEADS, L, D // HEADS)
                with torch.no_grad():
                    want = r.shard(rope(q, positions=pos), 2, layout)
                    mine = rope(r.shard(q, 2, layout), positions=pos[..., held])
                expect_equal(mine, want, f"{name}, {form}, {layout}")


def check_dtensor_long_rope(r: Ranks) -> None:
    """RoPE on a sequence-sharded DTensor in no_grad at L = 6000 (longer than a CPU slice)."""
    n = 6000
    rope = posenc.RotaryEmbedding(64, max_len=8192)
    x = torch.randn(1, 2, n, 64)
    cos, sin = rope.cos_sin(n)
    xd = distribute_tensor(x, r.mesh, [Shard(2)])
    with torch.no_grad():
        want = rope(x)
        expect_equal(rope(xd), want, "rope(DTensor), L = 6000")
        tables = [distribute_tensor(t, r.mesh, [Shard(0)]) for t in (cos, sin)]
        expect_equal(posenc.apply_rotary(xd, *tables), want, "apply_rotary(DTensors), L = 6000")


def check_mixed_precision(r: Ranks) -> None:
    """FSDP2 bf16 mixed precision: the sinusoid cast to bf16 once serves every forward.

    The policy casts parameters, not buffers; casting the (parameterless) encoding to the
    compute dtype derives its table in bf16, rounded once from float64: the output is
    the one rows computed from float64 on every forward give, bit for bit.
    """
    data = torch.Generator().manual_seed(7)
    x = torch.randn(B, L, D, generator=data)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    outputs = []
    for cast in (False, True):
        model = made("sinusoid")
        if cast:
            model.scheme.to(torch.bfloat16)  # the one line of docs/guide/ranks.rst
        fully_shard(model, mesh=r.mesh, mp_policy=policy)
        with torch.no_grad():
            outputs.append(model(x))
        want = torch.bfloat16 if cast else torch.float32
        assert model.scheme.pe.dtype == want, (cast, model.scheme.pe.dtype)
    reference = made("sinusoid").to(torch.bfloat16)
    with torch.no_grad():
        want = reference(x.bfloat16())
    expect_equal(outputs[0], want, "bf16 forward, table in float32")
    expect_equal(outputs[1], want, "bf16 forward, table cast to bf16")


CHECKS: dict[str, Callable[[Ranks], None]] = {
    "shard_positions against torch's load balancers": check_balancers,
    "torch's SDPA context parallelism has no CPU rule": check_torch_sdpa_context_parallel,
    **{f"fully_shard {k}": (lambda r, k=k: check_fsdp(r, k)) for k in SCHEMES},
    "meta init, fully_shard, to_empty": check_meta_init,
    "distributed checkpoint": check_checkpoint,
    "distributed checkpoint with Annotated Transformer keys": check_annotated_checkpoint,
    "learned table initialised after sharding": check_learned_init,
    **{
        f"context parallel {k} {layout}": (
            lambda r, k=k, lay=layout: check_context_parallel(r, k, lay)
        )
        for k in SCHEMES
        for layout in LAYOUTS
    },
    "rope dynamic and longrope with the global seq_len": check_rope_seq_len,
    "ALiBi and T5 bias blocks of every ring step": check_bias_blocks,
    "fully_shard with context parallelism": check_fsdp_with_context_parallel,
    "DTensor inputs": check_dtensor_inputs,
    "DTensor RoPE at L = 6000 in no_grad": check_dtensor_long_rope,
    "DTensor position ids into a learned table": check_dtensor_position_ids,
    "DTensor inputs to RoPE on axes and M-RoPE": check_dtensor_axes,
    "context parallel M-RoPE": check_mrope_context_parallel,
    "FSDP2 bf16 mixed precision": check_mixed_precision,
}


def main(rank: int, world: int, root: str) -> None:
    """One rank: join the group, run every check, save the outcomes for the parent."""
    torch.set_num_threads(1)
    warnings.simplefilter("error")
    store = dist.FileStore(os.path.join(root, "store"), world)
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    ranks = Ranks(rank, world, init_device_mesh("cpu", (world,)), root)
    results: dict[str, str | None] = {}
    try:
        for name, check in CHECKS.items():
            torch.manual_seed(0)
            try:
                check(ranks)
                results[name] = None
            except Exception:
                results[name] = traceback.format_exc()
            dist.barrier()
    finally:
        torch.save(results, os.path.join(root, f"results{rank}.pt"))
        dist.destroy_process_group()


if __name__ == "__main__":  # by hand: python tests/distributed_checks.py
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as root:
        mp.spawn(main, args=(2, root), nprocs=2)
        for rank in range(2):
            for name, error in torch.load(os.path.join(root, f"results{rank}.pt")).items():
                print(
                    rank, "ok  " if error is None else "FAIL", name, "" if error is None else error
                )
