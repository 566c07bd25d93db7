"""Packed rows against transformers' own builders: cu_seqlens, document ids, the packed mask.

transformers builds flash-attn's varlen arguments from position ids
(``modeling_flash_attention_utils.prepare_fa_kwargs_from_position_ids``) and finds
packed documents in position ids (``masking_utils.find_packed_sequence_indices``),
and masks them with ``packed_sequence_mask_function``. posenc's helpers must agree
with each on the packings the tests build.
"""

from __future__ import annotations

import pytest
import torch

from posenc import (
    cu_seqlens,
    document_ids,
    document_mask,
    documents_from_positions,
    positions_from_lengths,
)

PACKINGS = [[3, 2], [1, 1, 1], [5], [4, 7, 2, 9], [1, 30]]


@pytest.mark.parametrize("lengths", PACKINGS)
def test_cu_seqlens_is_what_transformers_builds_from_position_ids(lengths: list[int]) -> None:
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    positions = positions_from_lengths(lengths)[None]
    (cu_q, cu_k), (max_q, _) = prepare_fa_kwargs_from_position_ids(positions)
    assert torch.equal(cu_seqlens(lengths), cu_q)
    assert torch.equal(cu_q, cu_k)
    assert int(max_q) == max(lengths)


@pytest.mark.parametrize("lengths", PACKINGS)
def test_documents_are_transformers_packed_sequence_indices(lengths: list[int]) -> None:
    from transformers.masking_utils import find_packed_sequence_indices

    positions = positions_from_lengths(lengths)[None]
    theirs = find_packed_sequence_indices(positions)
    ours = documents_from_positions(positions)
    if theirs is None:  # one document: transformers says None
        assert len(lengths) == 1
        assert not ours.any()
    else:
        assert torch.equal(ours, theirs)
        assert torch.equal(ours[0], document_ids(lengths))


@pytest.mark.parametrize("lengths", PACKINGS)
def test_document_mask_is_transformers_packed_causal_mask(lengths: list[int]) -> None:
    from transformers.masking_utils import (
        and_masks,
        causal_mask_function,
        packed_sequence_mask_function,
    )

    ids = document_ids(lengths)[None]
    mask_function = and_masks(causal_mask_function, packed_sequence_mask_function(ids))
    total = ids.shape[-1]
    zero, rows = torch.tensor(0), range(total)
    theirs = torch.tensor(
        [
            [bool(mask_function(zero, zero, torch.tensor(i), torch.tensor(j))) for j in rows]
            for i in rows
        ]
    )
    assert torch.equal(document_mask(ids[0]), theirs)
