"""`python -m coolsd.train STAGE --model emoji`: the emoji model's stages (see `coolsd.train.emoji`)."""

from __future__ import annotations

import torch


def run_emoji_stage(args, budget: float, kw: dict) -> int:
    """Run one stage for the emoji model; `args` from `coolsd.train.cli`, `kw` = seed/batch/lr."""
    from diffusers import VQModel

    from coolsd.train import emoji
    from coolsd.train.cli import part_path
    from coolsd.train.emoji_data import splits

    data = splits(seed=args.seed)
    if args.stage == "vq":
        from coolsd.train.vq import train_vq

        train_vq(data, args.out, budget, codebook_size=emoji.VQ_CODES, restart_every=200, restart_until=2000,
                 **(emoji.VQ_ARCH | kw))
        return 0
    if args.stage == "classifier":
        emoji.train_emoji_classifier(data, args.out, budget, **(kw | {"batch": max(kw["batch"], 64)}))
        return 0
    vq = VQModel.from_pretrained(part_path(args, "vq"), torch_dtype=torch.float32).eval()
    if args.stage == "target":
        emoji.train_emoji_target(vq, data, args.out, budget, **kw)
        return 0
    raise SystemExit(f"stage {args.stage} for --model emoji is not implemented yet")
