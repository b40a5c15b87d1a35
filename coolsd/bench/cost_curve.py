"""`python -m coolsd.bench.cost_curve`: the target's forward time for 1..9 tokens, fp32 vs bf16.

For each candidate Llama size (random weights: time does not depend on their values) the engine's
own `LlamaClassTarget` forward is timed with both CFG rows (2 x n rows) after a `--context` token
prefix, median over `--reps` calls (`coolsd.models.timing.forward_times`: the cache is cropped back
after each call). A row of the table is "verify n tokens costs c target steps" (c = t(n) / t(1)),
the number the size rule reads:
the chosen size verifies 4 tokens for at most 1.25 steps on its fastest path while vanilla AR
(T single-token steps) stays within 2 s per image.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from coolsd.models.timing import forward_times
from coolsd.util.machine import bf16_units, cpu_name

DEFAULT_SIZES = ("256x6", "384x8", "512x8")


def cpu_info() -> dict:
    """CPU model name, whether it lists bf16 units (amx_bf16 / avx512_bf16), torch threads."""
    return {"cpu": cpu_name(), "bf16_units": bf16_units(), "threads": torch.get_num_threads()}


def parse_size(size: str) -> tuple[int, int]:
    """'384x8' -> (hidden 384, layers 8)."""
    d, layers = size.lower().split("x")
    return int(d), int(layers)


def build_target(hidden: int, layers: int, dtype: torch.dtype, grid: tuple[int, int] = (16, 16)):
    """A random `LlamaClassTarget` of this size (head dim 64, MLP about 8/3 x hidden) in `dtype`."""
    from transformers import LlamaForCausalLM

    from coolsd.models.embedded import LlamaClassTarget, target_config

    torch.manual_seed(0)
    inter = int(round(hidden * 8 / 3 / 32)) * 32
    model = LlamaForCausalLM(target_config(1024, hidden=hidden, layers=layers, heads=hidden // 64,
                                           intermediate=inter, grid=grid)).to(dtype).eval()
    params = sum(p.numel() for p in model.model.layers.parameters())
    return LlamaClassTarget(model), params


def measure(sizes=DEFAULT_SIZES, max_tokens: int = 9, context: int = 128, reps: int = 15,
            num_tokens: int = 256) -> dict:
    """{"cpu": ..., "rows": [{size, params_m, dtype, ms: [t(1)..t(max)], steps4, vanilla_s}]}."""
    rows = []
    for size in sizes:
        hidden, layers = parse_size(size)
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            target, params = build_target(hidden, layers, dtype)
            times = forward_times(target, None, cond=0, guidance=True, max_tokens=max_tokens, context=context,
                                  repeats=reps, warmup=3)
            ms = [1e3 * t for t in times.target_s]
            rows.append({"size": size, "params_m": round(params / 1e6, 2), "dtype": name,
                         "ms": [round(m, 3) for m in ms], "steps4": round(ms[3] / ms[0], 3),
                         "vanilla_s": round(num_tokens * ms[0] / 1e3, 2)})
            print(f"[cost] d{size} {name}: 1 tok {ms[0]:.2f} ms, 4 tok {ms[3]:.2f} ms "
                  f"({ms[3] / ms[0]:.2f} steps), vanilla {num_tokens * ms[0] / 1e3:.2f} s/image", flush=True)
    return {"cpu": cpu_info(), "context": context, "reps": reps, "rows": rows}


def choose(report: dict, max_steps4: float = 1.25, max_vanilla_s: float = 2.0) -> dict:
    """The size rule: per size the fastest path (lower t(1)); among sizes whose vanilla AR fits
    `max_vanilla_s`, the largest one verifying 4 tokens within `max_steps4` steps, else the one
    closest to it. Returns the chosen row plus "met" (bool)."""
    best: dict[str, dict] = {}
    for row in report["rows"]:
        if row["size"] not in best or row["ms"][0] < best[row["size"]]["ms"][0]:
            best[row["size"]] = row
    fits = [r for r in best.values() if r["vanilla_s"] <= max_vanilla_s] or list(best.values())
    met = [r for r in fits if r["steps4"] <= max_steps4]
    pick = max(met, key=lambda r: r["params_m"]) if met else min(fits, key=lambda r: r["steps4"])
    return pick | {"met": bool(met)}


def markdown(report: dict) -> str:
    """The table of the model card: ms per forward for 1..9 tokens, steps for 4, vanilla s/image."""
    n = len(report["rows"][0]["ms"])
    head = "| size | params (layers) | path | " + " | ".join(f"{i} tok" for i in range(1, n + 1))
    lines = [head + " | 4 tok / 1 tok | vanilla s/image |", "|" + "---|" * (n + 5)]
    for r in report["rows"]:
        cells = " | ".join(f"{m:.2f}" for m in r["ms"])
        lines.append(f"| d{r['size']} | {r['params_m']} M | {r['dtype']} | {cells} | {r['steps4']:.2f} | "
                     f"{r['vanilla_s']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m coolsd.bench.cost_curve", description=__doc__)
    ap.add_argument("--sizes", nargs="+", default=list(DEFAULT_SIZES), help="HIDDENxLAYERS, e.g. 384x8")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    report = measure(args.sizes, reps=args.reps)
    report["choice"] = choose(report)
    print(markdown(report))
    c = report["choice"]
    print(f"[cost] chosen d{c['size']} {c['dtype']}: 4 tokens = {c['steps4']:.2f} steps, "
          f"vanilla {c['vanilla_s']:.2f} s/image ({'meets' if c['met'] else 'misses'} the 1.25-step rule)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
