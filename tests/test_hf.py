"""posenc.hf without transformers: configs as dicts and plain objects, the rotary_emb
contract, and the edges Hugging Face models hit (shared (1, L) position ids, seq_len as
Hugging Face passes it, GPT-2's wpe(position_ids), BLOOM's ALiBi, a loaded T5 table)."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import warnings
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from reference import rotary_reference

from posenc import (
    ALiBi,
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RotaryEmbedding,
    alibi_slopes,
    rope_frequencies,
)
from posenc.hf import (
    FAMILIES,
    RECORDS,
    HFRotaryEmbedding,
    RotaryMismatchWarning,
    exact_rotation,
    patch_rotary,
    rotary_from_config,
)

LLAMA = {
    "model_type": "llama",
    "hidden_size": 128,
    "num_attention_heads": 4,
    "max_position_embeddings": 8192,
    "rope_parameters": {"rope_type": "default", "rope_theta": 500_000.0},
}


def test_import_posenc_does_not_import_transformers() -> None:
    code = "import sys, posenc, posenc.hf; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_rotary_from_a_dict_and_from_a_plain_object() -> None:
    rope = rotary_from_config(LLAMA)
    assert (rope.head_dim, rope.base, rope.max_len, rope.layout) == (32, 500_000.0, 4096, "half")
    same = rotary_from_config(SimpleNamespace(**LLAMA))
    assert torch.equal(same.cos_sin(10)[0], rope.cos_sin(10)[0])
    # head_dim given wins over hidden_size // heads
    assert rotary_from_config({**LLAMA, "head_dim": 16}).head_dim == 16


def test_transformers_4_fields_rope_scaling_and_rope_theta() -> None:
    old = {k: v for k, v in LLAMA.items() if k != "rope_parameters"}
    old |= {"rope_theta": 10_000.0, "rope_scaling": {"type": "linear", "factor": 4.0}}
    rope = rotary_from_config(old)
    expect, _ = rope_frequencies(32, scaling={"rope_type": "linear", "factor": 4.0})
    assert torch.equal(rope._table_cache.ladder.freqs, expect)


def test_partial_rotary_factor_beside_the_rope_parameters() -> None:
    rope = rotary_from_config({**LLAMA, "partial_rotary_factor": 0.25})
    assert rope.rotary_dim == 8


def test_max_position_embeddings_reaches_dynamic_and_longrope() -> None:
    dynamic = {**LLAMA, "rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}
    rope = rotary_from_config(dynamic)
    scaling = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 8192}
    for n in (100, 8192, 20_000):
        got = rope._table_cache.ladder.frequencies(rope_positions(n), torch.device("cpu"))
        assert torch.equal(got, rope_frequencies(32, scaling=scaling, seq_len=n)[0])
    # Phi-3 keeps original_max_position_embeddings beside its rope_parameters.
    pairs = [1.0] * 16
    phi3 = {
        **LLAMA,
        "original_max_position_embeddings": 4096,
        "rope_parameters": {
            "rope_type": "longrope",
            "short_factor": pairs,
            "long_factor": [2.0] * 16,
        },
    }
    rope = rotary_from_config(phi3)
    assert rope.attention_factor == pytest.approx(
        (1 + torch.log(torch.tensor(2.0)).item() / torch.log(torch.tensor(4096.0)).item()) ** 0.5
    )


def rope_positions(n: int):  # type: ignore[no-untyped-def]
    from posenc.positions import resolve

    return resolve(n)


def test_per_layer_type_parameters() -> None:
    gemma3 = {
        "head_dim": 16,
        "max_position_embeddings": 1024,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        },
    }
    full = rotary_from_config(gemma3, layer_type="full_attention")
    assert full.base == 1e6
    assert full.extra_repr().endswith("rope_type='linear'")
    with pytest.raises(ValueError, match=re.escape("give layer_type=, one of them")):
        rotary_from_config(gemma3)
    with pytest.raises(ValueError, match="layer_type='chunked' has no rope_parameters"):
        rotary_from_config(gemma3, layer_type="chunked")
    with pytest.raises(ValueError, match="one set for every layer"):
        rotary_from_config(LLAMA, layer_type="full_attention")


def test_gptj_config_is_interleaved_and_partial() -> None:
    rope = rotary_from_config(
        {"model_type": "gptj", "n_embd": 256, "n_head": 4, "rotary_dim": 16, "n_positions": 2048}
    )
    assert (rope.head_dim, rope.rotary_dim, rope.layout) == (64, 16, "interleaved")


def test_gpt_neox_4x_keys_are_read() -> None:
    # transformers 4.x GPT-NeoX: rotary_pct and rotary_emb_base, no rope_parameters
    # (GPTNeoXConfig's conversion: rotary_emb_base is rope_theta, rotary_pct the share).
    neox = {"model_type": "gpt_neox", "hidden_size": 256, "num_attention_heads": 4,
            "rotary_pct": 0.5, "rotary_emb_base": 20_000.0}  # fmt: skip
    rope = rotary_from_config(neox)
    assert (rope.head_dim, rope.rotary_dim, rope.base) == (64, 32, 20_000.0)
    theta = 20_000.0 ** (-torch.arange(0, 32, 2, dtype=torch.float64) / 32)  # RoFormer
    torch.testing.assert_close(rope._table_cache.ladder.freqs, theta, rtol=1e-15, atol=0)
    # Defaults of its code: rotary_pct 0.25, base 10000.
    bare = rotary_from_config({k: v for k, v in neox.items() if not k.startswith("rotary")})
    assert (bare.rotary_dim, bare.base) == (16, 10_000.0)
    with pytest.raises(ValueError, match=r"rope_theta twice, as rope_theta=1000.0 and "):
        rotary_from_config({**neox, "rope_theta": 1000.0})


def test_gemma3_4x_keys_are_read_per_layer_type() -> None:
    # Gemma 3 in 4.x: rope_theta and rope_scaling for the global (full) layers,
    # rope_local_base_freq for the sliding ones (Gemma3TextConfig's conversion).
    old = {"model_type": "gemma3_text", "head_dim": 16, "rope_theta": 1e6,
           "rope_local_base_freq": 20_000.0,
           "rope_scaling": {"rope_type": "linear", "factor": 8.0}}  # fmt: skip
    full = rotary_from_config(old, layer_type="full_attention")
    local = rotary_from_config(old, layer_type="sliding_attention")
    assert (full.base, full.extra_repr().endswith("rope_type='linear'")) == (1e6, True)
    assert (local.base, "rope_type" in local.extra_repr()) == (20_000.0, False)
    # None given: its code's defaults, 1e6 global and 1e4 local.
    bare = {"model_type": "gemma3", "text_config": {"head_dim": 16}}
    assert rotary_from_config(bare, layer_type="full_attention").base == 1e6
    assert rotary_from_config(bare, layer_type="sliding_attention").base == 10_000.0
    with pytest.raises(ValueError, match=re.escape("give layer_type=, one of them")):
        rotary_from_config(old)


def test_a_4x_key_of_another_family_is_refused_by_name() -> None:
    for key, value in (("rotary_emb_base", 20_000.0), ("rope_local_base_freq", 1e4)):
        with pytest.raises(ValueError, match=rf"carries {key}=.*model_type='llama' reads no"):
            rotary_from_config({**LLAMA, key: value})
    no_type = {k: v for k, v in LLAMA.items() if k != "model_type"}
    with pytest.raises(ValueError, match=r"rotary_dim=16, .* of the model types gptj"):
        rotary_from_config({**no_type, "rotary_dim": 16})  # e.g. CodeGen's, interleaved
    gptj = {"model_type": "gptj", "n_embd": 256, "n_head": 4, "rotary_dim": 16}
    with pytest.raises(ValueError, match=r"rope_theta=500000.0.*'gptj' fixes its rope"):
        rotary_from_config({**gptj, "rope_theta": 500_000.0})
    with pytest.raises(ValueError, match=r"config.rotary_dim must be an int in \(0, head_dim"):
        rotary_from_config({**gptj, "rotary_dim": 128})
    # GPT-J's default rotary_dim, as GPTJConfig's: 64.
    assert rotary_from_config({**gptj, "rotary_dim": None}).rotary_dim == 64


def test_family_defaults_of_the_new_families() -> None:
    head = {"hidden_size": 256, "num_attention_heads": 4}
    assert rotary_from_config({"model_type": "cohere", **head}).base == 500_000.0
    stablelm = rotary_from_config({"model_type": "stablelm", **head})
    assert (stablelm.rotary_dim, stablelm.base) == (16, 10_000.0)
    half = {"model_type": "stablelm", **head, "partial_rotary_factor": 0.5}
    assert rotary_from_config(half).rotary_dim == 32
    for name in ("olmo2", "granite", "starcoder2"):
        rope = rotary_from_config({"model_type": name, **head})
        assert (rope.rotary_dim, rope.base, rope.layout) == (64, 10_000.0, "half")
    assert rotary_from_config({"model_type": "cohere", **head}).layout == "interleaved"
    qwen = {"model_type": "qwen2_vl", "hidden_size": 512, "num_attention_heads": 4}
    assert rotary_from_config(qwen).base == 1e6  # its code's default, and its section


def test_records_and_families() -> None:
    # Every model type belongs to one record; FAMILIES lists them all, records in order.
    types = [t for family in RECORDS.values() for t in family.model_types]
    assert len(set(types)) == len(types)
    assert tuple(types) == FAMILIES
    assert {"cohere", "olmo2", "granite", "stablelm", "starcoder2"} <= set(FAMILIES)
    for name, family in RECORDS.items():
        assert family.name == name == family.model_types[0]
        assert all(cls.endswith("RotaryEmbedding") for cls in family.rotary_classes)
        assert family.form in ("widened", "repeated", "gptj", "complex")
        # the form fits the layout: widened tables are rotate-half's, the others pairs'
        assert (family.form == "widened") == (family.layout == "half")


def test_config_errors() -> None:
    with pytest.raises(ValueError, match="the config gives no head size"):
        rotary_from_config({"rope_parameters": {"rope_type": "default"}})
    with pytest.raises(TypeError, match=r"config\.rope_parameters must be a dict"):
        rotary_from_config({**LLAMA, "rope_parameters": [1]})
    qwen2_vl = {**LLAMA, "rope_parameters": {"rope_type": "default", "mrope_section": [2, 1, 1]}}
    with pytest.raises(ValueError, match=r"mrope_section.*summing to the rotated pairs, 16"):
        rotary_from_config(qwen2_vl)


# Qwen2-VL's text model: head 8 = 4 pairs, sections [2, 1, 1] of t, h, w.
QWEN2_VL_ROPE = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 1, 1]}
QWEN2_VL_TEXT = {
    "model_type": "qwen2_vl_text",
    "hidden_size": 32,
    "num_attention_heads": 4,
    "max_position_embeddings": 1024,
    "rope_parameters": QWEN2_VL_ROPE,
}


def _mrope_angles(rope: RotaryEmbedding, t: int, h: int, w: int, axes: list[int]) -> torch.Tensor:
    """The float64 angle of each pair at one token whose axes are t, h, w."""
    freqs, _ = rope_frequencies(rope.head_dim, base=rope.base)
    return torch.tensor([(t, h, w)[a] for a in axes], dtype=torch.float64) * freqs


def test_multimodal_sections_of_qwen_vl_configs() -> None:
    where = torch.tensor([5, 70, 900]).view(3, 1, 1)  # one token: t, h, w
    for config in (
        {"model_type": "qwen2_vl", "text_config": QWEN2_VL_TEXT},
        SimpleNamespace(model_type="qwen2_vl", text_config=SimpleNamespace(**QWEN2_VL_TEXT)),
        QWEN2_VL_TEXT,
    ):
        rope = rotary_from_config(config)
        assert (rope.head_dim, rope.base, rope.max_len, rope.n_axes) == (8, 1e6, 1024, 3)
        cos, _ = rope.cos_sin(1, positions=where, batch=1, dtype=torch.float64)
        # chunked: pairs 0, 1 turn with t, pair 2 with h, pair 3 with w
        assert torch.equal(cos[0, 0], torch.cos(_mrope_angles(rope, 5, 70, 900, [0, 0, 1, 2])))
    # Qwen3-VL's text rotary interleaves, with the flag or without it: pair 3 turns with t.
    for model_type in ("qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe"):
        rope = rotary_from_config({**QWEN2_VL_TEXT, "model_type": model_type})
        assert rope.extra_repr().endswith("mrope_section=[2, 1, 1], mrope_interleaved=True")
        cos, _ = rope.cos_sin(1, positions=where, batch=1, dtype=torch.float64)
        assert torch.equal(cos[0, 0], torch.cos(_mrope_angles(rope, 5, 70, 900, [0, 1, 2, 0])))
    # ...and Qwen2-VL's and Qwen2.5-VL's chunk, whatever the flag says.
    flagged = {**QWEN2_VL_ROPE, "mrope_interleaved": True}
    for model_type in ("qwen2_vl", "qwen2_5_vl_text"):
        rope = rotary_from_config(
            {**QWEN2_VL_TEXT, "model_type": model_type, "rope_parameters": flagged}
        )
        assert "interleaved" not in rope.extra_repr()


def test_multimodal_configs_in_the_4x_form_and_defaults() -> None:
    # A flat Hub config.json of transformers 4.x: rope_scaling of type "mrope".
    flat = {
        "model_type": "qwen2_vl",
        "hidden_size": 32,
        "num_attention_heads": 4,
        "rope_theta": 1e6,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]},
    }
    rope = rotary_from_config(flat)
    assert rope.extra_repr() == "head_dim=8, max_len=4096, base=1e+06, mrope_section=[2, 1, 1]"
    # The top-level fields fill in what a dict's text_config lacks.
    split = {**flat, "text_config": {"hidden_size": 32}}
    del split["hidden_size"]
    assert rotary_from_config(split).extra_repr() == rope.extra_repr()
    # No section: the one the model's code falls back on.
    head_128 = {"model_type": "qwen2_5_vl", "hidden_size": 512, "num_attention_heads": 4}
    assert "mrope_section=[16, 24, 24]" in rotary_from_config(head_128).extra_repr()
    qwen3 = rotary_from_config({**head_128, "model_type": "qwen3_vl_text"})
    assert "mrope_section=[24, 20, 20], mrope_interleaved=True" in qwen3.extra_repr()
    # Other models: sections as given, none when none.
    assert rotary_from_config(LLAMA).n_axes == 1
    with pytest.raises(ValueError, match=r"mrope_section.*summing to the rotated pairs, 4"):
        rotary_from_config({**flat, "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 1]}})


def test_multimodal_rotary_emb_contract() -> None:
    rope = rotary_from_config(QWEN2_VL_TEXT)
    emb = HFRotaryEmbedding(rope)
    x = torch.zeros(1, dtype=torch.bfloat16)
    positions = torch.randint(0, 2_000_000, (3, 3, 5))  # (3, B, L) with B = 3
    cos, sin = emb(x, positions)
    assert cos.shape == sin.shape == (3, 5, 8)
    assert cos.dtype == torch.bfloat16
    expect, expect_sin = rope.cos_sin(5, positions=positions, batch=3, dtype=torch.bfloat16)
    assert torch.equal(cos, torch.cat((expect, expect), -1))  # widened: both halves
    assert torch.equal(sin, torch.cat((expect_sin, expect_sin), -1))
    # Text only: (B, L) and (1, B, L) are one stream on every axis, even for B = 3.
    text = positions[0]
    assert torch.equal(emb(x, text)[0], emb(x, text.expand(3, 3, 5))[0])
    assert torch.equal(emb(x, text[None])[0], emb(x, text.expand(3, 3, 5))[0])
    assert not torch.equal(cos, emb(x, text)[0])
    for bad in (torch.zeros(2, 3, 5, dtype=torch.long), torch.zeros(5, dtype=torch.long)):
        with pytest.raises(ValueError, match=r"must be a \(3, B, L\) integer tensor .* shape"):
            emb(x, bad)
    # A one-axis module still takes 2-D ids only.
    with pytest.raises(ValueError, match=r"must be a \(B, L\) or \(1, L\) integer tensor"):
        HFRotaryEmbedding(rotary_from_config(LLAMA))(x, positions)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rotary_emb_contract(dtype: torch.dtype) -> None:
    rope = rotary_from_config(
        {
            **LLAMA,
            "rope_parameters": {
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 2048,
                "rope_theta": 500_000.0,
            },
        }
    )
    emb = HFRotaryEmbedding(rope)
    x = torch.zeros(2, 5, 128, dtype=dtype)
    shared = torch.tensor([[0, 1, 2, 1_000_000, 2**40]])
    cos, sin = emb(x, shared)
    assert cos.shape == sin.shape == (1, 5, 32)
    assert cos.dtype == dtype
    # one value per feature, the attention factor applied, rounded once from float64
    freqs, factor = rope_frequencies(32, base=500_000.0, scaling=rope.scaling)
    angles = shared[0, :, None].double() * freqs
    assert torch.equal(cos[0, :, :16], (torch.cos(angles) * factor).to(dtype))
    assert torch.equal(sin[0, :, 16:], (torch.sin(angles) * factor).to(dtype))
    per_row = torch.stack((shared[0], shared[0].flip(0)))
    cos2, _ = emb(x, per_row)
    assert cos2.shape == (2, 5, 32)
    assert torch.equal(cos2[1], cos[0].flip(0))


def test_rotary_emb_rotates_as_posenc_when_used_as_hugging_face_does() -> None:
    rope = RotaryEmbedding(16)
    emb = HFRotaryEmbedding(rope)
    q = torch.randn(2, 3, 7, 16)
    ids = torch.arange(7)[None] + 100
    cos, sin = emb(q, ids)
    half = lambda t: torch.cat((-t[..., 8:], t[..., :8]), -1)  # noqa: E731
    theirs = q * cos[:, None] + half(q) * sin[:, None]  # Hugging Face's formula
    expect = rotary_reference(q, ids[:, None, :], rope._table_cache.ladder.freqs.numpy(), "half")
    torch.testing.assert_close(theirs, torch.from_numpy(expect).float(), rtol=0, atol=1e-6)


def test_gptj_form_and_layer_types() -> None:
    rope = RotaryEmbedding(16, layout="interleaved")
    sin, cos = HFRotaryEmbedding(rope, form="gptj")(torch.zeros(1), torch.arange(4)[None])
    assert sin.shape == (1, 4, 8)
    assert torch.equal(cos, rope.cos_sin(4)[0][None])
    two = HFRotaryEmbedding({"a": RotaryEmbedding(8), "b": RotaryEmbedding(8, base=100.0)})
    assert not torch.equal(
        two(torch.zeros(1), torch.arange(3)[None], "a")[0],
        two(torch.zeros(1), torch.arange(3)[None], "b")[0],
    )
    with pytest.raises(ValueError, match=r"layer_type=None: this module holds .*'a', 'b'"):
        two(torch.zeros(1), torch.arange(3)[None])
    with pytest.raises(ValueError, match="position_ids must be a"):
        two(torch.zeros(1), torch.arange(3), "a")
    with pytest.raises(ValueError, match="form must be"):
        HFRotaryEmbedding(rope, form="neox")  # type: ignore[arg-type]


def test_repeated_form_and_table_dtype() -> None:
    # Cohere's module: each pair's value at features 2k and 2k + 1 (repeat_interleave),
    # for its rotation of interleaved pairs; OLMo 2's: float32 tables for any input.
    rope = RotaryEmbedding(8, layout="interleaved", base=500_000.0)
    emb = HFRotaryEmbedding(rope, form="repeated")
    ids = torch.tensor([[0, 7, 1_000_000]])
    cos, sin = emb(torch.zeros(1, dtype=torch.bfloat16), ids)
    freqs, _ = rope_frequencies(8, base=500_000.0)
    angles = ids[0, :, None].double() * freqs
    assert cos.shape == (1, 3, 8)
    assert torch.equal(cos[0, :, 0::2], torch.cos(angles).bfloat16())
    assert torch.equal(cos[0, :, 1::2], torch.cos(angles).bfloat16())
    assert torch.equal(sin[0, :, 1::2], torch.sin(angles).bfloat16())
    q = torch.randn(1, 2, 3, 8, dtype=torch.float64)
    half = lambda t: torch.stack((-t[..., 1::2], t[..., ::2]), -1).flatten(-2)  # noqa: E731
    cos64, sin64 = emb(q, ids)
    theirs = q * cos64[:, None] + half(q) * sin64[:, None]  # Cohere's formula
    expect = rotary_reference(
        q, ids[:, None, :], rope._table_cache.ladder.freqs.numpy(), "interleaved"
    )
    torch.testing.assert_close(theirs, torch.from_numpy(expect), rtol=0, atol=1e-12)
    fixed = HFRotaryEmbedding(RotaryEmbedding(8), table_dtype=torch.float32)
    assert fixed(torch.zeros(1, dtype=torch.bfloat16), ids)[0].dtype == torch.float32
    assert repr(fixed).splitlines()[1].strip() == "form='widened', table_dtype=torch.float32"
    with pytest.raises(TypeError, match=r"table_dtype must be a floating torch\.dtype"):
        HFRotaryEmbedding(rope, table_dtype=torch.int64)


def test_unsupported_models_are_named() -> None:
    class BertModel(torch.nn.Module):
        config = SimpleNamespace(model_type="bert")

    class Glm4vForConditionalGeneration(torch.nn.Module):
        config = SimpleNamespace(model_type="glm4v")

    with pytest.raises(TypeError, match=r"patch_rotary does not support BertModel \("):
        patch_rotary(BertModel())
    with pytest.raises(
        TypeError,
        match=r"Glm4vForConditionalGeneration \(model_type='glm4v'\): it has no rotary module "
        r"of transformers' standard contract .*; the records are the model "
        r"types llama, .*, qwen2_vl, qwen2_vl_text, .*, qwen3_5_moe_text$",
    ):
        patch_rotary(Glm4vForConditionalGeneration())

    class LlamaModel(torch.nn.Module):
        config = SimpleNamespace(model_type="llama")

    with pytest.raises(TypeError, match="found no rotary module in LlamaModel"):
        patch_rotary(LlamaModel())
    with pytest.raises(TypeError, match="exact_rotation needs a model patched"):
        exact_rotation(LlamaModel())


# -- The edges ---------------------------------------------------------------------------


def test_cos_sin_takes_shared_position_ids_without_batch() -> None:
    rope = RotaryEmbedding(8)
    ids = torch.tensor([[3, 5, 9]])
    assert torch.equal(rope.cos_sin(3, positions=ids)[0], rope.cos_sin(3, positions=ids[0])[0])
    with pytest.raises(
        ValueError,
        match=r"no batch to match them \(an unbatched input, or an "
        r"accessor such as cos_sin called without batch=\)",
    ):
        rope.cos_sin(3, positions=ids.expand(2, 3))


def test_cos_sin_in_the_module_dtype() -> None:
    rope = RotaryEmbedding(8).bfloat16()
    assert rope.cos_sin(3)[0].dtype == torch.bfloat16


def test_rope_frequencies_seq_len_as_hugging_face_passes_it() -> None:
    dynamic = {"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": 128}
    as_int = rope_frequencies(16, scaling=dynamic, seq_len=300)[0]
    as_tensor = rope_frequencies(16, scaling=dynamic, seq_len=torch.tensor(300))[0]
    assert torch.equal(as_tensor, as_int)
    trained = rope_frequencies(16, scaling=dynamic)[0]
    assert torch.equal(rope_frequencies(16, scaling=dynamic, seq_len=0)[0], trained)
    assert not torch.equal(as_int, trained)
    with pytest.raises(TypeError, match="seq_len must be an int or a 0-d integer tensor"):
        rope_frequencies(16, scaling=dynamic, seq_len=torch.tensor(3.0))
    with pytest.raises(ValueError, match=r"0-d integer tensor, got shape \(2,\)"):
        rope_frequencies(16, scaling=dynamic, seq_len=torch.tensor([3, 4]))


def test_learned_rows_for_gpt2_position_ids() -> None:
    learned = LearnedPositionalEmbedding(8, 4)
    ids = torch.tensor([[0, 1, 2], [5, 6, 7]])
    rows = learned(ids)
    assert torch.equal(rows, learned.weight[ids])
    assert rows.requires_grad
    assert torch.equal(learned.rows(ids), rows)
    with pytest.raises(IndexError, match="position 8 is outside the learned table of max_len=8"):
        learned(ids + 1)
    with pytest.raises(TypeError, match="positions must be an integer tensor"):
        learned.rows(ids.float())


def test_alibi_in_bloom_form() -> None:
    alibi = ALiBi(4)
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    bias = alibi.bloom(mask, dtype=torch.float64)
    assert bias.shape == (8, 1, 5)
    keys = (mask.cumsum(-1) - 1) * mask
    slopes = alibi_slopes(4)
    blooms = (slopes[:, None] * keys[:, None, :]).reshape(8, 1, 5)  # BLOOM's m·j
    last = keys[:, -1].repeat_interleave(4)[:, None, None]
    query_term = slopes.repeat(2)[:, None, None] * last
    assert torch.equal(bias, blooms - query_term)  # the same, less a constant per row
    whole = alibi.bloom(mask, query_length=5)
    assert whole.shape == (8, 5, 5)
    assert torch.equal(whole[:, -1:], alibi.bloom(mask))
    with pytest.raises(ValueError, match="query_length=6 exceeds the mask's length L_k=5"):
        alibi.bloom(mask, query_length=6)
    with pytest.raises(ValueError, match=r"must have shape \(B, L_k\)"):
        alibi.bloom(mask[0])


def test_loaded_t5_table_keeps_the_module_dtype() -> None:
    checkpoint = {"relative_attention_bias.weight": torch.randn(32, 4, dtype=torch.float64)}
    kept = RelativePositionBias(4)
    kept.load_state_dict(checkpoint)
    assert kept.relative_attention_bias.weight.dtype == torch.float32
    assert kept(3).dtype == torch.float32
    cast = RelativePositionBias(4).double()
    cast.load_state_dict(checkpoint)
    assert cast(3).dtype == torch.float64
    assert torch.equal(
        cast.relative_attention_bias.weight, checkpoint["relative_attention_bias.weight"]
    )
    assigned = RelativePositionBias(4)
    assigned.load_state_dict(checkpoint, assign=True)
    assert assigned(3).dtype == torch.float64


def test_gptj_tensors_rotate_with_broadcast_tables() -> None:
    from posenc import apply_rotary

    rope = RotaryEmbedding(8, layout="interleaved")
    x = torch.randn(2, 6, 3, 8)  # (B, L, H, D)
    ids = torch.arange(6).expand(2, 6) + 1000
    cos, sin = rope.cos_sin(6, positions=ids, batch=2)
    got = apply_rotary(x, cos[:, :, None], sin[:, :, None], layout="interleaved")
    assert torch.equal(got, rope(x.transpose(1, 2), positions=ids).transpose(1, 2))


# -- Llama 4: interleaved pairs as complex numbers, llama3 with equal factors ------------

LLAMA4_ROPE = {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
               "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}  # fmt: skip


def test_llama4_config_and_complex_tables() -> None:
    # Llama 4's config.json: model_type "llama4", the text model's fields in text_config,
    # 4.x form (rope_scaling beside rope_theta); base 5e5 where none is given.
    hub = {"model_type": "llama4", "text_config": {
        "model_type": "llama4_text", "hidden_size": 5120, "num_attention_heads": 40,
        "head_dim": 128, "max_position_embeddings": 10_485_760, "rope_theta": 500_000.0,
        "rope_scaling": LLAMA4_ROPE}}  # fmt: skip
    rope = rotary_from_config(hub)
    assert (rope.head_dim, rope.base, rope.layout) == (128, 500_000.0, "interleaved")
    assert rope.extra_repr().endswith("rope_type='llama3'")
    bare = {"model_type": "llama4_text", "hidden_size": 64, "num_attention_heads": 4}
    assert rotary_from_config(bare).base == 500_000.0
    family = RECORDS["llama4"]
    assert (family.form, family.rotation.name, family.table_dtype) == (
        "complex",
        "apply_rotary_emb",
        torch.float32,
    )
    # The complex form rotates as Llama 4's apply_rotary_emb does with it: the pairs
    # (2k, 2k + 1) read as complex numbers, times cos + i sin (Meta's llama-models
    # reference, apply_rotary_emb; transformers' modeling_llama4).
    emb = HFRotaryEmbedding(RotaryEmbedding(16, base=500_000.0, layout="interleaved"),
                            form="complex")  # fmt: skip
    x = torch.randn(2, 5, 3, 16, dtype=torch.float64)  # (B, L, H, D), as Llama 4 passes it
    positions = torch.tensor([[0, 1, 2, 3, 10**6], [7, 8, 9, 10, 11]])
    freqs_cis = emb(x, positions)
    assert isinstance(freqs_cis, torch.Tensor)
    assert freqs_cis.dtype == torch.complex128
    assert freqs_cis.shape == (2, 5, 8)
    pairs = torch.view_as_complex(x.reshape(2, 5, 3, 8, 2))
    by_formula = torch.view_as_real(pairs * freqs_cis[:, :, None]).flatten(3)
    ours, _ = RECORDS["llama4"].rotation.exact(x, x, freqs_cis)
    torch.testing.assert_close(ours, by_formula, rtol=0, atol=1e-12)
    rotated = emb.rotary(x.transpose(1, 2), positions=positions).transpose(1, 2)
    torch.testing.assert_close(rotated, by_formula, rtol=0, atol=1e-12)
    f32 = HFRotaryEmbedding(emb.rotary, form="complex", table_dtype=torch.float32)
    assert f32(x.bfloat16(), positions).dtype == torch.complex64  # as Llama 4's module


# -- Integral numbers in configs ---------------------------------------------------------


def test_integral_config_fields_numpy_and_0d_tensors_are_ints() -> None:
    numpy_llama = {**LLAMA, "hidden_size": np.int64(128), "num_attention_heads": np.int32(4),
                   "max_position_embeddings": np.int64(8192)}  # fmt: skip
    assert rotary_from_config(numpy_llama).extra_repr() == rotary_from_config(LLAMA).extra_repr()
    assert rotary_from_config({**LLAMA, "head_dim": np.int64(64)}).head_dim == 64
    assert rotary_from_config({**LLAMA, "head_dim": torch.tensor(16)}).head_dim == 16
    gptj = {"model_type": "gptj", "n_embd": np.int64(256), "n_head": np.int64(4)}
    assert rotary_from_config({**gptj, "rotary_dim": np.uint8(16)}).rotary_dim == 16
    llama3 = {**LLAMA, "rope_parameters": {**LLAMA4_ROPE, "rope_theta": 500_000.0}}
    trained = {**llama3, "original_max_position_embeddings": np.int64(4096)}
    assert torch.equal(
        rotary_from_config(trained)._table_cache.ladder.freqs,
        rotary_from_config(
            {**llama3, "original_max_position_embeddings": 4096}
        )._table_cache.ladder.freqs,
    )
    refused = [
        ("head_dim", True, "config.head_dim must be an int, got bool True"),
        ("head_dim", 64.0, "config.head_dim must be an int, got float 64.0"),
        ("hidden_size", np.float64(128), "config.hidden_size must be an int, got float64"),
        ("num_attention_heads", np.bool_(True), "config.num_attention_heads must be an int"),
        ("max_position_embeddings", "8192", "config.max_position_embeddings must be an int"),
        ("original_max_position_embeddings", 8192.0, "config.original_max_position_embeddings"),
    ]
    for key, value, message in refused:
        with pytest.raises(TypeError, match=re.escape(message)):
            rotary_from_config({**llama3, key: value})
    with pytest.raises(TypeError, match=re.escape("config.rotary_dim must be an int, got float")):
        rotary_from_config({**gptj, "rotary_dim": 16.0})


# -- patch_rotary and exact_rotation on a stand-in model ---------------------------------
# A model of Llama's family as patch_rotary sees one: a rotary module whose class is
# named LlamaRotaryEmbedding in a modeling module under transformers.models, which
# holds an apply_rotary_pos_emb.

_MODELING = "transformers.models.standin.modeling_standin"


def _hf_rotation(q, k, cos, sin, unsqueeze_dim=1):  # type: ignore[no-untyped-def]
    return q, k


class _StandInRotary(torch.nn.Module):
    """Llama's rotary as transformers computes it (float32 phases), for LLAMA's config."""

    def __init__(self, config: object = None) -> None:
        super().__init__()
        self.config = config
        inv_freq = 1.0 / 500_000.0 ** (torch.arange(0, 32, 2, dtype=torch.float) / 32)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, position_ids):  # type: ignore[no-untyped-def]
        freqs = position_ids[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class _StandInModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(**LLAMA)
        self.proj = torch.nn.Linear(4, 4)
        self.rotary_emb = _StandInRotary(self.config)


_StandInRotary.__name__ = "LlamaRotaryEmbedding"
_StandInRotary.__module__ = _MODELING
_StandInModel.__module__ = _MODELING


@pytest.fixture
def modeling(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    namespace = ModuleType(_MODELING)
    namespace.apply_rotary_pos_emb = _hf_rotation  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, _MODELING, namespace)
    return namespace


def _module(model: torch.nn.Module) -> HFRotaryEmbedding:
    module = model.rotary_emb
    assert isinstance(module, HFRotaryEmbedding)
    return module


def test_exact_rotation_handles_undone_in_any_order(modeling: ModuleType) -> None:
    exact = RECORDS["llama"].rotation.exact
    for order in itertools.permutations(range(3)):
        models = [patch_rotary(_StandInModel()) for _ in range(3)]
        handles = [exact_rotation(model) for model in models]
        assert modeling.apply_rotary_pos_emb is exact
        for step, i in enumerate(order):
            handles[i].undo()
            last = step == len(order) - 1
            assert modeling.apply_rotary_pos_emb is (_hf_rotation if last else exact)
            assert [_module(m).exact for m in models] == [h.active for h in handles]
    # Started and undone interleaved: each handle does not save what another installed.
    a, b = patch_rotary(_StandInModel()), patch_rotary(_StandInModel())
    first = exact_rotation(a)
    second = exact_rotation(b)
    first.undo()
    third = exact_rotation(a)
    second.undo()
    assert modeling.apply_rotary_pos_emb is exact
    third.undo()
    third.undo()  # twice: harmless, and no other handle's hold is released
    assert modeling.apply_rotary_pos_emb is _hf_rotation
    # A function installed over posenc's meanwhile is left as it is.
    handle = exact_rotation(a)

    def other(q, k, cos, sin, unsqueeze_dim=1):  # type: ignore[no-untyped-def]
        return q, k

    modeling.apply_rotary_pos_emb = other  # type: ignore[attr-defined]
    handle.undo()
    assert modeling.apply_rotary_pos_emb is other


def test_exact_rotation_nested_on_one_model(modeling: ModuleType) -> None:
    model = patch_rotary(_StandInModel())
    module = _module(model)
    x, positions = torch.zeros(1, 3, 32, dtype=torch.bfloat16), torch.tensor([[0, 1, 2]])
    with exact_rotation(model) as outer:
        with exact_rotation(model) as inner:
            assert module.exact
        assert not inner.active
        assert outer.active
        assert module.exact  # the outer block's float32 tables still
        cos, _ = module(x, positions)
        assert cos.dtype == torch.float32
        assert modeling.apply_rotary_pos_emb is RECORDS["llama"].rotation.exact
    assert not module.exact
    assert module(x, positions)[0].dtype == torch.bfloat16
    assert modeling.apply_rotary_pos_emb is _hf_rotation


def test_patch_rotary_new_modules_take_the_mode_and_dtype(modeling: ModuleType) -> None:
    for training in (False, True):
        model = _StandInModel().train(training)
        assert _module(patch_rotary(model)).training is training
    model = patch_rotary(_StandInModel().double())
    module = _module(model)
    assert module.rotary.cos_sin(3)[0].dtype == torch.float64
    assert module.rotary.cos_sin(3)[0].device == model.proj.weight.device
    half = patch_rotary(_StandInModel().to(torch.bfloat16))
    assert _module(half).rotary.cos_sin(3)[0].dtype == torch.bfloat16


# One position takes rows of the tables as views when the form copies them anyway
# (RotaryEmbedding._held_rows, views=True): what a caller gets is still its own.
@pytest.mark.parametrize("form", ["widened", "repeated", "gptj", "complex", "halved"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_position_tables_are_new_tensors_equal_to_a_gathered_batch(
    form: str, dtype: torch.dtype
) -> None:
    table_dtype = torch.float32 if form == "complex" else None
    hf = HFRotaryEmbedding(RotaryEmbedding(16, max_len=64), form=form, table_dtype=table_dtype)
    x = torch.zeros(1, 1, 16, dtype=dtype)
    both = hf(x, torch.tensor([[3, 40]]))  # gathered: index_select
    one = hf(x, torch.tensor([[40]]))
    parts = (one,) if form == "complex" else one
    wanted = (both,) if form == "complex" else both
    for part, whole in zip(parts, wanted, strict=True):
        assert torch.equal(part, whole[:, 1:])
        part.zero_()  # the caller's tensor: the tables do not change
    again = hf(x, torch.tensor([[40]]))
    for part, whole in zip((again,) if form == "complex" else again, wanted, strict=True):
        assert torch.equal(part, whole[:, 1:])


def test_exact_rotation_hold_never_travels_in_a_copy_or_a_pickle(modeling: ModuleType) -> None:
    import copy
    import io
    import pickle

    model = patch_rotary(_StandInModel())
    x, positions = torch.zeros(1, 3, 32, dtype=torch.bfloat16), torch.tensor([[0, 1, 2]])

    def saved(module: torch.nn.Module) -> torch.nn.Module:
        buffer = io.BytesIO()
        torch.save(module, buffer)
        buffer.seek(0)
        loaded: torch.nn.Module = torch.load(buffer, weights_only=False)
        return loaded

    with exact_rotation(model):
        copies = [
            _module(copy.deepcopy(model)),
            copy.deepcopy(_module(model)),
            copy.copy(_module(model)),
            pickle.loads(pickle.dumps(_module(model))),
            saved(_module(model)),
        ]
        assert _module(model).exact  # the original keeps the block's hold
        assert _module(model)(x, positions)[0].dtype == torch.float32
        for other in copies:
            assert not other.exact
            cos, sin = other(x, positions)
            assert (cos.dtype, sin.dtype) == (torch.bfloat16, torch.bfloat16)
    assert not _module(model).exact
    for other in copies:  # after the block: as any module outside one
        assert torch.equal(other(x, positions)[0], _module(model)(x, positions)[0])
        with exact_rotation(model):
            pass  # a later block on the original leaves the copies as they are
        assert not other.exact


# -- hf reads the rope records, never a list of its own ----------------------------------


@pytest.mark.parametrize("required", [True, False])
def test_a_new_rope_type_that_reads_the_trained_length_gets_it(
    monkeypatch: pytest.MonkeyPatch, required: bool
) -> None:
    # A type added to the records that reads original_max_position_embeddings (beside
    # the rope parameters in a config, as Phi-3 keeps it) gets it copied in: hf.py reads
    # the record, never a list of the types that read it.
    import dataclasses

    from posenc import rope_config

    original = (
        rope_config.Key(rope_config.position_count)
        if required
        else rope_config.Key(rope_config.position_count, 1000)  # silently 1000 if lost
    )
    record = dataclasses.replace(
        rope_config.RECORDS["linear"],
        name="stretched",
        keys={
            "factor": rope_config.Key(rope_config.number),
            "original_max_position_embeddings": original,
        },
        example={"rope_type": "stretched", "factor": 2.0},
        hf_name=None,
    )
    monkeypatch.setitem(rope_config.RECORDS, "stretched", record)
    monkeypatch.setattr(rope_config, "ROPE_TYPES", (*rope_config.ROPE_TYPES, "stretched"))
    config = {
        **LLAMA,
        "original_max_position_embeddings": 48,
        "rope_parameters": {"rope_type": "stretched", "factor": 2.0},
    }
    assert rotary_from_config(config).scaling["original_max_position_embeddings"] == 48
    # beside the parameters it wins over theirs, as for the types that read it today
    inside = {
        **config,
        "rope_parameters": {**config["rope_parameters"], "original_max_position_embeddings": 7},
    }
    assert rotary_from_config(inside).scaling["original_max_position_embeddings"] == 48
    # a type whose record does not read it does not get it
    linear = {**config, "rope_parameters": {"rope_type": "linear", "factor": 2.0}}
    assert "original_max_position_embeddings" not in rotary_from_config(linear).scaling


def test_each_table_form_says_whether_it_copies_the_rows() -> None:
    # HFRotaryEmbedding serves rows that may be views of its tables to the forms that
    # copy them: the form record's claim is what its function does.
    from posenc.hf import _FORMS, _STANDARD_ROTATIONS

    cos, sin = torch.rand(2, 3, 4), torch.rand(2, 3, 4)
    used = {family.form for family in RECORDS.values()} | set(_STANDARD_ROTATIONS)
    assert set(_FORMS) == used
    for name, form in _FORMS.items():
        assert form.name == name
        out = form(cos, sin)
        tensors = out if isinstance(out, tuple) else (out,)
        shares = any(
            t.untyped_storage().data_ptr() in {cos.data_ptr(), sin.data_ptr()} for t in tensors
        )
        assert shares is not form.copies, name


# -- The generic rule: transformers' standard rotary contract, verified before replacing --

_GENERIC = "transformers.models.standin_generic.modeling_standin_generic"
_GENERIC_CONFIG = {
    "model_type": "standin_generic",
    "hidden_size": 128,
    "num_attention_heads": 4,
    "max_position_embeddings": 8192,
    "rope_parameters": {"rope_type": "default", "rope_theta": 20_000.0},
}


class _ContractRotary(torch.nn.Module):
    """A rotary module of the standard contract: float32 phases, as transformers' modules.

    Built from its config only, as transformers' are (patch_rotary verifies against one
    built again so). Subclasses compute what the config does not say, or say it in
    another form.
    """

    base: float | None = None  # the config's
    per_pair = False  # one value per pair (gpt-oss's form) instead of widened tables

    def __init__(self, config: object) -> None:
        super().__init__()
        self.config = config
        theta = self.base or config.rope_parameters["rope_theta"]  # type: ignore[attr-defined]
        inv_freq = 1.0 / theta ** (torch.arange(0, 32, 2, dtype=torch.float) / 32)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    def forward(self, x, position_ids):  # type: ignore[no-untyped-def]
        freqs = position_ids[..., None].float() * self.inv_freq
        emb = freqs if self.per_pair else torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class _PerPairRotary(_ContractRotary):
    per_pair = True


class _WrongBaseRotary(_ContractRotary):
    base = 10_000.0  # the config says 20000


class _ContractModel(torch.nn.Module):
    def __init__(self, *kinds: type[_ContractRotary]) -> None:
        super().__init__()
        self.config = SimpleNamespace(**_GENERIC_CONFIG)
        self.proj = torch.nn.Linear(4, 4)
        self.rotaries = torch.nn.ModuleList(
            kind(self.config) for kind in kinds or (_ContractRotary,)
        )


for _cls in (_ContractRotary, _PerPairRotary, _WrongBaseRotary, _ContractModel):
    _cls.__module__ = _GENERIC


def _rotate_half(q, k, cos, sin, unsqueeze_dim=1):  # type: ignore[no-untyped-def]
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)

    def turn(x):  # type: ignore[no-untyped-def]
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    return q * cos + turn(q) * sin, k * cos + turn(k) * sin


@pytest.fixture
def generic(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    namespace = ModuleType(_GENERIC)
    namespace.apply_rotary_pos_emb = _rotate_half  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, _GENERIC, namespace)
    return namespace


def test_the_generic_rule_replaces_a_module_of_the_standard_contract(generic: ModuleType) -> None:
    assert "standin_generic" not in FAMILIES
    model = patch_rotary(_ContractModel())
    module = model.rotaries[0]
    assert isinstance(module, HFRotaryEmbedding)
    assert module.form == "widened"
    assert module.rotary.base == 20_000.0
    positions = torch.tensor([[0, 5, 4095, 10**6]])
    cos, sin = module(torch.zeros(1), positions)
    exact = rotary_from_config(_GENERIC_CONFIG).cos_sin(4, positions=positions, batch=1)
    assert torch.equal(cos, torch.cat((exact[0], exact[0]), -1))
    assert torch.equal(sin, torch.cat((exact[1], exact[1]), -1))
    # one value per pair (gpt-oss's tables): the form is read from the module
    halved = patch_rotary(_ContractModel(_PerPairRotary)).rotaries[0]
    assert isinstance(halved, HFRotaryEmbedding)
    assert halved.form == "halved"
    assert torch.equal(halved(torch.zeros(1), positions)[0], exact[0])


def test_a_module_that_disagrees_is_left_and_named(generic: ModuleType) -> None:
    # the second module computes base 10000 where its config says 20000
    with pytest.warns(
        RotaryMismatchWarning,
        match=r"patch_rotary left rotaries\.1 \(_WrongBaseRotary\): its tables differ from "
        r"posenc's by [\d.]+ at positions below 256; the bound is 0\.0001",
    ):
        model = patch_rotary(_ContractModel(_ContractRotary, _WrongBaseRotary))
    assert isinstance(model.rotaries[0], HFRotaryEmbedding)
    assert type(model.rotaries[1]) is _WrongBaseRotary
    # nothing agrees: an error, and the model is unchanged
    with pytest.raises(TypeError, match=r"replaced nothing in _ContractModel: rotaries\.0 "):
        patch_rotary(model := _ContractModel(_WrongBaseRotary))
    assert type(model.rotaries[0]) is _WrongBaseRotary


def test_exact_rotation_of_the_generic_rule_is_verified(generic: ModuleType) -> None:
    model = patch_rotary(_ContractModel())
    with exact_rotation(model):
        assert generic.apply_rotary_pos_emb is not _rotate_half
        q, k = torch.randn(1, 2, 3, 32), torch.randn(1, 2, 3, 32)
        cos, sin = model.rotaries[0](q, torch.tensor([[0, 7, 900]]))
        ours = generic.apply_rotary_pos_emb(q, k, cos, sin)
        theirs = _rotate_half(q, k, cos, sin)
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ours, theirs, strict=True))
    assert generic.apply_rotary_pos_emb is _rotate_half
    # a rotation function posenc's does not reproduce is refused by name, nothing replaced
    generic.apply_rotary_pos_emb = lambda q, k, cos, sin, unsqueeze_dim=1: (q, k)
    with pytest.raises(TypeError, match=r"modeling_standin_generic\.apply_rotary_pos_emb: it "):
        exact_rotation(model)
    assert not model.rotaries[0].exact


class _RepeatedRotary(_ContractRotary):
    """Cohere 2's tables: each pair's value at features 2k and 2k + 1 (repeat_interleave)."""

    def forward(self, x, position_ids):  # type: ignore[no-untyped-def]
        emb = (position_ids[..., None].float() * self.inv_freq).repeat_interleave(2, dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class _PolarRotary(_ContractRotary):
    """DeepSeek-V2's table: one complex cos + i sin per pair (torch.polar)."""

    def forward(self, x, position_ids):  # type: ignore[no-untyped-def]
        freqs = position_ids[..., None].float() * self.inv_freq
        return torch.polar(torch.ones_like(freqs), freqs)


for _cls in (_RepeatedRotary, _PolarRotary):
    _cls.__module__ = _GENERIC


def _rotate_pairs(q, k, cos, sin, unsqueeze_dim=1):  # type: ignore[no-untyped-def]
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)

    def turn(x):  # type: ignore[no-untyped-def]
        return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)

    return q * cos + turn(q) * sin, k * cos + turn(k) * sin


def _rotate_complex(xq, xk, freqs_cis):  # type: ignore[no-untyped-def]
    def turn(x):  # type: ignore[no-untyped-def]
        pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(pairs * freqs_cis.unsqueeze(1)).flatten(3).type_as(x)

    return turn(xq), turn(xk)


def test_the_generic_rule_reads_interleaved_and_complex_tables(generic: ModuleType) -> None:
    positions = torch.tensor([[0, 5, 4095, 10**6]])
    exact = rotary_from_config(_GENERIC_CONFIG).cos_sin(4, positions=positions, batch=1)
    # Cohere 2: rotate-half disagrees, interleaved pairs with repeated tables agree
    model = patch_rotary(_ContractModel(_RepeatedRotary))
    module = model.rotaries[0]
    assert isinstance(module, HFRotaryEmbedding)
    assert (module.form, module.rotary.layout) == ("repeated", "interleaved")
    cos, sin = module(torch.zeros(1), positions)
    assert torch.equal(cos, exact[0].repeat_interleave(2, -1))
    assert torch.equal(sin, exact[1].repeat_interleave(2, -1))
    assert module.config is model.config  # the replaced module's, which some models read
    generic.apply_rotary_pos_emb = _rotate_pairs
    with exact_rotation(model):  # the interleaved rotation, verified, replaces it
        q, k = torch.randn(1, 2, 4, 32), torch.randn(1, 2, 4, 32)
        ours = generic.apply_rotary_pos_emb(q, k, cos, sin)
        theirs = _rotate_pairs(q, k, cos, sin)
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ours, theirs, strict=True))
    assert generic.apply_rotary_pos_emb is _rotate_pairs
    # DeepSeek-V2: one complex table, complex64 whatever the input
    model = patch_rotary(_ContractModel(_PolarRotary))
    module = model.rotaries[0]
    assert isinstance(module, HFRotaryEmbedding)
    assert (module.form, module.table_dtype) == ("complex", torch.float32)
    table = module(torch.zeros(1, dtype=torch.bfloat16), positions)
    assert isinstance(table, torch.Tensor)
    assert table.dtype == torch.complex64
    assert torch.equal(table, torch.complex(exact[0], exact[1]))
    generic.apply_rotary_emb = _rotate_complex
    with exact_rotation(model):  # DeepSeek-V2's (B, H, L, D) form, not Llama 4's
        assert generic.apply_rotary_emb is not _rotate_complex
        q, k = torch.randn(1, 2, 4, 32), torch.randn(1, 2, 4, 32)
        ours = generic.apply_rotary_emb(q, k, table)
        theirs = _rotate_complex(q, k, table)
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ours, theirs, strict=True))
    assert generic.apply_rotary_emb is _rotate_complex


def test_the_generic_rule_reads_no_4x_key_of_a_record(generic: ModuleType) -> None:
    # MiniMax-M3's config carries rotary_dim (GPT-J's 4.x key): its class has read it
    # into rope_parameters already, and the verification is what guards
    model = _ContractModel()
    model.config.rotary_dim = 8
    assert isinstance(patch_rotary(model).rotaries[0], HFRotaryEmbedding)
    with pytest.raises(ValueError, match=r"rotary_dim=8, a transformers 4\.x key"):
        rotary_from_config({**_GENERIC_CONFIG, "rotary_dim": 8})


class _MRopeRotary(_ContractRotary):
    """Multimodal RoPE on (3, B, L) positions (t, h, w), ``(B, L)`` ones on every axis.

    Its sections, the config's ``mrope_section``, chunked as Qwen2-VL's code does, or
    interleaved as Qwen3-VL's code (and its copies) do whatever ``mrope_interleaved`` says.
    """

    interleaved = False

    def forward(self, x, position_ids):  # type: ignore[no-untyped-def]
        if position_ids.ndim == 2:
            position_ids = position_ids[None]
        freqs = position_ids.expand(3, -1, -1)[..., None].float() * self.inv_freq
        section = self.config.rope_parameters.get("mrope_section", [6, 5, 5])  # the code's
        if self.interleaved:
            out = freqs[0].clone()
            for axis in (1, 2):
                idx = slice(axis, section[axis] * 3, 3)
                out[..., idx] = freqs[axis, ..., idx]
        else:
            chunks = freqs.split(section, dim=-1)
            out = torch.cat([chunk[axis] for axis, chunk in enumerate(chunks)], dim=-1)
        emb = torch.cat((out, out), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class _InterleavedMRopeRotary(_MRopeRotary):
    interleaved = True


for _cls in (_MRopeRotary, _InterleavedMRopeRotary):
    _cls.__module__ = _GENERIC


@pytest.mark.parametrize(
    ("kind", "flag", "interleaved"),
    [  # the code's form wins over the config's flag, whichever it is
        (_InterleavedMRopeRotary, None, True),
        (_InterleavedMRopeRotary, False, True),
        (_MRopeRotary, True, False),
        (_MRopeRotary, None, False),
    ],
)
def test_the_generic_rule_reads_multimodal_sections_as_the_code_forms_them(
    generic: ModuleType, kind: type[_MRopeRotary], flag: bool | None, interleaved: bool
) -> None:
    params: dict[str, Any] = {"rope_type": "default", "rope_theta": 20_000.0,
                              "mrope_section": [6, 5, 5]}  # fmt: skip
    if flag is not None:
        params["mrope_interleaved"] = flag
    config = {**_GENERIC_CONFIG, "rope_parameters": params}
    model = _ContractModel()
    model.config = SimpleNamespace(**config)
    model.rotaries = torch.nn.ModuleList([kind(model.config)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module = patch_rotary(model).rotaries[0]
    assert isinstance(module, HFRotaryEmbedding)
    assert (module.rotary.n_axes, module.rotary.axes) == (3, None)
    positions = torch.tensor([[0, 5, 4095, 10**6], [0, 2, 7, 10**6 + 3], [0, 1, 9, 5]])[:, None]
    exact = rotary_from_config(
        {**config, "rope_parameters": {**params, "mrope_interleaved": interleaved}}
    ).cos_sin(4, positions=positions, batch=1)
    cos, sin = module(torch.zeros(1), positions)
    assert torch.equal(cos, torch.cat((exact[0], exact[0]), -1))
    assert torch.equal(sin, torch.cat((exact[1], exact[1]), -1))
    # the other form's tables differ at these positions: the reading is the code's
    other = rotary_from_config(
        {**config, "rope_parameters": {**params, "mrope_interleaved": not interleaved}}
    ).cos_sin(4, positions=positions, batch=1)
    assert not torch.allclose(other[0], exact[0], atol=1e-3)


def test_multimodal_rope_whose_config_gives_no_sections_is_left(generic: ModuleType) -> None:
    # its code falls back on sections of its own: posenc would read one axis, whose tables
    # agree on (1, L) positions and not on (3, 1, L) ones
    model = _ContractModel(_InterleavedMRopeRotary)
    with pytest.raises(TypeError, match=r"takes \(3, B, L\) positions, t, h and w \(multimodal "):
        patch_rotary(model)
    assert type(model.rotaries[0]) is _InterleavedMRopeRotary
    # a module of one axis is still replaced (its tables of (3, 1, L) positions differ in shape)
    assert isinstance(patch_rotary(_ContractModel()).rotaries[0], HFRotaryEmbedding)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_complex_tables_of_half_precision_input_are_complex64(dtype: torch.dtype) -> None:
    # torch has no complex bfloat16: the table of a half-precision input is complex64,
    # the float32 table itself
    emb = HFRotaryEmbedding(RotaryEmbedding(16, layout="interleaved"), form="complex")
    positions = torch.tensor([[0, 3, 10**6]])
    table = emb(torch.zeros(1, dtype=dtype), positions)
    assert isinstance(table, torch.Tensor)
    assert table.dtype == torch.complex64
    assert torch.equal(table, emb(torch.zeros(1), positions))
