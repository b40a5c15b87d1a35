"""Recognisability and tau of an emoji model folder at several sampling temperatures (CFG 1).

For each temperature: vanilla AR samples of 96 random training pairs (batched), the share recognised
(`coolsd.train.emoji_eval.recognised`), and the mean tau of Eagle-1, COOL-SD delta 2 / 8 and LANTERN++
(k 10, lambda 20) at L = 3 over the first 6 of those pairs. Needs the training data
(`python -m coolsd.train.emoji_data`).

    .venv/bin/python tools/emoji_temperature_probe.py assets/emoji --temperatures 1,1.5,2
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch


def main() -> int:
    from coolsd.decoding.engine import DecodeConfig, run
    from coolsd.decoding.rules import make_rule
    from coolsd.decoding.sampling import SamplingConfig
    from coolsd.models.emoji import load_emoji
    from coolsd.train.emoji_data import load_dataset
    from coolsd.train.emoji_eval import decode_codes, recognised
    from coolsd.train.selfdistill import sample_batch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--temperatures", default="1,1.5,2")
    args = ap.parse_args()
    torch.set_num_threads(1)
    bundle = load_emoji(args.folder, device="cpu")
    target = bundle.target.model.float()  # batched sampling in fp32 (the bundle may run bf16)
    vq = bundle.tokenizer.vq
    d = load_dataset()
    bank = d["images"].float() / 255
    g = torch.Generator().manual_seed(0)
    seen = d["train"][torch.randperm(len(d["train"]), generator=g)[:96]]
    conds = d["labels"][seen] * len(d["style_names"]) + d["styles"][seen]
    rules = {"eagle-1": make_rule("eagle-1"), "cool-sd d2": make_rule("cool-sd", delta=2.0, nu=0.7, floor_at_one=True),
             "cool-sd d8": make_rule("cool-sd", delta=8.0, nu=0.7),
             "lantern++": make_rule("lantern++", k=10, lam=20.0).with_neighbours(bundle.neighbours)}
    for t in (float(x) for x in args.temperatures.split(",")):
        sampling = SamplingConfig(1.0, t, 0, 1.0)
        with torch.no_grad():
            images = decode_codes(vq, sample_batch(target, conds, sampling, g))
        share = recognised(images, conds // len(d["style_names"]), bank, d["labels"]).float().mean().item()
        taus = {name: sum(run(bundle.target, bundle.drafter, rule, cond=int(c), num_tokens=bundle.num_tokens,
                              sampling=sampling, config=DecodeConfig(3), seed=i).tau
                          for i, c in enumerate(conds[:6].tolist())) / 6 for name, rule in rules.items()}
        print(f"T {t}: recognised {share:.2f} of {len(conds)}; mean tau " +
              ", ".join(f"{k} {v:.2f}" for k, v in taus.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
