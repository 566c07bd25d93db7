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

import sys
from collections.abc import Mapping
from types import ModuleType, TracebackType
from typing import Any, Literal

import torch
from torch import Tensor, nn

from .rotary import RotaryEmbedding, RotaryLayout, apply_rotary

__all__ = [
    "FAMILIES",
    "ExactRotation",
    "HFRotaryEmbedding",
    "exact_rotation",
    "patch_rotary",
    "rotary_from_config",
]

#: The ``model_type`` of every model :func:`patch_rotary` patches.
FAMILIES: tuple[str, ...] = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "phi3",
    "gpt_neox",
    "gptj",
    "qwen2_vl",
    "qwen2_vl_text",
    "qwen2_5_vl",
    "qwen2_5_vl_text",
    "qwen3_vl",
    "qwen3_vl_text",
    "qwen3_vl_moe",
    "qwen3_vl_moe_text",
)
# Multimodal RoPE as the Qwen-VL models' text rotaries compute it (transformers 5.x):
# the mrope_section their code falls back on when the config has none, and whether the
# sections interleave. Qwen3-VL's module always interleaves, flag or not.
_MROPE: dict[str, tuple[tuple[int, int, int], bool]] = {
    "qwen2_vl": ((16, 24, 24), False),
    "qwen2_5_vl": ((16, 24, 24), False),
    "qwen3_vl": ((24, 20, 20), True),
    "qwen3_vl_moe": ((24, 20, 20), True),
}
# Tables precomputed per module: later positions are computed on the fly, same values.
_MAX_LEN = 4096


def _get(config: Any, name: str) -> Any:
    """A config field: a key of a dict, an attribute of an object; None when absent."""
    if isinstance(config, Mapping):
        return config.get(name)
    return getattr(config, name, None)


def _first(config: Any, *names: str) -> Any:
    for name in names:
        value = _get(config, name)
        if value is not None:
            return value
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


def _mrope_family(model_type: Any) -> str | None:
    """The key of :data:`_MROPE` for a Qwen-VL model type (text model's or whole's)."""
    if not isinstance(model_type, str):
        return None
    family = model_type.removesuffix("_text")
    return family if family in _MROPE else None


def _rope_parameters(config: Any, layer_type: str | None) -> dict[str, Any]:
    """The config's ``rope_parameters`` for ``layer_type``, in the 5.x form."""
    params = _get(config, "rope_parameters")
    if params is None:  # transformers 4.x: rope_scaling and rope_theta beside each other
        scaling = _get(config, "rope_scaling")
        params = dict(scaling) if scaling is not None else {"rope_type": "default"}
        theta = _get(config, "rope_theta")
        if theta is not None:
            params.setdefault("rope_theta", theta)
    if not isinstance(params, Mapping):
        raise TypeError(
            f"config.rope_parameters must be a dict, got {type(params).__name__} {params!r:.60}"
        )
    nested = [key for key, value in params.items() if isinstance(value, Mapping)]
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
        params = params[layer_type]
    elif nested:
        raise ValueError(
            f"the config's rope_parameters are per layer type ({sorted(nested)}), as "
            "Gemma 3's and ModernBERT's: give layer_type=, one of them"
        )
    return dict(params)


def rotary_from_config(config: Any, *, layer_type: str | None = None) -> RotaryEmbedding:
    """The :class:`~posenc.RotaryEmbedding` of a Hugging Face model config.

    Reads, from a config object (``model.config``) or a dict with its fields:

    - the head size: ``head_dim``, else ``hidden_size // num_attention_heads``;
    - ``rope_parameters`` (transformers 5), or ``rope_scaling`` and
      ``rope_theta`` (4.x): the base and the scaling. Per layer type, as Gemma
      3 and ModernBERT carry them (``{"sliding_attention": {...},
      "full_attention": {...}}``), the set of ``layer_type``;
    - ``partial_rotary_factor`` (in ``rope_parameters`` or beside them);
    - ``max_position_embeddings`` and ``original_max_position_embeddings``,
      copied into the scaling where it has none (the dynamic, YaRN and
      LongRoPE formulas read them; Hugging Face takes them from the config);
    - GPT-J (``model_type="gptj"``): ``rotary_dim`` of the head, the
      interleaved layout, base 10000, as its code fixes them;
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
        The module, in the half layout (interleaved for GPT-J).

    Raises:
        TypeError: ``rope_parameters`` is not a dict.
        ValueError: the head size cannot be read; ``layer_type`` is missing for
            per-layer-type parameters, or given for a config without them, or
            names a type the config lacks; the parameters are refused by
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
    """
    config = _text_config(config)
    model_type = _get(config, "model_type")
    heads = _first(config, "num_attention_heads", "n_head")
    hidden = _first(config, "hidden_size", "n_embd")
    head_dim = _get(config, "head_dim")
    if head_dim is None and heads and hidden:
        head_dim = hidden // heads
    if not isinstance(head_dim, int) or isinstance(head_dim, bool):
        raise ValueError(
            "the config gives no head size: it needs head_dim, or hidden_size and "
            f"num_attention_heads; got head_dim={head_dim!r}, hidden_size={hidden!r}, "
            f"num_attention_heads={heads!r}"
        )
    max_positions = _first(config, "max_position_embeddings", "n_positions")
    max_len = _MAX_LEN if not isinstance(max_positions, int) else min(max_positions, _MAX_LEN)
    layout: RotaryLayout = "half"
    if model_type == "gptj":
        rotary_dim = _get(config, "rotary_dim") or head_dim
        scaling: dict[str, Any] = {"rope_type": "default"}
        if rotary_dim != head_dim:
            scaling["partial_rotary_factor"] = rotary_dim / head_dim
        return RotaryEmbedding(
            head_dim, layout="interleaved", scaling=scaling, max_len=max(max_len, 1)
        )
    scaling = _rope_parameters(config, layer_type)
    base = float(scaling.get("rope_theta") or _get(config, "rope_theta") or 10_000.0)
    scaling.setdefault("rope_type", scaling.pop("type", "default"))
    if scaling["rope_type"] == "mrope":  # Qwen2-VL's 4.x name for default frequencies
        scaling["rope_type"] = "default"
    family = _mrope_family(model_type)
    if family is not None:  # as the model's text rotary: its default section, its form
        section, interleaved = _MROPE[family]
        scaling.setdefault("mrope_section", list(section))
        scaling["mrope_interleaved"] = interleaved
    fraction = _first(config, "partial_rotary_factor", "rotary_pct")
    if "partial_rotary_factor" not in scaling and fraction is not None:
        scaling["partial_rotary_factor"] = fraction
    if isinstance(max_positions, int):
        scaling.setdefault("max_position_embeddings", max_positions)
    original = _get(config, "original_max_position_embeddings")
    if scaling["rope_type"] in ("yarn", "longrope", "llama3") and original is not None:
        scaling.setdefault("original_max_position_embeddings", original)
    scaling["rope_theta"] = base
    return RotaryEmbedding(head_dim, base=base, layout=layout, scaling=scaling, max_len=max_len)


class HFRotaryEmbedding(nn.Module):
    """A Hugging Face model's ``rotary_emb``, with posenc's tables.

    ``forward(x, position_ids) -> (cos, sin)`` as the models' rotary modules:
    one value per feature (each pair's value at both of its features, the
    tables Hugging Face's ``apply_rotary_pos_emb`` takes), times the attention
    factor, in ``x.dtype`` on ``x.device``, for ``(1, L)`` and ``(B, L)``
    position ids. The values are computed from float64 phases and rounded once
    to ``x.dtype`` (:meth:`posenc.RotaryEmbedding.cos_sin`), so a bf16 table is
    as exact as bf16 allows at any position, and a float32 one at position
    :math:`10^6` as at 0. With ``form="gptj"`` it returns ``(sin, cos)``, one
    value per pair, as GPT-J's module does. With several layer types
    (Gemma 3), ``forward(x, position_ids, layer_type)``. With multimodal RoPE
    (a ``rotary`` built with ``mrope_section``: Qwen2-VL, Qwen2.5-VL, Qwen3-VL),
    ``(3, B, L)`` position ids, t, h and w, as the Qwen-VL text models pass
    them (``(B, L)`` text positions count on every axis), and each pair's value
    is that of its axis, chunked or interleaved: the tables the models'
    ``apply_rotary_pos_emb`` takes from their own text rotary.

    While :func:`exact_rotation` is active, the tables of a bfloat16 or float16
    ``x`` come in float32 instead, for the patched ``apply_rotary_pos_emb`` to
    rotate in float32 and round once.

    Args:
        rotary: The :class:`~posenc.RotaryEmbedding`, or one per layer type.
        form: ``"widened"`` (Llama and most models) or ``"gptj"``.

    Attributes:
        rotary: The module, or a ``torch.nn.ModuleDict`` of them, one per layer type.
        exact: Whether half-precision inputs get float32 tables (set by
            :func:`exact_rotation`).

    Shapes:
        - x: any tensor; only its dtype and device are read
        - position_ids: ``(B, L)`` or ``(1, L)`` integer tensor; multimodal RoPE:
          ``(3, B, L)``, ``(1, B, L)`` or ``(B, L)``
        - output: ``(B, L, rotary_dim)`` each (``(B, L, rotary_dim / 2)`` for GPT-J)

    Example:
        >>> from posenc import RotaryEmbedding
        >>> emb = HFRotaryEmbedding(RotaryEmbedding(8, base=500_000.0))
        >>> x = torch.zeros(1, 3, 32, dtype=torch.bfloat16)
        >>> cos, sin = emb(x, torch.tensor([[0, 1, 1_000_000]]))
        >>> cos.shape, cos.dtype
        (torch.Size([1, 3, 8]), torch.bfloat16)
        >>> torch.equal(cos[..., :4], cos[..., 4:])          # widened: both halves
        True
    """

    def __init__(
        self,
        rotary: RotaryEmbedding | Mapping[str, RotaryEmbedding],
        *,
        form: Literal["widened", "gptj"] = "widened",
    ) -> None:
        super().__init__()
        if form not in ("widened", "gptj"):
            raise ValueError(f"form must be 'widened' or 'gptj', got {form!r}")
        self.rotary: RotaryEmbedding | nn.ModuleDict = (
            rotary if isinstance(rotary, RotaryEmbedding) else nn.ModuleDict(dict(rotary))
        )
        self.form: Literal["widened", "gptj"] = form
        self.exact: bool = False

    def extra_repr(self) -> str:
        """The form, shown in the module's repr."""
        return f"form={self.form!r}"

    def forward(
        self, x: Tensor, position_ids: Tensor, layer_type: str | None = None
    ) -> tuple[Tensor, Tensor]:
        """The cos and sin at ``position_ids``, in ``x``'s dtype and on its device.

        Args:
            x: A tensor of the model's activations: its dtype and device.
            position_ids: ``(B, L)`` or ``(1, L)`` integer positions; for
                multimodal RoPE ``(3, B, L)`` (t, h, w), or ``(1, B, L)`` or
                ``(B, L)`` for one stream on every axis.
            layer_type: The layer type, for a module with one table per type.

        Returns:
            ``(cos, sin)``, each ``(B, L, rotary_dim)``; ``(sin, cos)``, each
            ``(B, L, rotary_dim / 2)``, for GPT-J.

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
        dtype = x.dtype
        if self.exact and dtype in (torch.bfloat16, torch.float16):
            dtype = torch.float32
        batch, length = position_ids.shape[-2:]
        cos, sin = rotary.cos_sin(
            length, positions=position_ids, batch=batch, dtype=dtype, device=x.device
        )
        if self.form == "gptj":
            return sin, cos
        return torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)

    def _rotary(self, layer_type: str | None) -> RotaryEmbedding:
        if isinstance(self.rotary, RotaryEmbedding):
            return self.rotary
        if layer_type is None or layer_type not in self.rotary:
            raise ValueError(
                f"layer_type={layer_type!r}: this module holds the layer types "
                f"{sorted(self.rotary)}; give one of them"
            )
        rotary = self.rotary[layer_type]
        assert isinstance(rotary, RotaryEmbedding)
        return rotary


def _model_type(model: nn.Module) -> str | None:
    config = getattr(model, "config", None)
    value = _get(config, "model_type") if config is not None else None
    return value if isinstance(value, str) else None


def _is_rotary(module: nn.Module) -> bool:
    """A ``transformers`` rotary module (by its class: none is imported here)."""
    cls = type(module)
    return (
        cls.__module__.startswith("transformers.")
        and cls.__name__.endswith("RotaryEmbedding")
        and "Vision" not in cls.__name__  # the Qwen-VL vision towers': left as they are
    )


def _check_supported(model: nn.Module, what: str) -> str:
    name = type(model).__name__
    model_type = _model_type(model)
    if model_type not in FAMILIES:
        raise TypeError(
            f"{what} does not support {name} (model_type={model_type!r}); it patches the "
            f"model types {', '.join(FAMILIES)}"
        )
    return model_type


def _replacement(module: nn.Module, model: nn.Module, model_type: str) -> HFRotaryEmbedding:
    config = getattr(module, "config", None) or getattr(model, "config", None)
    if model_type == "gptj":
        return HFRotaryEmbedding(rotary_from_config(config), form="gptj")
    layer_types = getattr(module, "layer_types", None)
    if layer_types:  # one table per layer type (Gemma 3)
        ropes = {
            kind: rotary_from_config(config, layer_type=kind)
            for kind in layer_types
            if _rope_parameters_for(config, kind)
        }
        return HFRotaryEmbedding(ropes)
    return HFRotaryEmbedding(rotary_from_config(config))


def _rope_parameters_for(config: Any, layer_type: str) -> bool:
    params = _get(config, "rope_parameters")
    return isinstance(params, Mapping) and params.get(layer_type) is not None


def _place(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def patch_rotary(model: nn.Module) -> nn.Module:
    """Replace every rotary module of a Hugging Face model by posenc's, in place.

    Each ``rotary_emb`` becomes an :class:`HFRotaryEmbedding` built from the
    rotary module's config (:func:`rotary_from_config`), on the device and in
    the dtype of the model: the model computes its tables from float64 phases,
    rounded once to the activations' dtype. Nothing else changes: Hugging
    Face's ``apply_rotary_pos_emb`` still rotates (see :func:`exact_rotation`
    for posenc's rotation too), the weights and the state dict are the same
    (the tables are never saved). Calling it again on a patched model
    changes nothing.

    Supported ``model_type`` values: :data:`FAMILIES` (Llama, Mistral, Qwen2,
    Qwen3, Gemma, Gemma 2, Gemma 3 per layer type, Phi-3 with LongRoPE,
    GPT-NeoX with partial rotary, GPT-J interleaved; Qwen2-VL, Qwen2.5-VL and
    Qwen3-VL, with Qwen3-VL-MoE, multimodal RoPE on ``(3, B, L)`` position
    ids, whole models or their text models). In the Qwen-VL models only the
    language model's rotary is replaced: the vision tower's (2-D, on patch
    coordinates of a few hundred at most, where float32 phases are exact to
    about :math:`10^{-5}`) stays Hugging Face's.

    Args:
        model: A model of a supported family, e.g. ``LlamaForCausalLM``.

    Returns:
        ``model``, patched.

    Raises:
        TypeError: the model is not of a supported family (the message names
            it and the families), or it has no rotary module.
    """
    model_type = _check_supported(model, "patch_rotary")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    found = [(n, m) for n, m in model.named_modules() if _is_rotary(m)]
    already = any(isinstance(m, HFRotaryEmbedding) for m in model.modules())
    if not found and not already:
        raise TypeError(
            f"patch_rotary found no rotary module in {type(model).__name__} "
            f"(model_type={model_type!r})"
        )
    for name, module in found:
        _place(model, name, _replacement(module, model, model_type).to(device))
    return model


# -- The rotation, patched at module level: explicit and reversible ------------------------


def _half_rotation(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1
) -> tuple[Tensor, Tensor]:
    """Hugging Face's ``apply_rotary_pos_emb`` (rotate-half), rotated by posenc."""
    h = cos.shape[-1] // 2
    c, s = cos.unsqueeze(unsqueeze_dim)[..., :h], sin.unsqueeze(unsqueeze_dim)[..., :h]
    return apply_rotary(q, c, s), apply_rotary(k, c, s)


def _gptj_rotation(tensor: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
    """GPT-J's ``apply_rotary_pos_emb`` ((B, L, H, D), one value per pair), by posenc."""
    return apply_rotary(tensor, cos[:, :, None], sin[:, :, None], layout="interleaved")


class ExactRotation:
    """The handle :func:`exact_rotation` returns: :meth:`undo` restores what it changed.

    Also a context manager: ``with exact_rotation(model): ...`` undoes on exit.
    """

    def __init__(self, modules: list[HFRotaryEmbedding], functions: list[ModuleType]) -> None:
        self._modules = modules
        self._saved = [(m, getattr(m, "apply_rotary_pos_emb")) for m in functions]  # noqa: B009
        self.active: bool = True
        for module in modules:
            module.exact = True
        for namespace in functions:
            gptj = namespace.__name__.endswith(".gptj.modeling_gptj")
            setattr(namespace, "apply_rotary_pos_emb", _gptj_rotation if gptj else _half_rotation)  # noqa: B010

    def undo(self) -> None:
        """Restore the functions and the modules' dtype rule; twice is harmless."""
        if not self.active:
            return
        for namespace, function in reversed(self._saved):
            setattr(namespace, "apply_rotary_pos_emb", function)  # noqa: B010
        for module in self._modules:
            module.exact = False
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
    the products in bf16: three roundings. This replaces that function, in the
    modeling module of the model's family, by one that calls
    :func:`posenc.apply_rotary` (float32 arithmetic on float32 tables, one
    rounding to the query's dtype), and makes the model's
    :class:`HFRotaryEmbedding` modules give float32 tables to half-precision
    inputs. Float32 and float64 models compute the same either way but for
    rounding order.

    The function is module-level: while active, every model of that family in
    the process uses it (with its own tables it computes what Hugging Face's
    does, with fewer roundings). Call :meth:`ExactRotation.undo`, or use the
    handle as a context manager, to restore it.

    Args:
        model: A model patched by :func:`patch_rotary`.

    Returns:
        The handle that undoes the change.

    Raises:
        TypeError: the model is not of a supported family, or not patched.
    """
    model_type = _check_supported(model, "exact_rotation")
    modules = [m for m in model.modules() if isinstance(m, HFRotaryEmbedding)]
    if not modules:
        raise TypeError(
            f"exact_rotation needs a model patched by patch_rotary: "
            f"{type(model).__name__} (model_type={model_type!r}) has no HFRotaryEmbedding"
        )
    namespaces: dict[str, ModuleType] = {}
    for module in model.modules():
        namespace = sys.modules.get(type(module).__module__)
        if (
            namespace is not None
            and namespace.__name__.startswith("transformers.models.")
            and callable(getattr(namespace, "apply_rotary_pos_emb", None))
        ):
            namespaces[namespace.__name__] = namespace
    return ExactRotation(modules, list(namespaces.values()))
