"""GPU check: the eager and the fast execution path side by side, on one machine, in one run.

For the embedded model (shipped weights) and a LlamaGen-XL-size model (random weights, bf16 on CUDA)
it measures, per path: the warm-up at load, per-call milliseconds (target step, verify of L + 1,
verify of the 25-node tree, drafter step; CFG rows 2, half-full cache), tokens/s per decoder, the
share of a round spent outside model calls, and (embedded) the first race after load. The fast path
is "cuda-graphs" on CUDA and "static" (the same padded shapes, uncaptured) elsewhere.

    python -m coolsd.bench.gpu            # H200: about 4-6 minutes
    python -m coolsd.bench.gpu --tiny     # tiny random models on CPU, seconds (CI)
    python -m coolsd.bench.gpu --models embedded   # the shipped model; on CPU: eager vs static

Needs torch, transformers, diffusers (and their own dependencies). On a machine without network,
run the workspace's `shared/tools/device-wheels.sh` here first and carry `.whl`; the device command is then
    python3 -m pip install -q --no-index --no-deps --no-compile --target .whl/site .whl/*.whl \
      && PYTHONPATH=.whl/site python3 -m coolsd.bench.gpu
(about 6 minutes at most: give it a timeout of 420 s). Writes
gpu_check.json and gpu_check.md to $OUT (or --out); each part is written as soon as it ends, and
parts that would pass --budget-s are skipped and say so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import torch

from coolsd.compare.race import Race, Racer, fork_models
from coolsd.decoding.drafting import Chain, Tree, chain_or_tree
from coolsd.decoding.engine import DecodeConfig, generate, run
from coolsd.decoding.neighbours import neighbour_table
from coolsd.decoding.rules import make_rule
from coolsd.decoding.tree import EAGLE_25
from coolsd.models.bundle import load_embedded
from coolsd.models.graphs import prepare
from coolsd.models.llamagen import DEFAULT_SAMPLING, LlamaGenConfig, LlamaGenDrafter, LlamaGenT2I
from coolsd.models.timing import device_sync, median_seconds
from coolsd.models.tiny import tiny_bundle

DRAFT_LEN = 5  # L of the chain rounds measured (the "verify of L + 1 = 6 tokens")


def sync(device: torch.device) -> None:
    device_sync(device)()


def median_ms(fn, device: torch.device, repeats: int, warmup: int = 3) -> float:
    """Median wall milliseconds of fn() over `repeats` synchronised calls (`coolsd.models.timing`, the one home)."""
    return 1000 * median_seconds(fn, repeats, warmup, device_sync(device))


def tree_block(context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Root + the 25 Eagle nodes after `context` slots: mask (26, context + 26), positions offsets (26,)."""
    paths = sorted(EAGLE_25, key=lambda p: (len(p), p))
    row = {(): 0} | {p: j + 1 for j, p in enumerate(paths)}
    mask = torch.zeros(1 + len(paths), context + 1 + len(paths), dtype=torch.bool)
    mask[:, : context + 1] = True
    for p in paths:
        for k in range(1, len(p) + 1):
            mask[row[p], context + row[p[:k]]] = True
    return mask, torch.tensor([0] + [len(p) for p in paths])


def call_ms(target, drafter, cond, num_tokens: int, repeats: int, device,
            draft_len: int = DRAFT_LEN) -> dict[str, float]:
    """Per-call milliseconds through the model protocol (what the engine calls), half-full cache, CFG:
    target_step, verify_{draft_len + 1} (a chain round's verify), verify_tree_26, drafter_step."""
    context = num_tokens // 2
    ids = torch.randint(0, target.vocab_size, (num_tokens,), device=device)
    first = target.start(cond, True)
    step = target.forward(ids[:context], torch.arange(context, device=device))
    drafter.start(cond, True)
    drafter.forward(ids[:context], torch.cat([first.hidden, step.hidden[:, :-1]], dim=1),
                    torch.arange(context, device=device))
    mask, depth = tree_block(target.length)
    mask, tree_pos = mask.to(device), (context + depth).to(device)
    base = target.length

    def verify(n, m=None, pos=None):
        target.forward(ids[:n], torch.arange(context, context + n, device=device) if pos is None else pos, m)
        target.crop(base)

    own = drafter.__class__.__name__ == "LlamaGenDrafter"  # its chain steps read its own last feature
    feature = None if own else step.hidden[:, -1:]

    def draft_step():
        drafter.forward(ids[:1], feature, torch.tensor([context], device=device))
        drafter.crop(context)
    return {"target_step": median_ms(lambda: verify(1), device, repeats),
            f"verify_{draft_len + 1}": median_ms(lambda: verify(draft_len + 1), device, repeats),
            "verify_tree_26": median_ms(lambda: verify(26, mask, tree_pos), device, repeats),
            "drafter_step": median_ms(draft_step, device, repeats)}


def decoders(drafter, neighbours):
    chain, tree = DecodeConfig(Chain(DRAFT_LEN)), DecodeConfig(chain_or_tree(DRAFT_LEN, "eagle-25"))
    eagle = make_rule("eagle-1")
    return [("vanilla AR", None, None, chain), ("eagle-1", drafter, eagle, chain),
            ("lantern++", drafter, make_rule("lantern++", k=5, lam=3.0, neighbours=neighbours), chain),
            ("cool-sd delta 2", drafter, make_rule("cool-sd", delta=2.0), chain),
            ("eagle-1 tree-25", drafter, eagle, tree)]


def timed_runs(target, drafter, rule, cond, sampling, config, num_tokens: int, images: int,
               device) -> tuple[float, int, int, int]:
    """`images` decodes (seeds 0..images-1) -> (wall seconds, tokens, target forwards, draft forwards), summed."""
    wall, tokens, n_t, n_d = 0.0, 0, 0, 0
    for seed in range(images):
        sync(device)
        t0 = time.perf_counter()
        res = run(target, drafter, rule, cond=cond, num_tokens=num_tokens, sampling=sampling, config=config, seed=seed)
        sync(device)
        wall += time.perf_counter() - t0
        tokens, n_t, n_d = tokens + len(res.tokens), n_t + res.target_forwards, n_d + res.draft_forwards
    return wall, tokens, n_t, n_d


def throughput(target, drafter, neighbours, cond, sampling, num_tokens, images, ms, device) -> list[dict]:
    """tokens/s per decoder over `images` seeds, and the share of wall time outside model calls
    (1 - forwards x per-call ms / wall: the host's own work, launches included)."""
    rows = []
    for name, d, rule, config in decoders(drafter, neighbours):
        wall, tokens, n_t, n_d = timed_runs(target, d, rule, cond, sampling, config, num_tokens, images, device)
        tree = isinstance(config.drafting, Tree)
        verify = ms["target_step"] if d is None else ms["verify_tree_26" if tree else f"verify_{DRAFT_LEN + 1}"]
        inside = (n_t * verify + n_d * ms["drafter_step"]) / 1000
        rows.append({"decoder": name, "tokens_per_s": tokens / wall, "seconds_per_image": wall / images,
                     "tau": tokens / n_t, "outside_model_share": max(0.0, 1 - inside / wall)})
    for r in rows:
        r["speedup_vs_ar"] = r["tokens_per_s"] / rows[0]["tokens_per_s"]
    return rows


def first_race_s(target, drafter, cond, sampling, num_tokens, device) -> tuple[float, float]:
    """(seconds to fork 3 lanes of handles, as the app does at start; wall seconds of one app-style race
    of vanilla, Eagle-1 and COOL-SD delta 2 on them)."""
    t0 = time.perf_counter()
    lanes = [fork_models(target, drafter) for _ in range(3)]
    rules = [None, make_rule("eagle-1"), make_rule("cool-sd", delta=2.0)]
    sync(device)
    fork_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    config = DecodeConfig(Chain(DRAFT_LEN))
    racers = [Racer(str(i), str(i), generate(t, d, r, cond=cond, num_tokens=num_tokens, sampling=sampling,
                                             config=config, seed=0), num_tokens)
              for i, ((t, d), r) in enumerate(zip(lanes, rules))]
    for _ in Race(racers):
        pass
    sync(device)
    return fork_s, time.perf_counter() - t0


def embedded_models(path: str, tiny: bool, device):
    """(target, drafter, neighbours, cond, sampling, num_tokens, load seconds incl. warm-up) on `path`."""
    t0 = time.perf_counter()
    if tiny:
        b = tiny_bundle(grid=(8, 8))
        prepare([b.target, b.drafter], path=path, rows=(2, 1))
    else:
        b = load_embedded(device=device, execution_path=path)
    sync(device)
    return b.target, b.drafter, b.neighbours, 3, b.default_sampling, b.num_tokens, time.perf_counter() - t0


def llamagen_models(path: str, tiny: bool, device):
    """(target, drafter, neighbours, caption, sampling, num_tokens, prepare seconds) of a random-weight
    LlamaGen (XL widths, bf16 on CUDA; `tiny`: a small one) on execution path `path`."""
    config = LlamaGenConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=128, caption_dim=32, cls_token_num=8, block_size=64) if tiny \
        else LlamaGenConfig()  # published GPT-XL T2I widths
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        target = LlamaGenT2I(config).to(dtype).eval()
        drafter = LlamaGenDrafter(LlamaGenConfig(**{**config.to_dict(), "num_hidden_layers": 1}), target)
        drafter = drafter.to(dtype).eval()
        target.caption.uncond.normal_()
        caption = torch.randn(config.cls_token_num, config.caption_dim)
        neighbours = neighbour_table(torch.randn(config.vocab_size, 8), k_max=10, normalise=True)
    t0 = time.perf_counter()
    prepare([target, drafter], path=path, rows=(2, 1))
    sync(device)
    sampling = dataclasses.replace(DEFAULT_SAMPLING, top_k=min(DEFAULT_SAMPLING.top_k, config.vocab_size))
    return target, drafter, neighbours, caption, sampling, config.block_size, time.perf_counter() - t0


def markdown(report: dict) -> str:
    lines = [f"# GPU check: {report['device']}, torch {report['torch']}", ""]
    for part in report["parts"]:
        lines += [f"## {part['model']}, path {part['path']}", ""]
        if "skipped" in part:
            lines += [f"skipped: {part['skipped']}", ""]
            continue
        lines += [f"load + warm-up {part['load_s']:.2f} s" + (f"; first race after load {part['first_race_s']:.2f} s"
                                                           if "first_race_s" in part else ""), ""]
        lines += ["| call | ms |", "|---|---|"] + [f"| {k} | {v:.3f} |" for k, v in part["call_ms"].items()] + [""]
        lines += ["| decoder | tokens/s | s/image | tau | speed-up | outside model calls |", "|---" * 6 + "|"]
        lines += [f"| {r['decoder']} | {r['tokens_per_s']:.1f} | {r['seconds_per_image']:.3f} | {r['tau']:.2f} | "
                  f"{r['speedup_vs_ar']:.2f}x | {100 * r['outside_model_share']:.0f} % |" for r in part["decoders"]]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coolsd.bench.gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny random models on CPU (checks the script)")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per per-call measurement")
    parser.add_argument("--images", type=int, default=1, help="images per decoder for tokens/s")
    parser.add_argument("--xl-tokens", type=int, default=128, help="tokens per LlamaGen image (256 = whole)")
    parser.add_argument("--models", default="embedded,llamagen", help="comma list: embedded, llamagen")
    parser.add_argument("--budget-s", type=float, default=330.0, help="skip parts that start after this")
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu_check_out"), help="folder for the outputs")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)
    fast = "cuda-graphs" if device.type == "cuda" else "static"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "draft_len": DRAFT_LEN, "tiny": args.tiny, "parts": [],
              "note": "LlamaGen weights are random: its tau and speed-ups say nothing about the trained model"}
    t_start = time.perf_counter()
    chosen = {m.strip() for m in args.models.split(",")}
    if not chosen <= {"embedded", "llamagen"}:
        parser.error(f"--models takes embedded and/or llamagen, got {args.models!r}")
    models = [("embedded", embedded_models), ("llamagen-xl" if not args.tiny else "llamagen-tiny", llamagen_models)]
    for model, build in [(m, b) for m, b in models if m.split("-")[0] in chosen]:
        for path in (fast, "eager"):  # fast first: its first race is the first thing after process start
            part = {"model": model, "path": path}
            report["parts"].append(part)
            if time.perf_counter() - t_start > args.budget_s:
                part["skipped"] = f"time budget of {args.budget_s:.0f} s spent"
                continue
            target = drafter = None
            try:
                target, drafter, neighbours, cond, sampling, num_tokens, load_s = build(path, args.tiny, device)
                part["load_s"] = load_s
                if model == "embedded":  # the app's first visitor: a race right after the model loaded
                    part["fork_3_lanes_s"], part["first_race_s"] = first_race_s(target, drafter, cond, sampling,
                                                                                num_tokens, device)
                part["call_ms"] = call_ms(target, drafter, cond, num_tokens, args.repeats, device)
                tokens = num_tokens if model == "embedded" else min(args.xl_tokens, num_tokens)
                part["decoders"] = throughput(target, drafter, neighbours, cond, sampling, tokens, args.images,
                                              part["call_ms"], device)
            except Exception as err:  # one failing part must not cost the others their numbers
                part["skipped"] = f"failed: {type(err).__name__}: {str(err)[:300]}"
                if args.tiny:
                    raise
            part["seconds"] = time.perf_counter() - t_start
            del target, drafter
            if device.type == "cuda":
                torch.cuda.empty_cache()
            (out / "gpu_check.json").write_text(json.dumps(report, indent=2))
            (out / "gpu_check.md").write_text(markdown(report))
            print(f"{model} {path}: done at {part['seconds']:.0f} s", flush=True)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2))
    (out / "gpu_check.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
