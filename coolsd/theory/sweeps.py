"""Exact speed/error trade-off of the relaxed rules on tabular models (spec section 6), for the docs and the app.

Every number here comes from the exact oracle (`coolsd.theory.oracle.exact`): no sampling, no noise.

    python -m coolsd.theory --out assets/oracle_tradeoff.png   # figure, plus the points as .json beside it
    python -m coolsd.theory --floor-out assets/floor_vs_eagle.json   # floored COOL-SD vs Eagle-1 (the How tab's)
    python -m coolsd.theory --report                            # annealed vs uniform, G* vs lossless residual,
                                                                # floored / unclipped x close / far drafts

`tradeoff_curves` sweeps one knob per rule on ONE small tabular model: UniformRSD's delta, COOL-SD's
delta (nu fixed) and LANTERN++'s lambda (k fixed); `tradeoff_figure` draws exact TV against the
expected accepted length tau, optionally marking the app's current setting. `compare` is the
comparison the spec says to report and never assert (section 3, "Why G*"); `coolsd.theory.annealing.compare_schedules`
is its matched-tau measurement of floored and unclipped COOL-SD for close and far drafts (section 3).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import sys
import time
from pathlib import Path

import torch

from coolsd.decoding import variants
from coolsd.decoding.neighbours import neighbour_table
from coolsd.decoding.rules import CoolSDRule, EagleRule, LanternPPRule, Rule, UniformRSDRule
from coolsd.theory import annealing
from coolsd.theory.oracle import OracleResult, exact, match_tau
from coolsd.theory.tabular import TabularDrafter, TabularLM, random_tables
from coolsd.util.figures import write_png

log = logging.getLogger(__name__)

# The toy model of the figure: V**T = 1024 sequences, and T = L + 2 so the first round drafts all L depths.
VOCAB_SIZE, NUM_TOKENS, DRAFT_LEN, SEED = 4, 5, 3, 0
NU = CoolSDRule.nu  # COOL-SD annealing rate, the paper's value
K = 2  # LANTERN++ neighbourhood; the toy codebook has V - 1 = 3 other codes, so k <= 2
DELTAS = (1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)  # UniformRSD and COOL-SD sweeps (delta = 1: Eagle-1 for UniformRSD)
LAMS = (1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)  # LANTERN++ sweep (lambda = 1 is Eagle-1)
COLOURS = variants.COLOURS  # one colour per decoder in every figure


# ---------------------------------------------------------------- helpers
@functools.lru_cache(maxsize=8)
def toy_models(vocab_size: int, num_tokens: int, seed: int) -> tuple[TabularLM, TabularDrafter]:
    """The tabular target P and drafter Q of `coolsd.theory.tabular.random_tables` (cached: the app asks often)."""
    return random_tables(vocab_size, num_tokens, seed)


def fit_to_toy(rule: Rule, target: TabularLM) -> tuple[Rule, str]:
    """LANTERN(++) gets the toy codebook's neighbour table, its k clamped to what the table holds.

    Returns the rule to run and a note for the legend ("" when nothing changed).
    """
    if not isinstance(rule, LanternPPRule):
        return rule, ""
    table = neighbour_table(target.codebook)
    k = min(rule.k, table.shape[-1] - 1)
    note = f" (k {rule.k} -> {k} on the toy codebook)" if k != rule.k else ""
    return dataclasses.replace(rule, k=k, neighbours=None).with_neighbours(table), note


def point(result: OracleResult, rule: Rule, **knob: float) -> dict:
    """One JSON-ready point: the rule's config, the knob swept, and the oracle's tau, TV and bound."""
    return {**knob, "tau": result.tau, "tv": result.tv, "bound": result.bound, "rule": rule.config()}


# ---------------------------------------------------------------- the sweeps
def tradeoff_curves(vocab_size: int = VOCAB_SIZE, num_tokens: int = NUM_TOKENS, draft_len: int = DRAFT_LEN,
                    seed: int = SEED, nu: float = NU, k: int = K, deltas: tuple[float, ...] = DELTAS,
                    lams: tuple[float, ...] = LAMS) -> dict:
    """Exact (tau, TV, bound) of each rule along its knob, on one tabular model.

    Args:
        vocab_size, num_tokens, seed: the tabular model (`random_tables(vocab_size, num_tokens, seed)`).
        draft_len: L, drafts per round (chain drafting).
        nu: COOL-SD's annealing rate (mu mean-normalised, so mean omega = delta).
        k: LANTERN++ neighbourhood size, fixed along the lambda sweep.
        deltas, lams: knob values of UniformRSD / COOL-SD (delta) and LANTERN++ (lambda).
    Returns:
        {"setup": the arguments, "eagle-1": point, "curves": {variant key: [point]}} for "uniform-rsd", "cool-sd"
        (floored), "cool-sd-unclipped" and "lantern++",
        each point {"delta" or "lam": value, "tau", "tv", "bound", "rule": rule.config()}; JSON-ready.
    """
    target, drafter = toy_models(vocab_size, num_tokens, seed)
    setup = {"vocab_size": vocab_size, "num_tokens": num_tokens, "draft_len": draft_len, "seed": seed, "nu": nu,
             "k": k, "deltas": list(deltas), "lams": list(lams),
             "model": f"coolsd.theory.tabular.random_tables({vocab_size}, {num_tokens}, seed={seed})"}
    lantern = LanternPPRule(k=k).with_neighbours(neighbour_table(target.codebook))
    sweeps = {
        "uniform-rsd": ("delta", deltas, lambda d: UniformRSDRule(delta=d)),
        "cool-sd": ("delta", deltas, lambda d: variants.build("cool-sd", {"delta": d, "nu": nu})),
        "cool-sd-unclipped": ("delta", deltas,
                              lambda d: variants.build("cool-sd-unclipped", {"delta": d, "nu": nu})),
        "lantern++": ("lam", lams, lambda v: dataclasses.replace(lantern, lam=v)),
    }
    curves = {}
    for name, (knob, values, make) in sweeps.items():
        curves[name] = [point(exact(target, drafter, make(v), draft_len), make(v), **{knob: v}) for v in values]
    eagle = point(exact(target, drafter, EagleRule(), draft_len), EagleRule())
    return {"setup": setup, "eagle-1": eagle, "curves": curves}


def mark_point(curves: dict, rule: Rule) -> dict:
    """The exact point of `rule` on the model and draft length of `curves` (for `tradeoff_figure(mark=...)`)."""
    s = curves["setup"]
    target, drafter = toy_models(s["vocab_size"], s["num_tokens"], s["seed"])
    fitted, note = fit_to_toy(rule, target)
    out = point(exact(target, drafter, fitted, s["draft_len"]), fitted)
    return out | {"label": f"current: {rule.name}{note}"}


def tradeoff_figure(curves: dict, mark: Rule | dict | None = None):
    """Plotly figure of exact TV(output, P) against tau, one line per rule; bounds as dotted lines (legend only).

    mark: the current setting, as a Rule (its exact point is computed on the same toy model) or a
    point dict with "tau", "tv" and optionally "label".
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    for name, points in curves["curves"].items():
        knob = "lam" if "lam" in points[0] else "delta"
        symbol = "λ" if knob == "lam" else "δ"
        text = [f"{symbol} = {p[knob]:g}" for p in points]
        colour = COLOURS.get(name)
        fig.add_trace(go.Scatter(
            x=[p["tau"] for p in points], y=[p["tv"] for p in points], mode="lines+markers", name=name,
            text=text, line={"color": colour}, legendgroup=name,
            hovertemplate="%{text}<br>tau = %{x:.3f}<br>TV = %{y:.4f}<extra>" + name + "</extra>"))
        fig.add_trace(go.Scatter(
            x=[p["tau"] for p in points], y=[p["bound"] for p in points], mode="lines", name=f"{name} bound",
            text=text, line={"color": colour, "dash": "dot"}, legendgroup=name, visible="legendonly",
            hovertemplate="%{text}<br>tau = %{x:.3f}<br>bound = %{y:.4f}<extra>" + name + "</extra>"))
    eagle = curves["eagle-1"]
    fig.add_trace(go.Scatter(x=[eagle["tau"]], y=[eagle["tv"]], mode="markers", name="eagle-1 (lossless)",
                             marker={"color": COLOURS["eagle-1"], "size": 12, "symbol": "star"},
                             hovertemplate="tau = %{x:.3f}<br>TV = %{y:.2e}<extra>eagle-1</extra>"))
    if mark is not None:
        m = mark_point(curves, mark) if isinstance(mark, Rule) else mark
        fig.add_trace(go.Scatter(x=[m["tau"]], y=[m["tv"]], mode="markers", name=m.get("label", "current"),
                                 marker={"color": "black", "size": 16, "symbol": "x"},
                                 hovertemplate="tau = %{x:.3f}<br>TV = %{y:.4f}<extra>current</extra>"))
    s = curves["setup"]
    fig.update_layout(
        title=f"Exact error vs speed on a tabular model (V={s['vocab_size']}, T={s['num_tokens']}, "
              f"L={s['draft_len']}; COOL-SD ν={s['nu']:g}, LANTERN++ k={s['k']})",
        xaxis_title="expected accepted length τ (tokens per target forward)",
        yaxis_title="TV(output, P) over whole sequences", template="plotly_white", width=900, height=560,
        legend={"x": 0.99, "y": 0.01, "xanchor": "right", "yanchor": "bottom"})  # low right: below the curves
    return fig


def display_names(fig) -> None:
    """Trace names as the app shows decoders ("UniformRSD", "COOL-SD unclipped"), not registry keys."""
    for line in fig.data:
        key, _, rest = (line.name or "").partition(" ")
        if key in variants.VARIANTS:
            name = f"{variants.VARIANTS[key].name} {rest}".strip()
            line.update(name=name, legendgroup=name)


# ---------------------------------------------------------------- the reported comparisons
def compare(n_models: int = 20, vocab_size: int = 3, num_tokens: int = 5, draft_len: int = 3,
            deltas: tuple[float, ...] = (1.1, 2.0), nu: float = NU, match_iters: int = 14) -> dict:
    """Annealed vs uniform omega at matched tau, and G* vs the lossless residual, over random tabular models.

    For each model `random_tables(vocab_size, num_tokens, seed)`, seed = 0..n_models-1, and each delta:
    COOL-SD unclipped (delta, nu) is compared with the UniformRSD whose delta gives the same tau (bisection,
    `oracle.match_tau` on [delta/4, 4 delta]), and with the same schedule and residual_kind="lossless".
    Unclipped: G* differs from the lossless residual only where omega_i < 1, which the floored default never
    has; `coolsd.theory.annealing.compare_schedules` compares the floored and the unclipped schedule.
    Returns JSON-ready fractions in [0, 1] ("annealed wins" = lower exact TV, or lower bound) with
    the means and the largest tau mismatch. Reported, never asserted (spec section 3).
    """
    setup = {"n_models": n_models, "vocab_size": vocab_size, "num_tokens": num_tokens, "draft_len": draft_len,
             "nu": nu, "deltas": list(deltas), "seeds": f"0..{n_models - 1}", "match_iters": match_iters,
             "model": f"coolsd.theory.tabular.random_tables({vocab_size}, {num_tokens}, seed)"}
    rows = []
    for delta in deltas:
        wins_tv = wins_bound = wins_gstar = 0
        sums = dict.fromkeys(("cool_tv", "uniform_tv", "cool_bound", "uniform_bound", "lossless_tv", "tau",
                              "eagle_tau", "uniform_delta"), 0.0)
        tau_gap = 0.0
        for seed in range(n_models):
            target, drafter = random_tables(vocab_size, num_tokens, seed)
            cool = exact(target, drafter, CoolSDRule(delta=delta, nu=nu, floor_at_one=False), draft_len)
            eagle = exact(target, drafter, EagleRule(), draft_len)
            matched, uniform = match_tau(lambda d: UniformRSDRule(delta=d), cool.tau, target, drafter, draft_len,
                                   low=delta / 4, high=delta * 4, iters=match_iters)
            lossless_rule = CoolSDRule(delta=delta, nu=nu, floor_at_one=False, residual_kind="lossless")
            lossless = exact(target, drafter, lossless_rule, draft_len)
            wins_tv += cool.tv < uniform.tv
            wins_bound += cool.bound < uniform.bound
            wins_gstar += cool.tv < lossless.tv
            tau_gap = max(tau_gap, abs(uniform.tau - cool.tau))
            for key, value in (("cool_tv", cool.tv), ("uniform_tv", uniform.tv), ("cool_bound", cool.bound),
                               ("uniform_bound", uniform.bound), ("lossless_tv", lossless.tv), ("tau", cool.tau),
                               ("eagle_tau", eagle.tau), ("uniform_delta", matched.delta)):
                sums[key] += value
        omega = CoolSDRule(delta=delta, nu=nu, floor_at_one=False).omega(torch.arange(1, draft_len + 1), draft_len)
        rows.append({"delta": delta, "omega": [round(w, 4) for w in omega.tolist()],
                     "annealed_lower_tv": wins_tv / n_models, "annealed_lower_bound": wins_bound / n_models,
                     "gstar_lower_tv": wins_gstar / n_models, "max_tau_gap": tau_gap}
                    | {f"mean_{k}": v / n_models for k, v in sums.items()})
    return {"setup": setup, "results": rows}


def format_report(report: dict) -> str:
    """Plain-text table of `compare`'s fractions (what docs/rules-and-theory.md quotes)."""
    s = report["setup"]
    lines = [f"{s['n_models']} random tabular models {s['model']} (seeds {s['seeds']}), "
             f"chain drafting L={s['draft_len']}, COOL-SD nu={s['nu']:g} (mu mean-normalised)"]
    for r in report["results"]:
        lines.append(
            f"delta={r['delta']:g} omega={r['omega']} mean tau={r['mean_tau']:.3f} (Eagle-1 {r['mean_eagle_tau']:.3f}, "
            f"matched uniform delta {r['mean_uniform_delta']:.3f}): "
            f"annealed beats uniform at matched tau (|tau gap| <= {r['max_tau_gap']:.1e}) in "
            f"{r['annealed_lower_tv']:.0%} of models by exact TV (mean {r['mean_cool_tv']:.4f} vs "
            f"{r['mean_uniform_tv']:.4f}), {r['annealed_lower_bound']:.0%} by bound "
            f"({r['mean_cool_bound']:.4f} vs {r['mean_uniform_bound']:.4f}); "
            f"G* beats the lossless residual in {r['gstar_lower_tv']:.0%} by exact TV "
            f"({r['mean_cool_tv']:.4f} vs {r['mean_lossless_tv']:.4f})")
    return "\n".join(lines)


# ---------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coolsd.theory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="figure (.png, .svg, .pdf or .html); its points go to .json beside it")
    parser.add_argument("--report", action="store_true", help="print annealed-vs-uniform and G*-vs-lossless fractions")
    parser.add_argument("--report-out", type=Path, help="also write the report as JSON here")
    parser.add_argument("--floor-out", type=Path, help="write floored COOL-SD against Eagle-1 (the report's last "
                        "lines, `annealing.floor_vs_eagle`, seconds) as JSON here: the How tab and the docs quote it")
    parser.add_argument("--n-models", type=int, default=20, help="random models in the report")
    parser.add_argument("--n-close", type=int, default=10, help="seeds per eps, close drafts (schedule report)")
    parser.add_argument("--n-far", type=int, default=8, help="seeds per eps, far drafts (schedule report)")
    args = parser.parse_args(argv)
    if args.out is None and not args.report and args.floor_out is None:
        parser.error("nothing to do: give --out, --report and/or --floor-out")
    torch.set_num_threads(1)  # tiny tensors: intra-op threads only add overhead
    if args.out is not None:
        start = time.perf_counter()
        curves = tradeoff_curves()
        log.info("sweeps took %.2f s", time.perf_counter() - start)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(curves, indent=1))
        fig = tradeoff_figure(curves)
        if args.out.suffix == ".html":
            fig.write_html(args.out, include_plotlyjs="cdn")
        else:
            skipped = write_png(fig, args.out, scale=2)  # kaleido >= 1 needs a Chrome/Chromium on the machine
            if skipped:
                print(skipped)
        print(f"wrote {'' if args.out.is_file() else 'no '}{args.out} and {args.out.with_suffix('.json')}")
    if args.floor_out is not None:
        versus_eagle = annealing.floor_vs_eagle(n_models=args.n_models)
        args.floor_out.write_text(json.dumps(versus_eagle, indent=1) + "\n")
        print(annealing.format_floor_vs_eagle(versus_eagle))
        print(f"wrote {args.floor_out}")
    if args.report:
        report = compare(n_models=args.n_models)
        print(format_report(report))
        schedules = annealing.compare_schedules(n_close=args.n_close, n_far=args.n_far)
        print(annealing.format_schedules(schedules))
        versus_eagle = annealing.floor_vs_eagle(n_models=args.n_models)
        print(annealing.format_floor_vs_eagle(versus_eagle))
        if args.report_out is not None:
            args.report_out.write_text(json.dumps(report | {"schedules": schedules, "floor_vs_eagle": versus_eagle},
                                                  indent=1))
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    raise SystemExit(main())
