"""The registry of posenc's public schemes, for the contract tests (not a test module).

``SCHEMES`` holds one :class:`Scheme` per public module or function: how to build it,
what to call it with for a given length, and which contracts it takes part in.
``tests/test_schemes.py`` runs every contract over the registry, so a new scheme gets
compile, export, ONNX, torch.func, casts, integer dtypes, meta init, copies, hooks,
threads, no-op moves and fresh accessors by adding one entry here.

Functions enter as modules (:class:`Call`), biases as a module over query and key
positions (:class:`QueryKey`): torch.compile, torch.export and ONNX take modules
called with tensors. Everything here is posenc's public API.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

import posenc

__all__ = [
    "BATCH",
    "CONTRACTS",
    "HEADS",
    "MAX_LEN",
    "SCHEMES",
    "Call",
    "QueriesAndKeys",
    "QueryKey",
    "Scheme",
    "having",
    "public",
]

D, HEADS, VOCAB, MAX_LEN, BATCH = 32, 4, 100, 64, 2

#: Every contract of tests/test_schemes.py, by the name a Scheme's ``omit`` uses.
CONTRACTS = frozenset(
    {
        "compile",  # fullgraph, dynamic: one graph for every length
        "compile_positions",  # tensor positions / offsets: one graph each
        "compile_past_max_len",  # rows from the table, rows computed on the fly: two graphs
        "export",  # torch.export, the length dynamic
        "onnx",  # ONNX export, run in onnxruntime at two lengths
        "vmap",  # vmap over the inputs equals per-sample calls, bit for bit
        "vmap_positions",  # vmap over positions=, bit for bit
        "forward_ad",  # jvp and forward-mode AD through the (linear) first input
        "cast",  # a cast module equals a fresh one with the same parameters, bit for bit
        "integer_dtypes",  # integer inputs, positions and offsets of every dtype equal int64
        "meta",  # meta init + to_empty (and to_empty in place) equal normal construction
        "copies",  # deepcopy, pickle and torch.save round trips
        "hooks",  # forward pre-hooks and hooks fire, and the hook sees the output
        "threads",  # called from several threads at once, the results of serial calls
        "no_op_to",  # a .to() that changes nothing keeps every buffer and parameter
        "fresh_accessor",  # what an accessor returns shares no memory with the module
    }
)


class Call(nn.Module):
    """A public function as a module: ``forward(*tensors) = fn(*tensors)``."""

    def __init__(self, fn: Callable[..., Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Tensor) -> Tensor:
        return self.fn(*args)


class QueryKey(nn.Module):
    """A bias module called with query and key positions, the tensors an export takes."""

    def __init__(self, bias: nn.Module, *, causal: bool = False) -> None:
        super().__init__()
        self.bias = bias
        self.causal = causal

    def forward(self, positions: Tensor, key_positions: Tensor) -> Tensor:
        out: Tensor = self.bias(
            positions.shape[-1],
            positions=positions,
            key_positions=key_positions,
            causal=self.causal,
        )
        return out


class QueriesAndKeys(nn.Module):
    """xPos on one tensor as queries and as keys, the two concatenated on the last dim.

    Linear in its input (each half is a rotation times a scale), and one tensor out, as
    the contracts compare. ``xpos`` is an ``XPos``, or a ``RotaryEmbedding`` with
    ``xpos_scale_base``, called through its ``rotate_queries_and_keys``.
    """

    def __init__(self, xpos: nn.Module) -> None:
        super().__init__()
        self.xpos = xpos

    def forward(
        self, x: Tensor, *, offset: int | Tensor = 0, positions: Tensor | None = None
    ) -> Tensor:
        pair = getattr(self.xpos, "rotate_queries_and_keys", self.xpos)
        q, k = pair(x, x, offset=offset, positions=positions)
        return torch.cat([q, k], -1)


def public(module: nn.Module) -> nn.Module:
    """The public module inside a registry module (the bias inside a :class:`QueryKey`)."""
    return module.bias if isinstance(module, QueryKey) else module


# -- Sample inputs: the tensors forward takes for a length L, batch BATCH -----------------


def tokens(length: int) -> tuple[Tensor, ...]:
    return (torch.randn(BATCH, length, D),)


def heads(length: int) -> tuple[Tensor, ...]:
    return (torch.randn(BATCH, HEADS, length, D),)


def ids(length: int) -> tuple[Tensor, ...]:
    return (torch.randint(0, VOCAB, (BATCH, length), dtype=torch.int32),)


def query_key(length: int) -> tuple[Tensor, ...]:
    # Any integers, negative ones too; 2L + 1 keys, a length of their own.
    return (
        torch.randint(-20, 500, (BATCH, length)),
        torch.randint(-20, 500, (BATCH, 2 * length + 1)),
    )


def rotary_tables(length: int) -> tuple[Tensor, ...]:
    angles = torch.rand(length, D // 2) * 100
    return (torch.randn(BATCH, HEADS, length, D), angles.cos(), angles.sin())


def grid(length: int) -> tuple[Tensor, ...]:
    return (torch.randn(BATCH, length, 5, D),)  # a length × 5 grid of patches


def position_table(length: int) -> tuple[Tensor, ...]:
    return (torch.randint(-100, 10**6, (length,)),)


def steps(length: int) -> tuple[Tensor, ...]:
    return (torch.rand(length) * 1000,)  # L timesteps, fractional ones


def cope_inputs(length: int) -> tuple[Tensor, ...]:
    # queries and their causal logits: -inf after the query, as attention gives them
    q = torch.randn(BATCH, HEADS, length, D)
    logits = q @ torch.randn(BATCH, HEADS, length, D).transpose(-1, -2) / D**0.5
    return q, logits.masked_fill(torch.ones(length, length).triu(1).bool(), -torch.inf)


def _cope() -> nn.Module:
    cope = posenc.CoPE(D, MAX_LEN)
    with torch.no_grad():
        cope.table.normal_()  # a trained table: a new one is zero
    return cope


# -- The functions as modules --------------------------------------------------------------


def _patches(x: Tensor) -> Tensor:
    """Patches of an ``h × w`` grid, ``(B, h, w, D)``, plus their 2-D encoding."""
    _, h, w, _ = x.shape
    return x + posenc.sincos_2d(h, w, D, convention="timm", dtype=x.dtype).view(h, w, D)


# -- The registry ----------------------------------------------------------------------------

Length = tuple[int, str] | None  # an argument's length dimension and the name of its Dim


@dataclass(frozen=True)
class Scheme:
    """One public module or function, and what the contract tests need to know about it.

    Attributes:
        name: The test id.
        make: Builds the module (for a function, a :class:`Call` of it).
        sample: The tensors forward takes for a length L (batch :data:`BATCH`).
        dims: For each of those tensors, its length dimension and the name of its
            ``torch.export.Dim`` (tensors that share a name share the Dim), or None.
        positions: forward takes ``offset=`` and ``positions=`` for a batch of sequences.
        extrapolates: a table of :data:`MAX_LEN` rows, any integer position past it
            (negative ones too) computed on the fly; else positions lie in
            ``[0, MAX_LEN)`` (a learned table refuses the others).
        linear: How the output depends on the first input, for forward AD: "adds"
            (``x + f(positions)``: the tangent is the input's), "rotates" (a linear
            map: the tangent is the output at the tangent), or None (no such input).
        rows: How many positions its table serves, if it has one: by default
            :data:`MAX_LEN` for a scheme with positions. Past them, compile adds a
            graph (rows computed on the fly), and export cannot follow the branch: an
            export's ``Dim`` stops there.
        accessor: A public method that hands out what forward uses, as
            ``accessor(module, length, kwargs)``.
        function: A function, not a module: no module contracts (casts, copies, hooks...).
        axes: For a scheme on position axes, their number A: the contracts that give
            ``positions=`` give them on the axes, ``(A, B, L)`` (an ``offset`` is one
            stream on every axis); 0 for 1-D positions.
        omit: Contracts left out, each with a comment saying why.
    """

    name: str
    make: Callable[[], nn.Module]
    sample: Callable[[int], tuple[Tensor, ...]]
    dims: tuple[Length, ...]
    positions: bool = False
    extrapolates: bool = False
    linear: Literal["adds", "rotates"] | None = None
    rows: int | None = None
    accessor: Callable[[nn.Module, int, dict[str, object]], tuple[Tensor, ...]] | None = None
    function: bool = False
    axes: int = 0
    omit: frozenset[str] = frozenset()

    @property
    def contracts(self) -> frozenset[str]:
        """The contracts this scheme takes part in."""
        out = {"compile", "export", "onnx", "vmap", "integer_dtypes", "threads"}
        if not self.function:
            out |= {"cast", "meta", "copies", "hooks", "no_op_to"}
        if self.positions:
            out |= {"compile_positions", "vmap_positions"}
        if self.extrapolates:
            out.add("compile_past_max_len")
        if self.linear is not None:
            out.add("forward_ad")
        if self.accessor is not None:
            out.add("fresh_accessor")
        if not (self.positions or self.integer_inputs):
            out.discard("integer_dtypes")
        assert self.omit <= out, f"{self.name}: omits contracts it does not have"
        return frozenset(out - self.omit)

    @property
    def integer_inputs(self) -> bool:
        """Whether forward takes integer tensors (ids, positions)."""
        with torch.random.fork_rng():
            return any(not t.is_floating_point() for t in self.sample(3))

    @property
    def table_rows(self) -> int | None:
        """How many positions its table serves (None: no table)."""
        if self.rows is not None:
            return self.rows
        return MAX_LEN if self.positions else None

    @property
    def position_range(self) -> tuple[int, int]:
        """Positions it takes: any (negative and past the table), or those of the table."""
        return (-MAX_LEN, 3 * MAX_LEN) if self.extrapolates else (0, MAX_LEN)


def _encoding(module: nn.Module, length: int, kwargs: dict[str, object]) -> tuple[Tensor, ...]:
    return (module.encoding(length, **kwargs),)  # type: ignore[operator]


def _cos_sin(module: nn.Module, length: int, kwargs: dict[str, object]) -> tuple[Tensor, ...]:
    return tuple(module.cos_sin(length, **kwargs))  # type: ignore[operator]


def _fused_encoding(
    module: nn.Module, length: int, kwargs: dict[str, object]
) -> tuple[Tensor, ...]:
    return _encoding(module.positional, length, kwargs)  # type: ignore[arg-type]


L0 = ((0, "L"),)
L1 = ((1, "L"),)
L2 = ((2, "L"),)


def _rotary(
    name: str,
    sample: Callable[[int], tuple[Tensor, ...]] = heads,
    dims: tuple[Length, ...] = L2,
    *,
    rows: int | None = None,
    axes: int = 0,
    axis_dims: tuple[int, ...] | None = None,
    learned: bool = False,
    omit: frozenset[str] = frozenset(),
    **options: object,
) -> Scheme:
    """A RotaryEmbedding entry: D features, MAX_LEN rows, the rotary contracts.

    ``learned``: with RoPE-Mixed's learned frequencies, each module its own (seeded).
    """

    def make() -> nn.Module:
        if learned:
            with torch.random.fork_rng():
                torch.manual_seed(0)
                # 3 axes (a video's t, x, y): (2, L) positions would be ambiguous with
                # the registry's batch of 2
                options["frequencies"] = posenc.MixedFrequencies(D, HEADS, n_axes=3)
        return posenc.RotaryEmbedding(D, max_len=MAX_LEN, axes=axis_dims, **options)  # type: ignore[arg-type]

    return Scheme(
        name,
        make,
        sample,
        dims,
        positions=True,
        extrapolates=True,
        linear="rotates",
        rows=rows,
        accessor=_cos_sin,
        axes=axes,
        omit=omit,
    )


SCHEMES: list[Scheme] = [
    Scheme(
        "PositionalEncoding",
        lambda: posenc.PositionalEncoding(D, max_len=MAX_LEN),
        tokens,
        L1,
        positions=True,
        extrapolates=True,
        linear="adds",
        accessor=_encoding,
    ),
    Scheme(
        "TokenAndPositionEmbedding",
        lambda: posenc.TokenAndPositionEmbedding(D, VOCAB, max_len=MAX_LEN, layout="concatenated"),
        ids,
        L1,
        positions=True,
        extrapolates=True,
        accessor=_fused_encoding,
    ),
    Scheme("Embeddings", lambda: posenc.Embeddings(D, VOCAB), ids, L1),
    Scheme(
        "LearnedPositionalEmbedding",
        lambda: posenc.LearnedPositionalEmbedding(MAX_LEN, D),
        tokens,
        L1,
        positions=True,
        linear="adds",
    ),
    _rotary("RotaryEmbedding"),
    _rotary("RotaryEmbedding-interleaved", layout="interleaved"),
    _rotary(  # on (B, L, D): no heads
        "RotaryEmbedding-linear", tokens, L1, scaling={"rope_type": "linear", "factor": 2.0}
    ),
    _rotary(
        "RotaryEmbedding-yarn",
        scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    ),
    _rotary(  # frequencies from the length past 32 positions
        "RotaryEmbedding-dynamic",
        rows=32,  # past its 32 trained positions the frequencies follow the length
        scaling={"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 32},
    ),
    _rotary(  # FLUX's form: three axes, each its own ladder, pairs interleaved
        "RotaryEmbedding-axes", axes=3, base=10_000.0, layout="interleaved", axis_dims=(8, 12, 12)
    ),
    _rotary(  # RoPE-Mixed: learned per-head frequencies on two axes (Heo et al., 2024)
        "RotaryEmbedding-Mixed",
        axes=3,
        layout="interleaved",
        learned=True,
        omit=frozenset({"compile_past_max_len"}),  # nothing is tabled: one graph at any length
    ),
    _rotary(  # Qwen3-VL's M-RoPE (compiled == eager: vllm 40680)
        "RotaryEmbedding-mrope-interleaved",
        axes=3,
        base=5_000_000.0,
        scaling={"rope_type": "default", "mrope_section": [6, 5, 5], "mrope_interleaved": True},
    ),
    Scheme(  # xPos (Sun et al., 2022): RoPE times ζ^(±p/γ); γ = 64, so that the scales
        # show at these positions and float16 still holds them (|p| <= 495)
        "XPos",
        lambda: QueriesAndKeys(posenc.XPos(D, scale_base=64.0)),
        heads,
        L2,
        positions=True,
        extrapolates=True,
        linear="rotates",
        # forward returns (q, k): the registry's module concatenates them, so a hook on
        # XPos sees the pair (tests/test_xpos.py checks its hooks); nothing is tabled
        # (one graph at any length) and no tensor is held (nothing for .to() to keep)
        omit=frozenset({"hooks", "compile_past_max_len", "no_op_to"}),
    ),
    Scheme(  # the same xPos as an option of the rotary core, through rotate_queries_and_keys
        "RotaryEmbedding-xpos",
        lambda: QueriesAndKeys(posenc.RotaryEmbedding(D, xpos_scale_base=64.0)),
        heads,
        L2,
        positions=True,
        extrapolates=True,
        linear="rotates",
        # hooks on the rotary module fire on forward, which refuses one tensor; nothing
        # is read from its tables (one graph at any length)
        omit=frozenset({"hooks", "compile_past_max_len"}),
    ),
    Scheme(
        "ALiBi",
        lambda: QueryKey(posenc.ALiBi(HEADS)),
        query_key,
        ((1, "Lq"), (1, "Lk")),
        omit=frozenset({"no_op_to"}),  # holds no tensor: nothing to keep
    ),
    Scheme(
        "ALiBi-symmetric",
        lambda: QueryKey(posenc.ALiBi(HEADS, symmetric=True)),
        query_key,
        ((1, "Lq"), (1, "Lk")),
        omit=frozenset({"no_op_to"}),  # holds no tensor: nothing to keep
    ),
    Scheme(  # the bias with -inf at later key slots, for SDPA
        "ALiBi-causal",
        lambda: QueryKey(posenc.ALiBi(HEADS), causal=True),
        query_key,
        ((1, "Lq"), (1, "Lk")),
        omit=frozenset({"no_op_to"}),  # holds no tensor: nothing to keep
    ),
    Scheme(
        "RelativePositionBias",
        lambda: QueryKey(posenc.RelativePositionBias(HEADS)),
        query_key,
        ((1, "Lq"), (1, "Lk")),
    ),
    Scheme(
        "RelativePositionBias-decoder",
        lambda: QueryKey(
            posenc.RelativePositionBias(
                HEADS, bidirectional=False, num_buckets=16, max_distance=40
            )
        ),
        query_key,
        ((1, "Lq"), (1, "Lk")),
    ),
    Scheme(  # causal: -inf at later key slots, after the table's lookup
        "RelativePositionBias-decoder-causal",
        lambda: QueryKey(
            posenc.RelativePositionBias(
                HEADS, bidirectional=False, num_buckets=16, max_distance=40
            ),
            causal=True,
        ),
        query_key,
        ((1, "Lq"), (1, "Lk")),
    ),
    Scheme(
        "KERPLE",
        lambda: QueryKey(posenc.KERPLE(HEADS)),
        query_key,
        ((1, "Lq"), (1, "Lk")),
    ),
    Scheme(  # causal: -inf at later key slots, out of place under autograd
        "KERPLE-causal",
        lambda: QueryKey(posenc.KERPLE(HEADS), causal=True),
        query_key,
        ((1, "Lq"), (1, "Lk")),
    ),
    Scheme(
        "FIRE",
        lambda: QueryKey(posenc.FIRE(HEADS, width=8)),
        query_key,
        ((1, "Lq"), (1, "Lk")),
    ),
    Scheme(  # causal: -inf at later key slots
        "FIRE-causal",
        lambda: QueryKey(posenc.FIRE(HEADS, width=8), causal=True),
        query_key,
        ((1, "Lq"), (1, "Lk")),
    ),
    Scheme(  # data-dependent: the position logits of queries and their attention logits
        "CoPE",
        _cope,
        cope_inputs,
        ((2, "L"), (2, "L")),
        # The registry names one length dimension per input, and the logits have two
        # (L_q, L_k): the export pins L_k. tests/test_cope.py exports both dynamic.
        omit=frozenset({"export", "onnx"}),
    ),
    Scheme(
        "sinusoidal_table",
        lambda: Call(functools.partial(posenc.sinusoidal_table, d_model=D)),
        position_table,
        L0,
        function=True,
    ),
    Scheme(
        "sincos_2d",
        lambda: Call(_patches),
        grid,
        L1,
        linear="adds",
        function=True,
        # FINDING: a grid size from a dynamic shape compiles (one graph for all sizes)
        # but does not export: torch.export raises "TypeError: height must be an int,
        # got SymInt"; the ONNX export succeeds and fails in onnxruntime at another size
        # ("invalid expand shape"). test_compile_export_family exports a fixed grid.
        omit=frozenset({"export", "onnx"}),
    ),
    Scheme(
        "timestep_embedding",
        lambda: Call(
            functools.partial(
                posenc.timestep_embedding, dim=33, flip_sin_to_cos=True, downscale_freq_shift=0
            )
        ),
        steps,
        L0,
        function=True,
    ),
    Scheme(
        "apply_rotary",
        lambda: Call(posenc.apply_rotary),
        rotary_tables,
        ((2, "L"), (0, "L"), (0, "L")),
        linear="rotates",
        function=True,
    ),
]


def having(contract: str) -> list[Scheme]:
    """The schemes that take part in ``contract``."""
    assert contract in CONTRACTS, contract
    return [s for s in SCHEMES if contract in s.contracts]
