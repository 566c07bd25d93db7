"""posenc inside Hugging Face models: patch_rotary and the recipes of the guide's
"In a Hugging Face model" page, on tiny random models built from configs.

Each family's model is seeded, 2 layers of width 64, built offline. The reference for
an error is the exact model: the same weights in float64 with posenc's tables (the
patched model in float64). Hugging Face's own model in float64 is no reference: its
rotary modules compute the phases in float32 whatever the model's dtype. Every
measurement is printed in the summary after the run.
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from posenc import (
    ALiBi,
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RotaryEmbedding,
    apply_rotary,
    rope_frequencies,
    sinusoidal_table,
)
from posenc.hf import (
    RECORDS,
    HFRotaryEmbedding,
    exact_rotation,
    patch_rotary,
    rotary_from_config,
)

Report = Callable[[str], None]
VOCAB, LENGTH, FAR = 128, 24, 10**6
#: The sizes of the tiny encoder-decoder models (Marian, Whisper) the recipes are run on.
TINY_SEQ2SEQ = {
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
}
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": VOCAB,
    "max_position_embeddings": 4096,
}


def _longrope() -> dict[str, Any]:
    pairs = 8  # head_dim 16
    return {
        "rope_type": "longrope",
        "rope_theta": 10_000.0,
        "short_factor": [1.0 + 0.1 * k for k in range(pairs)],
        "long_factor": [1.0 + 0.5 * k for k in range(pairs)],
        "original_max_position_embeddings": 256,
    }


#: Llama 4's published rope parameters (Scout's config.json): llama3 with equal factors.
LLAMA4_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500_000.0,
    "factor": 16.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
}
#: In SETTINGS: a field of TINY the config class does not take.
DROP: Any = object()
_GEMMA = {"head_dim": 16, "hidden_activation": "gelu_pytorch_tanh"}
#: What a record's tiny model needs beside TINY (its config class's own names, a
#: scaling worth testing); a record not named here is built from TINY alone.
SETTINGS: dict[str, dict[str, Any]] = {
    "mistral": {"head_dim": 16, "sliding_window": None},
    "qwen3": {"head_dim": 16},
    "gemma": _GEMMA,
    "gemma2": {**_GEMMA, "sliding_window": 4096},
    "gemma3": {
        **_GEMMA,
        "model_type": "gemma3_text",
        "sliding_window": 4096,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        },
        "layer_types": ["sliding_attention", "full_attention"],
    },
    "phi3": {"rope_parameters": _longrope(), "pad_token_id": 0},
    "gpt_neox": {
        "num_key_value_heads": DROP,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10_000.0,
            "partial_rotary_factor": 0.25,
        },
    },
    "gptj": {
        "num_key_value_heads": DROP,
        "intermediate_size": DROP,
        "max_position_embeddings": DROP,
        "rotary_dim": 8,
        "n_positions": FAR + LENGTH,
        "n_inner": 128,
    },
    "stablelm": {"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}},
    # Llama 4 Scout's rope parameters; the first and last layers NoPE (no_rope_layers 0)
    "llama4": {
        "model_type": "llama4_text",
        "head_dim": 16,
        "num_hidden_layers": 3,
        "no_rope_layers": [0, 1, 0],
        "intermediate_size_mlp": 128,
        "num_local_experts": 2,
        "rope_parameters": LLAMA4_ROPE,
    },
}
#: Cases beside the records: a record's model under another scaling.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama3": (
        "llama",
        {
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500_000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 512,
            }
        },
    ),
}


def family_config(name: str) -> Any:
    from transformers import AutoConfig

    if name in MULTIMODAL:
        return multimodal_config(name)
    record, settings = VARIANTS.get(name, (name, SETTINGS.get(name, {})))
    fields = {**TINY, **_NO_SPECIAL_TOKENS, **settings}
    model_type = fields.pop("model_type", RECORDS[record].model_types[0])
    fields = {key: value for key, value in fields.items() if value is not DROP}
    return AutoConfig.for_model(model_type, **fields)


# Qwen-VL: whole models (vision tower and language model) built from configs; the text
# model's head is 16 = 8 pairs, on the t, h and w sections of M-RoPE.
MULTIMODAL = [name for name, family in RECORDS.items() if family.mrope is not None]
#: The records of one position axis, and their variants: the 1-D cases.
ONE_AXIS = [name for name, family in RECORDS.items() if family.mrope is None] + list(VARIANTS)
_NO_SPECIAL_TOKENS = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
_TEXT = {**TINY, **_NO_SPECIAL_TOKENS}
_CHUNKED = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [2, 3, 3]}
_INTERLEAVED = {
    "rope_type": "default",
    "rope_theta": 5_000_000.0,
    "mrope_section": [3, 3, 2],
    "mrope_interleaved": True,
}
_MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}


def multimodal_config(name: str) -> Any:
    import transformers as t

    small = {"depth": 1, "hidden_size": 32, "out_hidden_size": 64, "num_heads": 2,
             "intermediate_size": 16}  # fmt: skip
    if name == "qwen2_vl":
        vision = {"depth": 1, "embed_dim": 32, "hidden_size": 64, "num_heads": 2}
        return t.Qwen2VLConfig(
            text_config={**_TEXT, "rope_parameters": _CHUNKED}, vision_config=vision
        )
    if name == "qwen2_5_vl":
        return t.Qwen2_5_VLConfig(
            text_config={**_TEXT, "rope_parameters": _CHUNKED}, vision_config=small
        )
    text = {**_TEXT, "head_dim": 16, "rope_parameters": _INTERLEAVED}
    vision = {**small, "num_position_embeddings": 16}
    if name == "qwen3_vl":
        return t.Qwen3VLConfig(text_config=text, vision_config=vision)
    if name == "qwen3_vl_moe":
        return t.Qwen3VLMoeConfig(text_config={**text, **_MOE}, vision_config=vision)
    # Qwen3.5: a quarter of a head of 64 rotated, 8 pairs; a full-attention layer after
    # three linear ones
    text = {**text, "head_dim": 64, "num_hidden_layers": 4}
    text["rope_parameters"] = {**_INTERLEAVED, "partial_rotary_factor": 0.25}
    if name == "qwen3_5":
        return t.Qwen3_5Config(text_config=text, vision_config=vision)
    if name == "qwen3_5_moe":
        return t.Qwen3_5MoeConfig(text_config={**text, **_MOE}, vision_config=vision)
    raise AssertionError(name)


_MODELS: dict[tuple[str, bool], torch.nn.Module] = {}


def model_of(name: str, sharp: bool = False) -> torch.nn.Module:
    """The family's tiny model, seeded, float32, eval mode (built once per run).

    ``sharp``: weights drawn 10x wider than Hugging Face's default (initializer_range
    0.2), so that attention, and the logits, depend on the positions: at the default
    scale a random model's attention is nearly uniform and hides a rotary error.
    """
    if (name, sharp) not in _MODELS:
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

        torch.manual_seed(0)
        config = family_config(name)
        config._attn_implementation = "eager"
        config._experts_implementation = "eager"  # grouped_mm takes no float64
        if sharp:
            config.get_text_config().initializer_range = 0.2
        auto = AutoModelForImageTextToText if name in MULTIMODAL else AutoModelForCausalLM
        _MODELS[name, sharp] = auto.from_config(config).eval()
    return _MODELS[name, sharp]


def logits(
    model: torch.nn.Module,
    ids: torch.Tensor,
    start: int,
    dtype: torch.dtype,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """The model's logits, in ``dtype``, at ``start + positions`` (default: 0, 1, ...)."""
    model = copy.deepcopy(model).to(dtype)
    if positions is None:
        positions = torch.arange(ids.shape[-1]).expand(ids.shape[0], -1)
    positions = positions + start
    with torch.no_grad():
        out = model(input_ids=ids, position_ids=positions).logits
    return out.double()


def ids() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, LENGTH), generator=torch.Generator().manual_seed(1))


def patched(name: str, sharp: bool = False) -> torch.nn.Module:
    return patch_rotary(copy.deepcopy(model_of(name, sharp)))


def hf_rotary(module: torch.nn.Module) -> bool:
    cls = type(module)
    return cls.__module__.startswith("transformers.") and cls.__name__.endswith("RotaryEmbedding")


def err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def parts(tables: Any) -> tuple[torch.Tensor, ...]:
    """A rotary module's tables as real tensors: Llama 4's complex one as (real, imag)."""
    if isinstance(tables, torch.Tensor):
        assert tables.is_complex()
        return tables.real, tables.imag
    return tuple(tables)


@pytest.mark.parametrize("name", ONE_AXIS)
def test_patch_rotary_replaces_every_rotary_module(name: str) -> None:
    model = patched(name)
    mine = [m for m in model.modules() if isinstance(m, HFRotaryEmbedding)]
    assert mine
    assert not [m for m in model.modules() if hf_rotary(m)]
    assert patch_rotary(model) is model  # again: nothing to do
    # The state dict is the model's: the tables are never saved.
    assert model.state_dict().keys() == model_of(name).state_dict().keys()


@pytest.mark.parametrize("name", ONE_AXIS)
def test_tables_equal_the_peer_modules_near_position_zero(name: str) -> None:
    # The convention (frequencies, attention factor, partial rotary, layer types, the
    # record's table form) against the model's own rotary module, where its float32
    # phases are still exact enough; and the tables' dtype for a bf16 input.
    model = model_of(name)
    (theirs,) = [m for m in model.modules() if hf_rotary(m)]
    mine = patched(name)
    (ours,) = [m for m in mine.modules() if isinstance(m, HFRotaryEmbedding)]
    position_ids = torch.stack((torch.arange(64), torch.arange(64) + 200))
    kinds = [None] if isinstance(ours.rotary, RotaryEmbedding) else sorted(ours.rotary)
    for kind in kinds:
        extra = () if kind is None else (kind,)
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.zeros(1, dtype=dtype)
            mine_out, their_out = ours(x, position_ids, *extra), theirs(x, position_ids, *extra)
            assert type(mine_out) is type(their_out)
            assert getattr(mine_out, "dtype", None) == getattr(their_out, "dtype", None)
            for a, b in zip(parts(mine_out), parts(their_out), strict=True):
                assert a.shape == b.shape
                assert a.dtype == b.dtype
                atol = 2e-5 if dtype == torch.float32 else 2**-8  # bf16: one rounding each
                torch.testing.assert_close(a.float(), b.float(), rtol=0, atol=atol)


def test_gptj_tables_equal_its_module() -> None:
    model = model_of("gptj")
    theirs = model.transformer.rotary_emb
    ours = patched("gptj").transformer.rotary_emb
    position_ids = torch.arange(64)[None]
    for a, b in zip(
        ours(torch.zeros(1), position_ids), theirs(torch.zeros(1), position_ids), strict=True
    ):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=0, atol=2e-5)


@pytest.mark.parametrize("name", ONE_AXIS)
def test_float32_logits_agree_below_4096_and_improve_at_a_million(
    name: str, peer_report: Report
) -> None:
    model, mine, tokens = model_of(name), patched(name), ids()
    short = [
        err(logits(model, tokens, s, torch.float32), logits(mine, tokens, s, torch.float32))
        for s in (0, 4096 - LENGTH)
    ]
    assert max(short) <= 1e-4
    model, mine = model_of(name, sharp=True), patched(name, sharp=True)
    exact = logits(mine, tokens, FAR, torch.float64)
    theirs = err(logits(model, tokens, FAR, torch.float32), exact)
    ours = err(logits(mine, tokens, FAR, torch.float32), exact)
    assert ours * 100 <= theirs
    ref0 = logits(mine, tokens, 0, torch.float64)
    bf16 = [
        err(logits(m, tokens, s, torch.bfloat16), r)
        for s, r in ((0, ref0), (FAR, exact))
        for m in (model, mine)
    ]
    peer_report(
        f"HF {name:9s} f32 agree<4096 {max(short):.1e} | f32 @1e6 own {theirs:.1e} "
        f"posenc {ours:.1e} | bf16 @0 own {bf16[0]:.1e} posenc {bf16[1]:.1e} "
        f"@1e6 own {bf16[2]:.1e} posenc {bf16[3]:.1e} (|logits| {float(exact.abs().max()):.2f})"
    )


# -- Qwen-VL: multimodal RoPE on (3, B, L) position ids -----------------------------------


def text_rotary(model: torch.nn.Module) -> torch.nn.Module:
    """The language model's rotary module (the vision tower has its own)."""
    (module,) = [m for m in model.modules() if hf_rotary(m) and "Vision" not in type(m).__name__]
    return module


def image_text_positions() -> torch.Tensor:
    """(3, 2, LENGTH) M-RoPE positions of two rows of text and images.

    Row 0: 4 text tokens, an image of 2 x 3 merged patches, 6 text, an image of 3 x 2,
    2 text; row 1: 10 text, an image of 2 x 6, 2 text.
    """
    from posenc import multimodal_positions

    def row(*runs: tuple[int, int]) -> list[int]:
        return [kind for kind, n in runs for _ in range(n)]

    types = torch.tensor(
        [row((0, 4), (1, 6), (0, 6), (1, 6), (0, 2)), row((0, 10), (1, 12), (0, 2))]
    )
    grids = torch.tensor([[1, 4, 6], [1, 6, 4], [1, 4, 12]])  # before the 2 x 2 merge
    positions, _ = multimodal_positions(types, image_grid_thw=grids)
    assert positions.shape == (3, 2, LENGTH)
    return positions


@pytest.mark.parametrize("name", MULTIMODAL)
def test_qwen_vl_patch_replaces_the_text_rotary_only(name: str) -> None:
    model = model_of(name)
    mine = patched(name)
    ours = [n for n, m in mine.named_modules() if isinstance(m, HFRotaryEmbedding)]
    assert ours == ["model.language_model.rotary_emb"]
    vision = [type(m).__name__ for m in mine.modules() if hf_rotary(m)]
    assert len(vision) == 1
    assert "Vision" in vision[0]  # the vision tower's, left as it is
    assert patch_rotary(mine) is mine
    assert mine.state_dict().keys() == model.state_dict().keys()
    # The text model alone, as its own config's model_type ("..._text").
    text = patch_rotary(copy.deepcopy(model.model.language_model))
    assert text.config.model_type == f"{name}_text"
    assert isinstance(text.rotary_emb, HFRotaryEmbedding)


@pytest.mark.parametrize("name", MULTIMODAL)
def test_qwen_vl_tables_equal_the_text_rotary_near_position_zero(name: str) -> None:
    theirs = text_rotary(model_of(name))
    ours = patched(name).model.language_model.rotary_emb
    x = torch.zeros(1, dtype=torch.float32)
    mixed = image_text_positions()
    text = torch.arange(LENGTH).expand(2, -1) + 100  # (B, L): the same on every axis
    for position_ids in (mixed, mixed + 200, text, mixed[:1]):
        for a, b in zip(ours(x, position_ids), theirs(x, position_ids), strict=True):
            assert a.shape == b.shape == (2, LENGTH, 16)
            assert a.dtype == b.dtype
            torch.testing.assert_close(a, b, rtol=0, atol=2e-5)
    # The axes matter: the tables at the image's (t, h, w) are not those of one stream.
    assert not torch.allclose(ours(x, mixed)[0], ours(x, mixed[:1])[0], atol=1e-2)
    with pytest.raises(ValueError, match=r"must be a \(3, B, L\) integer tensor"):
        ours(x, torch.zeros(2, 2, LENGTH, dtype=torch.long))


@pytest.mark.parametrize("name", MULTIMODAL)
def test_qwen_vl_float32_logits_agree_below_4096_and_improve_at_a_million(
    name: str, peer_report: Report
) -> None:
    model, mine, tokens, where = model_of(name), patched(name), ids(), image_text_positions()
    top = 4096 - int(where.max()) - 1
    short = [
        err(
            logits(model, tokens, s, torch.float32, where),
            logits(mine, tokens, s, torch.float32, where),
        )
        for s in (0, top)
    ]
    assert max(short) <= 1e-4
    # The model reads the (t, h, w) ids: at one text stream its logits are other ones.
    assert (
        err(logits(mine, tokens, 0, torch.float32), logits(mine, tokens, 0, torch.float32, where))
        > 1e-3
    )
    model, mine = model_of(name, sharp=True), patched(name, sharp=True)
    exact = logits(mine, tokens, FAR, torch.float64, where)
    theirs = err(logits(model, tokens, FAR, torch.float32, where), exact)
    ours = err(logits(mine, tokens, FAR, torch.float32, where), exact)
    ref0 = logits(mine, tokens, 0, torch.float64, where)
    if "linear_attention" in (getattr(model.config.get_text_config(), "layer_types", None) or ()):
        # Qwen3.5: the linear-attention layers' float32 error, the same at every position,
        # is the floor; posenc's model is at it at 10**6 as at 0, Hugging Face's above it
        floor = err(logits(mine, tokens, 0, torch.float32, where), ref0)
        assert ours <= 3 * floor
        assert ours * 10 <= theirs
    else:
        assert ours * 100 <= theirs
    bf16 = [
        err(logits(m, tokens, s, torch.bfloat16, where), r)
        for s, r in ((0, ref0), (FAR, exact))
        for m in (model, mine)
    ]
    peer_report(
        f"HF {name:10s} (3, B, L) f32 agree<4096 {max(short):.1e} | f32 @1e6 own {theirs:.1e} "
        f"posenc {ours:.1e} | bf16 @0 own {bf16[0]:.1e} posenc {bf16[1]:.1e} "
        f"@1e6 own {bf16[2]:.1e} posenc {bf16[3]:.1e} (|logits| {float(exact.abs().max()):.2f})"
    )


@pytest.mark.parametrize("name", ONE_AXIS + MULTIMODAL)
def test_greedy_generation_with_a_cache_gives_the_same_tokens(name: str) -> None:
    model, mine = model_of(name), patched(name)
    prompt = ids()[:1, :8]
    settings = {"max_new_tokens": 12, "do_sample": False, "use_cache": True}
    with torch.no_grad():
        theirs = model.generate(prompt, **settings)
        ours = mine.generate(prompt, **settings)
    assert theirs.shape == (1, 20)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("name", ONE_AXIS + MULTIMODAL)
def test_exact_rotation_is_reversible_and_measured(name: str, peer_report: Report) -> None:
    import sys

    family = RECORDS[VARIANTS.get(name, (name,))[0]]
    mine, tokens = patched(name, sharp=True), ids()
    namespace = sys.modules[type(mine).__module__]
    before = getattr(namespace, family.rotation.name)
    exact = {s: logits(mine, tokens, s, torch.float64) for s in (0, FAR)}
    plain = {s: err(logits(mine, tokens, s, torch.bfloat16), exact[s]) for s in exact}
    f32 = logits(mine, tokens, FAR, torch.float32)
    # The rotation of one layer's queries, bf16 at 10**6, against float64.
    (module,) = [m for m in mine.modules() if isinstance(m, HFRotaryEmbedding)]
    kind = None if isinstance(module.rotary, RotaryEmbedding) else sorted(module.rotary)[0]
    rope = module._rotary(kind)
    extra = () if kind is None else (kind,)
    q = torch.randn(2, LENGTH, 4, rope.head_dim, generator=torch.Generator().manual_seed(4))
    q = q.bfloat16()  # (B, L, H, D)
    position_ids = torch.arange(FAR, FAR + LENGTH)[None].expand(2, -1)
    cos, sin = rope.cos_sin(LENGTH, positions=position_ids, batch=2, dtype=torch.float64)
    truth = apply_rotary(
        q.double(), cos[:, :, None], sin[:, :, None], layout=rope.layout
    ).transpose(1, 2)
    rot = rope.rotary_dim  # partial rotary: the attention passes the rotated part only

    def rotated(function: Callable[..., Any], tables: Any) -> torch.Tensor:
        if family.form == "gptj":  # (B, L, H, D), one value per pair, (sin, cos)
            y = function(q[..., :rot], *tables)
            return torch.cat((y, q[..., rot:]), -1).transpose(1, 2)
        if family.form == "complex":  # Llama 4: (B, L, H, D), one complex table
            return function(q, q, tables)[0].transpose(1, 2)
        part = q[..., :rot].transpose(1, 2)
        y = function(part, part, *tables)[0]
        return torch.cat((y, q[..., rot:].transpose(1, 2)), -1)

    hf_three = err(rotated(before, module(q, position_ids, *extra)).double(), truth)
    with exact_rotation(mine) as handle:
        assert getattr(namespace, family.rotation.name) is family.rotation.exact
        # float32: the same logits but for rounding order, within the float32 error
        # the model has anyway (1e-5 where that is smaller).
        bound = max(1e-5, err(f32, exact[FAR]))
        assert err(logits(mine, tokens, FAR, torch.float32), f32) <= bound
        tables = module(q, position_ids, *extra)
        assert parts(tables)[0].dtype == torch.float32  # bf16 input, float32 tables
        once = err(rotated(getattr(namespace, family.rotation.name), tables).double(), truth)
        one = {s: err(logits(mine, tokens, s, torch.bfloat16), exact[s]) for s in exact}
    assert getattr(namespace, family.rotation.name) is before
    assert not handle.active
    assert not module.exact
    handle.undo()  # twice: harmless
    assert getattr(namespace, family.rotation.name) is before
    if family.table_dtype is None:  # HF rounds bf16 tables: more than one rounding
        assert once < hf_three
    else:  # its tables are float32 already (OLMo 2): one rounding either way
        assert once <= hf_three
    peer_report(
        f"HF {name:9s} bf16 logits, HF's rotation vs exact_rotation: @0 {plain[0]:.2e} vs "
        f"{one[0]:.2e}, @1e6 {plain[FAR]:.2e} vs {one[FAR]:.2e}; "
        f"rotated q @1e6 {hf_three:.1e} vs {once:.1e}"
    )


# -- Llama 4: llama3 with equal factors, complex tables, NoPE layers ------------------------

#: (head_dim, rope_theta, original_max_position_embeddings): Llama 4's own, and others
#: that put the trained length between other pairs.
LLAMA4_CASES = [(128, 500_000.0, 8192), (64, 10_000.0, 1024), (16, 500_000.0, 8192),
                (128, 1e6, 4096), (96, 5e7, 32_768)]  # fmt: skip


@pytest.mark.parametrize(("head_dim", "base", "trained"), LLAMA4_CASES)
def test_llama4_frequencies_equal_transformers_llama3_function(
    head_dim: int, base: float, trained: int, peer_report: Report
) -> None:
    # transformers 5.24's _compute_llama3_parameters, which builds Llama 4's equal
    # factors (with a logged warning): wavelengths > trained / low divided by the
    # factor, < trained / high kept. Which pairs are divided: bit for bit (HF's factor
    # 16 is a power of two, so its divided pairs are its ladder / 16 exactly). The
    # values: HF's float32 ladder, base ** (2k / d) in float32, within 4 float32 ulps.
    from transformers import Llama4TextConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama4.modeling_llama4 import Llama4TextRotaryEmbedding

    params = {**LLAMA4_ROPE, "rope_theta": base, "original_max_position_embeddings": trained}
    config = Llama4TextConfig(
        hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim, rope_parameters=params
    )
    theirs, their_factor = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    ladder, _ = Llama4TextRotaryEmbedding.compute_default_rope_parameters(config)
    ours, our_factor = rope_frequencies(head_dim, base=base, scaling=params)
    unscaled, _ = rope_frequencies(head_dim, base=base)
    divided = ours != unscaled
    assert torch.equal(ours[divided], unscaled[divided] / 16)
    assert 0 < int(divided.sum()) < head_dim // 2  # both sides hold pairs
    assert torch.equal(theirs, torch.where(divided, ladder / 16, ladder))
    rel = float(((ours - theirs.double()) / ours).abs().max())
    assert rel <= 2**-21
    assert our_factor == float(their_factor) == 1.0
    peer_report(
        f"Llama 4 rope (d={head_dim}, base {base:g}, trained {trained}): "
        f"{int(divided.sum())}/{head_dim // 2} pairs divided, as HF's; "
        f"|posenc - HF| / posenc {rel:.1e} (HF's float32 ladder)"
    )


def test_llama4_boundary_wavelength_is_kept() -> None:
    # A pair whose wavelength is exactly trained / low (pair 0: frequency 1, 2 pi):
    # Hugging Face's blend is 0 / 0 there (its `wavelen > low_freq_wavelen` keeps it,
    # then the empty band's blend gives a non-finite value); posenc keeps it.
    from transformers import Llama4TextConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    trained = 8192
    low = trained / (2 * np.pi)
    assert trained / low == 2 * np.pi  # the boundary is the wavelength, in float64
    assert np.float32(trained / low) == np.float32(2 * np.pi)  # and in HF's float32
    params = {**LLAMA4_ROPE, "low_freq_factor": low, "high_freq_factor": low}
    ours, _ = rope_frequencies(16, base=500_000.0, scaling=params)
    assert ours[0] == 1.0  # kept, not 1 / 16
    assert torch.isfinite(ours).all()
    config = Llama4TextConfig(
        hidden_size=64, num_attention_heads=4, head_dim=16, rope_parameters=params
    )
    theirs, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    assert not torch.isfinite(theirs[0])  # HF: 0 / 0 on the boundary
    # the pairs off the boundary (all longer: divided) as posenc's, within HF's ladder
    np.testing.assert_allclose(theirs[1:].double(), ours[1:], rtol=2**-21, atol=0)
    unscaled, _ = rope_frequencies(16, base=500_000.0)
    assert torch.equal(ours[1:], unscaled[1:] / 16)


def torchtune_llama3_scaling() -> Callable[..., torch.Tensor]:
    """torchtune's ``Llama3ScaledRoPE.apply_scaling``, from its source file.

    The file imports torch only; the package's ``__init__`` wants torchao, which the
    peers venv lacks (torchtune is installed there with ``--no-deps``).
    """
    spec = importlib.util.find_spec("torchtune")
    assert spec is not None, "torchtune is needed (pip install --no-deps torchtune)"
    assert spec.origin is not None
    path = Path(spec.origin).parent / "models" / "llama3_1" / "_position_embeddings.py"
    module_spec = importlib.util.spec_from_file_location("torchtune_llama3_1_rope", path)
    assert module_spec is not None
    assert module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    scaling: Callable[..., torch.Tensor] = module.Llama3ScaledRoPE.apply_scaling
    return scaling


@pytest.mark.parametrize(("head_dim", "base", "trained"), LLAMA4_CASES)
def test_llama4_frequencies_equal_torchtune_rule(head_dim: int, base: float, trained: int) -> None:
    # torchtune's per-pair rule (< trained / high kept, > trained / low divided; on the
    # boundary it asserts): fed posenc's float64 ladder, it gives posenc's frequencies
    # bit for bit.
    apply_scaling = torchtune_llama3_scaling()
    params = {**LLAMA4_ROPE, "rope_theta": base, "original_max_position_embeddings": trained}
    ours, _ = rope_frequencies(head_dim, base=base, scaling=params)
    unscaled, _ = rope_frequencies(head_dim, base=base)
    theirs = apply_scaling(None, unscaled, 16.0, 1.0, 1.0, trained)
    assert theirs.dtype == torch.float64
    assert torch.equal(ours, theirs)


def test_llama4_rotary_from_the_hub_config() -> None:
    # Llama 4 Scout's config.json (transformers 4.x form: rope_scaling beside
    # rope_theta, the text model's fields in text_config) against its config class.
    from transformers import AutoConfig

    scaling = {k: v for k, v in LLAMA4_ROPE.items() if k != "rope_theta"}
    text = {**TINY, "model_type": "llama4_text", "head_dim": 16, "rope_theta": 500_000.0,
            "rope_scaling": scaling}  # fmt: skip
    hub = {"model_type": "llama4", "text_config": text, "vision_config": {}}
    ours = rotary_from_config(hub)
    theirs = rotary_from_config(AutoConfig.for_model(**copy.deepcopy(hub)))
    assert ours.layout == theirs.layout == "interleaved"
    assert ours.extra_repr() == theirs.extra_repr()
    where = torch.tensor([0, 1, 8191, 8192, 10**6])
    for a, b in zip(
        ours.cos_sin(5, positions=where), theirs.cos_sin(5, positions=where), strict=True
    ):
        assert torch.equal(a, b)


def test_llama4_logits_within_1e_5_at_ordinary_positions(peer_report: Report) -> None:
    model, mine, tokens = model_of("llama4"), patched("llama4"), ids()
    gaps = [
        err(logits(model, tokens, s, torch.float32), logits(mine, tokens, s, torch.float32))
        for s in (0, 1000, 4096 - LENGTH, 8192 - LENGTH // 2)
    ]
    assert max(gaps) <= 1e-5
    peer_report(f"HF llama4 f32 logits, posenc vs HF up to position 8204: {max(gaps):.1e}")


def test_llama4_whole_model_patches_the_text_rotary_only() -> None:
    # Llama4ForConditionalGeneration: the language model's rotary is replaced, the
    # vision tower's (2-D, on patch coordinates) stays. transformers 5.24's forward of
    # the whole model fails on its own output class, so the language model is run.
    import transformers as t

    text = {**_TEXT, **{k: v for k, v in SETTINGS["llama4"].items() if k != "model_type"}}
    vision = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
              "intermediate_size": 64, "image_size": 28, "patch_size": 14,
              "vision_output_dim": 32, "projector_input_dim": 32,
              "projector_output_dim": 32}  # fmt: skip
    torch.manual_seed(0)
    config = t.Llama4Config(text_config=text, vision_config=vision)
    model = t.Llama4ForConditionalGeneration(config).eval()
    mine = patch_rotary(copy.deepcopy(model))
    assert isinstance(mine.language_model.model.rotary_emb, HFRotaryEmbedding)
    kept = type(mine.vision_model.rotary_embedding)
    assert kept is type(model.vision_model.rotary_embedding)
    assert kept.__name__ == "Llama4VisionRotaryEmbedding"
    tokens = ids()
    for start in (0, 4096 - LENGTH):
        gap = err(
            logits(model.language_model, tokens, start, torch.float32),
            logits(mine.language_model, tokens, start, torch.float32),
        )
        assert gap <= 1e-5


def test_llama4_nope_layers_are_untouched() -> None:
    # Llama 4's NoPE layers (no_rope_layers 0) never rotate: patching changes nothing
    # there, bit for bit. Layer 0 (NoPE) sees the embeddings in both models; layer 2
    # (NoPE, after a RoPE layer) is given the same input and each model's tables.
    model, mine, tokens = model_of("llama4", sharp=True), patched("llama4", sharp=True), ids()
    assert list(model.config.no_rope_layers) == [0, 1, 0]
    positions = torch.arange(LENGTH).expand(2, -1) + FAR

    def attention(m: torch.nn.Module) -> tuple[list[torch.Tensor], list[dict[str, Any]]]:
        outputs: list[torch.Tensor] = []
        inputs: list[dict[str, Any]] = []

        def hook(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
            inputs.append(dict(kwargs))
            outputs.append(output[0])

        layers = m.model.layers
        hooks = [layer.self_attn.register_forward_hook(hook, with_kwargs=True) for layer in layers]
        with torch.no_grad():
            m(input_ids=tokens, position_ids=positions, use_cache=False)
        for h in hooks:
            h.remove()
        return outputs, inputs

    (theirs, their_inputs), (ours, our_inputs) = attention(model), attention(mine)
    assert [layer.self_attn.use_rope for layer in mine.model.layers] == [0, 1, 0]
    assert torch.equal(ours[0], theirs[0])
    assert not torch.equal(ours[1], theirs[1])  # the RoPE layer: posenc's tables at 10**6
    given = our_inputs[2]
    with torch.no_grad():
        own = model.model.layers[2].self_attn(
            **{**given, "position_embeddings": their_inputs[2]["position_embeddings"]}
        )[0]
        patched_out = mine.model.layers[2].self_attn(**given)[0]
    assert not torch.equal(
        given["position_embeddings"], their_inputs[2]["position_embeddings"]
    )  # the tables differ ...
    assert torch.equal(patched_out, own)  # ... and the NoPE layer does not read them
    assert torch.equal(patched_out, ours[2])


def four_x_config(name: str) -> dict[str, Any]:
    """A transformers 4.x ``config.json`` of the family's text model, with every
    key of the 4.x form its configs carry, each with a value of its own."""
    family = RECORDS[name]
    fields: dict[str, Any] = {
        "model_type": family.model_types[-1],
        **{key: value for key, value in TINY.items() if key != "num_key_value_heads"},
        "head_dim": 16,  # where a config class has a default of its own
    }
    if family.mrope is not None and (None, "partial_rotary_factor") in family.defaults:
        fields["head_dim"] = 64  # Qwen3.5: a quarter rotated, 8 pairs
    values = {"partial_rotary_factor": 0.5, "rotary_dim": 8}
    bases = iter((20_000.0, 30_000.0))
    for key, (_, target) in family.keys.items():
        fields[key] = next(bases) if target == "rope_theta" else values[target]
    if family.fixed:  # GPT-J: no rope parameters in its configs
        return fields
    if (None, "rope_theta") not in family.keys.values() and "rope_theta" not in family.keys:
        fields["rope_theta"] = 40_000.0
    if name == "phi3":  # its configs take LongRoPE only, the trained length beside it
        fields["rope_scaling"] = _longrope()
        fields["original_max_position_embeddings"] = 1024  # wins over the scaling's 256
    elif family.mrope is None:
        fields["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
    else:  # head 16: 8 pairs
        named = {"type": "mrope"} if "mrope" in family.type_aliases else {"rope_type": "default"}
        fields["rope_scaling"] = {**named, "mrope_section": [2, 3, 3]}
    return fields


@pytest.mark.parametrize("name", list(RECORDS))
def test_4x_configs_read_as_transformers_converts_them(name: str) -> None:
    # A 4.x config.json read by posenc gives the module that the same dict, converted by
    # the family's own config class (transformers 5), gives: no 4.x key is dropped.
    from transformers import AutoConfig

    family = RECORDS[name]
    old = four_x_config(name)
    converted = AutoConfig.for_model(**copy.deepcopy(old))  # it fills in rope_scaling
    assert converted.model_type == old["model_type"]
    where = torch.tensor([0, 1, 1000, 123_456])
    for kind in family.layer_types or (None,):
        ours = rotary_from_config(old, layer_type=kind)
        theirs = rotary_from_config(converted, layer_type=kind)
        assert ours.extra_repr() == theirs.extra_repr()
        for a, b in zip(
            ours.cos_sin(4, positions=where, dtype=torch.float64),
            theirs.cos_sin(4, positions=where, dtype=torch.float64),
            strict=True,
        ):
            assert torch.equal(a, b)
    if family.keys:  # the family's own keys were read (not only its defaults)
        given = {**old, "head_dim": 64}  # 64: GPT-J's default rotary_dim fits
        bare = {k: v for k, v in given.items() if k not in family.keys}
        assert any(
            rotary_from_config(bare, layer_type=kind).extra_repr()
            != rotary_from_config(given, layer_type=kind).extra_repr()
            for kind in family.layer_types or (None,)
        )


@pytest.mark.parametrize("name", list(RECORDS))
def test_every_4x_key_the_config_class_converts_is_read(name: str) -> None:
    # The 4.x keys of a family are those its config class (transformers 5) moves into
    # the rope parameters: the ones convert_rope_params_to_dict takes from the 4.x
    # fields, read here from its source. Each is read by posenc (the keys every family
    # reads, or the record's own keys), and each of the record's keys is one of them or
    # a field of the config class (GPT-J's rotary_dim).
    import dataclasses
    import inspect
    import re

    from transformers import CONFIG_MAPPING

    from posenc.hf import _COMMON

    family = RECORDS[name]
    known: set[str] = set()  # converted or a field, by any of the family's config classes
    for model_type in family.model_types:
        config_class = CONFIG_MAPPING[model_type]
        source = inspect.getsource(config_class.convert_rope_params_to_dict)
        converted = set(re.findall(r'kwargs\.(?:pop|get)\(\s*"(\w+)"', source))
        assert "rope_scaling" in converted
        assert converted <= {"rope_scaling", *_COMMON, *family.keys}, model_type
        known |= converted | {f.name for f in dataclasses.fields(config_class)}
    assert set(family.keys) <= known


def test_unsupported_models_are_named() -> None:
    from transformers import BertConfig, BertModel

    bert = BertModel(
        BertConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            vocab_size=16,
        )
    )
    with pytest.raises(
        TypeError, match=r"patch_rotary does not support BertModel \(model_type='bert'\)"
    ):
        patch_rotary(bert)
    with pytest.raises(TypeError, match="needs a model patched by patch_rotary"):
        exact_rotation(copy.deepcopy(model_of("llama")))


# -- The guide's recipes, end to end ----------------------------------------------------


def test_t5_recipe_posenc_bias_on_the_model_table() -> None:
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(
        vocab_size=VOCAB,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_heads=4,
        decoder_start_token_id=0,
    )
    model = T5ForConditionalGeneration(config).eval()
    mine = copy.deepcopy(model)
    for stack, bidirectional in ((mine.encoder, True), (mine.decoder, False)):
        attn = stack.block[0].layer[0].SelfAttention
        bias = RelativePositionBias(
            config.num_heads,
            bidirectional=bidirectional,
            num_buckets=config.relative_attention_num_buckets,
            max_distance=config.relative_attention_max_distance,
        )
        bias.relative_attention_bias = attn.relative_attention_bias  # the model's table
        attn.compute_bias = lambda q, k, device=None, past_seen_tokens=0, bias=bias: bias(
            q, k, offset=past_seen_tokens
        )[None]
    tokens, target = ids(), ids()[:, :10]
    with torch.no_grad():
        theirs = model(input_ids=tokens, decoder_input_ids=target).logits
        ours = mine(input_ids=tokens, decoder_input_ids=target).logits
        assert torch.equal(ours, theirs)
        settings = {"max_new_tokens": 8, "do_sample": False}
        assert torch.equal(mine.generate(tokens, **settings), model.generate(tokens, **settings))
        # float64: the table follows the model's cast, the bias comes in its dtype
        assert (
            mine.double()(input_ids=tokens, decoder_input_ids=target).logits.dtype == torch.float64
        )


def test_bloom_recipe_alibi_in_bloom_form(peer_report: Report) -> None:
    from transformers import BloomConfig, BloomForCausalLM

    torch.manual_seed(0)
    config = BloomConfig(
        vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4, initializer_range=0.2
    )
    model = BloomForCausalLM(config).eval()
    mine = copy.deepcopy(model)
    alibi = ALiBi(config.n_head)
    mine.transformer.build_alibi_tensor = lambda mask, heads, dtype: alibi.bloom(mask, dtype=dtype)
    length = 256
    tokens = torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(tokens)

    def run(m: torch.nn.Module, dtype: torch.dtype) -> torch.Tensor:
        with torch.no_grad():
            return (
                copy.deepcopy(m).to(dtype)(input_ids=tokens, attention_mask=mask).logits.double()
            )

    exact = run(mine, torch.float64)
    # Softmax ignores the constant per row; BLOOM's own float64 run rounds m·j in float32.
    assert err(run(model, torch.float64), exact) < 1e-4
    assert err(run(model, torch.float32), run(mine, torch.float32)) < 1e-4
    settings = {"max_new_tokens": 8, "do_sample": False}
    prompt = tokens[:, :12]
    with torch.no_grad():
        assert torch.equal(
            mine.generate(prompt, attention_mask=mask[:, :12], **settings),
            model.generate(prompt, attention_mask=mask[:, :12], **settings),
        )
    # Decoding with a cache: the last token's logits, bf16, against float64.
    last = {}
    for label, m in (("own", model), ("posenc", mine)):
        half = copy.deepcopy(m).to(torch.bfloat16)
        with torch.no_grad():
            out = half(input_ids=tokens[:, :-1], attention_mask=mask[:, :-1], use_cache=True)
            step = half(input_ids=tokens[:, -1:], attention_mask=mask, cache=out.past_key_values)
        last[label] = err(step.logits[:, -1].double(), exact[:, -1])
    bf16 = {
        label: err(run(m, torch.bfloat16), exact)
        for label, m in (("own", model), ("posenc", mine))
    }
    peer_report(
        f"HF BLOOM L={length} bf16: prefill own {bf16['own']:.2e} posenc {bf16['posenc']:.2e}; "
        f"cached last token own {last['own']:.2e} posenc {last['posenc']:.2e}"
    )


def test_gpt2_recipe_learned_positions_as_wpe() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64)
    model = GPT2LMHeadModel(config).eval()
    mine = copy.deepcopy(model)
    learned = LearnedPositionalEmbedding(config.n_positions, config.n_embd)
    learned.load_state_dict({"wpe.weight": model.transformer.wpe.weight})
    mine.transformer.wpe = learned  # GPT-2 calls wpe(position_ids)
    assert mine.state_dict().keys() == model.state_dict().keys()
    tokens = ids()
    with torch.no_grad():
        assert torch.equal(mine(input_ids=tokens).logits, model(input_ids=tokens).logits)
        settings = {"max_new_tokens": 8, "do_sample": False}
        assert torch.equal(
            mine.generate(tokens[:1, :8], **settings), model.generate(tokens[:1, :8], **settings)
        )
        with pytest.raises(IndexError, match="outside the learned table of max_len=64"):
            mine(input_ids=torch.zeros(1, 65, dtype=torch.long))


def test_marian_recipe_sinusoid_tables() -> None:
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(0)
    config = MarianConfig(
        vocab_size=VOCAB,
        **TINY_SEQ2SEQ,
        max_position_embeddings=256,
        pad_token_id=0,
        decoder_start_token_id=0,
    )
    model = MarianMTModel(config).eval()
    mine = copy.deepcopy(model)
    for stack in (mine.model.encoder, mine.model.decoder):
        table = stack.embed_positions.weight
        with torch.no_grad():
            table.copy_(sinusoidal_table(table.shape[0], table.shape[1], layout="concatenated"))
    tokens = ids()
    with torch.no_grad():
        theirs = model(input_ids=tokens, decoder_input_ids=tokens[:, :10]).logits
        ours = mine(input_ids=tokens, decoder_input_ids=tokens[:, :10]).logits
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)  # both one rounding of the same


def test_whisper_recipe_encoder_sinusoid(peer_report: Report) -> None:
    from transformers import WhisperConfig, WhisperForConditionalGeneration
    from transformers.models.whisper.modeling_whisper import sinusoids

    torch.manual_seed(0)
    config = WhisperConfig(
        vocab_size=VOCAB,
        **TINY_SEQ2SEQ,
        num_mel_bins=16,
        max_source_positions=1500,
        max_target_positions=64,
        pad_token_id=0,
        decoder_start_token_id=1,
    )
    model = WhisperForConditionalGeneration(config).eval()
    mine = copy.deepcopy(model)
    table = mine.model.encoder.embed_positions.weight
    n, d = table.shape
    exact = sinusoidal_table(n, d, layout="concatenated", endpoint=True, dtype=torch.float64)
    with torch.no_grad():
        table.copy_(exact)  # rounded once to the table's dtype
    theirs_err = err(sinusoids(n, d).double(), exact)
    ours_err = err(table.double(), exact)
    assert ours_err <= 2**-25 < theirs_err  # half an ulp of 1 against float32's arithmetic
    features = torch.randn(1, 16, 2 * n, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        theirs = model(input_features=features, decoder_input_ids=ids()[:1, :8]).logits
        ours = mine(input_features=features, decoder_input_ids=ids()[:1, :8]).logits
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-4)
    peer_report(
        f"HF Whisper encoder table vs float64: own {theirs_err:.1e}, posenc {ours_err:.1e}"
    )


# -- Each covered family's defaults, read from transformers' own config classes ----------


def _sizes(config: Any) -> dict[str, Any]:
    """The sizes of a config (not its rope parameters): the head and the trained length."""
    names = ("hidden_size", "num_attention_heads", "head_dim", "max_position_embeddings")
    names += ("n_embd", "n_head", "n_positions")
    return {name: getattr(config, name) for name in names if getattr(config, name, None)}


@pytest.mark.parametrize("model_type", [t for f in RECORDS.values() for t in f.model_types])
def test_each_records_defaults_are_its_config_classs(model_type: str) -> None:
    # A record's defaults (base, partial factor, GPT-J's rotary_dim) against the defaults
    # of the family's config class in the pinned transformers: a default that moves in a
    # new release fails here. The tiny test configs always carry rope_theta; this does not.
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING[model_type]().get_text_config()
    family = next(f for f in RECORDS.values() if model_type in f.model_types)
    bare = {"model_type": model_type, **_sizes(config)}
    where = torch.tensor([0, 1, 1000, 123_456])
    for kind in family.layer_types or (None,):
        ours = rotary_from_config(bare, layer_type=kind)
        theirs = rotary_from_config(config, layer_type=kind)
        assert ours.extra_repr() == theirs.extra_repr(), kind
        for a, b in zip(
            ours.cos_sin(4, positions=where, dtype=torch.float64),
            theirs.cos_sin(4, positions=where, dtype=torch.float64),
            strict=True,
        ):
            assert torch.equal(a, b)


#: Families the generic rule covers, among them the newest (see benchmarks/hf_sweep.py).
#: Not GLM-4.5 (glm4_moe): its config class has no head_dim, and its defaults give a head
#: of 4096 / 96 = 42, half rotated, 21 features (an odd rotary dimension posenc refuses);
#: its published configs give head_dim 128, as the sweep's tiny config does.
RULE_FAMILIES = (
    "mixtral", "deepseek_v3", "deepseek_v4", "gpt_oss", "qwen3_next", "ernie4_5",
    "hunyuan_v1_dense", "exaone4", "smollm3", "olmo3", "minimax", "phimoe", "glm4",
    # interleaved repeated tables; complex freqs_cis; a head size per layer type (its
    # per_layer_config); a third of the head rotated
    "cohere2", "deepseek_v2", "gemma4_text", "mimo_v2_flash",
    # rotary in the sliding layers only; one table per layer type, half rotated; Gemma 3n;
    # multimodal RoPE whose sections interleave whatever mrope_interleaved says
    "flint", "zaya", "gemma3n_text", "hy_v4_vl", "cosmos3_edge",
)  # fmt: skip


def _contract_class(model_type: str) -> type[torch.nn.Module]:
    import importlib

    from transformers.models.auto.configuration_auto import model_type_to_module_name

    name = model_type_to_module_name(model_type)
    module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    found = [
        cls
        for cls_name, cls in vars(module).items()
        if cls_name.endswith("RotaryEmbedding")
        and "Vision" not in cls_name
        and getattr(cls, "__module__", "") == module.__name__
    ]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("model_type", RULE_FAMILIES)
def test_the_rule_verifies_each_family_at_its_config_classs_defaults(model_type: str) -> None:
    # The family's rotary module built from its config class's defaults (base, partial
    # factor, scaling, original length: DeepSeek-V3's YaRN with mscale, gpt-oss's YaRN)
    # is replaced by the generic rule, verified, with no warning.
    import warnings

    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING[model_type]().get_text_config()

    class Holder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = config
            self.rotary_emb = _contract_class(model_type)(config)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        holder = patch_rotary(Holder())
    assert isinstance(holder.rotary_emb, HFRotaryEmbedding)
    assert model_type not in {t for f in RECORDS.values() for t in f.model_types}
