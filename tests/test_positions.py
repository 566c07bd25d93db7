"""Positions other than 0..L-1: offsets (KV-cache decoding), explicit positions, padding."""

from __future__ import annotations

import pytest
import torch

from posenc import (
    PositionalEncoding,
    TokenAndPositionEmbedding,
    cu_seqlens,
    document_block_mask,
    document_ids,
    document_mask,
    documents_from_positions,
    lengths_from_cu_seqlens,
    lengths_from_documents,
    positions_from_documents,
    positions_from_lengths,
    positions_from_mask,
    shard_positions,
    sinusoidal_table,
)
from posenc.positions import Positions, resolve

D = 16


@pytest.mark.parametrize("max_len", [64, 5])  # 5: the later steps run past max_len
def test_incremental_decoding_with_int_offset_matches_full_sequence(max_len: int) -> None:
    pe = PositionalEncoding(D, max_len=max_len)
    x = torch.randn(3, 12, D)
    steps = [pe(x[:, t : t + 1], offset=t) for t in range(12)]
    assert torch.equal(torch.cat(steps, dim=1), PositionalEncoding(D, max_len=64)(x))


def test_incremental_decoding_with_tensor_offset_per_sequence() -> None:
    # Sequences of a batch at different decoding steps: each gets its own offset.
    pe = PositionalEncoding(D, max_len=8)
    x = torch.randn(3, 20, D)
    full = pe(x)
    offset = torch.tensor([0, 7, 19])
    step = pe(x[torch.arange(3), offset].unsqueeze(1), offset=offset)
    assert step.shape == (3, 1, D)
    assert torch.equal(step[:, 0], full[torch.arange(3), offset])


def test_scalar_tensor_offset_equals_int_offset() -> None:
    pe = PositionalEncoding(D)
    x = torch.randn(2, 4, D)
    assert torch.equal(pe(x, offset=torch.tensor(9)), pe(x, offset=9))


def test_chunked_prefill_with_offsets_matches_full_sequence() -> None:
    pe = PositionalEncoding(D, max_len=10)
    x = torch.randn(2, 25, D)
    chunks = [pe(x[:, s : s + 6], offset=s) for s in range(0, 25, 6)]
    assert torch.equal(torch.cat(chunks, dim=1), pe(x))


@pytest.mark.parametrize("shape", [(7,), (2, 7)])
def test_explicit_positions_add_those_rows(shape: tuple[int, ...]) -> None:
    pe = PositionalEncoding(D, max_len=50)
    positions = torch.randint(0, 200, shape)  # some past max_len
    x = torch.randn(2, 7, D)
    expected = x + sinusoidal_table(positions, D)
    assert torch.equal(pe(x, positions=positions), expected)


def test_explicit_positions_in_range_match_buffer_rows() -> None:
    pe = PositionalEncoding(D, max_len=50)
    positions = torch.tensor([[3, 3, 49, 0], [1, 2, 3, 4]])
    out = pe(torch.zeros(2, 4, D), positions=positions)
    assert torch.equal(out, pe.pe[0][positions])


def test_positions_arange_equals_default() -> None:
    pe = PositionalEncoding(D)
    x = torch.randn(2, 9, D)
    assert torch.equal(pe(x, positions=torch.arange(9)), pe(x))


def test_positions_on_unbatched_input() -> None:
    pe = PositionalEncoding(D)
    x = torch.randn(5, D)
    positions = torch.tensor([4, 3, 2, 1, 0])
    assert torch.equal(pe(x, positions=positions), x + pe.pe[0, :5].flip(0))


def test_positions_keep_input_dtype() -> None:
    pe = PositionalEncoding(D)
    x = torch.randn(2, 3, D, dtype=torch.float64)
    positions = torch.tensor([0, 10_000, 2**20])
    out = pe(x, positions=positions)
    assert out.dtype == torch.float64
    exact = sinusoidal_table(positions, D, dtype=torch.float64)
    assert torch.equal(out - x, (x + exact) - x)


def test_packed_sequences_restart_positions() -> None:
    # Two documents packed into one row: positions restart at each boundary.
    pe = PositionalEncoding(D)
    a, b = torch.randn(4, D), torch.randn(3, D)
    packed = torch.cat([a, b]).unsqueeze(0)
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2]])
    out = pe(packed, positions=positions)[0]
    assert torch.equal(out[:4], pe(a))
    assert torch.equal(out[4:], pe(b))


def test_positions_from_mask_left_and_right_padding() -> None:
    mask = torch.tensor(
        [
            [False, False, True, True, True],
            [True, True, True, False, False],
            [True, False, True, False, True],
            [False, False, False, False, False],
        ]
    )
    expected = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 0, 0], [0, 0, 1, 0, 2], [0, 0, 0, 0, 0]])
    got = positions_from_mask(mask)
    assert got.dtype == torch.int64
    assert torch.equal(got, expected)


@pytest.mark.parametrize("bad", [torch.ones(2, 3), torch.ones(2, 3, dtype=torch.cfloat), [True]])
def test_positions_from_mask_rejects_floats_and_non_tensors(bad: object) -> None:
    with pytest.raises(TypeError, match="mask must be a bool or integer tensor"):
        positions_from_mask(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.int8])
def test_positions_from_an_integer_attention_mask_equal_those_of_a_bool_mask(
    dtype: torch.dtype,
) -> None:
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 1, 0, 1]])
    assert torch.equal(positions_from_mask(mask.to(dtype)), positions_from_mask(mask.bool()))


def test_left_padded_batch_gets_unpadded_encodings() -> None:
    torch.manual_seed(1)
    layer = TokenAndPositionEmbedding(D, vocab=50, padding_idx=0)
    seqs = [torch.tensor([5, 6, 7, 8]), torch.tensor([9, 10]), torch.tensor([11, 12, 13])]
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    for row, s in enumerate(seqs):
        ids[row, width - len(s) :] = s  # left padding with padding_idx 0
    mask = ids != 0
    out = layer(ids, positions=positions_from_mask(mask))
    for row, s in enumerate(seqs):
        alone = layer(s.unsqueeze(0))[0]
        assert torch.equal(out[row, width - len(s) :], alone)

    # The same through the two-module path.
    pe = PositionalEncoding(D)
    x = layer.embeddings(ids)
    out2 = pe(x, positions=positions_from_mask(mask))
    for row, s in enumerate(seqs):
        assert torch.equal(out2[row, width - len(s) :], pe(layer.embeddings(s)))


def test_right_padded_batch_needs_no_positions() -> None:
    layer = TokenAndPositionEmbedding(D, vocab=50, padding_idx=0)
    ids = torch.tensor([[5, 6, 7], [8, 0, 0]])
    by_mask = layer(ids, positions=positions_from_mask(ids != 0))
    default = layer(ids)
    assert torch.equal(by_mask[0], default[0])
    assert torch.equal(by_mask[1, 0], default[1, 0])


def test_offset_and_positions_together_is_an_error() -> None:
    pe = PositionalEncoding(D)
    with pytest.raises(ValueError, match="either offset or positions"):
        pe(torch.randn(1, 3, D), offset=2, positions=torch.arange(3))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"offset": 2**62 - 2}, ValueError, "offset=4611686018427387902 puts positions outside"),
        ({"offset": 2**63 - 2}, ValueError, "offset=9223372036854775806 is outside int64"),
        ({"offset": -(2**63) - 1}, ValueError, "outside int64"),
        ({"offset": 1.5}, TypeError, "offset must be an int"),
        ({"offset": True}, TypeError, "offset must be an int"),
        ({"offset": torch.tensor([1.0, 2.0])}, TypeError, "offset .* dtype torch.float32"),
        ({"offset": torch.tensor([1, 2, 3])}, ValueError, r"offset of shape \(3,\) .* B=2"),
        ({"offset": torch.zeros(2, 1, dtype=torch.long)}, ValueError, r"offset must be .* \(B,\)"),
        ({"positions": torch.arange(3.0)}, TypeError, "positions must be an integer tensor"),
        ({"positions": torch.ones(3, dtype=torch.bool)}, TypeError, "positions must be an int"),
        ({"positions": torch.arange(4)}, ValueError, r"positions must have shape .* L=3"),
        ({"positions": torch.zeros(3, 3, dtype=torch.long)}, ValueError, "3 sequences.*B=2"),
        ({"positions": torch.zeros(1, 2, 3, dtype=torch.long)}, ValueError, "positions must"),
    ],
)
def test_position_argument_errors(kwargs: dict[str, object], error: type, match: str) -> None:
    pe = PositionalEncoding(D)
    with pytest.raises(error, match=match):
        pe(torch.randn(2, 3, D), **kwargs)  # type: ignore[arg-type]


def test_per_sequence_positions_need_a_batched_input() -> None:
    pe = PositionalEncoding(D)
    with pytest.raises(ValueError, match=r"no batch to match them .*give positions of shape"):
        pe(torch.randn(3, D), positions=torch.zeros(2, 3, dtype=torch.long))


def test_one_row_of_positions_is_shared_without_a_batch() -> None:
    # Hugging Face's position_ids are (1, L): without a batch they are the (L,) row.
    pe = PositionalEncoding(D)
    x, row = torch.randn(3, D), torch.tensor([[4, 7, 9]])
    assert torch.equal(pe(x, positions=row), pe(x, positions=row[0]))
    assert torch.equal(pe(x, offset=torch.tensor([5])), pe(x, offset=5))
    assert pe.encoding(3, positions=row).shape == (3, D)


def test_forward_with_positions_never_mutates_the_buffer() -> None:
    pe = PositionalEncoding(D, max_len=4)
    before = pe.pe.clone()
    pe(torch.randn(2, 3, D), positions=torch.tensor([[100, 2, 3], [0, 1, 9999]]))
    pe(torch.randn(2, 3, D), offset=torch.tensor([50, 60]))
    assert torch.equal(pe.pe, before)
    assert pe.pe.shape == (1, 4, D)


# --- the position layer itself: resolve, Positions, positions_from_lengths ------------------


def test_resolve_int_offset_keeps_a_start_and_builds_no_tensor() -> None:
    where = resolve(4, offset=7)
    assert where.start == 7
    assert where.values is None
    assert torch.equal(where.tensor(), torch.arange(7, 11))


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"offset": torch.tensor(2)}, [2, 3, 4]),
        ({"offset": torch.tensor([1, 5])}, [[1, 2, 3], [5, 6, 7]]),
        ({"positions": torch.tensor([4, 0, 9], dtype=torch.int16)}, [4, 0, 9]),
        ({"positions": torch.tensor([[1, 1, 1]], dtype=torch.uint8)}, [[1, 1, 1]]),
    ],
)
def test_resolve_tensor_forms_give_int64_values(
    kwargs: dict[str, torch.Tensor], expected: list[int]
) -> None:
    where = resolve(3, batch=2, **kwargs)
    assert where.start is None
    assert where.values is not None
    assert where.values.dtype == torch.int64
    assert torch.equal(where.tensor(), torch.tensor(expected))


def test_a_per_sequence_tensor_with_one_row_is_shared_by_the_batch() -> None:
    pe = PositionalEncoding(D)
    x = torch.randn(3, 4, D)
    positions = torch.tensor([[5, 6, 7, 8]])  # (1, L), as Hugging Face passes position_ids
    assert torch.equal(pe(x, positions=positions), pe(x, offset=5))
    assert torch.equal(pe(x, offset=torch.tensor([5])), pe(x, offset=5))


@pytest.mark.parametrize(
    ("positions", "size", "inside"),
    [
        (resolve(4, offset=6), 10, True),
        (resolve(4, offset=7), 10, False),
        (resolve(4, offset=-1), 10, False),
        (resolve(3, positions=torch.tensor([0, 9, 2])), 10, True),
        (resolve(3, positions=torch.tensor([0, 10, 2])), 10, False),
        (resolve(3, positions=torch.tensor([0, -1, 2])), 10, False),
        (resolve(0, positions=torch.zeros(0, dtype=torch.long)), 10, True),
    ],
)
def test_within_says_whether_a_table_holds_every_position(
    positions: Positions, size: int, inside: bool
) -> None:
    assert positions.within(size) is inside
    if inside:
        table = torch.arange(size * 2).reshape(size, 2)
        assert torch.equal(positions.take(table), table[positions.tensor()])


@pytest.mark.parametrize(
    ("lengths", "expected"),
    [
        ([3, 2], [0, 1, 2, 0, 1]),
        ([1, 1, 1], [0, 0, 0]),
        ([2, 0, 3], [0, 1, 0, 1, 2]),
        ([4], [0, 1, 2, 3]),
        ([], []),
        ([0, 0], []),
    ],
)
def test_positions_from_lengths(lengths: list[int], expected: list[int]) -> None:
    for given in (lengths, tuple(lengths), torch.tensor(lengths, dtype=torch.int32)):
        got = positions_from_lengths(given)
        assert got.dtype == torch.int64
        assert got.tolist() == expected


def test_packed_sequences_get_the_encodings_they_get_alone() -> None:
    pe = PositionalEncoding(D, max_len=6)
    seqs = [torch.randn(4, D), torch.randn(7, D), torch.randn(2, D)]  # 7: past max_len
    packed = torch.cat(seqs).unsqueeze(0)
    out = pe(packed, positions=positions_from_lengths([len(s) for s in seqs]))[0]
    start = 0
    for s in seqs:
        assert torch.equal(out[start : start + len(s)], pe(s))
        start += len(s)


@pytest.mark.parametrize(
    ("lengths", "error", "match"),
    [
        ([3, -1], ValueError, r"lengths must be >= 0, got \[3, -1\]"),
        (
            torch.tensor([[[1, 2]]]),
            ValueError,
            r"lengths must be 1-D or \(B, N\), got shape \(1, 1, 2\)",
        ),
        ([1.0, 2.0], TypeError, "lengths must be ints, got float"),
        ([True], TypeError, "lengths must be ints, got bool"),
        (torch.tensor([1.0]), TypeError, "lengths must be a list of ints or a 1-D integer tensor"),
        ("12", TypeError, "lengths must be a Tensor"),
    ],
)
def test_positions_from_lengths_errors(lengths: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        positions_from_lengths(lengths)  # type: ignore[arg-type]


# -- Contiguous shards: computed for the shard only (issue 27) ------------------------------


def _shards_by_the_whole_order(length: int, world: int, lengths: list[int] | None) -> list:  # type: ignore[type-arg]
    """Every rank's positions cut from the whole sequence's, as torch.chunk cuts it."""
    whole = torch.arange(length) if lengths is None else positions_from_lengths(lengths)
    chunk = -(-length // world) if length else 1
    return [whole[min(r * chunk, length) : min((r + 1) * chunk, length)] for r in range(world)]


@pytest.mark.parametrize("length", [0, 1, 7, 16, 23])
@pytest.mark.parametrize("world", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("lengths", [None, "two", "with_empty"])
def test_contiguous_shard_equals_its_cut_of_the_whole_order(
    length: int, world: int, lengths: str | None
) -> None:
    docs: list[int] | None
    if lengths is None:
        docs = None
    elif lengths == "two":
        docs = [length // 3, length - length // 3]
    else:
        docs = [0, length // 2, 0, length - length // 2, 0]
    expected = _shards_by_the_whole_order(length, world, docs)
    for rank in range(world):
        got = shard_positions(length, world, rank, lengths=docs)
        assert got.dtype == torch.int64
        assert torch.equal(got, expected[rank]), (rank, docs)
        if docs is not None:  # a tensor of lengths reads as the list
            assert torch.equal(
                shard_positions(
                    length, world, rank, lengths=torch.tensor(docs, dtype=torch.int16)
                ),
                got,
            )


def test_a_shard_of_a_sequence_too_long_to_build_is_computed() -> None:
    # 2**45 tokens over 2**30 ranks: the whole order is 256 TiB, a shard 32768 positions.
    shard = shard_positions(2**45, 2**30, 5)
    assert torch.equal(shard, torch.arange(2**15) + 5 * 2**15)
    last = shard_positions(2**62, 2**40, 2**40 - 1)  # up to the domain's last position
    assert int(last[-1]) == 2**62 - 1
    assert last.numel() == 2**22
    docs = [2**44, 2**44]  # packed documents: positions restart at the second
    assert torch.equal(shard_positions(2**45, 2**30, 2**29, lengths=docs), torch.arange(2**15))


def test_contiguous_shards_past_the_domain_or_memory_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"length=4611686018427387905 .*position domain"):
        shard_positions(2**62 + 1, 2, 0)
    with pytest.raises(ValueError, match=r"shard_positions' result for rank 0 of 1 .* needs"):
        shard_positions(2**50, 1, 0)
    with pytest.raises(ValueError, match="lengths must sum to length=8"):
        shard_positions(8, 2, 0, lengths=[3, 4])
    with pytest.raises(ValueError, match=r"lengths must be >= 0"):
        shard_positions(2, 2, 0, lengths=[3, -1])
    with pytest.raises(TypeError, match="lengths must be ints"):
        shard_positions(2, 2, 0, lengths=[1.0, 1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="lengths is on the meta device"):
        shard_positions(2, 2, 0, lengths=torch.ones(2, dtype=torch.long, device="meta"))


# --- packed rows: lengths, cu_seqlens, document ids, positions and their masks ---------------


def _loop_ids(lengths: list[int]) -> list[int]:
    """The test's own rule: document n repeated lengths[n] times."""
    return [n for n, size in enumerate(lengths) for _ in range(size)]


PACKINGS = [[3, 2], [1], [4, 0, 2, 1], [0, 5], [2, 2, 2, 2], [7, 1, 0]]


@pytest.mark.parametrize("lengths", PACKINGS)
def test_the_four_descriptions_of_a_packing_convert_into_each_other(lengths: list[int]) -> None:
    ids = document_ids(lengths)
    assert ids.tolist() == _loop_ids(lengths)
    cu = cu_seqlens(lengths)
    assert cu.dtype == torch.int32
    assert cu.tolist() == [sum(lengths[:n]) for n in range(len(lengths) + 1)]
    assert lengths_from_cu_seqlens(cu).tolist() == lengths
    nonzero = [n for n in lengths if n]
    assert lengths_from_documents(ids).tolist() == nonzero
    pos = positions_from_lengths(lengths)
    assert torch.equal(positions_from_documents(ids), pos)
    # positions -> documents numbers the documents that hold tokens, from 0
    assert documents_from_positions(pos).tolist() == _loop_ids(nonzero)
    assert document_ids(torch.tensor(lengths, dtype=torch.int32)).tolist() == ids.tolist()


def test_batched_packings() -> None:
    lengths = torch.tensor([[3, 2], [1, 4], [5, 0]])
    pos = positions_from_lengths(lengths)
    assert torch.equal(pos, torch.stack([positions_from_lengths(row) for row in lengths]))
    ids = document_ids(lengths)
    assert torch.equal(ids, torch.stack([document_ids(row) for row in lengths]))
    assert torch.equal(positions_from_documents(ids), pos)
    assert cu_seqlens(lengths).tolist() == [0, 3, 5, 6, 10, 15, 15]
    with pytest.raises(ValueError, match="the same total length"):
        positions_from_lengths(torch.tensor([[3, 2], [1, 1]]))
    with pytest.raises(ValueError, match="the same total length"):
        document_ids([[3, 2], [1, 1]])


def test_document_helpers_errors() -> None:
    with pytest.raises(ValueError, match="lengths must be >= 0"):
        document_ids([2, -1])
    with pytest.raises(TypeError, match="lengths must be ints, got float"):
        cu_seqlens([2.0])
    with pytest.raises(ValueError, match="past int32's cu_seqlens"):
        cu_seqlens([2**31])
    with pytest.raises(ValueError, match="cu_seqlens must be 1-D"):
        lengths_from_cu_seqlens(torch.zeros(2, 2, dtype=torch.int32))
    with pytest.raises(TypeError, match="documents must be an integer tensor"):
        document_mask(torch.zeros(4))
    with pytest.raises(ValueError, match="window must be a positive int"):
        document_mask(document_ids([2]), window=0)
    with pytest.raises(TypeError, match="causal must be a bool"):
        document_mask(document_ids([2]), causal=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs documents, or the length"):
        document_block_mask()


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 2])
def test_document_mask_is_the_rule_pair_by_pair(causal: bool, window: int | None) -> None:
    lengths = [3, 4, 1]
    ids = _loop_ids(lengths)
    got = document_mask(document_ids(lengths), causal=causal, window=window)
    for i in range(len(ids)):
        for j in range(len(ids)):
            want = ids[i] == ids[j] and (j <= i or not causal)
            want = want and (window is None or abs(i - j) < window)
            assert bool(got[i, j]) == want, (i, j)
    batch = document_mask(document_ids(torch.tensor([lengths, [8, 0, 0]])), causal=causal)
    assert batch.shape == (2, 1, 8, 8)
    assert torch.equal(batch[0, 0], document_mask(document_ids(lengths), causal=causal))


def test_document_mask_in_sdpa_is_attention_per_document() -> None:
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    lengths = [3, 4, 1]
    q, k, v = torch.randn(3, 2, 2, 8, 4, dtype=torch.float64).unbind()
    out = sdpa(q, k, v, attn_mask=document_mask(document_ids(lengths)))
    start = 0
    for n in lengths:
        part = slice(start, start + n)
        alone = sdpa(q[..., part, :], k[..., part, :], v[..., part, :], is_causal=True)
        torch.testing.assert_close(out[..., part, :], alone, rtol=0, atol=1e-12)
        start += n


@pytest.mark.parametrize("window", [None, 3])
def test_document_block_mask_is_the_dense_mask(window: int | None) -> None:
    ids = document_ids(torch.tensor([[100, 60, 96], [256, 0, 0]]))
    mask = document_block_mask(ids, window=window, block_size=32)
    assert mask.shape == (2, 1, 256, 256)
    i, j = torch.arange(256)[:, None], torch.arange(256)[None]
    for b in range(2):
        got = mask.mask_mod(torch.tensor(b), torch.tensor(0), i, j)
        assert torch.equal(got, document_mask(ids[b], window=window))
    # blocks that no query of a block sees are skipped: fewer than a causal mask's
    causal = document_block_mask(length=256, block_size=32)
    assert mask.sparsity() > causal.sparsity()
