"""How local are a VQ's codes? Encode real images and count the codes that plain white patches get.

    .venv/bin/python tools/vq_locality.py assets/emoji/vq ~/.cache/coolsd/data/emoji/emoji_names187_32.pt

A code stands for one patch of the image (2 x 2 pixels for the emoji VQ). If the encoder were local, a
patch of pure white would get one code (or a few look-alikes), and a code would often equal its left
neighbour on a white background. An encoder whose receptive field covers the whole image (and whose
GroupNorm uses the whole image's statistics) gives a white patch a code that also depends on the rest of
the picture: the target then has to memorise which of many near-identical codes each image uses, and a
drafter cannot predict that choice from the neighbouring tokens.

Prints (and with --out writes as JSON): images, codes used, share of patches that are white (every pixel
>= 250 of 255), distinct codes on those patches, the share of the commonest one, the share of tokens equal
to their left neighbour (all tokens and white-on-white pairs), and the PSNR of the reconstructions.
data: a torch file with "images" (N, 3, H, W) uint8 or float in [0, 255] (`coolsd.train.emoji_data`'s cache).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from coolsd.models.patch_vq import load_vq


def locality(vq, images: torch.Tensor, batch: int = 128) -> dict:
    """The statistics above for `images` (N, 3, H, W) in [0, 255]."""
    x = images.float() / 127.5 - 1
    codes, recon = [], []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            h = vq.encode(x[i : i + batch]).latents
            quant, _, (_, _, idx) = vq.quantize(h)
            side = int(idx.numel() // len(h)) ** 0.5
            codes.append(idx.view(len(h), int(side), int(side)))
            recon.append(vq.decode(h).sample.clamp(-1, 1))
    idx, rec = torch.cat(codes), torch.cat(recon)
    patch = x.shape[-1] // idx.shape[-1]
    white = (x.unfold(2, patch, patch).unfold(3, patch, patch) >= 250 / 127.5 - 1).all(dim=(1, 4, 5))
    on_white = torch.bincount(idx[white], minlength=vq.config.num_vq_embeddings)
    same_left = idx[:, :, 1:] == idx[:, :, :-1]
    both_white = white[:, :, 1:] & white[:, :, :-1]
    mse = ((rec - x) ** 2).mean(dim=(1, 2, 3))
    return {
        "images": len(x), "grid": list(idx.shape[1:]), "codebook": vq.config.num_vq_embeddings,
        "codes_used": int(idx.unique().numel()),
        "white_patch_share": round(white.float().mean().item(), 4),
        "distinct_codes_on_white": int((on_white > 0).sum()),
        "commonest_white_code_share": round((on_white.max() / on_white.sum()).item(), 4),
        "same_as_left_neighbour": round(same_left.float().mean().item(), 4),
        "same_as_left_on_white": round(same_left[both_white].float().mean().item(), 4),
        "psnr_db": round((10 * torch.log10(4 / mse)).mean().item(), 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("vq", type=Path, help="a VQ folder (diffusers VQModel or PatchVQModel)")
    p.add_argument("data", type=Path, help="torch file with 'images' (N, 3, H, W) in [0, 255]")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    vq = load_vq(args.vq).float().eval()
    images = torch.load(args.data)["images"]
    report = {"vq": str(args.vq), "data": str(args.data)} | locality(vq, images)
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
