"""Shared pytest setup: every test and doctest starts from the same seed and print options."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _reset_torch_state() -> None:
    torch.manual_seed(0)
    torch.set_printoptions(profile="default")
