"""`python -m coolsd.bench`: the speed-quality trade-off of every decoder, measured, tabulated and plotted.

Runs vanilla AR, Eagle-1, LANTERN++ (lambda x k grid, published and G* residuals), UniformRSD and
COOL-SD (delta sweeps) and static-tree drafting on the same classes and seeds; writes
results.jsonl (one line per setting), items.jsonl (one line per image), results.md (table,
claims, targets), pareto.html / pareto.png and config.json into --out. Under
`torchrun --nproc_per_node N -m coolsd.bench ...` (or `accelerate launch -m coolsd.bench ...`)
the images are split across the N processes and merged on rank 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import torch

from coolsd.bench import limit_table, report
from coolsd.bench.runner import close_processes, gather, init_processes, rank_slice, run_items, work_items
from coolsd.bench.settings import NO_DRAFTER, Setting, sweep
from coolsd.compare.metrics import load_real_stats
from coolsd.decoding.drafting import Chain, Jacobi
from coolsd.decoding.rules import CoolSDRule
from coolsd.decoding.sampling import SamplingConfig
from coolsd.models.bundle import load_embedded
from coolsd.models.emoji import load_emoji
from coolsd.models.tiny import tiny_bundle
from coolsd.util.figures import write_png
from coolsd.util.jsonsafe import dumps
from coolsd.util.machine import bf16_units, cpu_name
from coolsd.util.paths import BENCH_DIR, DOCS, EMBEDDED_CLASSIFIER, EMOJI_CLASSIFIER, ROOT

log = logging.getLogger("coolsd.bench")
DEFAULT_OUT = BENCH_DIR
BENCH_DOC = DOCS / "benchmark.md"  # where --readme writes the bench section by default
REAL_STATS_NAME = "real_stats.safetensors"  # inside the classifier folder
NAN = float("nan")
README_START, README_END = "<!-- bench:start -->", "<!-- bench:end -->"
TREE_SETTINGS = ["eagle-1@tree:shape=eagle-25", "lantern++:k=10,lam=5@tree:shape=eagle-25",
                 "cool-sd:delta=2@tree:shape=eagle-25"]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def int_list(text: str) -> list[int]:
    """'0,3,5' or '0-9' -> ints."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, dash, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if dash else [int(lo)]
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m coolsd.bench", description=__doc__,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = ap.add_argument_group("model and data")
    g.add_argument("--model", choices=("embedded", "mnist", "emoji", "tiny"), default="embedded",
                   help="embedded / mnist = the shipped MNIST model; emoji = the shipped emoji model "
                        "(execution dtype: COOLSD_DTYPE); tiny = random weights (tests, dry runs)")
    g.add_argument("--model-dir", type=Path, default=None,
                   help="emoji: another emoji model folder (e.g. runs/emoji4/assets) instead of the shipped default; "
                        "its classifier/ judges it unless --classifier is given")
    g.add_argument("--classifier", type=Path, default=None,
                   help=f"ResNet save_pretrained folder (default for embedded: {EMBEDDED_CLASSIFIER})")
    g.add_argument("--real-stats", type=Path, default=None,
                   help=f"real-image feature statistics (default: <classifier>/{REAL_STATS_NAME})")
    g.add_argument("--classes", type=int_list, default=None,
                   help="condition ids, e.g. 0-9 or 1,7 (default: all; emoji: emoji * 4 + style)")
    g.add_argument("--seeds", type=int, default=1, help="seeds per class: first-seed .. first-seed + seeds - 1")
    g.add_argument("--first-seed", type=int, default=0)
    g = ap.add_argument_group("sweep (comma-separated lists; an empty list skips the family)")
    g.add_argument("--draft-len", type=int, default=Chain.draft_len,
                   help="L, drafts per round of the rules' chain drafting (default: Chain's, coolsd/bench/tuning.py)")
    g.add_argument("--lantern-k", type=int_list, default=[5, 10], help="LANTERN++ neighbourhood sizes k")
    g.add_argument("--lantern-lam", type=_floats, default=[2.0, 5.0, 10.0, 20.0], help="LANTERN++ budgets lambda")
    g.add_argument("--lantern-gstar", action=argparse.BooleanOptionalAction, default=True,
                   help="also run every LANTERN++ point with the G* residual")
    g.add_argument("--uniform-delta", type=_floats, default=[1.1, 2.0, 4.0, 8.0, 16.0], help="UniformRSD deltas")
    g.add_argument("--cool-delta", type=_floats, default=[1.1, 2.0, 4.0, 8.0, 16.0], help="COOL-SD deltas")
    g.add_argument("--cool-nu", type=float, default=CoolSDRule.nu, help="COOL-SD annealing rate nu")
    g.add_argument("--cool-unclipped-delta", type=_floats, default=[2.0],
                   help="COOL-SD deltas also run unclipped (--cool-delta runs COOL-SD floored at 1, the default)")
    g.add_argument("--jacobi-window", type=int_list, default=[Jacobi.window],
                   help="Jacobi drafting's windows W (no drafter, the target drafts W tokens per iteration): at each "
                        "W, SJD (Eagle-1's test), 'SJD + reuse' unless --no-sjd-reuse, and every --no-drafter rule")
    g.add_argument("--sjd-reuse", action=argparse.BooleanOptionalAction, default=True,
                   help="also run 'SJD + reuse' (redrafts coupled with the previous drafts, lossless) at each W")
    g.add_argument("--no-drafter", nargs="*", default=NO_DRAFTER,
                   help="rules as 'rule[:name=value,...]' run on Jacobi drafts at each --jacobi-window W (COOL-SD's "
                        "nu: --cool-nu unless given)")
    g.add_argument("--extra", nargs="*", default=TREE_SETTINGS,
                   help="more settings as 'rule[:name=value,...][@drafting[:name=value,...]]', a drafting being "
                        "chain (draft_len), tree (shape) or jacobi (window, reuse, init) (default: the static-tree "
                        "ones)")
    g.add_argument("--only", default=None, help="keep only settings whose label contains one of these "
                                                "comma-separated words ('vanilla' is always kept)")
    g = ap.add_argument_group("sampling (default: the bundle's own)")
    for f in dataclasses.fields(SamplingConfig):
        g.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=None)
    add_run_arguments(ap)
    return ap


def add_run_arguments(ap: argparse.ArgumentParser) -> None:
    """The "run and output" options of `build_parser`."""
    g = ap.add_argument_group("run and output")
    g.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda:LOCAL_RANK if available)")
    g.add_argument("--threads", type=int, default=1, help="torch threads per process (1: decode single-threaded)")
    g.add_argument("--warmup", type=int, default=1, help="untimed warm-up passes per process")
    g.add_argument("--fid-bootstrap", type=int, default=20, help="resamples for the FID spread (0: off)")
    g.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    g.add_argument("--png", action=argparse.BooleanOptionalAction, default=True, help="also export pareto.png")
    g.add_argument("--readme", type=Path, nargs="?", const=BENCH_DOC, default=None,
                   help=f"rewrite the bench section of this Markdown file (no value: {BENCH_DOC.relative_to(ROOT)})")
    g.add_argument("--notes", type=Path, default=None, help="Markdown appended to the README section")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.add_argument("--report-only", action="store_true",
                   help="decode nothing: remake results.md, claims, figure and README from --out's results.jsonl")


def load_bundle(args, device: torch.device):
    """(bundle, classifier, (mu, sigma, n)); fails with a clear message when a part is missing."""
    from transformers import ResNetForImageClassification

    if args.model == "tiny":
        bundle = tiny_bundle()
        if args.classifier is None:
            raise SystemExit("--model tiny has no classifier: pass --classifier FOLDER and --real-stats FILE")
    elif args.model == "emoji":
        bundle = load_emoji(args.model_dir, device=device)
    else:
        bundle = load_embedded(device=device)
    emoji_classifier = args.model_dir / "classifier" if args.model_dir else EMOJI_CLASSIFIER
    folder = args.classifier or (emoji_classifier if args.model == "emoji" else EMBEDDED_CLASSIFIER)
    if not (folder / "config.json").is_file():
        raise SystemExit(f"classifier not found: {folder} (a ResNetForImageClassification save_pretrained folder)")
    classifier = ResNetForImageClassification.from_pretrained(folder, dtype=torch.float32).to(device).eval()
    try:
        stats = load_real_stats(args.real_stats or folder / REAL_STATS_NAME)
    except FileNotFoundError as err:
        raise SystemExit(str(err)) from None
    return bundle, classifier, stats


def select(settings: list[Setting], only: str | None) -> list[Setting]:
    if not only:
        return settings
    words = [w.strip() for w in only.split(",") if w.strip()]
    return [s for s in settings if s.rule is None or any(w in s.label for w in words)]


def machine(device: torch.device, world: int) -> str:
    """One line: CPU model and cores or GPU name, process count, torch version."""
    if device.type == "cuda":
        hw = torch.cuda.get_device_name(device)
    else:
        units = bf16_units()
        hw = f"{cpu_name()}, {os.cpu_count()} cores, bf16 units: {'yes (' + ', '.join(units) + ')' if units else 'no'}"
    return (f"{hw}; {world} process(es) x {torch.get_num_threads()} torch thread(s); "
            f"torch {torch.__version__}, Python {platform.python_version()}")


def launch_command(argv: list[str], world: int) -> str:
    """The command line as typed: under torchrun, the launcher's own arguments (read from its /proc entry)."""
    if world > 1:
        parent = _read(f"/proc/{os.getppid()}/cmdline").split("\0")[:-1]  # keeps empty arguments ('')
        at = next((i for i, a in enumerate(parent) if a.endswith("torchrun") or a == "torch.distributed.run"), None)
        if at is not None:
            return shlex.join(["torchrun", *parent[at + 1 :]])
        return shlex.join(["torchrun", "--nproc_per_node", str(world), "-m", "coolsd.bench", *argv])
    return shlex.join(["python", "-m", "coolsd.bench", *argv])


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def write_measurements(out: Path, rows: list[dict], records: list[dict], config: dict) -> None:
    """results.jsonl (one row per setting), items.jsonl (one line per image, no features), config.json."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.jsonl").write_text("".join(dumps(r) + "\n" for r in rows))
    slim = [{k: round(v, 6) if isinstance(v, float) else v for k, v in r.items() if k != "features"}
            for r in records]
    (out / "items.jsonl").write_text("".join(dumps(r) + "\n" for r in sorted(
        slim, key=lambda r: (r["setting_index"], r["cls"], r["seed"]))))
    (out / "config.json").write_text(json.dumps(config, indent=1, default=str) + "\n")


def read_measurements(out: Path) -> tuple[list[dict], dict]:
    """(rows, config) from results.jsonl and config.json; null numbers come back as nan."""
    if not (out / "results.jsonl").is_file():
        raise SystemExit(f"--report-only: no results.jsonl in {out}")
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    numeric = ("tau", "target_forwards", "draft_forwards", "seconds", "cpu_seconds", "speedup",
               "outside_share", "fid", "fid_std", "accuracy", "nll", "nll_se", "top1", "entropy", "top1_fg",
               "entropy_fg")
    rows = [r | {k: NAN for k in numeric if k in r and r[k] is None} for r in rows]
    return rows, json.loads((out / "config.json").read_text())


def real_noun(model: str) -> str:
    """What the FID's real images are, by the benchmark's model name ("emoji" -> pictures, MNIST -> digits)."""
    return "emoji pictures" if "emoji" in model else ("digits" if "embedded" in model or "mnist" in model
                                                     else "images")


def write_report(out: Path, rows: list[dict], config: dict, png: bool) -> dict[str, str]:
    """claims.json, pareto.html/.png and results.md, all from the rows; returns the Markdown parts
    (run, targets, claims, table)."""
    found_claims, found_targets = report.claims(rows), report.targets(rows)
    (out / "claims.json").write_text(dumps({"claims": found_claims, "targets": found_targets}) + "\n")
    n = max((r["n_images"] for r in rows), default=0)
    fig = report.figure(rows, f"{config['model']}: quality vs speed ({n} images per setting, "
                              f"FID against {rows[0]['n_real']} real {real_noun(config['model'])})")
    fig.write_html(out / "pareto.html", include_plotlyjs="cdn")
    if png and (skipped := write_png(fig, out / "pareto.png")):
        log.warning("%s", skipped)
    parts = {
        "run": f"Command: `{config['command']}`  \nMachine: {config['machine']}  \n"
               + (f"Execution: {config['execution']}"
                  + (f", path {config['execution_path']}" if config.get("execution_path") else "")
                  + "  \n" if config.get("execution") else "")
               + f"Wall time: {config['wall_minutes']:.1f} min",
        "targets": "Targets:\n\n" + (report.targets_markdown(found_targets) or "- not measured"),
        "claims": "Paper claims on this model:\n\n" + report.claims_markdown(found_claims),
        "table": report.table(rows),
        "limit": "Step against the machine's limit, eager and fused paths:\n\n" + limit_table.markdown(config["limit"])
                 if config.get("limit") else "",
        "time": report.time_split_markdown(report.time_split(rows, config.get("limit")),
                                           (config.get("limit") or {}).get("execution_path", "")),
    }
    (out / "results.md").write_text("\n\n".join(p for p in parts.values() if p) + "\n")
    return parts


def update_readme(readme: Path, body: str) -> None:
    """Replace the text between the bench markers (create the file, or append the markers, if needed)."""
    section = f"{README_START}\n{body.rstrip()}\n{README_END}"
    text = readme.read_text() if readme.is_file() else ""
    if README_START in text and README_END in text:
        head, rest = text.split(README_START, 1)
        text = head + section + rest.split(README_END, 1)[1]
    else:
        text = (text.rstrip() + "\n\n" if text else "") + section + "\n"
    readme.write_text(text)


def readme_section(parts: dict[str, str], out: Path, readme: Path, notes: Path | None) -> str:
    """Headline first (run, targets, claims, figure), then the full table, then the hand-written notes."""
    rel = os.path.relpath(out, readme.resolve().parent)
    parts = ["## Benchmark: speed against quality",
             "Made by `python -m coolsd.bench` (all numbers below come from its files in "
             f"[`{rel}/`]({rel}/); the interactive figure is `{rel}/pareto.html`). "
             "FID = Frechet distance in the shipped digit classifier's 128-d feature space against held-out real "
             "digits (± = bootstrap spread over the generated images; biased upwards at small N, compare at equal N). "
             "acc = classifier accuracy on the requested class. NLL = target's mean NLL (nats/token) of the "
             "generated tokens under the processed p (± standard error over images). "
             f"Speed-up, the one speed statistic reported everywhere: {report.SPEEDUP_NAME}; the images are "
             "decoded interleaved (every setting of one image in a row) and each process's first image is a "
             "warm-up, kept for quality, left out of every speed number. CPU time, because on a shared "
             "machine other processes stretch wall time but not this single-threaded process's CPU time. "
             "s / img = wall seconds per timed image, CPU s / img the process CPU seconds. "
             "outside fwd = share of wall time spent outside draft and target forwards.",
             parts["run"], parts["targets"], parts["claims"], f"![Pareto figure]({rel}/pareto.png)",
             # the table names its file (tests/app/test_docs_figures.py checks every figure against it)
             f"<!-- figures from: {os.path.relpath(out.resolve(), ROOT)}/results.jsonl -->\n" + parts["table"]]
    if notes is not None and notes.is_file():
        parts.append(notes.read_text().strip())
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if not log.handlers:  # our messages only; libraries keep their own logging settings
        log.addHandler(logging.StreamHandler())
        log.setLevel(logging.INFO)
    if args.report_only:
        publish(args, *read_measurements(args.out))
        return 0
    torch.set_num_threads(args.threads)
    procs = init_processes()
    if args.device:
        device = torch.device(args.device)
    else:
        device = torch.device(f"cuda:{procs.local_rank}" if torch.cuda.is_available() else "cpu")
    sampling_overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(SamplingConfig)
                          if getattr(args, f.name) is not None}
    try:
        settings = select(sweep(args.draft_len, args.lantern_k, args.lantern_lam, args.lantern_gstar,
                                args.uniform_delta, args.cool_delta, args.cool_nu, args.cool_unclipped_delta,
                                args.extra, args.jacobi_window, args.sjd_reuse, args.no_drafter), args.only)
        bundle, classifier, stats = load_bundle(args, device)
        if args.classes is None:
            args.classes = list(range(len(bundle.class_names) or 10))
        if args.seeds < 1 or not args.classes:
            raise ValueError("need at least one class and --seeds >= 1")
        sampling = dataclasses.replace(bundle.default_sampling, **sampling_overrides)
    except ValueError as err:
        close_processes(procs)
        raise SystemExit(f"python -m coolsd.bench: {err}") from None
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    items = work_items(len(settings), args.classes, seeds)
    mine = rank_slice(items, procs.rank, procs.world)
    if procs.is_main:
        log.info("%d settings x %d classes x %d seeds = %d images on %d process(es)", len(settings),
                 len(args.classes), len(seeds), len(items), procs.world)
    t0 = time.perf_counter()
    records = run_items(bundle, settings, mine, sampling, classifier, procs.rank, args.warmup,
                        progress=procs.is_main and not args.quiet)
    records = gather(records, procs)
    wall_minutes = (time.perf_counter() - t0) / 60
    if procs.is_main:
        config = {"command": launch_command(argv, procs.world), "machine": machine(device, procs.world),
                  "model": bundle.name, "execution": bundle.execution, "execution_path": bundle.path,
                  "limit": limit_table.measure(bundle, args.draft_len) if device.type == "cpu" else None,
                  "args": vars(args),
                  "sampling": dataclasses.asdict(sampling),
                  "settings": [s.describe(bundle.neighbours) for s in settings], "world": procs.world,
                  "wall_minutes": wall_minutes}
        rows = report.summarise(records, settings, bundle.neighbours, stats, args.fid_bootstrap)
        write_measurements(args.out, rows, records, config)
        publish(args, rows, config)
    close_processes(procs)
    return 0


def publish(args, rows: list[dict], config: dict) -> None:
    """Report files from the rows, then the README section."""
    parts = write_report(args.out, rows, config, args.png)
    if args.readme is not None:
        update_readme(args.readme, readme_section(parts, args.out, args.readme, args.notes))
    log.info("%s", "\n\n".join(parts.values()))
