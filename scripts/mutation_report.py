"""Summarise a mutmut run: kill rate per module and every surviving mutant with its diff and the reason it lives.

Usage (after `nice -n 10 env OMP_NUM_THREADS=1 .venv/bin/mutmut run --max-children 2`, see README, Testing):
    .venv/bin/python scripts/mutation_report.py [--out tests/MUTANTS.md]

Reasons come from REASONS (one per mutant name, written by hand after reading the mutant) or, failing
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
     "too; device placement is checked on a GPU by scripts/gpu_check.py"),
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
    (r"dtype=p\.dtype\)\) < a",
     "E17 u < a versus u <= a: u is continuous, P(u == a) = 0"),
    (r"generator=s\.gen, device=s\.device, (dtype=None)?\)\) <= a",
     "E8 a float32 uniform against a: the same Bernoulli(a) to float32 resolution (another random stream)"),
]

REASONS: dict[str, str] = {}


def mutmut(*args: str) -> str:
    return subprocess.run(MUTMUT + list(args), cwd=ROOT, capture_output=True, text=True, timeout=600).stdout


def diff_of(name: str) -> str:
    lines = [line for line in mutmut("show", name).splitlines() if line.startswith(("- ", "+ ", "-\t", "+\t"))
             or (line[:1] in "+-" and not line.startswith(("+++", "---")))]
    return "\n".join(lines)


def reason_for(name: str, diff: str) -> str | None:
    if name in REASONS:
        return REASONS[name]
    added = "\n".join(line for line in diff.splitlines() if line.startswith("+"))
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
             "Made by `scripts/mutation_report.py` from the last `mutmut run` (README, Testing).", "",
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
