"""`python -m coolsd.train STAGE --model emoji`: the emoji model's stages (see `coolsd.train.emoji`)."""

from __future__ import annotations

import dataclasses

import torch

from coolsd.compare.likeness import REAL_PICTURES_NAME, RealPictures
from coolsd.decoding.sampling import SamplingConfig
from coolsd.train.emoji_data import CREDITS, load_dataset, splits
from coolsd.train.emoji_eval import evaluate_emoji
from coolsd.train.export import export_bundle, export_real_stats
from coolsd.train.loop import part_path


def emoji_tokens(vq, data: dict, styles: int, n_val: int = 64) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Real sequences for the drafter: {"train"/"val": (codes (N, 256), condition ids class * S + style)}."""
    from coolsd.train.emoji import emoji_token_dataset
    from coolsd.train.vq import encode_tokens

    codes, ys, ss = emoji_token_dataset(vq, *data["train"])
    vx, vy, vs, _ = data["val"]
    return {"train": (codes, ys * styles + ss),
            "val": (encode_tokens(vq, vx[:n_val]).flatten(1), (vy * styles + vs)[:n_val])}


DEFAULT_EMOJI = "cat face"  # the emoji the app's race starts from: one every visitor knows
# the named-emoji model's sampling (stored in its target config): its own distribution, no guidance; at CFG 3
# its unconditional row drew no emoji (recognised 5 % vs 92 % at CFG 1, 128 training pairs).
NAMED_SAMPLING = SamplingConfig(cfg_scale=1.0, temperature=1.0, top_k=0, top_p=1.0)


def export(args) -> None:
    """fp16 folders into args.assets + FID statistics and the real picture of every (emoji, style) (training and
    held out); the target's config gains the artwork credits and the default emoji."""
    import json

    export_bundle(args.out, args.assets)
    config_path = args.assets / "target" / "config.json"
    config = json.loads(config_path.read_text())
    config.update(credits=CREDITS, default_class=DEFAULT_EMOJI, default_sampling=dataclasses.asdict(NAMED_SAMPLING))
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    data = load_dataset(seed=args.seed)
    export_real_stats(args.assets, images01=data["images"].float() / 255, what="real emoji (all styles)")
    export_real_pictures(args.assets, data)


def export_real_pictures(assets, data: dict) -> None:
    """Each (emoji, style)'s real picture -> classifier/real_pictures.safetensors (the likeness readout's
    reference, `coolsd.compare.likeness`; the artwork's licences allow it, with the credits the card carries)."""
    conditions = data["labels"] * len(data["style_names"]) + data["styles"]
    RealPictures(conditions, data["images"]).save(assets / "classifier" / REAL_PICTURES_NAME)
    print(f"[export] real pictures: {len(conditions)} (emoji, style) pairs")


def run_emoji_stage(args, budget: float, kw: dict) -> int:
    """Run one stage for the emoji model; `args` from `coolsd.train.cli`, `kw` = seed/batch/lr."""
    from transformers import LlamaForCausalLM

    from coolsd.models.patch_vq import load_vq
    from coolsd.train import emoji
    from coolsd.train.drafter import train_drafter
    from coolsd.train.vq import train_patch_vq, train_vq

    if args.stage == "export":
        export(args)
        return 0
    if args.stage == "evaluate":
        evaluate_emoji(args.assets, args.seed)
        return 0
    data = splits(seed=args.seed)
    if args.stage == "vq":
        if args.vq_kind == "patch":
            train_patch_vq(data, args.out, budget, codebook_size=args.vq_codes or emoji.PATCH_VQ_CODES, **kw)
        else:
            train_vq(data, args.out, budget, codebook_size=args.vq_codes or emoji.VQ_CODES, restart_every=200,
                     restart_until=2000, bf16=True, local_weight=args.vq_local, **(emoji.VQ_ARCH | kw))
        return 0
    if args.stage == "classifier":
        emoji.train_emoji_classifier(data, args.out, budget, **(kw | {"batch": max(kw["batch"], 64)}))
        return 0
    vq = load_vq(part_path(args, "vq"), torch_dtype=torch.float32).eval()
    if args.stage == "target":
        framed = None
        if args.framed:
            framed = emoji.load_framed_codes(vq, args.framed, args.seed, tuple(args.framed_scales), args.framed_shift)
        emoji.train_emoji_target(vq, data, args.out, budget, init=args.init, framed=framed,
                                 substitute=args.substitute, soft_sigma2=args.soft_sigma2,
                                 soft_expected=args.soft_expected, channel_sigma2=args.channel_sigma2,
                                 channel_temperature=args.channel_temperature, device=args.device,
                                 keep_best=args.keep_best, bf16=not args.fp32,
                                 **({"layers": args.layers} if args.layers else {}), **kw)
        return 0
    target = LlamaForCausalLM.from_pretrained(part_path(args, "target"), dtype=torch.float32).eval()
    tokens = emoji_tokens(vq, data, target.config.num_styles)
    train_drafter(vq, target, data, args.out, budget, init=args.init, n_self=args.n_self, self_frac=args.self_frac,
                  w_cls=args.w_cls, w_cfg=args.w_cfg, w_unroll=args.w_unroll, tokens=tokens, bf16=args.bf16,
                  sampling=NAMED_SAMPLING, n_start=200, n_real=256, device=args.device, **kw)
    return 0


