"""Summarise a mutmut run: kill rate per module and every surviving mutant with its diff and the reason it lives.

Usage (after `nice -n 10 env OMP_NUM_THREADS=1 .venv/bin/mutmut run --max-children 2`, see docs/testing.md):
    .venv/bin/python tools/mutation_report.py [--out tests/MUTANTS.md]

Reasons come from REASONS (one per mutant name, written by hand after reading the mutant, and given only
while the mutant still changes the line it was read on: numbers shift when a function changes) or, failing
that, from PATTERNS (a regex on the mutant's diff for families of mutants that are equivalent for one
stated reason). A survivor with neither is listed as "not explained": read it, then kill it with a
test or add its reason here.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTMUT = [str(ROOT / ".venv" / "bin" / "mutmut")]

# Families of equivalent mutants, recognised from the changed line ("-" old, "+" new).
PATTERNS: list[tuple[str, str]] = [
    (r"device=None|\.to\(None\)|_table\(None\)|dev = None|<device argument removed>",
     "E1 device: the tests run on the CPU, where device=None (or no device argument, or .to(None)) is the CPU "
     "too; device placement is checked on a GPU by coolsd/bench/gpu.py"),
    (r"np\.asarray\((mu1|mu2), (None)?\)",
     "E2 dtype promotion: the mean is only used in (mu1 - mu2) ** 2, promoted to float64 by the other float64 "
     "operand"),
    (r"rowvar=None",
     "E2 np.cov(rowvar=None): None is falsy, the same as rowvar=False"),
    (r"argmax\(\+1\)|reshape\(\+1\)|shape\[\+1\]",
     "E3 index +1 == -1 here: the tensor has exactly two dims (or one element), so dim 1 is the last dim"),
    (r"np\.asarray\(features, (dtype=None)?\)",
     "E2 dtype: fid_from_features -> feature_stats converts the resampled features to float64 anyway"),
    (r"batch_size: int = 65|classifier_outputs\(classifier, images01, \)",
     "E4 batching: the default chunk size of the classifier forward only changes float rounding"),
    (r"super\(\)\.residual\(p, q, (None|x), (None|depth), (None|draft_len)\)|"
     r"accept_prob\(p_rows, q_rows, every, (None|depth), (None|draft_len)\)",
     "E5 LANTERN(++)'s acceptance depends on neither depth nor draft length, and Rule.residual (G*) ignores x"),
    (r"\.clamp\(None, len\(w\) - 1\)",
     "E6 depths are 1-based (depth - 1 >= 0): the lower clamp never acts"),
    (r"high: float = 1001\.0|iters: int = 61|target_probs is not None|target_probs = None|"
     r"draft_len, (None)?\)(\.tau)?|tau <= target_tau",
     "E7 match_tau: target_probs only caches sequence_probs(target); the bisection has converged to the same "
     "float (60 halvings of a 1e6 bracket); ties of tau have probability 0"),
    (r"generator=gen, device=q\.device, (dtype=None)?\)\.clamp_min|masked_fill\(q < 0|"
     r"topk\(keys, min\(n, int\(\(q > 0\)\.sum\(\)\)\), \)",
     "E8 draws without replacement: -inf keys already exclude q == 0 (log 0); topk's default dim is -1; float32 "
     "uniforms give the same Gumbel-top-k law (another random stream, so no seed-level test can tell)"),
    (r"key=lambda p: \(len\(p\), p\)\)|sorted\(\(p for p in paths if len\(p\) <= depth_max\), (key=None)?\)",
     "E9 tree order: plain tuple order also puts every parent before its children and siblings in rank order, "
     "the only orders the round relies on"),
    (r"for d in range\(depth_max \+ 1\)|range\(1, depth_max \+ 2\)|for k in range\(len\(p\) \+ 1\)|"
     r"range\(1, len\(p\) \+ 2\)",
     "E10 loop bounds that only add a level with no nodes, or set a mask entry that is already set (the root "
     "slot, or the node's own slot)"),
    (r"children\.get\((parent|node), (None)?\)",
     "E11 every node asked for is in `children` (the root and every path have an entry)"),
    (r"if not feed and d == depth_max:|^\+\s+break$",
     "E12 the deepest level never has children to feed, and a level with no fed node has no deeper nodes: "
     "skipping it or stopping there is the same"),
    (r"logits\[:, j : j \+ 2\]\)\[0\]",
     "E13 row 0 of the rows j..j+1 is row j"),
    (r"for p in (feed|nodes)\], (dtype=None, )?(device=s\.device)?\)|for k in accepted\], (dtype=None, )?"
     r"(device=s\.device)?\)|torch\.tensor\(tokens, (dtype=None, )?(device=s\.device)?\)",
     "E14 a tensor of Python ints is int64 without dtype=torch.long"),
    (r"keep if \(len\(accepted\)\) or True else None",
     "E15 an empty `keep` list keeps no extra slot, the same as keep=None"),
    (r"tested_probs=tested_a, draft_forwards=n_calls\)",
     "E16 make_event's default target_forwards is 1, the value the tree round passes"),
    (r"dtype=p\.dtype\)\) < a|\(u < a\)",
     "E17 u < a versus u <= a: u is continuous, P(u == a) = 0"),
    (r"u = torch\.rand\(n_draft, generator=s\.gen, device=dev, (dtype=None)?\)",
     "E8 float32 uniforms against a: the same Bernoulli(a) to float32 resolution (another random stream)"),
    (r"a = torch\.zeros\(0, (dtype=None, )?device=dev\)|n = torch\.zeros\(\(\), (dtype=None, )?device=dev\)|"
     r"\]\)\.to\(None\)",
     "E18 the round's outcome travels as one float tensor: token ids and counts below 2**24 are exact in float32 "
     "and float64 alike (V = 16384 at most)"),
    (r"a = torch\.zeros\(1, dtype=p\.dtype, device=dev\)|packed\[2 : 3 \+ n_draft\]",
     "E19 an extra packed value that is never read (no depth is tested without drafts; drafts[:n] with n <= L)"),
    (r"torch\.cat\(self\.pending_hidden, (dim=2)?\)",
     "E20 pending features hold one chunk per round (ingested every round that drafts): a cat of one tensor "
     "along any dim is that tensor"),
    (r"make_generator\((seed|0), (None)?\)",
     "E1 device: the generator's device defaults to the CPU, the test models' device"),
    (r"^\+\s+if n_draft > 1:$",
     "E21 with one draft the drafter never read it (it is sampled from the ingest call's last row), so cropping "
     "the drafter back to t is a no-op exactly when n_draft == 1"),
    (r"^\+\s+(tested_depths=walk\.tested_d, tested_probs=walk\.tested_a, )?"
     r"draft_forwards=(n_draft|tree\.calls|n_draft, detail=detail)\)",
     "E16 make_event's default target_forwards is 1, the value a chain or tree round passes"),
    (r"generator=s\.gen, device=s\.device, (dtype=None)?\)\) <= a",
     "E8 a float32 uniform against a: the same Bernoulli(a) to float32 resolution (another random stream)"),
    (r"if feed or d < depth_max:|if feed and d <= depth_max:",
     "E26 tree levels: every level above the deepest has a node with children (a node's q always has mass), "
     "and the deepest has none, so `feed` is non-empty exactly when d < depth_max"),
    (r"keep = torch\.tensor\(\[old \+ row_of\[k\] for k in walk\.accepted\], (dtype=None, )?device=s\.device\)|"
     r"s\.target\.crop\(old \+ 1, keep if \(walk\.accepted\) or True else None\)",
     "E27 crop keeps: torch infers int64 from Python ints, and crop treats an empty `keep` (of any dtype) as None"),
    (r"^\+\s+q = u = \"\"|^\+\s+rows = None$",
     "E29 a round without drafts (vanilla AR, or no room left): round_detail reads p only, never q, u or rows"),
    (r"self\.detail = (None|True)  # True: every chain round",
     "E25 Session's first values are overwritten before use: decode sets `detail` from its config before any "
     "round"),
    (r"tokens=self\.committed\[:2\], n_accepted=0",
     "E25 Session's first values are overwritten before use: in round 0 `committed` holds exactly one token, "
     "so [:2] == [:1]"),
    (r"detail = round_detail\(p, None, none, none\.double\(\), None, \[\], None, 0, int\(y\)\)",
     "E29 a round without drafts (vanilla AR, or no room left): round_detail reads p only, never q, u or rows"),
    (r"if \(s(elf)?\.detail\) or True else None",
     "E30 a RoundDetail made when none was asked for: it only costs time (the race's events are recorded "
     "without it, and nothing else reads it)"),
    (r"p = self\.probs\(step\.logits\)\[-2:\]|none = p\[:0, 1\]\.long\(\)",
     "E25 round 0: the prefix step of the test models returns one row (so [-2:] == [-1:]), and an empty slice "
     "of any column is the same empty tensor"),
    (r"return t\.detach\(\)\.to\((None, )?torch\.float64\)",
     "E1 device: the tests run on the CPU, where .to(None) or no device is the CPU too"),
    (r'return t\.detach\(\)\.to\("cpu", (None)?\)',
     "E2 dtype: Session.probs processes the logits in float64, so every row reaching round_detail is float64 "
     "already"),
    (r"p_draft=host\(pick\(p\[:length\], x\)\) if \(length\) or True else empty",
     "E29 a round without drafts: pick(p[:0], x) is an empty float64 row, the same as `empty`"),
]

# Reasons read by hand for single mutants (30 Nov 2026).
_R1 = ('E22 `oracle.exact` bookkeeping that only touches empty or zero-mass entries: an extra round-start '
      'slot is never written or read')
_R2 = ('E22 `oracle.exact` bookkeeping that only touches empty or zero-mass entries: starts[0] is empty (add '
      'never sees the empty prefix), so looping over it does nothing')
_R3 = ('E22 `oracle.exact` bookkeeping that only touches empty or zero-mass entries: `>= 0` also follows '
      'zero-mass branches, which add 0.0 to every sum (negative rounding residues stay excluded)')
_R4 = ('E23 a resampled token ends a round at length <= T - 1 (depth <= n_draft <= T - length - 1), so add() '
      'keeps it in starts[] and never reads its dist index')
_R5 = ('E24 `target_probs` is a cache of sequence_probs(target): recomputing it gives the same tensor (only '
      'time differs)')
_R6 = ("E25 Session's first values are overwritten before use: round 0 commits token 0 (setting last_id) "
      'before any round reads last_id')
_R7 = ("E25 Session's first values are overwritten before use: in round 0 `committed` holds exactly one "
      'token, so [:2] == [:1]')
_R8 = ('E1 device: the tests run on the CPU, where device=None (or no device argument, or .to(None)) is the '
      'CPU too; device placement is checked on a GPU by coolsd/bench/gpu.py')
# name -> (reason, the mutated line it was read on): mutant numbers shift when their function changes, so a
# hand reason is only given while the mutant's "+" line still contains that text (else: not explained).
REASONS: dict[str, tuple[str, str]] = {
    'coolsd.theory.oracle.x_exact__mutmut_10': (_R1, "for _ in range(t_max + 2)]"),
    'coolsd.theory.oracle.x_exact__mutmut_139': (_R2, "for length in range(t_max):"),
    'coolsd.theory.oracle.x_exact__mutmut_97': (_R3, "if accepted[y] >= 0:"),
    'coolsd.theory.oracle.x_exact__mutmut_115': (_R3, "if resampled[y] >= 0:"),
    'coolsd.theory.oracle.x_exact__mutmut_118': (_R4, "add(prefix + (y,), None, mass * resampled[y])"),
    'coolsd.theory.oracle.x_exact__mutmut_124': (_R4, "add(prefix + (y,), index * v - y, mass * resampled[y])"),
    'coolsd.theory.oracle.x_exact__mutmut_125': (_R4, "add(prefix + (y,), index / v + y, mass * resampled[y])"),
    'coolsd.theory.oracle.x_exact__mutmut_179': (_R5, "if (target_probs is None) or True else target_probs"),
    'coolsd.decoding.round.xǁSessionǁ__init____mutmut_6': (_R6, 'self.last_id: Tensor | None = ""'),
    'coolsd.decoding.round.xǁSessionǁ__init____mutmut_3': (_R8, "self.device = None"),
}


def mutmut(*args: str) -> str:
    return subprocess.run(MUTMUT + list(args), cwd=ROOT, capture_output=True, text=True, timeout=600).stdout


def diff_of(name: str) -> str:
    lines = [line for line in mutmut("show", name).splitlines() if line.startswith(("- ", "+ ", "-\t", "+\t"))
             or (line[:1] in "+-" and not line.startswith(("+++", "---")))]
    return "\n".join(lines)


GPU_ONLY = "G1 accelerator-only branch of round.sample (inverse CDF without a host sync): the CPU test machine " \
    "takes torch.multinomial; coolsd/bench/gpu.py runs this branch on a GPU"


def reason_for(name: str, diff: str) -> str | None:
    added = "\n".join(line for line in diff.splitlines() if line.startswith("+"))
    if name in REASONS and REASONS[name][1] in added:
        return REASONS[name][0]
    if name.startswith("coolsd.decoding.round.x_sample__") and "multinomial" not in diff and "device.type" not in diff:
        return GPU_ONLY
    removed = "\n".join(line for line in diff.splitlines() if line.startswith("-"))
    without_device = re.sub(r"device=[\w.]+(, )?", "", removed[1:]).replace(" ", "").replace(",)", ")")
    if "device=" in removed and without_device == added[1:].replace(" ", "").replace(",)", ")"):
        added += "\n<device argument removed>"
    for pattern, reason in PATTERNS:
        if re.search(pattern, added, flags=re.M):
            return reason
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "MUTANTS.md")
    args = parser.parse_args(argv)
    status: dict[str, str] = {}
    for line in mutmut("results", "--all", "true").splitlines():
        if ":" in line:
            name, _, verdict = line.strip().rpartition(": ")
            status[name] = verdict
    if not status:
        print("no mutmut results: run `mutmut run` first", file=sys.stderr)
        return 1
    by_module: dict[str, Counter] = defaultdict(Counter)
    for name, verdict in status.items():
        by_module[name.split(".x")[0]][verdict] += 1
    total = Counter(status.values())
    checked = total["killed"] + total["survived"] + total["timeout"]
    lines = ["# Mutation testing: the survivors", "",
             "Made by `tools/mutation_report.py` from the last `mutmut run` (docs/testing.md).", "",
             "| module | mutants | killed | timeout | survived | not checked | kill rate (of checked) |",
             "|---|---|---|---|---|---|---|"]
    for module, c in sorted(by_module.items()):
        done = c["killed"] + c["survived"] + c["timeout"]
        rate = f"{100 * (c['killed'] + c['timeout']) / done:.1f} %" if done else "-"
        lines.append(f"| {module} | {sum(c.values())} | {c['killed']} | {c['timeout']} | {c['survived']} | "
                     f"{c['not checked']} | {rate} |")
    rate = 100 * (total["killed"] + total["timeout"]) / checked if checked else 0.0
    lines += [f"| **all** | {sum(total.values())} | {total['killed']} | {total['timeout']} | {total['survived']} | "
              f"{total['not checked']} | **{rate:.1f} %** |", ""]
    survivors = sorted(n for n, v in status.items() if v == "survived")
    unexplained = 0
    groups: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for name in survivors:
        diff = diff_of(name)
        reason = reason_for(name, diff)
        unexplained += reason is None
        groups[reason or "NOT EXPLAINED"].append((name, diff))
    lines += [f"{len(survivors)} survivors, {unexplained} not explained.", ""]
    for reason, items in sorted(groups.items(), key=lambda kv: (kv[0] != "NOT EXPLAINED", kv[0])):
        lines += [f"## {reason}", ""]
        for name, diff in items:
            lines += [f"- `{name}`", "", "```diff", diff, "```", ""]
    args.out.write_text("\n".join(lines))
    print(f"kill rate {rate:.1f} % of {checked} checked mutants ({total['not checked']} not checked); "
          f"{len(survivors)} survivors, {unexplained} not explained -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
