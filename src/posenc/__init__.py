"""posenc: the Transformer's input layer, token embeddings and sinusoidal positions."""

from .attention import (
    MultiHeadedAttention,
    PositionwiseFeedForward,
    attention,
    clones,
    subsequent_mask,
)
from .embedding import Embeddings, TokenAndPositionEmbedding
from .positional import PositionalEncoding
from .positions import positions_from_lengths, positions_from_mask
from .sinusoid import LAYOUTS, Layout, inverse_frequencies, sinusoidal_table

__version__ = "0.1.0"

__all__ = [
    "LAYOUTS",
    "Embeddings",
    "Layout",
    "MultiHeadedAttention",
    "PositionalEncoding",
    "PositionwiseFeedForward",
    "TokenAndPositionEmbedding",
    "__version__",
    "attention",
    "clones",
    "inverse_frequencies",
    "positions_from_lengths",
    "positions_from_mask",
    "sinusoidal_table",
    "subsequent_mask",
]
