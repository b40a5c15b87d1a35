"""`python -m coolsd.train STAGE [...]`: train one stage of the embedded model into --out.

Stages run in order vq -> target -> drafter -> classifier; `export` writes the fp16 bundle to
assets/embedded. Each stage resumes from its checkpoint in --out and stops after --budget-min.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from coolsd.train.data import splits
from coolsd.train.emoji_cli import run_emoji_stage
from coolsd.train.evaluate import evaluate
from coolsd.train.export import export_bundle, export_real_stats
from coolsd.train.loop import part_path

STAGES = ("vq", "target", "drafter", "classifier", "export", "evaluate")
# drafter-stage defaults per model (MNIST: the first head's recipe; emoji: the shipped MNIST head's loss)
DRAFTER_DEFAULTS = {"mnist": {"n_self": 500, "self_frac": 0.5, "w_cfg": 0.0, "w_unroll": 0.0},
                    "emoji": {"n_self": 1500, "self_frac": 0.75, "w_cfg": 1.0, "w_unroll": 0.5}}


def parser() -> argparse.ArgumentParser:
    """The command line of `python -m coolsd.train`."""
    ap = argparse.ArgumentParser(prog="python -m coolsd.train", description=__doc__)
    ap.add_argument("stage", choices=STAGES)
    ap.add_argument("--model", choices=("mnist", "emoji"), default="mnist", help="which embedded model")
    ap.add_argument("--out", type=Path, default=None, help="checkpoint folder (default runs/embedded or runs/emoji)")
    ap.add_argument("--budget-min", type=float, default=10.0, help="training time budget in minutes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=None, help="peak learning rate (stage default if unset)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--device", default="cpu", help="emoji target and drafter: where the model trains (e.g. cuda)")
    ap.add_argument("--assets", type=Path, default=None,
                    help="export destination (default assets/embedded or assets/emoji)")
    ap.add_argument("--per-class", type=int, default=4, help="evaluate: images per class and decoder")
    vq = ap.add_argument_group("vq stage (emoji)")
    vq.add_argument("--vq-codes", type=int, default=None, help="codebook size (default coolsd.train.emoji.VQ_CODES)")
    vq.add_argument("--vq-kind", choices=("patch", "conv"), default="patch",
                    help="patch: the local PatchVQModel (a code per pixel patch, k-means codebook); "
                         "conv: a diffusers VQModel")
    vq.add_argument("--vq-local", type=float, default=0.0,
                    help="weight of the same-patch term (train.vq.same_patch_spread): equal patches, equal codes")
    tg = ap.add_argument_group("target stage (emoji)")
    tg.add_argument("--layers", type=int, default=None,
                    help="transformer depth (default coolsd.train.emoji.TARGET_SIZE's); with --init of a shallower "
                         "target, a multiple of its depth: grown by block expansion (expanded_layers)")
    tg.add_argument("--framed", type=int, default=0,
                    help="draw this many random framings of every picture (emoji_data.Framing) and learn all but the "
                         "last, which is held out (0: the centred pictures as they are)")
    tg.add_argument("--framed-scales", type=float, nargs=2, default=(0.85, 1.0), metavar=("LOW", "HIGH"),
                    help="range of the content's scale in the box")
    tg.add_argument("--framed-shift", type=float, default=1.0, help="largest offset from the centre, pixels")
    tg.add_argument("--soft-sigma2", type=float, default=0.0,
                    help="stochastic quantisation: every step draws each patch's code among its 8 nearest, "
                         "weights exp(-d^2 / (2 sigma2)) (plain white stays on its code); 0: nearest code")
    tg.add_argument("--soft-expected", action="store_true",
                    help="with --soft-sigma2: the loss against each patch's whole soft label, not one drawn code")
    tg.add_argument("--channel-sigma2", type=float, default=0.0,
                    help="inputs through the look-alike channel of this sigma^2 (coolsd.models.channel), targets "
                         "the clean codes: a target robust to its own channel's draws; 0: off")
    tg.add_argument("--channel-temperature", type=float, default=1.0,
                    help="with --channel-sigma2: the temperature the saved target's logits are divided by before "
                         "its channel (stored in its config; sampling only, training unchanged)")
    tg.add_argument("--fp32", action="store_true",
                    help="no bf16 autocast (a CPU without bf16 units runs it far slower than fp32)")
    tg.add_argument("--keep-best", action="store_true",
                    help="end with the weights of the lowest held-out NLL (every 100 steps), not the last ones")
    tg.add_argument("--substitute", type=float, default=0.0,
                    help="probability that an input code is replaced by one of its 4 latent neighbours")
    dr = ap.add_argument_group("drafter stage")
    dr.add_argument("--init", type=Path, default=None,
                    help="warm-start the head (drafter stage) or the emoji target (target stage) from this "
                         "save_pretrained folder")
    dr.add_argument("--n-self", type=int, default=None, help="self-distilled target samples to train on")
    dr.add_argument("--self-frac", type=float, default=None, help="fraction of each batch from self-samples")
    dr.add_argument("--w-cls", type=float, default=0.1, help="weight of the per-row cross-entropy")
    dr.add_argument("--w-cfg", type=float, default=None, help="weight of the CFG-mixed cross-entropy")
    dr.add_argument("--w-unroll", type=float, default=None, help="weight of the one-step-unrolled terms")
    dr.add_argument("--bf16", action="store_true", help="emoji drafter: the losses under bf16 autocast")
    return ap


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line and fill the model's defaults (drafter weights, folders)."""
    args = parser().parse_args(argv)
    emoji = args.model == "emoji"
    for name, default in (DRAFTER_DEFAULTS["emoji" if emoji else "mnist"]).items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    args.out = args.out or Path("runs/emoji" if emoji else "runs/embedded")
    args.assets = args.assets or Path("assets/emoji" if emoji else "assets/embedded")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    budget = args.budget_min * 60
    kw = {"seed": args.seed, "batch": args.batch} | ({"lr": args.lr} if args.lr else {})

    if args.model == "emoji":
        return run_emoji_stage(args, budget, kw)
    return run_mnist_stage(args, budget, kw)


def run_mnist_stage(args: argparse.Namespace, budget: float, kw: dict) -> int:
    """Run one stage for the MNIST model; `budget` in seconds, `kw` = seed/batch/lr."""
    from coolsd.models.patch_vq import load_vq

    if args.stage == "export":
        export_bundle(args.out, args.assets)
        export_real_stats(args.assets, args.seed)
        return 0
    if args.stage == "evaluate":
        report = evaluate(args.assets, args.assets / "metrics.json", per_class=args.per_class)
        print(json.dumps(report["decoders"], indent=2))
        return 0
    data = splits(args.seed)
    if args.stage == "vq":
        from coolsd.train.vq import train_vq

        train_vq(data, args.out, budget, **kw)
        return 0
    vq = load_vq(part_path(args, "vq"), torch_dtype=torch.float32).eval()
    if args.stage == "target":
        from coolsd.train.target import train_target

        train_target(vq, data, args.out, budget, **kw)
    elif args.stage == "drafter":
        from transformers import LlamaForCausalLM

        from coolsd.train.drafter import train_drafter

        target = LlamaForCausalLM.from_pretrained(part_path(args, "target"), dtype=torch.float32).eval()
        train_drafter(vq, target, data, args.out, budget, init=args.init, n_self=args.n_self,
                      self_frac=args.self_frac, w_cls=args.w_cls, w_cfg=args.w_cfg, w_unroll=args.w_unroll, **kw)
    elif args.stage == "classifier":
        from coolsd.train.classifier import train_classifier

        train_classifier(data, args.out, budget, **kw)
    return 0
