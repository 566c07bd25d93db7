"""Render the trained comparison's saved runs (``benchmarks/results/train/``), at build time.

Every number and verdict of the pages "What the schemes do when trained" and "Making a trained
model longer" comes from the run files that ``nox -s train`` writes, one a run, through
``benchmarks/train_analysis.py`` (``analyse`` for the numbers and the verdicts, ``progress`` for
how much of the plan is saved). The build reads the files; it never trains. A part of the plan
not yet saved renders as *pending*, never as a verdict. The markup:

- ``.. train-status::`` — a note: how many of the plan's training runs are saved, which parts
  are pending;
- ``.. train-table:: SCALE`` — the test loss of each scheme at 1, 2, 4 and 8 x L_train (the
  seeds' mean, their range below); ``:past:`` over the tokens past L_train only;
  ``:schemes:`` to choose and order the rows;
- ``.. train-sweep:: SCALE`` — the validation loss of each swept learning rate, and the chosen;
- ``.. train-findings::`` — each finding (``:set: papers`` or ``observations``) at each scale:
  the paired difference (its terms below the finding), its 95% t-interval, the verdict;
- ``.. train-best::`` — at each length and scale, the best scheme and whether the runner-up
  is separable from it;
- ``.. train-finetune::`` — the fine-tuned loss (``:multiple: 4``) per scaling and steps;
- ``.. train-passkey::`` — passkey accuracy per scaling, steps and input length;
- ``.. train-finetune-findings::`` — the fine-tuning findings, as ``train-findings``;
- ``:train:`SCALE SCHEME MULTIPLE STAT``` — one figure inline: STAT is ``mean``, ``range`` or
  ``past``; *pending* while the scale's main runs are not all saved;
- ``:train-info:`dotted.key``` — a value of the environment (``env.python``, ``env.cpu``)
  or of the plan (``plan.seeds.small``, ``progress.jobs``); a list joins its values;
- ``.. train-check::`` — claims of the prose, one a line: the build fails where the saved
  runs contradict one; a claim on a part still pending is not checked (the status says so).
  It renders nothing;
- ``.. train-when:: CLAIM; CLAIM ...`` — its content, only where the saved runs bear every
  claim out (prose that depends on a result; nothing while the result is pending).

The claims:

  ``verdict SCALE KEY VERDICT``  a finding's verdict (``reproduced``, ``not-reproduced``,
                                 ``not-separable``); SCALE ``finetune`` for the fine-tuning ones
  ``refused SCALE SCHEME M``     SCHEME has no loss at M (null in every run)
  ``best SCALE M SCHEME``        SCHEME has the lowest mean loss at M
  ``worst SCALE M SCHEME``       SCHEME has the highest mean loss at M
  ``separate SCALE M``           the best at M is separable from the runner-up (``level``: not)
  ``pair SCALE M A B``           A and B are the best and the runner-up at M, in either order
  ``lower SCALE KEY``            the finding's mean difference is below 0 (``higher``: above)
  ``saved PART``                 every run of PART (``main-long``, ``finetune-passkey``) is saved
  ``passkey KIND N LEN above X`` the fine-tuned KIND's mean retrieval after N steps at LEN bytes
                                 is above the share X (``below``: under it)
  ``settles KIND M N D``         N is the first recorded step count at which KIND's mean loss
                                 at M x L_train is within D of its loss at the last one

``train_results_folder`` in conf.py (relative to the docs directory) names the folder,
``train_results_quick`` whether it holds the quick plan's runs.
"""

from __future__ import annotations

import sys
from functools import reduce
from pathlib import Path
from typing import Any

from bench_results import cell  # _ext/ is on the path (docs/conf.py)
from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective, SphinxRole
from sphinx.util.nodes import nested_parse_with_titles

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

import train_analysis as analysis  # noqa: E402  (benchmarks/ is not a package)

MULTIPLES = analysis.MULTIPLES
PENDING = "pending"
VERDICTS = {
    "reproduced": analysis.REPRODUCED,
    "not-reproduced": analysis.NOT_REPRODUCED,
    "not-separable": analysis.NOT_SEPARABLE,
}
_CACHE: dict[Any, dict[str, Any]] = {}


def results(folder: Path, quick: bool = False) -> dict[str, Any]:
    """The analysis of ``folder``'s runs and the plan's progress (cached by the files'
    names and times)."""
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    key = (str(folder), quick, tuple((p.name, p.stat().st_mtime_ns) for p in files))
    if key not in _CACHE:
        records = analysis.load(folder)
        found = analysis.analyse(records)
        found["progress"] = analysis.progress(folder, quick)
        found["scales"] = {block["name"]: block for block in found["findings"]}
        _CACHE.clear()
        _CACHE[key] = found
    return _CACHE[key]


def _load(env: Any) -> dict[str, Any]:
    folder = (Path(env.app.confdir) / env.config.train_results_folder).resolve()
    env.note_dependency(str(folder))
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        env.note_dependency(str(path))
    return results(folder, env.config.train_results_quick)


def main_scales(found: dict[str, Any]) -> list[str]:
    """The plan's scales of main runs, in its order (``small``, ``long``)."""
    return list(found["progress"]["plan"]["steps"])


def ready(found: dict[str, Any], part: str) -> bool:
    return analysis.part_done(found["progress"], part)


def finetuned(found: dict[str, Any], what: str = "finetune") -> Any:
    """Of the plan's passkey models, the fine-tuning table (``what="finetune"``) or its
    findings (``"finetune_findings"``), once every fine-tuning run is saved; else None."""
    if not ready(found, "finetune-passkey"):
        return None
    return found[what].get(str(found["progress"]["plan"]["finetune"]["pretrain_steps"]))


def block(found: dict[str, Any], scale: str) -> dict[str, Any] | None:
    """The analysis at ``scale``, only once every main run of it is saved."""
    if not ready(found, f"main-{scale}"):
        return None
    return found["scales"].get(scale)


# -- figures and claims --------------------------------------------------------------------
def figure(found: dict[str, Any], scale: str, scheme: str, multiple: str, stat: str) -> str:
    """One figure of the loss table (``mean``, ``range`` or ``past``), or *pending*."""
    if multiple not in MULTIPLES:
        raise ExtensionError(f"train results: multiple {multiple!r} is not one of {MULTIPLES}")
    if stat not in ("mean", "range", "past"):
        raise ExtensionError(f"train results: unknown figure {stat!r}: mean, range, past")
    at = block(found, scale)
    if at is None:
        return PENDING
    if scheme not in at["table"]:
        raise ExtensionError(f"train results: no run of {scheme!r} at scale {scale!r}")
    values = at["table"][scheme]["loss_past" if stat == "past" else "loss"].get(multiple)
    if values is None:
        return "n/a"
    if stat == "range":
        return f"{values['min']:.3f}–{values['max']:.3f}"
    return f"{values['mean']:.3f}"


def _row(found: dict[str, Any], scale: str, key: str) -> dict[str, Any] | None:
    if scale == "finetune":
        rows = finetuned(found, "finetune_findings")
        if rows is None:
            return None
    else:
        at = block(found, scale)
        if at is None:
            return None
        rows = [*at["results"], *at["observations"]]
    for row in rows:
        if row["key"] == key:
            return row
    raise ExtensionError(f"train results: no finding {key!r} at {scale!r}")


def holds(found: dict[str, Any], claim: str) -> bool | None:
    """Whether the saved runs bear ``claim`` out; None while its part is pending."""
    kind, *args = claim.split()
    if kind == "verdict" and len(args) == 3:
        scale, key, wanted = args
        if wanted not in VERDICTS:
            raise ExtensionError(f"train-check: verdict {wanted!r}: one of {list(VERDICTS)}")
        row = _row(found, scale, key)
        if row is None or row["verdict"] is None:
            return None
        return bool(row["verdict"] == VERDICTS[wanted])
    if kind in ("lower", "higher") and len(args) == 2:
        row = _row(found, *args)
        if row is None or row["verdict"] is None:
            return None
        return bool(row["mean"] < 0) if kind == "lower" else bool(row["mean"] > 0)
    if kind == "refused" and len(args) == 3:
        scale, scheme, multiple = args
        at = block(found, scale)
        if at is None:
            return None
        return at["table"][scheme]["loss"].get(multiple) is None
    arity = {"best": 3, "worst": 3, "separate": 2, "level": 2, "pair": 4}
    if kind in arity and len(args) == arity[kind]:
        at = block(found, args[0])
        if at is None:
            return None
        row = next(row for row in at["best"] if row["multiple"] == args[1])
        if kind in ("separate", "level"):
            if row.get("best") is None or "separate" not in row:
                return None
            return bool(row["separate"]) == (kind == "separate")
        if kind == "pair":
            return {row.get("best"), row.get("runner_up")} == set(args[2:])
        return bool(row.get(kind) == args[2])
    if kind == "saved" and len(args) == 1:
        return ready(found, args[0])
    if kind == "passkey" and len(args) == 5 and args[3] in ("above", "below"):
        scaling, steps, length, side, share = args
        table = finetuned(found)
        if table is None:
            return None
        mean = table[scaling][steps]["passkey"][length]["mean"]
        return bool(mean > float(share)) if side == "above" else bool(mean < float(share))
    if kind == "settles" and len(args) == 4:
        scaling, multiple, steps, within = args
        table = finetuned(found)
        if table is None:
            return None
        by_steps = sorted(table[scaling].items(), key=lambda item: int(item[0]))
        loss = [(n, cell[f"loss_{multiple}x"]["mean"]) for n, cell in by_steps]
        last = loss[-1][1]
        first = next(n for n, value in loss if abs(value - last) <= float(within))
        return first == steps
    raise ExtensionError(f"train-check: cannot read the claim {claim!r}")


Where = tuple[str, int]  # the page (source file) and line a directive stands on


def words(node: nodes.TextElement, where: Where) -> nodes.TextElement:
    """``node``'s text made a message of its page: translated in Korean and Japanese.

    Sphinx translates a text node only when it knows the node's source; a number or a
    range is left as it is.
    """
    node.rawsource = node.astext()
    node.source, node.line = where
    return node


def text_cell(text: str, where: Where, *more: str) -> nodes.entry:
    entry = nodes.entry()
    entry += words(nodes.paragraph(text, text), where)
    for line in more:
        entry += words(nodes.paragraph(line, line), where)
    return entry


def paragraph(text: str, where: Where) -> nodes.paragraph:
    return words(nodes.paragraph(text, text), where)  # type: ignore[return-value]


def new_table(title: str, heads: list[str], widths: list[int], where: Where) -> nodes.table:
    out = nodes.table(classes=["bench-table"])
    out += words(nodes.title(title, title), where)
    group = nodes.tgroup(cols=len(heads))
    out += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    thead = nodes.thead()
    row = nodes.row()
    for head in heads:
        row += text_cell(head, where)
    thead += row
    group += thead
    group += nodes.tbody()
    return out


def body(table: nodes.table) -> nodes.tbody:
    found: nodes.tbody = table.next_node(nodes.tbody)
    return found


def pending_note(found: dict[str, Any], part: str, where: Where) -> nodes.Node:
    """*Pending*, in words that do not change as runs are saved (a message translated once),
    and the count of saved runs apart (a number, never translated)."""
    entry = found["progress"]["parts"].get(part)
    if entry is None:
        return paragraph(f"Not in the plan: {part}.", where)
    text = f"Pending: {entry['text']}; this part is printed once all its runs are saved."
    out = nodes.container()
    out += paragraph(text, where)
    count = nodes.paragraph()
    count += words(nodes.inline("runs saved", "runs saved"), where)
    count += nodes.Text(f": {entry['done']} / {entry['jobs']}")
    out += count
    return out


def status_nodes(found: dict[str, Any], where: Where) -> list[nodes.Node]:
    """The status note's content: a sentence, then each part of the plan and its count."""
    done = found["progress"]
    if done["complete"]:
        text = (
            "Every training run of the plan is saved; every figure and verdict below is read "
            "from them."
        )
    else:
        text = (
            "Part of the plan's training runs are saved. A part still pending shows no "
            "tables and no verdicts, and the figures mark it pending; nox -s train resumes "
            "the set."
        )
    out: list[nodes.Node] = [paragraph(text, where)]
    table = new_table("Training runs saved", ["part of the plan", "saved"], [40, 12], where)
    rows = body(table)
    for part in done["parts"].values():
        row = nodes.row()
        row += text_cell(part["text"], where)
        row += cell(f"{part['done']} / {part['jobs']}")
        rows += row
    row = nodes.row()
    row += text_cell("all", where)
    row += cell(f"{done['done']} / {done['jobs']}")
    rows += row
    out.append(table)
    return out


def status(found: dict[str, Any]) -> str:
    """A sentence on how much of the plan the folder holds, and what is pending (the report's
    words; the page shows :func:`status_nodes`, whose messages do not change with the counts)."""
    done = found["progress"]
    if done["complete"]:
        return (
            f"All {done['jobs']} training runs of the plan are saved; every figure and verdict "
            "below is read from them."
        )
    missing = [
        f"{part['text']} ({part['done']} of {part['jobs']})"
        for part in done["parts"].values()
        if part["done"] < part["jobs"]
    ]
    return (
        f"{done['done']} of the plan's {done['jobs']} training runs are saved; pending: "
        f"{'; '.join(missing)}. A part still pending shows no figures and no verdicts: "
        "nox -s train resumes the set."
    )


def interval_cell(row: dict[str, Any] | None, where: Where) -> nodes.entry:
    if row is None or row["verdict"] is None:
        return text_cell(PENDING, where)
    lo, hi = row["interval"]
    entry = nodes.entry()
    # a paragraph, not an inline node: Sphinx translates only the former (bold by CSS)
    verdict = row["verdict"]
    entry += words(nodes.paragraph(verdict, verdict, classes=["train-verdict"]), where)
    entry += cell(f"{row['mean']:+.3f}", f"[{lo:+.3f}, {hi:+.3f}]").children
    return entry


def findings_table(found: dict[str, Any], which: str, where: Where) -> nodes.table:
    findings = analysis.FINDINGS if which == "papers" else analysis.OBSERVATIONS
    names = main_scales(found)
    heads = ["finding", *[f"{name} scale" for name in names]]
    title = (
        "Paired difference (nats per byte; the terms under each finding, first minus "
        "second), its 95% interval, the verdict"
    )
    out = new_table(title, heads, [40] + [22] * len(names), where)
    rows = body(out)
    for finding in findings:
        row = nodes.row()
        row += text_cell(finding.text, where, analysis.terms(finding))
        for name in names:
            at = block(found, name)
            key = "results" if which == "papers" else "observations"
            match = None if at is None else next(r for r in at[key] if r["key"] == finding.key)
            row += interval_cell(match, where)
        rows += row
    return out


def loss_table(
    found: dict[str, Any], scale: str, schemes: list[str] | None, past: bool, where: Where
) -> nodes.Node:
    at = block(found, scale)
    if at is None:
        return pending_note(found, f"main-{scale}", where)
    multiples = MULTIPLES[1:] if past else MULTIPLES
    l_train = at["scale"]["L_train"]
    what = "past L_train only" if past else "all tokens"
    title = f"Test loss at the {scale} scale, nats per byte, {what}: the seeds' mean and range"
    heads = ["scheme", "seeds", "rate", *[f"{m}× ({int(m) * l_train})" for m in multiples]]
    out = new_table(title, heads, [30, 6, 8] + [12] * len(multiples), where)
    rows = body(out)
    for scheme in schemes or list(at["table"]):
        entry = at["table"].get(scheme)
        if entry is None:
            raise ExtensionError(f"train-table: no run of {scheme!r} at {scale!r}")
        row = nodes.row()
        row += text_cell(analysis.LABELS[scheme], where)
        row += cell(str(len(entry["seeds"])))
        row += cell(", ".join(f"{lr:g}" for lr in entry["lr"]))
        for m in multiples:
            values = entry["loss_past" if past else "loss"].get(m)
            if values is None:
                row += text_cell("n/a", where, "refused")
                continue
            row += cell(f"{values['mean']:.3f}", f"{values['min']:.3f}–{values['max']:.3f}")
        rows += row
    return out


def sweep_table(found: dict[str, Any], scale: str, where: Where) -> nodes.Node:
    rates = found["progress"]["plan"]["rates"].get(scale, [])
    sweep = found["sweep"].get(scale, {})
    if not sweep:
        return pending_note(found, f"sweep-{scale}", where)
    title = f"Validation loss at L_train of seed 0 at each learning rate, {scale} scale"
    heads = ["scheme", *rates, "chosen"]
    out = new_table(title, heads, [30] + [12] * len(rates) + [10], where)
    rows = body(out)
    for scheme in analysis.TRAINED:
        entry = sweep.get(scheme)
        if entry is None:
            continue
        row = nodes.row()
        row += text_cell(analysis.LABELS[scheme], where)
        for rate in rates:
            loss = entry["rates"].get(rate)
            shown = PENDING if rate not in entry["rates"] else "diverged"
            if loss is not None and loss == loss:  # not nan
                shown = f"{loss:.3f}"
            row += cell(shown, strong=rate == entry["chosen"])
        chosen = cell(entry["chosen"] or PENDING)
        if entry.get("edge"):  # the grid may not bracket the best rate
            chosen += words(nodes.paragraph("highest tried", "highest tried"), where)
        row += chosen
        rows += row
    return out


def best_table(found: dict[str, Any], where: Where) -> nodes.table:
    names = main_scales(found)
    title = "The best trained scheme at each length, and the paired gap to the runner-up"
    out = new_table(
        title, ["length", *[f"{n} scale" for n in names]], [10] + [30] * len(names), where
    )
    rows = body(out)
    for m in MULTIPLES:
        row = nodes.row()
        row += cell(f"{m}×")
        for name in names:
            at = block(found, name)
            entry = None if at is None else next(r for r in at["best"] if r["multiple"] == m)
            if entry is None or entry["best"] is None or "mean" not in entry:
                row += text_cell(PENDING, where)
                continue
            lo, hi = entry["interval"]
            best, second = analysis.LABELS[entry["best"]], analysis.LABELS[entry["runner_up"]]
            verdict = "ahead of" if entry["separate"] else "not separable from"
            row += text_cell(best, where, verdict, second)
            row[-1] += cell(f"{entry['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}]").children
        rows += row
    return out


def finetune_table(found: dict[str, Any], multiple: str, where: Where) -> nodes.Node:
    table = finetuned(found)
    if table is None:
        return pending_note(found, "finetune-passkey", where)
    plan = found["progress"]["plan"]["finetune"]
    steps = [str(n) for n in plan["checkpoints"]]
    title = (
        f"Test loss at {multiple}× L_train after fine-tuning at 4×, nats per byte: "
        "the seeds' mean and range"
    )
    heads = ["scaling", *[f"{n} steps" for n in steps]]
    out = new_table(title, heads, [24] + [14] * len(steps), where)
    rows = body(out)
    for scaling in plan["scalings"]:
        row = nodes.row()
        row += text_cell(SCALING_LABELS.get(scaling, scaling), where)
        for n in steps:
            entry = table.get(scaling, {}).get(n)
            if entry is None:
                row += text_cell(PENDING, where)
                continue
            v = entry[f"loss_{multiple}x"]
            row += cell(f"{v['mean']:.3f}", f"{v['min']:.3f}–{v['max']:.3f}")
        rows += row
    return out


SCALING_LABELS = {
    "none": "none (extrapolation)",
    "linear": "linear (PI)",
    "dynamic": "dynamic NTK",
    "yarn": "YaRN",
}


def passkey_table(found: dict[str, Any], where: Where) -> nodes.Node:
    table = finetuned(found)
    if table is None:
        return pending_note(found, "finetune-passkey", where)
    plan = found["progress"]["plan"]["finetune"]
    lengths = list(next(iter(next(iter(table.values())).values()))["passkey"])
    title = (
        "Passkey retrieval, exact match, by the input's length (bytes): the seeds' mean, "
        "and their range where they differ"
    )
    heads = ["scaling", "steps", *lengths]
    out = new_table(title, heads, [24, 8] + [10] * len(lengths), where)
    rows = body(out)
    for scaling in plan["scalings"]:
        for n in plan["checkpoints"]:
            entry = table.get(scaling, {}).get(str(n))
            row = nodes.row()
            row += text_cell(SCALING_LABELS.get(scaling, scaling), where)
            row += cell(str(n))
            for d in lengths:
                if entry is None:
                    row += text_cell(PENDING, where)
                    continue
                v = entry["passkey"][d]
                spread = [] if v["min"] == v["max"] else [f"{v['min']:.0%}–{v['max']:.0%}"]
                row += cell(f"{v['mean']:.0%}", *spread)
            rows += row
    return out


def finetune_findings(found: dict[str, Any], where: Where) -> nodes.table:
    title = (
        "Paired difference (the terms under each finding: a loss in nats per byte, a "
        "retrieval as a share of the examples; below 0 where the finding holds), its 95% "
        "interval, the verdict"
    )
    out = new_table(title, ["finding", "fine-tuning"], [60, 24], where)
    rows = body(out)
    saved = finetuned(found, "finetune_findings") or []
    for finding in analysis.FINETUNE_FINDINGS:
        row = nodes.row()
        row += text_cell(finding.text, where, analysis.arm_terms(finding))
        match = next((r for r in saved if r["key"] == finding.key), None)
        row += interval_cell(match, where)
        rows += row
    return out


def info(found: dict[str, Any], key: str) -> str:
    """A value of the environment (``env.``), of the plan (``plan.``) or of what is saved
    of it (``progress.``)."""
    tree = {
        "env": found["environment"],
        "plan": found["progress"]["plan"],
        "progress": found["progress"],
        "analysis": found,
    }
    try:
        value = reduce(lambda node, part: node[part], key.split("."), tree)
    except (KeyError, TypeError) as error:
        raise ExtensionError(f":train-info: no {key!r}") from error
    if isinstance(value, list):
        if not value:
            return PENDING
        return ", ".join(_show(v) for v in value)
    return _show(value)


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_show(v)}" for k, v in value.items())
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# -- the directives and roles -----------------------------------------------------------------
class TrainStatus(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        # The note holds the sentence; the counts' table stands after it, at the page's
        # width (inside a note it is wider than the note on a phone).
        sentence, *rest = status_nodes(_load(self.env), self.get_source_info())
        note = nodes.note()
        note += sentence
        return [note, *rest]


class TrainTable(SphinxDirective):
    required_arguments = 1
    option_spec = {"past": directives.flag, "schemes": directives.unchanged}  # noqa: RUF012

    def run(self) -> list[nodes.Node]:
        chosen = self.options.get("schemes")
        schemes = chosen.split() if chosen else None
        past = "past" in self.options
        where = self.get_source_info()
        return [loss_table(_load(self.env), self.arguments[0], schemes, past, where)]


class TrainSweep(SphinxDirective):
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        return [sweep_table(_load(self.env), self.arguments[0], self.get_source_info())]


class TrainFindings(SphinxDirective):
    option_spec = {"set": lambda arg: directives.choice(arg, ("papers", "observations"))}  # noqa: RUF012

    def run(self) -> list[nodes.Node]:
        which = self.options.get("set", "papers")
        return [findings_table(_load(self.env), which, self.get_source_info())]


class TrainBest(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        return [best_table(_load(self.env), self.get_source_info())]


class TrainFinetune(SphinxDirective):
    option_spec = {"multiple": lambda arg: directives.choice(arg, ("1", "4", "8"))}  # noqa: RUF012

    def run(self) -> list[nodes.Node]:
        multiple = self.options.get("multiple", "4")
        return [finetune_table(_load(self.env), multiple, self.get_source_info())]


class TrainPasskey(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        return [passkey_table(_load(self.env), self.get_source_info())]


class TrainFinetuneFindings(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        return [finetune_findings(_load(self.env), self.get_source_info())]


class TrainCheck(SphinxDirective):
    has_content = True

    def run(self) -> list[nodes.Node]:
        found = _load(self.env)
        for line in self.content:
            claim = line.strip()
            if claim and holds(found, claim) is False:
                raise ExtensionError(f"train-check: the saved runs contradict {claim!r}")
        return []


class TrainWhen(SphinxDirective):
    has_content = True
    required_arguments = 1
    final_argument_whitespace = True

    def run(self) -> list[nodes.Node]:
        found = _load(self.env)
        if not all(holds(found, claim) for claim in self.arguments[0].split(";")):
            return []
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(self.content), container)
        return list(container.children)


class TrainFigure(SphinxRole):
    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        parts = self.text.split()
        if len(parts) != 4:
            raise ExtensionError(f":train: takes 'SCALE SCHEME MULTIPLE STAT', got {self.text!r}")
        text = figure(_load(self.env), *parts)
        return [nodes.Text(text)], []


class TrainInfo(SphinxRole):
    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        value = info(_load(self.env), self.text)
        return [nodes.literal(value, value)], []


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("train_results_folder", "../benchmarks/results/train", "env")
    app.add_config_value("train_results_quick", False, "env")
    app.add_directive("train-status", TrainStatus)
    app.add_directive("train-table", TrainTable)
    app.add_directive("train-sweep", TrainSweep)
    app.add_directive("train-findings", TrainFindings)
    app.add_directive("train-best", TrainBest)
    app.add_directive("train-finetune", TrainFinetune)
    app.add_directive("train-passkey", TrainPasskey)
    app.add_directive("train-finetune-findings", TrainFinetuneFindings)
    app.add_directive("train-check", TrainCheck)
    app.add_directive("train-when", TrainWhen)
    app.add_role("train", TrainFigure())
    app.add_role("train-info", TrainInfo())
    return {"version": "2", "parallel_read_safe": True, "parallel_write_safe": True}
