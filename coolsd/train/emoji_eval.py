"""`python -m coolsd.train evaluate --model emoji`: the emoji model card's held-out numbers and sample sheets.

- VQ reconstruction PSNR (dB) and codes used on the held-out real emoji (the shipped fp16 VQ, run in fp32);
- classifier class / style accuracy on the held-out real emoji;
- one sample sheet, assets/emoji/samples_decoders.png: a row per well-known emoji (styles in turn), a
  column per decoder, every cell the same (emoji, style, seed), at 3x (96 px a sample).
Speed and sample quality of the decoders are measured by `python -m coolsd.bench --model emoji`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from PIL import Image
from tqdm.auto import tqdm

from coolsd.decoding.drafting import Chain
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.rules import make_rule
from coolsd.models.conditions import STYLE_SEP
from coolsd.models.emoji import load_emoji
from coolsd.train.emoji_data import splits
from coolsd.util.sheet import Sheet

SHEET_DECODERS = {"vanilla": None, "eagle-1": ("eagle-1", {}),
                  "cool-sd_delta2": ("cool-sd", {"delta": 2.0, "nu": 0.7, "floor_at_one": True}),
                  "cool-sd_delta8": ("cool-sd", {"delta": 8.0, "nu": 0.7}),
                  "lantern++_lam20": ("lantern++", {"k": 10, "lam": 20.0})}


@torch.no_grad()
def heldout_metrics(bundle, data: dict) -> dict:
    """VQ PSNR / codes used and classifier accuracy on the held-out real emoji."""
    from coolsd.train.emoji import class_style_accuracy
    from coolsd.train.vq import codebook_usage, psnr

    vq = bundle.tokenizer.vq.float()
    x, y, s, _ = data["val"]
    return {"vq_psnr_db": psnr(vq(x).sample.clamp(-1, 1), x), "vq_codes_used": codebook_usage(vq, x),
            "n_heldout": len(x), **class_style_accuracy(bundle.classifier, x, y, s)}


# the emoji of the README's sample sheet: ones every visitor knows, one style per row in turn
SHEET_EMOJI = ("cat face", "red apple", "rocket", "rainbow", "grinning face", "dog face", "pizza", "soccer ball",
               "sun with face", "unicorn", "airplane", "birthday cake")


def labelled_sheet(images: list[list[torch.Tensor]], rows: list[str], cols: list[str], scale: int = 3) -> Image.Image:
    """images[r][c] (3, h, w) in [0, 1] -> one PIL sheet, each picture enlarged `scale` times, with row labels on
    the left and column labels on top."""
    h, w = images[0][0].shape[-2:]
    return Sheet.grid(len(rows), len(cols), (w * scale, h * scale), label_w=170, head_h=22).draw(images, rows, cols)


def sample_sheet(bundle, out: Path, emoji=SHEET_EMOJI, seed: int = 0, draft_len: int | None = None) -> str:
    """One PNG, samples_decoders.png: a row per emoji of `emoji` (styles in turn), a column per decoder
    of SHEET_DECODERS, every cell the same (emoji, style, seed)."""
    config = DecodeConfig(Chain(draft_len)) if draft_len else DecodeConfig()
    names, styles = list(bundle.base_class_names), list(bundle.style_names)
    conds = [names.index(e) * len(styles) + i % len(styles) for i, e in enumerate(emoji)]
    rules = {}
    for name, spec in SHEET_DECODERS.items():
        rules[name] = None if spec is None else make_rule(spec[0], **spec[1]).with_neighbours(bundle.neighbours)
    images = [[bundle.tokenizer.decode(run(bundle.target, bundle.drafter, rule, cond=cond, num_tokens=bundle.num_tokens,
                                           sampling=bundle.default_sampling, config=config, seed=seed).tokens)
               for rule in rules.values()] for cond in tqdm(conds, desc="sample sheet")]
    rows = [f"{e}{STYLE_SEP}{styles[i % len(styles)]}" for i, e in enumerate(emoji)]
    path = out / "samples_decoders.png"
    labelled_sheet(images, rows, list(rules)).save(path)
    return str(path)


def evaluate_emoji(assets: Path, seed: int = 0) -> dict:
    """Held-out metrics + sample sheets -> assets/metrics.json (merged into what is there)."""
    bundle = load_emoji(assets, device="cpu", with_classifier=True)
    report = {"execution": bundle.execution, **heldout_metrics(bundle, splits(seed=seed))}
    print(json.dumps(report, indent=1), flush=True)
    report["sample_sheet"] = sample_sheet(bundle, assets)
    path = assets / "metrics.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps(old | report, indent=1) + "\n")
    return report


@torch.no_grad()
def decode_codes(vq, codes: torch.Tensor) -> torch.Tensor:
    """(B, H*W) codes of a square grid -> (B, 3, 32, 32) RGB images in [0, 1] (the VQ's decoder, fp32)."""
    side = int(round(codes.shape[1] ** 0.5))
    z = vq.quantize.embedding(codes).view(len(codes), side, side, -1).permute(0, 3, 1, 2)
    return (vq.decode(z, force_not_quantize=True).sample.clamp(-1, 1) + 1) / 2


@torch.no_grad()
def nearest_real(images01: torch.Tensor, bank01: torch.Tensor, chunk: int = 128) -> torch.Tensor:
    """Index of the nearest bank image for each image, by squared pixel distance.

    images01 (N, 3, H, W) and bank01 (M, 3, H, W) in [0, 1] -> (N,) int64 indices into the bank."""
    bank = bank01.flatten(1).float()
    out = []
    for i in range(0, len(images01), chunk):
        x = images01[i : i + chunk].flatten(1).float()
        out.append(torch.cdist(x, bank).argmin(dim=1))
    return torch.cat(out)


def recognised(images01: torch.Tensor, asked: torch.Tensor, bank01: torch.Tensor,
               bank_labels: torch.Tensor) -> torch.Tensor:
    """(N,) bool: the nearest real image (pixel space, `nearest_real`) of each sample shows the emoji
    that was asked for (`asked` (N,) class ids; `bank_labels` (M,) the bank's class ids)."""
    return bank_labels[nearest_real(images01, bank01)] == asked
