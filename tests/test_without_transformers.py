"""posenc, posenc.hf included, works where transformers cannot be imported.

The ``test`` group installs transformers (the README's and the Hugging Face page's
blocks use it), so its absence is made here: a fresh interpreter in which importing
transformers fails, as it does where it is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import posenc

CODE = """
import sys
sys.modules["transformers"] = None  # `import transformers` raises ImportError
import torch
import posenc
import posenc.hf
config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
          "max_position_embeddings": 128, "rope_theta": 10000.0}
rope = posenc.hf.rotary_from_config(config)
x = torch.ones(1, 4, 3, 16)
assert torch.equal(rope(x), posenc.RotaryEmbedding(16)(x))
try:
    import transformers  # noqa: F401
except ImportError:
    print("ok")
"""


def test_posenc_and_posenc_hf_work_without_transformers() -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(posenc.__file__).resolve().parents[1]))
    done = subprocess.run(
        [sys.executable, "-c", CODE], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
