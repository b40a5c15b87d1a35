"""The Race tab's one line on when relaxation pays, with the numbers of the race on show.

Relaxation raises the accepted length only where the target hesitates between look-alike codes; a target sure of
one code at every position leaves nothing to relax. The line quotes the race on show (its stats JSON: the table
beside it): Eagle-1's and a relaxed racer's tau and speed-up, at the race's draft length. Where the race ran at the
settings of its model's shipped benchmark (`python -m coolsd.bench`: the same draft length, sampling and rule
settings), it adds the benchmark's taus and the target's mean top-1 probability on its own vanilla samples, naming
those settings; otherwise it quotes no benchmark, so every number it names is one measured at the race's settings.
When the relaxed racer is COOL-SD at a δ at or past where its model's δ sweep says pictures break
(`coolsd.app.sweep_view.breaking_delta`), it ends with that cost: the sweep's recognition at the nearest swept δ
against vanilla AR's (the Quality lab draws the sweep).
"""

from __future__ import annotations

from pathlib import Path

from coolsd.app import sweep_view
from coolsd.app.how import read_bench
from coolsd.util.format import number, percent
from coolsd.util.paths import BENCH_DIR, EMOJI_DIR

# picker model key -> (its name on the page, its shipped benchmark folder)
SHIPPED_BENCHES = {"emoji": ("emoji", EMOJI_DIR / "bench"), "mnist": ("MNIST", BENCH_DIR)}
LEAD = ("**When relaxation pays:** when the target hesitates between look-alike codes, not when it is sure of one. "
        "A draft that picks a look-alike of the target's favourite fails Eagle-1's test and passes a relaxed one")
EAGLE, VANILLA = "eagle-1", "vanilla"
SWEEP_KINDS = {"emoji": "emoji", "mnist": "embedded"}  # picker model key -> its delta sweep's model kind
KNOBS = (("delta", "δ"), ("k", "k"), ("lam", "λ"), ("window", "W"))  # rule settings a racer's name shows


def bench_runs(folder: Path) -> list[tuple[dict, list[dict]]]:
    """[(config, rows)] of the benchmark in `folder`; [] when it is missing or broken."""
    try:
        return [read_bench(folder)]
    except (OSError, ValueError):
        return []


def relaxed_key(decoders: dict) -> str | None:
    """The relaxed racer the line quotes: COOL-SD when it raced, else the first racer that is neither Eagle-1 nor
    vanilla AR (None when there is none)."""
    others = [k for k in decoders if k not in (EAGLE, VANILLA)]
    return "cool-sd" if "cool-sd" in others else (others[0] if others else None)


def racer_name(decoders: dict, rules: dict, key: str) -> str:
    """"COOL-SD (δ = 2)": the racer's label (stats "decoder") and the rule settings that tell its relaxation."""
    config = rules.get(key) or {}
    knobs = ", ".join(f"{sign} = {config[name]:g}" for name, sign in KNOBS if isinstance(config.get(name), int | float))
    return decoders[key]["decoder"] + (f" ({knobs})" if knobs else "")


def race_clause(stats: dict) -> str | None:
    """"in the race on show (L = 3) COOL-SD (δ = 2) accepted τ 3.10 vs Eagle-1's 2.20 and ran at 1.41× vs 1.10×
    vanilla AR's speed" from a race's stats JSON ("so far" while it is not finished); None without Eagle-1, a
    relaxed racer or their numbers."""
    decoders, settings = stats.get("decoders") or {}, stats.get("settings") or {}
    key = relaxed_key(decoders)
    if EAGLE not in decoders or key is None:
        return None
    eagle, relaxed = decoders[EAGLE], decoders[key]
    if eagle.get("mean_accepted_length") is None or relaxed.get("mean_accepted_length") is None:
        return None
    chain = settings.get("drafting", "chain") == "chain"
    where = [f"L = {settings['draft_len']}" if chain and "draft_len" in settings else settings.get("drafting")]
    where += ["same noise"] if settings.get("noise") == "same" else []  # (Eagle-1's test is then the coupled one)
    where += [] if all(d.get("finished") for d in decoders.values()) else ["so far"]
    speed = ""
    if eagle.get("speedup") is not None and relaxed.get("speedup") is not None:
        speed = f" and ran at {number(relaxed['speedup'])}× vs {number(eagle['speedup'])}× vanilla AR's speed"
    shown = ", ".join(str(w) for w in where if w)
    return (f"in the race on show{f' ({shown})' if shown else ''} "
            f"{racer_name(decoders, settings.get('rules') or {}, key)} "
            f"accepted τ {number(relaxed['mean_accepted_length'])} vs Eagle-1's "
            f"{number(eagle['mean_accepted_length'])}{speed}")


def matching_rows(runs: list[tuple[dict, list[dict]]], settings: dict) -> list[dict]:
    """The chain-drafting rows of the benchmark runs whose sampling and noise are the race's and whose draft length
    is the race's (vanilla AR rows, draft length 0, included); [] for a race that did not draft by chain. A run or a
    race that names no noise ran one stream."""
    if settings.get("drafting", "chain") != "chain":
        return []
    return [r for config, rows in runs if config.get("sampling") == settings.get("sampling")
            and config.get("noise", "stream") == settings.get("noise", "stream") for r in rows
            if r.get("tree") is None and r.get("draft_len") in (0, settings.get("draft_len"))]


def bench_clause(name: str, runs: list[tuple[dict, list[dict]]], stats: dict) -> str | None:
    """"the shipped emoji benchmark at these settings (L = 2, 200 images a setting): τ 2.22 vs Eagle-1's 1.88, the
    target's top-1 probability 0.75 on its own samples", or None unless the benchmark ran the race's draft length,
    sampling and the rule settings of both racers the race clause quotes."""
    decoders, settings = stats.get("decoders") or {}, stats.get("settings") or {}
    rules, key = settings.get("rules") or {}, relaxed_key(decoders)
    rows = matching_rows(runs, settings)
    found = {k: next((r for r in rows if r.get("rule_config") == rules.get(k)), None) for k in (EAGLE, key)}
    if key is None or None in found.values() or any(r.get("tau") is None for r in found.values()):
        return None
    eagle, relaxed = found[EAGLE], found[key]
    sure = next((r["top1"] for r in rows if r.get("rule_config") is None and r.get("top1") is not None), None)
    top1 = f", the target's top-1 probability {number(sure, '.2f')} on its own samples" if sure is not None else ""
    images = f", {relaxed['n_images']} images a setting" if relaxed.get("n_images") else ""
    speed = ""
    if relaxed.get("speedup") is not None and eagle.get("speedup") is not None:  # (another clock than the race's)
        speed = (f", speed-up {number(relaxed['speedup'])}× vs {number(eagle['speedup'])}× (whole pictures' CPU "
                 "time; the race counts each racer's rounds' compute time)")
    return (f"the shipped {name} benchmark at these settings (L = {settings['draft_len']}{images}): "
            f"τ {number(relaxed['tau'])} vs Eagle-1's {number(eagle['tau'])}{speed}{top1}")


def cost_clause(stats: dict, sweep: dict | None) -> str | None:
    """"but δ = 1024 is past where the δ sweep says emoji pictures break (δ ≥ 64): there COOL-SD's pictures were
    recognised 56 % of the time against vanilla AR's 89 % (64 samples a point, the Quality lab)" when the race's
    relaxed racer is COOL-SD at a δ at or past the sweep's breaking δ; None otherwise (no sweep, no break, another
    racer, a δ below it)."""
    decoders, rules = stats.get("decoders") or {}, (stats.get("settings") or {}).get("rules") or {}
    key = relaxed_key(decoders)
    delta = (rules.get(key) or {}).get("delta") if key == "cool-sd" else None
    breaks = sweep_view.breaking_delta(sweep)
    if not isinstance(delta, int | float) or breaks is None or delta < breaks:
        return None
    near, vanilla = sweep_view.nearest(sweep, delta), sweep_view.reference(sweep, None)
    if vanilla is None or near.get("recognition") is None or vanilla.get("recognition") is None:
        return None
    at = "" if near["delta"] == delta else f" (the swept δ nearest, {near['delta']:g})"
    return (f"but δ = {delta:g} is past where the δ sweep says pictures break (δ ≥ {breaks:g}): there{at} COOL-SD's "
            f"pictures were recognised {percent(near['recognition'])} of the time against vanilla AR's "
            f"{percent(vanilla['recognition'])} ({sweep['samples']} samples a point; the Quality lab draws it)")


def lesson_markdown(stats: dict | None = None, benches: dict = SHIPPED_BENCHES) -> str:
    """The line for the race on show (`stats`: its stats JSON, `RaceFrame.stats`; None: no race): the lead, the
    race's own numbers, then its model's benchmark numbers when it ran at the benchmark's settings."""
    stats = stats if isinstance(stats, dict) else {}
    clauses = [race_clause(stats)]
    model = (stats.get("settings") or {}).get("model")
    if clauses[0] and model in benches:
        name, folder = benches[model]
        clauses.append(bench_clause(name, bench_runs(folder), stats))
    said = [c for c in clauses if c]
    if not said:
        return LEAD + "."
    source = " (`python -m coolsd.bench`; How it works has the tables)" if len(said) > 1 else ""
    cost = cost_clause(stats, sweep_view.load(SWEEP_KINDS[model])) if model in SWEEP_KINDS else None
    return f"{LEAD}: {'; '.join(said)}{source}" + (f"; {cost}." if cost else ".")
