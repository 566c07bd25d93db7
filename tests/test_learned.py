"""posenc.LearnedPositionalEmbedding: a trained row per position, and nothing past max_len."""

from __future__ import annotations

import pytest
import torch
from reference import INTEGER_DTYPES

from posenc import LearnedPositionalEmbedding, PositionalEncoding, positions_from_mask

D, MAX_LEN = 8, 16


def make(dropout: float = 0.0) -> LearnedPositionalEmbedding:
    torch.manual_seed(0)
    return LearnedPositionalEmbedding(MAX_LEN, D, dropout=dropout)


def test_forward_adds_the_rows_of_the_positions() -> None:
    learned = make()
    x = torch.randn(3, 5, D)
    assert torch.equal(learned(x), x + learned.weight[:5])
    assert torch.equal(learned(x[0]), x[0] + learned.weight[:5])  # unbatched
    assert torch.equal(learned(x, offset=11), x + learned.weight[11:16])
    p = torch.tensor([[4, 0, 9, 9, 15], [0, 1, 2, 3, 4], [7, 7, 7, 7, 7]])
    assert torch.equal(learned(x, positions=p), x + learned.weight[p])
    offset = torch.tensor([0, 3, 11])
    rows = learned.weight[offset[:, None] + torch.arange(5)]
    assert torch.equal(learned(x, offset=offset), x + rows)


def test_decoding_with_offsets_equals_the_whole_sequence() -> None:
    learned = make()
    x = torch.randn(2, MAX_LEN, D)
    steps = [learned(x[:, t : t + 1], offset=t) for t in range(MAX_LEN)]
    assert torch.equal(torch.cat(steps, dim=1), learned(x))


def test_left_padded_batch_equals_the_unpadded_sequences() -> None:
    learned = make()
    x = torch.randn(2, 6, D)
    mask = torch.tensor([[False, False, True, True, True, True], [True] * 6])
    out = learned(x, positions=positions_from_mask(mask))
    assert torch.equal(out[0, 2:], learned(x[0, 2:]))
    assert torch.equal(out[1], learned(x[1]))


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_every_integer_dtype_of_positions(dtype: torch.dtype) -> None:
    learned = make()
    x = torch.randn(2, 4, D)
    p = torch.tensor([[3, 1, 0, 15], [2, 2, 2, 2]])
    assert torch.equal(learned(x, positions=p.to(dtype)), learned(x, positions=p))
    offset = torch.tensor([1, 12], dtype=dtype)
    assert torch.equal(learned(x, offset=offset), learned(x, offset=offset.long()))


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_every_integer_dtype_of_ids_in_forward_and_rows(dtype: torch.dtype) -> None:
    # uint8/int8/int16 ids were a raw torch error from the embedding kernel (issue 27)
    learned = make()
    ids = torch.tensor([[3, 1, 0, 15], [2, 2, 2, 2]])
    expected = learned.weight[ids]
    assert torch.equal(learned(ids.to(dtype)), expected)
    assert torch.equal(learned.rows(ids.to(dtype)), expected)


def test_ids_out_of_the_table_in_a_narrow_dtype_are_an_index_error() -> None:
    learned = make()
    with pytest.raises(IndexError, match="position 200 is outside the learned table"):
        learned.rows(torch.tensor([0, 200], dtype=torch.uint8))
    with pytest.raises(IndexError, match="position -3 is outside the learned table"):
        learned(torch.tensor([0, -3], dtype=torch.int8))


def test_floating_ids_are_never_read_silently() -> None:
    # A floating x is token vectors; shaped as ids it is refused, with the conversion.
    learned = make()
    ids = torch.tensor([[0.0, 1.0, 2.0]])
    with pytest.raises(ValueError, match=r"read as token vectors .*pass x.long\(\)"):
        learned(ids)
    with pytest.raises(ValueError, match=r"last dimension must be d_model=8"):
        learned(ids[0])
    with pytest.raises(TypeError, match=r"integer positions only .*positions.long\(\)"):
        learned.rows(ids)
    with pytest.raises(TypeError, match=r"fractional positions are RotaryEmbedding's"):
        learned(torch.zeros(3, D), positions=ids[0])
    assert torch.equal(learned(ids.long()), learned.weight[:3][None])


@pytest.mark.parametrize(
    ("kwargs", "bad"),
    [
        ({"offset": 14}, 16),
        ({"offset": -1}, -1),
        ({"positions": torch.tensor([0, 1, 16])}, 16),
        ({"positions": torch.tensor([[0, 1, 2], [0, -2, 5]])}, -2),
        ({"offset": torch.tensor([0, 14])}, 16),
    ],
)
def test_positions_outside_the_table_are_an_index_error(kwargs: dict, bad: int) -> None:  # type: ignore[type-arg]
    learned = make()
    with pytest.raises(IndexError) as info:
        learned(torch.zeros(2, 3, D), **kwargs)
    message = str(info.value)
    assert f"position {bad} is outside the learned table of max_len={MAX_LEN}" in message
    assert "cannot extrapolate" in message
    assert f"[0, {MAX_LEN})" in message


def test_the_sinusoid_computes_what_the_learned_table_refuses() -> None:
    x = torch.zeros(1, 3, D)
    with pytest.raises(IndexError):
        make()(x, offset=MAX_LEN)
    assert PositionalEncoding(D, max_len=MAX_LEN)(x, offset=MAX_LEN).abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_output_dtype_is_the_input_dtype(dtype: torch.dtype) -> None:
    learned = make()
    x = torch.randn(2, 5, D).to(dtype)
    out = learned(x)
    assert out.dtype == dtype
    assert torch.equal(out, x + learned.weight[:5].to(dtype))


def test_casting_the_module_converts_the_trained_weight() -> None:
    learned = make()
    before = learned.weight.detach().clone()
    learned.to(torch.bfloat16)
    assert learned.weight.dtype == torch.bfloat16
    assert torch.equal(learned.weight, before.to(torch.bfloat16))


def test_gradient_reaches_the_rows_used_and_the_input() -> None:
    learned = make()
    x = torch.randn(2, 3, D, requires_grad=True)
    learned(x, offset=4).sum().backward()
    grad = learned.weight.grad
    assert grad is not None
    assert torch.equal(grad.abs().sum(1).nonzero().flatten(), torch.arange(4, 7))
    assert x.grad is not None
    assert torch.equal(x.grad, torch.ones_like(x))


def test_dropout_is_applied_to_the_sum_in_training_only() -> None:
    learned = make(dropout=0.5)
    x = torch.randn(4, 10, D)
    learned.train()
    dropped = learned(x)
    assert bool((dropped == 0).any())
    learned.eval()
    assert torch.equal(learned(x), x + learned.weight[:10])


def test_state_dict_and_peer_key_names() -> None:
    learned = make()
    assert list(learned.state_dict()) == ["weight"]
    table = torch.randn(MAX_LEN, D)
    for key in ("weight", "position_embeddings.weight", "wpe.weight"):
        fresh = LearnedPositionalEmbedding(MAX_LEN, D)
        fresh.load_state_dict({key: table})
        assert torch.equal(fresh.weight, table)


def test_peer_key_names_load_under_a_prefix() -> None:
    model = torch.nn.Sequential(LearnedPositionalEmbedding(MAX_LEN, D))
    table = torch.randn(MAX_LEN, D)
    model.load_state_dict({"0.wpe.weight": table})
    assert torch.equal(model[0].weight, table)


def test_two_names_for_the_table_is_an_error() -> None:
    learned = make()
    table = torch.randn(MAX_LEN, D)
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\).*wpe\.weight"):
        learned.load_state_dict({"weight": table, "wpe.weight": table})


def test_a_table_of_another_length_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="size mismatch for weight"):
        make().load_state_dict({"wpe.weight": torch.randn(MAX_LEN + 1, D)})


def test_roberta_positions_start_after_the_padding_index() -> None:
    # RoBERTa (fairseq's make_positions): real tokens count from padding_idx + 1, pads get
    # padding_idx. posenc: positions_from_mask(mask) + padding_idx + 1 on the real tokens.
    padding_idx = 1
    ids = torch.tensor([[padding_idx, padding_idx, 7, 8, 9], [5, 6, 7, 8, 9]])
    mask = ids != padding_idx
    fairseq = torch.cumsum(mask.int(), dim=1) * mask + padding_idx
    positions = positions_from_mask(mask) + padding_idx + 1
    assert torch.equal(positions[mask], fairseq[mask])


def test_forward_hook_and_no_state_change() -> None:
    learned = make()
    seen: list[torch.Tensor] = []
    learned.register_forward_hook(lambda m, i, o: seen.append(o))
    before = learned.weight.detach().clone()
    x = torch.randn(2, 3, D)
    out = learned(x)
    assert len(seen) == 1
    assert seen[0] is out
    assert torch.equal(learned.weight, before)


def test_extra_repr_and_constructor_errors() -> None:
    assert "max_len=16, d_model=8" in repr(make())
    with pytest.raises(ValueError, match="max_len must be a positive int, got 0"):
        LearnedPositionalEmbedding(0, D)
    with pytest.raises(TypeError, match="d_model must be an int"):
        LearnedPositionalEmbedding(4, 8.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        LearnedPositionalEmbedding(4, 8, dropout=1.0)


def test_input_errors() -> None:
    learned = make()
    with pytest.raises(ValueError, match="last dimension must be d_model=8"):
        learned(torch.zeros(2, 3, 4))
    # An integer input is positions (GPT-2's wpe(position_ids)); with offset, or bool, not.
    # The message names the conflict (ids and offset), not the input's dtype (issue 27).
    with pytest.raises(ValueError, match=r"x is an integer tensor.*and offset= was given too"):
        learned(torch.zeros(2, 3, D, dtype=torch.long), offset=1)
    with pytest.raises(ValueError, match=r"and positions= was given too: .*pass the ids alone"):
        learned(torch.zeros(2, 3, dtype=torch.long), positions=torch.arange(3))
    with pytest.raises(
        TypeError, match=r"got dtype torch.bool: for ids, convert with x\.long\(\)"
    ):
        learned(torch.zeros(2, 3, D, dtype=torch.bool))
    assert learned(torch.zeros(2, 3, D, dtype=torch.long)).shape == (2, 3, D, D)
    with pytest.raises(TypeError, match="positions must be"):
        learned(torch.zeros(2, 3, D), positions=torch.zeros(3))
