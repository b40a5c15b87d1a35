"""Speed of a LlamaGen-XL-sized model (random weights) behind the coolsd engine.

Measures, on CUDA when present: one target step, verification of L + 1 tokens and of the 25-node
Eagle tree, one drafter step, and tokens per second of vanilla AR and of each rule (chain drafting,
plus the 25-node tree for Eagle-1 and LANTERN++). Random weights: acceptance numbers say nothing
about image quality or real speed-ups; the timings of each call are what this measures.

    python tools/gpu_llamagen_bench.py          # XL: 36 layers, D 1280, 20 heads, FFN 3584, V 16384
    python tools/gpu_llamagen_bench.py --tiny   # seconds on a CPU, to check the script

The models and the per-call timings are `coolsd.bench.gpu`'s (`llamagen_models`, `call_ms`: target step,
verify of L + 1, verify of the 26-row tree block, drafter step, in ms); this tool adds more decoders
and a configurable L.

Writes llamagen_bench.json to $OUT (or --out) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from coolsd.bench.gpu import call_ms, llamagen_models, timed_runs  # the package's own timing (bench.gpu)
from coolsd.decoding.drafting import Chain, Tree
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.rules import make_rule
from coolsd.decoding.sampling import SamplingConfig


def generation(target, drafter, rule, caption, sampling, config, images: int, device) -> dict:
    """Tokens per second, tau and forwards of `images` generations (seeds 0..images-1)."""
    T = target.config.block_size
    seconds, tokens, forwards, drafts = timed_runs(target, drafter, rule, caption, sampling, config, T, images, device)
    return {
        "tokens_per_s": tokens / seconds,
        "seconds_per_image": seconds / images,
        "tau": tokens / forwards,
        "target_forwards_per_image": forwards / images,
        "draft_forwards_per_image": drafts / images,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny widths, for a quick CPU check")
    parser.add_argument("--draft-len", type=int, default=4, help="L, drafts per chain round")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per step measurement")
    parser.add_argument("--images", type=int, default=2, help="generations per decoder (seeds 0..n-1)")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench_out"), help="folder for llamagen_bench.json")
    args = parser.parse_args(argv)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)
    target, drafter, neighbours, caption, _, T, _ = llamagen_models("eager", args.tiny, device)
    config, dtype = target.config, next(target.parameters()).dtype
    n_params = sum(p.numel() for p in target.parameters())

    steps = call_ms(target, drafter, caption, T, args.repeats, device, draft_len=args.draft_len)
    sampling = SamplingConfig(cfg_scale=3.0, temperature=1.0, top_k=min(2000, config.vocab_size))
    chain, tree = DecodeConfig(Chain(args.draft_len)), DecodeConfig(Tree("eagle-25"))
    eagle, lantern = make_rule("eagle-1"), make_rule("lantern++", k=10, lam=5.0, neighbours=neighbours)
    decoders = [
        ("vanilla AR", None, None, chain),
        ("eagle-1 chain", drafter, eagle, chain),
        ("lantern++ chain", drafter, lantern, chain),
        ("uniform-rsd chain", drafter, make_rule("uniform-rsd", delta=2.0), chain),
        ("cool-sd chain", drafter, make_rule("cool-sd", delta=2.0), chain),
        ("eagle-1 tree-25", drafter, eagle, tree),
        ("lantern++ tree-25", drafter, lantern, tree),
    ]
    run(target, None, None, cond=caption, num_tokens=8, sampling=sampling, config=chain, seed=0)  # warm-up
    rows = []
    for name, draft_model, rule, decode_config in decoders:
        stats = generation(target, draft_model, rule, caption, sampling, decode_config, args.images, device)
        drafting = decode_config.drafting
        rows.append({"decoder": name, "rule": None if rule is None else rule.config(), "drafting": drafting.config(),
                     "tree": drafting.shape if isinstance(drafting, Tree) else None} | stats)  # fmt: skip
    base = rows[0]["tokens_per_s"]
    for row in rows:
        row["speedup_vs_ar"] = row["tokens_per_s"] / base

    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": str(dtype),
        "config": config.to_dict(),
        "target_params": n_params,
        "draft_len": args.draft_len,
        "sampling": {"cfg_scale": sampling.cfg_scale, "temperature": sampling.temperature, "top_k": sampling.top_k},
        "images_per_decoder": args.images,
        "steps_ms": steps,
        "generation": rows,
        "note": "random weights: acceptance and speed-ups do not predict trained-model behaviour",
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "llamagen_bench.json").write_text(json.dumps(report, indent=2))

    print(f"LlamaGen {'tiny' if args.tiny else 'XL'} ({n_params / 1e6:.2f} M params), {report['device']}, {dtype}")
    print("\n| call | ms |\n|---|---|")
    for key, value in steps.items():
        print(f"| {key} | {value:.2f} |")
    print("\n| decoder | tokens/s | s/image | tau | target fwd | draft fwd | speed-up |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['decoder']} | {r['tokens_per_s']:.1f} | {r['seconds_per_image']:.2f} | {r['tau']:.2f} | "
              f"{r['target_forwards_per_image']:.0f} | {r['draft_forwards_per_image']:.0f} | "
              f"{r['speedup_vs_ar']:.2f}x |")  # fmt: skip
    print(f"\nwrote {out / 'llamagen_bench.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
