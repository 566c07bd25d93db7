"""torch.func's transforms where a scheme has something of its own to show.

``vmap`` refuses two things that eager fast paths like: reading a tensor's values
(data-dependent control flow) and operations that write into ``out=``; forward-mode
AD has no formula for ``out=`` operations either. vmap over every scheme's inputs and
positions, and forward AD through every linear one, run over the registry of schemes
in test_schemes.py; here, out-of-range ids under vmap and forward AD in the weights.
"""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, jvp, vmap

from posenc import Embeddings, TokenAndPositionEmbedding

D, VOCAB = 16, 50

# torch's forward AD loads its decompositions through torch.jit.script on first use,
# which warns in torch >= 2.10: a warning of torch's, not of posenc's.
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning"
)


def test_vmap_over_out_of_range_ids_still_raises() -> None:
    ids = torch.tensor([[[1, 2]], [[3, VOCAB]]])
    with pytest.raises(IndexError):
        vmap(Embeddings(D, VOCAB))(ids)


def test_forward_ad_through_the_fused_layer_in_its_weights() -> None:
    torch.manual_seed(0)
    layer = TokenAndPositionEmbedding(D, VOCAB, dropout=0.0)
    ids = torch.randint(0, VOCAB, (2, 7))
    weight = layer.embeddings.lut.weight.detach()
    direction = torch.randn_like(weight)
    key = "embeddings.lut.weight"
    with torch.no_grad():
        out, tangent = jvp(
            lambda w: functional_call(layer, {key: w}, (ids,)), (weight,), (direction,)
        )
    torch.testing.assert_close(out, layer(ids), rtol=0, atol=0)
    # d/dW (W[ids] * sqrt(D) + rows) in the direction V is V[ids] * sqrt(D).
    torch.testing.assert_close(tangent, direction[ids] * D**0.5, rtol=1e-6, atol=1e-6)
