"""Plant known bugs one at a time in a scratch copy of the repository and check that the fast tests catch each.

Usage: nice -n 10 env OMP_NUM_THREADS=1 .venv/bin/python tools/planted_bugs.py [--only NAME] [--keep] [--dry-run]

Each bug is a text replacement in one file (it must match exactly once, so a refactor that moves the
code makes the script say so instead of silently planting nothing). For each, the script copies the
working tree (tracked and untracked, not ignored files) to a temporary folder, plants the bug, runs
the tests named for it with `pytest -x -q -m "not statistical"`, and reports CAUGHT (pytest failed, or
could not even import coolsd because of the bug: a bound check that every module-level config goes through)
or MISSED. Exit status 1 if any bug is missed or cannot be planted. `--only TEXT` plants the bugs whose
name contains TEXT (e.g. "sessions:"), `--keep` keeps the scratch copies, and `--dry-run` only checks that
every bug's text still occurs once (after a refactor). To add a bug: append a Bug to BUGS (name, file, the exact
text, its replacement, the test files that must catch it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Bug:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


FAST = ("tests/theory/test_oracle.py", "tests/decoding/test_engine.py", "tests/decoding/test_tree.py",
        "tests/decoding/test_rules.py")
MICROSCOPE = "tests/compare/test_microscope_view.py"
COST = "tests/compare/test_cost_acceptance.py"
TIMING = "tests/models/test_timing.py"
STRENGTH = "tests/decoding/test_variant_strength.py"
RULE_OPTIONS = "tests/decoding/test_rule_options.py"  # a variant's options are its rule's fields
RULE_SETTINGS = "tests/app/test_rule_settings.py"  # the race's flat rule settings -> each rule's options
CHECKS = "tests/util/test_checks.py"
FLOOR = "tests/decoding/test_cool_floor.py"
APP_GAPS = "tests/app/test_planted_gaps.py"  # session cap at launch, share-link booleans, the picker's first load
EMOJI_DATA = "tests/train/test_emoji_data.py"  # the emoji data pipeline: class mapping, held-out split
TRAIN = "tests/train/test_train.py"  # training stages: warm start by name, drafter rows without guidance
EMOJI_EVAL = "tests/train/test_emoji_eval.py"  # recognisability and the batched VQ decode
PATCH_VQ = "tests/models/test_patch_vq.py"  # the local tokenizer and its k-means codebook
SESSIONS = "tests/app/test_sessions.py"  # what the server keeps per visitor
BUGS = [
    Bug("oracle resamples every rejection from token 0's residual", "coolsd/theory/oracle.py",
        "    every = torch.arange(v)\n", "    every = torch.zeros(v, dtype=torch.long)\n",
        ("tests/theory/test_oracle.py",)),
    Bug("oracle leaves round 0 out of the expected rounds", "coolsd/theory/oracle.py",
        'acc = {"rounds": 1.0, "bound": 0.0}', 'acc = {"rounds": 0.0, "bound": 0.0}', ("tests/theory/test_oracle.py",)),
    Bug("FID covariance with the biased estimator", "coolsd/compare/metrics.py",
        "np.cov(f, rowvar=False)", "np.cov(f, rowvar=False, bias=True)", ("tests/compare/test_metrics.py",)),
    Bug("classifier accuracy returned as sqrt(accuracy)", "coolsd/compare/metrics.py",
        ".double().mean())", ".double().mean().sqrt())", ("tests/compare/test_metrics.py",)),
    Bug("chain engine resamples Norm([p - q]_+) instead of G*", "coolsd/decoding/noise.py",
        "else rule.residual(p[n], q[n], x[n], self.s.depths[n], draft_len)",
        "else __import__('coolsd.decoding.rules').decoding.rules.lossless_residual(p[n], q[n])",
        ("tests/decoding/test_engine.py",)),
    Bug("LANTERN++ aggregates q's neighbour mass instead of p's", "coolsd/decoding/rules.py",
        "        p_tilde, _ = self._aggregate(p, x)\n",
        "        p_tilde = pick(p, x) + self._aggregate(q, x)[0] - pick(q, x)\n", ("tests/decoding/test_rules.py",)),
    Bug("tree tries later siblings against q without renormalising", "coolsd/decoding/tree.py",
        "q_norm = q / q.sum()", "q_norm = q", ("tests/decoding/test_tree.py",)),
    Bug("tree does not remove a rejected sibling from q", "coolsd/decoding/tree.py",
        "        q[tree.token_of[kid]] = 0.0", "        pass", ("tests/decoding/test_tree.py",)),
    Bug("tree tests acceptance with another draft length than its residual", "coolsd/decoding/tree.py",
        "a = float(s.rule.accept_prob(p, q_norm, x, depth, tree_depth))",
        "a = float(s.rule.accept_prob(p, q_norm, x, depth, tree_depth + 1))", ("tests/decoding/test_tree.py",)),
    Bug("tree resamples with the residual of depth 1 at every depth", "coolsd/decoding/tree.py",
        "p = s.rule.residual(p, q_norm, x, depth, tree_depth)",
        "p = s.rule.residual(p, q_norm, x, torch.ones_like(depth), tree_depth)", ("tests/decoding/test_tree.py",)),
    Bug("tree drafter reads its deeper nodes at the wrong position", "coolsd/decoding/tree.py",
        "pos = torch.full((len(feed),), t - 1 + d, device=s.device)",
        "pos = torch.full((len(feed),), t + d, device=s.device)", ("tests/decoding/test_tree.py",)),
    Bug("tree hands a child its own feature instead of its parent's", "coolsd/decoding/tree.py",
        "torch.cat([tree.hidden_of[p[:-1]] for p in feed], dim=1)",
        "torch.cat([tree.hidden_of[p[:-2]] for p in feed], dim=1)",
        ("tests/decoding/test_tree.py",)),
    Bug("chain drafts a round's first token from the drafter's second-to-last row", "coolsd/decoding/chain.py",
        "q_list.append(s.probs(out.logits[:, -1]))", "q_list.append(s.probs(out.logits[:, -2:])[0])",
        ("tests/decoding/test_engine.py",)),
    Bug("chain engine's bonus token from the last draft's p", "coolsd/decoding/noise.py",
        "row = p[n] if n == len(x) else", "row = p[n - 1] if n == len(x) else", ("tests/decoding/test_engine.py",)),
    Bug("COOL-SD depth counted from 0", "coolsd/decoding/rules.py",
        "torch.exp(-self.nu * depth.to(torch.float64) - self.mu_value(draft_len))",
        "torch.exp(-self.nu * (depth.to(torch.float64) - 1) - self.mu_value(draft_len))", FAST),
    Bug("G* without the acceptance: Norm([p - q]_+) for every rule", "coolsd/decoding/maths.py",
        "return normalise((p - q * a_all).clamp_min(0), p)", "return normalise((p - q).clamp_min(0), p)", FAST),
    Bug("normalise falls back to a uniform row", "coolsd/decoding/maths.py",
        "return torch.where(total > tiny, v / total.clamp_min(tiny), fallback)",
        "return torch.where(total > tiny, v / total.clamp_min(tiny), torch.full_like(v, 1 / v.shape[-1]))",
        ("tests/decoding/test_rules.py",)),
    Bug("oracle bound counts only depth 1", "coolsd/theory/oracle.py",
        "        acc[\"bound\"] += mass * step.tv\n", "        acc[\"bound\"] += mass * step.tv * (depth == 1)\n",
        ("tests/theory/test_oracle.py",)),
    Bug("Frechet distance without the cross term's factor 2", "coolsd/compare/metrics.py",
        "- 2 * np.sqrt(w).sum())", "- np.sqrt(w).sum())", ("tests/compare/test_metrics.py",)),
    # the microscope, cost model, timing, variants, checks and app serving, each with the test file that catches it
    Bug("microscope: the last accepted depth shown as not tested", "coolsd/compare/microscope.py",
        "ACCEPTED if i <= n_accepted else", "ACCEPTED if i < n_accepted else", (MICROSCOPE,)),
    Bug("microscope: grid cells divided by the row count", "coolsd/compare/microscope.py",
        "divmod(int(index), int(grid[1]))", "divmod(int(index), int(grid[0]))", (MICROSCOPE,)),
    Bug("microscope: a position past the last round goes one round past it", "coolsd/compare/microscope.py",
        "return len(events) - 1 if events", "return len(events) if events", (MICROSCOPE,)),
    Bug("microscope: the bonus named p_n instead of p_{n+1}", "coolsd/compare/microscope.py",
        'f"p_{n + 1} (bonus', 'f"p_{n} (bonus', (MICROSCOPE,)),
    Bug("microscope: a re-run defaults to seed 1", "coolsd/compare/trace.py",
        "    seed: int = 0\n", "    seed: int = 1\n", (MICROSCOPE, "tests/compare/test_trace_settings.py")),
    Bug("round detail keeps the top 9 tokens of each distribution", "coolsd/decoding/round.py",
        "TOP_TOKENS = 8", "TOP_TOKENS = 9", (MICROSCOPE,)),
    Bug("round detail records q(x) as p(x)", "coolsd/decoding/round.py",
        "p_draft=host(pick(p[:length], x))", "p_draft=host(pick(q, x))", (MICROSCOPE,)),
    Bug("cost model: a depth the race never reached counts as always accepted", "coolsd/compare/cost.py",
        "rate += [0.0] * (draft_len - len(rate))", "rate += [1.0] * (draft_len - len(rate))", (COST,)),
    Bug("cost model: a depth never tested (nan) counts as always accepted", "coolsd/compare/cost.py",
        "[0.0 if not math.isfinite(a) else a for a in rate]", "[1.0 if not math.isfinite(a) else a for a in rate]",
        (COST,)),
    Bug("cost model: the acceptance cut one depth short", "coolsd/compare/cost.py",
        "racer.accept_rate.tolist()[:draft_len]", "racer.accept_rate.tolist()[: draft_len - 1]", (COST,)),
    Bug("chain round reports only its accepted depths as tested", "coolsd/decoding/chain.py",
        "tested = min(n + 1, n_draft)", "tested = min(n, n_draft)", (COST,)),
    Bug("timing: interleaved medians default to 5 timed turns", "coolsd/models/timing.py",
        "Callable[[], Any]], repeats: int = 7,", "Callable[[], Any]], repeats: int = 5,", (TIMING,)),
    Bug("timing: one untimed call by default", "coolsd/models/timing.py",
        "def median_seconds(fn: Callable[[], Any], repeats: int = 7, warmup: int = 2,",
        "def median_seconds(fn: Callable[[], Any], repeats: int = 7, warmup: int = 1,", (TIMING,)),
    Bug("timing: the clock read before the device finished", "coolsd/models/timing.py",
        "            sync()\n            times[name].append(clock() - t0)\n",
        "            times[name].append(clock() - t0)\n            sync()\n", (TIMING,)),
    Bug("timing: no synchronisation before a timed call", "coolsd/models/timing.py",
        "            sync()\n            t0 = clock()\n", "            t0 = clock()\n", (TIMING,)),
    Bug("timing: zero timed repeats allowed", "coolsd/models/timing.py",
        'check_int("repeats", repeats, 1)', 'check_int("repeats", repeats, 0)', (TIMING,)),
    Bug("timing: the drafter step timed one position late", "coolsd/models/timing.py",
        "position = torch.tensor([context], device=dev)", "position = torch.tensor([context + 1], device=dev)",
        (TIMING,)),
    Bug("timing: verify_steps refuses the longest measured forward", "coolsd/models/timing.py",
        'check_int("n", n, 1, len(self.target_s))', 'check_int("n", n, 1, len(self.target_s) - 1)',
        (TIMING,)),
    Bug("variants: COOL-SD's strength knob is nu", "coolsd/decoding/variants.py",
        '"optimal"}, "delta"),\n    Variant("cool-sd-unclipped"',
        '"optimal"}, "nu"),\n    Variant("cool-sd-unclipped"', (STRENGTH,)),
    Bug("variants: linear decay's strength knob is its slope", "coolsd/decoding/variants.py",
        '"linear-decay", {}, "delta"),', '"linear-decay", {}, "slope"),', (STRENGTH,)),
    Bug("variants: LANTERN's strength knob is LANTERN++'s lambda", "coolsd/decoding/variants.py",
        '{}, "delta", racer=False)', '{}, "lam", racer=False)', (STRENGTH,)),
    Bug("variants: at_strength resets the other knobs to their defaults", "coolsd/decoding/variants.py",
        "build(key, {**(options or {}), v.strength: value}, neighbours)",
        "build(key, {v.strength: value}, neighbours)", (STRENGTH,)),
    Bug("variants: at_strength drops the neighbour table", "coolsd/decoding/variants.py",
        "v.strength: value}, neighbours)", "v.strength: value})", (STRENGTH,)),
    Bug("variants: the fixed options no longer win over the given ones", "coolsd/decoding/variants.py",
        "return options | self.fixed", "return self.fixed | options", (RULE_OPTIONS,)),
    Bug("race settings: LANTERN++'s k read from the lambda setting", "coolsd/app/settings.py",
        'also=(LanternRule,),', 'also=(LanternRule,), read=lambda v: v["lantern_lambda"],', (RULE_SETTINGS,)),
    Bug("race settings: mu read as given while mean omega is on", "coolsd/app/settings.py",
        'read=lambda v: None if v["mean_omega"] else v["mu"])', 'read=lambda v: v["mu"])', (RULE_SETTINGS,)),
    Bug("checks: the minimum itself refused", "coolsd/util/checks.py",
        "else value < minimum))", "else value <= minimum))", (CHECKS,)),
    Bug("checks: the maximum itself refused", "coolsd/util/checks.py",
        "(maximum is not None and value > maximum)", "(maximum is not None and value >= maximum)", (CHECKS,)),
    Bug("checks: check_int without its range", "coolsd/util/checks.py",
        "    check_number(name, value, minimum, maximum, bounds=bounds)\n    return int(value)",
        "    return int(value)", (CHECKS,)),
    Bug("checks: open and closed lower bounds swapped", "coolsd/util/checks.py",
        "(value <= minimum if low_open else value < minimum)", "(value < minimum if low_open else value <= minimum)",
        (CHECKS,)),
    Bug("checks: an integer's upper bound refused", "coolsd/util/checks.py",
        "check_number(name, value, minimum, maximum, bounds=bounds)",
        "check_number(name, value, minimum, None if maximum is None else maximum - 1, bounds=bounds)", (CHECKS,)),
    Bug("checks: 1 and 0 taken as booleans", "coolsd/util/checks.py",
        "    if not isinstance(value, bool):\n", "    if not isinstance(value, (bool, int)):\n", (CHECKS,)),
    Bug("floored COOL-SD floors at min(1, delta)", "coolsd/decoding/rules.py",
        "self.mu_value(draft_len))\n        return w.clamp_min(1.0) if self.floor_at_one else w",
        "self.mu_value(draft_len))\n        return w.clamp_min(min(1.0, self.delta)) if self.floor_at_one else w",
        (FLOOR,)),
    Bug("floored COOL-SD accepts with the unclipped omega", "coolsd/decoding/rules.py",
        "        w = self.omega(depth, draft_len).to(p.dtype).unsqueeze(-1)\n",
        "        w = (self.delta * torch.exp(-self.nu * depth.double() - self.mu_value(draft_len))).unsqueeze(-1)\n",
        (FLOOR,)),
    Bug("chain events report the schedule of the drafts made, not of L", "coolsd/decoding/chain.py",
        "omega = s.omegas(n_draft, draft_len)", "omega = s.omegas(n_draft, n_draft)", (FLOOR,)),
    Bug("schedule family: uniform floored at exactly 1", "coolsd/theory/annealing.py",
        "UniformRSDRule(delta=max(delta, 1.0))", "UniformRSDRule(delta=1.0)", (FLOOR,)),
    Bug("schedule family: the floor ignored for linear and custom", "coolsd/theory/annealing.py",
        "    return dataclasses.replace(rule, floor_at_one=floor_at_one)\n", "    return rule\n", (FLOOR,)),
    Bug("app: a session capacity of 0 accepted", "coolsd/util/env.py",
        "int(text) < minimum:", "int(text) < minimum - 1:", (APP_GAPS,)),
    Bug("app: the default session capacity is Gradio's 10,000", "coolsd/app/serving.py",
        "SESSION_CAPACITY = 1000\n", "SESSION_CAPACITY = 10000\n", (APP_GAPS,)),
    Bug("app: the launch ignores $COOLSD_SESSION_CAPACITY", "coolsd/app/demo.py",
        '"state_session_capacity": session_capacity_from_env(),', '"state_session_capacity": 1000,', (APP_GAPS,)),
    Bug("app: a share link's 0 read as true", "coolsd/app/share.py",
        '"false": False, "0": False}', '"false": False, "0": True}', (APP_GAPS,)),
    Bug("app: a share link's booleans read case- and space-sensitively", "coolsd/app/share.py",
        ".get(text.strip().lower(), text)", ".get(text, text)", (APP_GAPS,)),
    Bug("app: concurrent first picks each load the model", "coolsd/app/context.py",
        "            with self._lock:\n                if key not in self.families:\n",
        "            with self._lock:\n                if True:\n", (APP_GAPS,)),
    Bug("emoji data: an emoji drawn in exactly min_styles styles dropped", "coolsd/train/emoji_data.py",
        "len(styles) < min_styles", "len(styles) <= min_styles", (EMOJI_DATA,)),
    Bug("emoji data: two entries of one name make two classes", "coolsd/train/emoji_data.py",
        " or e.name in seen:\n", ":\n", (EMOJI_DATA,)),
    Bug("emoji data: styles that do not draw an emoji counted as drawing it", "coolsd/train/emoji_data.py",
        "{style: name for style, name in found.items() if name is not None}",
        "{style: name for style, name in found.items()}", (EMOJI_DATA,)),
    Bug("emoji data: a single-style emoji may lose its only style", "coolsd/train/emoji_data.py",
        "if len(styles_of[i]) >= 2]", "if len(styles_of[i]) >= 1]", (EMOJI_DATA,)),
    Bug("emoji data: the held-out style is an index into the emoji's styles", "coolsd/train/emoji_data.py",
        "int(rng.choice(styles_of[candidates[j]]))", "int(rng.choice(len(styles_of[candidates[j]])))",
        (EMOJI_DATA,)),
    Bug("emoji data: held-out emoji drawn with replacement", "coolsd/train/emoji_data.py",
        "rng.choice(len(candidates), n, replace=False)", "rng.choice(len(candidates), n, replace=True)",
        (EMOJI_DATA,)),
    Bug("emoji data: the held-out share counted over every emoji", "coolsd/train/emoji_data.py",
        "n = round(frac * len(candidates))", "n = round(frac * num_emoji)", (EMOJI_DATA,)),
    Bug("emoji data: the shipped list keeps the emoji it does not name", "coolsd/train/emoji_data.py",
        "if wanted is not None and e.name not in wanted:", "if wanted is not None and e.name in wanted:",
        (EMOJI_DATA,)),
    Bug("emoji warm start: the null style reads the null class's row", "coolsd/train/emoji.py",
        "+ [old_config.null_style_token]", "+ [old_config.null_class_token]", (TRAIN,)),
    Bug("emoji warm start: styles looked up in the class table", "coolsd/train/emoji.py",
        "rows += [old_style[n] for n in new_config.style_names]",
        "rows += [old_class.get(n, 0) for n in new_config.style_names]", (TRAIN,)),
    Bug("drafter: unguided sampling still trains on (class, null) pairs", "coolsd/decoding/sampling.py",
        "return 2 if self.guidance else 1", "return 2", (TRAIN,)),
    Bug("emoji eval: the decoded code grid transposed", "coolsd/train/emoji_eval.py",
        ".permute(0, 3, 1, 2)\n    return (vq.decode", ".permute(0, 3, 2, 1)\n    return (vq.decode", (EMOJI_EVAL,)),
    Bug("patch VQ: the decoder drops the codes' own patches", "coolsd/models/patch_vq.py",
        "out = F.pixel_shuffle(h, self.config.patch_size) + self.correction(h)", "out = self.correction(h)",
        (PATCH_VQ,)),
    Bug("patch VQ: decode never quantises", "coolsd/models/patch_vq.py",
        "        if not force_not_quantize:\n", "        if force_not_quantize:\n", (PATCH_VQ,)),
    Bug("patch VQ: load_vq always builds a diffusers VQModel", "coolsd/models/patch_vq.py",
        "(PatchVQModel if name == PatchVQModel.__name__ else VQModel)", "VQModel", (PATCH_VQ,)),
    Bug("k-means: an empty cluster keeps its stale centre", "coolsd/train/vq.py",
        "        if len(dead):\n            err", "        if False:\n            err", (PATCH_VQ,)),
    Bug("k-means: centroids are cluster sums, not means", "coolsd/train/vq.py",
        "centroids[alive] = sums[alive] / count[alive, None]", "centroids[alive] = sums[alive]", (PATCH_VQ,)),
    Bug("patch VQ training: the codebook from the held-out images", "coolsd/train/vq.py",
        "kmeans_codebook(patches_of(train_x, patch)", "kmeans_codebook(patches_of(val_x, patch)", (PATCH_VQ,)),
    Bug("nearest: the last chunk of points is dropped", "coolsd/train/vq.py",
        "for i in range(0, len(points), chunk)])",
        "for i in range(0, len(points) - chunk, chunk)] or [torch.zeros(0, dtype=torch.long)])", (PATCH_VQ,)),
    Bug("sessions: every session copies the page's component map", "coolsd/app/sessions.py",
        "config.blocks = ChainMap({}, page.blocks)", "config.blocks = dict(page.blocks)", (SESSIONS,)),
    Bug("sessions: an evicted session's queue goes with an event still pending", "coolsd/app/sessions.py",
        "if queue is None or queue.pending_event_ids_session.get(session_id):", "if queue is None:", (SESSIONS,)),
    Bug("sessions: the heap is trimmed after evictions only", "coolsd/app/sessions.py",
        "        self.trim()  # (at most", "        0 and self.trim()  # (at most", (SESSIONS,)),
    Bug("sessions: the trim interval never passes", "coolsd/app/sessions.py",
        "if not force and now - self._last_trim < TRIM_EVERY_S:", "if not force and self._last_trim:", (SESSIONS,)),
]


def copy_tree(dest: Path) -> None:
    """Tracked and untracked-but-not-ignored files; .venv linked, not copied."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    os.symlink(os.path.realpath(ROOT / ".venv"), dest / ".venv")


def plant(dest: Path, bug: Bug) -> None:
    path = dest / bug.path
    text = path.read_text()
    count = text.count(bug.old)
    if count != 1:
        raise LookupError(f"{bug.path}: the text to replace occurs {count} times (code moved?): {bug.old!r}")
    path.write_text(text.replace(bug.old, bug.new))


def verdict(done: subprocess.CompletedProcess) -> tuple[bool, str]:
    """(caught, what caught it): a failed test, or an error the planted bug raised while pytest imported coolsd
    (a plant that does not even parse is not counted as caught)."""
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    if done.returncode == 1 and failed:
        return True, failed[0][7:][:110]
    errors = [line[4:].strip() for line in (done.stdout + done.stderr).splitlines() if line.startswith("E   ")]
    if done.returncode in (2, 4) and errors and not errors[-1].startswith(("SyntaxError", "IndentationError")):
        return True, f"at import: {errors[-1][:100]}"
    return False, f"pytest exit {done.returncode}"


def dry_run(only: str | None) -> int:
    """PLANTABLE / NOT PLANTED per bug, read from the working tree itself; exit 1 if any is not plantable."""
    bad = 0
    for bug in BUGS:
        if only and only not in bug.name:
            continue
        path = ROOT / bug.path
        count = path.read_text().count(bug.old) if path.is_file() else 0
        print(f"{'PLANTABLE' if count == 1 else 'NOT PLANTED'}  {bug.name}" + ("" if count == 1 else
                                                                                 f"  ({bug.path}: {count} matches)"))
        bad += count != 1
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="run only the bugs whose name contains this text")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folders (printed)")
    parser.add_argument("--dry-run", action="store_true",
                        help="only check that each bug's text occurs once in the working tree (no copies, no tests)")
    args = parser.parse_args(argv)
    if args.dry_run:
        return dry_run(args.only)
    env = os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    missed = 0
    for bug in BUGS:
        if args.only and args.only not in bug.name:
            continue
        scratch = Path(tempfile.mkdtemp(prefix="planted-"))
        try:
            copy_tree(scratch)
            plant(scratch, bug)
        except LookupError as err:
            print(f"NOT PLANTED  {bug.name}: {err}")
            missed += 1
            shutil.rmtree(scratch)
            continue
        cmd = [str(scratch / ".venv" / "bin" / "python"), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
               "-m", "not statistical", *bug.tests]
        done = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True, timeout=1800)
        caught, why = verdict(done)
        print(f"{'CAUGHT' if caught else 'MISSED'}  {bug.name}" + (f"  <- {why}" if caught else f"  ({why})"))
        sys.stdout.flush()
        missed += not caught
        if args.keep:
            print(f"        kept {scratch}")
        else:
            shutil.rmtree(scratch)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
