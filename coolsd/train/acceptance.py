"""Drafter quality on held-out data: teacher-forced agreement, and acceptance per depth in the engine.

`python -m coolsd.train.acceptance --drafter DIR [--val SHARDS] [--images N] [--json OUT]` prints
- held-out teacher-forced metrics (`coolsd.train.drafter.drafter_losses`): top-1 agreement of the
  class row's raw logits on 64 held-out real digits (`real_top1_raw`, the model card's number) and
  on held-out self-samples at the app's sampling, CFG-mixed top-1 and acceptance at depths 1-2;
- decoding with the engine (Eagle-1 rule, chain L): tau and the acceptance rate per depth,
  P(depth d accepted | depth d drafted and depths < d accepted), over N images (classes i % 10).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from coolsd.decoding.drafting import Chain
from coolsd.decoding.engine import DecodeConfig, generate
from coolsd.decoding.rules import make_rule
from coolsd.models.bundle import EMBEDDED_DIR, EMBEDDED_SAMPLING, load_embedded
from coolsd.train.data import splits


def depth_rates(events, draft_len: int) -> list[float]:
    """Per-depth conditional acceptance rate over chain RoundEvents (round 0 and undrafted depths skipped)."""
    tried, passed = [0] * draft_len, [0] * draft_len
    for e in events:
        for d in range(1, min(e.n_accepted + 1, e.n_drafted) + 1):
            tried[d - 1] += 1
            passed[d - 1] += d <= e.n_accepted
    return [p / t if t else float("nan") for p, t in zip(passed, tried)]


def heldout(head, target, vq, val_dir: Path | None, n_real: int = 64) -> dict[str, float]:
    """Teacher-forced metrics of `head` (see module doc); val_dir: SampleShards folder or None."""
    from coolsd.train.drafter import drafter_losses, pair_ids, target_features
    from coolsd.train.selfdistill import SampleShards
    from coolsd.train.vq import encode_tokens

    x, y = splits(0)["val"]
    ids = pair_ids(encode_tokens(vq, x[:n_real]).flatten(1), y[:n_real], target.config)
    with torch.no_grad():
        _, real = drafter_losses(head, target, ids, target_features(target, ids), EMBEDDED_SAMPLING)
        out = {"real_top1_raw": real["top1_raw"], "real_accept": real["accept"]}
        if val_dir is not None:
            codes, labels, feats = SampleShards(target, val_dir).tensors()
            _, s = drafter_losses(head, target, pair_ids(codes, labels, target.config),
                                  feats.transpose(0, 1).flatten(0, 1), EMBEDDED_SAMPLING, w_unroll=1.0)
            out |= {"self_top1_raw": s["top1_raw"], "self_top1_cfg": s["top1_cfg"], "self_accept": s["accept"],
                    "self_accept2": s["accept2"], "self_images": len(codes)}
    return out


def engine_acceptance(bundle, images: int, draft_len: int, seed0: int = 1000) -> dict:
    """Eagle-1, chain L = draft_len, app sampling: tau and per-depth rates over `images` images."""
    events, tokens, forwards = [], 0, 0
    for i in range(images):
        evs = list(generate(bundle.target, bundle.drafter, make_rule("eagle-1"), cond=i % 10,
                            num_tokens=bundle.num_tokens,
                            sampling=EMBEDDED_SAMPLING, config=DecodeConfig(Chain(draft_len)), seed=seed0 + i))
        events += evs[1:]
        tokens += sum(len(e.tokens) for e in evs)
        forwards += sum(e.target_forwards for e in evs)
    return {"tau": tokens / forwards, "depth_rates": depth_rates(events, draft_len), "images": images,
            "draft_len": draft_len}


def main(argv: list[str] | None = None) -> int:
    from coolsd.models.eagle import EagleDrafter, EagleHead

    ap = argparse.ArgumentParser(prog="python -m coolsd.train.acceptance", description=__doc__)
    ap.add_argument("--drafter", type=Path, default=EMBEDDED_DIR / "drafter")
    ap.add_argument("--val", type=Path, default=None, help="held-out SampleShards folder")
    ap.add_argument("--images", type=int, default=20)
    ap.add_argument("--draft-len", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    bundle = load_embedded(device="cpu")
    model = bundle.target.model
    head = EagleHead.from_pretrained(args.drafter, dtype=torch.float32).eval()
    k = model.config.codebook_size
    bundle.drafter = EagleDrafter(head, model.model.embed_tokens.weight, model.lm_head.weight[:k], bundle.num_tokens)
    report = {"drafter": str(args.drafter), **heldout(head, model, bundle.tokenizer.vq, args.val)}
    if args.images:
        report["engine"] = engine_acceptance(bundle, args.images, args.draft_len)
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
