"""CoPE (Golovneva et al., 2024): contextual positions, checked against the authors' layer."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from posenc import CoPE, subsequent_mask


def _authors_logits(query: Tensor, key: Tensor, emb: Tensor, npos: int, mask: Tensor) -> Tensor:
    """The attention logits of CoPE's layer in the authors' code, re-derived.

    ``facebookresearch/RAM``, ``projects/cope/src/cope/context_position.py``,
    ``ContextPosSelfAttn.forward`` with its defaults (gates from the keys, the sum
    scaled after): gates ``σ(q·k / √d)`` times the 0/1 mask; positions summed from
    the query backwards and clamped to ``npos - 1``; ``q @ emb`` at the floor and
    the ceiling, mixed by the fraction; ``(q·k + that) / √d + log(mask)``.
    """
    d = query.shape[-1]
    scores = query @ key.transpose(-1, -2)
    gates = torch.sigmoid(scores / math.sqrt(d)) * mask
    pos = torch.flip(torch.cumsum(torch.flip(gates, [-1]), -1), [-1]).clamp(max=npos - 1)
    fixed = query @ emb
    lo, hi = pos.floor().long(), pos.ceil().long()
    frac = pos - lo
    pos_logits = fixed.gather(-1, hi) * frac + fixed.gather(-1, lo) * (1 - frac)
    return (scores + pos_logits) / math.sqrt(d) + mask.log()


@pytest.mark.parametrize("npos", [3, 9, 17])
def test_the_logits_and_gradients_are_the_authors(npos: int) -> None:
    torch.manual_seed(npos)
    b, length, d = 3, 12, 8
    q = (2 * torch.randn(b, length, d, dtype=torch.float64)).requires_grad_()
    k = torch.randn(b, length, d, dtype=torch.float64)
    emb = torch.randn(d, npos, dtype=torch.float64, requires_grad=True)
    mask = subsequent_mask(length).to(torch.float64).expand(b, length, length)
    want = _authors_logits(q, k, emb, npos, mask)

    cope = CoPE(d, npos).double()
    with torch.no_grad():
        cope.table.copy_(emb / math.sqrt(d))  # theirs scales the sum: the table by 1/√d
    logits = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(mask == 0, -math.inf)
    got = logits + cope(q, logits)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)

    weights = torch.randn(b, length, length, dtype=torch.float64).tril()
    seen = mask.bool()
    (g_q, g_emb) = torch.autograd.grad((want[seen] * weights[seen]).sum(), (q, emb))
    (h_q, h_table) = torch.autograd.grad((got[seen] * weights[seen]).sum(), (q, cope.table))
    torch.testing.assert_close(h_q, g_q, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(h_table / math.sqrt(d), g_emb, rtol=1e-10, atol=1e-12)
    assert bool(h_q.abs().sum() > 0)


def test_positions_count_the_keys_whose_gates_open() -> None:
    # Open gates (logit +40) on the keys marked 1, shut ones (-40) elsewhere: the
    # position of key j for the last query is the number of marked keys from j on.
    marked = torch.tensor([1, 0, 0, 1, 1, 0, 1, 0], dtype=torch.float64)
    logits = ((2 * marked - 1) * 40).expand(8, 8).masked_fill(~subsequent_mask(8)[0], -math.inf)
    pos = CoPE(4, 16).positions(logits)
    want = marked.flip(0).cumsum(0).flip(0)
    torch.testing.assert_close(pos[-1], want, rtol=0, atol=1e-15)
    assert torch.equal(pos.triu(1), torch.zeros(8, 8, dtype=torch.float64))  # masked: 0
    # the table's last row holds every position past it
    assert float(CoPE(4, 3).positions(logits).max()) == 2.0


def test_integer_positions_read_the_table_and_fractions_interpolate() -> None:
    cope = CoPE(2, 6)
    with torch.no_grad():
        cope.table.copy_(torch.tensor([[0.0, 1.0, 4.0, 9.0, 16.0, 25.0], [0.0] * 6]))
    q = torch.tensor([[1.0, 0.0]])
    for p, want in [(2.0, 4.0), (2.5, 6.5), (0.25, 0.25), (4.75, 22.75)]:
        # eight keys whose gates are p / 8 each: key 0 sits at p
        logits = torch.logit(torch.tensor([[p / 8] * 8]), eps=0).to(torch.float32)
        got = cope(q, logits)[0, 0]
        torch.testing.assert_close(got, torch.tensor(want), rtol=1e-5, atol=1e-5)


def test_a_new_table_adds_nothing() -> None:
    q, logits = torch.randn(2, 5, 4), torch.randn(2, 5, 5)
    assert torch.equal(CoPE(4, 6)(q, logits), torch.zeros(2, 5, 5))


@pytest.mark.parametrize(
    ("query", "logits"),
    [((2, 5, 3), (2, 5, 5)), ((2, 5, 4), (2, 4, 5)), ((3, 5, 4), (2, 5, 5))],
)
def test_shapes_that_disagree_are_refused(query: tuple[int, ...], logits: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="CoPE takes query"):
        CoPE(4, 6)(torch.randn(query), torch.randn(logits))


@pytest.mark.parametrize(
    ("args", "error"), [((0, 4), ValueError), ((4, 0), ValueError), ((4.0, 4), TypeError)]
)
def test_bad_sizes_are_refused(args: tuple[object, object], error: type) -> None:
    with pytest.raises(error):
        CoPE(*args)  # type: ignore[arg-type]


def test_one_export_serves_every_length() -> None:
    torch.manual_seed(0)
    cope = CoPE(8, 16)
    with torch.no_grad():
        cope.table.normal_()
    lq, lk = torch.export.Dim("L_q", min=2, max=64), torch.export.Dim("L_k", min=2, max=64)
    q, logits = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 7)
    program = torch.export.export(
        cope, (q, logits), dynamic_shapes={"query": {2: lq}, "logits": {2: lq, 3: lk}}
    )
    for n, m in [(5, 7), (9, 30), (40, 3)]:
        q, logits = torch.randn(2, 3, n, 8), torch.randn(2, 3, n, m)
        assert torch.equal(program.module()(q, logits), cope(q, logits))


@pytest.mark.parametrize(
    ("q_dtype", "logits_dtype"),
    [
        (torch.float32, torch.float32),
        (torch.bfloat16, torch.bfloat16),
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float16),
    ],
)
def test_the_output_dtype_is_the_promotion_of_query_and_logits(
    q_dtype: torch.dtype, logits_dtype: torch.dtype
) -> None:
    cope = CoPE(4, 8)
    with torch.no_grad():
        cope.table.normal_()
    q = torch.randn(2, 5, 4).to(q_dtype)
    logits = torch.randn(2, 5, 5).to(logits_dtype)
    out = cope(q, logits)
    assert out.dtype == torch.promote_types(q_dtype, logits_dtype)
    # the same numbers as the float64 computation, to the output's precision
    want = CoPE(4, 8).double()
    with torch.no_grad():
        want.table.copy_(cope.table.to(q_dtype))
    ref = want(q.double(), logits.double())
    # to the precision of the coarser input: q·e in query's dtype, the gates in logits'
    tols = {torch.float32: 1e-5, torch.float16: 2e-2, torch.bfloat16: 5e-2}
    tol = max(tols[q_dtype], tols[logits_dtype])
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)
