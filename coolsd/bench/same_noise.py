"""`python -m coolsd.bench.same_noise`: what same noise costs the lossless test, and how far each racer stays.

Decodes `--samples` (condition, seed) pairs of a shipped model (conditions spread over its classes) with vanilla
AR and five racers, under the default stream and under same noise (`DecodeConfig(noise="same")`,
`coolsd.decoding.noise`), at one draft length. Reports per racer and noise: tau, and under same noise the
share of positions where the racer's token equals vanilla AR's (lossless racers: 1 exactly). For Eagle-1 it also
reports the exact acceptance at depth 1 of both tests on the (p, q) rows its stream decodes met: the standard
test's sum min(p, q) and the coupled test's `coolsd.theory.coupling.race_agreement` (every `--row-every`-th
round; O(V^2) a row).

    python -m coolsd.bench.same_noise --model emoji --samples 40 --out assets/emoji/bench/same_noise.json
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from coolsd.bench.cli import load_bundle, machine
from coolsd.bench.delta_sweep import spread_conditions
from coolsd.decoding import variants
from coolsd.decoding.drafting import Chain
from coolsd.decoding.engine import DecodeConfig, run
from coolsd.theory.coupling import race_agreement, standard_agreement
from coolsd.util.jsonsafe import dumps

RACERS = ("eagle-1", "sjd", "cool-sd", "lantern++", "cool-sd-jacobi")


class DepthOneRows:
    """A rule that hands every call to `rule` and keeps (p_1, q_1) of every `every`-th chain test it runs."""

    def __init__(self, rule, every: int) -> None:
        self._rule, self._every, self._calls = rule, every, 0
        self.rows: list[tuple[torch.Tensor, torch.Tensor]] = []

    def chain_accept(self, p, q, x, draft_len):
        if self._calls % self._every == 0:
            self.rows.append((p[0].clone(), q[0].clone()))
        self._calls += 1
        return self._rule.chain_accept(p, q, x, draft_len)

    def __getattr__(self, name):
        return getattr(self._rule, name)


def compare(bundle, conditions: list[int], seeds: list[int], draft_len: int, row_every: int,
            progress: bool = True) -> dict:
    """The report's numbers (module docstring) over the (condition, seed) pairs."""
    rules = {key: variants.build(key, neighbours=bundle.neighbours) for key in RACERS}
    draftings = {key: variants.drafting(key, Chain(draft_len)) for key in RACERS}  # (no drafter: Jacobi)
    recorder = DepthOneRows(rules["eagle-1"], row_every)
    stats = {key: {"tau_stream": [], "tau_same": [], "same_as_vanilla": []} for key in rules}
    decode = dict(cond=None, num_tokens=bundle.num_tokens, sampling=bundle.default_sampling)
    for cond, seed in tqdm(list(zip(conditions, seeds)), desc="pairs", disable=not progress):
        decode["cond"] = cond
        vanilla = run(bundle.target, bundle.drafter, None, config=DecodeConfig(noise="same"), seed=seed,
                      **decode).tokens
        for key, rule in rules.items():
            stream_rule = recorder if key == "eagle-1" else rule
            stream = run(bundle.target, bundle.drafter, stream_rule, config=DecodeConfig(draftings[key]),
                         seed=seed, **decode)
            coupled = run(bundle.target, bundle.drafter, rule, config=DecodeConfig(draftings[key], noise="same"),
                          seed=seed, **decode)
            stats[key]["tau_stream"].append(stream.tau)
            stats[key]["tau_same"].append(coupled.tau)
            stats[key]["same_as_vanilla"].append(float((coupled.tokens == vanilla).double().mean()))
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    rows = recorder.rows  # one at a time: race_agreement holds a (V, V) matrix per row
    return {"racers": {key: {name: mean(v) for name, v in s.items()} for key, s in stats.items()},
            "eagle_depth1": {"rows": len(rows), "standard": mean([float(standard_agreement(p, q)) for p, q in rows]),
                             "coupled": mean([float(race_agreement(p, q)) for p, q in rows])}}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m coolsd.bench.same_noise", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("emoji", "mnist"), default="emoji")
    ap.add_argument("--samples", type=int, default=40, help="(condition, seed) pairs")
    ap.add_argument("--draft-len", type=int, default=Chain.draft_len, help="L, drafts per round")
    ap.add_argument("--row-every", type=int, default=8, help="keep Eagle-1's depth-1 rows of every n-th round")
    ap.add_argument("--out", type=Path, default=None, help="JSON file (default: print)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.samples < 1 or args.draft_len < 1 or args.row_every < 1:
        raise SystemExit("--samples, --draft-len and --row-every must be at least 1")
    torch.set_num_threads(1)
    device = torch.device("cpu")
    bench_args = argparse.Namespace(model="embedded" if args.model == "mnist" else args.model, model_dir=None,
                                    classifier=None, real_stats=None)
    bundle = load_bundle(bench_args, device)[0]
    names = bundle.conditions
    conditions = spread_conditions(len(names.classes), len(names.styles), args.samples)
    result = {"command": shlex.join(["python", "-m", "coolsd.bench.same_noise", *argv]),
              "machine": machine(device, 1), "date": datetime.date.today().isoformat(), "model": bundle.name,
              "samples": args.samples, "draft_len": args.draft_len,
              **compare(bundle, conditions, list(range(args.samples)), args.draft_len, args.row_every,
                        not args.quiet)}
    text = dumps(result, indent=1) + "\n"
    (args.out.write_text(text) if args.out else print(text, end=""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
