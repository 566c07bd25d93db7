"""random_positions: Ruoss et al. (2023)'s sorted random positions from a longer range."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch

import posenc
from posenc import random_positions


def test_positions_are_distinct_sorted_and_in_the_range() -> None:
    g = torch.Generator().manual_seed(1)
    for n, top in [(0, 0), (0, 5), (1, 1), (5, 5), (7, 40), (40, 160)]:
        pos = random_positions(n, top, generator=g)
        assert pos.dtype == torch.int64
        assert pos.shape == (n,)
        assert bool((pos[1:] > pos[:-1]).all())  # strictly increasing: sorted and distinct
        assert n == 0 or (int(pos.min()) >= 0 and int(pos.max()) < top)
    assert torch.equal(random_positions(5, 5), torch.arange(5))  # no room: every position


def test_a_generator_makes_the_draw_reproducible() -> None:
    a = random_positions(10, 1000, generator=torch.Generator().manual_seed(3))
    b = random_positions(10, 1000, generator=torch.Generator().manual_seed(3))
    c = random_positions(10, 1000, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_every_subset_is_equally_likely() -> None:
    # The authors' rule (google-deepmind/randomized_positional_encodings,
    # noisy_fixed_positional_encodings): a choice without replacement, sorted. Each of
    # the C(5, 2) = 10 subsets then has probability 1/10; a rule that favoured near
    # positions (sorting uniform draws with replacement, a random walk) would not.
    g = torch.Generator().manual_seed(0)
    draws = 5000
    counts = Counter(tuple(random_positions(2, 5, generator=g).tolist()) for _ in range(draws))
    assert set(counts) == set(itertools.combinations(range(5), 2))
    # binomial sd of a count: sqrt(5000 · 0.1 · 0.9) ≈ 21; 5 sd either side
    assert all(abs(c - draws / 10) < 106 for c in counts.values()), counts


def test_a_batch_draws_each_row_on_its_own() -> None:
    g = torch.Generator().manual_seed(5)
    rows = random_positions(6, 50, batch=4, generator=g)
    assert rows.shape == (4, 6)
    g = torch.Generator().manual_seed(5)
    one_by_one = torch.stack([random_positions(6, 50, generator=g) for _ in range(4)])
    assert torch.equal(rows, one_by_one)
    assert len({tuple(r) for r in rows.tolist()}) == 4


def test_the_device_and_the_global_generator() -> None:
    torch.manual_seed(2)
    a = random_positions(4, 30, device="meta")
    assert a.device.type == "meta"
    assert a.shape == (4,)
    torch.manual_seed(2)
    b = random_positions(4, 30)
    torch.manual_seed(2)
    assert torch.equal(b, random_positions(4, 30))


def test_random_positions_feed_a_scheme() -> None:
    # Positions from the range of the longest test length: RoPE's scores then depend
    # on their distances only, as at those positions.
    pos = random_positions(6, 80, generator=torch.Generator().manual_seed(0))
    rope = posenc.RotaryEmbedding(8)
    q, k = torch.randn(2, 1, 1, 6, 8, dtype=torch.float64).unbind()
    scores = rope(q, positions=pos) @ rope(k, positions=pos).transpose(-1, -2)
    shifted = rope(q, positions=pos + 7) @ rope(k, positions=pos + 7).transpose(-1, -2)
    torch.testing.assert_close(scores, shifted)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((-1, 5), {}, ValueError, "length must be >= 0"),
        ((6, 5), {}, ValueError, "max_position=5 leaves no room for 6"),
        ((2, 2**62 + 1), {}, ValueError, "past the position domain"),
        ((2, 5), {"batch": 0}, ValueError, "batch"),
        ((2.0, 5), {}, TypeError, "length"),
        ((2, 5.0), {}, TypeError, "max_position"),
    ],
)
def test_bad_arguments_are_refused(args, kwargs, error, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        random_positions(*args, **kwargs)
