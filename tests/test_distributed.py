"""posenc across ranks: 2 spawned gloo processes, each checked against one process.

The ranks run every check of ``tests/distributed_checks.py`` in one spawn (joining
through a FileStore in a temporary directory: no network port, no address), save
what failed and why, and each check is a test here, asserted in this process. The
spawn has a hard deadline: a hang fails the tests instead of stalling them.

The single-process contract of :func:`posenc.shard_positions` and
:func:`posenc.shard_order` (their errors, the layouts on small cases) is here too.
"""

from __future__ import annotations

import time
from pathlib import Path

import distributed_checks as checks
import pytest
import torch
import torch.multiprocessing as mp

import posenc
from posenc import shard_order, shard_positions

WORLD = 2
#: Seconds the ranks may take, all checks together (about 10 s on 2 idle cores).
DEADLINE = 300.0


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, str | None]]:
    root = tmp_path_factory.mktemp("ranks")
    context = mp.start_processes(
        checks.main, args=(WORLD, str(root)), nprocs=WORLD, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + DEADLINE
    try:
        while not context.join(timeout=max(deadline - time.monotonic(), 0.1)):
            if time.monotonic() >= deadline:
                pytest.fail(f"the {WORLD} ranks did not finish within {DEADLINE:.0f} s: a hang")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    return {rank: torch.load(Path(root) / f"results{rank}.pt") for rank in range(WORLD)}


@pytest.mark.parametrize("name", list(checks.CHECKS))
def test_on_every_rank(outcomes: dict[int, dict[str, str | None]], name: str) -> None:
    for rank, results in outcomes.items():
        assert name in results, f"rank {rank} did not get to {name!r}"
        assert results[name] is None, f"rank {rank} of {WORLD}, {name}:\n{results[name]}"


# -- One process: shard_order and shard_positions --------------------------------------------


def test_contiguous_shards_are_torch_chunks_of_the_positions() -> None:
    for length, world in ((8, 2), (10, 4), (3, 4), (0, 2)):
        pieces = torch.arange(length).chunk(world)
        for rank in range(world):
            want = pieces[rank] if rank < len(pieces) else torch.zeros(0, dtype=torch.long)
            assert torch.equal(shard_positions(length, world, rank), want), (length, world, rank)


def test_zigzag_gives_rank_r_chunks_r_and_2w_minus_1_minus_r() -> None:
    chunks = torch.arange(24).view(6, 4)  # W = 3: six chunks of four
    for rank in range(3):
        want = torch.cat((chunks[rank], chunks[5 - rank]))
        assert torch.equal(shard_positions(24, 3, rank, layout="zigzag"), want)
    order = shard_order(24, 3, layout="zigzag")
    assert torch.equal(order[shard_order(24, 3, layout="zigzag", inverse=True)], torch.arange(24))


def test_packed_documents_restart_their_positions_and_each_is_balanced() -> None:
    docs = [4, 8]
    got = [shard_positions(12, 2, r, layout="zigzag", lengths=docs) for r in range(2)]
    assert got[0].tolist() == [0, 3, 0, 1, 6, 7]
    assert got[1].tolist() == [1, 2, 2, 3, 4, 5]
    contiguous = shard_positions(12, 2, 1, lengths=torch.tensor(docs))
    assert torch.equal(contiguous, posenc.positions_from_lengths(docs)[6:])


def test_the_ranks_hold_every_position_once() -> None:
    for layout in ("contiguous", "zigzag"):
        held = torch.cat([shard_positions(16, 4, r, layout=layout) for r in range(4)])
        assert torch.equal(held.sort().values, torch.arange(16)), layout


def test_shard_positions_device_and_dtype() -> None:
    out = shard_positions(8, 2, 1, layout="zigzag", device="meta")
    assert out.device.type == "meta"
    assert out.dtype == torch.int64
    assert shard_order(8, 2, device="meta").device.type == "meta"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"rank": 2}, ValueError, r"rank must lie in \[0, world_size\) = \[0, 2\), got 2"),
        ({"rank": -1}, ValueError, r"rank must lie in \[0, world_size\)"),
        ({"rank": 1.0}, TypeError, "rank must be an int, got float"),
        ({"world_size": 0}, ValueError, "world_size must be a positive int, got 0"),
        ({"length": -1}, ValueError, "length must be an int >= 0, got -1"),
        ({"layout": "ring"}, ValueError, r"layout must be one of \('contiguous', 'zigzag'\)"),
        (
            {"length": 6, "layout": "zigzag"},
            ValueError,
            r"length=6 is not a multiple of 2 \* world_size = 4",
        ),
        (
            {"lengths": [4, 6], "length": 10, "layout": "zigzag"},
            ValueError,
            r"lengths holds 6, which is not a multiple of 2 \* world_size = 4: .* each document",
        ),
        ({"lengths": [4, 3]}, ValueError, r"lengths must sum to length=8, .*summing to 7"),
        ({"lengths": [4, -4, 8]}, ValueError, "lengths must be >= 0"),
    ],
)
def test_shard_positions_errors_name_the_argument(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    args = {"length": 8, "world_size": 2, "rank": 0} | kwargs
    with pytest.raises(error, match=match):
        shard_positions(**args)  # type: ignore[arg-type]
