"""The local tokenizer (`PatchVQModel`): a code per pixel patch, whatever the rest of the picture shows; the
diffusers folder convention; k-means of patches; and the engine's tokenizer and bundle loading over it."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from coolsd.decoding.engine import run
from coolsd.decoding.rules import make_rule
from coolsd.models.bundle import BundleError, VQTokenizer
from coolsd.models.eagle import EagleHead, eagle_config
from coolsd.models.embedded import target_config
from coolsd.models.emoji import load_emoji
from coolsd.models.patch_vq import PatchVQModel, load_vq
from coolsd.train.emoji import emoji_classifier
from coolsd.train.vq import encode_tokens, kmeans_codebook, nearest, patches_of, train_patch_vq


def tiny_vq(k: int = 16, seed: int = 0) -> PatchVQModel:
    torch.manual_seed(seed)
    return PatchVQModel(num_vq_embeddings=k, block_out_channels=(8, 8), norm_num_groups=4, sample_size=8).eval()


def test_a_patch_gets_the_same_code_whatever_the_rest_of_the_picture_shows():
    vq = tiny_vq()
    a, b = torch.rand(2, 3, 8, 8) * 2 - 1
    b[:, :2, :2] = a[:, :2, :2]  # the top-left 2 x 2 patch is shared, everything else differs
    codes = encode_tokens(vq, torch.stack([a, b]))
    assert codes.shape == (2, 4, 4)
    assert codes[0, 0, 0] == codes[1, 0, 0]
    # and the code is the codebook entry nearest to that patch's 12 pixel values
    patch = torch.nn.functional.pixel_unshuffle(a[None, :, :2, :2], 2).flatten()
    dist = (vq.quantize.embedding.weight - patch).pow(2).sum(1)
    assert codes[0, 0, 0] == dist.argmin()


def test_latents_are_the_patch_pixels_and_the_decoder_adds_a_correction_to_them():
    vq = tiny_vq()
    x = torch.rand(1, 3, 8, 8) * 2 - 1
    h = vq.encode(x).latents
    assert h.shape == (1, 12, 4, 4) and vq.config.latent_channels == 12
    assert torch.equal(torch.nn.functional.pixel_shuffle(h, 2), x)
    torch.nn.init.zeros_(vq.correction.conv_out.weight)
    torch.nn.init.zeros_(vq.correction.conv_out.bias)
    assert torch.allclose(vq.decode(h, force_not_quantize=True).sample, x)  # no correction: the pixels back
    z, _, (_, _, ids) = vq.quantize(h)
    assert torch.allclose(vq.decode(h).sample, torch.nn.functional.pixel_shuffle(z, 2))


def test_config_checks_refuse_a_latent_size_or_decoder_depth_that_does_not_fit_the_patch():
    with pytest.raises(ValueError, match="latent_channels"):
        PatchVQModel(latent_channels=8)
    with pytest.raises(ValueError, match="block_out_channels"):
        PatchVQModel(patch_size=2, block_out_channels=(8, 8, 8), norm_num_groups=4)


def test_save_and_load_pick_the_class_the_folder_names(tmp_path):
    from diffusers import VQModel

    from coolsd.models.embedded import vq_config

    vq = tiny_vq()
    vq.save_pretrained(tmp_path / "patch")
    VQModel(**(vq_config(8) | {"block_out_channels": (8, 8), "norm_num_groups": 4})).save_pretrained(tmp_path / "conv")
    loaded = load_vq(tmp_path / "patch")
    assert isinstance(loaded, PatchVQModel) and isinstance(load_vq(tmp_path / "conv"), VQModel)
    x = torch.rand(2, 3, 8, 8) * 2 - 1
    assert torch.equal(loaded(x).sample, vq(x).sample)


def test_kmeans_finds_well_separated_clusters_and_nearest_assigns_by_distance():
    gen = torch.Generator().manual_seed(0)
    centres = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    points = torch.cat([c + 0.1 * torch.randn(50, 2, generator=gen) for c in centres])
    found = kmeans_codebook(points, 3, gen)
    order = nearest(centres, found)
    assert sorted(order.tolist()) == [0, 1, 2]
    assert torch.allclose(found[order], centres, atol=0.1)
    # chunked assignment equals one-shot assignment
    assert torch.equal(nearest(points, found, chunk=7), torch.cdist(points, found).argmin(1))


def test_kmeans_refuses_more_codes_than_distinct_patches():
    with pytest.raises(ValueError, match="distinct"):
        kmeans_codebook(torch.zeros(10, 2), 2, torch.Generator().manual_seed(0))


def test_patches_of_is_the_encoder_latent_order():
    vq = tiny_vq()
    x = torch.rand(2, 3, 8, 8)
    h = vq.encode(x).latents  # (2, 12, 4, 4)
    assert torch.equal(patches_of(x, 2), h.permute(0, 2, 3, 1).reshape(-1, 12))


def test_train_patch_vq_keeps_the_kmeans_codebook_and_saves_a_loadable_folder(tmp_path):
    torch.manual_seed(0)
    x = torch.rand(12, 3, 8, 8) * 2 - 1
    data = {"train": (x[:10], torch.zeros(10)), "val": (x[10:], torch.zeros(2))}
    vq = train_patch_vq(data, tmp_path, budget_s=1.0, codebook_size=8, widths=(8, 8), groups=4, batch=4)
    codebook = vq.quantize.embedding.weight
    again = kmeans_codebook(patches_of(x[:10], 2), 8, torch.Generator().manual_seed(0))
    assert torch.equal(codebook, again)  # the decoder trained, the codebook did not move
    assert isinstance(load_vq(tmp_path / "vq"), PatchVQModel)


def test_an_emoji_folder_with_a_patch_vq_loads_strictly_and_races(tmp_path, monkeypatch):
    monkeypatch.setenv("COOLSD_DTYPE", "fp32")
    k, grid = 16, (4, 4)
    tiny_vq(k).to(torch.float16).save_pretrained(tmp_path / "vq")
    cfg = target_config(k, hidden=32, layers=2, heads=2, intermediate=64, grid=grid, class_names=["a", "b"],
                        style_names=["S", "T"])
    torch.manual_seed(1)
    LlamaForCausalLM(cfg).to(torch.float16).save_pretrained(tmp_path / "target")
    EagleHead(eagle_config(cfg)).to(torch.float16).save_pretrained(tmp_path / "drafter")
    emoji_classifier(["a", "b"], ["S", "T"]).save_pretrained(tmp_path / "classifier")
    bundle = load_emoji(tmp_path, device="cpu")
    assert isinstance(bundle.tokenizer, VQTokenizer) and bundle.tokenizer.codebook.shape == (k, 12)
    out = run(bundle.target, bundle.drafter, make_rule("eagle-1"), cond=3, num_tokens=16, seed=0)
    image = bundle.tokenizer.decode(torch.as_tensor(out.tokens))
    assert image.shape == (3, 8, 8) and 0 <= image.min() and image.max() <= 1
    (tmp_path / "vq" / "config.json").write_text("{")
    with pytest.raises(BundleError, match="VQ tokenizer"):
        load_emoji(tmp_path, device="cpu")
