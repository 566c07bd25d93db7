"""The trained comparison's harness (benchmarks/train*.py): the method, resuming, the analysis.

Two tests train long enough to see Press et al.'s Figure 1 (2022): trained at L_train, ALiBi's
loss stays flat to 8 x L_train while the sinusoid's rises. The budgets, checked
single-threaded: ALiBi's 8x loss is within 0.01 of its 1x loss from 100 steps on; the
sinusoid's 8x loss rises by ~0.5 at 300 steps. The rest trains a few steps or none. No
timing is asserted.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import posenc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import train  # benchmarks/ is on the path: the harness's own modules
import train_analysis as analysis
import train_method as method

SEED = 0
SMALL = method.SCALES["small"]


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """The budgets were checked single-threaded: the same arithmetic here."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def config(scheme: str = "rope", steps: int = 2, **changes: Any) -> method.Config:
    return replace(method.Config(scheme, SEED, 3e-3, "main", SMALL, steps), **changes)


# -- Press et al.'s Figure 1, in the quick budget ---------------------------------------------
def ends(scheme: str, steps: int) -> tuple[float, float]:
    """Test loss at 1x and 8x L_train of ``scheme`` trained for ``steps`` from SEED."""
    model, data, _ = method.pretrain(config(scheme, steps))
    result = method.evaluate(model, data, "test")
    return result["loss"]["1"], result["loss"]["8"]


def test_alibi_stays_flat_to_8x_the_training_length() -> None:
    at_1x, at_8x = ends("alibi", 100)
    assert at_1x < 2.5  # it learned something: the untrained loss is log(256) = 5.5
    assert abs(at_8x - at_1x) <= 0.05, (at_1x, at_8x)


def test_sinusoid_degrades_past_the_training_length() -> None:
    at_1x, at_8x = ends("sinusoid", train.QUICK.scales["small"][0])
    assert at_1x < 2.5
    assert at_8x >= at_1x + 0.3, (at_1x, at_8x)


# -- the data ----------------------------------------------------------------------------------
def test_train_validation_and_test_are_disjoint_and_cover_the_text() -> None:
    data = method.Data.load()
    start, cut, middle, end = data.bounds
    assert (start, end) == (0, len(data.text))
    assert 0 < cut < middle < end
    assert end - cut == int(method.HELD_OUT * end)  # the held-out 10%, halved
    parts = [data.part(name) for name in ("train", "validation", "test")]
    assert sum(len(part) for part in parts) == len(data.text)
    assert torch.equal(torch.cat(parts), data.text)
    # a batch reads the train part only: every window lies in it
    generator = torch.Generator().manual_seed(SEED)
    inputs, targets = data.batch(generator, 8, 64)
    assert inputs.shape == targets.shape == (8, 64)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    # the test blocks are the whole test part, consecutive, cut at 8 x L_train
    blocks = data.blocks("test", 512)
    assert len(blocks) == (len(parts[2]) - 1) // 512
    assert torch.equal(blocks[:, :-1].reshape(-1), parts[2][: 512 * len(blocks)])


def test_the_data_hash_is_the_texts() -> None:
    import hashlib

    data = method.Data.load()
    assert data.sha256 == hashlib.sha256(method.corpus()).hexdigest()


# -- the model and its training ----------------------------------------------------------------
def test_learned_table_starts_at_the_sinusoids_scale() -> None:
    torch.manual_seed(SEED)
    model = method.Decoder("learned")
    table = next(model.absolute.parameters()).detach()
    sinusoid_rms = float(posenc.sinusoidal_table(torch.arange(64), 64).pow(2).mean().sqrt())
    assert sinusoid_rms == pytest.approx(0.5**0.5, abs=1e-6)
    assert method.learned_init_std(SMALL) == pytest.approx(sinusoid_rms, abs=1e-6)
    # the table's own std (4,096 draws) and the token rows' size (Xavier x sqrt(d_model))
    assert float(table.std()) == pytest.approx(sinusoid_rms, rel=0.05)
    tokens = model.embed(torch.arange(256)).detach()
    assert 0.5 < float(tokens.std()) < 0.8  # the scale the table is put beside


def test_weight_decay_spares_position_tables_norms_and_biases() -> None:
    for scheme in ("learned", "t5", "rope"):
        model = method.Decoder(scheme)
        decay, rest = method.parameter_groups(model, 0.01)
        assert decay["weight_decay"] == 0.01
        assert rest["weight_decay"] == 0.0
        decayed = {id(p) for p in decay["params"]}
        spared = {id(p) for p in rest["params"]}
        assert not decayed & spared
        assert decayed | spared == {id(p) for p in model.parameters()}
        for name, parameter in model.named_parameters():
            position = name.startswith(("absolute.", "bias."))
            norm_or_bias = ".ln_" in name or name.startswith("ln_") or name.endswith(".bias")
            expected_decay = not (position or norm_or_bias)
            assert (id(parameter) in decayed) == expected_decay, (scheme, name)
    assert id(method.Decoder("learned").embed.lut.weight) is not None


def test_rerun_at_a_fixed_thread_count_is_bit_identical() -> None:
    # The learned table: its evaluation stops at 1x, so the check costs little.
    def strip(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "time"} for r in records]

    first = train.work(train.Job(config("learned"), ()), None)
    again = train.work(train.Job(config("learned"), ()), None)
    assert strip(first) == strip(again)
    assert first[0]["threads"] == 1
    other = train.work(train.Job(config("learned", seed=SEED + 1), ()), None)
    assert other[0]["loss"]["1"] != first[0]["loss"]["1"]  # the seed is used


def test_learned_table_refuses_past_its_rows() -> None:
    torch.manual_seed(SEED)
    model = method.Decoder("learned").eval()
    tokens = torch.zeros(1, 65, dtype=torch.long)
    with torch.no_grad():
        assert model(tokens[:, :-1]).shape == (1, 64, method.VOCAB)
        with pytest.raises(IndexError, match=r"position 64 .*learned table of max_len=64"):
            model(tokens)
    result = method.evaluate(model, method.Data.load(), "test")
    assert result["loss"]["1"] is not None
    assert [result["loss"][m] for m in ("2", "4", "8")] == [None, None, None]
    assert "cannot extrapolate" in result["refused"]


def test_every_scheme_comes_from_the_public_api() -> None:
    kinds = {
        "nope": torch.nn.Dropout,
        "sinusoid": posenc.PositionalEncoding,
        "learned": posenc.LearnedPositionalEmbedding,
    }
    for scheme in method.SCHEMES:
        model = method.Decoder(scheme)
        assert type(model.absolute) is kinds.get(scheme, torch.nn.Dropout), scheme
        assert (model.rope is not None) == (scheme == "rope")
        biases = {"alibi": posenc.ALiBi, "t5": posenc.RelativePositionBias}
        expected = biases.get(scheme.split("-")[0])
        assert (type(model.bias) if model.bias is not None else None) is expected, scheme

    def distance(scheme: str, scale: method.Scale = SMALL) -> int:
        bias = method.Decoder(scheme, scale).bias
        assert isinstance(bias, posenc.RelativePositionBias)
        return bias.max_distance

    assert (distance("t5"), distance("t5-128")) == (64, 128)
    long = method.SCALES["long"]
    assert distance("t5", long) == long.L_train


def test_unknown_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match=r"scheme must be one of .*'alibi'.*got 'xpos'"):
        method.Decoder("xpos")


def test_dynamic_ntk_keeps_a_fixed_factor() -> None:
    for multiple in (2, 4, 8):
        dynamic = method.inference_scaling("dynamic", multiple, 64)
        assert dynamic is not None
        assert dynamic["factor"] == method.DYNAMIC_FACTOR
        linear = method.inference_scaling("linear", multiple, 64)
        assert linear is not None
        assert linear["factor"] == multiple
    assert method.inference_scaling("yarn", 1, 64) is None
    assert method.rope_scaling("none", 4, 64) is None
    yarn = method.rope_scaling("yarn", 4, 64)
    assert yarn == {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 64,
        "max_position_embeddings": 64,
    }


# -- passkey retrieval -------------------------------------------------------------------------
def test_passkey_row_hides_the_key_at_the_distance_asked() -> None:
    generator = torch.Generator().manual_seed(SEED)
    for distance in (method.FIXED_DISTANCE, 32, 100):
        row, answer = method.passkey_row(generator, 140, distance)
        text = bytes(row.tolist())
        assert len(text) == 140
        assert answer == 140 - method.DIGITS
        digits = text[answer:]
        assert digits.isdigit()
        assert len(digits) == method.DIGITS
        assert text[answer - len(method.QUERY) : answer] == method.QUERY
        key = answer - distance  # the key's first digit
        assert text[key - len(method.KEY) : key] == method.KEY
        assert text[key : key + method.DIGITS] == digits
        assert text.count(method.KEY) == 1
    with pytest.raises(ValueError, match=r"distance must be in \[11, 131\], got 200"):
        method.passkey_row(generator, 140, 200)
    examples, answer = method.passkey_examples(SEED, 64, 4)
    assert examples.shape == (4, answer + method.DIGITS)
    assert examples[:, :-1].shape[1] == 64  # the model reads exactly the length asked for
    text = bytes(examples[0].tolist())
    assert text.index(method.KEY) == 8  # the key right after the prefix of filler
    again, _ = method.passkey_examples(SEED, 64, 4)
    assert torch.equal(examples, again)  # the evaluation's examples are fixed by the seed
    assert len({bytes(row[answer:].tolist()) for row in examples}) > 1


def test_passkey_score_is_exact_match_of_every_digit() -> None:
    examples, answer = method.passkey_examples(SEED, 32, 3)
    # logits that put all their mass on the true next byte: every example right
    logits = torch.nn.functional.one_hot(examples[:, 1:], 256).float()
    assert method.passkey_correct(logits, examples, answer).tolist() == [True, True, True]
    # one wrong digit (the last of the second example): that example fails, alone
    wrong = logits.clone()
    last = answer - 1 + method.DIGITS - 1
    wrong[1, last] = torch.nn.functional.one_hot((examples[1, last + 1] + 1) % 256, 256).float()
    assert method.passkey_correct(wrong, examples, answer).tolist() == [True, False, True]
    # a wrong byte before the answer does not count
    early = logits.clone()
    early[:, answer - 3] = 0.0
    assert method.passkey_correct(early, examples, answer).all()


def test_passkey_batches_hold_the_asked_fraction() -> None:
    data = method.Data.load()
    inputs, _ = data.batch(torch.Generator().manual_seed(SEED), 8, 64, passkey=0.5)
    rows = [bytes(row.tolist()) for row in inputs]
    assert [method.QUERY in row for row in rows] == [True] * 4 + [False] * 4


# -- the records and resuming ------------------------------------------------------------------
SCHEMA = {"scheme", "seed", "lr", "role", "scale", "finetune", "loss", "loss_past", "passkey"}


def test_a_runs_record_follows_the_schema(tmp_path: Path) -> None:
    records = train.work(train.Job(config("rope"), ()), tmp_path)
    assert [r["scheme"] for r in records] == ["rope", "rope+linear", "rope+dynamic", "rope+yarn"]
    record = records[0]
    assert set(record) >= SCHEMA
    assert record["scale"] == {"layers": 2, "d_model": 64, "L_train": 64}
    assert (record["role"], record["finetune"], record["passkey"]) == ("main", None, None)
    assert set(record["loss"]) == {"1", "2", "4", "8"}
    assert set(record["loss_past"]) == {"2", "4", "8"}
    assert set(record["validation"]) == {"1", "2", "4", "8"}
    assert all(len(record["blocks"][m]) == len(record["blocks"]["1"]) for m in record["loss"])
    assert record["versions"]["torch"] == torch.__version__
    assert record["versions"]["python"].count(".") == 2
    assert record["machine"]["cpu"]
    assert isinstance(record["machine"]["flags"], list)
    assert record["data"]["sha256"] == method.Data.load().sha256
    assert record["threads"] == 1
    assert record["steps"] == 2
    assert record["config"] == train.normal(config("rope").identity())
    path = train.write(tmp_path, record)
    assert path.name == "main-small-rope-seed0-lr0.003.json"
    assert json.loads(path.read_text())["loss"] == record["loss"]


def test_finetune_records_every_checkpoint_of_one_run(tmp_path: Path) -> None:
    base = config("rope", 2, scale=method.SCALES["passkey"], passkey=method.PASSKEY_FRACTION)
    tuned = replace(base, finetune=method.Finetune("yarn", 2, 256))
    records = method.execute_finetune(tuned, (0, 2), tmp_path)
    assert [r["finetune"] for r in records] == [
        {"scaling": "yarn", "steps": n, "length": 256, "batch": 8} for n in (0, 2)
    ]
    assert all(set(r["passkey"]) == {str(d) for d in method.PASSKEY_LENGTHS} for r in records)
    assert all(0.0 <= a <= 1.0 for r in records for a in r["passkey"].values())
    assert method.checkpoint_path(tmp_path, base).exists()  # the pretrained model, cached
    # the arm of 2 steps is the same whether or not the run stopped to evaluate on the way
    # (evaluation runs without dropout and draws nothing from training's generators)
    alone = method.execute_finetune(tuned, (2,), tmp_path)
    assert alone[0]["loss"] == records[1]["loss"]
    assert alone[0]["passkey"] == records[1]["passkey"]
    assert alone[0]["config"] == records[1]["config"]
    assert records[1]["loss"] != records[0]["loss"]


def fake(folder: Path, config: method.Config, validation: float = 1.0) -> None:
    """A saved record of ``config`` without training (what resuming reads)."""
    record = {"config": train.normal(config.identity()), "validation": {"1": validation}}
    train.write(folder, record)


TINY = train.Plan(
    scales={"small": (2, (1e-3, 3e-3, 1e-2), (1, 2))},
    schemes=("rope", "alibi"),
    finetune_scalings=(),
)


def ready(plan: train.Plan, folder: Path) -> list[train.Job]:
    found = train.jobs(plan, folder)
    return [j for j in found if isinstance(j, train.Job) and not train.done(folder, j)]


def test_resume_skips_finished_runs_and_reruns_mismatched_ones(tmp_path: Path) -> None:
    first = ready(TINY, tmp_path)
    assert [j.kind for j in first] == ["sweep"] * 6  # main runs wait for the sweep
    blocked = [j for j in train.jobs(TINY, tmp_path) if isinstance(j, train.Blocked)]
    assert len(blocked) == 4
    # the sweep done: RoPE chose 1e-2, ALiBi 1e-3 (the lowest validation loss)
    for job in first:
        loss = {1e-3: 2.0, 3e-3: 1.9, 1e-2: 1.8}[job.config.lr]
        if job.config.scheme == "alibi":
            loss = -loss
        fake(tmp_path, job.config, loss)
    second = ready(TINY, tmp_path)
    assert [(j.config.scheme, j.config.seed, j.config.lr) for j in second] == [
        ("rope", 1, 1e-2),
        ("rope", 2, 1e-2),
        ("alibi", 1, 1e-3),
        ("alibi", 2, 1e-3),
    ]
    # RoPE's main run writes its scalings' rows too: done only when all are there
    rope = second[0]
    assert [c.scheme for c in rope.outputs] == ["rope", "rope+linear", "rope+dynamic", "rope+yarn"]
    fake(tmp_path, rope.outputs[0])
    assert not train.done(tmp_path, rope)
    for job in second:
        for output in job.outputs:
            fake(tmp_path, output)
    assert ready(TINY, tmp_path) == []
    # a file of the same name holding another config is not a match: that run is redone
    path = tmp_path / second[2].config.name()
    record = json.loads(path.read_text())
    record["config"]["steps"] = 3
    path.write_text(json.dumps(record))
    assert [j.config for j in ready(TINY, tmp_path)] == [second[2].config]
    # a plan with more steps matches none of the files: everything is redone
    longer = replace(TINY, scales={"small": (4, (1e-3, 3e-3, 1e-2), (1, 2))})
    assert len(ready(longer, tmp_path)) == 6


def test_selection_and_plan_cover_the_issues_set(tmp_path: Path) -> None:
    found = train.jobs(train.FULL, tmp_path)
    kinds = [(j.kind, j.scale) for j in found if isinstance(j, train.Blocked)]
    assert kinds.count(("main", "small")) == 7 * 5  # >= 5 seeds at the first scale
    assert kinds.count(("main", "long")) == 7 * 3  # >= 3 at the second
    assert kinds.count(("finetune", "passkey")) == 4 * 3  # 4 scalings, 3 seeds
    ready = [j for j in found if isinstance(j, train.Job)]
    sweeps = [j for j in ready if j.config.role == "sweep"]
    assert len(sweeps) == 7 * 3 * 2  # 3 rates, each scheme, both scales
    # the passkey models wait for no sweep: they train at the plan's fixed rate
    passkey = [j.config for j in ready if j.config.role == "main"]
    assert [(c.scale.name, c.lr, c.seed) for c in passkey] == [
        ("passkey", 3e-3, s) for s in (1, 2, 3)
    ]
    chosen = train.select(found, schemes=["alibi"], roles=["sweep"], scales=["long"])
    assert len(chosen) == 3
    assert all(isinstance(j, train.Job) and j.config.scheme == "alibi" for j in chosen)
    text = train.describe_plan(found, train.FULL, tmp_path, 2)
    assert "0 of 113 jobs done" in text
    assert "wall at 2 workers" in text


def test_wall_time_packs_jobs_on_workers() -> None:
    assert train.wall_time([4, 3, 3, 2], 2) == 6
    assert train.wall_time([5], 2) == 5
    assert train.wall_time([], 2) == 0


# -- the analysis ------------------------------------------------------------------------------
def test_interval_and_verdict_on_data_whose_answer_is_known() -> None:
    rng = np.random.default_rng(0)
    better = -0.05 + 0.01 * rng.standard_normal((5, 40))
    mean, lo, hi = analysis.interval(better, 8)
    assert lo < mean < hi < 0
    assert analysis.verdict(lo, hi) == analysis.REPRODUCED
    assert analysis.verdict(*analysis.interval(-better, 8)[1:]) == analysis.NOT_REPRODUCED
    noise = 0.05 * rng.standard_normal((5, 40))
    assert analysis.verdict(*analysis.interval(noise, 8)[1:]) == analysis.NOT_SEPARABLE
    # "as good as, within 0.01": a difference of 0.002 +- 0.001 is; one of 0.05 is not
    close = 0.002 + 0.001 * rng.standard_normal((5, 40))
    assert analysis.verdict(*analysis.interval(close, 8)[1:], 0.01, "equal") == analysis.REPRODUCED
    far = analysis.interval(0.05 + 0.001 * rng.standard_normal((5, 40)), 8)[1:]
    assert analysis.verdict(*far, 0.01, "equal") == analysis.NOT_REPRODUCED
    # a seed that disagrees widens the interval: training noise counts, not only blocks
    seeds = np.array([[-0.05], [-0.04], [-0.06], [-0.05], [0.30]]) + 0.001 * rng.random((5, 40))
    assert analysis.verdict(*analysis.interval(seeds, 8)[1:]) == analysis.NOT_SEPARABLE
    # a stretch of text that disagrees widens it too, though every seed agrees
    text = np.full((5, 40), -0.05)
    text[:, :8] = 0.3
    text += 0.001 * rng.random((5, 40))
    assert analysis.verdict(*analysis.interval(text, 8)[1:]) == analysis.NOT_SEPARABLE
    # three seeds, one value each (a passkey accuracy): wider than their range, by t(2)
    mean, lo, hi = analysis.interval(np.array([[-0.3], [-0.2], [-0.1]]))
    assert lo < -0.3
    assert hi > -0.1
    assert hi - mean == pytest.approx(analysis.t_quantile(0.975, 2) * 0.1 / 3**0.5)


def test_interval_covers_near_its_level_in_the_runs_design() -> None:
    """3 seeds x 45 blocks, the text's blocks correlated 0.7 with their neighbours (an AR(1)
    shared by the seeds, as the test text is), stretches of 8 blocks: the interval holds the
    true mean (0) near 95% of the time (93% of these 400 draws). Taking every block as
    independent covers less (81% of them)."""
    rng = np.random.default_rng(1)
    draws, held, naive = 400, 0, 0
    for _ in range(draws):
        text = np.zeros(45)
        x = rng.standard_normal()
        for b in range(45):
            x = 0.7 * x + np.sqrt(1 - 0.7**2) * rng.standard_normal()
            text[b] = x
        d = 0.01 * rng.standard_normal((3, 1)) + 0.03 * text + 0.01 * rng.standard_normal((3, 45))
        _, lo, hi = analysis.interval(d, 8)
        held += lo < 0 < hi
        _, lo, hi = analysis.interval(d, 1)  # every block its own stretch
        naive += lo < 0 < hi
    assert 0.9 <= held / draws <= 0.99
    assert naive / draws < 0.85

    with pytest.raises(ValueError, match="kind must be"):
        analysis.verdict(0.0, 1.0, kind="more")


def test_findings_are_paired_by_seed_and_block() -> None:
    scale = {"layers": 2, "d_model": 64, "L_train": 64}
    at = {**scale, "steps": 2000}

    def run(scheme: str, seed: int, blocks: dict[str, Any], steps: int = 2000) -> dict[str, Any]:
        return {
            "scheme": scheme,
            "seed": seed,
            "role": "main",
            "finetune": None,
            "scale": scale,
            "steps": steps,
            "config": {"passkey": 0.0},
            "blocks": blocks,
        }

    # seed effects much larger than the scheme effect: pairing removes them
    records = []
    for seed in range(5):
        block = np.array([1.0, 2.0]) + seed * 0.5
        alibi = {"1": list(block), "4": list(block), "8": list(block + 0.01)}
        sinusoid = {"1": list(block + 0.1), "4": list(block + 0.4), "8": list(block + 0.6)}
        records.append(run("alibi", seed, alibi))
        records.append(run("sinusoid", seed, sinusoid))
    records.append(run("learned", 0, {"1": [1.0, 2.0], "8": None}))
    # a run of other steps (a quick run, say) is another setting: never paired with these
    records.append(run("alibi", 9, {"1": [9.0, 9.0], "4": [9.0, 9.0], "8": [9.0, 9.0]}, 300))
    d = analysis.paired(records, ("alibi", "1"), ("sinusoid", "1"), at)
    assert d is not None
    assert d.shape == (5, 2)
    assert np.allclose(d, -0.1)
    findings = analysis.analyse(records)["findings"]
    assert [block["scale"]["steps"] for block in findings] == [300, 2000]  # by L_train, steps
    by_key = {row["key"]: row for row in findings[1]["results"]}
    assert by_key["alibi-vs-sinusoid"]["verdict"] == analysis.REPRODUCED
    assert by_key["sinusoid-degrades"]["verdict"] == analysis.REPRODUCED
    assert by_key["alibi-flat"]["verdict"] == analysis.REPRODUCED
    assert by_key["rope-degrades"]["verdict"] is None  # no RoPE run
    assert analysis.paired(records, ("learned", "8"), ("sinusoid", "8"), at) is None


def test_a_diverged_sweep_run_is_never_chosen(tmp_path: Path) -> None:
    for job in ready(TINY, tmp_path):
        loss = {1e-3: 2.0, 3e-3: 1.9, 1e-2: float("nan")}[job.config.lr]
        fake(tmp_path, job.config, loss)
    assert train.chosen_lr(tmp_path, TINY, "rope", "small") == 3e-3


def test_the_plan_estimates_from_the_saved_runs_times(tmp_path: Path) -> None:
    job = ready(TINY, tmp_path)[0]
    fresh = train.estimate(job, TINY, train.observed(tmp_path))
    assert fresh == train.estimate_training("small", 2, 64)
    record = {"config": train.normal(job.config.identity()), "time": {"total_s": 123.0}}
    train.write(tmp_path, record)
    assert train.estimate(job, TINY, train.observed(tmp_path)) == 123.0


def test_finetune_arms_are_compared_by_seed() -> None:
    def arm(scaling: str, seed: int, accuracy: float, loss: float) -> dict[str, Any]:
        return {
            "seed": seed,
            "scale": {"L_train": 64},
            "finetune": {"scaling": scaling, "steps": 50, "length": 256},
            "passkey": {"128": accuracy},
            "blocks": {"4": [loss, loss + 1.0]},
        }

    records = [arm("yarn", s, 0.9 + 0.01 * s, 1.0 + s) for s in range(3)]
    records += [arm("linear", s, 0.5 + 0.01 * s, 1.2 + s) for s in range(3)]
    records.append(arm("linear", 7, 0.0, 9.0))  # no yarn run of seed 7: not paired
    passkey = analysis.compare_arms(records, ("yarn", 50), ("linear", 50), ("passkey", "128"))
    assert passkey is not None
    assert passkey["seeds"] == 3
    assert passkey["mean"] == pytest.approx(0.4)
    assert passkey["interval"] == pytest.approx([0.4, 0.4])
    loss = analysis.compare_arms(records, ("yarn", 50), ("linear", 50), ("loss", "4"))
    assert loss is not None
    assert loss["mean"] == pytest.approx(-0.2)
    assert analysis.compare_arms(records, ("yarn", 200), ("linear", 50), ("loss", "4")) is None


def test_build_writes_each_run_once_and_resumes(tmp_path: Path) -> None:
    # end to end, in the worker pool: one learned-table run of one step, then nothing to do
    plan = train.Plan(scales={"small": (1, (3e-3,), (1,))}, schemes=("learned",))
    plan = replace(plan, finetune_scalings=())
    written = train.build(plan, tmp_path, workers=1)
    assert [r["scheme"] for r in written] == ["learned"]
    assert [p.name for p in tmp_path.glob("*.json")] == ["main-small-learned-seed1-lr0.003.json"]
    assert train.build(plan, tmp_path, workers=1) == []
