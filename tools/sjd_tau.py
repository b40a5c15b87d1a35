"""SJD's accepted length on a shipped model, a quick look (not the benchmark): tau, rounds keeping one token.

    python tools/sjd_tau.py --model mnist --images 6 --window 8      # about 25 s of CPU for three decoders

Decodes images 0..N-1 (condition i mod 10, seed 100 + i, the model's own sampling, one torch thread) with SJD,
SJD + reuse (Eagle-1's test on `coolsd.decoding.drafting.Jacobi` drafts) and Eagle-1 on Chain's default L, and
prints per decoder tau (tokens per target forward), the share of iterations that commit a single token and CPU
seconds per image. The benchmark (`python -m coolsd.bench --jacobi-window 8`) is where speed and quality are measured.
"""

from __future__ import annotations

import argparse
import time

import torch

from coolsd.decoding.drafting import Chain, Jacobi
from coolsd.decoding.engine import DecodeConfig, generate
from coolsd.decoding.rules import EagleRule
from coolsd.models import registry


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mnist", help="a key of coolsd.models.registry.MODELS")
    ap.add_argument("--images", type=int, default=6)
    ap.add_argument("--window", type=int, default=Jacobi.window, help="SJD window W")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    bundle = registry.load(args.model)
    bundle = bundle[0] if isinstance(bundle, (list, tuple)) else bundle
    decoders = {"sjd": Jacobi(window=args.window), "sjd-reuse": Jacobi(window=args.window, reuse=True),
                "eagle-1": Chain()}  # (drafting; the rule is Eagle-1's for all three)
    rule = EagleRule()
    for name, drafting in decoders.items():
        forwards = single = iterations = 0
        start = time.process_time()
        for i in range(args.images):
            events = list(generate(bundle.target, bundle.drafter, rule, cond=i % 10, num_tokens=bundle.num_tokens,
                                   sampling=bundle.default_sampling, config=DecodeConfig(drafting), seed=100 + i))
            forwards += len(events)
            single += sum(len(e.tokens) == 1 for e in events[1:])
            iterations += len(events) - 1
        cpu = (time.process_time() - start) / args.images
        print(f"{name}: tau {bundle.num_tokens * args.images / forwards:.3f}, one token in "
              f"{single / iterations:.0%} of rounds, {cpu:.2f} CPU s / image")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
