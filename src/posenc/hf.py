r"""posenc inside Hugging Face ``transformers`` models: exact RoPE in one line.

Hugging Face's rotary modules compute their phases ``position × inv_freq`` in
float32, so a position of :math:`10^6` has a phase wrong by about
:math:`10^6 \cdot 2^{-24} \approx 0.06` radians. :func:`patch_rotary` replaces
every rotary module of a supported model by :class:`HFRotaryEmbedding`, which
keeps the modules' contract, ``rotary_emb(x, position_ids) -> (cos, sin)`` in
``x.dtype``, and computes the tables as :class:`~posenc.RotaryEmbedding` does:
float64 phases from integer positions, rounded once. In Qwen2-VL, Qwen2.5-VL and
Qwen3-VL that is the language model's multimodal RoPE, on ``(3, B, L)`` position ids.

This module never imports ``transformers``: it reads a config's attributes (or a
dict's keys) and the models' own modules, which are imported with the model.
``import posenc`` does not import it either.

>>> from posenc.hf import rotary_from_config
>>> config = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
...           "max_position_embeddings": 2048,
...           "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}
>>> rotary_from_config(config)
RotaryEmbedding(head_dim=64, max_len=2048, base=500000)
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

from . import _checks, rope_config
from .rotary import RotaryEmbedding, RotaryLayout, apply_rotary

__all__ = [
    "FAMILIES",
    "RECORDS",
    "ExactRotation",
    "Family",
    "HFRotaryEmbedding",
    "RotaryMismatchWarning",
    "Rotation",
    "TableForm",
    "exact_rotation",
    "patch_rotary",
    "rotary_from_config",
]

# The tables a Hugging Face rotary module returns (see HFRotaryEmbedding).
TableForm = Literal["widened", "repeated", "gptj", "complex", "halved"]
# Tables precomputed per module: later positions are computed on the fly, same values.
_MAX_LEN = 4096
# Where a value goes in the rope parameters: (layer type or None for every set, key).
_Target = tuple[str | None, str]
# The length a model was pretrained with, a field of the config beside its rope
# parameters: copied into them for the rope types whose record reads it.
_ORIGINAL = "original_max_position_embeddings"


# -- The rotation functions exact_rotation installs -------------------------------------


def _half_rotation(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1
) -> tuple[Tensor, Tensor]:
    """Hugging Face's ``apply_rotary_pos_emb`` (rotate-half), rotated by posenc."""
    h = cos.shape[-1] // 2
    c, s = cos.unsqueeze(unsqueeze_dim)[..., :h], sin.unsqueeze(unsqueeze_dim)[..., :h]
    return apply_rotary(q, c, s), apply_rotary(k, c, s)


def _pair_rotation(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1
) -> tuple[Tensor, Tensor]:
    """Cohere's ``apply_rotary_pos_emb`` (interleaved pairs, repeated tables), by posenc."""
    c, s = cos.unsqueeze(unsqueeze_dim)[..., ::2], sin.unsqueeze(unsqueeze_dim)[..., ::2]
    return (
        apply_rotary(q, c, s, layout="interleaved"),
        apply_rotary(k, c, s, layout="interleaved"),
    )


def _halved_rotation(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1
) -> tuple[Tensor, Tensor]:
    """gpt-oss's ``apply_rotary_pos_emb`` (rotate-half, one value per pair), by posenc."""
    c, s = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return apply_rotary(q, c, s), apply_rotary(k, c, s)


def _interleave_rotation(
    q: Tensor,
    k: Tensor,
    cos: Tensor,
    sin: Tensor,
    position_ids: Any = None,
    unsqueeze_dim: int = 1,
) -> tuple[Tensor, Tensor]:
    """DeepSeek-V3's ``apply_rotary_pos_emb_interleave``, by posenc.

    The pairs ``(2k, 2k + 1)`` of the input are rotated, and the result comes in
    rotate-half order (the pairs' first features, then their second ones), as
    Hugging Face's function returns it.
    """
    h = cos.shape[-1] // 2
    c, s = cos.unsqueeze(unsqueeze_dim)[..., :h], sin.unsqueeze(unsqueeze_dim)[..., :h]

    def halves(x: Tensor) -> Tensor:
        return torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)

    return apply_rotary(halves(q), c, s), apply_rotary(halves(k), c, s)


def _gptj_rotation(tensor: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
    """GPT-J's ``apply_rotary_pos_emb`` ((B, L, H, D), one value per pair), by posenc."""
    return apply_rotary(tensor, cos[:, :, None], sin[:, :, None], layout="interleaved")


def _complex_rotation(xq: Tensor, xk: Tensor, freqs_cis: Tensor) -> tuple[Tensor, Tensor]:
    """Llama 4's ``apply_rotary_emb`` ((B, L, H, D), complex tables), by posenc."""
    cos, sin = freqs_cis.real[:, :, None], freqs_cis.imag[:, :, None]
    return (
        apply_rotary(xq, cos, sin, layout="interleaved"),
        apply_rotary(xk, cos, sin, layout="interleaved"),
    )


def _complex_heads_rotation(xq: Tensor, xk: Tensor, freqs_cis: Tensor) -> tuple[Tensor, Tensor]:
    """DeepSeek-V2's ``apply_rotary_emb`` ((B, H, L, D), complex tables), by posenc."""
    cos, sin = freqs_cis.real.unsqueeze(1), freqs_cis.imag.unsqueeze(1)
    return (
        apply_rotary(xq, cos, sin, layout="interleaved"),
        apply_rotary(xk, cos, sin, layout="interleaved"),
    )


@dataclass(frozen=True)
class Rotation:
    """The rotation function a family's modeling module calls, and posenc's for it.

    Attributes:
        name: The function's name in the family's modeling module, which
            :func:`exact_rotation` replaces while it is active.
        exact: posenc's function with the same signature: float32 arithmetic on the
            tables of :class:`HFRotaryEmbedding`, one rounding.

    Example:
        >>> from posenc.hf import RECORDS
        >>> gptj = RECORDS["gptj"].rotation
        >>> gptj.name, gptj.exact.__name__
        ('apply_rotary_pos_emb', '_gptj_rotation')
    """

    name: str
    exact: Callable[..., Any]


_HALF = Rotation("apply_rotary_pos_emb", _half_rotation)
_PAIRS = Rotation("apply_rotary_pos_emb", _pair_rotation)
_GPTJ = Rotation("apply_rotary_pos_emb", _gptj_rotation)
_COMPLEX = Rotation("apply_rotary_emb", _complex_rotation)
_INTERLEAVE = Rotation("apply_rotary_pos_emb_interleave", _interleave_rotation)
_HALVED = Rotation("apply_rotary_pos_emb", _halved_rotation)
_COMPLEX_HEADS = Rotation("apply_rotary_emb", _complex_heads_rotation)
# The rotation functions of transformers' standard contract, by the form of the tables they
# take: a family's modeling module holds one or more of them, each verified against
# posenc's before it is replaced.
_STANDARD_ROTATIONS: dict[str, tuple[Rotation, ...]] = {
    "widened": (_HALF, _INTERLEAVE),
    "halved": (_HALVED,),
    "repeated": (_PAIRS,),  # Cohere 2's: interleaved pairs
    "complex": (_COMPLEX_HEADS, _COMPLEX),  # DeepSeek-V2's (B, H, L, D); Llama 4's (B, L, H, D)
}


# -- One record per model family ---------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """One model family as Hugging Face's code computes and applies its RoPE.

    Adding a family is one record in :data:`RECORDS`; :data:`FAMILIES`,
    :func:`rotary_from_config`, :func:`patch_rotary`, :func:`exact_rotation` and
    the peer tests follow from it. A family whose model skips RoPE in some layers
    needs nothing more: the layers that rotate call the one rotary module and the
    rotation function, and only those are replaced (Llama 4's NoPE layers, whose
    ``no_rope_layers`` entry is 0, call neither).

    Attributes:
        name: The record's key, the family's first model type.
        model_types: The ``model_type`` values of its configs: the whole model's
            and, for multimodal models, the text model's (``"..._text"``).
        rotary_classes: The class names of its text model's rotary module (the
            ``rotary_emb`` attribute); a vision tower's is not among them.
        layout: Which features pair up: ``"half"`` or ``"interleaved"``.
        form: The tables the rotary module returns (:class:`HFRotaryEmbedding`):
            ``"widened"``, ``"repeated"``, ``"gptj"``, or ``"complex"`` (Llama 4's
            ``freqs_cis``).
        rotation: The rotation function its attention calls (Llama 4's is
            ``apply_rotary_emb``, the others' ``apply_rotary_pos_emb``).
        table_dtype: The dtype of the tables the rotary module returns, when it is
            not the input's (OLMo 2's module returns float32 tables, Llama 4's
            complex64 ones).
        keys: The family's own keys of the transformers 4.x config form, and
            where each goes in the rope parameters (``(layer type, key)``; layer
            type None for every set): GPT-NeoX's ``rotary_emb_base`` is its
            ``rope_theta``. Every family reads ``rope_theta``,
            ``partial_rotary_factor`` and ``rope_scaling`` besides.
        defaults: The values its configuration fills in where a config has none,
            by the same ``(layer type, key)``: the family's ``rope_theta``, GPT-NeoX's
            and StableLM's ``partial_rotary_factor`` of 0.25.
        layer_types: The layer types of per-layer-type rope parameters (Gemma 3).
        flat_layer: The layer type a 4.x config's one set of parameters belongs to.
        fixed: Whether the family's code fixes the rope parameters (GPT-J: base
            10000, no scaling): a config that gives any is refused.
        mrope: Multimodal RoPE as the text rotary computes it: the
            ``mrope_section`` its code falls back on when the config has none, and
            whether the sections interleave, whatever ``mrope_interleaved`` says.
        type_aliases: ``rope_type`` names of its 4.x configs, and the type each is
            (Qwen2-VL's ``"mrope"`` is ``"default"``).

    Example:
        >>> from posenc.hf import RECORDS
        >>> cohere = RECORDS["cohere"]
        >>> cohere.layout, cohere.form, cohere.rotary_classes
        ('interleaved', 'repeated', ('CohereRotaryEmbedding',))
        >>> RECORDS["gpt_neox"].keys
        {'rotary_emb_base': (None, 'rope_theta'), 'rotary_pct': (None, 'partial_rotary_factor')}
    """

    name: str
    model_types: tuple[str, ...]
    rotary_classes: tuple[str, ...]
    layout: RotaryLayout = "half"
    form: TableForm = "widened"
    rotation: Rotation = _HALF
    table_dtype: torch.dtype | None = None
    keys: Mapping[str, tuple[str | None, str]] = field(default_factory=dict)
    defaults: Mapping[tuple[str | None, str], Any] = field(
        default_factory=lambda: {(None, "rope_theta"): 1e4}
    )
    layer_types: tuple[str, ...] = ()
    flat_layer: str | None = None
    fixed: bool = False
    mrope: tuple[tuple[int, int, int], bool] | None = None
    type_aliases: Mapping[str, str] = field(default_factory=dict)


def _theta(base: float) -> dict[_Target, Any]:
    return {(None, "rope_theta"): base}


def _half(name: str, cls: str, **more: Any) -> Family:
    return Family(name, (name,), (cls,), **more)


def _qwen_vl(
    name: str, cls: str, mrope: tuple[tuple[int, int, int], bool], base: float, **more: Any
) -> Family:
    more.setdefault("defaults", _theta(base))
    return Family(name, (name, f"{name}_text"), (cls,), mrope=mrope, **more)


_MROPE_ALIAS = {"mrope": "default"}

#: Every model family :func:`patch_rotary` patches, by name, in the order the docs list them.
RECORDS: dict[str, Family] = {
    family.name: family
    for family in (
        _half("llama", "LlamaRotaryEmbedding"),
        _half("mistral", "MistralRotaryEmbedding"),
        _half("qwen2", "Qwen2RotaryEmbedding"),
        _half("qwen3", "Qwen3RotaryEmbedding"),
        _half("gemma", "GemmaRotaryEmbedding"),
        _half("gemma2", "Gemma2RotaryEmbedding"),
        Family(
            "gemma3",
            ("gemma3", "gemma3_text"),
            ("Gemma3RotaryEmbedding",),
            keys={
                "rope_theta": ("full_attention", "rope_theta"),
                "rope_local_base_freq": ("sliding_attention", "rope_theta"),
            },
            defaults={
                ("full_attention", "rope_theta"): 1e6,
                ("sliding_attention", "rope_theta"): 1e4,
            },
            layer_types=("sliding_attention", "full_attention"),
            flat_layer="full_attention",
        ),
        _half("phi3", "Phi3RotaryEmbedding"),
        _half(
            "gpt_neox",
            "GPTNeoXRotaryEmbedding",
            keys={
                "rotary_emb_base": (None, "rope_theta"),
                "rotary_pct": (None, "partial_rotary_factor"),
            },
            defaults={(None, "rope_theta"): 1e4, (None, "partial_rotary_factor"): 0.25},
        ),
        _half(
            "gptj",
            "GPTJRotaryEmbedding",
            layout="interleaved",
            form="gptj",
            rotation=_GPTJ,
            keys={"rotary_dim": (None, "rotary_dim")},
            defaults={(None, "rope_theta"): 1e4, (None, "rotary_dim"): 64},
            fixed=True,
        ),
        _half(
            "cohere",
            "CohereRotaryEmbedding",
            layout="interleaved",
            form="repeated",
            rotation=_PAIRS,
            defaults=_theta(5e5),
        ),
        _half("olmo2", "Olmo2RotaryEmbedding", table_dtype=torch.float32),
        _half("granite", "GraniteRotaryEmbedding"),
        _half(
            "stablelm",
            "StableLmRotaryEmbedding",
            defaults={(None, "rope_theta"): 1e4, (None, "partial_rotary_factor"): 0.25},
        ),
        _half("starcoder2", "Starcoder2RotaryEmbedding"),
        Family(  # every fourth layer NoPE (no_rope_layers): those never call the rotation
            "llama4",
            ("llama4", "llama4_text"),
            ("Llama4TextRotaryEmbedding",),
            layout="interleaved",
            form="complex",
            rotation=_COMPLEX,
            table_dtype=torch.float32,
            defaults=_theta(5e5),
        ),
        _qwen_vl(
            "qwen2_vl",
            "Qwen2VLRotaryEmbedding",
            ((16, 24, 24), False),
            1e6,
            type_aliases=_MROPE_ALIAS,
        ),
        _qwen_vl(
            "qwen2_5_vl",
            "Qwen2_5_VLRotaryEmbedding",
            ((16, 24, 24), False),
            1e6,
            type_aliases=_MROPE_ALIAS,
        ),
        _qwen_vl("qwen3_vl", "Qwen3VLTextRotaryEmbedding", ((24, 20, 20), True), 5e5),
        _qwen_vl("qwen3_vl_moe", "Qwen3VLMoeTextRotaryEmbedding", ((24, 20, 20), True), 5e5),
        # Qwen3.5: interleaved multimodal RoPE whose section falls back on the code's
        # [11, 11, 10], a quarter of each head rotated (the config class's default)
        *(
            _qwen_vl(
                name,
                cls,
                ((11, 11, 10), True),
                1e4,
                defaults={(None, "rope_theta"): 1e4, (None, "partial_rotary_factor"): 0.25},
            )
            for name, cls in (
                ("qwen3_5", "Qwen3_5TextRotaryEmbedding"),
                ("qwen3_5_moe", "Qwen3_5MoeTextRotaryEmbedding"),
            )
        ),
    )
}

#: The ``model_type`` of every model :func:`patch_rotary` patches (from :data:`RECORDS`).
FAMILIES: tuple[str, ...] = tuple(t for family in RECORDS.values() for t in family.model_types)

_BY_TYPE: dict[str, Family] = {
    t: family for family in RECORDS.values() for t in family.model_types
}
# A config of no known family (or none given): read as Llama's is.
_OTHER = Family("other", (), ())
# The keys every family reads beside its rope parameters, and where they go.
_COMMON: dict[str, _Target] = {
    "rope_theta": (None, "rope_theta"),
    "partial_rotary_factor": (None, "partial_rotary_factor"),
}
# The keys only some families read, and which.
_OWN_KEYS: dict[str, tuple[str, ...]] = {
    key: tuple(f.name for f in RECORDS.values() if key in f.keys)
    for key in dict.fromkeys(k for f in RECORDS.values() for k in f.keys if k not in _COMMON)
}


def _get(config: Any, name: str) -> Any:
    """A config field: a key of a dict, an attribute of an object; None when absent."""
    if isinstance(config, Mapping):
        return config.get(name)
    return getattr(config, name, None)


def _integer_field(config: Any, *names: str) -> int | None:
    """The first of the fields given, as an int (NumPy's integers too); None if none is.

    Raises:
        TypeError: the field is a bool or not integral (``head_dim=64.0``).
    """
    for name in names:
        value = _get(config, name)
        if value is not None:
            return _checks.integer(f"config.{name}", value)
    return None


def _text_config(config: Any) -> Any:
    """The config of the language model: ``text_config`` where the config has one.

    Multimodal configs (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Gemma 3) keep the text
    model's fields there. In a dict, the fields beside ``text_config`` fill in
    those it lacks (a Hub ``config.json`` may carry some at the top only).
    """
    text = _get(config, "text_config")
    if text is None:
        return config
    if isinstance(config, Mapping) and isinstance(text, Mapping):
        outer = {key: value for key, value in config.items() if key != "text_config"}
        merged = {**outer, **{key: value for key, value in text.items() if value is not None}}
        if config.get("model_type") is not None:  # the family, e.g. "qwen2_vl"
            merged.setdefault("model_type", config["model_type"])
        return merged
    return text


def _family(config: Any) -> Family:
    """The record of a (text) config's ``model_type``; Llama's reading for others."""
    model_type = _get(config, "model_type")
    return _BY_TYPE.get(model_type, _OTHER) if isinstance(model_type, str) else _OTHER


def _refuse_foreign_keys(config: Any, family: Family) -> None:
    """Refuse a 4.x key of another family, which this one's code would not read."""
    for key, owners in _OWN_KEYS.items():
        value = _get(config, key)
        if value is not None and key not in family.keys:
            raise ValueError(
                f"the config carries {key}={value!r}, a transformers 4.x key of the "
                f"model types {', '.join(owners)}, but its model_type="
                f"{_get(config, 'model_type')!r} reads no such key: give the model_type "
                "of the family the config belongs to"
            )
    if family.fixed:
        for key in ("rope_parameters", "rope_scaling", *_COMMON):
            value = _get(config, key)
            if value is not None:
                raise ValueError(
                    f"the config carries {key}={value!r:.60}, but the code of "
                    f"model_type={family.name!r} fixes its rope parameters (base "
                    f"{family.defaults[None, 'rope_theta']:g}, no scaling) and reads none"
                )


def _fill(sets: dict[str | None, dict[str, Any]], target: _Target, value: Any) -> None:
    layer, key = target
    for kind, params in sets.items():
        if layer is None or kind == layer or kind is None:
            params.setdefault(key, value)


def _rope_parameters(config: Any, family: Family, layer_type: str | None) -> dict[str, Any]:
    """The config's ``rope_parameters`` for ``layer_type``, in the 5.x form.

    A 4.x config's ``rope_scaling``, ``rope_theta`` and the family's own keys are
    moved in (the parameters' own values first, as Hugging Face's conversion
    does), then the family's defaults.
    """
    name = "rope_parameters"
    given = _get(config, name)
    if given is None:  # transformers 4.x: rope_scaling and rope_theta beside each other
        name = "rope_scaling"
        given = _get(config, name)
    if given is not None and not isinstance(given, Mapping):
        raise TypeError(f"config.{name} must be a dict, got {type(given).__name__} {given!r:.60}")
    params = {k: dict(v) if isinstance(v, Mapping) else v for k, v in (given or {}).items()}
    nested = [key for key, value in params.items() if isinstance(value, Mapping)]
    if family.layer_types and not nested:  # a 4.x config of a per-layer-type family
        params = {kind: params if kind == family.flat_layer else {} for kind in family.layer_types}
        nested = list(family.layer_types)
    sets: dict[str | None, dict[str, Any]] = (
        {kind: params[kind] for kind in nested} if nested else {None: params}
    )
    found: dict[_Target, list[tuple[str, Any]]] = {}
    for key, target in {**_COMMON, **family.keys}.items():
        value = _get(config, key)
        if value is not None:
            found.setdefault(target, []).append((key, value))
    for target, values in found.items():
        if any(value != values[0][1] for _, value in values):
            given_as = " and ".join(f"{key}={value!r}" for key, value in values)
            raise ValueError(f"the config gives {target[1]} twice, as {given_as}: give one")
        _fill(sets, target, values[0][1])
    for target, value in family.defaults.items():
        _fill(sets, target, value)
    if layer_type is not None:
        if not nested:
            raise ValueError(
                f"layer_type={layer_type!r} was given, but the config's rope_parameters are "
                "one set for every layer: call rotary_from_config(config) without it"
            )
        if params.get(layer_type) is None:
            raise ValueError(
                f"layer_type={layer_type!r} has no rope_parameters in the config; the "
                f"layer types with some are {sorted(nested)}"
            )
        return dict(params[layer_type])
    if nested:
        raise ValueError(
            f"the config's rope_parameters are per layer type ({sorted(nested)}), as "
            "Gemma 3's and ModernBERT's: give layer_type=, one of them"
        )
    return params


def rotary_from_config(config: Any, *, layer_type: str | None = None) -> RotaryEmbedding:
    """The :class:`~posenc.RotaryEmbedding` of a Hugging Face model config.

    The config is read as its family's (the :class:`Family` record of its
    ``model_type`` in :data:`RECORDS`; a config of another type, or of none, as
    Llama's). From a config object (``model.config``) or a dict with its fields:

    - the head size: ``head_dim``, else ``hidden_size // num_attention_heads``;
    - ``rope_parameters`` (transformers 5), or ``rope_scaling`` and
      ``rope_theta`` (4.x): the base and the scaling. Per layer type, as Gemma
      3 and ModernBERT carry them (``{"sliding_attention": {...},
      "full_attention": {...}}``), the set of ``layer_type``;
    - ``partial_rotary_factor`` (in ``rope_parameters`` or beside them);
    - the family's own 4.x keys (:attr:`Family.keys`), moved into the
      parameters as the family's config class converts them: GPT-NeoX's
      ``rotary_emb_base`` and ``rotary_pct``, Gemma 3's
      ``rope_local_base_freq`` (the sliding layers' base; ``rope_theta`` and
      ``rope_scaling`` are the full layers'), GPT-J's ``rotary_dim``. A 4.x key
      of another family is refused by name, and so is a value given twice;
    - where a config has none, the family's defaults (:attr:`Family.defaults`):
      the base (1e6 for Qwen2-VL and Qwen2.5-VL, 5e5 for Cohere, Llama 4 and Qwen3-VL,
      1e6 and 1e4 for Gemma 3's full and sliding layers, else 10000), a
      ``partial_rotary_factor`` of 0.25 for GPT-NeoX and StableLM, a
      ``rotary_dim`` of 64 for GPT-J;
    - ``max_position_embeddings``, copied into the scaling (the types that do
      not read it ignore it), and ``original_max_position_embeddings``, copied
      for the types whose record reads it
      (:func:`posenc.rope_config.reading`); Hugging Face takes them from the
      config, and the trained length beside the parameters wins over theirs,
      as Phi-3 keeps it;
    - the layout of the family: interleaved pairs for GPT-J (whose code fixes
      base 10000 and no scaling: a config that gives rope parameters is
      refused), Cohere and Llama 4, rotate-half for the others;
    - Llama 4 (``model_type`` ``"llama4"`` or ``"llama4_text"``): base 5e5
      where none is given; its ``llama3`` scaling with ``low_freq_factor ==
      high_freq_factor`` has no blend band (see :func:`~posenc.rope_frequencies`);
    - Qwen2-VL, Qwen2.5-VL and Qwen3-VL (``model_type`` ``"qwen2_vl"``,
      ``"qwen2_5_vl"``, ``"qwen3_vl"``, ``"qwen3_vl_moe"`` or their ``_text``
      forms): multimodal RoPE, ``mrope_section`` from the rope parameters
      (4.x's ``rope_scaling`` of ``type="mrope"`` too), else the section the
      model's code falls back on ([16, 24, 24]; [24, 20, 20] for Qwen3-VL);
      chunked for Qwen2-VL and Qwen2.5-VL, interleaved for Qwen3-VL, as their
      text rotaries compute it whatever ``mrope_interleaved`` says. The module
      takes ``(3, B, L)`` positions, t, h and w (see
      :func:`~posenc.multimodal_positions`). Other models' ``mrope_section``
      and ``mrope_interleaved`` are read as given.

    A multimodal config's text model is read from its ``text_config`` (a
    dict's top-level fields fill in what its ``text_config`` lacks); the
    vision tower's rotary is not this one.

    The first ``min(max_position_embeddings, 4096)`` positions are
    precomputed; later ones are computed on the fly with the same values.

    Args:
        config: A ``transformers`` config, or a dict of its fields.
        layer_type: For per-layer-type parameters, which layer type.

    Returns:
        The module, in the family's layout.

    Raises:
        TypeError: ``rope_parameters`` (or 4.x's ``rope_scaling``) is not a dict;
            a size (``head_dim``, ``hidden_size``, ``num_attention_heads``,
            ``max_position_embeddings``, ``rotary_dim``,
            ``original_max_position_embeddings``) is not an integral number
            (NumPy's integers are; a bool or a float is not).
        ValueError: the head size cannot be read; ``layer_type`` is missing for
            per-layer-type parameters, or given for a config without them, or
            names a type the config lacks; the config carries a 4.x key of
            another family, gives one parameter under two keys with two values,
            or gives GPT-J rope parameters; ``rotary_dim`` is not in
            ``(0, head_dim]``; the parameters are refused by
            :func:`~posenc.rope_frequencies` (an ``mrope_section`` that does
            not sum to the rotated pairs among them).

    Example:
        >>> gemma3 = {"head_dim": 256, "max_position_embeddings": 32768,
        ...           "rope_parameters": {
        ...               "sliding_attention": {"rope_type": "default",
        ...                                     "rope_theta": 10000.0},
        ...               "full_attention": {"rope_type": "linear", "factor": 8.0,
        ...                                  "rope_theta": 1000000.0}}}
        >>> rotary_from_config(gemma3, layer_type="full_attention")
        RotaryEmbedding(head_dim=256, max_len=4096, base=1e+06, rope_type='linear')
        >>> rotary_from_config({"model_type": "gptj", "n_embd": 256, "n_head": 4,
        ...                     "rotary_dim": 16, "n_positions": 2048})
        RotaryEmbedding(head_dim=64, max_len=2048, layout='interleaved', rotary_dim=16)
        >>> qwen2_vl = {"model_type": "qwen2_vl", "text_config": {
        ...     "model_type": "qwen2_vl_text", "hidden_size": 1536, "num_attention_heads": 12,
        ...     "max_position_embeddings": 32768, "rope_parameters": {
        ...         "rope_type": "default", "rope_theta": 1000000.0,
        ...         "mrope_section": [16, 24, 24]}}}
        >>> rotary_from_config(qwen2_vl)
        RotaryEmbedding(head_dim=128, max_len=4096, base=1e+06, mrope_section=[16, 24, 24])

        A GPT-NeoX ``config.json`` of transformers 4.x, and a key of another family:

        >>> rotary_from_config({"model_type": "gpt_neox", "hidden_size": 512,
        ...                     "num_attention_heads": 8, "rotary_pct": 0.25,
        ...                     "rotary_emb_base": 20000.0})
        RotaryEmbedding(head_dim=64, max_len=4096, base=20000, rotary_dim=16)
        >>> rotary_from_config({"model_type": "llama", "hidden_size": 512,
        ...                     "num_attention_heads": 8, "rotary_emb_base": 20000.0})
        Traceback (most recent call last):
        ...
        ValueError: the config carries rotary_emb_base=20000.0, a transformers 4.x key of ...
    """
    config = _text_config(config)
    return _rotary(config, _family(config), layer_type)


def _rotary(config: Any, family: Family, layer_type: str | None) -> RotaryEmbedding:
    """:func:`rotary_from_config` of a text config, read as ``family``'s."""
    heads = _integer_field(config, "num_attention_heads", "n_head")
    hidden = _integer_field(config, "hidden_size", "n_embd")
    head_dim = _integer_field(config, "head_dim")
    if head_dim is None and heads and hidden:
        head_dim = hidden // heads
    if head_dim is None:
        raise ValueError(
            "the config gives no head size: it needs head_dim, or hidden_size and "
            f"num_attention_heads; got head_dim={head_dim!r}, hidden_size={hidden!r}, "
            f"num_attention_heads={heads!r}"
        )
    max_positions = _integer_field(config, "max_position_embeddings", "n_positions")
    max_len = _MAX_LEN if max_positions is None else min(max_positions, _MAX_LEN)
    if family is _OTHER or family.name in RECORDS:  # the generic rule: its class read them
        _refuse_foreign_keys(config, family)
    scaling = _rope_parameters(config, family, layer_type)
    base = float(scaling.get("rope_theta") or 10_000.0)
    rope_type = scaling.pop("type", "default")
    rope_type = scaling.setdefault("rope_type", rope_type)
    scaling["rope_type"] = family.type_aliases.get(rope_type, rope_type)
    if family.mrope is not None:  # as the model's text rotary: its default section, its form
        section, interleaved = family.mrope
        scaling.setdefault("mrope_section", list(section))
        scaling["mrope_interleaved"] = interleaved
    if "rotary_dim" in scaling:  # GPT-J: the features rotated, the first ones
        rotary_dim = _checks.integer("config.rotary_dim", scaling.pop("rotary_dim"))
        if not 0 < rotary_dim <= head_dim:
            raise ValueError(
                f"config.rotary_dim must be an int in (0, head_dim={head_dim}], got {rotary_dim!r}"
            )
        if rotary_dim != head_dim:
            scaling["partial_rotary_factor"] = rotary_dim / head_dim
    if max_positions is not None:
        scaling.setdefault("max_position_embeddings", max_positions)
    original = _integer_field(config, "original_max_position_embeddings")
    record = rope_config.RECORDS.get(scaling["rope_type"])  # unknown: refused by the module
    if original is not None and record is not None and record.reads(_ORIGINAL):
        # beside the parameters it wins, as in Hugging Face's conversion (Phi-3 keeps it there)
        scaling[_ORIGINAL] = original
    scaling["rope_theta"] = base
    return RotaryEmbedding(
        head_dim, base=base, layout=family.layout, scaling=scaling, max_len=max(max_len, 1)
    )


def _widened(cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    return torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)


def _repeated(cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    return cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)


def _sin_cos(cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    return sin, cos


def _halves(cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    return cos, sin


def _complex(cos: Tensor, sin: Tensor) -> Tensor:
    return torch.complex(cos, sin)


@dataclass(frozen=True)
class _Form:
    """One form of the tables a rotary module returns, from posenc's one value per pair.

    Attributes:
        name: The form's name, as :attr:`Family.form` and ``HFRotaryEmbedding``'s
            ``form`` give it.
        tables: ``(cos, sin) -> the tables``.
        copies: Whether ``tables`` writes new tensors: then the rows it is given may be
            views of a module's tables (no public method hands out such a view).
    """

    name: str
    tables: Callable[[Tensor, Tensor], tuple[Tensor, Tensor] | Tensor]
    copies: bool

    def __call__(self, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor] | Tensor:
        return self.tables(cos, sin)


# The tables of each form, from posenc's one value per pair.
_FORMS: dict[str, _Form] = {
    form.name: form
    for form in (
        _Form("widened", _widened, copies=True),
        _Form("repeated", _repeated, copies=True),
        _Form("gptj", _sin_cos, copies=False),  # the rows themselves
        _Form("complex", _complex, copies=True),
        _Form("halved", _halves, copies=False),  # the rows themselves, (cos, sin)
    )
}


class HFRotaryEmbedding(nn.Module):
    """A Hugging Face model's ``rotary_emb``, with posenc's tables.

    ``forward(x, position_ids) -> (cos, sin)`` as the models' rotary modules,
    in ``x.dtype`` on ``x.device``, for ``(1, L)`` and ``(B, L)`` position ids,
    times the attention factor. The values are computed from float64 phases and
    rounded once to ``x.dtype`` (:meth:`posenc.RotaryEmbedding.cos_sin`), so a
    bf16 table is as exact as bf16 allows at any position, and a float32 one at
    position :math:`10^6` as at 0.

    ``form`` says how the tables hold posenc's one value per pair, as the
    family's ``apply_rotary_pos_emb`` takes them:

    - ``"widened"`` (Llama and most models, rotate-half): each pair's value at
      both of its features, ``k`` and ``k + h``: ``cat((cos, cos), -1)``;
    - ``"repeated"`` (Cohere, interleaved pairs): at features ``2k`` and
      ``2k + 1``: ``cos.repeat_interleave(2, -1)``;
    - ``"gptj"``: ``(sin, cos)``, one value per pair, as GPT-J's module returns;
    - ``"complex"`` (Llama 4, interleaved pairs): one complex tensor
      ``cos + i sin``, one value per pair, as Llama 4's text rotary returns
      ``freqs_cis`` (with ``table_dtype=torch.float32``: complex64). Torch has no
      complex bfloat16: for a bfloat16 or float16 ``x`` the table is complex64.

    With several layer types (Gemma 3), ``forward(x, position_ids,
    layer_type)``. With multimodal RoPE (a ``rotary`` built with
    ``mrope_section``: Qwen2-VL, Qwen2.5-VL, Qwen3-VL), ``(3, B, L)`` position
    ids, t, h and w, as the Qwen-VL text models pass them (``(B, L)`` text
    positions count on every axis), and each pair's value is that of its axis,
    chunked or interleaved: the tables the models' ``apply_rotary_pos_emb``
    takes from their own text rotary.

    While :func:`exact_rotation` is active, the tables of a bfloat16 or float16
    ``x`` come in float32 instead, for the patched ``apply_rotary_pos_emb`` to
    rotate in float32 and round once.

    Args:
        rotary: The :class:`~posenc.RotaryEmbedding`, or one per layer type.
        form: ``"widened"``, ``"repeated"``, ``"gptj"`` or ``"complex"``.
        table_dtype: The tables' dtype whatever ``x``'s (OLMo 2's module returns
            float32 tables); None: ``x.dtype``.

    Attributes:
        rotary: The module, or a ``torch.nn.ModuleDict`` of them, one per layer type.
        form: The form of the tables.
        table_dtype: Their dtype, or None for the input's.
        config: The config of the module it replaced (set by :func:`patch_rotary`;
            some models read their rotary's, as Granite-SWA its tables' bases), or None.
        exact: Whether half-precision inputs get float32 tables (set by
            :func:`exact_rotation`, while any of its handles on the module is
            active). Never copied or pickled: a copy starts without it.

    Raises:
        ValueError: ``form`` is not one of the four.
        TypeError: ``table_dtype`` is not a floating dtype.

    Shapes:
        - x: any tensor; only its dtype and device are read
        - position_ids: ``(B, L)`` or ``(1, L)`` integer tensor; multimodal RoPE:
          ``(3, B, L)``, ``(1, B, L)`` or ``(B, L)``
        - output: ``(B, L, rotary_dim)`` each (``(B, L, rotary_dim / 2)`` for GPT-J;
          one complex ``(B, L, rotary_dim / 2)`` for ``"complex"``)

    Example:
        >>> import torch
        >>> from posenc import RotaryEmbedding
        >>> emb = HFRotaryEmbedding(RotaryEmbedding(8, base=500_000.0))
        >>> x = torch.zeros(1, 3, 32, dtype=torch.bfloat16)
        >>> cos, sin = emb(x, torch.tensor([[0, 1, 1_000_000]]))
        >>> cos.shape, cos.dtype
        (torch.Size([1, 3, 8]), torch.bfloat16)
        >>> torch.equal(cos[..., :4], cos[..., 4:])          # widened: both halves
        True
        >>> pairs = HFRotaryEmbedding(RotaryEmbedding(8, layout="interleaved"),
        ...                           form="repeated")
        >>> cos, _ = pairs(x, torch.tensor([[0, 1, 1_000_000]]))
        >>> torch.equal(cos[..., 0::2], cos[..., 1::2])      # repeated: 2k and 2k + 1
        True
    """

    def __init__(
        self,
        rotary: RotaryEmbedding | Mapping[str, RotaryEmbedding],
        *,
        form: TableForm = "widened",
        table_dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if form not in _FORMS:
            raise ValueError(f"form must be one of {', '.join(map(repr, _FORMS))}, got {form!r}")
        if table_dtype is not None and (
            not isinstance(table_dtype, torch.dtype) or not table_dtype.is_floating_point
        ):
            raise TypeError(
                f"table_dtype must be a floating torch.dtype or None, got {table_dtype!r}"
            )
        self.rotary: RotaryEmbedding | nn.ModuleDict = (
            rotary if isinstance(rotary, RotaryEmbedding) else nn.ModuleDict(dict(rotary))
        )
        self.form: TableForm = form
        self.table_dtype: torch.dtype | None = table_dtype
        self.exact: bool = False
        self.config: Any = None
        # How many active exact_rotation handles hold this module: exact while any does.
        self._exact_holds: int = 0

    def __getstate__(self) -> dict[str, Any]:
        """The module's state for a copy or a pickle, without :func:`exact_rotation`'s hold.

        The hold belongs to the handles of the block it was taken in, which a copy
        does not have: a copy made inside ``with exact_rotation(model)`` (a
        :func:`copy.deepcopy`, :func:`torch.save`, a pickle) gives tables in the
        input's dtype, as outside any block, whatever the original still does.
        """
        state: dict[str, Any] = super().__getstate__()  # type: ignore[no-untyped-call]
        state["exact"] = False
        state["_exact_holds"] = 0
        return state

    def extra_repr(self) -> str:
        """The form (and a fixed table dtype), shown in the module's repr."""
        dtype = "" if self.table_dtype is None else f", table_dtype={self.table_dtype}"
        return f"form={self.form!r}{dtype}"

    def forward(
        self, x: Tensor, position_ids: Tensor, layer_type: str | None = None
    ) -> tuple[Tensor, Tensor] | Tensor:
        """The cos and sin at ``position_ids``, in ``x``'s dtype and on its device.

        Args:
            x: A tensor of the model's activations: its dtype and device.
            position_ids: ``(B, L)`` or ``(1, L)`` integer positions; for
                multimodal RoPE ``(3, B, L)`` (t, h, w), or ``(1, B, L)`` or
                ``(B, L)`` for one stream on every axis.
            layer_type: The layer type, for a module with one table per type.

        Returns:
            ``(cos, sin)``, each ``(B, L, rotary_dim)``; ``(sin, cos)``, each
            ``(B, L, rotary_dim / 2)``, for GPT-J; ``cos + i sin``, complex
            ``(B, L, rotary_dim / 2)``, for ``"complex"``.

        Raises:
            TypeError: ``position_ids`` is not an integer tensor.
            ValueError: ``position_ids`` is not 2-D (for multimodal RoPE: not
                ``(3, B, L)``, ``(1, B, L)`` or ``(B, L)``); ``layer_type`` is
                missing or unknown for a module with one table per type.
        """
        rotary = self._rotary(layer_type)
        multimodal = rotary.n_axes == 3 and rotary.axes is None
        shape = tuple(position_ids.shape) if isinstance(position_ids, Tensor) else None
        if multimodal:
            if shape is not None and len(shape) == 2:  # text only: one stream, every axis
                position_ids = position_ids[None]
                shape = tuple(position_ids.shape)
            if shape is None or len(shape) != 3 or shape[0] not in (1, 3):
                raise ValueError(
                    "position_ids of multimodal RoPE must be a (3, B, L) integer tensor "
                    "(t, h and w; (1, B, L) or (B, L) for one stream on every axis), got "
                    f"{type(position_ids).__name__} of shape {shape}"
                )
        elif shape is None or len(shape) != 2:
            raise ValueError(
                f"position_ids must be a (B, L) or (1, L) integer tensor, got "
                f"{type(position_ids).__name__} of shape {shape}"
            )
        dtype = x.dtype if self.table_dtype is None else self.table_dtype
        if dtype in (torch.bfloat16, torch.float16) and (self.exact or self.form == "complex"):
            dtype = torch.float32  # and complex tables: torch has no complex bfloat16
        batch, length = position_ids.shape[-2:]
        cos, sin = rotary.cos_sin(
            length, positions=position_ids, batch=batch, dtype=dtype, device=x.device
        )
        return _FORMS[self.form](cos, sin)

    def _rotary(self, layer_type: str | None) -> RotaryEmbedding:
        # Without nn.Module.__getattr__: read on every call.
        rotary = cast("RotaryEmbedding | nn.ModuleDict", self._modules["rotary"])
        if isinstance(rotary, RotaryEmbedding):
            return rotary
        if layer_type is None or layer_type not in rotary:
            raise ValueError(
                f"layer_type={layer_type!r}: this module holds the layer types "
                f"{sorted(rotary)}; give one of them"
            )
        chosen = rotary[layer_type]
        assert isinstance(chosen, RotaryEmbedding)
        return chosen


class RotaryMismatchWarning(UserWarning):
    """A rotary module whose tables posenc's disagree with: :func:`patch_rotary` left it.

    The warning names the module (its path in the model and its class) and the
    largest difference found, or why posenc could not build its tables.
    """


# The probe a replacement is verified on: positions 0 to 255, where the float32 phases of
# Hugging Face's modules are within 2 * 256 * 2**-24 < 3.1e-5 radians of exact, whatever
# the frequency, so their cos and sin (times the attention factor, at most a few) are within
# _AGREE of posenc's; a wrong base, scaling, rotated width or layout is off by far more.
_PROBE = 256
_AGREE = 1e-4


def _record(model: nn.Module) -> Family | None:
    """The record of a model's family (by its config's ``model_type``), None if none."""
    config = getattr(model, "config", None)
    model_type = _get(config, "model_type") if config is not None else None
    return _BY_TYPE.get(model_type) if isinstance(model_type, str) else None


def _unsupported(model: nn.Module, what: str) -> TypeError:
    config = getattr(model, "config", None)
    model_type = _get(config, "model_type") if config is not None else None
    return TypeError(
        f"{what} does not support {type(model).__name__} (model_type={model_type!r}): it "
        "has no rotary module of transformers' standard contract (forward(x, position_ids) "
        "-> (cos, sin), an inv_freq buffer, a config with rope_parameters), and no record; "
        f"the records are the model types {', '.join(FAMILIES)}"
    )


def _is_rotary(module: nn.Module, family: Family) -> bool:
    """The family's text rotary module (by its class: none is imported here)."""
    cls = type(module)
    return cls.__module__.startswith("transformers.") and cls.__name__ in family.rotary_classes


def _follows_contract(module: nn.Module) -> bool:
    """Whether a module is a rotary module of transformers' standard contract.

    A class of ``transformers``, with an ``inv_freq`` buffer (or one per layer type,
    ``<type>_inv_freq``), a ``config`` with ``rope_parameters``, and
    ``forward(x, position_ids)`` (``forward(x, position_ids, layer_type)`` with one
    table per layer type). What it computes is verified before it is replaced.
    """
    cls = type(module)
    if not cls.__module__.startswith("transformers.") or isinstance(module, HFRotaryEmbedding):
        return False
    buffers = [name for name, _ in module.named_buffers(recurse=False)]
    if not any(name == "inv_freq" or name.endswith("_inv_freq") for name in buffers):
        return False
    if not isinstance(_get(getattr(module, "config", None), "rope_parameters"), Mapping):
        return False
    try:
        params = list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):  # pragma: no cover - a builtin forward
        return False
    return params[:2] == ["x", "position_ids"] and params[2:] in ([], ["layer_type"])


def _standard(module: nn.Module) -> Family:
    """The reading of a module of the standard contract: its config, rotate-half, widened.

    Its config's class has filled in the family's defaults, so the record has none.
    """
    model_type = _get(module.config, "model_type")
    name = model_type if isinstance(model_type, str) else type(module).__name__
    return Family(name, (name,), (type(module).__name__,), defaults={})


def _parts(tables: Any) -> list[Tensor]:
    """The tensors a rotary module returns, complex ones as their real and imaginary parts."""
    found = list(tables) if isinstance(tables, (tuple, list)) else [tables]
    out: list[Tensor] = []
    for table in found:
        if isinstance(table, Tensor) and table.is_complex():
            out += [table.real, table.imag]
        else:
            out.append(table)
    return out


def _tables_of(
    module: nn.Module, device: torch.device
) -> tuple[torch.dtype | None, int | None, bool]:
    """What a module of the standard contract returns to a bfloat16 input at one position.

    Returns:
        float32 where its tables are float32 whatever the input (OLMo 2's, or complex64
        ones), else None; their width (None where the call fails: the verification
        names why); and whether it returns one complex table (DeepSeek-V2's).
    """
    x = torch.zeros(1, dtype=torch.bfloat16, device=device)
    position = torch.zeros(1, 1, dtype=torch.long, device=device)
    layer_types = getattr(module, "layer_types", None)
    args = (x, position) if not layer_types else (x, position, sorted(layer_types)[0])
    try:
        with torch.no_grad():
            returned = module(*args)
            tables = _parts(returned)
    except Exception:
        return None, None, False
    complex_ = isinstance(returned, Tensor) and returned.is_complex()
    dtypes = {t.dtype for t in tables}
    widths = {t.shape[-1] for t in tables}
    width = widths.pop() if len(widths) == 1 else None
    return (torch.float32 if dtypes == {torch.float32} else None), width, complex_


def _reference(module: nn.Module) -> tuple[nn.Module, torch.device]:
    """The module to verify against, and its device: a new one built from its config.

    A model cast to bfloat16 casts its modules' ``inv_freq`` buffers too; the
    module's class, built again from its config on the CPU, holds them as
    transformers computes them. A class that cannot be built so is used as it is.
    """
    config = getattr(module, "config", None)
    if config is not None:
        try:
            with torch.device("cpu"):
                return type(module)(config), torch.device("cpu")
        except Exception:  # its own constructor: the module itself is the reference
            pass
    return module, _device_of(module, module)


def _disagreement(original: nn.Module, new: HFRotaryEmbedding) -> str | None:
    """Why ``new`` may not replace ``original``: None when their tables agree.

    Both are called on float32 input at positions ``0 .. _PROBE - 1`` (for
    multimodal RoPE ``(3, 1, L)`` positions with three different axes), per layer
    type; every table must have the same shape and agree within ``_AGREE``. Where
    posenc reads one axis, the module must not be multimodal RoPE whose config
    does not say so (:func:`_takes_axes`).
    """
    kinds: list[str | None] = list(new.rotary) if isinstance(new.rotary, nn.ModuleDict) else [None]
    original, device = _reference(original)
    x = torch.zeros(1, dtype=torch.float32, device=device)
    positions = torch.arange(_PROBE, device=device)[None]
    for kind in kinds:
        rotary = new._rotary(kind)
        pos = positions
        if rotary.n_axes == 3 and rotary.axes is None:
            pos = torch.stack((positions, positions // 2, positions // 3))
        args: tuple[Any, ...] = (x, pos) if kind is None else (x, pos, kind)
        try:
            with torch.no_grad():
                theirs = [t.cpu() for t in _parts(original(*args))]
                ours = _parts(new(*(a.cpu() if isinstance(a, Tensor) else a for a in args)))
        except Exception as error:
            return f"calling it on the probe raised {type(error).__name__}: {error}"
        shapes = [tuple(t.shape) for t in theirs], [tuple(t.shape) for t in ours]
        if shapes[0] != shapes[1]:
            return f"its tables have the shapes {shapes[0]}, posenc's {shapes[1]}"
        worst = _worst(theirs, ours)
        where = "" if kind is None else f" (layer type {kind!r})"
        if not worst <= _AGREE:
            return (
                f"its tables differ from posenc's by {worst:.3g} at positions below {_PROBE}"
                f"{where}; the bound is {_AGREE:g}"
            )
        if pos is positions and _takes_axes(original, args, theirs):
            return (
                f"it takes (3, B, L) positions, t, h and w{where} (multimodal RoPE), but "
                "its config gives no mrope_section: posenc would read one axis"
            )
    return None


def _takes_axes(original: nn.Module, args: tuple[Any, ...], theirs: list[Tensor]) -> bool:
    """Whether a module whose tables agree on ``(1, L)`` positions is multimodal RoPE.

    Called on ``(3, 1, L)`` positions of three different axes, it returns tables of the
    same shapes that differ from those of the first axis alone.
    """
    x, positions, *rest = args
    axes = torch.stack((positions, positions // 2, positions // 3))
    try:
        with torch.no_grad():
            found = [t.cpu() for t in _parts(original(x, axes, *rest))]
    except Exception:  # a module of one axis refuses them, or broadcasts them otherwise
        return False
    if [t.shape for t in found] != [t.shape for t in theirs]:
        return False
    return _worst(found, theirs) > _AGREE


def _worst(theirs: list[Tensor], ours: list[Tensor]) -> float:
    """The largest difference between two lists of tables of the same shapes, in float64."""
    pairs = zip(theirs, ours, strict=True)
    return max((float((a.double() - b.double()).abs().max()) for a, b in pairs), default=0.0)


def _multimodal(module: HFRotaryEmbedding) -> bool:
    """Whether a module's tables are multimodal RoPE's, on ``(3, B, L)`` positions."""
    rotary = module.rotary
    found = [rotary] if isinstance(rotary, RotaryEmbedding) else list(rotary.values())
    return any(isinstance(r, RotaryEmbedding) and r.n_axes == 3 and r.axes is None for r in found)


def _rotary_width(module: HFRotaryEmbedding) -> int:
    """The width of a module's widened tables: the rotated features."""
    rotary = module.rotary
    first = rotary if isinstance(rotary, RotaryEmbedding) else next(iter(rotary.values()))
    assert isinstance(first, RotaryEmbedding)
    cos, _ = first.cos_sin(1, dtype=torch.float32)
    return 2 * cos.shape[-1]


def _replacement(
    module: nn.Module, model: nn.Module, family: Family, table_dtype: torch.dtype | None = None
) -> HFRotaryEmbedding:
    config = _text_config(getattr(module, "config", None) or getattr(model, "config", None))
    layer_types = getattr(module, "layer_types", None)
    rotary: RotaryEmbedding | dict[str, RotaryEmbedding]
    if layer_types:  # one table per layer type (Gemma 3)
        rotary = {
            kind: _rotary(_layer_config(config, kind), family, kind)
            for kind in layer_types
            if _rope_parameters_for(config, kind)
        }
    else:
        rotary = _rotary(config, family, None)
    return HFRotaryEmbedding(
        rotary, form=family.form, table_dtype=family.table_dtype or table_dtype
    )


def _layer_config(config: Any, layer_type: str) -> Any:
    """The config of one layer type, where the config resolves one per type.

    Gemma 4's ``per_layer_config``, whose head size differs by type; else the config.
    """
    per_layer = _get(config, "per_layer_config")
    if per_layer is None:
        return config
    try:
        return per_layer[layer_type]
    except Exception:  # not one of its types (DeepSeek-V4's "main" table): the config's
        return config


def _rope_parameters_for(config: Any, layer_type: str) -> bool:
    params = _get(config, "rope_parameters")
    return isinstance(params, Mapping) and params.get(layer_type) is not None


def _place(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def patch_rotary(model: nn.Module) -> nn.Module:
    r"""Replace every rotary module of a Hugging Face model by posenc's, in place.

    Each ``rotary_emb`` becomes an :class:`HFRotaryEmbedding` built from the
    rotary module's config (:func:`rotary_from_config`), on the replaced
    module's device, in the dtype of the model's parameters and in the replaced
    module's mode (``training``, so an ``eval()`` model stays in eval mode): the
    model computes its tables from float64 phases,
    rounded once to the activations' dtype. The model itself is changed and
    returned (copy it first to keep the original). Nothing else changes: Hugging
    Face's ``apply_rotary_pos_emb`` still rotates (see :func:`exact_rotation`
    for posenc's rotation too), the weights and the state dict are the same
    (the tables are never saved). Calling it again on a patched model
    changes nothing.

    Supported ``model_type`` values: :data:`FAMILIES`, one :class:`Family` record
    each in :data:`RECORDS` (Llama, Mistral, Qwen2, Qwen3, Gemma, Gemma 2, Gemma
    3 per layer type, Phi-3 with LongRoPE, GPT-NeoX and StableLM with partial
    rotary, GPT-J and Cohere with interleaved pairs, OLMo 2, Granite,
    Starcoder2; Llama 4, interleaved pairs in complex form, its NoPE layers
    untouched, the text model or the whole model's language model (its vision
    tower's rotary stays); Qwen2-VL, Qwen2.5-VL and Qwen3-VL, with Qwen3-VL-MoE, multimodal
    RoPE on ``(3, B, L)`` position ids, whole models or their text models). In
    the Qwen-VL models only the language model's rotary is replaced: the vision
    tower's (2-D, on patch coordinates of a few hundred at most, where float32
    phases are exact to about :math:`10^{-5}`) stays Hugging Face's. Qwen3.5 and
    Qwen3.5-MoE: interleaved multimodal RoPE on a quarter of each head.

    Any other model (the generic rule): each module of transformers' standard
    rotary contract, ``forward(x, position_ids) -> (cos, sin)`` (or with
    ``layer_type``), an ``inv_freq`` buffer (``<type>_inv_freq`` per layer
    type), a ``config`` with ``rope_parameters``, is read from its own config
    as :func:`rotary_from_config` reads it (a config per layer type where the
    config resolves one, as Gemma 4's ``per_layer_config``), its tables' form and
    dtype from the module: widened, else interleaved pairs with repeated tables
    (Cohere 2's) where widened ones disagree; multimodal RoPE (a config with
    ``mrope_section``) as the config's ``mrope_interleaved`` says, else with its
    sections interleaved, else chunked (Qwen3-VL's code and its copies
    interleave them whatever the flag); one value per pair (``"halved"``,
    gpt-oss's); one complex table (DeepSeek-V2's ``freqs_cis``). The replaced
    module's ``config`` goes with its replacement.

    Every replacement, by a record or by the rule, is verified first: posenc's
    tables and those of the module's class built again from its config (a
    model cast to bf16 casts ``inv_freq`` too) are computed on float32 input at
    positions 0 to 255, where float32 phases are within :math:`3.1 \cdot
    10^{-5}` radians of exact; they must have the same shapes and agree within
    :math:`10^{-4}`. A module that does not, or whose config posenc cannot
    read, is left and named in a :class:`RotaryMismatchWarning`; when no module
    agrees, a ``TypeError`` names them all and the model is unchanged.

    Args:
        model: A Hugging Face model, e.g. ``LlamaForCausalLM``.

    Returns:
        ``model``, patched.

    Raises:
        TypeError: the model has neither a record nor a module of the standard
            contract (the message names it and the records), a record's model has
            no rotary module, or no module's tables agree with posenc's.

    Warns:
        RotaryMismatchWarning: a module was left because its tables disagree.
    """
    family = _record(model)
    found: list[tuple[str, nn.Module, Family]]
    if family is not None:
        found = [(n, m, family) for n, m in model.named_modules() if _is_rotary(m, family)]
    else:  # the generic rule: each module of the standard contract, read from its config
        found = [(n, m, _standard(m)) for n, m in model.named_modules() if _follows_contract(m)]
    already = any(isinstance(m, HFRotaryEmbedding) for m in model.modules())
    if not found and not already:
        if family is None:
            raise _unsupported(model, "patch_rotary")
        raise TypeError(
            f"patch_rotary found no rotary module in {type(model).__name__} "
            f"(model_type={_get(model.config, 'model_type')!r}; its rotary classes: "
            f"{', '.join(family.rotary_classes)})"
        )
    floating = (p for p in model.parameters() if p.is_floating_point())
    dtype = next((p.dtype for p in floating), torch.get_default_dtype())
    left: list[str] = []
    for name, module, record in found:
        device = _device_of(module, model)
        reason: str | None = None
        try:
            table_dtype = None
            readings = [record]
            if record is not family:  # the generic rule: the tables' dtype and form
                table_dtype, width, complex_ = _tables_of(module, device)
                new = _replacement(module, model, record)
                if complex_:  # one complex table, cos + i sin (DeepSeek-V2's freqs_cis)
                    readings = [dataclasses.replace(record, layout="interleaved", form="complex")]
                elif width is not None and width * 2 == _rotary_width(new):  # one per pair
                    readings = [dataclasses.replace(record, form="halved")]
                else:  # rotate-half, else interleaved pairs (Cohere 2's repeated tables)
                    pairs = dataclasses.replace(record, layout="interleaved", form="repeated")
                    readings = [record, pairs]
                if _multimodal(new):  # M-RoPE: its sections interleaved, else chunked, whatever
                    # the config's mrope_interleaved says (Qwen3-VL's code interleaves always)
                    readings[1:1] = [
                        dataclasses.replace(readings[0], mrope=((0, 0, 0), interleaved))
                        for interleaved in (True, False)
                    ]
            for reading in readings:  # the first whose tables agree; else the first's reason
                new = _replacement(module, model, reading, table_dtype)
                why = _disagreement(module, new)  # verified on the CPU, in float32
                if why is None:
                    reason = None
                    break
                reason = reason or why
        except Exception as error:  # e.g. Gemma 4's per-layer head_dim refuses a global read
            reason = f"posenc cannot read its config: {type(error).__name__}: {error}"
        if reason is not None:
            left.append(f"{name or 'the model'} ({type(module).__name__}): {reason}")
            continue
        # where the module was (its own buffers' device: a model split over devices
        # keeps each rotary beside its layers), in the model's dtype, in its mode
        new.to(device=device, dtype=dtype).train(module.training)
        if hasattr(module, "config"):  # some models read it (Granite-SWA: each table's base)
            new.config = module.config
        _place(model, name, new)
    if left and len(left) == len(found) and not already:
        raise TypeError(
            f"patch_rotary replaced nothing in {type(model).__name__}: " + "; ".join(left)
        )
    for what in left:
        warnings.warn(
            f"patch_rotary left {what}; Hugging Face's module stays",
            RotaryMismatchWarning,
            stacklevel=2,
        )
    return model


def _device_of(module: nn.Module, model: nn.Module) -> torch.device:
    for tensor in (*module.buffers(), *module.parameters(), *model.parameters()):
        return tensor.device
    return torch.device("cpu")


# -- The rotation, patched at module level: explicit and reversible ------------------------


# What exact_rotation replaced, per (modeling module, function name): the function
# that was installed before the first active handle, and how many handles hold it. The
# last handle undone restores it, whatever the order the handles are undone in.
_INSTALLED: dict[tuple[str, str], tuple[Callable[..., Any], int]] = {}


def _hold(namespace: ModuleType, rotation: Rotation) -> None:
    key = (namespace.__name__, rotation.name)
    original, holds = _INSTALLED.get(key, (getattr(namespace, rotation.name), 0))
    _INSTALLED[key] = (original, holds + 1)
    setattr(namespace, rotation.name, rotation.exact)


def _release(namespace: ModuleType, rotation: Rotation) -> None:
    key = (namespace.__name__, rotation.name)
    original, holds = _INSTALLED[key]
    if holds > 1:
        _INSTALLED[key] = (original, holds - 1)
        return
    del _INSTALLED[key]
    if getattr(namespace, rotation.name, None) is rotation.exact:  # not replaced since
        setattr(namespace, rotation.name, original)


class ExactRotation:
    """The handle :func:`exact_rotation` returns: :meth:`undo` restores what it changed.

    Also a context manager: ``with exact_rotation(model): ...`` undoes on exit. It
    holds the model's :class:`HFRotaryEmbedding` modules, the modeling modules
    whose rotation function it replaced, and which function that is (the
    :class:`Rotation` of the family's record).

    Handles count: the rotation function is Hugging Face's again once every
    active handle on its modeling module is undone, in any order, and a module
    gives float32 tables while any active handle holds it (nested blocks on one
    model: leaving the inner one leaves the outer one's in force).

    Attributes:
        active: Whether this handle is in force (False once undone).
    """

    def __init__(
        self,
        modules: list[HFRotaryEmbedding],
        functions: list[ModuleType],
        rotation: Rotation = _HALF,
        *,
        rotations: list[tuple[ModuleType, Rotation]] | None = None,
    ) -> None:
        self._modules = modules
        # (modeling module, rotation) pairs: one rotation in each module given, or those given
        self._held = [(namespace, rotation) for namespace in functions] + list(rotations or [])
        self.active: bool = True
        for module in modules:
            module._exact_holds += 1
            module.exact = True
        for namespace, held in self._held:
            _hold(namespace, held)

    def undo(self) -> None:
        """Release this handle's hold: what no other active handle holds is restored.

        Twice is harmless.
        """
        if not self.active:
            return
        for namespace, held in reversed(self._held):
            _release(namespace, held)
        for module in self._modules:
            module._exact_holds = max(module._exact_holds - 1, 0)
            module.exact = module._exact_holds > 0
        self.active = False

    def __enter__(self) -> ExactRotation:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.undo()


def exact_rotation(model: nn.Module) -> ExactRotation:
    """Posenc's rotation in a patched model: float32 arithmetic, one rounding, until undone.

    After :func:`patch_rotary` the tables are exact, but Hugging Face's
    ``apply_rotary_pos_emb`` multiplies a bf16 query by bf16 tables and adds
    the products in bf16: three roundings. This replaces that function (the
    :class:`Rotation` of the family's record), in the modeling module of the
    model's family, by one that calls :func:`posenc.apply_rotary` (float32
    arithmetic on float32 tables, one rounding to the query's dtype), and makes
    the model's :class:`HFRotaryEmbedding` modules give float32 tables to
    half-precision inputs. Float32 and float64 models compute the same either
    way but for rounding order.

    The function is module-level: while active, every model of that family in
    the process uses it (with its own tables it computes what Hugging Face's
    does, with fewer roundings). Call :meth:`ExactRotation.undo`, or use the
    handle as a context manager, to restore it. Handles nest and may be undone
    in any order: the function is restored when the last active one is undone
    (each does not save what another installed), and a model's modules give
    float32 tables while any of its handles is active.

    For a model of the generic rule (no record), the functions of the standard
    contract in its modeling modules (``apply_rotary_pos_emb``; DeepSeek's
    ``apply_rotary_pos_emb_interleave``, which rotates interleaved pairs and
    returns them in rotate-half order) are each verified first: rotated by
    them and by posenc's on a random float32 query and key, within 1e-5.

    Args:
        model: A model patched by :func:`patch_rotary`.

    Returns:
        The handle that undoes the change.

    Raises:
        TypeError: the model is not supported, or not patched; or a rotation
            function of the generic rule is not reproduced by posenc's (named:
            an error, as the patched tables would reach it in float32).
    """
    family = _record(model)
    modules = [m for m in model.modules() if isinstance(m, HFRotaryEmbedding)]
    if family is None and not modules:
        raise _unsupported(model, "exact_rotation")
    if not modules:
        raise TypeError(
            f"exact_rotation needs a model patched by patch_rotary: {type(model).__name__} "
            f"(model_type={_get(model.config, 'model_type')!r}) has no HFRotaryEmbedding"
        )
    namespaces: dict[str, ModuleType] = {}
    for module in model.modules():
        namespace = sys.modules.get(type(module).__module__)
        if namespace is not None and namespace.__name__.startswith("transformers.models."):
            namespaces[namespace.__name__] = namespace
    forms = sorted({m.form for m in modules})
    held: list[tuple[ModuleType, Rotation]] = []
    refused: list[str] = []
    candidates: dict[str, list[tuple[str, Rotation]]] = {}  # by the function's name
    if family is not None:
        candidates[family.rotation.name] = [(family.form, family.rotation)]
    else:
        for form in forms:
            for rotation in _STANDARD_ROTATIONS.get(form, ()):
                candidates.setdefault(rotation.name, []).append((form, rotation))
    for namespace in namespaces.values():
        for function_name, options in candidates.items():
            function = getattr(namespace, function_name, None)
            if not callable(function):
                continue
            if family is not None:
                held.append((namespace, options[0][1]))
                continue
            # the generic rule: the first of posenc's rotations that agrees replaces it
            original = _INSTALLED.get((namespace.__name__, function_name), (function, 0))[0]
            reasons = [_rotation_disagreement(original, r, form) for form, r in options]
            agreeing = [r for (_, r), why in zip(options, reasons, strict=True) if why is None]
            if agreeing:
                held.append((namespace, agreeing[0]))
            else:
                refused.append(f"{namespace.__name__}.{function_name}: {reasons[0]}")
    if refused:
        # an error, not a warning: the patched modules would hand float32 tables to a
        # function that rounds as Hugging Face's does, and the model would not be exact
        raise TypeError(
            "exact_rotation cannot replace the rotation of "
            f"{type(model).__name__}: " + "; ".join(refused)
        )
    return ExactRotation(modules, [], rotations=held)


def _rotation_disagreement(
    function: Callable[..., Any], rotation: Rotation, form: str = "widened"
) -> str | None:
    """Why posenc's ``rotation`` may not replace ``function``: None when they agree.

    Both rotate the same random float32 query and key (``(B, H, L, D)``; Llama 4's
    complex rotation ``(B, L, H, D)``) by tables of the ``form`` the patched module
    gives, of positions up to 148, over the whole head and, where ``function`` takes
    a head wider than its tables (partial rotary), over a head twice as wide; they
    must agree within 1e-5.
    """
    generator = torch.Generator().manual_seed(0)
    rope = RotaryEmbedding(16, base=100.0)
    pairs = rope.cos_sin(5, positions=torch.arange(5)[None] * 37, batch=1, dtype=torch.float32)
    tables = _FORMS[form](*pairs)
    args = tables if isinstance(tables, tuple) else (tables,)
    heads_first = rotation is not _COMPLEX  # Llama 4's rotates (B, L, H, D)
    for width, optional in ((16, False), (32, True)):
        shape = (1, 2, 5, width) if heads_first else (1, 5, 2, width)
        q, k = (torch.randn(*shape, generator=generator) for _ in range(2))
        try:
            theirs = function(q, k, *args)
        except Exception as error:
            if optional:
                continue
            return f"calling it raised {type(error).__name__}: {error}"
        try:
            ours = rotation.exact(q, k, *args)
        except Exception as error:  # another layout of the tables than posenc's
            return f"posenc's {rotation.exact.__name__} raised {type(error).__name__}: {error}"
        if not all(
            isinstance(a, Tensor) and a.shape == b.shape and float((a - b).abs().max()) <= 1e-5
            for a, b in zip(theirs, ours, strict=False)
        ):
            return f"it does not rotate as posenc's {rotation.exact.__name__} (head of {width})"
    return None
