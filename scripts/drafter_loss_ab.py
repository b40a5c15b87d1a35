"""Fixed-step A/B of the drafter loss from the first shipped head: same batches, same steps, held-out metrics.

    PYTHONPATH=. python scripts/drafter_loss_ab.py 60 eagle1 cfg1 unroll cfg1_unroll

Needs runs/drafter_long/self_samples{,_val} (made by the drafter stage) and the first head saved in
runs/heads/shipped_old (assets/embedded/drafter at git 79adeef). Batch 8, AdamW 3e-4, self-samples
only; prints one line per variant and writes runs/ab/ab_steps_<steps>.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaForCausalLM

from coolsd.models.bundle import EMBEDDED_SAMPLING
from coolsd.train.drafter import drafter_losses, load_head, pair_ids
from coolsd.train.selfdistill import SampleShards

VARIANTS = {"eagle1": (0.1, 0.0, 0.0), "cfg1": (0.1, 1.0, 0.0), "unroll": (0.1, 0.0, 0.5),
            "cfg1_unroll": (0.1, 1.0, 0.5)}  # (w_cls, w_cfg, w_unroll)


def main() -> None:
    torch.set_num_threads(1)
    target = LlamaForCausalLM.from_pretrained("assets/embedded/target", dtype=torch.float32).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    pool = SampleShards(target, Path("runs/drafter_long/self_samples"))
    codes, labels, feats = SampleShards(target, Path("runs/drafter_long/self_samples_val")).tensors()
    val_ids, val_feats = pair_ids(codes, labels, target.config), feats.transpose(0, 1).flatten(0, 1)
    steps, batch, results = int(sys.argv[1]), 8, {}
    for name in sys.argv[2:]:
        torch.manual_seed(0)
        gen = torch.Generator().manual_seed(0)
        head = load_head(target.config, Path("runs/heads/shipped_old"))
        opt = torch.optim.AdamW(head.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.0)
        t0 = time.time()
        for _ in range(steps):
            c, y, f = pool.draw(batch, gen)
            loss, _ = drafter_losses(head, target, pair_ids(c, y, target.config), f.transpose(0, 1).flatten(0, 1),
                                     EMBEDDED_SAMPLING, *VARIANTS[name])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            opt.step()
        with torch.no_grad():
            _, m = drafter_losses(head.eval(), target, val_ids, val_feats, EMBEDDED_SAMPLING, w_unroll=1.0)
        results[name] = {"steps": steps, "batch": batch, "seconds": time.time() - t0, **m}
        print(name, results[name], flush=True)
    Path("runs/ab").mkdir(parents=True, exist_ok=True)
    Path(f"runs/ab/ab_steps_{steps}.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
