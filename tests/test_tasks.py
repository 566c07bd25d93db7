"""The tasks harness (benchmarks/tasks.py): the tasks' answers, the schemes, the runs' files.

Nothing here trains long: the models train a few steps or none, and no timing is asserted.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import tasks  # benchmarks/ is on the path: the harness's own module


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _split(task: str, size: int, count: int = 50) -> list[tuple[list[int], list[int]]]:
    tokens, answer = tasks.instances(task, size, count, torch.Generator().manual_seed(size))
    assert tokens.shape == answer.shape
    assert tokens.shape[1] == tasks.sequence_length(task, size)
    assert bool((tokens >= 0).all())
    assert bool((tokens < tasks.VOCAB).all())
    return [(t[~a].tolist(), t[a].tolist()) for t, a in zip(tokens, answer, strict=True)]


@pytest.mark.parametrize("size", [1, 5, 16, 64])
def test_copy_and_reverse_answer_the_prompt(size: int) -> None:
    for prompt, answer in _split("copy", size):
        assert prompt[-1] == tasks.SEP
        assert answer == prompt[:-1]
    for prompt, answer in _split("reverse", size):
        assert answer == prompt[:-1][::-1]


@pytest.mark.parametrize("size", [1, 7, 40])
def test_count_answers_the_queries_occurrences_mod_10(size: int) -> None:
    for prompt, answer in _split("count", size, 200):
        *symbols, sep, query = prompt
        assert sep == tasks.SEP
        assert answer == [tasks.DIGIT + symbols.count(query) % 10]


@pytest.mark.parametrize("size", [1, 4, 13, 64])
def test_selective_copy_answers_the_symbols_among_the_noise(size: int) -> None:
    for prompt, answer in _split("select", size):
        slots = prompt[:-1]
        assert len(slots) == size
        assert len(answer) == max(1, size // 4)
        assert [s for s in slots if s != tasks.NOISE] == answer


@pytest.mark.parametrize("size", [1, 8, 64])
def test_flipflop_reads_the_last_written_bit(size: int) -> None:
    tokens, answer = tasks.instances("flipflop", size, 200, torch.Generator().manual_seed(1))
    reads = 0
    for row, asked in zip(tokens.tolist(), answer.tolist(), strict=True):
        assert row[0] == tasks.WRITE
        last = None
        for t in range(0, len(row), 2):
            op, bit = row[t], row[t + 1]
            assert bit in (0, 1)
            assert asked[t + 1] == (op == tasks.READ)
            assert not asked[t]
            if op == tasks.WRITE:
                last = bit
            elif op == tasks.READ:
                assert bit == last
                reads += 1
    assert size == 1 or reads > 0


def test_unknown_task_and_scheme_are_refused() -> None:
    with pytest.raises(ValueError, match="task must be one of"):
        tasks.instances("parity", 3, 1, torch.Generator())
    with pytest.raises(ValueError, match="scheme must be one of"):
        tasks.Model(tasks.Config("copy", "t6", 0), 10, 40)


@pytest.mark.parametrize("scheme", tasks.SCHEMES)
def test_every_scheme_trains_and_is_evaluated_at_every_length(scheme: str) -> None:
    config = tasks.Config("copy", scheme, 0, n=4, steps=2, batch=4, d_model=16, eval_instances=4)
    torch.manual_seed(0)
    model = tasks.Model(config, *tasks.lengths(config))
    before = [p.detach().clone() for p in model.parameters()]
    tasks.train_steps(model, config, 2, torch.Generator().manual_seed(0))
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    result = tasks.evaluate(model, config, torch.Generator().manual_seed(1))
    for m in ("1", "2", "4"):
        if scheme == "learned" and m != "1":
            # the table holds the longest training sequence's rows: n/a past them
            assert result["accuracy"][m] is None
            assert result["exact"][m] is None
        else:
            assert 0.0 <= result["accuracy"][m] <= 1.0
            assert 0.0 <= result["exact"][m] <= result["accuracy"][m] + 1e-9


def test_randomized_positions_come_from_four_times_the_longest_test() -> None:
    config = tasks.Config("copy", "rope+random", 0, n=4)
    train_tokens, top = tasks.lengths(config)
    assert train_tokens == 9  # 4 symbols, the separator, 4 answers
    assert top == 4 * 33  # the longest test: 16 symbols, 33 tokens
    model = tasks.Model(config, train_tokens, top)
    seen: list[torch.Tensor] = []
    rope = model.rope
    assert rope is not None
    original = rope.forward

    def spy(x, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(kwargs["positions"])
        return original(x, **kwargs)

    rope.forward = spy  # type: ignore[method-assign]
    model(torch.zeros(2, 9, dtype=torch.long), generator=torch.Generator().manual_seed(0))
    assert seen
    assert all(int(p.max()) < top and bool((p[1:] > p[:-1]).all()) for p in seen)
    assert not torch.equal(seen[0], torch.arange(9))


def test_a_run_writes_its_file_and_a_rerun_skips_it(tmp_path: Path) -> None:
    config = tasks.Config("count", "alibi", 3, n=3, steps=2, batch=4, d_model=16, eval_instances=8)
    assert not tasks.done(tmp_path, config)
    tasks.build([config], tmp_path, workers=1)
    record = json.loads(tasks.path(tmp_path, config).read_text())
    assert {"task", "scheme", "seed", "train_length", "accuracy", "exact"} <= set(record)
    assert (record["task"], record["scheme"], record["seed"]) == ("count", "alibi", 3)
    assert record["train_length"] == 3
    assert set(record["accuracy"]) == {"1", "2", "4"}
    assert tasks.done(tmp_path, config)
    assert not tasks.done(tmp_path, replace(config, steps=3))  # another config: redone
    # a rerun at one thread is the same run, bit for bit
    again = tasks.run(config)
    assert again["accuracy"] == record["accuracy"]


def test_the_plan_counts_what_remains(tmp_path: Path) -> None:
    base = tasks.Config("copy", "nope", 0, n=3, steps=10, batch=4, d_model=16)
    todo = tasks.configs(["copy", "flipflop"], ["nope", "fire"], [0, 1], base)
    assert len(todo) == 8
    text = tasks.plan(todo, workers=2)
    assert text.startswith("8 runs remain")
    assert "estimated wall time at 2 workers" in text


def _record(scheme: str, one: float, two: float, four: float) -> dict[str, object]:
    return {"task": "copy", "scheme": scheme, "accuracy": {"1": one, "2": two, "4": four}}


def test_the_quick_checks_fail_where_a_scheme_is_at_chance_or_randomization_loses() -> None:
    good = [
        _record("rope", 0.7, 0.3, 0.12),
        _record("rope+random", 0.6, 0.4, 0.28),
        _record("nope", 0.3, 0.2, 0.1),
    ]
    checks = tasks.quick_checks(good)
    assert len(checks) == 5
    assert all(holds for holds, _ in checks)
    at_chance = [*good[:2], _record("nope", 0.125, 0.2, 0.1)]
    assert [h for h, w in tasks.quick_checks(at_chance) if w.startswith("nope")] == [False]
    losing_far = [_record("rope", 0.7, 0.3, 0.3), _record("rope+random", 0.6, 0.4, 0.28)]
    assert [h for h, _ in tasks.quick_checks(losing_far)] == [True, True, True, False]
    losing_near = [_record("rope", 0.7, 0.4, 0.1), _record("rope+random", 0.6, 0.4, 0.28)]
    assert [h for h, _ in tasks.quick_checks(losing_near)] == [True, True, False, True]
