"""Argument checks shared by the public functions and modules.

Each raises at the public boundary with a message that names the argument, the
value received and what is allowed: ValueError for a bad value, TypeError for a
bad type. None reads tensor values, so none costs a device-to-host sync.
"""

from __future__ import annotations

import torch
from torch import Tensor


def positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return value


def base(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"base must be a number, got {type(value).__name__} {value!r}")
    if not value > 1.0 or value == float("inf"):
        raise ValueError(f"base must be a finite number > 1, got {value}")
    return float(value)


def dropout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"dropout must be a float, got {type(value).__name__} {value!r}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {value}")
    return float(value)


def integer_tensor(name: str, t: Tensor, what: str = "an integer tensor") -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a Tensor ({what}), got {type(t).__name__} {t!r:.60}")
    if t.dtype == torch.bool or t.dtype.is_floating_point or t.dtype.is_complex:
        raise TypeError(f"{name} must be {what}, got dtype {t.dtype}")
    return t


def features(x: object, d_model: int, what: str = "input") -> None:
    """``x`` is a floating (B, L, D) or (L, D) tensor with D = ``d_model``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{what} must be a Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{what} must be a floating tensor, got dtype {x.dtype}")
    if x.dim() not in (2, 3):
        raise ValueError(
            f"{what} must have shape (B, L, D) or (L, D), got {x.dim()}-D shape {tuple(x.shape)}"
        )
    if x.shape[-1] != d_model:
        raise ValueError(
            f"{what}'s last dimension must be d_model={d_model}, got shape {tuple(x.shape)}"
        )
