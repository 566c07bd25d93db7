"""xPos (Sun et al., 2022): RoPE's rotation times ζ_k^(±(p - c)/γ).

What xPos does that no other scheme does; the module contracts run over the registry
(tests/schemes.py), and rotary-embedding-torch's own ``use_xpos`` in
tests/peers/test_xpos_peers.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from posenc import RotaryEmbedding, XPos, positions_from_mask


def _reference(x: torch.Tensor, p: torch.Tensor, sign: float, xpos: XPos, center: float = 0.0):
    """The rotation and scale in float64, from the formula, half layout."""
    d = x.shape[-1]
    k = torch.arange(d // 2, dtype=torch.float64)
    omega = xpos.base ** (-2 * k / d)
    zeta = (2 * k / d + 0.4) / 1.4
    p = p.to(torch.float64)[..., None]
    angle = p * omega
    scale = zeta ** (sign * (p - center) / xpos.scale_base)
    x1, x2 = x.double()[..., : d // 2], x.double()[..., d // 2 :]
    c, s = angle.cos() * scale, angle.sin() * scale
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def test_queries_and_keys_are_the_formula_in_float64() -> None:
    torch.manual_seed(0)
    xpos = XPos(16, scale_base=8.0)
    q, k = torch.randn(2, 3, 40, 16, dtype=torch.float64), torch.randn(2, 3, 40, 16).double()
    got_q, got_k = xpos(q, k, offset=5, center=20)
    p = torch.arange(5, 45)
    torch.testing.assert_close(got_q, _reference(q, p, 1.0, xpos, 20), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(got_k, _reference(k, p, -1.0, xpos, 20), rtol=1e-13, atol=1e-13)


def test_the_score_of_a_pair_is_its_share_times_zeta_to_the_distance() -> None:
    torch.manual_seed(1)
    xpos, rope = XPos(8, scale_base=4.0), RotaryEmbedding(8)
    q, k = torch.randn(1, 8, dtype=torch.float64), torch.randn(1, 8, dtype=torch.float64)
    n, m = 9, 2
    a, _ = xpos(q, q, offset=n)
    _, b = xpos(k, k, offset=m)
    # pair by pair: RoPE's share of the score times ζ_k^((n - m)/γ)
    rq, rk = rope(q, offset=n), rope(k, offset=m)
    shares = rq[..., :4] * rk[..., :4] + rq[..., 4:] * rk[..., 4:]
    want = (shares * xpos.zeta ** ((n - m) / 4.0)).sum()
    torch.testing.assert_close((a * b).sum(), want, rtol=1e-13, atol=1e-13)
    # and it depends on n - m only
    a2, _ = xpos(q, q, offset=n + 100)
    _, b2 = xpos(k, k, offset=m + 100)
    torch.testing.assert_close((a2 * b2).sum(), want, rtol=1e-12, atol=1e-12)


def test_scores_do_not_depend_on_the_center() -> None:
    torch.manual_seed(2)
    xpos = XPos(16, scale_base=16.0)
    q, k = torch.randn(2, 2, 30, 16, dtype=torch.float64), torch.randn(2, 2, 30, 16).double()
    a, b = xpos(q, k), xpos(q, k, center=15)
    assert not torch.allclose(a[0], b[0])  # the queries differ
    torch.testing.assert_close(a[0] @ a[1].mT, b[0] @ b[1].mT, rtol=1e-12, atol=1e-12)


def test_decoding_one_token_at_a_time_gives_the_whole_sequence_bit_for_bit() -> None:
    torch.manual_seed(3)
    xpos = XPos(16, scale_base=32.0)
    q, k = torch.randn(2, 4, 12, 16), torch.randn(2, 1, 12, 16)  # grouped keys
    whole = xpos(q, k, center=6)
    steps = [xpos(q[:, :, t : t + 1], k[:, :, t : t + 1], offset=t, center=6) for t in range(12)]
    for i in range(2):
        assert torch.equal(torch.cat([s[i] for s in steps], 2), whole[i])


def test_per_sequence_positions_are_each_rows_positions() -> None:
    torch.manual_seed(4)
    xpos = XPos(8, scale_base=8.0)
    q, k = torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    pos = positions_from_mask(mask)
    got = xpos(q, k, positions=pos)
    for b in range(2):
        want = xpos(q[b], k[b], positions=pos[b])
        assert torch.equal(got[0][b], want[0])
        assert torch.equal(got[1][b], want[1])
    offsets = xpos(q, k, offset=torch.tensor([0, 7]))
    assert torch.equal(offsets[0][1], xpos(q[1], k[1], offset=7)[0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_half_and_single_precision_are_the_float64_result_rounded_once(dtype) -> None:
    torch.manual_seed(5)
    xpos = XPos(32, scale_base=64.0)
    q = torch.randn(1, 2, 50, 32).to(dtype)
    got, _ = xpos(q, q, offset=1000, center=1025)
    exact = _reference(q, torch.arange(1000, 1050), 1.0, xpos, 1025)
    ulp = torch.finfo(dtype).eps * exact.abs().clamp_min(torch.finfo(dtype).tiny)
    # within one ulp of the pair's length for half precision, two float32 ulps
    length = exact.view(1, 2, 50, 2, 16).norm(dim=-2).repeat(1, 1, 1, 2)
    bound = (1 if dtype != torch.float32 else 2) * torch.finfo(dtype).eps * length
    assert ((got.double() - exact).abs() <= bound.clamp_min(ulp)).all()
    assert got.dtype == dtype


def test_a_cast_module_is_as_exact_as_a_fresh_one() -> None:
    torch.manual_seed(6)
    q = torch.randn(1, 1, 9, 8, dtype=torch.bfloat16)
    fresh, cast = XPos(8), XPos(8).to(torch.bfloat16)
    for a, b in zip(cast(q, q, offset=3000), fresh(q, q, offset=3000), strict=True):
        assert torch.equal(a, b)


def test_scales_are_zeta_to_the_power_and_the_keys_their_inverse() -> None:
    xpos = XPos(4, scale_base=2.0)
    s = xpos.scales(3, offset=1, center=2)
    want = torch.tensor([0.4, 0.9]) / 1.4  # ζ for D = 4
    torch.testing.assert_close(
        s, want.double() ** torch.tensor([-0.5, 0.0, 0.5]).double()[:, None]
    )
    x = torch.ones(3, 4, dtype=torch.float64)
    _, k = xpos(x, x, offset=1, center=2)
    torch.testing.assert_close(k.view(3, 2, 2).norm(dim=1), math.sqrt(2) / s, rtol=1e-14, atol=0)


def test_scales_past_the_dtypes_range_are_refused_naming_the_position() -> None:
    xpos = XPos(8)  # γ = 512: float16 holds |p - c| up to about 3,960
    x = torch.randn(1, 4, 8)
    xpos(x.half(), x.half(), offset=3000)
    message = r"offset puts a position 4003 from center=0.*float16.*3966"
    with pytest.raises(ValueError, match=message):
        xpos(x.half(), x.half(), offset=4000)
    xpos(x.half(), x.half(), offset=4000, center=4000)  # a center near them: fine
    xpos(x, x, offset=30_000)  # float32: about 35,700
    with pytest.raises(ValueError, match=r"positions puts a position 40000 .*float32"):
        xpos(x, x, positions=torch.tensor([0, 1, 2, 40_000]))
    with pytest.raises(ValueError, match="float32"):
        xpos.scales(4, offset=-40_000, dtype=torch.float32)


def test_bad_inputs_are_refused_naming_the_argument() -> None:
    xpos = XPos(8)
    x = torch.randn(2, 3, 5, 8)
    with pytest.raises(TypeError, match="q"):
        xpos(x.long(), x)
    with pytest.raises(TypeError, match="k"):
        xpos(x, [1.0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="head_dim"):
        xpos(x, torch.randn(2, 3, 5, 6))
    with pytest.raises(ValueError, match="same tokens"):
        xpos(x, x[:, :, :4])
    with pytest.raises(ValueError, match="same tokens"):
        xpos(x, x[:1])
    with pytest.raises(ValueError, match="dim -2"):
        xpos(torch.randn(8), torch.randn(8))
    with pytest.raises(ValueError, match="offset"):
        xpos(x, x, offset=torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="positions"):
        xpos(x, x, positions=torch.arange(4))
    with pytest.raises(TypeError, match="center"):
        xpos(x, x, center="middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="center"):
        xpos(x, x, center=math.nan)
    with pytest.raises(ValueError, match="scale_base"):
        XPos(8, scale_base=0.0)
    with pytest.raises(ValueError, match="even"):
        XPos(7)
    with pytest.raises(ValueError, match="layout"):
        XPos(8, layout="pairs")  # type: ignore[arg-type]


def test_at_the_center_it_is_ropes_rotation_bit_for_bit() -> None:
    torch.manual_seed(7)
    xpos, rope = XPos(16, layout="interleaved"), RotaryEmbedding(16, layout="interleaved")
    x = torch.randn(2, 3, 9, 16)
    for center in (0, 4, 8):
        q, k = xpos(x, x, offset=100, center=100 + center)
        want = rope(x, offset=100)[:, :, center]
        assert torch.equal(q[:, :, center], want)
        assert torch.equal(k[:, :, center], want)
        other = (center + 1) % 9  # another row: scaled, not RoPE's
        assert not torch.equal(q[:, :, other], rope(x, offset=100)[:, :, other])


def test_hooks_fire_and_see_the_pair() -> None:
    xpos = XPos(8)
    x = torch.randn(1, 2, 3, 8)
    seen: list[object] = []
    xpos.register_forward_pre_hook(lambda m, a: seen.append("pre"))
    xpos.register_forward_hook(lambda m, a, out: seen.append(out))
    out = xpos(x, x)
    assert seen[0] == "pre"
    assert seen[1] is out
    assert isinstance(out, tuple)
    assert len(out) == 2


def test_fractional_positions_are_the_formula_at_their_values() -> None:
    torch.manual_seed(8)
    xpos = XPos(8, scale_base=4.0)
    x = torch.randn(3, 8, dtype=torch.float64)
    p = torch.tensor([0.5, 2.25, 7.0])
    q, k = xpos(x, x, positions=p, center=1.5)
    torch.testing.assert_close(q, _reference(x, p, 1.0, xpos, 1.5), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(k, _reference(x, p, -1.0, xpos, 1.5), rtol=1e-13, atol=1e-13)


# --- the same module as an option of the rotary core: RotaryEmbedding(xpos_scale_base=) --


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_the_rotary_option_is_xpos_bit_for_bit(dtype, layout) -> None:
    torch.manual_seed(9)
    xpos = XPos(16, base=500.0, scale_base=32.0, layout=layout)
    rope = RotaryEmbedding(16, base=500.0, layout=layout, xpos_scale_base=32.0)
    q, k = torch.randn(2, 4, 7, 16).to(dtype), torch.randn(2, 1, 7, 16).to(dtype)
    calls = [
        {},
        {"offset": 40, "center": 30.5},
        {"offset": torch.tensor([3, 90])},
        {"positions": torch.tensor([[6, 0, 1, 2, 9, 3, 4], [0, 1, 2, 3, 4, 5, 6]])},
        {"positions": torch.tensor([0.5, 1.25, -3.0, 2.0, 7.75, 8.0, 8.5]), "center": 2},
    ]
    for kw in calls:
        want = xpos(q, k, **kw)
        got = rope.rotate_queries_and_keys(q, k, **kw)
        for a, b in zip(got, want, strict=True):
            assert a.dtype == dtype
            assert torch.equal(a, b)
        moved = rope.rotate_queries_and_keys(q.transpose(1, 2), k.transpose(1, 2), seq_dim=1, **kw)
        for a, b in zip(moved, want, strict=True):
            assert torch.equal(a.transpose(1, 2), b)


def test_the_rotary_option_is_the_formula_in_float64() -> None:
    torch.manual_seed(10)
    rope = RotaryEmbedding(16, xpos_scale_base=8.0)
    xpos = XPos(16, scale_base=8.0)  # the reference reads base and scale_base
    q, k = torch.randn(3, 40, 16, dtype=torch.float64), torch.randn(3, 40, 16).double()
    got_q, got_k = rope.rotate_queries_and_keys(q, k, offset=5, center=20)
    p = torch.arange(5, 45)
    torch.testing.assert_close(got_q, _reference(q, p, 1.0, xpos, 20), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(got_k, _reference(k, p, -1.0, xpos, 20), rtol=1e-13, atol=1e-13)


def test_one_tensor_is_refused_naming_the_method() -> None:
    rope = RotaryEmbedding(8, xpos_scale_base=512)
    x = torch.randn(2, 3, 5, 8)
    for call in (
        lambda: rope(x),
        lambda: rope(x, offset=4),
        lambda: rope(x.transpose(1, 2), seq_dim=1),
        lambda: rope.cos_sin(5),
        lambda: rope.cos_sin(5, positions=torch.arange(5) + 9000),  # past the tables too
    ):
        with pytest.raises(ValueError, match=r"xPos .*rotate_queries_and_keys\(q, k\)"):
            call()


def test_without_xpos_the_module_and_the_method_are_ropes() -> None:
    torch.manual_seed(11)
    x = torch.randn(2, 3, 5, 8)
    plain, off = RotaryEmbedding(8), RotaryEmbedding(8, xpos_scale_base=None)
    assert repr(off) == repr(plain) == "RotaryEmbedding(head_dim=8, max_len=4096)"
    assert off.xpos_scale_base is None
    assert torch.equal(off(x, offset=3), plain(x, offset=3))
    assert all(map(torch.equal, off.cos_sin(5), plain.cos_sin(5)))
    q, k = plain.rotate_queries_and_keys(x, 2 * x, offset=3, center=7)  # center: not read
    assert torch.equal(q, plain(x, offset=3))
    assert torch.equal(k, plain(2 * x, offset=3))


def test_the_rotary_option_shows_keeps_the_state_and_survives_casts() -> None:
    torch.manual_seed(12)
    rope = RotaryEmbedding(8, layout="interleaved", xpos_scale_base=64)
    assert repr(rope) == (
        "RotaryEmbedding(head_dim=8, max_len=4096, layout='interleaved', xpos_scale_base=64)"
    )
    assert rope.xpos_scale_base == 64.0
    assert rope.state_dict().keys() == RotaryEmbedding(8).state_dict().keys()
    rope.load_state_dict(RotaryEmbedding(8, layout="interleaved").state_dict())
    q = torch.randn(1, 2, 9, 8, dtype=torch.bfloat16)
    want = rope.rotate_queries_and_keys(q, q, offset=3000, center=2990)
    for cast in (rope.bfloat16(), rope.half(), rope.double(), rope.float()):
        got = cast.rotate_queries_and_keys(q, q, offset=3000, center=2990)
        assert all(map(torch.equal, got, want))


def test_the_rotary_option_refuses_what_it_cannot_be() -> None:
    for bad in (0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="xpos_scale_base"):
            RotaryEmbedding(8, xpos_scale_base=bad)
    for wrong in ("512", True):
        with pytest.raises(TypeError, match="xpos_scale_base"):
            RotaryEmbedding(8, xpos_scale_base=wrong)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one stream of positions"):
        RotaryEmbedding(8, axes=(4, 4), xpos_scale_base=512)
    mrope = {"rope_type": "default", "mrope_section": [1, 1, 2]}
    with pytest.raises(ValueError, match="one stream of positions"):
        RotaryEmbedding(8, scaling=mrope, xpos_scale_base=512)
    from posenc import MixedFrequencies

    with pytest.raises(ValueError, match="fixed frequencies"):
        RotaryEmbedding(8, frequencies=MixedFrequencies(8, n_heads=2), xpos_scale_base=512)
    rope, x = RotaryEmbedding(8, xpos_scale_base=512), torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match=r"offset puts a position 4003 .*float16"):
        rope.rotate_queries_and_keys(x.half(), x.half(), offset=4000)
    with pytest.raises(TypeError, match="q"):
        rope.rotate_queries_and_keys(x.long(), x)
    with pytest.raises(ValueError, match="same tokens"):
        rope.rotate_queries_and_keys(x, x[:, :3])


def test_with_a_scaling_the_scores_still_depend_on_the_distance_only() -> None:
    torch.manual_seed(13)
    scaling = {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}
    rope = RotaryEmbedding(16, scaling=scaling, xpos_scale_base=4.0)
    q, k = torch.randn(1, 16, dtype=torch.float64), torch.randn(1, 16, dtype=torch.float64)

    def score(n: int, m: int) -> torch.Tensor:
        a, _ = rope.rotate_queries_and_keys(q, q, offset=n)
        _, b = rope.rotate_queries_and_keys(k, k, offset=m)
        assert torch.equal(a[:, 8:], q[:, 8:])  # the features past rotary_dim pass
        return (a * b).sum()

    torch.testing.assert_close(score(9, 2), score(109, 102), rtol=1e-12, atol=1e-12)
    # ζ is over the rotated features: pair 0 of 4 decays as (0.4 / 1.4) per γ
    one = torch.zeros(1, 16, dtype=torch.float64)
    one[0, 0] = 1.0
    a, b = rope.rotate_queries_and_keys(one, one, offset=4)
    torch.testing.assert_close(a.norm(), torch.tensor(0.4 / 1.4, dtype=torch.float64))
    torch.testing.assert_close(b.norm(), torch.tensor(1.4 / 0.4, dtype=torch.float64))
