"""posenc: positional encodings in PyTorch: sinusoid, RoPE, ALiBi, T5, learned, grid, timestep."""

from .attention import (
    MultiHeadedAttention,
    PositionwiseFeedForward,
    attention,
    clones,
    subsequent_mask,
)
from .bias import KERPLE, ALiBi, RelativePositionBias, alibi_slopes, relative_position_bucket
from .cope import CoPE
from .embedding import Embeddings, TokenAndPositionEmbedding
from .fire import FIRE
from .grid import GRID_CONVENTIONS, GridConvention, sincos_2d
from .multimodal import (
    TEMPORAL_RULES,
    TEXT_AFTER_VISION_RULES,
    TemporalRule,
    TextAfterVision,
    multimodal_positions,
)
from .positional import LearnedPositionalEmbedding, PositionalEncoding
from .positions import (
    SHARD_LAYOUTS,
    ShardLayout,
    cu_seqlens,
    document_block_mask,
    document_ids,
    document_mask,
    documents_from_positions,
    grid_positions,
    lengths_from_cu_seqlens,
    lengths_from_documents,
    positions_from_documents,
    positions_from_lengths,
    positions_from_mask,
    random_positions,
    shard_order,
    shard_positions,
)
from .rotary import (
    ROPE_TYPES,
    ROTARY_LAYOUTS,
    MixedFrequencies,
    RotaryEmbedding,
    RotaryLayout,
    apply_rotary,
    rope_attention_scale,
    rope_frequencies,
)
from .sinusoid import LAYOUTS, Layout, inverse_frequencies, sinusoidal_table
from .timesteps import timestep_embedding
from .xpos import XPos

__version__ = "0.2.0"

__all__ = [
    "FIRE",
    "GRID_CONVENTIONS",
    "KERPLE",
    "LAYOUTS",
    "ROPE_TYPES",
    "ROTARY_LAYOUTS",
    "SHARD_LAYOUTS",
    "TEMPORAL_RULES",
    "TEXT_AFTER_VISION_RULES",
    "ALiBi",
    "CoPE",
    "Embeddings",
    "GridConvention",
    "Layout",
    "LearnedPositionalEmbedding",
    "MixedFrequencies",
    "MultiHeadedAttention",
    "PositionalEncoding",
    "PositionwiseFeedForward",
    "RelativePositionBias",
    "RotaryEmbedding",
    "RotaryLayout",
    "ShardLayout",
    "TemporalRule",
    "TextAfterVision",
    "TokenAndPositionEmbedding",
    "XPos",
    "__version__",
    "alibi_slopes",
    "apply_rotary",
    "attention",
    "clones",
    "cu_seqlens",
    "document_block_mask",
    "document_ids",
    "document_mask",
    "documents_from_positions",
    "grid_positions",
    "inverse_frequencies",
    "lengths_from_cu_seqlens",
    "lengths_from_documents",
    "multimodal_positions",
    "positions_from_documents",
    "positions_from_lengths",
    "positions_from_mask",
    "random_positions",
    "relative_position_bucket",
    "rope_attention_scale",
    "rope_frequencies",
    "shard_order",
    "shard_positions",
    "sincos_2d",
    "sinusoidal_table",
    "subsequent_mask",
    "timestep_embedding",
]
