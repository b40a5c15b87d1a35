"""Speed of a LlamaGen-XL-sized model (random weights) behind the coolsd engine.

Measures, on CUDA when present: one target step, verification of L + 1 tokens and of the 25-node
Eagle tree, one drafter step, and tokens per second of vanilla AR and of each rule (chain drafting,
plus the 25-node tree for Eagle-1 and LANTERN++). Random weights: acceptance numbers say nothing
about image quality or real speed-ups; the timings of each call are what this measures.

    PYTHONPATH=. python tools/gpu_llamagen_bench.py          # XL: 36 layers, D 1280, 20 heads, FFN 3584, V 16384
    PYTHONPATH=. python tools/gpu_llamagen_bench.py --tiny   # seconds on a CPU, to check the script

Writes llamagen_bench.json to $OUT (or --out) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from coolsd.bench.gpu import median_ms, sync  # one timing helper for both GPU tools
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.neighbours import neighbour_table
from coolsd.decoding.rules import make_rule
from coolsd.decoding.sampling import SamplingConfig
from coolsd.decoding.tree import EAGLE_25
from coolsd.models.llamagen import LlamaGenConfig, LlamaGenDrafter, LlamaGenT2I

XL = LlamaGenConfig()  # published GPT-XL T2I widths, 16 x 16 tokens
TINY = LlamaGenConfig(
    vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
    caption_dim=32, cls_token_num=8, block_size=64,
)  # fmt: skip
CODE_DIM = 8  # VQ-16 code width, for the random neighbour table


def tree_mask(paths, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Root + nodes of a static tree after `context` slots: mask (1 + N, context + 1 + N), depths (1 + N,)."""
    paths = sorted(paths, key=lambda p: (len(p), p))
    row_of = {(): 0} | {p: j + 1 for j, p in enumerate(paths)}
    mask = torch.zeros(1 + len(paths), context + 1 + len(paths), dtype=torch.bool)
    mask[:, : context + 1] = True
    for p in paths:
        for k in range(1, len(p) + 1):
            mask[row_of[p], context + row_of[p[:k]]] = True
    return mask, torch.tensor([0] + [len(p) for p in paths])


def step_timings(target, drafter, caption, draft_len: int, repeats: int, device) -> dict[str, float]:
    """Milliseconds per call with a half-full cache (G = 2 rows, CFG)."""
    T = target.config.block_size
    context = T // 2
    ids = torch.randint(0, target.vocab_size, (T,), device=device)
    first = target.start(caption, True)
    step = target.forward(ids[:context], torch.arange(context, device=device))
    drafter.start(caption, True)
    feats = torch.cat([first.hidden, step.hidden[:, :-1]], dim=1)
    drafter.forward(ids[:context], feats, torch.arange(context, device=device))

    def forward_and_crop(n, mask=None, positions=None):
        positions = torch.arange(context, context + n, device=device) if positions is None else positions
        target.forward(ids[:n], positions, mask)
        target.crop(context)

    mask, depths = tree_mask(EAGLE_25, context)
    mask, tree_pos = mask.to(device), (context + depths).to(device)

    def drafter_step():
        drafter.forward(ids[:1], None, torch.tensor([context], device=device))
        drafter.crop(context)

    return {
        "target_step_ms": median_ms(lambda: forward_and_crop(1), device, repeats),
        f"verify_{draft_len + 1}_tokens_ms": median_ms(lambda: forward_and_crop(draft_len + 1), device, repeats),
        f"verify_tree_{len(EAGLE_25)}_nodes_ms": median_ms(
            lambda: forward_and_crop(len(EAGLE_25) + 1, mask, tree_pos), device, repeats
        ),
        "drafter_step_ms": median_ms(drafter_step, device, repeats),
    }


def generation(target, drafter, rule, caption, sampling, config, images: int, device) -> dict:
    """Tokens per second, tau and forwards of `images` generations (seeds 0..images-1)."""
    T = target.config.block_size
    seconds, forwards, drafts = 0.0, 0, 0
    for seed in range(images):
        sync(device)
        start = time.perf_counter()
        result = run(target, drafter, rule, cond=caption, num_tokens=T, sampling=sampling, config=config, seed=seed)
        sync(device)
        seconds += time.perf_counter() - start
        forwards += result.target_forwards
        drafts += result.draft_forwards
    return {
        "tokens_per_s": images * T / seconds,
        "seconds_per_image": seconds / images,
        "tau": images * T / forwards,
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
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if device.type == "cpu":
        torch.set_num_threads(1)
    config = TINY if args.tiny else XL
    torch.manual_seed(0)
    with torch.device(device):
        target = LlamaGenT2I(config).to(dtype).eval()
        drafter = LlamaGenDrafter(LlamaGenConfig(**{**config.to_dict(), "num_hidden_layers": 1}), target)
        drafter = drafter.to(dtype).eval()
        target.caption.uncond.normal_()
        caption = torch.randn(config.cls_token_num, config.caption_dim)
        codebook = torch.randn(config.vocab_size, CODE_DIM)
    neighbours = neighbour_table(codebook, k_max=10, normalise=True)
    n_params = sum(p.numel() for p in target.parameters())

    steps = step_timings(target, drafter, caption, args.draft_len, args.repeats, device)
    sampling = SamplingConfig(cfg_scale=3.0, temperature=1.0, top_k=min(2000, config.vocab_size))
    chain, tree = DecodeConfig(draft_len=args.draft_len), DecodeConfig(draft_len=args.draft_len, tree="eagle-25")
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
        rows.append({"decoder": name, "rule": None if rule is None else rule.config(), "tree": decode_config.tree}
                    | stats)  # fmt: skip
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
        print(f"| {key.removesuffix('_ms')} | {value:.2f} |")
    print("\n| decoder | tokens/s | s/image | tau | target fwd | draft fwd | speed-up |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['decoder']} | {r['tokens_per_s']:.1f} | {r['seconds_per_image']:.2f} | {r['tau']:.2f} | "
              f"{r['target_forwards_per_image']:.0f} | {r['draft_forwards_per_image']:.0f} | "
              f"{r['speedup_vs_ar']:.2f}x |")  # fmt: skip
    print(f"\nwrote {out / 'llamagen_bench.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
