"""ALiBi, T5 buckets, learned tables, 2-D grids and timesteps against the peers' own functions.

Every comparison calls the peer's function; the largest difference found is written
in each test's comment (measured with the versions in the ``peers`` dependency group:
transformers 5.x, diffusers 0.4x, x-transformers 2.x, positional-encodings 6.x).
Models are built from small configs, with random weights; nothing is downloaded.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from posenc import (
    ALiBi,
    LearnedPositionalEmbedding,
    RelativePositionBias,
    alibi_slopes,
    attention,
    positions_from_mask,
    relative_position_bucket,
    sincos_2d,
    subsequent_mask,
    timestep_embedding,
)

# x-transformers' attend.py calls torch.jit.script when imported, which warns.
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning"
)

HEAD_COUNTS = [1, 2, 3, 5, 6, 8, 12, 16, 24, 32, 40, 71, 96, 128]
EPS32 = torch.finfo(torch.float32).eps


def alibi_bias_class():  # type: ignore[no-untyped-def]
    from x_transformers.x_transformers import AlibiPositionalBias

    return AlibiPositionalBias


# --- ALiBi: x-transformers ------------------------------------------------------------------


@pytest.mark.parametrize("n", HEAD_COUNTS)
def test_slopes_equal_x_transformers(n: int) -> None:
    # Python floats (start * ratio ** i): at most 5.6e-16 from posenc's 2 ** exponent.
    theirs = torch.tensor(alibi_bias_class()._get_slopes(n), dtype=torch.float64)
    torch.testing.assert_close(alibi_slopes(n), theirs, rtol=1e-14, atol=0)


@pytest.mark.parametrize("n", [4, 6, 12])
@pytest.mark.parametrize(("i", "j"), [(5, 5), (1, 9), (7, 20)])
def test_bias_equals_x_transformers(n: int, i: int, j: int) -> None:
    # Theirs: -|j' - i'| times float32 slopes, queries at the last i of j positions: the
    # symmetric form with offset j - i. Largest difference 1 float32 rounding (rel 6.9e-8).
    theirs = alibi_bias_class()(heads=n, total_heads=n)(i, j)
    ours = ALiBi(n, symmetric=True)(i, j, offset=j - i)
    assert theirs.shape == ours.shape == (n, i, j)
    torch.testing.assert_close(ours, theirs, rtol=2 * EPS32, atol=0)


def test_bias_from_positions_equals_x_transformers_custom_positions() -> None:
    module = alibi_bias_class()(heads=4, total_heads=4)
    q = torch.tensor([[3, 4, 9], [0, 0, 1]])
    k = torch.tensor([[0, 1, 2, 3, 4, 9], [0, 0, 0, 0, 1, 2]])
    theirs = module.forward_custom_pos(q, k)
    ours = ALiBi(4, symmetric=True)(3, positions=q, key_positions=k)
    torch.testing.assert_close(ours, theirs, rtol=2 * EPS32, atol=0)


# --- ALiBi: BLOOM and MPT -------------------------------------------------------------------


@pytest.mark.parametrize("n", HEAD_COUNTS)
def test_slopes_equal_bloom(n: int) -> None:
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

    # float32 powers of a float32 base: relative difference up to 6.8e-7 (n = 128).
    theirs = _get_alibi_slopes(n, torch.device("cpu")).double()
    torch.testing.assert_close(alibi_slopes(n), theirs, rtol=1e-6, atol=0)


@pytest.mark.parametrize("n", [4, 12, 16])
def test_bias_differs_from_bloom_by_a_row_constant_only(n: int) -> None:
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    # BLOOM adds m·j (key positions from (mask.cumsum - 1) * mask); posenc -m·(i - j).
    # Their difference is m·i for every key of row i: softmax gives the same weights.
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1]])
    b, length = mask.shape
    theirs = build_alibi_tensor(mask, n, torch.float32).view(b, n, 1, length).double()
    p = positions_from_mask(mask)
    ours = ALiBi(n)(length, positions=p, key_positions=p, dtype=torch.float64)
    row = alibi_slopes(n)[None, :, None, None] * p[:, None, :, None]
    # Largest difference: 2.4e-7 (a float32 slope times positions up to 6); weights 4e-8.
    torch.testing.assert_close(ours + row, theirs.expand_as(ours), rtol=1e-6, atol=1e-7)

    q, k, v = (torch.randn(b, n, length, 8, dtype=torch.float64) for _ in range(3))
    allowed = mask.bool()[:, None, None, :] & subsequent_mask(length)
    _, ours_w = attention(q, k, v, mask=allowed, bias=ours)
    _, theirs_w = attention(q, k, v, mask=allowed, bias=theirs)
    torch.testing.assert_close(ours_w, theirs_w, rtol=0, atol=1e-6)


@pytest.mark.parametrize("n", [1, 3, 4, 6, 12, 16, 24])
def test_bias_differs_from_mpt_by_a_row_constant_only(n: int) -> None:
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    # MPT adds m·(j - (L - 1)); posenc -m·(i - j): the difference is m·(L - 1 - i) per row.
    # Its slopes, for any n, are Press et al.'s: largest relative difference 7.3e-8.
    length = 9
    theirs = build_mpt_alibi_tensor(n, length).double()  # (H, 1, L)
    ours = ALiBi(n)(length, dtype=torch.float64)
    i = torch.arange(length, dtype=torch.float64)
    row = alibi_slopes(n)[:, None, None] * (length - 1 - i)[:, None]
    # Largest difference 1.9e-7 (float32 slopes times distances up to 8).
    torch.testing.assert_close(ours - row, theirs.expand_as(ours), rtol=4 * EPS32, atol=0)


# --- T5: Hugging Face T5Attention -----------------------------------------------------------

T5_CONFIGS = [(True, 32, 128), (False, 32, 128), (True, 64, 256), (False, 16, 64), (True, 8, 20)]


def hf_bucket(r: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int):  # type: ignore[no-untyped-def]
    from transformers.models.t5.modeling_t5 import T5Attention

    return T5Attention._relative_position_bucket(
        r, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )


@pytest.mark.parametrize(("bidirectional", "num_buckets", "max_distance"), T5_CONFIGS)
def test_buckets_equal_hugging_face_t5(
    bidirectional: bool, num_buckets: int, max_distance: int
) -> None:
    # Identical (difference 0) at every relative position from -5000 to 5000.
    r = torch.arange(-5000, 5001)
    ours = relative_position_bucket(
        r, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(ours, hf_bucket(r, bidirectional, num_buckets, max_distance))


def exact_bucket(n: int, per_direction: int, max_distance: int) -> int:
    """Mesh TensorFlow's formula for a distance n >= 0, decided with fractions."""
    max_exact = per_direction // 2
    if n < max_exact:
        return n
    span, k = per_direction - max_exact, 0
    power = Fraction(n, max_exact) ** span
    while k < span and Fraction(max_distance, max_exact) ** (k + 1) <= power:
        k += 1
    return min(max_exact + k, per_direction - 1)


def test_where_hugging_face_differs_posenc_is_the_exact_formula() -> None:
    # HF computes floor(m · log(n / E) / log(max_distance / E)) with a float32 logarithm.
    # Where the exact quotient is an integer, float32 can land just below it. Over the
    # unidirectional configurations below (every distance up to max_distance + 2), HF
    # and posenc differ at 3 distances; posenc holds the exact value at each.
    differences = []
    for num_buckets in range(4, 41):
        for max_distance in (num_buckets // 2 + 1, 20, 27, 64, 100, 128, 196):
            if max_distance <= num_buckets // 2:
                continue
            r = -torch.arange(max_distance + 3)
            ours = relative_position_bucket(
                r, bidirectional=False, num_buckets=num_buckets, max_distance=max_distance
            )
            theirs = hf_bucket(r, False, num_buckets, max_distance)
            for n in (ours != theirs).nonzero().flatten().tolist():
                differences.append((num_buckets, max_distance, n))
                assert ours[n] == exact_bucket(n, num_buckets, max_distance)
    # (17, 27, 12) and (17, 27, 18): 12 / 8 = 1.5 and 18 / 8 = 1.5 ** 2, while 27 / 8 =
    # 1.5 ** 3, so 9 · log(n / 8) / log(27 / 8) is exactly 3 and 6; (19, 196, 42):
    # 42 / 9 = (196 / 9) ** (1/2), 10 · 1/2 is exactly 5.
    assert differences == [(17, 27, 12), (17, 27, 18), (19, 196, 42)]


@pytest.mark.parametrize("is_decoder", [False, True])
@pytest.mark.parametrize(
    ("query_length", "key_length", "past"), [(7, 7, 0), (1, 12, 11), (4, 9, 5)]
)
def test_bias_equals_hugging_face_compute_bias(
    is_decoder: bool, query_length: int, key_length: int, past: int
) -> None:
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    torch.manual_seed(0)
    config = T5Config(d_model=16, d_kv=4, num_heads=4, is_decoder=is_decoder)
    hf = T5Attention(config, has_relative_attention_bias=True).eval()
    torch.nn.init.normal_(hf.relative_attention_bias.weight)
    ours = RelativePositionBias(4, bidirectional=not is_decoder)
    suffix = "relative_attention_bias.weight"
    ours.load_state_dict({k: v for k, v in hf.state_dict().items() if k.endswith(suffix)})
    theirs = hf.compute_bias(query_length, key_length, past_seen_tokens=past)
    got = ours(query_length, key_length, offset=past)
    assert theirs.shape == (1, *got.shape)
    assert torch.equal(got, theirs[0])  # the same rows of the same table: difference 0


def test_t5_model_checkpoint_key_loads() -> None:
    from transformers import T5Config, T5Model

    config = T5Config(vocab_size=50, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=4)
    model = T5Model(config)
    state = model.state_dict()
    for part, bidirectional in (("encoder", True), ("decoder", False)):
        key = f"{part}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        ours = RelativePositionBias(4, bidirectional=bidirectional)
        ours.load_state_dict({"relative_attention_bias.weight": state[key]})
        attn = getattr(model, part).block[0].layer[0].SelfAttention
        assert torch.equal(ours(5, 8, offset=3), attn.compute_bias(5, 8, past_seen_tokens=3)[0])


# --- Learned tables: BERT, GPT-2, RoBERTa ---------------------------------------------------


def test_bert_position_table_loads_and_adds_the_same_rows() -> None:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=40,
    )  # fmt: skip
    emb = BertModel(config).eval().embeddings
    table = {"position_embeddings.weight": emb.position_embeddings.weight.detach()}
    ours = LearnedPositionalEmbedding(40, 16)
    ours.load_state_dict(table)
    x = torch.randn(2, 6, 16)
    token_type = emb.token_type_embeddings.weight[0]
    for cache in (0, 30):
        theirs = emb(inputs_embeds=x, cache_length=cache)
        got = emb.LayerNorm(ours(x + token_type, offset=cache))
        assert torch.equal(got, theirs)  # difference 0


def test_gpt2_position_table_loads_and_decodes_with_its_cache() -> None:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=32)
    model = GPT2Model(config).eval()
    ours = LearnedPositionalEmbedding(32, 16)
    ours.load_state_dict({"wpe.weight": model.state_dict()["wpe.weight"]})
    seen: list[torch.Tensor] = []
    model.drop.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    ids = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        first = model(ids[:, :6], use_cache=True)
        model(ids[:, 6:], cache=first.past_key_values)
    for (start, stop), hidden in zip(((0, 6), (6, 9)), seen, strict=True):
        x = model.wte(ids[:, start:stop])
        assert torch.equal(ours(x, offset=start), hidden)  # difference 0


def test_roberta_positions_and_table() -> None:
    from transformers import RobertaConfig, RobertaModel
    from transformers.models.roberta.modeling_roberta import RobertaEmbeddings

    padding_idx = 1
    ids = torch.tensor([[5, 6, 7, padding_idx, padding_idx], [padding_idx, 8, 9, 10, 11]])
    real = ids != padding_idx
    theirs = RobertaEmbeddings.create_position_ids_from_input_ids(ids, padding_idx)
    ours = positions_from_mask(real) + padding_idx + 1
    assert torch.equal(ours[real], theirs[real])
    assert bool((theirs[~real] == padding_idx).all())

    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=20, pad_token_id=padding_idx,
    )  # fmt: skip
    table = RobertaModel(config).embeddings.position_embeddings
    learned = LearnedPositionalEmbedding(20, 16)
    learned.load_state_dict({"position_embeddings.weight": table.weight.detach()})
    x = torch.zeros(2, 5, 16)
    assert torch.equal(learned(x, positions=ours)[real], table(theirs)[real])


# --- 2-D grids: diffusers, positional-encodings ---------------------------------------------


@pytest.mark.parametrize(("grid", "d_model"), [(14, 768), (16, 64), (32, 1152)])
def test_grid_equals_diffusers_with_base_size_grid(grid: int, d_model: int) -> None:
    from diffusers.models.embeddings import get_2d_sincos_pos_embed

    # diffusers computes this table in float64: largest difference 3.6e-15 (float64 table)
    # and 3.0e-8 (posenc's float32 table, one rounding).
    theirs = get_2d_sincos_pos_embed(d_model, grid, base_size=grid)
    ours = sincos_2d(grid, grid, d_model, dtype=torch.float64)
    torch.testing.assert_close(ours, theirs.double(), rtol=0, atol=1e-13)
    assert float((sincos_2d(grid, grid, d_model).double() - theirs).abs().max()) <= 3e-8


def test_diffusers_default_base_size_rescales_the_positions() -> None:
    from diffusers.models.embeddings import get_2d_sincos_pos_embed

    # base_size=16 (the default) divides positions by grid / 16: another table (1.57 away).
    rescaled = get_2d_sincos_pos_embed(64, 14).double()
    assert float((rescaled - sincos_2d(14, 14, 64, dtype=torch.float64)).abs().max()) > 0.5


@pytest.mark.parametrize(("height", "width"), [(3, 7), (12, 5)])
def test_rectangular_grid_equals_diffusers_from_grid(height: int, width: int) -> None:
    from diffusers.models.embeddings import get_2d_sincos_pos_embed_from_grid

    # The grid diffusers builds for (height, width), without rescaling: columns first.
    rows = torch.arange(height, dtype=torch.float32)
    cols = torch.arange(width, dtype=torch.float32)
    grid = torch.stack(torch.meshgrid(cols, rows, indexing="xy")).reshape(2, 1, height, width)
    theirs = get_2d_sincos_pos_embed_from_grid(32, grid).double()
    ours = sincos_2d(height, width, 32, dtype=torch.float64)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-14)  # largest: 7e-18


@pytest.mark.parametrize(("height", "width", "d_model"), [(5, 7, 16), (14, 14, 64), (32, 32, 128)])
def test_interleaved_grid_equals_positional_encodings_2d(
    height: int, width: int, d_model: int
) -> None:
    from positional_encodings.torch_encodings import PositionalEncoding2D

    # Computed in float32 (angles included): largest difference 1.1e-6 at position 31.
    theirs = PositionalEncoding2D(d_model)(torch.zeros(1, height, width, d_model))[0]
    ours = sincos_2d(height, width, d_model, convention="interleaved", dtype=torch.float64)
    tolerance = 2 * EPS32 * max(height, width) + 1e-7
    torch.testing.assert_close(
        ours.view(height, width, d_model), theirs.double(), rtol=0, atol=tolerance
    )


# --- Timesteps: diffusers -------------------------------------------------------------------


@pytest.mark.parametrize("dim", [4, 7, 32, 320, 1280])
@pytest.mark.parametrize("flip_sin_to_cos", [False, True])
@pytest.mark.parametrize("downscale_freq_shift", [0, 1])
def test_timesteps_equal_diffusers(
    dim: int, flip_sin_to_cos: bool, downscale_freq_shift: int
) -> None:
    from diffusers.models.embeddings import get_timestep_embedding

    # diffusers computes in float32: frequencies and angles carry about |t| float32 ulps.
    # Largest difference 5.9e-5 (dim 320, t = 999); a wrong flip or shift is O(1) away.
    t = torch.tensor([0.0, 1.0, 10.0, 250.0, 999.0, 0.5, 17.25])
    kwargs = {"flip_sin_to_cos": flip_sin_to_cos, "downscale_freq_shift": downscale_freq_shift}
    theirs = get_timestep_embedding(t, dim, **kwargs).double()
    ours = timestep_embedding(t, dim, dtype=torch.float64, **kwargs)
    tolerance = (1e-6 + 2 * EPS32 * t.abs())[:, None]
    assert bool(((ours - theirs).abs() <= tolerance).all())
    other = timestep_embedding(t, dim, flip_sin_to_cos=not flip_sin_to_cos, dtype=torch.float64)
    assert float((other - theirs).abs().max()) > 0.1
