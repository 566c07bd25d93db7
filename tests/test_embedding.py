"""posenc.embedding: Embeddings' table, scale, initialisation, padding and errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from reference import LegacyEmbeddings
from torch import nn

from posenc import Embeddings


def test_lut_is_an_nn_embedding_of_vocab_by_d_model() -> None:
    emb = Embeddings(d_model=24, vocab=100)
    assert isinstance(emb.lut, nn.Embedding)
    assert emb.lut.num_embeddings == 100
    assert emb.lut.embedding_dim == 24
    assert emb.lut.weight.shape == (100, 24)
    assert emb.lut.padding_idx is None
    assert [name for name, _ in emb.named_parameters()] == ["lut.weight"]


@pytest.mark.parametrize("d_model", [1, 7, 512])
def test_forward_is_the_looked_up_row_times_sqrt_d_model(d_model: int) -> None:
    emb = Embeddings(d_model, 30)
    ids = torch.tensor([[0, 29, 5], [5, 5, 12]])
    out = emb(ids)
    assert out.shape == (2, 3, d_model)
    expected = emb.lut.weight.detach()[ids] * math.sqrt(d_model)
    assert torch.equal(out, expected)


def test_any_id_shape() -> None:
    emb = Embeddings(4, 10)
    assert emb(torch.tensor(3)).shape == (4,)
    assert emb(torch.tensor([1, 2])).shape == (2, 4)
    assert emb(torch.zeros(2, 3, 5, dtype=torch.long)).shape == (2, 3, 5, 4)
    assert emb(torch.zeros(0, dtype=torch.long)).shape == (0, 4)


def test_int32_ids_work_like_int64() -> None:
    emb = Embeddings(8, 20)
    ids = torch.tensor([[1, 19, 0]])
    assert torch.equal(emb(ids.int()), emb(ids))


def test_same_numbers_as_annotated_transformer_given_the_same_weights() -> None:
    ours, theirs = Embeddings(64, 40), LegacyEmbeddings(64, 40)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    ids = torch.randint(0, 40, (3, 11))
    assert torch.equal(ours(ids), theirs(ids))


def test_annotated_transformer_checkpoint_loads() -> None:
    theirs = LegacyEmbeddings(16, 12)
    ours = Embeddings(16, 12)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert torch.equal(ours.lut.weight, theirs.lut.weight)


def test_seeded_init_is_nn_embeddings() -> None:
    torch.manual_seed(0)
    ours = Embeddings(d_model=512, vocab=1000)
    rng_after_ours = torch.get_rng_state()
    torch.manual_seed(0)
    plain = nn.Embedding(1000, 512)
    rng_after_plain = torch.get_rng_state()
    torch.manual_seed(0)
    legacy = LegacyEmbeddings(512, 1000)
    assert torch.equal(ours.lut.weight, plain.weight)
    assert torch.equal(ours.lut.weight, legacy.lut.weight)
    # Construction draws exactly what nn.Embedding draws: later random numbers match too.
    assert torch.equal(rng_after_ours, rng_after_plain)


def test_scale_and_repr() -> None:
    emb = Embeddings(512, 1000)
    assert emb.scale == math.sqrt(512)
    assert "d_model=512, vocab=1000" in emb.extra_repr()
    assert "Embedding(1000, 512)" in repr(emb)


def test_gradient_reaches_only_the_used_rows() -> None:
    emb = Embeddings(4, 6)
    emb(torch.tensor([1, 3, 3])).sum().backward()
    grad = emb.lut.weight.grad
    assert grad is not None
    assert torch.equal(grad[1], torch.full((4,), 2.0))  # sqrt(4) per use
    assert torch.equal(grad[3], torch.full((4,), 4.0))
    assert torch.equal(grad[[0, 2, 4, 5]], torch.zeros(4, 4))


# --- padding_idx ----------------------------------------------------------------------------


@pytest.mark.parametrize("padding_idx", [0, 3, 9])
def test_padding_row_is_zero_and_gets_no_gradient(padding_idx: int) -> None:
    emb = Embeddings(8, 10, padding_idx=padding_idx)
    assert emb.lut.padding_idx == padding_idx
    assert torch.equal(emb.lut.weight[padding_idx], torch.zeros(8))
    ids = torch.tensor([[padding_idx, (padding_idx + 1) % 10, padding_idx]])
    out = emb(ids)
    assert torch.equal(out[0, 0], torch.zeros(8))
    assert torch.equal(out[0, 2], torch.zeros(8))
    assert bool((out[0, 1] != 0).any())
    out.sum().backward()
    grad = emb.lut.weight.grad
    assert grad is not None
    assert torch.equal(grad[padding_idx], torch.zeros(8))
    assert bool((grad[(padding_idx + 1) % 10] != 0).all())


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"d_model": 8, "vocab": 0}, ValueError, r"vocab.*\b0\b"),
        ({"d_model": 8, "vocab": -3}, ValueError, r"vocab.*-3"),
        ({"d_model": 8, "vocab": 10.0}, TypeError, r"vocab.*10\.0"),
        ({"d_model": 0, "vocab": 10}, ValueError, r"d_model.*\b0\b"),
        ({"d_model": 8.0, "vocab": 10}, TypeError, r"d_model.*8\.0"),
        ({"d_model": 8, "vocab": 10, "padding_idx": 10}, ValueError, r"padding_idx.*\b10\b"),
        ({"d_model": 8, "vocab": 10, "padding_idx": 11}, ValueError, r"padding_idx.*\b11\b"),
        ({"d_model": 8, "vocab": 10, "padding_idx": -1}, ValueError, r"padding_idx.*-1"),
        ({"d_model": 8, "vocab": 10, "padding_idx": 1.0}, TypeError, r"padding_idx.*1\.0"),
        ({"d_model": 8, "vocab": 10, "padding_idx": True}, TypeError, r"padding_idx.*True"),
    ],
)
def test_constructor_errors_name_the_argument_and_value(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        Embeddings(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ids", "match"),
    [
        (torch.tensor([[1.0, 2.0]]), r"token ids.*integer.*float32"),
        (torch.tensor([[1, 2]], dtype=torch.float64), r"token ids.*integer.*float64"),
        (torch.tensor([[True, False]]), r"token ids.*integer.*bool"),
        ([[1, 2]], r"token ids.*Tensor.*list"),
    ],
)
def test_non_integer_ids_are_a_type_error(ids: object, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        Embeddings(8, 10)(ids)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ids", "bad"),
    [
        ([[1, 10, 2]], 10),
        ([[1, 2], [3, 4000]], 4000),
        ([[-1, 2]], -1),
        ([[0, -7, 9]], -7),
    ],
)
def test_ids_outside_the_vocab_are_an_index_error(ids: list[list[int]], bad: int) -> None:
    with pytest.raises(IndexError, match=rf"token id {bad}\b.*vocab=10\b"):
        Embeddings(8, 10)(torch.tensor(ids))


def test_index_error_names_one_of_several_offenders() -> None:
    with pytest.raises(IndexError, match=r"vocab=10") as info:
        Embeddings(8, 10)(torch.tensor([[-2, 3, 15]]))
    assert "token id -2 " in str(info.value) or "token id 15 " in str(info.value)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32])
def test_narrow_integer_ids_are_looked_up_like_int64(dtype: torch.dtype) -> None:
    emb = Embeddings(8, 10)
    ids = torch.tensor([[1, 2, 9]])
    assert torch.equal(emb(ids.to(dtype)), emb(ids))


@pytest.mark.parametrize("name", ["embedding", "positional"])
def test_no_module_reads_another_modules_private_attributes(name: str) -> None:
    # The input layer reads its children through their public attributes (lut.weight,
    # lut.padding_idx, PositionalEncoding.add_encoding_), never pe._rows, pe._buffers,
    # pe._table_for or lut._parameters: a private read is one of self's, of super()'s,
    # or of one of posenc's own private modules.
    import ast
    import importlib

    module = importlib.import_module(f"posenc.{name}")
    tree = ast.parse(Path(module.__file__ or "").read_text())
    privates_modules = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if (alias.asname or alias.name).startswith("_")
    }
    reads = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        attr, owner = node.attr, node.value
        if not attr.startswith("_") or (attr.startswith("__") and attr.endswith("__")):
            continue
        if isinstance(owner, ast.Name) and owner.id in {"self", "cls", *privates_modules}:
            continue
        if isinstance(owner, ast.Call) and getattr(owner.func, "id", None) == "super":
            continue
        reads.append(f"{ast.unparse(owner)}.{attr} (line {node.lineno})")
    assert reads == []
