"""Turns per-image records into per-setting rows, the paper's claims, the targets, a table and a figure.

Nothing here decodes: inputs are the JSON-ready records of `coolsd.bench.runner`.
Speed-up (the one speed statistic, everywhere): SPEEDUP_NAME below, i.e. total process CPU seconds of
vanilla AR / total process CPU seconds of the setting over the SAME (class, seed) images, measured in
the same run, warm-up images (`warm_up`, each process's first image) left out. CPU time rather than
wall time because on a shared machine other processes stretch wall time but not this process's CPU
time (decoding is single-threaded); wall seconds per image are reported beside it.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections import defaultdict

import numpy as np

from coolsd.bench.settings import VANILLA, Setting
from coolsd.compare.metrics import fid_bootstrap_std, fid_from_features
from coolsd.decoding import variants
from coolsd.decoding.drafting import Jacobi
from coolsd.util.figures import QUALITY, pareto_figure
from coolsd.util.format import number, shown

NAN = float("nan")
SPEEDUP_NAME = "speed-up = ratio of total CPU time (vanilla AR / setting, same images, warm-up excluded)"


# ---------------------------------------------------------------- per-setting rows
def summarise(records: list[dict], settings: list[Setting], neighbours, real_stats,
              fid_bootstrap: int = 20) -> list[dict]:
    """One row per setting (in settings order); records of any rank order are sorted first (deterministic).

    tokens_sha: one digest of every image's token digest, in (class, seed) order: equal digests, equal images.
    """
    mu_real, sigma_real, n_real = real_stats
    by_setting: dict[int, list[dict]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r["setting_index"], r["cls"], r["seed"])):
        by_setting[r["setting_index"]].append(r)
    vanilla_index = next((i for i, s in enumerate(settings) if s.rule is None), None)
    timed = {(r["cls"], r["seed"]) for r in by_setting.get(vanilla_index, []) if not r.get("warm_up", False)}
    vanilla_cpu = {(r["cls"], r["seed"]): r["cpu_s"] for r in by_setting.get(vanilla_index, [])}
    rows = []
    for i, setting in enumerate(settings):
        recs = by_setting.get(i, [])
        n = len(recs)
        row = setting.describe(neighbours) | {"n_images": n, "n_real": n_real}
        if n == 0:
            rows.append(row)
            continue
        tokens = sum(r["num_tokens"] for r in recs)
        wall = sum(r["wall_s"] for r in recs)
        forwards = sum(r["draft_s"] + r["verify_s"] for r in recs)
        speed = [r for r in recs
                 if not r.get("warm_up", False) and (vanilla_index is None or (r["cls"], r["seed"]) in timed)]
        features = np.array([r["features"] for r in recs])
        row |= {
            "tau": tokens / sum(r["target_forwards"] for r in recs),
            "target_forwards": sum(r["target_forwards"] for r in recs) / n,
            "draft_forwards": sum(r["draft_forwards"] for r in recs) / n,
            "n_timed": len(speed),
            "seconds": sum(r["wall_s"] for r in speed) / len(speed) if speed else NAN,
            "cpu_seconds": sum(r["cpu_s"] for r in speed) / len(speed) if speed else NAN,
            "speedup": (sum(vanilla_cpu[(r["cls"], r["seed"])] for r in speed) / sum(r["cpu_s"] for r in speed)
                        if speed and vanilla_index is not None else NAN),
            "speedup_stat": SPEEDUP_NAME,
            "outside_share": 1 - forwards / wall,
            "fid": fid_from_features(features, mu_real, sigma_real) if n >= 2 else NAN,
            "fid_std": fid_bootstrap_std(features, mu_real, sigma_real, fid_bootstrap) if n >= 2 else NAN,
            "accuracy": sum(r["pred"] == r["cls"] for r in recs) / n,
            **({"class_accuracy": sum(r["class_ok"] for r in recs) / n,
                "style_accuracy": sum(r["style_ok"] for r in recs) / n} if "class_ok" in recs[0] else {}),
            **({"likeness": sum(r["likeness"] for r in recs) / n,
                "broken": sum(r["broken"] for r in recs) / n} if "likeness" in recs[0] else {}),
            "nll": sum(r["nll"] for r in recs) / n,
            "nll_se": float(np.std([r["nll"] for r in recs], ddof=1) / math.sqrt(n)) if n >= 2 else NAN,
            **_mean_scores(recs),
            "tokens_sha": hashlib.sha1(" ".join(r["tokens_sha"] for r in recs).encode()).hexdigest()[:16],
        }
        rows.append(row)
    return rows


def _mean_scores(recs: list[dict]) -> dict[str, float]:
    """Mean over images of the target's top-1 probability and entropy before each token (all tokens, and those
    that are not plain background, weighted by their count); {} for records made before they were kept."""
    if "top1" not in recs[0]:
        return {}
    fg = [r for r in recs if r["fg_tokens"]]
    weight = sum(r["fg_tokens"] for r in fg)
    return {"top1": sum(r["top1"] for r in recs) / len(recs), "entropy": sum(r["entropy"] for r in recs) / len(recs),
            "top1_fg": sum(r["top1_fg"] * r["fg_tokens"] for r in fg) / weight if weight else NAN,
            "entropy_fg": sum(r["entropy_fg"] * r["fg_tokens"] for r in fg) / weight if weight else NAN}


# ---------------------------------------------------------------- frontiers and claims
def pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(speed, fid) points -> the Pareto frontier (faster and lower FID are better), by speed ascending."""
    pts = sorted((p for p in points if all(map(math.isfinite, p))), key=lambda p: (-p[0], p[1]))
    front, best = [], math.inf
    for speed, fid in pts:  # fastest first: keep a point when it beats every faster point's FID
        if fid < best:
            front.append((speed, fid))
            best = fid
    return front[::-1]


def frontier_fid(front: list[tuple[float, float]], speed: float) -> float:
    """FID the frontier reaches at `speed`: linear between frontier points; below the slowest point,
    that point (it is faster and better); above the fastest, nan (not reached)."""
    if not front or speed > front[-1][0]:
        return NAN
    if speed <= front[0][0]:
        return front[0][1]
    return float(np.interp(speed, [p[0] for p in front], [p[1] for p in front]))


def _family_rows(rows: list[dict], pred) -> list[dict]:
    return [r for r in rows if r.get("n_images") and pred(r)]


def _is_chain(r: dict) -> bool:
    return r["tree"] is None


def _rule(r: dict) -> dict:
    return r["rule_config"] or {}


def _variant(r: dict) -> str | None:
    """The row's decoder variant (`coolsd.decoding.variants`): "cool-sd" is the floored default."""
    return variants.variant_of(*variants.racer_configs(r))




def _verdict(wins: int, total: int, ties: int = 0) -> str:
    """holds / does not hold / mixed (w of n); all-equal values say so instead of "does not hold"."""
    if total == 0:
        return "not measured"
    if ties == total:
        return "no difference (equal values)"
    return "holds" if wins == total else ("does not hold" if wins == 0 else f"mixed ({wins} of {total})")


def _noise(*stds: float) -> float:
    """Combined spread of a difference of two noisy values."""
    return math.sqrt(sum(s * s for s in stds if math.isfinite(s)))


def _compare_frontier(mine: list[dict], theirs: list[dict], axis: str, quality: str) -> dict:
    """For each of `theirs`, `mine`'s frontier value of `quality` at the same speed (axis: speedup or tau).

    A point counts for the claim when its value is strictly above the frontier's (margin > 0); a point
    beyond the frontier's fastest setting counts against it. `clear` counts margins above the combined
    noise (FID: bootstrap spread; NLL: standard error over images) of the point and of `mine`.
    """
    noise_key = QUALITY[quality]
    front = pareto([(r[axis], r[quality]) for r in mine])
    spread = max((r[noise_key] for r in mine if math.isfinite(r.get(noise_key, NAN))), default=NAN)
    points = []
    for r in theirs:
        f = frontier_fid(front, r[axis])
        points.append({"setting": r["setting"], axis: r[axis], quality: r[quality], "frontier": f,
                       "margin": r[quality] - f if math.isfinite(f) else NAN,
                       "noise": _noise(r.get(noise_key, NAN), spread)})
    wins = sum(1 for p in points if math.isfinite(p["margin"]) and p["margin"] > 0)
    ties = sum(1 for p in points if p["margin"] == 0)
    clear = sum(1 for p in points if math.isfinite(p["margin"]) and p["margin"] > p["noise"])
    return {"axis": axis, "quality": quality, "verdict": _verdict(wins, len(points), ties), "wins": wins,
            "clear": clear, "total": len(points), "points": points}


def claims(rows: list[dict]) -> list[dict]:
    """The paper's three claims, each judged with FID (the paper's measure) and with the target's NLL
    (far less noisy at small N) as quality, and for claims 1-2 on measured speed-up and on tau.

    1. COOL-SD's (floored at 1, the default) frontier dominates UniformRSD's: every UniformRSD point is worse than its
       frontier at its speed.
    2. COOL-SD beats LANTERN++ at equal speed-up: same test against every LANTERN++ point (chain,
       published residual).
    3. G* improves LANTERN++: at every (k, lambda), the G* residual scores lower than the published one.
    `verdict` is FID against measured speed-up; `verdicts` holds every combination.
    """
    cool, uniform, published, gstar = (_family_rows(rows, lambda r, key=key: _variant(r) == key and _is_chain(r))
                                       for key in ("cool-sd", "uniform-rsd", "lantern++", "lantern++-gstar"))
    optimal = {(_rule(r)["k"], _rule(r)["lam"]): r for r in gstar}
    out = []
    for key, text, theirs in (("cool_dominates_uniform", "COOL-SD's frontier dominates UniformRSD's", uniform),
                              ("cool_beats_lantern", "COOL-SD beats LANTERN++ at equal speed-up", published)):
        detail = {f"{q} vs {a}": _compare_frontier(cool, theirs, a, q) for q in QUALITY for a in ("speedup", "tau")}
        out.append({"claim": key, "text": text, "verdict": detail["fid vs speedup"]["verdict"],
                    "verdicts": {k: d["verdict"] for k, d in detail.items()}, "detail": detail})
    pairs = []
    for r in published:
        g = optimal.get((_rule(r)["k"], _rule(r)["lam"]))
        if g is not None:
            pairs.append({"k": _rule(r)["k"], "lam": _rule(r)["lam"], "tau_published": r["tau"], "tau_gstar": g["tau"]}
                         | {f"{q}_{kind}": x[q] for q in QUALITY for kind, x in (("published", r), ("gstar", g))}
                         | {f"{q}_noise": _noise(r.get(n, NAN), g.get(n, NAN)) for q, n in QUALITY.items()})
    detail = {"pairs": pairs}
    for q in QUALITY:
        wins = sum(p[f"{q}_gstar"] < p[f"{q}_published"] for p in pairs)
        ties = sum(p[f"{q}_gstar"] == p[f"{q}_published"] for p in pairs)
        clear = sum(p[f"{q}_published"] - p[f"{q}_gstar"] > p[f"{q}_noise"] for p in pairs)
        detail[q] = {"verdict": _verdict(wins, len(pairs), ties), "wins": wins, "clear": clear, "total": len(pairs)}
    out.append({"claim": "gstar_improves_lantern", "text": "G* improves LANTERN++ (same k and lambda)",
                "verdict": detail["fid"]["verdict"], "verdicts": {q: detail[q]["verdict"] for q in QUALITY},
                "detail": detail})
    return out


# ---------------------------------------------------------------- the issue's measured targets
def targets(rows: list[dict], cool_label: str = "cool-sd delta=2", min_speedup: float = 2.0,
            min_vs_eagle: float = 1.3, min_eagle: float = 1.6, max_fid_ratio: float = 1.10,
            max_vanilla_s: float = 1.0, max_outside: float = 0.10) -> list[dict]:
    """The benchmark's targets: COOL-SD (delta 2) and Eagle-1 speed-ups, vanilla AR CPU s / image, FID ratio,
    time outside model forwards."""
    by = {r["setting"]: r for r in rows if r.get("n_images")}
    cool, vanilla, eagle = by.get(cool_label), by.get(VANILLA), by.get("eagle-1")
    if cool is None or vanilla is None:
        return []
    checks = [(cool_label, "speed-up vs vanilla AR", cool["speedup"], ">=", min_speedup),
              (cool_label, "speed-up vs Eagle-1", cool["speedup"] / eagle["speedup"] if eagle else NAN, ">=",
               min_vs_eagle),
              ("eagle-1", "speed-up vs vanilla AR", eagle["speedup"] if eagle else NAN, ">=", min_eagle),
              (VANILLA, "CPU s / image", vanilla.get("cpu_seconds", NAN), "<=", max_vanilla_s),
              (cool_label, "FID / vanilla FID", cool["fid"] / vanilla["fid"], "<=", max_fid_ratio),
              (cool_label, "time outside model forwards", cool["outside_share"], "<=", max_outside)]
    out = []
    for setting, name, value, op, goal in checks:
        met = value >= goal if op == ">=" else value <= goal
        out.append({"target": name, "setting": setting, "value": value, "goal": f"{op} {goal:g}",
                    "met": bool(met) if math.isfinite(value) else None})
    return out


# ---------------------------------------------------------------- Markdown
MISSING = "-"  # a missing value in the tables and bullets (docs/benchmark.md is written from them)
_f = functools.partial(number, missing=MISSING)  # _f(value, spec): coolsd.util.format.number, the one formatter


def table(rows: list[dict]) -> str:
    """Markdown table, one line per setting."""
    head = ("| setting | L / tree | tau | target fwd / img | draft fwd / img | s / img | CPU s / img | speed-up "
            "| outside fwd | FID (N) | acc | NLL | target top-1 p: all / not background |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        if not r.get("n_images"):
            continue
        shape = r["tree"] or (str(r["draft_len"]) if r["draft_len"] else "-")
        fid = f"{_f(r['fid'])} ± {_f(r['fid_std'])} ({r['n_images']})"
        lines.append(f"| {r['setting']} | {shape} | {_f(r['tau'])} | {_f(r['target_forwards'], '.1f')} "
                     f"| {_f(r['draft_forwards'], '.1f')} | {_f(r['seconds'], '.3f')} "
                     f"| {_f(r.get('cpu_seconds', NAN), '.3f')} | {_f(r['speedup'])}x "
                     f"| {_f(100 * r['outside_share'], '.1f')} % | {fid} | {_accuracy(r)} "
                     f"| {_f(r['nll'], '.3f')} ± {_f(r.get('nll_se', NAN), '.3f')} "
                     f"| {_f(r.get('top1', NAN))} / {_f(r.get('top1_fg', NAN))} |")
    return "\n".join(lines)


def time_split(rows: list[dict], limit: dict | None) -> list[dict]:
    """Where a chain round's time goes, in vanilla AR steps (a step = 1: its forward plus its host work), for the
    chain settings at the limit tool's draft length, beside the ceiling the tool's cold forwards allow.

    Per setting: `tool_round` the tool's round / step on the stored path (forwards only: drafts and verify);
    `ceiling` = tau / tool_round, the speed-up if a round cost that and nothing else ran; `forwards` and `host` the
    loop's wall seconds per round inside and outside model forwards (`outside_share`), over vanilla AR's wall
    seconds per step; `round` their sum (about tau / speed-up; the speed-up is a CPU-time ratio). The vanilla row
    splits its own step. [] without a limit table or a vanilla row."""
    vanilla = next((r for r in rows if r.get("n_images") and r.get("family") == VANILLA), None)
    ratios = (limit or {}).get("ratios") or {}  # a limit table written before the ratios: none
    path = limit.get("execution_path") if limit and limit.get("execution_path") in ratios else "eager"
    if path not in ratios or vanilla is None or not shown(vanilla.get("seconds")):
        return []
    tool_round = ratios[path]["round_per_step"]
    step = vanilla["seconds"] / vanilla["target_forwards"]  # wall s per vanilla step

    def split(r: dict) -> dict:
        per_round = r["seconds"] / r["target_forwards"] / step
        return {"forwards": per_round * (1 - r["outside_share"]), "host": per_round * r["outside_share"],
                "round": per_round}

    out = [{"setting": vanilla["setting"], "tau": 1.0, "tool_round": 1.0, "ceiling": 1.0, "speedup": 1.0}
           | split(vanilla)]
    for r in rows:
        if (r.get("n_images") and r.get("family") != VANILLA and r["tree"] is None and not _jacobi(r)
                and r["draft_len"] == limit.get("draft_len") and shown(r.get("seconds"))):
            out.append({"setting": r["setting"], "tau": r["tau"], "tool_round": tool_round,
                        "ceiling": r["tau"] / tool_round, "speedup": r["speedup"]} | split(r))
    return out


def _jacobi(r: dict) -> bool:
    """A setting on Jacobi drafts (SJD, COOL-SD or LANTERN++ without a drafter): no drafter, so the tool's chain
    round is not its round."""
    _, drafting = variants.racer_configs(r)
    return (drafting or {}).get("drafting") == Jacobi.name


def time_split_markdown(split: list[dict], path: str) -> str:
    """`time_split` as a table with one line on how to read it ("" when empty)."""
    if not split:
        return ""
    lines = [f"Where a round's time goes (chain settings at the limit tool's L, path {path}; one vanilla AR step = 1, "
             "its forward plus its host work). The ceiling is tau over the tool's round: the speed-up if a round "
             "cost only its forwards, measured cold in the tool. In the loop a round's forwards cost more, and the "
             "host work (probabilities, draws, the rule's test, events) adds the rest.\n",
             "| setting | tau | tool: round / step | ceiling | loop: forwards | host work | round | speed-up |",
             "|---|---|---|---|---|---|---|---|"]
    for r in split:
        lines.append(f"| {r['setting']} | {_f(r['tau'])} | {_f(r['tool_round'])} | {_f(r['ceiling'])}x "
                     f"| {_f(r['forwards'])} | {_f(r['host'])} | {_f(r['round'])} | {_f(r['speedup'])}x |")
    return "\n".join(lines)


def _accuracy(r: dict) -> str:
    """"92 %", or "class 81 % / style 97 %" for a class + style model."""
    if "class_accuracy" in r:
        return f"class {_f(100 * r['class_accuracy'], '.0f')} % / style {_f(100 * r['style_accuracy'], '.0f')} %"
    return f"{_f(100 * r['accuracy'], '.0f')} %"


def _counts(d: dict) -> str:
    return f"{d['verdict'].split(' (')[0]} ({d['wins']} of {d['total']} better, {d['clear']} beyond noise)"


def claims_markdown(found: list[dict]) -> str:
    """One bullet per claim: verdicts by quality measure and speed axis, then the numbers per point."""
    lines = []
    for c in found:
        if c["verdict"] == "not measured":
            lines.append(f"- **{c['text']}**: not measured (the sweep has no settings to compare).")
            continue
        d = c["detail"]
        if c["claim"] == "gstar_improves_lantern":
            parts = [f"k={p['k']} lam={p['lam']:g}: FID {_f(p['fid_gstar'])} vs {_f(p['fid_published'])}, "
                     f"NLL {_f(p['nll_gstar'], '.3f')} vs {_f(p['nll_published'], '.3f')}" for p in d["pairs"]]
            lines.append(f"- **{c['text']}**: by FID {_counts(d['fid'])}; by NLL {_counts(d['nll'])}. "
                         "G* vs published residual: " + "; ".join(parts) + ".")
            continue
        verdicts = "; ".join(f"{k.replace('fid', 'FID').replace('nll', 'NLL').replace('speedup', 'speed-up')} "
                             f"{_counts(v)}" for k, v in d.items())
        fid, nll = d["fid vs speedup"]["points"], d["nll vs speedup"]["points"]
        parts = [f"{p['setting']} at {_f(p['speedup'])}x: FID {_f(p['fid'])} vs COOL-SD {_f(p['frontier'])}, "
                 f"NLL {_f(n['nll'], '.3f')} vs {_f(n['frontier'], '.3f')}" for p, n in zip(fid, nll)]
        lines.append(f"- **{c['text']}**: {verdicts}. Per point: " + "; ".join(parts) + ".")
    return "\n".join(lines)


def targets_markdown(found: list[dict]) -> str:
    lines = []
    for t in found:
        state = {True: "met", False: "missed", None: "not measured"}[t["met"]]
        lines.append(f"- {t['setting']}: {t['target']} = {_f(t['value'], '.3g')} (goal {t['goal']}): {state}")
    return "\n".join(lines)


# ---------------------------------------------------------------- figure


figure = pareto_figure  # (the one home of the drawing: coolsd.util.figures, which the app reads too)
