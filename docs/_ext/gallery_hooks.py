"""Hooks that sphinx-gallery calls around every example (named by string in conf.py)."""

from __future__ import annotations

from typing import Any


def reset_state(gallery_conf: dict[str, Any], fname: str) -> None:
    """Start every example from the same state, so that its figures are byte-identical.

    Runs after sphinx-gallery's own matplotlib reset (``rcdefaults``): seeds torch
    and numpy, restores torch's print options, and removes what varies from one
    build to the next in a saved figure (the SVG hash salt; PNGs carry no date).
    """
    import matplotlib
    import numpy as np
    import torch

    torch.manual_seed(0)
    torch.set_printoptions(profile="default")
    np.random.seed(0)  # noqa: NPY002 (the legacy global state is what np.random.* uses)
    matplotlib.rcParams["svg.hashsalt"] = "posenc"
