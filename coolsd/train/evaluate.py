"""`python -m coolsd.train evaluate`: the model card's numbers for the shipped bundle, written to JSON.

Measures, on this machine, with the shipped fp16 weights run in fp32:
- VQ reconstruction PSNR and codebook usage on the held-out digits;
- classifier accuracy on held-out real digits, and on vanilla AR samples of every class;
- mean accepted length and wall-clock speed-up against vanilla AR for Eagle-1 and COOL-SD
  (chain, L = 5), same classes and seeds, interleaved per image so machine drift cancels;
- a sample grid per decoder (one row per class) saved as PNG in assets/.
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
from coolsd.models.bundle import load_embedded
from coolsd.util.sheet import Sheet


def grid_image(images: list[torch.Tensor], cols: int, scale: int = 2) -> Image.Image:
    """(1, h, w) images in [0, 1] -> one PIL grid, row-major, each enlarged `scale` times."""
    h, w = images[0].shape[-2:]
    rows = [images[i : i + cols] for i in range(0, len(images), cols)]
    return Sheet.grid(len(rows), cols, (w * scale, h * scale)).draw(rows)


def evaluate(assets: Path, out_json: Path, per_class: int = 4, draft_len: int = 5, threads: int = 1) -> dict:
    torch.set_num_threads(threads)
    bundle = load_embedded(assets, device="cpu", with_classifier=True)
    sampling = bundle.default_sampling
    decoders = {
        "vanilla": (None, None),
        "eagle-1": (bundle.drafter, make_rule("eagle-1")),
        "lantern++": (bundle.drafter, make_rule("lantern++", k=5, lam=10, neighbours=bundle.neighbours)),
        "cool-sd": (bundle.drafter, make_rule("cool-sd", delta=2.0)),  # floored at 1, nu the paper's
    }
    stats = {name: {"tokens": 0, "forwards": 0, "seconds": 0.0, "correct": 0, "n": 0} for name in decoders}
    images: dict[str, list] = {name: [] for name in decoders}
    jobs = [(c, s) for s in range(per_class) for c in range(len(bundle.class_names))]
    run(bundle.target, bundle.drafter, make_rule("eagle-1"), cond=0, num_tokens=bundle.num_tokens, sampling=sampling,
        seed=0)  # warm-up
    for c, s in tqdm(jobs, desc="evaluate"):
        for name, (drafter, rule) in decoders.items():  # interleaved: every decoder on the same image
            res = run(bundle.target, drafter, rule, cond=c, num_tokens=bundle.num_tokens, sampling=sampling,
                      config=DecodeConfig(Chain(draft_len)), seed=s)
            img = bundle.tokenizer.decode(res.tokens)
            with torch.no_grad():
                pred = bundle.classifier(pixel_values=img[None] * 2 - 1).logits.argmax(-1).item()
            st = stats[name]
            st["tokens"] += len(res.tokens)
            st["forwards"] += res.target_forwards
            st["seconds"] += res.wall_seconds
            st["correct"] += int(pred == c)
            st["n"] += 1
            images[name].append(img)
    report = {"per_class": per_class, "draft_len": draft_len, "sampling": sampling.__dict__, "decoders": {}}
    for name, st in stats.items():
        report["decoders"][name] = {
            "tau": st["tokens"] / st["forwards"],
            "seconds_per_image": st["seconds"] / st["n"],
            "speedup_vs_vanilla": stats["vanilla"]["seconds"] / st["seconds"],
            "classifier_accuracy": st["correct"] / st["n"],
            "images": st["n"],
        }
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i][0], jobs[i][1]))  # one row per class
        grid_image([images[name][i] for i in order], cols=per_class).save(assets.parent / f"samples_{name}.png")
    out_json.write_text(json.dumps(report, indent=2))
    return report
