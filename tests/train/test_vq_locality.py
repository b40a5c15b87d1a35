"""The same-patch term of the VQ stage (`coolsd.train.vq.same_patch_spread`) against a hand count, and the
locality tool (`tools/vq_locality.py`) on a VQ whose codes are local by construction."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from coolsd.train.vq import same_patch_spread

ROOT = Path(__file__).resolve().parents[2]


def test_the_spread_is_the_mean_squared_distance_to_the_mean_latent_of_each_repeated_patch():
    # a 1-channel 4x4 image, 2x2 patches -> a 2x2 latent grid; patches 0, 1, 3 are white, patch 2 is black
    x = torch.ones(1, 1, 4, 4)
    x[0, 0, 2:, :2] = -1
    h = torch.tensor([[[[1.0, 3.0], [7.0, 5.0]]]])  # latents of patches 0, 1 (top), 2, 3 (bottom)
    white = torch.tensor([1.0, 3.0, 5.0])
    expected = (white - white.mean()).pow(2).mean()  # the black patch occurs once: not counted
    assert same_patch_spread(x, h).item() == pytest.approx(expected.item())


def test_pixels_that_round_alike_are_one_group_and_different_ones_are_not():
    x = torch.ones(1, 1, 4, 4)
    x[0, 0, :, 2:] = 1 - 0.01  # rounds with 1.0 at 8 levels per unit: the four patches are one group
    h = torch.tensor([[[[0.0, 2.0], [0.0, 2.0]]]])
    assert same_patch_spread(x, h).item() == pytest.approx(1.0)
    x[0, 0, :, 2:] = 0.5  # another colour: two groups, each with equal latents
    assert same_patch_spread(x, h).item() == 0.0


def test_the_spread_has_a_gradient_towards_equal_latents():
    x = torch.ones(2, 3, 4, 4)
    h = torch.randn(2, 5, 2, 2, requires_grad=True)
    same_patch_spread(x, h).backward()
    stepped = (h - 0.1 * h.grad).detach()
    assert same_patch_spread(x, stepped) < same_patch_spread(x, h.detach())


def _tool():
    spec = importlib.util.spec_from_file_location("vq_locality", ROOT / "tools" / "vq_locality.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _LocalVQ:
    """A stand-in VQ whose code is the patch's mean grey level (0..3): local by construction."""

    class config:  # noqa: N801 (mimics a diffusers config)
        num_vq_embeddings = 4

    def encode(self, x):
        return type("E", (), {"latents": torch.nn.functional.avg_pool2d(x[:, :1], 2)})()

    def quantize(self, h):
        idx = ((h + 1) * 1.5).round().clamp(0, 3).long().flatten()
        return None, None, (None, None, idx)

    def decode(self, h):
        return type("D", (), {"sample": torch.nn.functional.interpolate(h, scale_factor=2).repeat(1, 3, 1, 1)})()


def test_the_locality_tool_counts_one_code_on_white_patches_of_a_local_vq():
    images = torch.full((3, 3, 8, 8), 255, dtype=torch.uint8)
    images[:, :, :4, :4] = 0  # a black square top left, the rest white
    report = _tool().locality(_LocalVQ(), images)
    assert report["grid"] == [4, 4]
    assert report["white_patch_share"] == pytest.approx(12 / 16, abs=1e-4)
    assert report["distinct_codes_on_white"] == 1 and report["commonest_white_code_share"] == 1.0
    assert report["same_as_left_on_white"] == 1.0
    # a black -> white step in each of the top two rows (the tool rounds to 4 places)
    assert report["same_as_left_neighbour"] == pytest.approx(10 / 12, abs=1e-4)
    assert report["psnr_db"] > 40
