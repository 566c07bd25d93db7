"""RoPE against the peers' own code: Hugging Face (Llama, GPT-J, every ROPE_INIT_FUNCTIONS
entry), x-transformers, rotary-embedding-torch, diffusers.

Frequencies must agree to float32 rounding (the peers compute them in float32). For
rotations, each test measures the peer's error and posenc's against the float64
rotation of the same input and prints both (in the summary after the run). Near
position 0, where float32 phases are still exact enough, the two must agree to a few
float32 ulps: that checks the convention (pairing, sign, frequencies, attention
factor). Far out, posenc must stay within its bound, and its distance to the peer is
the peer's own error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from reference import rotary_reference

from posenc import ROPE_TYPES, RotaryEmbedding, rope_frequencies
from posenc.rope_config import EXAMPLE_HEAD_DIM, RECORDS

# `import x_transformers` decorates a function with torch.jit.script, which warns.
XT_IMPORT = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning"
)

HEAD_DIM, HEADS = EXAMPLE_HEAD_DIM, 4  # the head the records' examples are written for
FP32_FREQ_RTOL = 2.0**-20  # the peers' float32 pow, division and ramp: a few float32 ulps
NEAR = torch.arange(0, 48)  # positions where float32 phases are good to ~1e-5
FAR = torch.arange(100_000, 100_048)

Report = Callable[[str], None]


def llama_config(rope_parameters: dict[str, Any], max_position_embeddings: int = 4096) -> Any:
    """A one-layer Llama config; a ``max_position_embeddings`` key among the parameters
    (posenc reads it there) goes to the config's field of that name, where HF reads it."""
    from transformers import LlamaConfig

    rope_parameters = dict(rope_parameters)
    max_position_embeddings = rope_parameters.pop(
        "max_position_embeddings", max_position_embeddings
    )
    return LlamaConfig(
        hidden_size=HEAD_DIM * HEADS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        head_dim=HEAD_DIM,
        intermediate_size=16,
        num_hidden_layers=1,
        vocab_size=16,
        max_position_embeddings=max_position_embeddings,
        rope_parameters=dict(rope_parameters),
    )


def posenc_args(config: Any) -> dict[str, Any]:
    """The mapping the user guide documents: rope_parameters, plus the one config field
    Hugging Face reads from outside them (max_position_embeddings), rope_theta as base."""
    scaling = dict(config.rope_parameters, max_position_embeddings=config.max_position_embeddings)
    return {"base": scaling["rope_theta"], "scaling": scaling}


# The types Hugging Face has, by posenc's records (hf_name None: a type only posenc
# builds). A new entry of ROPE_INIT_FUNCTIONS fails the test below until posenc has a
# record for it; a record gets these tests from its example alone.
HF_TYPES = {r.hf_name: r for r in RECORDS.values() if r.hf_name is not None}

# Configs beyond the records' examples, for the keys an example leaves to its default.
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "linear": [{"rope_type": "linear", "factor": 4.0, "rope_theta": 10_000.0}],
    "dynamic": [{"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10_000.0}],
    "yarn": [
        {
            "rope_type": "yarn",
            "factor": 8.0,
            "rope_theta": 10_000.0,
            "original_max_position_embeddings": 512,
        },
        {
            "rope_type": "yarn",
            "factor": 40.0,
            "rope_theta": 10_000.0,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 0.707,
            "original_max_position_embeddings": 512,
        },
        {
            "rope_type": "yarn",
            "factor": 4.0,
            "rope_theta": 1e6,
            "truncate": False,
            "original_max_position_embeddings": 1024,
            "partial_rotary_factor": 0.5,
        },
        {
            "rope_type": "yarn",
            "factor": 4.0,
            "rope_theta": 10_000.0,
            "attention_factor": 0.8,
            "original_max_position_embeddings": 1024,
        },
    ],
    "longrope": [
        {
            "rope_type": "longrope",
            "rope_theta": 10_000.0,
            "original_max_position_embeddings": 1024,
            "short_factor": [1.0 + 0.01 * k for k in range(HEAD_DIM // 2)],
            "long_factor": [1.0 + 0.3 * k for k in range(HEAD_DIM // 2)],
        },
    ],
    "llama3": [
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "rope_theta": 500_000.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 1024,
        },
    ],
    "proportional": [
        {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.25},
        {
            "rope_type": "proportional",
            "rope_theta": 10_000.0,
            "partial_rotary_factor": 0.5,
            "factor": 2.0,
        },
    ],
}
# Each type's variants first, then its record's example (with the base of the tests).
CONFIGS: dict[str, list[dict[str, Any]]] = {
    name: [*VARIANTS.get(name, []), {"rope_theta": 10_000.0, **record.example}]
    for name, record in HF_TYPES.items()
}
SEQ_LENS = [None, 1024, 4096, 4097, 20_000]


def test_every_rope_init_function_is_a_posenc_rope_type() -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    # transformers 5 computes "default" in each model's rotary module, not in
    # ROPE_INIT_FUNCTIONS (4.x listed it there).
    assert set(ROPE_INIT_FUNCTIONS) | {"default"} == set(HF_TYPES)
    own = {name for name, record in RECORDS.items() if record.hf_name is None}
    assert not own & set(ROPE_INIT_FUNCTIONS), "a type marked posenc's own is Hugging Face's"
    assert set(HF_TYPES) | own == set(ROPE_TYPES)
    assert set(VARIANTS) <= set(HF_TYPES)


def hf_init_function(rope_type: str) -> Callable[..., tuple[torch.Tensor, Any]]:
    """Hugging Face's function for a type: ROPE_INIT_FUNCTIONS, or Llama's default."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    if rope_type not in ROPE_INIT_FUNCTIONS and rope_type == "default":
        return LlamaRotaryEmbedding.compute_default_rope_parameters
    return ROPE_INIT_FUNCTIONS[rope_type]


@pytest.mark.parametrize("rope_type", sorted(CONFIGS))
def test_frequencies_and_attention_factor_of_rope_init_functions(
    rope_type: str, peer_report: Report
) -> None:
    init = hf_init_function(rope_type)
    worst = 0.0
    for parameters in CONFIGS[rope_type]:
        config = llama_config(parameters)
        for seq_len in SEQ_LENS:
            theirs, their_factor = init(config, device="cpu", seq_len=seq_len)
            ours, our_factor = rope_frequencies(HEAD_DIM, seq_len=seq_len, **posenc_args(config))
            assert ours.shape == theirs.shape
            rel = ((ours - theirs.double()).abs() / theirs.double().abs().clamp_min(1e-300)).max()
            worst = max(worst, float(rel))
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=FP32_FREQ_RTOL, atol=0)
            assert our_factor == pytest.approx(float(their_factor), rel=1e-12)
    peer_report(
        f"ROPE_INIT_FUNCTIONS[{rope_type!r}]: largest relative difference of the "
        f"frequencies {worst:.2e} (HF computes them in float32)"
    )


def compare(
    name: str,
    ours: torch.Tensor,
    theirs: torch.Tensor,
    exact: np.ndarray,
    near: bool,
    report: Report,
) -> None:
    """Assert the agreement described in the module docstring and report both errors."""
    ours_err = float(np.abs(ours.double().numpy() - exact).max())
    theirs_err = float(np.abs(theirs.double().numpy() - exact).max())
    gap = float((ours.double() - theirs.double()).abs().max())
    scale = float(np.abs(exact).max())
    where = "near 0" if near else "from 1e5"
    report(
        f"{name} ({where}, {ours.dtype}): peer {theirs_err:.2e}, posenc {ours_err:.2e}, "
        f"|posenc - peer| {gap:.2e}"
    )
    bound = 2 * scale * torch.finfo(ours.dtype).eps
    assert ours_err <= bound
    assert gap <= theirs_err + bound
    if near:
        assert gap <= 8e-5 * scale  # float32 phases near 0: the same rotation


def rotation_configs() -> list[tuple[str, dict[str, Any]]]:
    """The first config of each type whose frequencies do not depend on the length."""
    return [(name, CONFIGS[name][0]) for name, r in HF_TYPES.items() if r.trained_length is None]


@pytest.mark.parametrize(
    ("label", "parameters"), rotation_configs(), ids=lambda v: v if isinstance(v, str) else ""
)
@pytest.mark.parametrize("positions", [NEAR, FAR], ids=["near", "far"])
def test_llama_rotary_embedding_and_apply_rotary_pos_emb(
    label: str, parameters: dict[str, Any], positions: torch.Tensor, peer_report: Report
) -> None:
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = llama_config(parameters)
    hf = LlamaRotaryEmbedding(config)
    args = posenc_args(config)
    rope = RotaryEmbedding(HEAD_DIM, max_len=64, **args)
    q = torch.randn(2, HEADS, len(positions), HEAD_DIM)
    position_ids = torch.stack((positions, positions.flip(0)))  # per sequence
    cos, sin = hf(q, position_ids)
    theirs, _ = apply_rotary_pos_emb(q, q, cos, sin)
    ours = rope(q, positions=position_ids)
    freqs, factor = rope_frequencies(HEAD_DIM, **args)
    exact = rotary_reference(q, position_ids[:, None, :], freqs.numpy(), "half", factor)
    compare(f"HF Llama {label}", ours, theirs, exact, positions is NEAR, peer_report)


@pytest.mark.parametrize(
    "rope_type", [name for name, r in HF_TYPES.items() if r.trained_length is not None]
)
def test_llama_rotary_embedding_frequencies_that_follow_the_length(rope_type: str) -> None:
    # Hugging Face recomputes inv_freq when a sequence passes max_position_embeddings;
    # posenc computes each call's from its own longest position. A fresh HF module per
    # call, so that its history (it remembers the longest length seen) plays no part.
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = llama_config(CONFIGS[rope_type][0], max_position_embeddings=1024)
    rope = RotaryEmbedding(HEAD_DIM, max_len=2048, **posenc_args(config))
    for length in (100, 1024, 1025, 1500):
        q = torch.randn(1, HEADS, length, HEAD_DIM)
        position_ids = torch.arange(length)[None]
        cos, sin = LlamaRotaryEmbedding(config)(q, position_ids)
        theirs, _ = apply_rotary_pos_emb(q, q, cos, sin)
        ours = rope(q)
        # Positions up to 1500 in float32: a few 1e-4 of the phase at most.
        torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-3)
        assert torch.equal(rope(q, positions=position_ids), ours)


@pytest.mark.parametrize("rotary_dim", [HEAD_DIM, 32])
@pytest.mark.parametrize("positions", [NEAR, FAR], ids=["near", "far"])
def test_gptj_rotary_embedding_and_apply_rotary_pos_emb(
    rotary_dim: int, positions: torch.Tensor, peer_report: Report
) -> None:
    from transformers import GPTJConfig
    from transformers.models.gptj.modeling_gptj import GPTJRotaryEmbedding, apply_rotary_pos_emb

    config = GPTJConfig(
        n_embd=HEAD_DIM * HEADS,
        n_head=HEADS,
        rotary_dim=rotary_dim,
        n_positions=int(positions.max()) + 1,
    )
    hf = GPTJRotaryEmbedding(config)
    x = torch.randn(2, len(positions), HEADS, HEAD_DIM)  # GPT-J rotates (B, L, H, D)
    position_ids = positions.expand(2, -1)
    sin, cos = hf(x, position_ids)
    rot = x[..., :rotary_dim]
    theirs = torch.cat((apply_rotary_pos_emb(rot, sin, cos), x[..., rotary_dim:]), dim=-1)
    scaling = {"rope_type": "default", "partial_rotary_factor": rotary_dim / HEAD_DIM}
    rope = RotaryEmbedding(HEAD_DIM, layout="interleaved", scaling=scaling)
    ours = rope(x.transpose(1, 2), positions=position_ids).transpose(1, 2)
    freqs, _ = rope_frequencies(HEAD_DIM, scaling=scaling)
    exact = rotary_reference(x, position_ids[:, :, None], freqs.numpy(), "interleaved")
    compare(
        f"HF GPT-J rotary_dim={rotary_dim}", ours, theirs, exact, positions is NEAR, peer_report
    )


@XT_IMPORT
@pytest.mark.parametrize("interpolation", [1.0, 4.0])
@pytest.mark.parametrize("positions", [NEAR, FAR], ids=["near", "far"])
def test_x_transformers_rotary_embedding(
    interpolation: float, positions: torch.Tensor, peer_report: Report
) -> None:
    from x_transformers.x_transformers import RotaryEmbedding as XRotary
    from x_transformers.x_transformers import apply_rotary_pos_emb

    peer = XRotary(HEAD_DIM, interpolation_factor=interpolation)
    x = torch.randn(2, HEADS, len(positions), HEAD_DIM)
    freqs_peer, _ = peer(positions)
    theirs = apply_rotary_pos_emb(x, freqs_peer)
    # interpolation_factor divides the positions: position interpolation, "linear".
    scaling = {"rope_type": "linear", "factor": interpolation}
    ours = RotaryEmbedding(HEAD_DIM, layout="interleaved", scaling=scaling)(x, positions=positions)
    freqs, _ = rope_frequencies(HEAD_DIM, scaling=scaling)
    exact = rotary_reference(x, positions, freqs.numpy(), "interleaved")
    compare(
        f"x-transformers interpolation={interpolation:g}",
        ours,
        theirs,
        exact,
        positions is NEAR,
        peer_report,
    )


@pytest.mark.parametrize("interpolate", [1.0, 2.0])
@pytest.mark.parametrize("positions", [NEAR, FAR], ids=["near", "far"])
def test_rotary_embedding_torch(
    interpolate: float, positions: torch.Tensor, peer_report: Report
) -> None:
    from rotary_embedding_torch import RotaryEmbedding as LRotary

    peer = LRotary(HEAD_DIM, interpolate_factor=interpolate, theta=10_000)
    x = torch.randn(2, HEADS, len(positions), HEAD_DIM)
    start = int(positions[0])
    theirs = peer.rotate_queries_or_keys(x, offset=start)
    scaling = {"rope_type": "linear", "factor": interpolate}
    ours = RotaryEmbedding(HEAD_DIM, layout="interleaved", scaling=scaling)(x, offset=start)
    freqs, _ = rope_frequencies(HEAD_DIM, scaling=scaling)
    exact = rotary_reference(
        x, np.arange(start, start + len(positions)), freqs.numpy(), "interleaved"
    )
    compare(
        f"rotary-embedding-torch interpolate={interpolate:g}",
        ours,
        theirs,
        exact,
        positions is NEAR,
        peer_report,
    )


@pytest.mark.parametrize("linear", [1.0, 2.0])
@pytest.mark.parametrize("ntk", [1.0, 4.0])
def test_diffusers_1d_rotary_tables_in_float64(linear: float, ntk: float) -> None:
    from diffusers.models.embeddings import get_1d_rotary_pos_embed

    positions = torch.cat((NEAR, FAR, torch.tensor([10**6, 2**20])))
    base = 10_000.0 * ntk  # ntk_factor multiplies theta
    scaling = {"rope_type": "linear", "factor": linear}
    cos, sin = RotaryEmbedding(HEAD_DIM, base=base, scaling=scaling).cos_sin(
        len(positions), positions=positions
    )
    for interleaved in (True, False):
        peer_cos, peer_sin = get_1d_rotary_pos_embed(
            HEAD_DIM,
            positions,
            theta=10_000.0,
            use_real=True,
            linear_factor=linear,
            ntk_factor=ntk,
            repeat_interleave_real=interleaved,
            freqs_dtype=torch.float64,
        )
        one = (
            (slice(None), slice(0, None, 2))
            if interleaved
            else (slice(None), slice(0, HEAD_DIM // 2))
        )
        other = (
            (slice(None), slice(1, None, 2))
            if interleaved
            else (slice(None), slice(HEAD_DIM // 2, None))
        )
        assert torch.equal(peer_cos[one], peer_cos[other])
        # Both round float64 values once to float32; the float64 frequencies may differ in
        # the last bit, and at 2**20 that moves a few values to the neighbouring float.
        torch.testing.assert_close(peer_cos[one], cos, rtol=0, atol=2 * 2.0**-24)
        torch.testing.assert_close(peer_sin[one], sin, rtol=0, atol=2 * 2.0**-24)
        assert (peer_cos[one] == cos).float().mean() > 0.999


@pytest.mark.parametrize("unbind", [-1, -2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_diffusers_apply_rotary_emb(unbind: int, dtype: torch.dtype) -> None:
    from diffusers.models.embeddings import apply_rotary_emb, get_1d_rotary_pos_embed

    positions = torch.cat((NEAR, FAR))
    x = torch.randn(2, HEADS, len(positions), HEAD_DIM).to(dtype)
    layout = "interleaved" if unbind == -1 else "half"
    cos, sin = get_1d_rotary_pos_embed(
        HEAD_DIM,
        positions,
        use_real=True,
        repeat_interleave_real=unbind == -1,
        freqs_dtype=torch.float64,
    )
    theirs = apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=unbind)
    ours = RotaryEmbedding(HEAD_DIM, layout=layout)(x, positions=positions)
    # Both rotate in float32 from float32 tables and round once: the same rotation,
    # up to float32's own rounding (and in bfloat16, a rounding boundary at most).
    atol = 4e-6 if dtype == torch.float32 else 2.0**-6
    torch.testing.assert_close(ours.float(), theirs.float(), rtol=0, atol=atol)
    assert (ours == theirs).float().mean() > (0.99 if dtype == torch.bfloat16 else 0.5)


@XT_IMPORT
def test_worst_errors_after_a_cast_at_position_one_million(peer_report: Report) -> None:
    from peers.rotary_precision import format_table, worst_errors

    table = worst_errors(10**6)
    for line in format_table(table, 10**6):
        peer_report(line)
    ours = table["posenc RotaryEmbedding"]
    # Largest pair length of N(0, 1) data here is below 8: one ulp there.
    for dtype, err in ours.items():
        assert err <= 4 * torch.finfo(dtype).eps, (dtype, err)
    assert math.isfinite(table["HF Llama (LlamaRotaryEmbedding)"][torch.bfloat16])
