"""Where a round's time goes, by phase: model calls against the engine's host work around them.

    COOLSD_EXECUTION=fused OMP_NUM_THREADS=1 python tools/round_profile.py [--images 6] [--draft-len 2]
        [--passes 2] [--clock cpu|wall] [--json rows.json] [--stub]

Decodes a few emoji images with vanilla AR, Eagle-1, COOL-SD delta 2, LANTERN++ and SJD W 4 (the race's window) through
`coolsd.decoding.engine.run` (what the benchmark times), with the engine's functions wrapped by an exclusive-time
timer: each wrapped call's time, less the wrapped calls inside it, goes to its phase. Phases:

    target    the target's forwards and prefix step (the look-alike channel and the wrappers included)
    drafter   the drafter's forwards and prefix step
    probs     logits -> processed probabilities (CFG, temperature, top-k, top-p, softmax)
    draws     every random draw (drafts, uniforms of the test, the last token)
    rule      the rule's acceptance test (a_i)
    residual  the rule's residual (where to resample after a rejection)
    events    RoundEvent, round detail, omegas
    commit    commit, the drafter's catch-up feed outside its forward, cache crops
    glue      the rest of a round: the round function's own lines (stacking, packing, the one transfer)
    loop      outside rounds: the engine's generator and DecodeResult (wall less the rounds)

Prints ms per round by phase and its share of the round (time per image / rounds; vanilla AR: a round is one
token), on this thread's CPU time by default (`--clock cpu`: robust on a shared machine; `--clock wall`: what a
user waits). The timer's own cost (a few microseconds a wrapped call, two clock reads) lands in the caller's
phase, so the phases over-state the host side; the last two columns take it out: an untimed pass's round less
the model phase. Names the engine does not have are skipped, so the same tool profiles the engine before the
53's changes (LEGACY_TARGETS) and after. `--stub` runs the same decoders on stub models (stored logits of the
emoji model's shapes): the round is then the engine's host work alone, free of the models' noise.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import json
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import Tensor

PHASES = ("target", "drafter", "probs", "draws", "rule", "residual", "events", "commit", "glue", "loop")
MODELS = ("target", "drafter")  # the model phases; every other phase is host work

# (module, attribute path, phase): what gets wrapped; a missing name is skipped (the code moved on)
TARGETS = [
    ("coolsd.decoding.round", "Session.probs", "probs"),
    ("coolsd.decoding.sampling", "SamplingConfig.probs", "probs"),
    ("coolsd.decoding.round", "Session.uniforms", "draws"),
    ("coolsd.decoding.round", "Session.draw", "draws"),
    ("coolsd.decoding.round", "Session.accepted", "rule"),
    ("coolsd.decoding.jacobi", "JacobiDrafts.draws", "draws"),
    ("coolsd.decoding.rules", "Rule.chain_accept", "rule"),
    ("coolsd.decoding.rules", "LanternPPRule.chain_accept", "rule"),
    ("coolsd.decoding.rules", "Rule.accept_prob", "rule"),
    ("coolsd.decoding.rules", "LanternPPRule.accept_prob", "rule"),
    ("coolsd.decoding.rules", "Rule.residual", "residual"),
    ("coolsd.decoding.rules", "EagleRule.residual", "residual"),
    ("coolsd.decoding.rules", "CoolSDRule.residual", "residual"),
    ("coolsd.decoding.rules", "LanternPPRule.residual", "residual"),
    ("coolsd.decoding.round", "make_event", "events"),
    ("coolsd.decoding.chain", "make_event", "events"),
    ("coolsd.decoding.chain", "round_detail", "events"),
    ("coolsd.decoding.chain", "nan_after", "events"),
    ("coolsd.decoding.round", "Session.omegas", "events"),
    ("coolsd.decoding.round", "Session.commit", "commit"),
    ("coolsd.decoding.round", "Session.ingest_pending", "commit"),
    ("coolsd.decoding.engine", "chain_round", "glue"),
    ("coolsd.decoding.chain", "draft_chain", "glue"),
    ("coolsd.decoding.round", "Session.first", "glue"),
    ("coolsd.decoding.jacobi", "JacobiDrafts.round", "glue"),
]
# the same phases in the engine before its current host path (multinomial draws, judge), for before/after tables
LEGACY_TARGETS = [
    ("coolsd.decoding.round", "sample", "draws"),
    ("coolsd.decoding.chain", "sample", "draws"),
    ("coolsd.decoding.jacobi", "sample", "draws"),
    ("torch", "rand", "draws"),
    ("coolsd.decoding.rules", "Rule.judge", "rule"),
    ("coolsd.decoding.rules", "EagleRule.accept_prob", "rule"),
    ("coolsd.decoding.rules", "g_star", "residual"),
    ("coolsd.decoding.rules", "lossless_residual", "residual"),
    ("coolsd.decoding.chain", "omega_values", "events"),
    ("coolsd.decoding.round", "round_detail", "events"),
]
MODEL_CALLS = ("forward", "start", "crop")  # each model's calls, wrapped per instance (crop: the commit phase)


# cpu: this thread's CPU time (a busy machine's other processes do not inflate it); wall: what a user waits
CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}


class PhaseTimer:
    """Exclusive seconds per phase: a wrapped call's time less that of the wrapped calls it makes."""

    def __init__(self, clock=time.thread_time) -> None:
        self.clock = clock
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self._inner = [0.0]  # per open call: seconds spent in wrapped calls below it

    def wrap(self, fn, phase: str):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            self._inner.append(0.0)
            t0 = self.clock()
            try:
                return fn(*args, **kwargs)
            finally:
                total = self.clock() - t0
                inner = self._inner.pop()
                self.seconds[phase] += total - inner
                self._inner[-1] += total
        return timed


def _resolve(module: str, path: str):
    owner = importlib.import_module(module)
    *parents, name = path.split(".")
    for part in parents:
        owner = getattr(owner, part, None)
        if owner is None:
            return None, name
    return (owner, name) if name in vars(owner) else (None, name)


def install(timer: PhaseTimer, models: dict) -> list:
    """Wrap every TARGET present and the calls of `models` (phase -> model); returns what `uninstall` restores."""
    undo = []
    for module, path, phase in TARGETS + LEGACY_TARGETS:
        owner, name = _resolve(module, path)
        if owner is not None:
            undo.append((owner, name, vars(owner)[name]))
            setattr(owner, name, timer.wrap(vars(owner)[name], phase))
    for model_phase, model in models.items():
        for name in MODEL_CALLS:
            undo.append((model, name, None))
            setattr(model, name, timer.wrap(getattr(model, name), "commit" if name == "crop" else model_phase))
    return undo


def uninstall(undo: list) -> None:
    for owner, name, old in reversed(undo):
        if old is None:
            delattr(owner, name)  # the instance attribute shadowing the class's method
        else:
            setattr(owner, name, old)


def decoders(bundle, draft_len: int) -> dict:
    """name -> (rule, DecodeConfig): the drafter's chain of `draft_len`, SJD on Jacobi drafts of window 4."""
    from coolsd.decoding import variants
    from coolsd.decoding.drafting import Chain
    from coolsd.decoding.engine import DecodeConfig
    chain = DecodeConfig(Chain(draft_len))
    return {"vanilla AR": (None, chain), f"Eagle-1 L{draft_len}": (variants.build("eagle-1"), chain),
            f"COOL-SD d2 L{draft_len}": (variants.build("cool-sd", {"delta": 2.0}), chain),
            f"LANTERN++ k10 l20 L{draft_len}": (variants.build("lantern++", {"k": 10, "lam": 20}, bundle.neighbours),
                                               chain),
            "SJD W4": (variants.build("sjd"), DecodeConfig(variants.drafting("sjd", chain.drafting, {"window": 4})))}


class StubModel:
    """A model whose calls cost next to nothing: its logits (1, n, V) float32 are stored rows, one per position,
    the drafter's the target's plus noise (tau about 2.4 at L = 2), so a round's time is the engine's host work."""

    device = torch.device("cpu")

    def __init__(self, logits: Tensor, features: int = 256) -> None:
        self.logits, self.features, self.length = logits, features, 0

    def start(self, cond, guidance: bool):
        self.length = 1
        return self._step(0, 1)

    def forward(self, ids: Tensor, *args):
        positions = args[-2] if len(args) == 3 else args[-1]  # target (positions, mask); drafter (hidden, positions)
        self.length += ids.shape[0]
        return self._step(int(positions[0]), ids.shape[0])

    def crop(self, length: int, keep: Tensor | None = None) -> None:
        self.length = length

    def _step(self, i: int, n: int):
        from coolsd.decoding.protocol import ModelStep
        return ModelStep(self.logits[None, i : i + n], torch.zeros(1, n, self.features))


def stub_bundle(vocab: int = 2048, tokens: int = 256) -> SimpleNamespace:
    """The emoji model's shapes (V 2048, 256 tokens, default sampling) on stub models, and a LANTERN++ table."""
    from coolsd.decoding.neighbours import neighbour_table
    from coolsd.decoding.sampling import SamplingConfig
    gen = torch.Generator().manual_seed(0)
    logits = 4 * torch.randn(tokens + 16, vocab, generator=gen)
    drafts = logits + 0.7 * torch.randn(tokens + 16, vocab, generator=gen)
    return SimpleNamespace(target=StubModel(logits), drafter=StubModel(drafts), num_tokens=tokens,
                           default_sampling=SamplingConfig(), path="stub models (host work only)",
                           neighbours=neighbour_table(torch.randn(vocab, 4, generator=gen)))


def decode_all(bundle, rule, config, images: list[tuple[int, int]], clock) -> tuple[float, int]:
    """(seconds on `clock`, rounds) over `images` ((class, seed) pairs) with `rule` on `config` (a DecodeConfig),
    gc off as the benchmark runs."""
    from coolsd.decoding.engine import run
    seconds, rounds = 0.0, 0
    for cls, seed in images:
        gc.collect()
        gc.disable()
        t0 = clock()
        result = run(bundle.target, bundle.drafter, rule, cond=cls, num_tokens=bundle.num_tokens,
                     sampling=bundle.default_sampling, config=config, seed=seed)
        seconds += clock() - t0
        gc.enable()
        rounds += result.rounds
    return seconds, rounds


def timed_pass(bundle, rule, config, images: list[tuple[int, int]], clock) -> tuple[dict, float, int]:
    """One pass over `images` with the timer installed: (seconds by phase, seconds in all, rounds)."""
    timer = PhaseTimer(clock)
    undo = install(timer, {"target": bundle.target, "drafter": bundle.drafter})
    try:
        total, rounds = decode_all(bundle, rule, config, images, clock)
    finally:
        uninstall(undo)
    timer.seconds["loop"] += total - sum(timer.seconds.values())  # unwrapped time: the engine loop outside rounds
    return timer.seconds, total, rounds


def profile(bundle, name: str, rule, config, images: list[tuple[int, int]], clock, passes: int) -> dict:
    """One decoder's row from the fastest of `passes` timed passes: ms per round by phase, rounds per image, ms per
    image with the timer and without it (the fastest untimed pass)."""
    decode_all(bundle, rule, config, images[:1], clock)  # warm-up
    plain = min(decode_all(bundle, rule, config, images, clock)[0] for _ in range(passes))
    seconds, total, rounds = min((timed_pass(bundle, rule, config, images, clock) for _ in range(passes)),
                                 key=lambda r: r[1])
    return {"name": name, "rounds": rounds / len(images), "img_ms": 1e3 * total / len(images),
            "plain_ms": 1e3 * plain / len(images), "ms": {k: 1e3 * v / rounds for k, v in seconds.items()},
            "round_ms": 1e3 * total / rounds}


def table(rows: list[dict]) -> str:
    """Markdown: ms per round (share of the timed round) by phase; host = the round less its model calls, timed and
    from the untimed pass (untimed round less the timed model phase: the wrappers' own cost taken out)."""
    head = ("| decoder | rounds / img | " + " | ".join(PHASES)
            + " | host (timed) | round ms (timed) | host, untimed | round ms, untimed |")
    lines = [head, "|" + "---|" * (len(PHASES) + 6)]
    for r in rows:
        total, model = r["round_ms"], sum(r["ms"][k] for k in MODELS)
        plain = r["plain_ms"] / r["rounds"]
        cells = [f"{r['ms'][k]:.3f} ({100 * r['ms'][k] / total:.0f}%)" for k in PHASES]
        lines.append(f"| {r['name']} | {r['rounds']:.0f} | " + " | ".join(cells)
                     + f" | {total - model:.3f} ({100 * (total - model) / total:.0f}%) | {total:.3f} "
                       f"| {plain - model:.3f} ({100 * (plain - model) / plain:.0f}%) | {plain:.3f} |")
    return "\n".join(lines)


def cpu_name() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "?")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=6, help="images per decoder (classes 30, 37, ... x seeds 0, 1)")
    parser.add_argument("--draft-len", type=int, default=2)
    parser.add_argument("--passes", type=int, default=2, help="timed passes per decoder; the fastest is kept")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--stub", action="store_true", help="stub models (stored logits): the host work alone")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.stub:
        bundle = stub_bundle()
    else:
        from coolsd.models.emoji import load_emoji
        bundle = load_emoji(device="cpu")
    images = [(30 + 7 * (i // 2), i % 2) for i in range(args.images)]
    rows = [profile(bundle, name, rule, config, images, CLOCKS[args.clock], args.passes)
            for name, (rule, config) in decoders(bundle, args.draft_len).items()]
    print(f"CPU: {cpu_name()}, torch threads 1, path {getattr(bundle, 'path', '?')}, {args.images} images each, "
          f"{args.clock} clock, ms per round (share of the round)\n")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu_name(), "clock": args.clock, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
