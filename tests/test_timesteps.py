"""posenc.timestep_embedding: the timestep embeddings of DDPM and guided-diffusion.

References, in float64 NumPy, written from the published code (no code copied):

* DDPM (Ho, Jain and Abbeel, "Denoising Diffusion Probabilistic Models", NeurIPS 2020),
  hojonathanho/diffusion, ``diffusion_tf/nn.py``, ``get_timestep_embedding``: with
  ``half = dim // 2``, frequencies ``exp(-k · ln(10000) / (half - 1))``, the sines of
  ``t`` times them, then the cosines, then a zero column for an odd ``dim``.
* guided-diffusion (Dhariwal and Nichol, "Diffusion Models Beat GANs on Image
  Synthesis", NeurIPS 2021), openai/guided-diffusion, ``guided_diffusion/nn.py``,
  ``timestep_embedding``: frequencies ``exp(-ln(max_period) · k / half)``, the cosines
  first, then the sines, then a zero column for an odd ``dim``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from reference import round_once

from posenc import sinusoidal_table, timestep_embedding

TIMESTEPS = [0, 1, 10, 250, 999]
FLOAT32_TOLERANCE = 3e-8


def ddpm_reference(t: np.ndarray, dim: int) -> np.ndarray:
    half = dim // 2
    freqs = np.exp(np.arange(half) * -(math.log(10000) / (half - 1)))
    angles = t.astype(np.float64)[:, None] * freqs[None]
    out = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    return np.pad(out, ((0, 0), (0, dim % 2)))


def guided_diffusion_reference(
    t: np.ndarray, dim: int, max_period: float = 10_000.0
) -> np.ndarray:
    half = dim // 2
    freqs = np.exp(-math.log(max_period) * np.arange(half) / half)
    angles = t.astype(np.float64)[:, None] * freqs[None]
    out = np.concatenate([np.cos(angles), np.sin(angles)], axis=1)
    return np.pad(out, ((0, 0), (0, dim % 2)))


@pytest.mark.parametrize("dim", [4, 7, 32, 320, 1280])
def test_default_is_ddpm(dim: int) -> None:
    t = torch.tensor(TIMESTEPS)
    expected = ddpm_reference(t.numpy(), dim)
    got = timestep_embedding(t, dim, dtype=torch.float64).numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    single = timestep_embedding(t, dim).double().numpy()
    assert float(np.abs(single - expected).max()) <= FLOAT32_TOLERANCE + 1e-12


@pytest.mark.parametrize("dim", [4, 7, 32, 320])
@pytest.mark.parametrize("max_period", [10_000.0, 1000.0])
def test_flip_and_shift_zero_is_guided_diffusion(dim: int, max_period: float) -> None:
    t = torch.tensor([0.0, 0.5, 17.25, 999.0], dtype=torch.float64)
    expected = guided_diffusion_reference(t.numpy(), dim, max_period)
    got = timestep_embedding(
        t,
        dim,
        flip_sin_to_cos=True,
        downscale_freq_shift=0,
        max_period=max_period,
        dtype=torch.float64,
    )
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-12)


def test_flip_swaps_the_halves_and_keeps_the_zero_column_last() -> None:
    t = torch.tensor([3, 40])
    plain = timestep_embedding(t, 9, dtype=torch.float64)
    flipped = timestep_embedding(t, 9, flip_sin_to_cos=True, dtype=torch.float64)
    assert torch.equal(flipped[:, :4], plain[:, 4:8])
    assert torch.equal(flipped[:, 4:8], plain[:, :4])
    assert torch.equal(flipped[:, 8], torch.zeros(2, dtype=torch.float64))
    assert torch.equal(plain[:, 8], torch.zeros(2, dtype=torch.float64))


@pytest.mark.parametrize("shift", [0.0, 1.0])
def test_integer_timesteps_are_the_concatenated_sinusoid(shift: float) -> None:
    # shift 1: tensor2tensor's and fairseq's endpoint spacing; shift 0: the paper's spacing.
    t = torch.tensor(TIMESTEPS)
    got = timestep_embedding(t, 64, downscale_freq_shift=shift, max_period=500.0)
    same = sinusoidal_table(
        t, 64, layout="concatenated", endpoint=shift == 1.0, base=500.0, dtype=torch.float64
    )
    assert float((got.double() - same).abs().max()) <= FLOAT32_TOLERANCE


def test_fractional_timesteps_and_scale() -> None:
    t = torch.tensor([0.25, 1.5, 700.125], dtype=torch.float64)
    got = timestep_embedding(t, 16, scale=1000.0, downscale_freq_shift=0.5, dtype=torch.float64)
    freqs = 10_000.0 ** (-np.arange(8) / (8 - 0.5))
    angles = 1000.0 * t.numpy()[:, None] * freqs
    expected = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    # Angles up to 7e5 radians: the float64 rounding of the angle is about 1e-10.
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-9)


def test_float32_timesteps_are_read_exactly() -> None:
    t = torch.tensor([0.1, 123.456], dtype=torch.float32)  # values as float32 holds them
    got = timestep_embedding(t, 8, dtype=torch.float64)
    assert torch.equal(got, timestep_embedding(t.double(), 8, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_rounded_once_from_float64(dtype: torch.dtype) -> None:
    t = torch.tensor(TIMESTEPS)
    exact = timestep_embedding(t, 32, dtype=torch.float64)
    assert torch.equal(timestep_embedding(t, 32, dtype=dtype), round_once(exact, dtype))


@pytest.mark.parametrize("shape", [(), (5,), (2, 3)])
def test_any_shape_of_timesteps(shape: tuple[int, ...]) -> None:
    t = torch.randint(0, 1000, shape)
    got = timestep_embedding(t, 6)
    assert got.shape == (*shape, 6)
    flat = timestep_embedding(t.reshape(-1), 6)
    assert torch.equal(got.reshape(-1, 6), flat)


@pytest.mark.parametrize(
    "dtype",
    [torch.uint8, torch.int8, torch.int16, torch.int32, torch.uint16, torch.uint32, torch.uint64],
)
def test_every_integer_dtype(dtype: torch.dtype) -> None:
    t = torch.tensor([0, 5, 100])
    assert torch.equal(timestep_embedding(t.to(dtype), 8), timestep_embedding(t, 8))


def test_small_widths() -> None:
    t = torch.tensor([2.0])
    assert torch.equal(timestep_embedding(t, 1), torch.zeros(1, 1))  # no frequency: the pad
    # One frequency: the shift does not matter, the frequency is 1 (k = 0).
    for shift in (0.0, 1.0):
        got = timestep_embedding(t, 2, downscale_freq_shift=shift, dtype=torch.float64)
        assert got.tolist() == [[math.sin(2.0), math.cos(2.0)]]


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (([1, 2], 8), {}, TypeError, "timesteps must be a Tensor"),
        ((torch.tensor([True]), 8), {}, TypeError, "timesteps must be an integer or floating"),
        ((torch.tensor([1]), 0), {}, ValueError, "dim must be a positive int, got 0"),
        ((torch.tensor([1]), 8), {"flip_sin_to_cos": 1}, TypeError, "flip_sin_to_cos must be a"),
        (
            (torch.tensor([1]), 8),
            {"downscale_freq_shift": 4},
            ValueError,
            "downscale_freq_shift=4.0 equals dim // 2 = 4",
        ),
        (
            (torch.tensor([1]), 8),
            {"downscale_freq_shift": "1"},
            TypeError,
            "downscale_freq_shift must be a number",
        ),
        ((torch.tensor([1]), 8), {"scale": math.nan}, ValueError, "scale must be a finite"),
        ((torch.tensor([1]), 8), {"max_period": 1}, ValueError, "max_period must be a finite"),
        ((torch.tensor([1]), 8), {"dtype": torch.int64}, TypeError, "dtype must be a floating"),
    ],
)
def test_errors_name_the_argument(args, kwargs, error, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        timestep_embedding(*args, **kwargs)
