r"""RoPE's configuration, parsed by type: one record per ``rope_type``.

A Hugging Face config carries its rotary scaling as a ``rope_parameters`` dict: a
``rope_type`` and the keys that type reads. Each type posenc builds is one
:class:`RopeType` record in :data:`RECORDS`: the keys it reads (required, or optional
with a default), how they relate, its frequency function and its attention factor, as
``transformers``' ``ROPE_INIT_FUNCTIONS`` pairs a type with a function, but strict
about what it does not know:

- keys of Hugging Face's ``RopeParameters`` that a type does not read are accepted
  and ignored, as they are in real configs, and a value of None counts as missing;
- a key posenc does not know at all warns, naming it and the nearest known key;
- a key of a scheme posenc does not build is refused (``NOT_BUILT``), so that
  such a config never builds plain 1-D RoPE by mistake;
- the multimodal keys ``mrope_section`` and ``mrope_interleaved`` (Qwen2-VL's M-RoPE,
  Qwen3-VL's interleaved form) compose with every type, as in Hugging Face: the type
  gives the frequency of each pair, the sections say which position axis (t, h or w)
  turns it (:meth:`RopeConfig.pair_axes`).

A new ``rope_type`` is one record here: the record's ``example`` configuration and
its Hugging Face name give it the tests of every type, against the formulas and
against Hugging Face's own ``ROPE_INIT_FUNCTIONS``; its ``doc`` line is listed
wherever the types are (:func:`type_list`), and the keys it reads are what
:mod:`posenc.hf` copies into its scaling from a model config (:func:`reading`).

>>> from posenc.rope_config import parse
>>> config = parse({"rope_type": "linear", "factor": 4.0}, head_dim=8, base=10_000.0)
>>> config.rope_type.name, config["factor"], config.rotary_dim
('linear', 4.0, 8)
>>> config.frequencies().tolist()
[0.25, 0.025, 0.0025, 0.00025]
"""

from __future__ import annotations

import copy
import difflib
import math
import numbers
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from . import _checks
from .frequencies import ladder

__all__ = [
    "EXAMPLE_HEAD_DIM",
    "MULTIMODAL_KEYS",
    "NOT_BUILT",
    "RECORDS",
    "ROPE_TYPES",
    "Key",
    "RopeConfig",
    "RopeType",
    "parse",
    "reading",
    "type_list",
]

_F64 = torch.float64
_CPU = torch.device("cpu")
SeqLen = int | Tensor | None


# -- Values ------------------------------------------------------------------------------


def _where(name: str, rope_type: str) -> str:
    return f"scaling[{name!r}] (rope_type={rope_type!r})"


def _number(name: str, value: object, rope_type: str, *, positive: bool = True) -> float:
    """A real number (NumPy's too), finite, and > 0 unless ``positive`` is False."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{_where(name, rope_type)} must be a number, got {_checks._show(value)}")
    number = float(value)
    if not math.isfinite(number) or (positive and not number > 0):
        raise ValueError(
            f"{_where(name, rope_type)} must be a finite number"
            f"{' > 0' if positive else ''}, got {value}"
        )
    return number


def number(name: str, value: object, rope_type: str, pairs: int) -> float:
    """A positive number."""
    return _number(name, value, rope_type)


def real(name: str, value: object, rope_type: str, pairs: int) -> float:
    """A finite number of either sign."""
    return _number(name, value, rope_type, positive=False)


def position_count(name: str, value: object, rope_type: str, pairs: int) -> int:
    """A number of positions: a positive int (NumPy's too)."""
    count = _checks.integer(_where(name, rope_type), value, "an int (a number of positions)")
    if count <= 0:
        raise ValueError(f"{_where(name, rope_type)} must be a positive int, got {count}")
    return count


def boolean(name: str, value: object, rope_type: str, pairs: int) -> bool:
    """A bool."""
    if not isinstance(value, bool):
        raise TypeError(f"{_where(name, rope_type)} must be a bool, got {_checks._show(value)}")
    return value


def factors(name: str, value: object, rope_type: str, pairs: int) -> tuple[float, ...]:
    """One positive number per rotated pair (a list, a tuple or a 1-D tensor)."""
    if isinstance(value, Tensor):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise TypeError(
            f"{_where(name, rope_type)} must be a list of numbers, got {_checks._show(value)}"
        )
    if len(value) != pairs:
        raise ValueError(
            f"{_where(name, rope_type)} must hold one number per rotated pair, {pairs} "
            f"(rotary dimension {2 * pairs} / 2), got {len(value)}"
        )
    return tuple(_number(f"{name}[{i}]", v, rope_type) for i, v in enumerate(value))


Parse = Callable[[str, object, str, int], Any]
_REQUIRED: Any = object()


@dataclass(frozen=True)
class Key:
    """A key a type reads: how its value is parsed, and its default (none: required)."""

    parse: Parse
    default: Any = _REQUIRED

    @property
    def required(self) -> bool:
        """Whether a config of the type must give the key."""
        return self.default is _REQUIRED


# -- The parsed configuration --------------------------------------------------------------


@dataclass(frozen=True)
class RopeConfig:
    """A ``rope_parameters`` dict, checked and completed with its defaults.

    Attributes:
        rope_type: The record of its type.
        head_dim: Features per head.
        rotary_dim: Features rotated, the first ones: ``head_dim``, or
            ``int(head_dim * partial_rotary_factor)``.
        base: The model's ``rope_theta``.
        values: Every key the type reads, parsed, defaults filled in (and values the
            type derives, such as YaRN's ``factor`` from the lengths).
        sections: M-RoPE's ``mrope_section``: how many rotated pairs each of the
            three position axes (t, h, w) turns; None for 1-D RoPE.
        interleaved: Whether the pairs of the sections interleave (``mrope_interleaved``,
            Qwen3-VL) instead of following each other in bands (Qwen2-VL).
    """

    rope_type: RopeType
    head_dim: int
    rotary_dim: int
    base: float
    values: Mapping[str, Any] = field(default_factory=dict)
    ladder: Tensor = field(default_factory=lambda: torch.ones(0, dtype=_F64, device=_CPU))
    sections: tuple[int, ...] | None = None
    interleaved: bool = False

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def theta(self, device: torch.device = _CPU) -> Tensor:
        """RoFormer's ``base ** (-2k / rotary_dim)`` for the pairs that turn, float64.

        The correctly rounded ladder (:func:`posenc.frequencies.ladder`), computed once
        when the configuration is parsed: a constant for :func:`torch.compile` too.
        """
        return self.ladder.to(device)

    def frequencies(self, seq_len: SeqLen = None, device: torch.device = _CPU) -> Tensor:
        """The float64 frequency of each rotated pair, for a sequence of ``seq_len``."""
        return self.rope_type.frequencies(self, seq_len, device)

    def attention_factor(self) -> float:
        """The factor on cos and sin (YaRN, LongRoPE; 1 for the other types)."""
        return self.rope_type.attention_factor(self)

    def trained_length(self) -> int | None:
        """Up to which length the frequencies are those of ``seq_len=None``, if they vary."""
        return self.rope_type.trained_length(self) if self.rope_type.trained_length else None

    def pair_axes(self) -> tuple[int, ...] | None:
        """The position axis (0 = t, 1 = h, 2 = w) of each rotated pair; None for 1-D RoPE.

        Chunked (Qwen2-VL): the first ``sections[0]`` pairs turn with t, the next
        ``sections[1]`` with h, then w (section ``i`` with axis ``i % 3``, as Hugging
        Face's ``split``). Interleaved (Qwen3-VL): pair ``k`` turns with h when
        ``k % 3 == 1`` and ``k < 3 · sections[1]``, with w when ``k % 3 == 2`` and
        ``k < 3 · sections[2]``, else with t: interleaved sections that sum to fewer
        pairs than the rotated ones leave the pairs after them to t, as Hugging
        Face's ``recomposition_frequencies`` does (chunked sections sum to the
        rotated pairs: Hugging Face's ``split`` refuses others).
        """
        if self.sections is None:
            return None
        if not self.interleaved:
            return tuple(i % 3 for i, n in enumerate(self.sections) for _ in range(n))
        pairs = self.rotary_dim // 2
        _, h, w = self.sections
        return tuple(
            1 if k % 3 == 1 and k < 3 * h else 2 if k % 3 == 2 and k < 3 * w else 0
            for k in range(pairs)
        )


@dataclass(frozen=True)
class RopeType:
    r"""One ``rope_type``: the keys it reads, its frequencies and its attention factor.

    Attributes:
        name: The ``rope_type`` string.
        keys: The keys it reads besides ``rope_type``, ``rope_theta`` and
            ``partial_rotary_factor``.
        frequencies: ``(config, seq_len, device) -> float64 (rotary_dim // 2,)``.
        attention_factor: ``config -> float``.
        finish: Cross-key checks and derived values:
            ``(values, config, scaling) -> values``.
        trained_length: For types whose frequencies depend on the length: the length
            up to which they do not.
        rotates_whole_head: Whether ``partial_rotary_factor`` gives pairs frequency 0
            instead of leaving features unrotated ("proportional").
        example: A complete ``rope_parameters`` dict of the type, for heads of
            ``EXAMPLE_HEAD_DIM`` (64) features (per-pair keys hold one value per pair),
            without ``rope_theta``: the configuration the tests check the type with,
            against its formula and against Hugging Face. Copy it before editing it.
        hf_name: The ``rope_type`` Hugging Face gives it (posenc parses Hugging Face
            configs, so it is ``name``), or None for a type only posenc builds.
        doc: What its frequencies are, one reStructuredText line (with
            :math:`\omega_k = base^{-2k/d}`, :math:`s` = ``factor`` and :math:`L_0` the
            trained length): its line in every list of the types, all written from
            the records by :func:`type_list`.
        origin: Where it comes from (its authors, or the model that introduced it),
            shown beside its name; None for the unscaled ladder.
    """

    name: str
    keys: Mapping[str, Key]
    frequencies: Callable[[RopeConfig, SeqLen, torch.device], Tensor]
    attention_factor: Callable[[RopeConfig], float] = lambda config: 1.0
    finish: Callable[[dict[str, Any], RopeConfig, Mapping[str, Any]], dict[str, Any]] | None = None
    trained_length: Callable[[RopeConfig], int] | None = None
    rotates_whole_head: bool = False
    example: Mapping[str, Any] = field(kw_only=True)
    hf_name: str | None = field(kw_only=True)
    doc: str = field(kw_only=True)
    origin: str | None = field(default=None, kw_only=True)

    def reads(self, key: str) -> bool:
        """Whether a config of this type reads ``key`` (required or with a default)."""
        return key in self.keys

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Pickled by name: a module pickles with its configuration, not the functions.
        return _record, (self.name,)


def _record(name: str) -> RopeType:
    return RECORDS[name]


# -- Frequencies and attention factors, one function each ------------------------------------


def _default(config: RopeConfig, seq_len: SeqLen, device: torch.device) -> Tensor:
    return config.theta(device)


def _linear(config: RopeConfig, seq_len: SeqLen, device: torch.device) -> Tensor:
    """Position interpolation (Chen et al., 2023): every frequency / factor."""
    return config.theta(device) / float(config["factor"])


def _dynamic(config: RopeConfig, seq_len: SeqLen, device: torch.device) -> Tensor:
    """Dynamic NTK (bloc97 and emozilla, 2023): base · (s n / L0 - (s - 1)) ** (d / (d - 2)).

    ``(base · g) ** e = base ** e · g ** e``: the correctly rounded ladder times the
    growth, which is exactly 1 up to the trained length (the frequencies are then the
    default ones, bit for bit).
    """
    trained, s, d = config["max_position_embeddings"], config["factor"], config.rotary_dim
    if seq_len is None:
        n: float | Tensor = float(trained)
    elif isinstance(seq_len, Tensor):
        n = seq_len.to(_F64).clamp(min=trained)
    else:
        n = float(max(seq_len, trained))
    growth = (s * n / trained - (s - 1)) ** (d / (d - 2))
    exponents = torch.arange(0, d, 2, dtype=_F64, device=device)[: d // 2] / d
    return config.theta(device) * torch.pow(growth, -exponents)


def _yarn_ramp(config: RopeConfig, device: torch.device) -> Tensor:
    """YaRN's share of interpolation per pair: 0 for fast pairs, 1 for slow ones."""
    d, trained, base = config.rotary_dim, config["original_max_position_embeddings"], config.base

    def pair_index(rotations: float) -> float:
        # The (fractional) pair whose wavelength fits `rotations` times into the trained length.
        return d * math.log(trained / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_index(config["beta_fast"]), pair_index(config["beta_slow"])
    if config["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # as in the reference code: no division by zero
    k = torch.arange(d // 2, dtype=_F64, device=device)
    return ((k - low) / (high - low)).clamp(0.0, 1.0)


def _yarn(config: RopeConfig, seq_len: SeqLen, device: torch.device) -> Tensor:
    """YaRN (Peng et al., 2023): fast pairs kept, slow ones interpolated, a ramp between."""
    theta = config.theta(device)
    interpolated = _yarn_ramp(config, device)
    return theta / float(config["factor"]) * interpolated + theta * (1 - interpolated)


def _yarn_attention(config: RopeConfig) -> float:
    if config["attention_factor"] is not None:
        return float(config["attention_factor"])
    s = config["factor"]

    def mscale(m: float) -> float:
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

    if config["mscale"] and config["mscale_all_dim"]:
        return mscale(config["mscale"]) / mscale(config["mscale_all_dim"])
    return mscale(1.0)


def _llama3(config: RopeConfig, seq_len: SeqLen, device: torch.device) -> Tensor:
    """Llama 3.1: short wavelengths kept, long ones / factor, a smooth band between.

    With ``low_freq_factor == high_freq_factor`` (Llama 4) the band is empty: a
    wavelength longer than ``trained / low`` is divided by the factor, any other is
    kept, the boundary wavelength too (Hugging Face's ``wavelen > low_freq_wavelen``;
    its blend is 0 / 0 there, NaN).
    """
    theta = config.theta(device)
    trained, s = config["original_max_position_embeddings"], config["factor"]
    low, high = config["low_freq_factor"], config["high_freq_factor"]
    wavelength = 2 * math.pi / theta
    kept = torch.where(wavelength > trained / low, theta / s, theta)
    if high == low:
        return kept
    blend = (trained / wavelength - low) / (high - low)
    between = (wavelength >= trained / high) & (wavelength <= trained / low)
    return torch.where(between, (1 - blend) * kept / s + blend * kept, kept)


def _longrope(config: RopeConfig, seq_len: SeqLen, device: torch.device) -> Tensor:
    """LongRoPE (Ding et al., 2024): a factor per pair, long ones past the trained length."""
    short = torch.tensor(config["short_factor"], dtype=_F64, device=device)
    long = torch.tensor(config["long_factor"], dtype=_F64, device=device)
    trained = config["original_max_position_embeddings"]
    if isinstance(seq_len, Tensor):
        chosen = torch.where(seq_len.to(device) > trained, long, short)
    else:
        chosen = long if seq_len is not None and seq_len > trained else short
    return config.theta(device) / chosen


def _longrope_attention(config: RopeConfig) -> float:
    if config["attention_factor"] is not None:
        return float(config["attention_factor"])
    s, trained = config["factor"], config["original_max_position_embeddings"]
    return 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(trained))


def _proportional(config: RopeConfig, seq_len: SeqLen, device: torch.device) -> Tensor:
    """Gemma 4: the first share of the pairs turn at base ** (-2k / d) / factor, the rest not."""
    turning = config.ladder.numel()
    zeros = torch.zeros(config.head_dim // 2 - turning, dtype=_F64, device=device)
    return torch.cat((config.theta(device) / config["factor"], zeros))


# -- Cross-key rules ---------------------------------------------------------------------


def _derive_factor(
    values: dict[str, Any], config: RopeConfig, scaling: Mapping[str, Any]
) -> dict[str, Any]:
    """YaRN's and LongRoPE's ``factor``: given, or max_position_embeddings / original.

    As in Hugging Face, whose DeepSeek-V3 and Phi-3 configs leave it out.
    """
    name = config.rope_type.name
    if values["factor"] is None:
        if values["max_position_embeddings"] is not None:
            values["factor"] = (
                values["max_position_embeddings"] / values["original_max_position_embeddings"]
            )
        elif name == "longrope" and values["attention_factor"] is not None:
            values["factor"] = 1.0  # unused: the attention factor is given
        else:
            raise ValueError(
                f"scaling with rope_type={name!r} needs the key 'factor', or "
                "'max_position_embeddings' to derive it as max_position_embeddings / "
                f"original_max_position_embeddings; got the keys {sorted(scaling)}"
            )
    return values


def _yarn_finish(
    values: dict[str, Any], config: RopeConfig, scaling: Mapping[str, Any]
) -> dict[str, Any]:
    values = _derive_factor(values, config, scaling)
    if values["beta_fast"] < values["beta_slow"]:
        raise ValueError(
            "scaling['beta_fast'] must be >= scaling['beta_slow'] (rope_type='yarn'; the "
            "pairs turning more than beta_fast times over the trained length keep their "
            f"frequency, those turning fewer than beta_slow times are interpolated), got "
            f"beta_fast={values['beta_fast']} and beta_slow={values['beta_slow']}"
        )
    return values


def _llama3_finish(
    values: dict[str, Any], config: RopeConfig, scaling: Mapping[str, Any]
) -> dict[str, Any]:
    low, high = values["low_freq_factor"], values["high_freq_factor"]
    if high < low:  # equal: Llama 4's, no blend band
        raise ValueError(
            "scaling['high_freq_factor'] must be at least scaling['low_freq_factor'] "
            "(rope_type='llama3'; equal ones, as Llama 4's, leave no blend band), got "
            f"high_freq_factor={high} and low_freq_factor={low}"
        )
    return values


def _dynamic_finish(
    values: dict[str, Any], config: RopeConfig, scaling: Mapping[str, Any]
) -> dict[str, Any]:
    if config.rotary_dim < 4:
        raise ValueError(
            f"rope_type='dynamic' needs a rotary dimension of at least 4 (its exponent "
            f"is d / (d - 2)), got {config.rotary_dim}"
        )
    return values


# -- The records -------------------------------------------------------------------------

_FACTOR = Key(number)
_ORIGINAL = Key(position_count)
_FACTOR_OR_DERIVED = {
    "factor": Key(number, None),
    "max_position_embeddings": Key(position_count, None),
    "original_max_position_embeddings": _ORIGINAL,
    "attention_factor": Key(number, None),
}

#: The head dimension every record's ``example`` is written for (32 rotated pairs).
EXAMPLE_HEAD_DIM = 64

#: Every ``rope_type`` posenc builds, in the order the docs list them.
RECORDS: dict[str, RopeType] = {
    record.name: record
    for record in (
        RopeType(
            "default",
            {},
            _default,
            example={"rope_type": "default"},
            hf_name="default",
            doc=r":math:`\omega_k` as above.",
        ),
        RopeType(
            "linear",
            {"factor": _FACTOR},
            _linear,
            example={"rope_type": "linear", "factor": 2.0},
            hf_name="linear",
            doc=r":math:`\omega_k / s`.",
            origin="position interpolation, Chen et al., 2023",
        ),
        RopeType(
            "dynamic",
            {"factor": _FACTOR, "max_position_embeddings": Key(position_count)},
            _dynamic,
            finish=_dynamic_finish,
            trained_length=lambda config: config["max_position_embeddings"],
            example={"rope_type": "dynamic", "factor": 4.0, "max_position_embeddings": 4096},
            hf_name="dynamic",
            doc=(
                r"a larger base, :math:`base \cdot (s\,n/L_0 - (s - 1))^{d/(d-2)}`, where "
                r":math:`n = \max(` ``seq_len``, :math:`L_0)` and :math:`L_0` is the key "
                r"``max_position_embeddings``; without ``seq_len``, :math:`n = L_0`."
            ),
            origin="NTK-aware, bloc97 and emozilla, 2023",
        ),
        RopeType(
            "yarn",
            {
                **_FACTOR_OR_DERIVED,
                "beta_fast": Key(number, 32.0),
                "beta_slow": Key(number, 1.0),
                "mscale": Key(real, None),
                "mscale_all_dim": Key(real, None),
                "truncate": Key(boolean, True),
            },
            _yarn,
            _yarn_attention,
            finish=_yarn_finish,
            example={
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 4096,
            },
            hf_name="yarn",
            doc=(
                r"the pairs that turn more than ``beta_fast`` (32) times over :math:`L_0` keep "
                r":math:`\omega_k`, those that turn less than ``beta_slow`` (1) times get "
                r":math:`\omega_k / s`, and a ramp linear in ``k`` blends the two between them. "
                r"The attention factor is ``attention_factor``, or :math:`0.1 \ln s + 1`, or with "
                r"``mscale`` and ``mscale_all_dim`` the ratio :math:`(0.1\,m \ln s + 1) / "
                r"(0.1\,m_{all} \ln s + 1)`."
            ),
            origin="Peng et al., 2023",
        ),
        RopeType(
            "llama3",
            {
                "factor": _FACTOR,
                "original_max_position_embeddings": _ORIGINAL,
                "low_freq_factor": Key(number),
                "high_freq_factor": Key(number),
            },
            _llama3,
            finish=_llama3_finish,
            example={  # Llama 3.1's
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            hf_name="llama3",
            doc=(
                r"wavelengths shorter than :math:`L_0` / ``high_freq_factor`` keep "
                r":math:`\omega_k`, those longer than :math:`L_0` / ``low_freq_factor`` get "
                r":math:`\omega_k / s`, and the band between is blended by :math:`\gamma = "
                r"(L_0/\lambda_k - low)/(high - low)`. Equal factors (Llama 4) leave no band: the "
                r"wavelength on the boundary is kept."
            ),
            origin="Meta, Llama 3.1",
        ),
        RopeType(
            "longrope",
            {
                **_FACTOR_OR_DERIVED,
                "short_factor": Key(factors),
                "long_factor": Key(factors),
            },
            _longrope,
            _longrope_attention,
            finish=_derive_factor,
            trained_length=lambda config: config["original_max_position_embeddings"],
            example={
                "rope_type": "longrope",
                "original_max_position_embeddings": 4096,
                "factor": 32.0,
                "short_factor": [1.0 + 0.02 * k for k in range(EXAMPLE_HEAD_DIM // 2)],
                "long_factor": [1.0 + 0.5 * k for k in range(EXAMPLE_HEAD_DIM // 2)],
            },
            hf_name="longrope",
            doc=(
                r":math:`\omega_k / f_k`, with :math:`f` = ``long_factor`` when ``seq_len`` "
                r"exceeds :math:`L_0`, else ``short_factor``. The attention factor is "
                r"``attention_factor``, or :math:`\sqrt{1 + \ln s / \ln L_0}`."
            ),
            origin="Ding et al., 2024",
        ),
        RopeType(
            "proportional",
            {"factor": Key(number, 1.0)},
            _proportional,
            rotates_whole_head=True,
            example={"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 2.0},
            hf_name="proportional",
            doc=(
                r"the first ``partial_rotary_factor`` share of the ``d/2`` pairs turn at "
                r":math:`base^{-2k/d} / s`, the other pairs not at all (frequency 0)."
            ),
            origin="Gemma 4",
        ),
    )
}
#: Every ``rope_type`` that :func:`parse` accepts.
ROPE_TYPES: tuple[str, ...] = tuple(RECORDS)


def type_list() -> str:
    r"""Every ``rope_type`` as a reStructuredText bullet list, one line per record.

    The list in :func:`~posenc.rope_frequencies`' docstring, and the one the docs
    show (the ``rope-types`` directive of ``docs/_ext/rope_types.py``): written from
    each record's :attr:`~RopeType.origin` and :attr:`~RopeType.doc`, so that a new
    record is listed wherever the types are.

    Example:
        >>> print(type_list().splitlines()[1])
        - ``"linear"`` (position interpolation, Chen et al., 2023): :math:`\omega_k / s`.
    """
    return "\n".join(
        f'- ``"{record.name}"``'
        + (f" ({record.origin})" if record.origin else "")
        + f": {record.doc}"
        for record in RECORDS.values()
    )


def reading(key: str) -> tuple[str, ...]:
    """The ``rope_type`` of every record that reads ``key``, in the records' order.

    Example:
        >>> reading("original_max_position_embeddings")
        ('yarn', 'llama3', 'longrope')
    """
    return tuple(name for name, record in RECORDS.items() if record.reads(key))


#: Keys of schemes posenc does not build yet: refused rather than ignored (none now:
#: the multimodal keys are built, :data:`MULTIMODAL_KEYS`).
NOT_BUILT: dict[str, str] = {}
#: M-RoPE's keys, read beside every ``rope_type`` (Hugging Face composes them).
MULTIMODAL_KEYS = frozenset({"mrope_section", "mrope_interleaved"})

#: The keys of Hugging Face's ``RopeParameters`` (and the older ``type``, and the
#: config field posenc asks to be copied in): accepted by every type, read by some.
KNOWN_KEYS = frozenset(
    {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
    | {key for record in RECORDS.values() for key in record.keys}
    | MULTIMODAL_KEYS
)

_WHERE_FROM = {
    "max_position_embeddings": (
        " (the model config's max_position_embeddings, the length it was trained with: "
        "Hugging Face reads it from the config, outside rope_parameters)"
    ),
    "original_max_position_embeddings": " (the length the model was pretrained with)",
}


# -- Parsing -----------------------------------------------------------------------------


def _type_name(given: Mapping[str, Any], scaling: Mapping[str, Any]) -> str:
    rope_type, legacy = given.get("rope_type"), given.get("type")
    if rope_type is not None and legacy is not None and str(legacy) != str(rope_type):
        raise ValueError(
            f"scaling gives rope_type={rope_type!r} and type={legacy!r}; "
            "give one ('type' is the older name of 'rope_type')"
        )
    name = rope_type if rope_type is not None else legacy
    if name is None:
        raise ValueError(
            f"scaling needs a 'rope_type', one of {ROPE_TYPES}, got the keys {sorted(scaling)}"
        )
    if isinstance(name, str):  # NumPy's str_ too
        name = str(name)
    return _checks.choice("scaling['rope_type']", name, ROPE_TYPES)


def _check_keys(given: Mapping[str, Any], name: str) -> None:
    for key in given:
        if key in NOT_BUILT:
            raise ValueError(
                f"scaling has the key {key!r} of {NOT_BUILT[key]}, which posenc does not "
                f"build yet; without it this config would build plain 1-D RoPE "
                f"(rope_type={name!r}), which is not the model's"
            )
    for key in given:
        if key not in KNOWN_KEYS:
            near = difflib.get_close_matches(str(key), sorted(KNOWN_KEYS), n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            warnings.warn(
                f"scaling has the key {key!r}, which no rope_type reads{hint}: it is ignored",
                UserWarning,
                stacklevel=4,
            )


def _rotary_dim(rotary: int, head_dim: int, rope_type: str, fraction: float) -> int:
    if rotary < 2 or rotary % 2:
        share = "" if fraction == 1.0 else f" = int(head_dim={head_dim} × {fraction})"
        raise ValueError(
            f"the rotated dimension must be even and at least 2 (rope_type={rope_type!r}): "
            f"got {rotary}{share}"
        )
    return rotary


def parse(scaling: object, head_dim: int, base: float) -> RopeConfig:
    """Check a ``rope_parameters`` dict (or None) and return it parsed, defaults filled in.

    Args:
        scaling: None (plain RoPE), or a dict in Hugging Face's ``rope_parameters``
            format; it is copied, so later edits of the caller's dict or lists do not
            reach the result.
        head_dim: Features per head.
        base: The base of the wavelengths; a ``rope_theta`` in ``scaling`` must equal it.

    Returns:
        The :class:`RopeConfig`.

    Raises:
        TypeError: ``scaling`` is not a dict, or a value has the wrong type.
        ValueError: a key its type needs is missing, the type is unknown, a key of a
            scheme posenc does not build is given, a value is out of range, or
            ``rope_theta`` differs from ``base``.
    """
    if scaling is None:
        scaling = {"rope_type": "default"}
    if not isinstance(scaling, Mapping):
        raise TypeError(
            "scaling must be None or a dict in Hugging Face's rope_parameters format "
            f"(e.g. {{'rope_type': 'linear', 'factor': 2.0}}), got {_checks._show(scaling)}"
        )
    given = {k: copy.deepcopy(v) for k, v in scaling.items() if v is not None}
    name = _type_name(given, scaling)
    record = RECORDS[name]
    _check_keys(given, name)
    if "rope_theta" in given:
        theta = _number("rope_theta", given["rope_theta"], name)
        if theta != base:
            raise ValueError(
                f"scaling['rope_theta']={given['rope_theta']!r} differs from base={base:g}: "
                "pass base=scaling['rope_theta'] (the model's rope_theta) to use it"
            )
    fraction = (
        _number("partial_rotary_factor", given["partial_rotary_factor"], name)
        if "partial_rotary_factor" in given
        else 1.0
    )
    if fraction > 1.0:
        raise ValueError(
            f"scaling['partial_rotary_factor'] (rope_type={name!r}) must be in (0, 1], "
            f"got {fraction}"
        )
    rotary = head_dim if record.rotates_whole_head else int(head_dim * fraction)
    config = RopeConfig(record, head_dim, _rotary_dim(rotary, head_dim, name, fraction), base)
    values: dict[str, Any] = {"partial_rotary_factor": fraction}
    for key, spec in record.keys.items():
        if key in given:
            values[key] = spec.parse(key, given[key], name, config.rotary_dim // 2)
        elif spec.required:
            raise ValueError(
                f"scaling with rope_type={name!r} needs the key {key!r}"
                + _WHERE_FROM.get(key, "")
                + f"; got the keys {sorted(scaling)}"
            )
        else:
            values[key] = spec.default
    if record.finish is not None:
        values = record.finish(values, config, scaling)
    # Proportional rotates the whole head, with the first share of its pairs turning.
    turning = int(fraction * head_dim // 2) if record.rotates_whole_head else rotary // 2
    pairs = torch.tensor(ladder(turning, base, float(rotary)), dtype=_F64, device=_CPU)
    sections, interleaved = _multimodal(given, name, config.rotary_dim // 2)
    return RopeConfig(
        record, head_dim, config.rotary_dim, base, values, pairs, sections, interleaved
    )


def _multimodal(
    given: Mapping[str, Any], name: str, pairs: int
) -> tuple[tuple[int, ...] | None, bool]:
    """``mrope_section`` (three counts of the rotated pairs; fewer when interleaved), the flag."""
    interleaved = given.get("mrope_interleaved", False)
    if not isinstance(interleaved, bool):
        raise TypeError(
            f"{_where('mrope_interleaved', name)} must be a bool, got {_checks._show(interleaved)}"
        )
    if "mrope_section" not in given:
        if interleaved:
            raise ValueError(
                f"{_where('mrope_interleaved', name)} is True but scaling has no "
                "'mrope_section' (the pairs of t, h and w, e.g. [24, 20, 20] for Qwen3-VL)"
            )
        return None, False
    section = given["mrope_section"]
    if isinstance(section, Tensor):
        section = section.tolist()
    where = _where("mrope_section", name)
    if not isinstance(section, (list, tuple)) or not all(
        isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in section
    ):
        raise TypeError(
            f"{where} must be a list of three ints (pairs of t, h, w), got "
            f"{_checks._show(section)}"
        )
    counts = tuple(int(n) for n in section)
    if len(counts) != 3 or min(counts) < 0:
        raise ValueError(
            f"{where} must be three ints >= 0 (the rotated pairs of t, h and w), got "
            f"{list(counts)}"
        )
    if interleaved and sum(counts) > pairs:
        raise ValueError(
            f"{where} with mrope_interleaved must be three ints >= 0 (the rotated pairs of "
            f"t, h and w) summing to at most the rotated pairs, {pairs} (rotary dimension "
            f"{2 * pairs} / 2; the pairs left over turn with t), got {list(counts)}"
        )
    if not interleaved and sum(counts) != pairs:
        raise ValueError(
            f"{where} must be three ints >= 0 (the rotated pairs of t, h and w) summing to "
            f"the rotated pairs, {pairs} (rotary dimension {2 * pairs} / 2), got {list(counts)}"
            " (with mrope_interleaved, fewer: the pairs left over turn with t)"
        )
    return counts, interleaved
