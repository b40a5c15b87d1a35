"""Would a bigger target make speculation pay on this CPU? The round against the step at other target sizes.

    python tools/target_size_sweep.py                      # 5 sizes, about 4 minutes on 2 cores (run it alone)
    python tools/target_size_sweep.py --sizes 256x6x704 512x8x1408 --out runs/sizes.json

Copies the shipped emoji folder (VQ, classifier, configs) once per size into --work with a *random* target
(hidden x layers x MLP width; 64-wide heads) and a random Eagle-1 head of the same width, saved as fp16 with
`save_pretrained`, and times each with the limit tool (`coolsd.bench.limit_table.measure`, the stored precision,
eager and the path named by --path). Random weights decode nonsense, but a forward's time does not depend on its
weights' values, so the table says what a round of L drafts costs in target steps at each size: the ceiling on
the speed-up is tau over that (printed for two values of tau). Nothing is trained and nothing here is shipped.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from coolsd.bench.limit_table import measure
from coolsd.models.eagle import EagleHead
from coolsd.models.emoji import EMOJI_DIR, load_emoji
from coolsd.models.lean import LEAN_PATHS

SIZES = ("256x6x704", "384x8x1024", "512x8x1408", "512x12x1408", "768x12x2048")  # the first: the shipped shape
KEEP_OUT = ("bench", "issue34", "issue35", "*.png")  # the shipped folder's results: not needed to load it


def parse_size(text: str) -> tuple[int, int, int]:
    """'hidden x layers x mlp' -> three ints; hidden a multiple of 64 (the heads are 64 wide)."""
    hidden, layers, mlp = (int(v) for v in text.split("x"))
    if hidden % 64 or min(hidden, layers, mlp) <= 0:
        raise ValueError(f"size {text!r}: hidden must be a positive multiple of 64, layers and MLP positive")
    return hidden, layers, mlp


def random_folder(out: Path, hidden: int, layers: int, mlp: int, seed: int = 0) -> float:
    """The shipped emoji folder copied to `out`, its target and head replaced by random ones of this size (fp16);
    returns the target's parameters in millions."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(EMOJI_DIR, out, ignore=shutil.ignore_patterns(*KEEP_OUT))
    heads = {"hidden_size": hidden, "intermediate_size": mlp, "num_attention_heads": hidden // 64,
             "num_key_value_heads": hidden // 64, "head_dim": 64}
    torch.manual_seed(seed)
    for folder, cls, extra in (("target", LlamaForCausalLM, {"num_hidden_layers": layers}), ("drafter", EagleHead, {})):
        stored = json.loads((out / folder / "config.json").read_text(encoding="utf-8"))
        settings = {k: v for k, v in stored.items() if k not in ("architectures", "transformers_version")}
        model = cls(LlamaConfig(**settings | heads | extra)).to(torch.float16)
        shutil.rmtree(out / folder)
        model.save_pretrained(out / folder)
        saved = json.loads((out / folder / "config.json").read_text(encoding="utf-8"))
        # the shipped config's own keys (conditions, channel, credits) as stored, the new shape over them
        (out / folder / "config.json").write_text(json.dumps(stored | saved | heads | extra, indent=1,
                                                             ensure_ascii=False), encoding="utf-8")
        if folder == "target":
            millions = sum(p.numel() for p in model.parameters()) / 1e6
    return millions


def row(size: str, millions: float, result: dict, path: str, taus: tuple[float, ...]) -> str:
    """One markdown row: weights, the bandwidth's step, the measured calls on `path` and the ceilings."""
    t = result["paths"][path]
    ceilings = " | ".join(f"{tau / (t['round'] / t['step']):.2f}x" for tau in taus)
    return (f"| {size} | {millions:.1f} | {result['weights_mb']['target']:.1f} / {result['weights_mb']['drafter']:.1f} "
            f"| {result['implied_ms']['target_memory']:.2f} | {t['step']:.2f} | {t['verify']:.2f} | {t['head']:.2f} "
            f"| {t['round']:.2f} | {t['verify'] / t['step']:.2f} | {t['head'] / t['step']:.2f} "
            f"| {t['round'] / t['step']:.2f} | {ceilings} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), help="hidden x layers x MLP width, each")
    parser.add_argument("--path", default="lean-fused", choices=sorted(LEAN_PATHS),
                        help="the lean path to time beside eager")
    parser.add_argument("--draft-len", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--taus", type=float, nargs="+", default=[1.85, 2.22],
                        help="tau values for the ceiling column (the shipped model's Eagle-1 and COOL-SD delta 2)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/coolsd_sizes"), help="scratch folder for the copies")
    parser.add_argument("--out", type=Path, default=None, help="a JSON file for every size's limit table")
    args = parser.parse_args(argv)
    try:
        sizes = [(text, parse_size(text)) for text in args.sizes]
    except ValueError as err:
        parser.error(str(err))
    torch.set_num_threads(1)
    lines = [f"| target (hidden x layers x MLP) | M params | MB target / head | memory step ms | step ms | verify "
             f"{args.draft_len + 1} ms | head ms | round ms | verify / step | head / step | round / step | "
             + " | ".join(f"ceiling at tau {tau}" for tau in args.taus) + " |",
             "|---" * (11 + len(args.taus)) + "|"]
    results = {}
    for text, (hidden, layers, mlp) in sizes:
        folder = args.work / text
        millions = random_folder(folder, hidden, layers, mlp)
        result = measure(load_emoji(folder, device="cpu"), args.draft_len, args.repeats, paths=(args.path,))
        results[text] = result | {"target_millions": round(millions, 2)}
        lines.append(row(text, millions, result, args.path, tuple(args.taus)))
        print(lines[-1], file=sys.stderr, flush=True)
        shutil.rmtree(folder)
    first = next(iter(results.values()))
    print(f"{first['cpu']}, {first['execution']}, path {args.path}, 1 thread, torch {first['torch']}, L = "
          f"{args.draft_len}, after {first['context']} cached tokens, medians of {args.repeats} alternating turns of "
          f"process time; random weights\n")
    print("\n".join(lines))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
