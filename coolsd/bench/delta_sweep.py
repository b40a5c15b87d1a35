"""`python -m coolsd.bench.delta_sweep`: what COOL-SD's relaxation costs on one model, precomputed for the app's Lab.

Decodes the same samples (conditions spread over the model's classes, seeds first-seed, first-seed + 1, ...)
with vanilla AR, Eagle-1 and COOL-SD at each delta (default 1, 2, 4, ..., 1024; nu and the draft length L the
library's defaults), through the benchmark's own runner (`coolsd.bench.runner.run_items`: the settings of one
sample decoded one after the other, timed, then scored) and summary (`coolsd.bench.report.summarise`). It writes
one JSON (`SWEEP_VERSION`) with, per setting: tau, speed-up over vanilla AR (CPU time), FID in the classifier's
feature space with its bootstrap spread, recognition (the classifier's accuracy on the class asked for; emoji:
the emoji, its style aside) with its 95 % Wilson interval, where real pictures ship (emoji) the mean likeness
and the share of pictures it calls broken with its Wilson interval (`coolsd.compare.likeness`; NaN elsewhere),
and the target's NLL with its standard error; vanilla AR's band (FID +- 2 spreads, the intervals of
recognition and of the broken share, NLL +- 2 standard errors); and, per measure, the smallest delta from which
every larger swept delta is beyond that band on the worse side (`breaks`: FID above, recognition below, broken
share above, NLL above; null when the largest is not). The first `--keep` samples' tokens of every setting
are kept, so the Lab can show the pictures.

    python -m coolsd.bench.delta_sweep --model emoji --samples 64 --out assets/emoji/delta_sweep.json
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import math
import shlex
import sys
import threading
import time
from pathlib import Path

import torch

from coolsd.bench import report
from coolsd.bench.cli import load_bundle, machine
from coolsd.bench.runner import WorkItem, run_items
from coolsd.bench.settings import sweep
from coolsd.decoding.drafting import Chain
from coolsd.decoding.rules import CoolSDRule
from coolsd.util.jsonsafe import dumps
from coolsd.util.paths import EMBEDDED_DIR, EMOJI_DIR, ROOT

log = logging.getLogger("coolsd.bench")
SWEEP_VERSION = 1
SWEEP_NAME = "delta_sweep.json"
SWEEPS = {"emoji": EMOJI_DIR / SWEEP_NAME, "embedded": EMBEDDED_DIR / SWEEP_NAME}  # ModelBundle.kind -> its sweep
DEFAULT_DELTAS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0)
WILSON_Z = 1.959964  # the normal quantile of a two-sided 95 % interval
BAND_WIDTH = 2.0  # vanilla's band: its value +- this many spreads (FID, NLL)
MEASURES = ("fid", "recognition", "broken", "nll")
WORSE = {"fid": 1, "recognition": -1, "broken": 1, "nll": 1}  # the side of vanilla's band a worse value lies on


# ---------------------------------------------------------------- the samples
def spread_conditions(num_classes: int, num_styles: int, samples: int) -> list[int]:
    """Engine conditions of `samples` samples: classes spread evenly over the model's (cycling when there are
    more samples than classes), the styles in turn; condition = class * styles + style (class without styles)."""
    styles = max(num_styles, 1)
    if samples <= num_classes:
        classes = [j * num_classes // samples for j in range(samples)]
    else:
        classes = [j % num_classes for j in range(samples)]
    return [c * styles + j % styles for j, c in enumerate(classes)]


def sample_items(n_settings: int, groups: list[tuple[int, int]]) -> list[WorkItem]:
    """Every setting of every (condition, seed) group, group by group; group g starts at setting g mod n (as
    `coolsd.bench.runner.work_items` orders a class x seed grid), so drift falls on every setting alike."""
    return [WorkItem((g + j) % n_settings, cond, seed) for g, (cond, seed) in enumerate(groups)
            for j in range(n_settings)]


# ---------------------------------------------------------------- spreads, bands and breaks
def wilson(hits: int, n: int, z: float = WILSON_Z) -> tuple[float, float]:
    """The Wilson score interval (low, high) of a share hits / n; (nan, nan) for n = 0. Unlike p +- z SE it has a
    width at 0 / n and n / n (a classifier right on every sample still leaves room below)."""
    if n <= 0:
        return math.nan, math.nan
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def recognition(row: dict) -> float:
    """The share of samples whose class the classifier read as asked: the emoji alone for a class + style
    classifier (`class_accuracy`), else `accuracy` (the digit)."""
    return row.get("class_accuracy", row.get("accuracy", math.nan))


def sweep_row(row: dict) -> dict:
    """A benchmark summary row (`report.summarise`) as the sweep keeps it: its delta (None: vanilla AR or Eagle-1),
    speed and quality with their spreads."""
    config = row.get("rule_config") or {}
    n = row["n_images"]
    rec, broke = recognition(row), row.get("broken", math.nan)
    low, high = wilson(round(rec * n), n) if math.isfinite(rec) else (math.nan, math.nan)
    broken_low, broken_high = wilson(round(broke * n), n) if math.isfinite(broke) else (math.nan, math.nan)
    return {"setting": row["setting"], "rule": config.get("rule"), "delta": config.get("delta"),
            "n_images": n, "tau": row["tau"], "speedup": row["speedup"], "seconds": row["cpu_seconds"],
            "fid": row["fid"], "fid_std": row["fid_std"], "recognition": rec, "recognition_low": low,
            "recognition_high": high, "style_recognition": row.get("style_accuracy"),
            "likeness": row.get("likeness", math.nan), "broken": broke, "broken_low": broken_low,
            "broken_high": broken_high, "nll": row["nll"],
            "nll_se": row["nll_se"]}


def vanilla_band(vanilla: dict) -> dict[str, list[float]]:
    """measure -> [low, high] of vanilla AR's band: FID and NLL +- BAND_WIDTH spreads (neither below 0, where
    neither can be), recognition's and the broken share's intervals."""
    def around(value: float, spread: float) -> list[float]:
        return [max(0.0, value - BAND_WIDTH * spread), value + BAND_WIDTH * spread]

    return {"fid": around(vanilla["fid"], vanilla["fid_std"]),
            "recognition": [vanilla["recognition_low"], vanilla["recognition_high"]],
            "broken": [vanilla.get("broken_low", math.nan), vanilla.get("broken_high", math.nan)],
            "nll": around(vanilla["nll"], vanilla["nll_se"])}


def beyond(value: float | None, band: list[float | None], worse: int) -> bool:
    """Whether `value` lies outside `band` on the worse side (worse = +1: above it; -1: below it); never where the
    value or that edge is missing (None or NaN: a measure the model has none of)."""
    edge = band[1] if worse > 0 else band[0]
    if not all(isinstance(v, int | float) and math.isfinite(v) for v in (value, edge)):
        return False
    return value > edge if worse > 0 else value < edge


def breaks(rows: list[dict], band: dict[str, list[float]]) -> dict[str, float | None]:
    """measure -> the smallest swept delta from which every larger swept delta is beyond vanilla's band on the
    worse side (None when the largest is not); "picture": the smallest of FID's, recognition's and the broken
    share's."""
    swept = sorted((r for r in rows if r["delta"] is not None), key=lambda r: r["delta"])
    out: dict[str, float | None] = {}
    for m in MEASURES:
        found = None
        for r in reversed(swept):
            if not beyond(r.get(m, math.nan), band[m], WORSE[m]):
                break
            found = r["delta"]
        out[m] = found
    picture = [d for d in (out["fid"], out["recognition"], out["broken"]) if d is not None]
    return out | {"picture": min(picture) if picture else None}


# ---------------------------------------------------------------- the command
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m coolsd.bench.delta_sweep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("emoji", "mnist", "embedded", "tiny"), default="emoji",
                    help="the shipped emoji or MNIST (embedded) model; tiny = random weights (needs --classifier)")
    ap.add_argument("--model-dir", type=Path, default=None, help="emoji: another emoji model folder")
    ap.add_argument("--classifier", type=Path, default=None, help="ResNet folder (default: the model's own)")
    ap.add_argument("--real-stats", type=Path, default=None, help="real-image feature statistics "
                                                                   "(default: <classifier>/real_stats.safetensors)")
    ap.add_argument("--samples", type=int, default=64, help="samples per setting (one condition and seed each)")
    ap.add_argument("--deltas", type=_floats, default=list(DEFAULT_DELTAS), help="COOL-SD deltas, comma-separated")
    ap.add_argument("--nu", type=float, default=CoolSDRule.nu, help="COOL-SD's annealing rate")
    ap.add_argument("--draft-len", type=int, default=Chain.draft_len, help="L, drafts per round")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--keep", type=int, default=8, help="samples kept per setting (the Lab's pictures)")
    ap.add_argument("--fid-bootstrap", type=int, default=20, help="resamples for the FID spread")
    ap.add_argument("--warmup", type=int, default=1, help="untimed warm-up passes")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: decode single-threaded)")
    ap.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda when there is one)")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"the JSON to write (default: the model's own, e.g. {SWEEPS['emoji'].relative_to(ROOT)})")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def _floats(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"deltas must be positive numbers, got {text!r}")
    return sorted(set(values))


def check_args(args) -> None:
    """Refuse what would make no sweep (one line, SystemExit)."""
    if args.samples < 2:
        raise SystemExit("--samples must be at least 2 (FID and the spreads need two images)")
    if args.keep < 0:
        raise SystemExit(f"--keep must be >= 0, got {args.keep}")
    args.keep = min(args.keep, args.samples)
    if args.draft_len < 1:
        raise SystemExit(f"--draft-len must be >= 1, got {args.draft_len}")
    if args.out is None:
        kind = "embedded" if args.model in ("mnist", "embedded") else args.model
        if kind not in SWEEPS or args.model_dir is not None:
            raise SystemExit("--out is needed for this model (the shipped models have a default)")
        args.out = SWEEPS[kind]


def run_sweep(args) -> dict:
    """Decode and score every (setting, sample); the sweep's JSON-ready dict."""
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    bench_args = argparse.Namespace(model="embedded" if args.model == "mnist" else args.model,
                                    model_dir=args.model_dir, classifier=args.classifier, real_stats=args.real_stats)
    bundle, classifier, stats = load_bundle(bench_args, device)
    settings = sweep(args.draft_len, cool_delta=args.deltas, cool_nu=args.nu)  # vanilla AR, Eagle-1, COOL-SD
    names = bundle.conditions
    conditions = spread_conditions(len(names.classes), len(names.styles), args.samples)
    groups = [(c, args.first_seed + j) for j, c in enumerate(conditions)]
    sampling = bundle.default_sampling
    t0 = time.perf_counter()
    records = run_items(bundle, settings, sample_items(len(settings), groups), sampling, classifier,
                        warmup=args.warmup, progress=not args.quiet)
    rows = [sweep_row(r) for r in report.summarise(records, settings, bundle.neighbours, stats, args.fid_bootstrap)]
    band = vanilla_band(rows[0])
    return {"version": SWEEP_VERSION, "command": shlex.join(["python", "-m", "coolsd.bench.delta_sweep", *args.argv]),
            "machine": machine(device, 1), "date": datetime.date.today().isoformat(),
            "wall_minutes": (time.perf_counter() - t0) / 60, "model": bundle.name, "kind": bundle.kind,
            "execution": bundle.execution, "execution_path": bundle.path, "samples": args.samples, "n_real": stats[2],
            "conditions": [names.label(c) for c in conditions], "seeds": [s for _, s in groups],
            "draft_len": args.draft_len, "nu": args.nu, "sampling": dataclasses.asdict(sampling),
            "fid_bootstrap": args.fid_bootstrap, "band_width": BAND_WIDTH, "rows": rows, "band": band,
            "breaks": breaks(rows, band), "kept": kept_tokens(records, settings, groups[: args.keep])}


def kept_tokens(records: list[dict], settings, groups: list[tuple[int, int]]) -> dict[str, list[str]]:
    """setting label -> the tokens of each of `groups` (condition, seed), in order, each picture's ids as one line
    of space-separated integers (compact in the JSON; `read_tokens` turns it back): the pictures the Lab shows."""
    by = {(r["setting_index"], r["cls"], r["seed"]): r["tokens"] for r in records}
    return {s.label: [" ".join(map(str, by[(i, c, seed)])) for c, seed in groups] for i, s in enumerate(settings)}


def read_tokens(line: str) -> torch.Tensor:
    """(T,) int64 ids of one kept picture (`kept_tokens`' line); ValueError when it is not a line of integers."""
    return torch.tensor([int(x) for x in line.split()], dtype=torch.long)


# ---------------------------------------------------------------- the file read back (the app's Lab)
NEEDED = ("rows", "band", "breaks", "samples", "machine", "date", "draft_len", "nu", "band_width", "command", "model",
          "kept")
ROW_KEYS = ("setting", "rule", "delta", "tau", "speedup", "fid", "fid_std", "recognition", "recognition_low",
            "recognition_high", "nll", "nll_se")  # what a reader takes from every row (`sweep_row` writes them)
OPTIONAL_ROW_KEYS = ("likeness", "broken", "broken_low", "broken_high")  # None where the model has no real pictures
_cache: dict[Path, tuple[float, dict | None]] = {}
_lock = threading.Lock()


def load(kind: str) -> dict | None:
    """The sweep of a model of `ModelBundle.kind` `kind` (SWEEPS), read and checked once per file version (its
    mtime); None when there is none or it cannot be read (logged: a file of another version, a broken JSON)."""
    path = SWEEPS.get(kind)
    if path is None or not path.is_file():
        return None
    mtime = path.stat().st_mtime
    with _lock:
        if path not in _cache or _cache[path][0] != mtime:
            _cache[path] = (mtime, read_sweep(path))
        return _cache[path][1]


def read_sweep(path: Path) -> dict | None:
    """The sweep file at `path` when it is of SWEEP_VERSION with every NEEDED key and every row's ROW_KEYS (so a
    reader indexes them; OPTIONAL_ROW_KEYS and the broken share's band and break are filled with None where the
    file has none), else None (logged)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        log.warning("delta sweep %s unreadable: %s", path, err)
        return None
    data = data if isinstance(data, dict) else {}
    missing = [k for k in NEEDED if k not in data]
    missing += sorted({k for r in data.get("rows") or [] for k in ROW_KEYS if k not in r})
    if missing or data.get("version") != SWEEP_VERSION or not data["rows"]:
        log.warning("delta sweep %s: version %r or keys missing %s (this code reads version %d)", path,
                    data.get("version"), missing, SWEEP_VERSION)
        return None
    for row in data["rows"]:  # a model without real pictures has no likeness (None, as NaN reads back)
        for key in OPTIONAL_ROW_KEYS:
            row.setdefault(key, None)
    data["band"].setdefault("broken", [None, None])
    data["breaks"].setdefault("broken", None)
    return data


def swept(sweep: dict) -> list[dict]:
    """The COOL-SD rows, by delta ascending."""
    return sorted((r for r in sweep["rows"] if r["delta"] is not None), key=lambda r: r["delta"])


def reference(sweep: dict, rule: str | None) -> dict | None:
    """The row of vanilla AR (rule None) or of Eagle-1 ("eagle-1")."""
    return next((r for r in sweep["rows"] if r["delta"] is None and r["rule"] == rule), None)


def nearest(sweep: dict, delta: float) -> dict:
    """The swept row whose delta is nearest `delta` on a log scale (the sweep doubles delta)."""
    return min(swept(sweep), key=lambda r: abs(math.log(r["delta"]) - math.log(delta)))


def reach(sweep: dict | None) -> float | None:
    """The largest delta the sweep ran (None without one)."""
    return swept(sweep)[-1]["delta"] if sweep and swept(sweep) else None


def breaking_delta(sweep: dict | None) -> float | None:
    """The smallest delta from which FID, recognition or the broken share stays beyond vanilla's band (the sweep's
    breaks["picture"], `breaks`); None without a sweep or where no swept delta leaves it."""
    return sweep["breaks"]["picture"] if sweep else None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    check_args(args)
    if not log.handlers:
        log.addHandler(logging.StreamHandler())
        log.setLevel(logging.INFO)
    torch.set_num_threads(args.threads)
    result = run_sweep(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dumps(result, indent=1) + "\n")
    log.info("%s: %d settings x %d samples in %.1f min; breaks: %s", args.out, len(result["rows"]), args.samples,
             result["wall_minutes"], result["breaks"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
