"""Where a head's drafts fall against the target: the ratio r = p(x) / q(x) of each drafted token, by depth.

    python tools/draft_ratios.py --pairs 16        # the emoji model, Eagle-1 at L = 2, about a minute on 2 cores

Decodes the first `--pairs` of the emoji pilot's 32 training pairs (`tools/emoji_ambiguity_pilot.py`'s draw: a
seed-1 permutation of the training pairs, `pilot_conditions`; seed = index) with Eagle-1 and the rounds' detail
(`coolsd.decoding.events.RoundDetail`), and prints per draft depth the share of drafts in each bucket of r and
the acceptance a rule with a constant omega would give on the same drafts, mean min(1, omega r) for omega 1, 2, 8
(Eagle-1, and roughly COOL-SD delta 2 and 8). Drafts with r below 1/64 are shapes the target does not want, which
no relaxation accepts; those between 1/8 and 1 are what relaxation buys.
"""

from __future__ import annotations

import argparse

import torch
from emoji_ambiguity_pilot import pilot_conditions  # tools/ is on the path of a script run from it

from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.rules import make_rule
from coolsd.models.emoji import load_emoji
from coolsd.train.emoji_data import splits

EDGES = (0.0, 1 / 64, 1 / 8, 1 / 4, 1 / 2, 1.0, float("inf"))


def draft_ratios(bundle, conds: list[int], draft_len: int) -> list[list[float]]:
    """Per depth i (0-based), r = p_i(x_i) / q_i(x_i) of every drafted token of every Eagle-1 round."""
    by_depth: list[list[float]] = [[] for _ in range(draft_len)]
    for seed, cond in enumerate(conds):
        result = run(bundle.target, bundle.drafter, make_rule("eagle-1"), cond=cond, num_tokens=bundle.num_tokens,
                     sampling=bundle.default_sampling, config=DecodeConfig(draft_len=draft_len, detail=True), seed=seed)
        for event in result.events:
            detail = event.detail
            if detail is not None:
                for i, (p, q) in enumerate(zip(detail.p_draft.tolist(), detail.q_draft.tolist())):
                    by_depth[i].append(p / q)
    return by_depth


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--draft-len", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    by_depth = draft_ratios(load_emoji(), pilot_conditions(splits(), args.pairs), args.draft_len)
    for depth, ratios in enumerate(by_depth, 1):
        r = torch.tensor(ratios, dtype=torch.float64)
        shares = ", ".join(f"[{lo:.3g}, {hi:.3g}): {((r >= lo) & (r < hi)).double().mean():.2f}"
                           for lo, hi in zip(EDGES[:-1], EDGES[1:]))
        accept = ", ".join(f"omega {w}: {(w * r).clamp(max=1).mean():.2f}" for w in (1, 2, 8))
        print(f"depth {depth}, {len(r)} drafts: r in {shares}; mean min(1, omega r): {accept}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
