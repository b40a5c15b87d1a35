"""Pilot for the emoji model (issue 25): two target sizes, the same wall-clock budget each, on one VQ.

For each set-up: train `python -m coolsd.train target`'s recipe for --minutes, then report held-out
NLL (nats/token on the held-out (emoji, style) pairs) and recognisability: the share of vanilla AR
samples (CFG 3) whose nearest real image in pixel space shows the emoji asked for, on --pairs
training pairs and on every held-out pair. Writes runs/pilot/pilot.json and prints a markdown table.

    .venv/bin/python tools/emoji_pilot.py --vq /work/runs/emoji2/vq --minutes 7
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

SETUPS = {"5M": dict(hidden=256, layers=6, heads=4, intermediate=704),
          "15M": dict(hidden=384, layers=8, heads=6, intermediate=1024)}


def samples_recognised(model, vq, data, conds, styles_n, batch=64, seed=0):
    """Vanilla AR (CFG 3) samples of (class, style) conds -> share recognised (nearest real image)."""
    from coolsd.models.emoji import EMOJI_SAMPLING
    from coolsd.train.emoji_data import load_dataset
    from coolsd.train.emoji_eval import decode_codes, recognised
    from coolsd.train.selfdistill import sample_batch

    d = load_dataset()
    bank, bank_labels = d["images"].float() / 255, d["labels"]
    gen = torch.Generator().manual_seed(seed)
    hits = []
    for i in range(0, len(conds), batch):
        c = conds[i : i + batch]
        codes = sample_batch(model, c[:, 0] * styles_n + c[:, 1], EMOJI_SAMPLING, gen)
        hits.append(recognised(decode_codes(vq, codes), c[:, 0], bank, bank_labels))
    return torch.cat(hits).float().mean().item()


def main() -> int:
    from diffusers import VQModel

    from coolsd.train.emoji import train_emoji_target
    from coolsd.train.emoji_data import splits

    ap = argparse.ArgumentParser()
    ap.add_argument("--vq", type=Path, required=True)
    ap.add_argument("--minutes", type=float, default=7.0)
    ap.add_argument("--pairs", type=int, default=128)
    ap.add_argument("--out", type=Path, default=Path("/work/runs/pilot"))
    ap.add_argument("--setups", nargs="+", default=list(SETUPS))
    args = ap.parse_args()
    torch.set_num_threads(2)
    data = splits()
    vq = VQModel.from_pretrained(args.vq).eval()
    g = torch.Generator().manual_seed(1)
    tr = torch.randperm(len(data["train"][1]), generator=g)[: args.pairs]
    train_conds = torch.stack([data["train"][1][tr], data["train"][2][tr]], 1)
    val_conds = torch.stack([data["val"][1], data["val"][2]], 1)
    rows = {}
    for name in args.setups:
        t0 = time.perf_counter()
        model = train_emoji_target(vq, data, args.out / name, args.minutes * 60, **SETUPS[name]).eval()
        state = torch.load(args.out / name / "target_state.pt", weights_only=False)
        s0 = time.perf_counter()
        rows[name] = {"params_M": sum(p.numel() for p in model.parameters()) / 1e6, "minutes": args.minutes,
                      "steps": state["step"], "val_nll": state["final"]["val_nll"],
                      "recognised_train_pairs": samples_recognised(model, vq, data, train_conds, 4),
                      "recognised_heldout_pairs": samples_recognised(model, vq, data, val_conds, 4),
                      "sampling_s": time.perf_counter() - s0, "wall_s": time.perf_counter() - t0}
        print(json.dumps({name: rows[name]}), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pilot.json").write_text(json.dumps(rows, indent=1))
    print("| set-up | params (M) | minutes | steps | held-out NLL | recognised (train pairs) "
          "| recognised (held-out pairs) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for n, r in rows.items():
        print(f"| {n} | {r['params_M']:.1f} | {r['minutes']:.0f} | {r['steps']} | {r['val_nll']:.3f} | "
              f"{r['recognised_train_pairs']:.0%} | {r['recognised_heldout_pairs']:.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
