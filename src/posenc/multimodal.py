"""The position ids of a multimodal stream: text, images and videos on the axes (t, h, w).

Qwen2-VL's multimodal RoPE (M-RoPE) gives each token three positions. A text token
sits at the same position on all three axes, one past the token before it; the
``t × h × w`` patches of an image or a video (after the vision tower merges
``spatial_merge_size²`` patches into one token) sit on a grid that starts where the
text stopped, and the text after it resumes one past the largest position the grid
took on any axis (the models' rule; ``text_after_vision="spatial"`` gives
transformers ≥ 5.3's ``max(h, w)`` further on instead).
:func:`multimodal_positions` computes them from what Hugging Face's
``get_rope_index`` takes, with the same result, and returns the delta each sequence
continues from when decoding: the next token of a row, the ``n``-th real one, sits at
``n + delta`` on every axis (``offset=n + delta`` for
:class:`~posenc.RotaryEmbedding`).

>>> import torch
>>> from posenc import multimodal_positions
>>> types = torch.tensor([[0, 0, 1, 1, 1, 1, 0]])   # text, a 2 × 2 image, text
>>> positions, deltas = multimodal_positions(types, image_grid_thw=torch.tensor([[1, 4, 4]]))
>>> positions[:, 0]
tensor([[0, 1, 2, 2, 2, 2, 4],
        [0, 1, 2, 2, 3, 3, 4],
        [0, 1, 2, 3, 2, 3, 4]])
>>> deltas
tensor([[-2]])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import torch
from torch import Tensor

from . import _checks, _runtime
from .positions import POSITION_MAX, check_domain

__all__ = [
    "TEMPORAL_RULES",
    "TEXT_AFTER_VISION_RULES",
    "TemporalRule",
    "TextAfterVision",
    "multimodal_positions",
]

TemporalRule = Literal["frames", "seconds", "timestamps"]
#: How a video's frames are placed on the t axis: ``("frames", "seconds", "timestamps")``.
TEMPORAL_RULES: tuple[TemporalRule, ...] = ("frames", "seconds", "timestamps")

TextAfterVision = Literal["max", "spatial"]
#: Where the text after an image or a video resumes: ``("max", "spatial")``.
TEXT_AFTER_VISION_RULES: tuple[TextAfterVision, ...] = ("max", "spatial")

_TEXT, _IMAGE, _VIDEO = 0, 1, 2
_KIND = {_IMAGE: "image", _VIDEO: "video"}


def _grids(name: str, grid_thw: Tensor | None) -> list[tuple[int, int, int]]:
    """``(N, 3)`` integer grid sizes, read into a list of (t, h, w)."""
    if grid_thw is None:
        return []
    grid = _checks.integer_tensor(name, grid_thw, "an integer tensor of shape (N, 3)")
    if grid.dim() != 2 or grid.shape[-1] != 3:
        raise ValueError(f"{name} must have shape (N, 3), rows (t, h, w), got {tuple(grid.shape)}")
    rows = [tuple(int(v) for v in row) for row in grid.tolist()]
    for row in rows:
        if min(row) < 1:
            raise ValueError(f"{name} must hold sizes >= 1, got the row {list(row)}")
    return rows  # type: ignore[return-value]


def _intervals(
    temporal: TemporalRule,
    second_per_grid_ts: Tensor | list[float] | None,
    tokens_per_second: float | None,
    videos: int,
) -> list[Tensor | float]:
    """The step on the t axis between two frames of each video.

    For "seconds", a 0-d tensor: ``second_per_grid_ts[v] × tokens_per_second`` in
    float32, or float64 for a float64 tensor, as Hugging Face multiplies them.
    """
    if temporal != "seconds":
        if second_per_grid_ts is not None or tokens_per_second is not None:
            raise ValueError(
                f"second_per_grid_ts and tokens_per_second are read with temporal='seconds' "
                f"(Qwen2.5-VL) only, got temporal={temporal!r}"
            )
        return [1.0] * videos
    if tokens_per_second is None:
        raise ValueError(
            "temporal='seconds' needs tokens_per_second (the vision config's, e.g. 2 for "
            "Qwen2.5-VL): a frame's t position is its time in seconds × tokens_per_second"
        )
    rate = _checks.real_number("tokens_per_second", tokens_per_second)
    if second_per_grid_ts is None:
        seconds = torch.ones(videos, dtype=torch.float32)
    elif isinstance(second_per_grid_ts, Tensor):
        if second_per_grid_ts.dim() != 1:
            raise ValueError(
                "second_per_grid_ts must be 1-D, one value per video, got shape "
                f"{tuple(second_per_grid_ts.shape)}"
            )
        wide = second_per_grid_ts.dtype == torch.float64
        seconds = second_per_grid_ts.detach().cpu().to(torch.float64 if wide else torch.float32)
    else:
        values = [_checks.real_number("second_per_grid_ts", v) for v in second_per_grid_ts]
        seconds = torch.tensor(values, dtype=torch.float32)
    if seconds.numel() != videos:
        raise ValueError(
            f"second_per_grid_ts holds {seconds.numel()} values for {videos} videos in "
            "video_grid_thw: give one per video"
        )
    steps = seconds * rate
    if steps.numel() and not bool((steps >= 0).all() & steps.isfinite().all()):
        raise ValueError(
            "tokens_per_second × second_per_grid_ts must be finite and >= 0 (time runs "
            f"forward), got {steps.tolist()!r:.80}"
        )
    return list(steps.unbind())


def _vision(
    start: int,
    grid: tuple[int, int, int],
    merge: int,
    interval: Tensor | float,
    device: torch.device,
    after: TextAfterVision,
) -> tuple[Tensor, int]:
    """The (3, t·h·w / merge²) positions of one grid starting at ``start``, and the next start.

    A frame's t position is ``int(i × interval)``: truncated, in the dtype of
    ``interval`` (Hugging Face's arithmetic, the one the models were trained with).
    The next start is 1 + the grid's largest position on any axis (``after="max"``)
    or ``start + max(h, w)`` (``"spatial"``).
    """
    t, h, w = grid[0], grid[1] // merge, grid[2] // merge
    last = start + (t - 1) * float(interval)
    if not last <= POSITION_MAX:
        raise ValueError(
            f"a video's last frame would sit at {last:.6g} on the t axis (start {start}, "
            f"{t} frames, {float(interval):g} per frame), outside int64's position domain "
            "|p| < 2**62"
        )
    if isinstance(interval, Tensor):
        frames = (torch.arange(t) * interval).to(torch.int64).to(device)
    else:
        frames = torch.arange(t, device=device)
    ids = torch.stack(
        torch.meshgrid(
            frames,
            torch.arange(h, device=device),
            torch.arange(w, device=device),
            indexing="ij",
        )
    ).reshape(3, -1)
    if after == "spatial":
        return ids + start, start + max(h, w)
    # t·h·w >= 1 token: the largest of the last frame's t, h - 1 and w - 1
    return ids + start, start + 1 + max(int(frames[-1]), h - 1, w - 1)


def multimodal_positions(
    token_types: Tensor,
    *,
    image_grid_thw: Tensor | None = None,
    video_grid_thw: Tensor | None = None,
    attention_mask: Tensor | None = None,
    spatial_merge_size: int = 2,
    temporal: TemporalRule = "frames",
    second_per_grid_ts: Tensor | list[float] | None = None,
    tokens_per_second: float | None = None,
    text_after_vision: TextAfterVision = "max",
) -> tuple[Tensor, Tensor]:
    """The (t, h, w) positions of a text, image and video stream, and the decoding deltas.

    Reading each row from the left, over its real tokens (``attention_mask``):

    - a run of ``n`` text tokens takes ``p, p + 1, ..., p + n - 1`` on every axis,
      and ``p`` moves on by ``n``;
    - each image or video (the next row of ``image_grid_thw`` or
      ``video_grid_thw``, in the order of the batch's rows) takes its
      ``t × (h/m) × (w/m)`` tokens, ``m`` = ``spatial_merge_size``, in row-major
      order: ``p + τ(i)`` on t, ``p + j`` on h, ``p + k`` on w; then ``p`` moves on
      as ``text_after_vision`` says.

    The frame term ``τ(i)`` is the model's rule, ``temporal``:

    - ``"frames"`` (Qwen2-VL): the frame index ``i``;
    - ``"seconds"`` (Qwen2.5-VL): ``floor(i × tokens_per_second ×
      second_per_grid_ts[v])`` for video ``v`` (``second_per_grid_ts`` 1 when
      None), images ``i``; the products in float32 (float64 for a float64
      ``second_per_grid_ts``), as Hugging Face computes them and the models were
      trained: at 5/6 s a frame and 2 tokens a second, frame 3 sits at 5, where
      the float64 product of float32's 5/6 would give 4;
    - ``"timestamps"`` (Qwen3-VL): each frame is its own grid with ``t = 1``,
      between the timestamp text that separates frames: a video row ``(t, h, w)``
      stands for ``t`` images of ``(1, h, w)``.

    Where the text after an image or a video resumes, ``text_after_vision``:

    - ``"max"`` (the default): at 1 + the largest position the grid took on any
      axis, t included: ``p + 1 + max(τ(t - 1), h/m - 1, w/m - 1)``. This is the
      Qwen team's rule, the one the models were trained with: transformers ≤ 5.2
      and vLLM compute it, and the Qwen2.5-VL pull request to transformers
      (#35569) states it in ``get_rope_index``'s docstring: vision t positions 0,
      50, 100 are followed by text at 101;
    - ``"spatial"``: at ``p + max(h/m, w/m)``, as transformers ≥ 5.3 computes it
      (``max(grid_thw[1], grid_thw[2]) // spatial_merge_size``), for parity with
      that runtime.

    The two agree for images (``t = 1``) and for Qwen3-VL's one-frame grids; they
    differ for a video whose last frame's ``τ`` reaches ``max(h/m, w/m)``, which in
    Qwen2.5-VL is almost every video (``τ`` grows by seconds × tokens per second).
    The deltas follow the rule.

    With ``text_after_vision="spatial"``, this is Hugging Face's ``get_rope_index``
    (transformers ≥ 5.3) for Qwen2-VL, Qwen2.5-VL and Qwen3-VL. Two differences,
    each where Hugging Face raises or misreads: runs of the same modality that
    touch (two images with no token between) take one grid each here, and grids
    left over, or tokens without a grid, are refused.

    With ``"spatial"``, a row whose video's last frame reaches past ``max(h/m,
    w/m)`` on t does not decode as it prefills: its delta (the largest position
    + 1, as transformers computes it) continues past the video's last frame, while
    the text of the prompt resumed inside it.

    Pad slots get position 0 on every axis. The delta of a row is its largest
    position + 1 minus its number of real tokens: its ``n``-th real token (counting
    from 0) after the prompt sits at ``n + delta`` on every axis.

    The token types and grids are read on the host (a sync on an accelerator, as
    in Hugging Face); the result is on the device of ``token_types``.

    Args:
        token_types: ``(B, L)`` integer tensor: 0 text, 1 image, 2 video per token
            (transformers' ``mm_token_type_ids``).
        image_grid_thw: ``(N_images, 3)`` integer ``(t, h, w)`` patch grids, before
            the merge, in the order the images appear in the batch.
        video_grid_thw: ``(N_videos, 3)`` likewise for videos.
        attention_mask: ``(B, L)`` bool or 0/1 integer tensor, 1 for real tokens (left
            or right padding); None: every token is real.
        spatial_merge_size: ``m``, patches merged along h and along w into one token.
        temporal: ``"frames"``, ``"seconds"`` or ``"timestamps"`` (see above).
        second_per_grid_ts: For ``"seconds"``: seconds between two frames of each
            video, one per video.
        tokens_per_second: For ``"seconds"``: the vision config's ``tokens_per_second``.
        text_after_vision: ``"max"`` or ``"spatial"``: where the text after an image
            or a video resumes (see above).

    Returns:
        ``(positions, deltas)``: ``int64`` ``(3, B, L)`` positions, axes first, for
        :class:`~posenc.RotaryEmbedding`, and ``int64`` ``(B, 1)`` deltas.

    Raises:
        TypeError: a tensor has the wrong type (floating types or masks).
        ValueError: a shape does not match; a token type other than 0, 1, 2; the
            grids do not match the tokens; a rule's argument is missing or given
            to another rule; ``temporal`` or ``text_after_vision`` is not one of
            its rules; a tensor is on the meta device (the positions are read from
            its values).

    Shapes:
        - token_types, attention_mask: ``(B, L)``
        - image_grid_thw, video_grid_thw: ``(N, 3)``
        - output: ``(3, B, L)`` and ``(B, 1)``

    Example:
        Two rows, the second left-padded, with an image each:

        >>> import torch
        >>> from posenc import multimodal_positions
        >>> types = torch.tensor([[0, 1, 1, 1, 1, 0, 0],
        ...                       [0, 0, 0, 1, 1, 1, 1]])
        >>> mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1],
        ...                      [0, 0, 1, 1, 1, 1, 1]])
        >>> grids = torch.tensor([[1, 4, 4], [1, 2, 8]])
        >>> positions, deltas = multimodal_positions(
        ...     types, image_grid_thw=grids, attention_mask=mask)
        >>> positions[:, 1]
        tensor([[0, 0, 0, 1, 1, 1, 1],
                [0, 0, 0, 1, 1, 1, 1],
                [0, 0, 0, 1, 2, 3, 4]])
        >>> deltas.flatten().tolist()
        [-2, 0]

        A video of 4 frames of 1 × 2 tokens: the text after it resumes past its last
        frame (t = 4), or past its width (w = 2) with ``"spatial"``:

        >>> types = torch.tensor([[0] + [2] * 8 + [0]])
        >>> video = torch.tensor([[4, 2, 4]])
        >>> positions, deltas = multimodal_positions(types, video_grid_thw=video)
        >>> positions[:, 0, -1].tolist(), deltas.item()
        ([5, 5, 5], -4)
        >>> positions, deltas = multimodal_positions(
        ...     types, video_grid_thw=video, text_after_vision="spatial")
        >>> positions[:, 0, -1].tolist(), deltas.item()
        ([3, 3, 3], -5)
    """
    given = {
        "token_types": token_types,
        "image_grid_thw": image_grid_thw,
        "video_grid_thw": video_grid_thw,
        "attention_mask": attention_mask,
        "second_per_grid_ts": second_per_grid_ts,
    }
    for name, value in given.items():  # every output depends on their values
        if isinstance(value, Tensor) and value.is_meta:
            raise ValueError(
                f"{name} is on the meta device, which holds no values, and the positions "
                f"are read from its values: give {name} with values"
            )
    types = _checks.integer_tensor("token_types", token_types, "a (B, L) integer tensor")
    if types.dim() != 2:
        raise ValueError(f"token_types must have shape (B, L), got {tuple(types.shape)}")
    temporal = _checks.choice("temporal", temporal, TEMPORAL_RULES)
    after = _checks.choice("text_after_vision", text_after_vision, TEXT_AFTER_VISION_RULES)
    merge = _checks.positive_int("spatial_merge_size", spatial_merge_size)
    device = types.device
    batch, length = types.shape
    if attention_mask is None:
        real = torch.ones(batch, length, dtype=torch.bool)
    else:
        mask = _checks.bool_mask("attention_mask", attention_mask, "True or 1 = real token")
        if mask.shape != types.shape:
            raise ValueError(
                f"attention_mask must have the shape of token_types {tuple(types.shape)}, "
                f"got {tuple(mask.shape)}"
            )
        real = (mask if mask.dtype == torch.bool else mask != 0).cpu()
    host = types.cpu().to(torch.int64)
    bad = host[real & ((host < 0) | (host > _VIDEO))]
    if bad.numel():
        raise ValueError(
            f"token_types must hold 0 (text), 1 (image) or 2 (video) for real tokens, "
            f"got {int(bad[0])}"
        )
    images = _grids("image_grid_thw", image_grid_thw)
    videos = _grids("video_grid_thw", video_grid_thw)
    intervals = _intervals(temporal, second_per_grid_ts, tokens_per_second, len(videos))
    video_items = list(zip(videos, intervals, strict=True))
    if temporal == "timestamps":  # a video of t frames: t grids of one frame, one step
        video_items = [((1, h, w), 1.0) for (t, h, w), _ in video_items for _ in range(t)]
    image_items: list[tuple[tuple[int, int, int], Tensor | float]] = [
        (grid, 1.0) for grid in images
    ]
    queues: dict[int, Iterator[tuple[tuple[int, int, int], Tensor | float]]] = {
        _IMAGE: iter(image_items),
        _VIDEO: iter(video_items),
    }
    used = {_IMAGE: 0, _VIDEO: 0}
    _runtime.allocation(
        (3, batch, length), torch.int64, device, lambda: "multimodal_positions' result"
    )
    out = torch.zeros(3, batch, length, dtype=torch.int64, device=device)
    deltas = []
    for b in range(batch):
        keep = real[b]
        row = host[b][keep].tolist()
        pieces: list[Tensor] = []
        position, i = 0, 0
        while i < len(row):
            kind, j = row[i], i
            while j < len(row) and row[j] == kind:
                j += 1
            if kind == _TEXT:
                pieces.append(torch.arange(j - i, device=device).expand(3, -1) + position)
                position += j - i
            else:
                covered = 0
                while covered < j - i:
                    item = next(queues[kind], None)
                    if item is None:
                        raise ValueError(
                            f"token_types row {b} has more {_KIND[kind]} tokens than "
                            f"{_KIND[kind]}_grid_thw describes (its grids are used up)"
                        )
                    grid, interval = item
                    used[kind] += 1
                    ids, position = _vision(position, grid, merge, interval, device, after)
                    pieces.append(ids)
                    covered += ids.shape[1]
                if covered != j - i:
                    raise ValueError(
                        f"token_types row {b} has a run of {j - i} {_KIND[kind]} tokens, "
                        f"but its grids give {covered} (t·h·w / {merge}² each, "
                        f"spatial_merge_size={merge})"
                    )
            i = j
        if pieces:
            ids = torch.cat(pieces, dim=1)
            check_domain("the multimodal positions", int(ids.max()))
            out[:, b, keep.to(device)] = ids
            deltas.append(int(ids.max()) + 1 - len(row))
        else:
            deltas.append(0)
    for kind, items in ((_IMAGE, image_items), (_VIDEO, video_items)):
        if used[kind] != len(items):
            what = "frames" if kind == _VIDEO and temporal == "timestamps" else "grids"
            raise ValueError(
                f"{_KIND[kind]}_grid_thw describes {len(items)} {what}, but token_types "
                f"holds the tokens of {used[kind]}"
            )
    return out, torch.tensor(deltas, dtype=torch.int64, device=device).view(batch, 1)
