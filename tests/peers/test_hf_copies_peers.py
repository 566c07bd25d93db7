"""exact_rotation's hold is the block's: a copy taken inside one runs in transformers.

A copy (``copy.deepcopy``, ``torch.save``) of a bfloat16 model made inside ``with
exact_rotation(model)`` once kept the block's float32 tables with no handle to release
them: after the block, transformers' own rotation met float32 tables and the attention
multiplied float32 queries by bfloat16 values.
"""

from __future__ import annotations

import copy
import io

import torch

from posenc.hf import exact_rotation, patch_rotary


def _tiny_llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    config._attn_implementation = "eager"
    return LlamaForCausalLM(config).eval()


def _saved(model: torch.nn.Module) -> torch.nn.Module:
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded: torch.nn.Module = torch.load(buffer, weights_only=False)
    return loaded


def test_a_bf16_copy_taken_inside_exact_rotation_runs_in_transformers_attention() -> None:
    model = patch_rotary(_tiny_llama().to(torch.bfloat16))
    ids = torch.randint(0, 64, (2, 9))
    with torch.no_grad():
        plain = model(ids).logits
        with exact_rotation(model):
            copies = [copy.deepcopy(model), _saved(model)]
            exact = model(ids).logits
            for other in copies:  # inside the block: the block's rotation, the copy's tables
                assert other(ids).logits.dtype == torch.bfloat16
        for other in copies:  # after it: transformers' rotation, as the original
            out = other(ids).logits
            assert out.dtype == torch.bfloat16
            assert torch.equal(out, plain)
    assert not torch.equal(exact, plain)  # the block did change the rotation
