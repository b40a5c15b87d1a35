"""Recognisability of an emoji target checkpoint under several sampling settings (vanilla AR, batched).

For --pairs random (emoji, style) pairs seen in training and every held-out pair, sample one image per
pair with each setting and report the share whose nearest real image (pixel space,
`coolsd.train.emoji_eval.recognised`) shows the emoji asked for; also the VQ's PSNR on the held-out
images. Needs the training data (`python -m coolsd.train.emoji_data`).

    .venv/bin/python tools/emoji_checkpoint_eval.py assets/emoji
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from coolsd.decoding.sampling import SamplingConfig

SETTINGS = {"CFG 3, T 1": SamplingConfig(3.0, 1.0, 0, 1.0), "CFG 1, T 1": SamplingConfig(1.0, 1.0, 0, 1.0),
            "CFG 1, greedy": SamplingConfig(1.0, 1.0, 1, 1.0), "CFG 3, greedy": SamplingConfig(3.0, 1.0, 1, 1.0),
            "CFG 1, T 0.7": SamplingConfig(1.0, 0.7, 0, 1.0), "CFG 1.5, T 1": SamplingConfig(1.5, 1.0, 0, 1.0),
            "CFG 1, top-k 20": SamplingConfig(1.0, 1.0, 20, 1.0)}


def main() -> int:
    from transformers import LlamaForCausalLM

    from coolsd.models.patch_vq import load_vq
    from coolsd.train.emoji_data import load_dataset, to_float
    from coolsd.train.emoji_eval import decode_codes, recognised, rgb_grid
    from coolsd.train.selfdistill import sample_batch
    from coolsd.train.vq import psnr

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="holds vq/ and target/ (save_pretrained)")
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--settings", default=";".join(SETTINGS), help=f"names separated by ; of {list(SETTINGS)}")
    ap.add_argument("--sheets", type=Path, default=None, help="write 32 samples per setting as PNGs here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    vq = load_vq(args.folder / "vq", torch_dtype=torch.float32).eval()
    model = LlamaForCausalLM.from_pretrained(args.folder / "target", dtype=torch.float32).eval()
    d = load_dataset()
    styles = len(d["style_names"])
    gen = torch.Generator().manual_seed(0)
    seen = d["train"][torch.randperm(len(d["train"]), generator=gen)[: args.pairs]]
    bank = d["images"].float() / 255
    val = to_float(d["images"][d["val"]])
    with torch.no_grad():
        report = {"vq_psnr_heldout_db": psnr(vq(val).sample.clamp(-1, 1), val), "settings": {}}
    for name in args.settings.split(";"):
        sampling, row = SETTINGS[name], {}
        for part, idx in (("seen", seen), ("held_out", d["val"])):
            conds = d["labels"][idx] * styles + d["styles"][idx]
            t0 = time.perf_counter()
            images = decode_codes(vq, sample_batch(model, conds, sampling, gen))
            if args.sheets and part == "seen":
                args.sheets.mkdir(parents=True, exist_ok=True)
                rgb_grid(list(images[:32]), cols=8).save(args.sheets / f"{name.replace(' ', '').replace(',', '_')}.png")
            hits = recognised(images, d["labels"][idx], bank, d["labels"])
            row[part] = {"recognised": hits.float().mean().item(), "n": len(idx), "s": time.perf_counter() - t0}
        report["settings"][name] = row
        print(name, json.dumps(row), flush=True)
    (args.folder / "recognition.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
