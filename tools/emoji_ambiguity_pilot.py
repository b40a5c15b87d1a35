"""Pilot for issue 34: which emoji target hesitates between look-alike codes, so that relaxation pays?

Each set-up warm-starts the shipped target (assets/emoji/target) and trains it briefly on a variant of the data
(`coolsd.train.emoji.train_emoji_target`); then, on the same 32 (emoji, style) training pairs, it measures the
lesson itself, not a proxy:
- ambiguity: the target's mean top-1 probability and entropy before each token of its own vanilla samples (all
  tokens, and those not plain background: `coolsd.bench.runner.token_scores`);
- tau of Eagle-1 and of COOL-SD delta 2 and 8 (L = 2), with the shipped head (trained on the old target: the
  same head for every set-up, so the set-ups compare; the final head is retrained on the chosen target);
- recognisability: the nearest real image (pixel space) of each vanilla sample shows the emoji asked for.
Row "shipped" measures today's target the same way. Writes <out>/pilot.json and prints a markdown table.

    .venv/bin/python tools/emoji_ambiguity_pilot.py --minutes 8 --setups mild strong mild+subst
    .venv/bin/python tools/emoji_ambiguity_pilot.py --channel-sigma2 0.03 0.05 0.08   # the channel's width alone
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch

# name -> (framings per picture, scale range, largest offset in px, input substitution probability), or a
# temperature the shipped target is sampled at, or the stochastic quantisation's sigma^2 (`emoji.soft_candidates`)
SETUPS = {"shipped": None, "shipped T=1.5": dict(temperature=1.5), "shipped T=2": dict(temperature=2.0),
          "mild": dict(per_icon=32, scales=(0.85, 1.0), shift=1.0, substitute=0.0),
          "strong": dict(per_icon=32, scales=(0.7, 1.0), shift=2.5, substitute=0.0),
          "mild+subst": dict(per_icon=32, scales=(0.85, 1.0), shift=1.0, substitute=0.1),
          "soft 0.02": dict(soft_sigma2=0.02), "soft 0.01": dict(soft_sigma2=0.01),
          "soft 0.04": dict(soft_sigma2=0.04),
          "soft 0.04 expected": dict(soft_sigma2=0.04, soft_expected=True),
          "soft 0.03 expected": dict(soft_sigma2=0.03, soft_expected=True)}
SHIPPED = Path("assets/emoji")


def model_folder(target_dir: Path | None, out: Path, drafter_dir: Path | None = None) -> Path:
    """A model folder: the shipped VQ, head, classifier, precision and execution path, with `target_dir`'s target
    (fp16) [and `drafter_dir`'s head instead of the shipped one, copied afresh each time]."""
    from transformers import LlamaForCausalLM

    if target_dir is None:
        return SHIPPED
    out.mkdir(parents=True, exist_ok=True)
    if drafter_dir is not None and (out / "drafter").exists():
        shutil.rmtree(out / "drafter")
    for part in ("vq", "drafter", "classifier"):
        if not (out / part).exists():
            shutil.copytree(drafter_dir if part == "drafter" and drafter_dir else SHIPPED / part, out / part)
    for name in ("precision.json", "execution.json"):
        shutil.copy(SHIPPED / name, out / name)
    config = json.loads((SHIPPED / "target" / "config.json").read_text())
    target = LlamaForCausalLM.from_pretrained(target_dir, dtype=torch.float32).half()
    target.save_pretrained(out / "target")
    saved = json.loads((out / "target" / "config.json").read_text())
    saved.update({k: config[k] for k in ("credits", "default_class", "default_sampling") if k in config})
    (out / "target" / "config.json").write_text(json.dumps(saved, indent=2, ensure_ascii=False) + "\n")
    return out


def channel_folder(sigma2: float, out: Path) -> Path:
    """A copy of the shipped model whose look-alike channel has width `sigma2` (the transformer untouched)."""
    if not out.exists():
        shutil.copytree(SHIPPED, out, ignore=shutil.ignore_patterns("bench", "issue3*", "*.png"))
    path = out / "target" / "config.json"
    config = json.loads(path.read_text())
    config["lookalike_channel"]["sigma2"] = sigma2
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return out


def pilot_conditions(data: dict, n: int) -> list[int]:
    """The pilot's pairs: condition ids (emoji * styles + style) of the first n of a seed-1 permutation of the
    training pairs of `data` (`coolsd.train.emoji_data.splits`)."""
    order = torch.randperm(len(data["train"][1]), generator=torch.Generator().manual_seed(1))[:n]
    return (data["train"][1][order] * len(data["style_names"]) + data["train"][2][order]).tolist()


def measure(folder: Path, conds: list[int], draft_len: int = 2, temperature: float | None = None,
            top_k: int = 0, rules: bool = True) -> dict:
    """Ambiguity, tau per rule and recognisability on `conds` (condition ids), seed = index; `temperature`: the
    target sampled at this temperature instead of its stored sampling's."""
    import dataclasses

    from coolsd.bench.runner import token_scores
    from coolsd.decoding.engine import DecodeConfig, run
    from coolsd.decoding.rules import make_rule
    from coolsd.models.emoji import load_emoji
    from coolsd.train.emoji_data import load_dataset
    from coolsd.train.emoji_eval import recognised

    bundle = load_emoji(folder)
    sampling, config = bundle.default_sampling, DecodeConfig(draft_len=draft_len)
    if temperature is not None:
        sampling = dataclasses.replace(sampling, temperature=temperature, top_k=top_k)
    rules = {"eagle-1": make_rule("eagle-1"), "cool-sd d2": make_rule("cool-sd", delta=2.0, nu=0.7),
             "cool-sd d8": make_rule("cool-sd", delta=8.0, nu=0.7)} if rules else {}
    scores, images, forwards = [], [], {name: 0 for name in rules}
    for seed, cond in enumerate(conds):
        result = run(bundle.target, None, None, cond=cond, num_tokens=bundle.num_tokens, sampling=sampling, seed=seed)
        image = bundle.tokenizer.decode(result.tokens)
        scores.append(token_scores(bundle, sampling, cond, result.tokens, image))
        images.append(image)
        for name, rule in rules.items():
            forwards[name] += run(bundle.target, bundle.drafter, rule, cond=cond, num_tokens=bundle.num_tokens,
                                  sampling=sampling, config=config, seed=seed).target_forwards
    from emoji_recognition import real_bank

    styles = len(bundle.style_names)
    asked = torch.tensor(conds) // styles
    hits = recognised(torch.stack(images), asked, *real_bank(load_dataset()))
    framed_hits = recognised(torch.stack(images), asked, *real_bank(load_dataset(), 8))
    fg = sum(s["fg_tokens"] for s in scores)
    return {"top1": sum(s["top1"] for s in scores) / len(scores),
            "entropy": sum(s["entropy"] for s in scores) / len(scores),
            "top1_fg": sum(s["top1_fg"] * s["fg_tokens"] for s in scores) / fg,
            "entropy_fg": sum(s["entropy_fg"] * s["fg_tokens"] for s in scores) / fg,
            "nll": sum(s["nll"] for s in scores) / len(scores),
            **{f"tau {name}": len(conds) * bundle.num_tokens / f if f else float("nan")
               for name, f in forwards.items()},
            "recognised": hits.float().mean().item(), "recognised_framed_bank": framed_hits.float().mean().item()}


def main() -> int:
    from coolsd.models.patch_vq import load_vq
    from coolsd.train.emoji import load_framed_codes, train_emoji_target
    from coolsd.train.emoji_data import splits

    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--pairs", type=int, default=32)
    ap.add_argument("--out", type=Path, default=Path("/work/runs/pilot34"))
    ap.add_argument("--setups", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--target-dir", type=Path, default=None,
                    help="instead of the set-ups: sample this trained target at each --temperatures (vanilla only)")
    ap.add_argument("--temperatures", type=float, nargs="+", default=[1.0])
    ap.add_argument("--trained", type=Path, nargs="+", default=None,
                    help="instead of the set-ups: folders that each hold a trained target/ and drafter/ (e.g. "
                         "tools/device_emoji_train.sh's), measured with their own head at each --temperatures")
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--with-rules", action="store_true", help="with --target-dir: tau of the rules too")
    ap.add_argument("--channel-sigma2", type=float, nargs="+", default=None,
                    help="instead of the set-ups: the shipped model with its channel this wide (no training)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    data = splits()
    conds = pilot_conditions(data, args.pairs)
    vq = load_vq(SHIPPED / "vq", torch_dtype=torch.float32).eval()
    if args.channel_sigma2:
        for sigma2 in args.channel_sigma2:
            row = measure(channel_folder(sigma2, args.out / f"channel_{sigma2:g}"), conds)
            print(json.dumps({f"channel sigma2={sigma2:g}": row}), flush=True)
        return 0
    if args.trained:
        for trained in args.trained:
            folder = model_folder(trained / "target", args.out / trained.name, trained / "drafter")
            for t in args.temperatures:
                row = measure(folder, conds, temperature=t, top_k=args.top_k)
                print(json.dumps({f"{trained.name} T={t:g} top-k={args.top_k}": row}), flush=True)
        return 0
    if args.target_dir is not None:
        folder = model_folder(args.target_dir, args.out / "sweep_model")
        for t in args.temperatures:
            row = measure(folder, conds, temperature=t, top_k=args.top_k, rules=args.with_rules)
            print(json.dumps({f"T={t:g} top-k={args.top_k}": row}), flush=True)
        return 0
    path = args.out / "pilot.json"
    rows = json.loads(path.read_text()) if path.is_file() else {}
    for name in args.setups:
        t0 = time.perf_counter()
        setup = SETUPS[name]
        target_dir, temperature = None, (setup or {}).get("temperature")
        if setup is not None and "per_icon" in setup:
            framed = load_framed_codes(vq, setup["per_icon"], 0, setup["scales"], setup["shift"])
            train_emoji_target(vq, data, args.out / name, args.minutes * 60, lr=args.lr, init=SHIPPED / "target",
                               framed=framed, substitute=setup["substitute"])
            target_dir = args.out / name / "target"
        elif setup is not None and "soft_sigma2" in setup:
            train_emoji_target(vq, data, args.out / name, args.minutes * 60, lr=args.lr, init=SHIPPED / "target",
                               soft_sigma2=setup["soft_sigma2"], soft_expected=setup.get("soft_expected", False))
            target_dir = args.out / name / "target"
        state = torch.load(args.out / name / "target_state.pt", weights_only=False) if target_dir else {}
        s0 = time.perf_counter()
        rows[name] = {"setup": setup, "minutes": state.get("elapsed", 0) / 60, "steps": state.get("step", 0),
                      "val_nll_framed": state.get("final", {}).get("val_nll"),
                      **measure(model_folder(target_dir, args.out / name / "model"), conds, temperature=temperature),
                      "measure_s": time.perf_counter() - s0, "wall_s": time.perf_counter() - t0}
        print(json.dumps({name: rows[name]}), flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows, indent=1))
    print("| set-up | steps | held-out NLL (framed) | top-1 p: all / not background | entropy (nats): all / not bg "
          "| tau Eagle-1 | tau COOL-SD d2 / d8 | d2 / Eagle-1 | recognised |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, r in rows.items():
        nll = "-" if r["val_nll_framed"] is None else f"{r['val_nll_framed']:.3f}"
        print(f"| {n} | {r['steps']} | {nll} | {r['top1']:.2f} / {r['top1_fg']:.2f} | {r['entropy']:.2f} / "
              f"{r['entropy_fg']:.2f} | {r['tau eagle-1']:.2f} | {r['tau cool-sd d2']:.2f} / {r['tau cool-sd d8']:.2f} "
              f"| {r['tau cool-sd d2'] / r['tau eagle-1']:.2f} | {r['recognised']:.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
