"""The Race tab's line on when relaxation pays: Eagle-1's and a relaxed racer's numbers in the race on show, in the
shipped benchmark at its settings, and the δ sweep's cost when COOL-SD's δ is past where pictures break."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from coolsd.app import sweep_view
from coolsd.app.race_view import RaceNumbers
from coolsd.bench.shipped import read_bench
from coolsd.compare.trace import TraceSettings
from coolsd.decoding.engine import DecodeConfig
from coolsd.util.format import number, percent
from coolsd.util.paths import BENCH_DIR, EMOJI_DIR

# picker model key -> (its name on the page, its shipped benchmark folder)
SHIPPED_BENCHES = {"emoji": ("emoji", EMOJI_DIR / "bench"), "mnist": ("MNIST", BENCH_DIR)}
LEAD = ("**When relaxation pays:** when the target hesitates between look-alike codes, not when it is sure of one. "
        "A draft that picks a look-alike of the target's favourite fails Eagle-1's test and passes a relaxed one")
EAGLE, VANILLA = "eagle-1", "vanilla"
SWEEP_KINDS = {"emoji": "emoji", "mnist": "embedded"}  # picker model key -> its delta sweep's model kind
KNOBS = (("delta", "δ"), ("k", "k"), ("lam", "λ"), ("window", "W"))  # rule settings a racer's name shows


@dataclass(frozen=True)
class BenchRow:
    """A benchmark results.jsonl row's fields (rule_config None: vanilla AR; tree None: chain; top1 on its samples)."""

    rule_config: dict | None = None
    draft_len: int = 0
    tree: str | None = None
    tau: float | None = None
    speedup: float | None = None
    top1: float | None = None
    n_images: int | None = None


@dataclass(frozen=True)
class BenchRun:
    """A benchmark run: its config.json's sampling and noise, its rows."""

    sampling: dict
    noise: str
    rows: list[BenchRow]

    @classmethod
    def from_json(cls, config: dict, rows: list[dict]) -> BenchRun:
        known = {f.name for f in dataclasses.fields(BenchRow)}
        return cls(config.get("sampling"), config.get("noise", DecodeConfig.noise),
                   [BenchRow(**{k: v for k, v in r.items() if k in known}) for r in rows])


def bench_runs(folder: Path) -> list[BenchRun]:
    """The benchmark run in `folder`; [] when it is missing or broken."""
    try:
        return [BenchRun.from_json(*read_bench(folder))]
    except (OSError, ValueError):
        return []


def relaxed_key(shown: RaceNumbers) -> str | None:
    """The relaxed racer the line quotes: COOL-SD, else the first other than Eagle-1 and vanilla AR, else None."""
    others = [k for k in shown.decoders if k not in (EAGLE, VANILLA)]
    return "cool-sd" if "cool-sd" in others else (others[0] if others else None)


def racer_name(shown: RaceNumbers, key: str) -> str:
    """"COOL-SD (δ = 2)": the racer's label and the rule settings that tell its relaxation."""
    config = shown.settings.rules.get(key) or {}
    knobs = ", ".join(f"{sign} = {config[name]:g}" for name, sign in KNOBS if isinstance(config.get(name), int | float))
    return shown.decoders[key].decoder + (f" ({knobs})" if knobs else "")


def race_clause(shown: RaceNumbers) -> str | None:
    """"in the race on show (L = 3) COOL-SD (δ = 2) accepted τ 3.10 vs Eagle-1's 2.20 and ran at ..." or None."""
    key, settings = relaxed_key(shown), shown.settings
    if EAGLE not in shown.decoders or key is None:
        return None
    eagle, relaxed = shown.decoders[EAGLE], shown.decoders[key]
    if eagle.mean_accepted_length is None or relaxed.mean_accepted_length is None:
        return None
    where = [f"L = {settings.draft_len}" if settings.chain else settings.drafting]
    where += ["same noise"] if settings.same_noise else []  # (Eagle-1's test is then the coupled one)
    where += [] if all(d.finished for d in shown.decoders.values()) else ["so far"]
    speed = ""
    if eagle.speedup is not None and relaxed.speedup is not None:
        speed = f" and ran at {number(relaxed.speedup)}× vs {number(eagle.speedup)}× vanilla AR's speed"
    return (f"in the race on show ({', '.join(where)}) {racer_name(shown, key)} accepted τ "
            f"{number(relaxed.mean_accepted_length)} vs Eagle-1's {number(eagle.mean_accepted_length)}{speed}")


def matching_rows(runs: list[BenchRun], settings: TraceSettings) -> list[BenchRow]:
    """The chain rows (and vanilla AR's) of the runs at the race's sampling, noise and draft length; [] off chain."""
    if not settings.chain:
        return []
    sampling = dataclasses.asdict(settings.sampling)
    return [r for run in runs if run.sampling == sampling and run.noise == settings.noise for r in run.rows
            if r.tree is None and r.draft_len in (0, settings.draft_len)]


def bench_clause(name: str, runs: list[BenchRun], shown: RaceNumbers) -> str | None:
    """"the shipped emoji benchmark at these settings (L = 2, ...): τ 2.22 vs ..." where it ran them, else None."""
    key, rules = relaxed_key(shown), shown.settings.rules
    rows = matching_rows(runs, shown.settings)
    found = {k: next((r for r in rows if r.rule_config == rules.get(k)), None) for k in (EAGLE, key)}
    if key is None or None in found.values() or any(r.tau is None for r in found.values()):
        return None
    eagle, relaxed = found[EAGLE], found[key]
    sure = next((r.top1 for r in rows if r.rule_config is None and r.top1 is not None), None)
    top1 = f", the target's top-1 probability {number(sure, '.2f')} on its own samples" if sure is not None else ""
    images = f", {relaxed.n_images} images a setting" if relaxed.n_images else ""
    speed = ""
    if relaxed.speedup is not None and eagle.speedup is not None:  # (another clock than the race's)
        speed = (f", speed-up {number(relaxed.speedup)}× vs {number(eagle.speedup)}× (whole pictures' CPU "
                 "time; the race counts each racer's rounds' compute time)")
    return (f"the shipped {name} benchmark at these settings (L = {shown.settings.draft_len}{images}): "
            f"τ {number(relaxed.tau)} vs Eagle-1's {number(eagle.tau)}{speed}{top1}")


def cost_clause(shown: RaceNumbers, sweep: dict | None) -> str | None:
    """"but δ = 1024 is past where the δ sweep says pictures break (δ ≥ 128): there ..." for COOL-SD, or None."""
    key = relaxed_key(shown)
    delta = (shown.settings.rules.get(key) or {}).get("delta") if key == "cool-sd" else None
    breaks = sweep_view.breaking_delta(sweep)
    if not isinstance(delta, int | float) or breaks is None or delta < breaks:
        return None
    near, vanilla = sweep_view.nearest(sweep, delta), sweep_view.reference(sweep, None)
    if vanilla is None or near["recognition"] is None or vanilla["recognition"] is None:
        return None
    at = "" if near["delta"] == delta else f" (the swept δ nearest, {near['delta']:g})"
    seen = (f"recognised {percent(near['recognition'])} of the time against vanilla AR's "
            f"{percent(vanilla['recognition'])}")
    if near["broken"] is not None and vanilla["broken"] is not None:
        seen = (f"called broken {percent(near['broken'])} of the time against vanilla AR's "
                f"{percent(vanilla['broken'])}, and recognised {percent(near['recognition'])} against "
                f"{percent(vanilla['recognition'])}")
    return (f"but δ = {delta:g} is past where the δ sweep says pictures break (δ ≥ {breaks:g}): there{at} COOL-SD's "
            f"pictures were {seen} ({sweep['samples']} samples a point; the Quality lab draws it)")


def lesson_markdown(stats: dict | None = None, benches: dict = SHIPPED_BENCHES) -> str:
    """The line for the race on show (`stats`: its stats JSON; None: no race)."""
    shown = RaceNumbers.from_json(stats)
    clauses = [race_clause(shown)]
    model = shown.settings.model
    if clauses[0] and model in benches:
        name, folder = benches[model]
        clauses.append(bench_clause(name, bench_runs(folder), shown))
    said = [c for c in clauses if c]
    if not said:
        return LEAD + "."
    source = " (`python -m coolsd.bench`; How it works has the tables)" if len(said) > 1 else ""
    cost = cost_clause(shown, sweep_view.load(SWEEP_KINDS[model])) if model in SWEEP_KINDS else None
    return f"{LEAD}: {'; '.join(said)}{source}" + (f"; {cost}." if cost else ".")
