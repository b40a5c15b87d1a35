"""Measure the quality lab on the embedded model: first row, full grid, server memory (not a test).

    OMP_NUM_THREADS=1 python -m scripts.lab_measure [--workers 2] [--rule cool-sd] [--relaxation 2]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import time

import torch


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rule", default="cool-sd")
    parser.add_argument("--relaxation", type=float, default=2.0)
    parser.add_argument("--samples", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from coolsd.lab import Lab, lab_decoders, summarise
    from coolsd.models.bundle import load_embedded

    bundle = load_embedded()
    gc.collect()
    before = rss_mb()
    from coolsd.lab import load_classifier

    lab = Lab(bundle.target, bundle.drafter, bundle.tokenizer, bundle.num_tokens, load_classifier(),
              workers=args.workers)
    decoders = lab_decoders(args.rule, args.relaxation, bundle.neighbours)
    out = {"workers": args.workers, "rule": args.rule, "relaxation": args.relaxation, "rss_model_mb": before}
    for attempt in ("cold", "warm (vanilla + Eagle-1 cached)"):
        conds = list(range(args.samples))
        t0 = time.perf_counter()
        samples, first_row = [], None
        for s in lab.run(decoders, conds, conds, bundle.default_sampling):
            samples.append(s)
            if first_row is None and sum(x.row == 0 for x in samples) == len(decoders):
                first_row = time.perf_counter() - t0
        total = time.perf_counter() - t0
        out[attempt] = {"first_row_s": first_row, "full_grid_s": total,
                        "summary": summarise(samples, decoders)}
    out["rss_after_mb"] = rss_mb()
    out["rss_added_mb"] = out["rss_after_mb"] - before
    out["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
