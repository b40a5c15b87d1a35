"""Tune the draft round to this CPU: chain length L and the static tree, measured, for a few rules.

    .venv/bin/python -m coolsd.bench.tuning --images 20 --lengths 2-8 --trees eagle-25 \
        --rules eagle-1,cool-sd:delta=2 --out assets/bench/round_tuning

For every image (class i % 10, seed 100 + i) the script decodes vanilla AR and then every
(rule, L or tree) once, interleaved, on one torch thread, and records tau and the process CPU
seconds (`time.process_time`). Speed-up = the benchmark's statistic: total vanilla CPU seconds /
total CPU seconds of the setting over the same images, the first image a warm-up left out.
Also reports the mean CPU cost of one round (CPU seconds / target forwards), so that speed-up
can be read as tau x (vanilla step cost) / (round cost), and the engine's wall-clock split of a
round into drafter calls, the target's verify forward and everything else (sampling, rule maths).
Writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import NamedTuple

import torch

from coolsd.bench.cli import int_list
from coolsd.bench.settings import parse_spec
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.decoding.rules import Rule
from coolsd.models.bundle import ModelBundle, load_embedded
from coolsd.models.eagle import EagleDrafter, EagleHead
from coolsd.models.emoji import load_emoji


class Trial(NamedTuple):
    """One measured setting: its name in the table, the rule (None: vanilla AR) and the round's shape."""

    name: str
    rule: Rule | None
    config: DecodeConfig


ZERO = {"cpu": 0.0, "tokens": 0, "forwards": 0, "drafts": 0, "draft": 0.0, "verify": 0.0, "other": 0.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m coolsd.bench.tuning", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=20)
    ap.add_argument("--lengths", type=int_list, default=list(range(2, 9)))
    ap.add_argument("--trees", default="eagle-25")
    ap.add_argument("--rules", default="eagle-1,cool-sd:delta=2")
    ap.add_argument("--out", type=Path, default=Path("assets/bench/round_tuning"))
    ap.add_argument("--drafter", type=Path, default=None, help="an EagleHead folder instead of the shipped one")
    ap.add_argument("--model", choices=("mnist", "emoji"), default="mnist", help="which shipped model")
    ap.add_argument("--model-dir", type=Path, default=None, help="that model's folder (default the shipped one)")
    return ap.parse_args(argv)


def load_bundle(drafter: Path | None, model: str = "mnist", folder: Path | None = None) -> ModelBundle:
    """A model on CPU (MNIST or emoji; `folder`, else the shipped one), with the EagleHead in `drafter` instead of
    its own if given."""
    bundle = load_embedded(folder, device="cpu") if model == "mnist" else load_emoji(folder, device="cpu")
    if drafter is not None:
        model, k = bundle.target.model, bundle.target.vocab_size
        head = EagleHead.from_pretrained(drafter, dtype=torch.float32).eval()
        bundle.drafter = EagleDrafter(head, model.model.embed_tokens.weight, model.lm_head.weight[:k],
                                      bundle.num_tokens)
    return bundle


def tuning_settings(bundle: ModelBundle, rules: list[str], lengths: list[int], trees: list[str]) -> list[Trial]:
    """(name, rule, config): vanilla AR, then every rule spec at every chain length L and every tree."""
    settings = [Trial("vanilla", None, DecodeConfig())]
    for spec in rules:
        for shape in [*lengths, *trees]:
            tree = shape if isinstance(shape, str) else None
            s = parse_spec(spec + (f"@tree:shape={tree}" if tree else ""), draft_len=5 if tree else shape)
            name = f"{spec} {'tree ' + tree if tree else 'L=' + str(shape)}"
            settings.append(Trial(name, s.build_rule(bundle.neighbours), s.decode_config()))
    return settings


def spread(i: int, conditions: int) -> int:
    """The condition of image i: i for 10 or fewer conditions (MNIST's digits in turn), else i steps of
    37 apart (a prime), so a few images cover unlike emoji and styles."""
    return i % conditions if conditions <= 10 else (37 * i) % conditions


def measure(bundle: ModelBundle, settings: list[Trial], images: int) -> dict[str, dict]:
    """Decode images + 1 images (condition `spread(i)`, seed 100 + i) with every setting, interleaved; the first
    image is a warm-up. Per setting: process CPU seconds, tokens, target and draft forwards, phase wall seconds."""
    stats = {name: dict(ZERO) for name, _, _ in settings}
    for i in range(images + 1):
        for name, rule, config in settings:
            t0 = time.process_time()
            res = run(bundle.target, bundle.drafter, rule, cond=spread(i, len(bundle.class_names)),
                      num_tokens=bundle.num_tokens,
                      sampling=bundle.default_sampling, config=config, seed=100 + i)
            dt = time.process_time() - t0
            if i == 0:
                continue  # warm-up image
            st = stats[name]
            st["cpu"] += dt
            st["tokens"] += len(res.tokens)
            st["forwards"] += res.target_forwards
            st["drafts"] += res.draft_forwards
            for phase in ("draft", "verify", "other"):
                st[phase] += res.seconds[phase]
        print(f"image {i}/{images} done", flush=True)
    return stats


def result_rows(stats: dict[str, dict], settings: list[Trial], images: int) -> list[dict]:
    """One JSON row per setting: tau, CPU s per image, speed-up over vanilla AR, per-round costs."""
    base = stats["vanilla"]["cpu"]
    rows = []
    for name, _, config in settings:
        st = stats[name]
        rows.append({"setting": name, "draft_len": config.drafting.draft_len,
                     "tree": getattr(config.drafting, "shape", None),
                     "tau": st["tokens"] / st["forwards"], "cpu_s_per_image": st["cpu"] / images,
                     "speedup": base / st["cpu"], "round_ms": 1000 * st["cpu"] / st["forwards"],
                     "draft_calls_per_round": st["drafts"] / st["forwards"], "images": images}
                    | {f"{ph}_ms_per_round": 1000 * st[ph] / st["forwards"] for ph in ("draft", "verify", "other")})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| setting | tau | CPU s / img | CPU ms / round | wall ms / round: draft + verify + other | speed-up |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['setting']} | {r['tau']:.2f} | {r['cpu_s_per_image']:.3f} | {r['round_ms']:.2f} "
              f"| {r['draft_ms_per_round']:.2f} + {r['verify_ms_per_round']:.2f} + {r['other_ms_per_round']:.2f} "
              f"| {r['speedup']:.2f}x |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    bundle = load_bundle(args.drafter, args.model, args.model_dir)
    trees = [t for t in args.trees.split(",") if t]
    settings = tuning_settings(bundle, [r for r in args.rules.split(",") if r], args.lengths, trees)
    rows = result_rows(measure(bundle, settings, args.images), settings, args.images)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    text = markdown(rows)
    args.out.with_suffix(".md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
