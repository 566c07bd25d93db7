"""Run transformers 5.2's own ``get_rope_index`` (Qwen2-VL, Qwen2.5-VL) on given inputs.

transformers 5.2 is the last release whose ``get_rope_index`` resumes the text after
an image or a video at 1 + the largest position it took (the Qwen team's rule). It
cannot share a process with the installed transformers, so the peers' test runs this
file in a subprocess with 5.2's directory first on ``sys.path``::

    python transformers_5_2_rope_index.py DIRECTORY < cases.json > results.json

Each case: ``{"kind", "input_ids", "attention_mask", "images", "videos", "seconds"}``
(lists; ``images``, ``videos`` and ``seconds`` may be null); each result:
``{"version", "positions", "deltas"}``. The models are built from tiny configs.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

IMAGE, VIDEO, VISION_START = 5, 6, 4  # the token ids of the tiny configs

TEXT = {
    "vocab_size": 64,
    "hidden_size": 64,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "bos_token_id": None,
    "eos_token_id": None,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 6, 6]},
}
IDS = {"image_token_id": IMAGE, "video_token_id": VIDEO, "vision_start_token_id": VISION_START}


def _models() -> dict[str, Any]:
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    vision2 = {"depth": 1, "embed_dim": 32, "hidden_size": 64, "num_heads": 2}
    vision25 = {"depth": 1, "hidden_size": 32, "out_hidden_size": 64, "num_heads": 2,
                "intermediate_size": 16, "tokens_per_second": 2}  # fmt: skip
    return {
        "qwen2_vl": Qwen2VLModel(Qwen2VLConfig(text_config=TEXT, vision_config=vision2, **IDS)),
        "qwen2_5_vl": Qwen2_5_VLModel(
            Qwen2_5_VLConfig(text_config=TEXT, vision_config=vision25, **IDS)
        ),
    }


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    warnings.simplefilter("ignore")
    import torch
    import transformers

    models = _models()
    results = []
    for case in json.load(sys.stdin):
        kwargs: dict[str, Any] = {"attention_mask": torch.tensor(case["attention_mask"])}
        for key, name in (("images", "image_grid_thw"), ("videos", "video_grid_thw")):
            if case[key] is not None:
                kwargs[name] = torch.tensor(case[key])
        if case["seconds"] is not None:
            kwargs["second_per_grid_ts"] = torch.tensor(case["seconds"])
        model = models[case["kind"]]
        positions, deltas = model.get_rope_index(torch.tensor(case["input_ids"]), **kwargs)
        results.append(
            {
                "version": transformers.__version__,
                "positions": positions.tolist(),
                "deltas": deltas.flatten().tolist(),
            }
        )
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
