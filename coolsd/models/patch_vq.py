"""A local VQ tokenizer: each token is the nearest codebook entry to one patch of pixels, nothing else.

diffusers' `VQModel` encodes with a convolutional encoder whose receptive field spans the whole 32 x 32 picture
(and GroupNorm over all of it), so two equal white patches in two pictures get different codes; an AR target then
memorises arbitrary code choices that a draft head cannot predict (assets/emoji/README.md). Here the
encoder is `pixel_unshuffle`: a latent *is* the patch's pixels (C * p * p values in [-1, 1]), the codebook holds
patches (k-means centroids, `coolsd.train.vq.kmeans_codebook`), and equal patches always get equal codes. Codes
that are near in the codebook look alike, which is what LANTERN++'s latent neighbourhoods assume. The decoder sees
context: it adds a diffusers `Decoder`'s correction to the patches the codes stand for.

Same calls as `VQModel` where the engine and training use them (`encode(x).latents`, `quantize`,
`quantize.get_codebook_entry`, `decode(z, force_not_quantize=True).sample`, `config.latent_channels`), the
diffusers `save_pretrained` / `from_pretrained` folder layout, and `load_vq` picks the class a folder names.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from diffusers.models.autoencoders.vae import Decoder, DecoderOutput, VectorQuantizer
from diffusers.models.autoencoders.vq_model import VQEncoderOutput


class PatchVQModel(ModelMixin, ConfigMixin):
    """Images (B, C, H, W) in [-1, 1] <-> (B, H/p, W/p) grids of codes; a code is a patch of p x p pixels.

    latent_channels = C * p * p (one latent per patch, the patch's own pixel values); the codebook
    (`quantize.embedding.weight`, (K, C * p * p)) is in that pixel space."""

    @register_to_config
    def __init__(self, in_channels: int = 3, patch_size: int = 2, num_vq_embeddings: int = 1024,
                 block_out_channels: tuple[int, ...] = (32, 64), layers_per_block: int = 1, norm_num_groups: int = 16,
                 sample_size: int = 32, latent_channels: int | None = None) -> None:
        super().__init__()
        latent = in_channels * patch_size * patch_size
        if latent_channels not in (None, latent):
            raise ValueError(f"latent_channels is in_channels * patch_size ** 2 = {latent}, got {latent_channels}")
        self.register_to_config(latent_channels=latent)
        self.quantize = VectorQuantizer(num_vq_embeddings, latent, beta=0.25, remap=None, sane_index_shape=False)
        blocks = len(block_out_channels)  # a Decoder of n blocks upsamples n - 1 times: from the grid to pixels
        if 2 ** (blocks - 1) != patch_size:
            raise ValueError(f"patch_size {patch_size} needs {patch_size.bit_length()} block_out_channels, "
                             f"got {blocks}")
        self.correction = Decoder(in_channels=latent, out_channels=in_channels,
                                  up_block_types=("UpDecoderBlock2D",) * blocks,
                                  block_out_channels=tuple(block_out_channels), layers_per_block=layers_per_block,
                                  norm_num_groups=norm_num_groups, act_fn="silu", mid_block_add_attention=False)

    def encode(self, x: torch.Tensor, return_dict: bool = True) -> VQEncoderOutput:
        """(B, C, H, W) -> latents (B, C * p * p, H / p, W / p): each patch's pixels, unquantised."""
        h = F.pixel_unshuffle(x, self.config.patch_size)
        return VQEncoderOutput(latents=h) if return_dict else (h,)

    def decode(self, h: torch.Tensor, force_not_quantize: bool = False, return_dict: bool = True,
               shape=None) -> DecoderOutput:
        """Latents (B, C * p * p, g, g) -> images (B, C, g * p, g * p): quantised (unless `force_not_quantize`),
        then the codes' patches plus the decoder's correction from their neighbourhood."""
        commit = torch.zeros((), device=h.device)
        if not force_not_quantize:
            h, commit, _ = self.quantize(h)
        out = F.pixel_shuffle(h, self.config.patch_size) + self.correction(h)
        return DecoderOutput(sample=out, commit_loss=commit) if return_dict else (out, commit)

    def forward(self, sample: torch.Tensor, return_dict: bool = True) -> DecoderOutput:
        return self.decode(self.encode(sample).latents, return_dict=return_dict)


def load_vq(path: str | Path, **kwargs):
    """The VQ tokenizer of a save_pretrained folder: `PatchVQModel` or diffusers `VQModel`, as its config names."""
    import json

    from diffusers import VQModel

    name = json.loads((Path(path) / "config.json").read_text(encoding="utf-8")).get("_class_name")
    return (PatchVQModel if name == PatchVQModel.__name__ else VQModel).from_pretrained(path, **kwargs)
