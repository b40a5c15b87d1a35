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


def test_decode_codes_draws_each_code_grid_as_the_vq_decodes_its_embeddings():
    from diffusers import VQModel

    from coolsd.models.embedded import vq_config
    from coolsd.train.emoji_eval import decode_codes

    torch.manual_seed(0)
    vq = VQModel(**(vq_config(16, channels=3) | {"block_out_channels": (8, 8), "norm_num_groups": 4})).eval()
    codes = torch.randint(16, (2, 256))
    images = decode_codes(vq, codes)
    assert images.shape == (2, 3, 32, 32) and images.min() >= 0 and images.max() <= 1
    with torch.no_grad():  # the same as decoding the quantised latents of each image, one by one
        z = vq.quantize.embedding(codes[1]).view(1, 16, 16, -1).permute(0, 3, 1, 2)
        one = (vq.decode(z, force_not_quantize=True).sample.clamp(-1, 1) + 1) / 2
    assert torch.allclose(images[1:], one, atol=1e-5)
    assert not torch.allclose(images[0], images[1])
