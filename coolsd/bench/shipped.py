"""The shipped benchmarks read back (the app's Quality lab, How it works and lesson): per model kind its folder
(`config.json` + `results.jsonl`, written by `python -m coolsd.bench`), its rows, the row of one setting; and the
COOL-SD paper's main table with the settings of ours that stand beside its methods."""

from __future__ import annotations

import json
from pathlib import Path

from coolsd.decoding import variants
from coolsd.decoding.drafting import Chain
from coolsd.util.paths import BENCH_DIR, EMOJI_DIR

FOLDERS = {"embedded": BENCH_DIR, "emoji": EMOJI_DIR / "bench"}  # ModelBundle.kind -> its shipped benchmark
RESULTS, CONFIG = "results.jsonl", "config.json"

# The paper's main table (COOL-SD, arXiv 2601.09212), as reported: (model, method, accept len,
# speed-up, FID, CLIP). Hardware and sampling settings are not stated in the paper.
PAPER = [
    ("Lumina-mGPT 7B", "Vanilla AR", 1.00, 1.00, 28.99, 0.3330),
    ("Lumina-mGPT 7B", "Eagle-1", 2.76, 2.37, 29.05, 0.3330),
    ("Lumina-mGPT 7B", "LANTERN++", 2.99, 2.48, 30.31, 0.3328),
    ("Lumina-mGPT 7B", "COOL-SD δ = 1.1", 3.11, 2.69, 30.30, 0.3325),
    ("LlamaGen-XL 775M", "Eagle-1", 2.42, 2.03, 20.97, 0.3157),
    ("LlamaGen-XL 775M", "LANTERN++", 2.67, 2.15, 21.17, 0.3157),
    ("LlamaGen-XL 775M", "COOL-SD δ = 1.1", 2.73, 2.27, 21.02, 0.3167),
    ("LlamaGen-XL 775M", "COOL-SD δ = 2", 3.34, 2.72, 21.20, 0.3154),
]
PAPER_HARDWARE = "GPU (type not stated in the paper)"


def paper_tau(model: str, method: str) -> float:
    """The paper's accept length of `method` on `model` (PAPER)."""
    return next(tau for m, name, tau, *_ in PAPER if m == model and name == method)


def no_drafter_ours(window: int) -> list[tuple[str, str, dict]]:
    """The no-drafter rows at the Jacobi window `window` the model's benchmark ran."""
    return [(f"SJD (W = {window}, no drafter)", "sjd", {"window": window}),
            (f"COOL-SD δ = 2, no drafter (W = {window})", "cool-sd-jacobi", {"delta": 2.0, "window": window})]


# Our benchmark settings beside the paper's methods: (method, variant key, rule options the row must have).
OURS = [("Vanilla AR", "vanilla", {}), ("Eagle-1", "eagle-1", {}),
        ("LANTERN++ (k = 5, λ = 10)", "lantern++", {"k": 5, "lam": 10.0}),
        ("COOL-SD δ = 2", "cool-sd", {"delta": 2.0}), ("COOL-SD δ = 8", "cool-sd", {"delta": 8.0}), *no_drafter_ours(8)]
EMOJI_OURS = [("Vanilla AR", "vanilla", {}), ("Eagle-1", "eagle-1", {}),
              ("LANTERN++ (k = 10, λ = 20)", "lantern++", {"k": 10, "lam": 20.0}),
              ("COOL-SD δ = 2", "cool-sd", {"delta": 2.0}), ("COOL-SD δ = 8", "cool-sd", {"delta": 8.0}),
              *no_drafter_ours(4)]


def read_bench(folder: Path) -> tuple[dict, list[dict]]:
    """A benchmark folder's config.json and results.jsonl rows (OSError / ValueError when missing or broken)."""
    config = json.loads((folder / CONFIG).read_text())
    return config, [r for r in map(json.loads, (folder / RESULTS).read_text().splitlines()) if r]


def bench_rows(path: Path = BENCH_DIR / RESULTS) -> list[dict]:
    """The rows (one per setting) of the results file `path`, or [] when it is absent."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def bench_sampling(path: Path) -> dict | None:
    """The sampling (SamplingConfig as a dict) the benchmark whose results are `path` ran with, read from the
    config.json beside it; None when it is missing or does not say."""
    try:
        return json.loads((path.parent / CONFIG).read_text()).get("sampling")
    except (OSError, ValueError, AttributeError):
        return None


def find_row(rows: list[dict], key: str, options: dict) -> dict | None:
    """The benchmark row (no static tree) of variant `key` whose rule or drafting config has `options` (None if
    none)."""
    for r in rows:
        rule, drafting = variants.racer_configs(r)
        config = (rule or {}) | (drafting or {})
        if (r.get("tree") is None and variants.variant_of(rule, drafting) == key
                and all(config.get(name) == value for name, value in options.items())):
            return r
    return None


def drafts_by_chain(row: dict) -> bool:
    """Whether a benchmark row is a drafter's chain (not vanilla AR, a static tree or SJD's Jacobi window)."""
    rule, drafting = variants.racer_configs(row)
    return bool(rule) and not row.get("tree") and (drafting or {}).get("drafting", Chain.name) == Chain.name


def chain_lengths(rows: list[dict]) -> list[int]:
    """The draft lengths of the rows that draft by a chain, ascending, each once."""
    return sorted({r["draft_len"] for r in rows if drafts_by_chain(r) and r.get("draft_len") is not None})


def same_setting(rows: list[dict], rule_config: dict, draft_len: int) -> list[dict]:
    """The chain rows (no static tree) that ran exactly `rule_config` at `draft_len`."""
    return [r for r in rows if r.get("rule_config") == rule_config and r.get("draft_len") == draft_len
            and not r.get("tree")]


def short_command(command: str, keep: int = 4) -> str:
    """`command` with every comma list of more than `keep` items cut to its first `keep` and a count (a benchmark
    over 300 chosen conditions names them all; a page shows "9,29,53,125,… (300 in all)")."""
    words = []
    for word in command.split(" "):
        items = word.split(",")
        words.append(",".join(items[:keep]) + f",… ({len(items)} in all)" if len(items) > keep else word)
    return " ".join(words)
