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
from .rotary import ROPE_TYPES, ROTARY_LAYOUTS, RotaryEmbedding, apply_rotary, rope_frequencies
from .sinusoid import LAYOUTS, inverse_frequencies, sinusoidal_table

__version__ = "0.1.0"

__all__ = [
    "LAYOUTS",
    "ROPE_TYPES",
    "ROTARY_LAYOUTS",
    "Embeddings",
    "MultiHeadedAttention",
    "PositionalEncoding",
    "PositionwiseFeedForward",
    "RotaryEmbedding",
    "TokenAndPositionEmbedding",
    "__version__",
    "apply_rotary",
    "attention",
    "clones",
    "inverse_frequencies",
    "positions_from_lengths",
    "positions_from_mask",
    "rope_frequencies",
    "sinusoidal_table",
    "subsequent_mask",
]
