"""TokenAndPositionEmbedding: the fused layer equals Embeddings → PositionalEncoding."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from posenc import Embeddings, PositionalEncoding, TokenAndPositionEmbedding, sinusoidal_table

D, VOCAB = 24, 97


def unfused_pair(layer: TokenAndPositionEmbedding, **pe_kwargs: object) -> nn.Sequential:
    """Embeddings and PositionalEncoding holding the layer's weights."""
    emb = Embeddings(D, VOCAB, padding_idx=layer.embeddings.lut.padding_idx)
    emb.load_state_dict(layer.embeddings.state_dict())
    return nn.Sequential(emb, PositionalEncoding(D, **pe_kwargs))  # type: ignore[arg-type]


OPTIONS = [
    {},
    {"layout": "concatenated"},
    {"endpoint": True},
    {"layout": "concatenated", "endpoint": True, "base": 500.0},
    {"max_len": 3},
]


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("padding_idx", [None, 0])
def test_equals_unfused_pair(options: dict[str, object], padding_idx: int | None) -> None:
    layer = TokenAndPositionEmbedding(D, VOCAB, padding_idx=padding_idx, **options)  # type: ignore[arg-type]
    emb, pe = unfused_pair(layer, **options)
    ids = torch.randint(0, VOCAB, (4, 9))
    ids[0, :2] = 0
    assert torch.equal(layer(ids), pe(emb(ids)))
    assert torch.equal(layer(ids[1]), pe(emb(ids[1])))  # unbatched
    offset = torch.tensor([0, 3, 5000, 7])
    assert torch.equal(layer(ids, offset=offset), pe(emb(ids), offset=offset))
    assert torch.equal(layer(ids, offset=11), pe(emb(ids), offset=11))
    positions = torch.randint(0, 50, (4, 9))
    assert torch.equal(layer(ids, positions=positions), pe(emb(ids), positions=positions))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_equals_unfused_pair_in_other_dtypes(dtype: torch.dtype, padding_idx: int | None) -> None:
    layer = TokenAndPositionEmbedding(D, VOCAB, padding_idx=padding_idx).to(dtype)
    emb, pe = unfused_pair(layer)
    emb.to(dtype)
    ids = torch.randint(0, VOCAB, (2, 6))
    ids[1, :3] = 3
    out = layer(ids, offset=4)
    assert out.dtype == dtype
    assert torch.equal(out, pe(emb(ids), offset=4))
    offset = torch.tensor([0, 6000])  # the second row past max_len
    assert torch.equal(layer(ids, offset=offset), pe(emb(ids), offset=offset))
    with torch.inference_mode():
        assert torch.equal(layer(ids), pe(emb(ids)))


# Shapes for the CPU inference path in float32 and float64, which works a block of about
# 2**20 elements at a time: several blocks of whole sequences with a partial last one,
# sequences longer than a block (split within the sequence), and one short sequence.
BLOCK_SHAPES = [(9, 512, 512), (2, 1500, 1024), (3, 7, 64)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("batch", "length", "d_model"), BLOCK_SHAPES)
def test_inference_equals_unfused_pair(
    dtype: torch.dtype, batch: int, length: int, d_model: int
) -> None:
    layer = TokenAndPositionEmbedding(d_model, VOCAB, padding_idx=2, max_len=1000).to(dtype)
    emb = Embeddings(d_model, VOCAB, padding_idx=2).to(dtype)
    emb.load_state_dict(layer.embeddings.state_dict())
    pe = PositionalEncoding(d_model, max_len=1000)
    ids = torch.randint(0, VOCAB, (batch, length))
    ids[0, :3] = 2
    offset = torch.arange(batch) * 300  # some rows past max_len
    positions = torch.randint(0, 2000, (batch, length))
    with torch.no_grad():
        assert torch.equal(layer(ids), pe(emb(ids)))
        assert torch.equal(layer(ids, offset=offset), pe(emb(ids), offset=offset))
        assert torch.equal(layer(ids, positions=positions), pe(emb(ids), positions=positions))
        assert torch.equal(layer(ids[0]), pe(emb(ids[0])))
    with torch.inference_mode():
        assert torch.equal(layer(ids, offset=5), pe(emb(ids), offset=5))
    assert torch.equal(layer(ids), pe(emb(ids)))
    with torch.no_grad():  # half precision, same values
        half = layer.to(torch.bfloat16)
        assert torch.equal(half(ids), pe(emb.to(torch.bfloat16)(ids)))


def test_inference_with_dropout_draws_as_the_unfused_pair() -> None:
    layer = TokenAndPositionEmbedding(512, VOCAB, dropout=0.3).train()
    emb = Embeddings(512, VOCAB)
    emb.load_state_dict(layer.embeddings.state_dict())
    pe = PositionalEncoding(512, dropout=0.3).train()
    ids = torch.randint(0, VOCAB, (6, 512))
    with torch.no_grad():
        torch.manual_seed(1)
        fused = layer(ids)
        torch.manual_seed(1)
        assert torch.equal(fused, pe(emb(ids)))


def test_max_norm_lookup_renormalises_as_nn_embedding_does() -> None:
    layer = TokenAndPositionEmbedding(D, VOCAB)
    layer.embeddings.lut.max_norm = 1.0
    emb = Embeddings(D, VOCAB)
    emb.load_state_dict(layer.embeddings.state_dict())
    emb.lut.max_norm = 1.0
    ids = torch.randint(0, VOCAB, (3, 5))
    with torch.no_grad():
        assert torch.equal(layer(ids), PositionalEncoding(D)(emb(ids)))
    norms = layer.embeddings.lut.weight[ids.unique()].norm(dim=-1)
    assert bool((norms <= 1.0 + 1e-6).all())


def test_values_are_scaled_lookup_plus_table() -> None:
    layer = TokenAndPositionEmbedding(D, VOCAB)
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    weight = layer.embeddings.lut.weight.detach()
    expected = weight[ids] * math.sqrt(D) + sinusoidal_table(5, D)
    torch.testing.assert_close(layer(ids), expected, rtol=0, atol=1e-5)


def test_dropout_in_training_and_not_in_eval() -> None:
    layer = TokenAndPositionEmbedding(D, VOCAB, dropout=0.5)
    ids = torch.randint(0, VOCAB, (8, 16))
    layer.eval()
    clean = layer(ids)
    layer.train()
    noisy = layer(ids)
    dropped = noisy == 0
    assert 0.3 < dropped.float().mean() < 0.7
    torch.testing.assert_close(noisy[~dropped], clean[~dropped] * 2)


def test_gradients_reach_the_embedding_table_except_padding() -> None:
    layer = TokenAndPositionEmbedding(D, VOCAB, padding_idx=0)
    ids = torch.tensor([[0, 5, 5, 7]])
    layer(ids).sum().backward()
    grad = layer.embeddings.lut.weight.grad
    assert grad is not None
    assert torch.equal(grad[0], torch.zeros(D))
    torch.testing.assert_close(grad[5], torch.full((D,), 2 * math.sqrt(D)))
    torch.testing.assert_close(grad[7], torch.full((D,), math.sqrt(D)))


@pytest.mark.parametrize(
    ("ids", "error", "match"),
    [
        (torch.tensor([[1.0, 2.0]]), TypeError, "integer tensor"),
        (torch.tensor([[True, False]]), TypeError, "integer tensor"),
        (torch.tensor([[1, VOCAB]]), IndexError, f"token id {VOCAB} .* vocab={VOCAB}"),
        (torch.tensor([[-3, 1]]), IndexError, f"token id -3 .* vocab={VOCAB}"),
        (torch.zeros(1, 2, 3, dtype=torch.long), ValueError, r"shape \(B, L\) or \(L,\)"),
    ],
)
def test_errors(ids: torch.Tensor, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        TokenAndPositionEmbedding(D, VOCAB)(ids)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"d_model": 0}, ValueError, "d_model"),
        ({"vocab": 0}, ValueError, "vocab"),
        ({"dropout": 1.0}, ValueError, "dropout"),
        ({"max_len": 0}, ValueError, "max_len"),
        ({"padding_idx": VOCAB}, ValueError, "padding_idx"),
        ({"layout": "sin-first"}, ValueError, "layout"),
    ],
)
def test_constructor_errors(kwargs: dict[str, object], error: type, match: str) -> None:
    args: dict[str, object] = {"d_model": D, "vocab": VOCAB, **kwargs}
    with pytest.raises(error, match=match):
        TokenAndPositionEmbedding(**args)  # type: ignore[arg-type]


def annotated_sequential(max_len: int) -> dict[str, torch.Tensor]:
    """A state dict shaped like nn.Sequential(Embeddings, PositionalEncoding) of the
    Annotated Transformer: lookup table at ``0.lut.weight``, float32 table at ``1.pe``."""
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    freq = torch.exp(torch.arange(0, D, 2, dtype=torch.float32) * -(math.log(10000.0) / D))
    table = torch.zeros(max_len, D)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return {"0.lut.weight": torch.randn(VOCAB, D), "1.pe": table.unsqueeze(0)}


@pytest.mark.parametrize("max_len", [10, 5000])
def test_loads_annotated_transformer_sequential_state_dict(max_len: int) -> None:
    state = annotated_sequential(max_len)
    layer = TokenAndPositionEmbedding(D, VOCAB)
    result = layer.load_state_dict(state, strict=True)
    assert not result.missing_keys
    assert not result.unexpected_keys
    assert torch.equal(layer.embeddings.lut.weight, state["0.lut.weight"])
    assert list(layer.state_dict()) == ["embeddings.lut.weight"]


def test_loads_when_nested() -> None:
    state = {f"src_embed.{k}": v for k, v in annotated_sequential(20).items()}
    model = nn.Module()
    model.src_embed = TokenAndPositionEmbedding(D, VOCAB)
    model.load_state_dict(state, strict=True)
    assert torch.equal(model.src_embed.embeddings.lut.weight, state["src_embed.0.lut.weight"])


def test_rejects_a_table_of_another_convention() -> None:
    state = annotated_sequential(30)
    state["1.pe"] = sinusoidal_table(30, D, layout="concatenated").unsqueeze(0)
    with pytest.raises(RuntimeError, match=r"1\.pe|positional\.pe"):
        TokenAndPositionEmbedding(D, VOCAB).load_state_dict(state)


def test_own_state_dict_round_trips() -> None:
    a = TokenAndPositionEmbedding(D, VOCAB, layout="concatenated")
    b = TokenAndPositionEmbedding(D, VOCAB, layout="concatenated")
    b.load_state_dict(a.state_dict(), strict=True)
    ids = torch.randint(0, VOCAB, (2, 5))
    assert torch.equal(a(ids), b(ids))


# The decoding step, (B, 1) int64 ids on the CPU at an int offset, takes a path of its
# own (TokenAndPositionEmbedding._step): it must give the unfused pair's values, bit for
# bit, at every offset up to the table's end and past it, in every dtype.
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("offset", [0, 4000, 4999, 5000, 6000])
def test_decoding_step_equals_unfused_pair(dtype: torch.dtype, batch: int, offset: int) -> None:
    layer = TokenAndPositionEmbedding(D, VOCAB, padding_idx=2).to(dtype)
    emb, pe = unfused_pair(layer)
    emb.to(dtype)
    ids = torch.randint(0, VOCAB, (batch, 1))
    ids[0, 0] = 2
    with torch.no_grad():
        out = layer(ids, offset=offset)
        assert out.dtype == dtype
        assert torch.equal(out, pe(emb(ids), offset=offset))
    # a prompt of several tokens that ends at the table's last row, or one past it
    ids = torch.randint(0, VOCAB, (batch, 5))
    for start in (4995, 4996):
        assert torch.equal(layer(ids, offset=start), pe(emb(ids), offset=start))


@pytest.mark.parametrize("bad", [VOCAB, VOCAB + 40, -1])
def test_decoding_step_names_an_id_out_of_range(bad: int) -> None:
    layer = TokenAndPositionEmbedding(D, VOCAB)
    with pytest.raises(IndexError, match=rf"token id {bad} is out of range for vocab={VOCAB}"):
        layer(torch.tensor([[3], [bad]]), offset=4000)


@pytest.mark.parametrize(
    "child", ["embeddings", "embeddings.lut", "positional", "positional.dropout"]
)
def test_decoding_step_hooks_on_children_see_the_unfused_calls(child: str) -> None:
    layer = TokenAndPositionEmbedding(D, VOCAB)
    emb, _ = unfused_pair(layer)
    seen: list[torch.Tensor] = []
    layer.get_submodule(child).register_forward_hook(lambda m, i, out: seen.append(out.clone()))
    ids = torch.randint(0, VOCAB, (2, 1))
    out = layer(ids, offset=4000)
    expected = {
        "embeddings": emb(ids),
        "embeddings.lut": emb.lut(ids),
        "positional": out,
        "positional.dropout": out,
    }[child]
    assert len(seen) == 1
    assert torch.equal(seen[0], expected)


def test_decoding_step_global_and_backward_hooks_see_the_unfused_calls() -> None:
    layer = TokenAndPositionEmbedding(D, VOCAB)
    ids = torch.randint(0, VOCAB, (2, 1))
    called: list[type] = []
    handle = nn.modules.module.register_module_forward_pre_hook(
        lambda m, args: called.append(type(m))
    )
    try:
        layer(ids, offset=4000)
    finally:
        handle.remove()
    assert called == [
        TokenAndPositionEmbedding,
        Embeddings,
        nn.Embedding,
        PositionalEncoding,
        nn.Dropout,
    ]
    grads: list[torch.Tensor] = []
    layer.embeddings.lut.register_full_backward_pre_hook(lambda m, go: grads.append(go[0]))
    with pytest.warns(UserWarning, match="no inputs require gradients"):  # torch's, ids are ints
        layer(ids, offset=4000).sum().backward()
    assert len(grads) == 1
    assert torch.equal(grads[0], torch.full((2, 1, D), math.sqrt(D)))


# The decoding step asks _runtime.fast_path on every call: a hook registered after
# decoding steps, a child replaced or a class swapped must still take the unfused calls.
@pytest.mark.parametrize(
    "child", ["embeddings", "embeddings.lut", "positional", "positional.dropout", None]
)
def test_decoding_step_sees_a_hook_registered_after_earlier_steps(child: str | None) -> None:
    layer = TokenAndPositionEmbedding(D, VOCAB).eval()
    ids = torch.randint(0, VOCAB, (2, 1))
    for offset in range(3):
        layer(ids, offset=offset)  # the answer "no hook" is kept
    seen: list[str] = []
    if child is None:
        handle = nn.modules.module.register_module_forward_hook(
            lambda m, i, out: seen.append(type(m).__name__)
        )
    else:
        handle = layer.get_submodule(child).register_forward_hook(
            lambda m, i, out: seen.append(child)
        )
    try:
        layer(ids, offset=3)
    finally:
        handle.remove()
    everyone = ["Embedding", "Embeddings", "Dropout", "PositionalEncoding",
                "TokenAndPositionEmbedding"]  # fmt: skip
    assert seen == ([child] if child else everyone)
    seen.clear()
    layer(ids, offset=4)  # removed: no hook runs, the fused step again
    assert seen == []


def test_decoding_step_sees_a_child_replaced_or_its_class_swapped() -> None:
    layer = TokenAndPositionEmbedding(D, VOCAB).eval()
    ids = torch.randint(0, VOCAB, (1, 1))
    layer(ids, offset=7)
    calls: list[str] = []

    class Counted(nn.Embedding):
        def forward(self, input: torch.Tensor) -> torch.Tensor:
            calls.append("lut")
            return super().forward(input)

    old = layer.embeddings.lut
    new = Counted(VOCAB, D)
    new.load_state_dict(old.state_dict())
    layer.embeddings.lut = new
    unfused = unfused_pair(layer)[1](layer.embeddings(ids), offset=7)
    assert torch.equal(layer(ids, offset=7), unfused)
    assert calls == ["lut", "lut"]
    layer.embeddings.lut = old
    hooked = nn.Embedding(VOCAB, D)  # its hook registered before the next steps
    hooked.register_forward_hook(lambda m, i, out: calls.append("hook"))
    layer(ids, offset=7)
    layer.embeddings.lut = hooked
    calls.clear()
    layer(ids, offset=7)
    assert calls == ["hook"]
    layer.embeddings.lut = old
    layer(ids, offset=7)
    old.__class__ = Counted  # a class swapped in place, as parametrizations do
    calls.clear()
    layer(ids, offset=7)
    assert calls == ["lut"]


def test_decoding_step_of_a_copy_or_pickle_sees_its_hooks() -> None:
    import copy
    import pickle

    layer = TokenAndPositionEmbedding(D, VOCAB).eval()
    layer(torch.tensor([[1]]), offset=2)
    for other in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        seen: list[int] = []
        other.embeddings.lut.register_forward_hook(lambda m, i, out, seen=seen: seen.append(1))
        other(torch.tensor([[1]]), offset=2)
        assert seen == [1]


# -- A forward replaced on a child's instance (accelerate's add_hook_to_module) ------------


def _replace_forward(module: nn.Module, calls: list[str], name: str, shift: float) -> None:
    """Wrap ``module.forward`` on the instance, as accelerate's add_hook_to_module does."""
    original = module.forward

    def forward(*args: object, **kwargs: object) -> object:
        calls.append(name)
        out = original(*args, **kwargs)
        return out + shift if isinstance(out, torch.Tensor) and out.is_floating_point() else out

    module.forward = forward  # type: ignore[method-assign]


CHILDREN = ["embeddings", "embeddings.lut", "positional", "positional.dropout"]


@pytest.mark.parametrize("child", CHILDREN)
@pytest.mark.parametrize(
    "call",
    [
        {"offset": 5},  # the decoding step's case: int offset, (B, L) int64 ids
        {},
        {"offset": torch.tensor([0, 9])},
        {"positions": torch.tensor([[3, 1, 2], [0, 7, 7]])},
    ],
    ids=["step", "default", "offsets", "positions"],
)
def test_a_forward_replaced_on_a_child_is_honoured(child: str, call: dict[str, object]) -> None:
    torch.manual_seed(0)
    layer = TokenAndPositionEmbedding(D, VOCAB).eval()
    ids = torch.randint(0, VOCAB, (2, 3))
    calls: list[str] = []
    _replace_forward(layer.get_submodule(child), calls, child, shift=1.0)
    # what the children's forwards compute, called one after the other
    expected = layer.positional(layer.embeddings(ids), **call)  # type: ignore[arg-type]
    assert calls == [child]
    calls.clear()
    out = layer(ids, **call)  # type: ignore[arg-type]
    assert calls == [child]
    assert torch.equal(out, expected)
    unwrapped = TokenAndPositionEmbedding(D, VOCAB).eval()
    unwrapped.load_state_dict(layer.state_dict())
    assert not torch.equal(out, unwrapped(ids, **call))  # type: ignore[arg-type]
    del layer.get_submodule(child).forward  # removed: the fused paths again, same values
    assert torch.equal(layer(ids, **call), unwrapped(ids, **call))  # type: ignore[arg-type]
    assert calls == [child]


# -- A padding_idx set on the lookup after construction -------------------------------------


@pytest.mark.parametrize("padding_idx", [-1, -2, -VOCAB, VOCAB - 1, 0])
@pytest.mark.parametrize("call", [{"offset": 3}, {}, {"positions": torch.tensor([4, 0, 1])}])
def test_a_padding_idx_set_on_the_lookup_is_read_as_nn_embedding_reads_it(
    padding_idx: int, call: dict[str, object]
) -> None:
    torch.manual_seed(0)
    layer = TokenAndPositionEmbedding(D, VOCAB)
    layer.embeddings.lut.padding_idx = padding_idx  # after construction, as a user may
    row = padding_idx % VOCAB  # the row nn.Embedding leaves without gradient
    ids = torch.tensor([[row, 5, row], [VOCAB - 1, 0, 1]])
    reference = nn.Embedding(VOCAB, D)
    reference.load_state_dict(layer.embeddings.lut.state_dict())
    reference.padding_idx = padding_idx
    out = layer(ids, **call)  # type: ignore[arg-type]
    rows = PositionalEncoding(D).encoding(3, **call)  # type: ignore[arg-type]
    assert torch.equal(out, reference(ids) * math.sqrt(D) + rows)
    out.sum().backward()
    grad = layer.embeddings.lut.weight.grad
    assert grad is not None
    (reference(ids) * math.sqrt(D)).sum().backward()
    assert torch.equal(grad, reference.weight.grad)
    assert torch.equal(grad[row], torch.zeros(D))  # the padding row: no gradient
    others = sorted({VOCAB - 1, 0, 1, 5} - {row})
    assert (grad[others] != 0).all()


def test_a_padding_idx_outside_the_table_set_on_the_lookup_is_refused_as_by_nn_embedding() -> None:
    layer = TokenAndPositionEmbedding(D, VOCAB)
    reference = nn.Embedding(VOCAB, D)
    for bad in (VOCAB, -VOCAB - 1):
        layer.embeddings.lut.padding_idx = reference.padding_idx = bad
        for call in ({"offset": 3}, {}):
            with pytest.raises(AssertionError, match="Padding_idx"):
                reference(torch.tensor([[1]]))
            with pytest.raises(AssertionError, match="Padding_idx"):
                layer(torch.tensor([[1]]), **call)  # type: ignore[arg-type]
