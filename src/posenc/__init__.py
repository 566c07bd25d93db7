"""posenc: the Transformer's input layer, token embeddings and sinusoidal positions."""

from .attention import (
    MultiHeadedAttention,
    PositionwiseFeedForward,
    attention,
    clones,
    subsequent_mask,
)
from .embedding import Embeddings
from .positional import PositionalEncoding
from .sinusoid import inverse_frequencies, sinusoidal_table

__version__ = "0.1.0"

__all__ = [
    "Embeddings",
    "MultiHeadedAttention",
    "PositionalEncoding",
    "PositionwiseFeedForward",
    "__version__",
    "attention",
    "clones",
    "inverse_frequencies",
    "sinusoidal_table",
    "subsequent_mask",
]
