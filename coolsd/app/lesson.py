"""The Race tab's one line on when relaxation pays, with the numbers of the shipped benchmarks.

Relaxation raises the accepted length only where the target hesitates between look-alike codes; a target sure of
one code at every position leaves nothing to relax. The line reads, per shipped model, the target's mean top-1
probability on its own vanilla samples and Eagle-1's and COOL-SD's tau from the benchmark's results.jsonl
(`python -m coolsd.bench`); a model whose benchmark lacks a number is left out, so the line never names a number
nobody measured.
"""

from __future__ import annotations

import json
from pathlib import Path

from coolsd.app.how import find_row, later_runs
from coolsd.util.format import number
from coolsd.util.paths import BENCH_DIR, EMOJI_DIR

# (model name on the page, its benchmark folder, the COOL-SD delta quoted)
SHIPPED_BENCHES = (("emoji", EMOJI_DIR / "bench", 2.0), ("MNIST", BENCH_DIR, 2.0))
LEAD = ("**When relaxation pays:** when the target hesitates between look-alike codes, not when it is sure of one. "
        "A draft that picks a look-alike of the target's favourite fails Eagle-1's test and passes a relaxed one")


def read_rows(folder: Path) -> list[dict]:
    """The rows of a benchmark folder's results.jsonl ([] when it is missing or unreadable), then those of the
    later runs beside it (`how.later_runs`: their vanilla AR rows may hold the target's top-1 the main run did
    not record)."""
    try:
        rows = [r for r in map(json.loads, (folder / "results.jsonl").read_text().splitlines()) if r]
    except (OSError, ValueError):
        return []
    return rows + [r for _, more in later_runs(folder) for r in more]


def model_clause(name: str, rows: list[dict], delta: float) -> str | None:
    """"on emoji (target top-1 0.62 on its own samples) COOL-SD δ = 2 accepts τ 3.10 vs Eagle-1's 2.30", or None
    when a number is missing. The top-1 (of the first vanilla AR row that has it) is left out when no run
    recorded it."""
    eagle = find_row(rows, "eagle-1", {})
    cool = find_row(rows, "cool-sd", {"delta": delta})
    if eagle is None or cool is None or eagle.get("tau") is None or cool.get("tau") is None:
        return None
    sure = next((r["top1"] for r in rows if r.get("top1") is not None and find_row([r], "vanilla", {})), None)
    hesitation = f" (target top-1 probability {number(sure, '.2f')} on its own samples)" if sure is not None else ""
    return (f"on {name}{hesitation} COOL-SD δ = {delta:g} accepts τ {number(cool['tau'])} "
            f"vs Eagle-1's {number(eagle['tau'])}")


def lesson_markdown(benches=SHIPPED_BENCHES) -> str:
    """The line: the lead, then one clause per shipped model with its measured numbers, then the source."""
    clauses = [c for name, folder, delta in benches if (c := model_clause(name, read_rows(folder), delta))]
    if not clauses:
        return LEAD + "."
    return f"{LEAD}: {'; '.join(clauses)} (shipped benchmarks, `python -m coolsd.bench`; How it works has the tables)."
