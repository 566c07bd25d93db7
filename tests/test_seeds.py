"""The outputs printed in the seeds, reproduced with posenc.

Seed 000 (Korean walkthrough of the Annotated Transformer, step 5) prints, under
"실행 결과", the numbers checked here; seed 001 (Japanese course chapter) prints
two shapes. Expected values are the literal printed text of the seeds.
"""

from __future__ import annotations

import math

import pytest
import torch
from reference import LegacyEmbeddings, LegacyPositionalEncoding
from torch import nn

from posenc import Embeddings, PositionalEncoding

# Seed 000, "위치 0~3의 앞 6개 차원": the tensor as printed.
SEED_000_TABLE_TEXT = """\
tensor([[ 0.0000,  1.0000,  0.0000,  1.0000,  0.0000,  1.0000],
        [ 0.8410,  0.5400,  0.8220,  0.5700,  0.8020,  0.5970],
        [ 0.9090, -0.4160,  0.9360, -0.3510,  0.9580, -0.2860],
        [ 0.1410, -0.9900,  0.2450, -0.9700,  0.3430, -0.9390]])"""
SEED_000_TABLE = [
    [0.0000, 1.0000, 0.0000, 1.0000, 0.0000, 1.0000],
    [0.8410, 0.5400, 0.8220, 0.5700, 0.8020, 0.5970],
    [0.9090, -0.4160, 0.9360, -0.3510, 0.9580, -0.2860],
    [0.1410, -0.9900, 0.2450, -0.9700, 0.3430, -0.9390],
]


def run_seed_000_demo(
    embeddings: type[nn.Module], positional: type[nn.Module]
) -> dict[str, object]:
    """The seed's demo.py flow, with the given classes; returns what it prints."""
    torch.manual_seed(0)
    emb = embeddings(d_model=512, vocab=1000)
    tokens = torch.tensor([[17, 42, 7]])
    e = emb(tokens)
    printed: dict[str, object] = {
        "shape": tuple(e.shape),
        "std_before": f"{emb.lut(tokens).std():.3f}",
        "std_after": f"{e.std():.3f}",
    }
    pe = positional(d_model=512, dropout=0.0)
    printed["buffer"] = tuple(pe.pe.shape)
    printed["parameters"] = sum(p.numel() for p in pe.parameters())
    y = pe(torch.zeros(1, 4, 512))
    printed["table"] = y[0, :, :6].round(decimals=3)
    same = emb(torch.tensor([[42, 42]]))
    z = pe(same)
    printed["distance_embedding"] = f"{(same[0, 0] - same[0, 1]).norm():.2f}"
    printed["distance_with_pe"] = f"{(z[0, 0] - z[0, 1]).norm():.2f}"
    return printed


@pytest.fixture(scope="module")
def seed_000() -> dict[str, object]:
    return run_seed_000_demo(Embeddings, PositionalEncoding)


def test_seed_000_embedding_shape(seed_000: dict[str, object]) -> None:
    assert seed_000["shape"] == (1, 3, 512)


def test_seed_000_std_before_and_after_scaling(seed_000: dict[str, object]) -> None:
    assert seed_000["std_before"] == "0.980"
    assert seed_000["std_after"] == "22.181"
    assert f"{math.sqrt(512):.1f}" == "22.6"


def test_seed_000_buffer_and_parameters(seed_000: dict[str, object]) -> None:
    assert seed_000["buffer"] == (1, 5000, 512)
    assert seed_000["parameters"] == 0


def test_seed_000_table_values(seed_000: dict[str, object]) -> None:
    table = seed_000["table"]
    assert isinstance(table, torch.Tensor)
    torch.testing.assert_close(table, torch.tensor(SEED_000_TABLE), rtol=0, atol=1e-6)


def test_seed_000_table_prints_as_in_the_seed(seed_000: dict[str, object]) -> None:
    assert str(seed_000["table"]) == SEED_000_TABLE_TEXT


def test_seed_000_same_token_at_two_positions(seed_000: dict[str, object]) -> None:
    assert seed_000["distance_embedding"] == "0.00"
    assert seed_000["distance_with_pe"] == "3.71"


def test_seed_000_stand_ins_print_the_same() -> None:
    """The reference stand-ins reproduce the seed too, so tests built on them are sound."""
    ours = run_seed_000_demo(Embeddings, PositionalEncoding)
    theirs = run_seed_000_demo(LegacyEmbeddings, LegacyPositionalEncoding)
    assert str(theirs.pop("table")) == str(ours.pop("table")) == SEED_000_TABLE_TEXT
    assert theirs == ours


def test_seed_001_shapes() -> None:
    embedding_layer = Embeddings(512, 10_000)
    embedded_output = embedding_layer(torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]))
    assert str(embedded_output.shape) == "torch.Size([2, 4, 512])"
    pos_encoding_layer = PositionalEncoding(512, max_len=4)
    pos_encoded_output = pos_encoding_layer(embedded_output)
    assert str(pos_encoded_output.shape) == "torch.Size([2, 4, 512])"
    assert pos_encoding_layer.pe.shape == (1, 4, 512)
