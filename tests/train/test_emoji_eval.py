"""Recognisability by nearest real image (coolsd.train.emoji_eval), exactly on hand-made images."""

import torch

from coolsd.train.emoji_eval import nearest_real, recognised


def test_nearest_real_picks_the_smallest_pixel_distance_in_every_chunk():
    bank = torch.stack([torch.full((3, 4, 4), v) for v in (0.0, 0.3, 0.6, 1.0)])
    images = torch.stack([torch.full((3, 4, 4), v) for v in (0.95, 0.1, 0.5, 0.34, 0.0)])
    assert nearest_real(images, bank).tolist() == [3, 0, 2, 1, 0]
    assert nearest_real(images, bank, chunk=2).tolist() == [3, 0, 2, 1, 0]  # chunks agree


def test_recognised_compares_the_nearest_image_s_emoji_with_the_one_asked_for():
    bank = torch.stack([torch.full((3, 2, 2), v) for v in (0.0, 0.5, 1.0)])
    bank_labels = torch.tensor([7, 9, 7])  # two styles of emoji 7, one of emoji 9
    images = torch.stack([torch.full((3, 2, 2), v) for v in (0.9, 0.45, 0.1)])
    assert recognised(images, torch.tensor([7, 7, 9]), bank, bank_labels).tolist() == [True, False, False]
