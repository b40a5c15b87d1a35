"""The cost model's closing numbers: predicted vs measured speed-up of the default racers on this machine.

    python tools/cost_model.py --seeds 4                        # MNIST model, digit 3, seeds 0..3; about a minute idle
    python tools/cost_model.py --model emoji --condition 6      # emoji model, condition id emoji * 4 + style

Measures the call times once (`coolsd.models.timing.forward_times` on forked handles, both CFG rows,
half-full cache), then races the app's default racers and vanilla AR (`coolsd.compare.race.Race`, one
torch thread, as the app runs) once per seed, and prints per racer the mean over seeds of the
predicted (`coolsd.compare.cost.compare_racers`) and the measured speed-up, with the CPU and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import torch

from coolsd.app.racers import DEFAULT_RACERS
from coolsd.compare import cost
from coolsd.compare.race import Race, Racer, fork_models
from coolsd.decoding import variants
from coolsd.decoding.engine import DecodeConfig, generate
from coolsd.models.bundle import load_embedded
from coolsd.models.emoji import load_emoji
from coolsd.models.timing import forward_times
from coolsd.util.machine import cpu_name


def one_race(bundle, keys: list[str], cond: int, seed: int, config: DecodeConfig) -> list[Racer]:
    racers = []
    for key in [*keys, variants.VANILLA]:
        target, drafter = fork_models(bundle.target, bundle.drafter)
        rule = variants.build(key, neighbours=bundle.neighbours)
        events = generate(target, drafter, rule, cond=cond, num_tokens=bundle.num_tokens,
                          sampling=bundle.default_sampling, config=config, seed=seed)
        racers.append(Racer(key, variants.VARIANTS[key].label, events, bundle.num_tokens))
    for _ in Race(racers):
        pass
    return racers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--model", choices=("mnist", "emoji"), default="mnist", help="which embedded model")
    ap.add_argument("--condition", type=int, default=3, help="condition id (digit; emoji: emoji * 4 + style)")
    ap.add_argument("--repeats", type=int, default=15, help="calls per median of the call times")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    bundle = load_emoji(device="cpu") if args.model == "emoji" else load_embedded(device="cpu")
    config = DecodeConfig()
    load_before = os.getloadavg()
    times = forward_times(*fork_models(bundle.target, bundle.drafter), args.condition, guidance=True,
                          max_tokens=config.draft_len + 1, context=bundle.num_tokens // 2, repeats=args.repeats)
    costs = cost.Costs(times)
    per_key: dict[str, dict[str, list[float]]] = {}
    for seed in range(args.seeds):
        racers = one_race(bundle, DEFAULT_RACERS, args.condition, seed, config)
        for row in cost.compare_racers(racers, costs, config.draft_len, racers[-1]):
            d = per_key.setdefault(row["decoder"], {"predicted": [], "measured": [], "e": [], "e_measured": []})
            for name, key in (("predicted", "predicted_speedup"), ("measured", "measured_speedup"),
                              ("e", "expected_tokens"), ("e_measured", "measured_tokens_per_round")):
                d[name].append(row[key])
    summary = {"cpu": cpu_name(), "load_before": load_before, "load_after": os.getloadavg(),
               "torch_threads": torch.get_num_threads(), "model": bundle.name, "execution": bundle.execution,
               "draft_len": config.draft_len,
               "seeds": args.seeds, "condition": args.condition, "times": times.to_json(),
               "step_ms": costs.step_ms, "draft_cost": costs.draft_cost,
               "verify_cost": costs.verify_cost(config.draft_len + 1), "racers": per_key}
    print(f"{bundle.name}, execution {bundle.execution}")
    print(f"CPU {summary['cpu']}; load (1/5/15 min) before {load_before}, after {summary['load_after']}")
    print(f"target step {costs.step_ms:.2f} ms, c = {costs.draft_cost:.3f}, "
          f"V(L + 1) = {summary['verify_cost']:.3f} (L = {config.draft_len})")
    print("| decoder | E predicted | tokens / round measured | speed-up predicted | measured (mean, min-max) |")
    print("|---|---:|---:|---:|---:|")
    for name, d in per_key.items():
        print(f"| {name} | {statistics.mean(d['e']):.3f} | {statistics.mean(d['e_measured']):.3f} | "
              f"{statistics.mean(d['predicted']):.2f}x | {statistics.mean(d['measured']):.2f}x "
              f"({min(d['measured']):.2f}-{max(d['measured']):.2f}) |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
