"""random_positions against the draw of Ruoss et al. (2023)'s own code.

The authors' sampler is ``noisy_fixed_positional_encodings`` in
google-deepmind/randomized_positional_encodings (``models/positional_encodings.py``):
``jax.random.choice(rng, jnp.arange(noise_max_length), shape=(sequence_length,),
replace=False)``, then ``jnp.sort``, and the rows of a table at those indices. Their
repository is not a package (its requirements need a git checkout, and nothing here
reaches GitHub), so the test makes the same call to jax with the same arguments and
compares the laws of the two draws: two generators cannot agree draw for draw, but they
must agree in distribution. A rule that favoured near positions, a window, or draws with
replacement would not.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import pytest
import scipy.stats as stats  # jax's own dependency
import torch

from posenc import PositionalEncoding, random_positions

DRAWS = 20_000


def _authors(length: int, max_position: int, draws: int, seed: int) -> torch.Tensor:
    """``draws`` independent draws of the authors' call, as a ``(draws, length)`` tensor."""

    def one(key: object) -> object:
        indexes = jax.random.choice(key, jnp.arange(max_position), shape=(length,), replace=False)
        return jnp.sort(indexes)

    keys = jax.random.split(jax.random.key(seed), draws)
    return torch.tensor(jax.device_get(jax.vmap(one)(keys)).tolist(), dtype=torch.long)


def _ours(length: int, max_position: int, draws: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return random_positions(length, max_position, batch=draws, generator=g)


@pytest.mark.parametrize(("length", "max_position"), [(1, 4), (2, 5), (3, 6), (4, 7)])
def test_every_subset_comes_as_often_as_in_the_authors_draw(
    length: int, max_position: int
) -> None:
    theirs = _authors(length, max_position, DRAWS, seed=length)
    ours = _ours(length, max_position, DRAWS, seed=length)
    subsets = list(itertools.combinations(range(max_position), length))
    table = [
        [sum(1 for row in draw.tolist() if tuple(row) == s) for s in subsets]
        for draw in (theirs, ours)
    ]
    # both draws cover every subset and only subsets (sorted, distinct, in range)
    assert sum(table[0]) == sum(table[1]) == DRAWS
    assert all(c > 0 for row in table for c in row)
    # the same law: a two-sample chi-square test, and each against C(n, k) equal cells
    assert stats.chi2_contingency(table).pvalue > 1e-3, table
    uniform = [DRAWS / math.comb(max_position, length)] * len(subsets)
    for row in table:
        assert stats.chisquare(row, uniform).pvalue > 1e-3, row


@pytest.mark.parametrize(("length", "max_position"), [(20, 160), (40, 48)])
def test_each_order_statistic_has_the_authors_law(length: int, max_position: int) -> None:
    # The tasks' setting (train length 20, a range 4× the longest test length of 40),
    # and a nearly full range. The k-th smallest of a uniform subset has mean
    # (k + 1)(N + 1)/(n + 1) - 1 (0-based k): checked on both, then the two compared.
    theirs = _authors(length, max_position, DRAWS // 4, seed=7).double()
    ours = _ours(length, max_position, DRAWS // 4, seed=7).double()
    k = torch.arange(length, dtype=torch.float64)
    mean = (k + 1) * (max_position + 1) / (length + 1) - 1
    for draw in (theirs, ours):
        sd = draw.std(0) / math.sqrt(draw.shape[0])
        assert bool(((draw.mean(0) - mean).abs() < 5 * sd + 1e-9).all())
    for column in {0, length // 2, length - 1}:
        result = stats.ks_2samp(theirs[:, column].numpy(), ours[:, column].numpy())
        assert result.pvalue > 1e-3, (column, result)
    gaps = stats.ks_2samp(theirs.diff(dim=1).flatten().numpy(), ours.diff(dim=1).flatten().numpy())
    assert gaps.pvalue > 1e-3, gaps


def test_a_full_range_and_an_impossible_one_as_the_authors_code() -> None:
    # length == max_position: the only subset, in order, as a sorted permutation is.
    assert torch.equal(_authors(6, 6, 3, seed=0), _ours(6, 6, 3, seed=0))
    assert torch.equal(_ours(6, 6, 1, seed=0)[0], torch.arange(6))
    # more positions than the range holds: jax refuses the draw, and so does posenc
    with pytest.raises(ValueError, match=r"larger sample \(size 7\) than population"):
        _authors(7, 6, 1, seed=0)
    with pytest.raises(ValueError, match="leaves no room"):
        _ours(7, 6, 1, seed=0)


def test_positions_gather_the_rows_the_authors_function_gathers() -> None:
    # The authors' function returns a table's rows at the sorted indices. Given posenc's
    # sinusoid table as that table, their rows are what PositionalEncoding adds at
    # ``positions=`` the same indices.
    length, max_position, d = 5, 20, 8
    encoding = PositionalEncoding(d, 0.0, max_len=max_position)
    table = encoding(torch.zeros(1, max_position, d))[0]
    key = jax.random.key(3)
    indexes = jnp.sort(
        jax.random.choice(key, jnp.arange(max_position), shape=(length,), replace=False)
    )
    rows = jnp.asarray(table.numpy())[indexes]
    positions = torch.tensor(jax.device_get(indexes).tolist())
    assert bool((positions[1:] > positions[:-1]).all())
    got = encoding(torch.zeros(1, length, d), positions=positions)[0]
    assert torch.equal(got, torch.tensor(jax.device_get(rows).tolist(), dtype=torch.float32))
