"""Annealed vs uniform relaxation at matched tau (spec section 3, "COOL-SD" and "Other schedules"), exactly.

Every number comes from the exact oracle (`coolsd.theory.oracle.exact`) on small tabular models:

- `schedule_rule` builds one member of the omega-schedule family (exponential as in the paper,
  linear decay, uniform, custom list), optionally floored at 1;
- `explore` gives the schedule's exact tau, TV and bound on a toy model, per depth too, next to its
  *uniform twin*: the UniformRSD whose delta is bisected to the same tau (what the schedule
  explorer shows), drawn by `omega_figure` and `why_figure`;
- `compare_schedules` counts, over random models with close and with far drafts, how often the
  floored and the unclipped COOL-SD schedule beat their uniform twin in exact TV and in the bound
  (what `python -m coolsd.theory --report` prints; reported, never asserted).

Why the floor matters, in one line: with G*, a depth whose omega_i <= 1 already has step error 0,
so pushing omega_i below 1 buys no accuracy and only loses acceptance; and for omega_i >= 1 a
step's error is exactly the acceptance it gains over Eagle-1 (sum_x [min(q, omega p) - p]_+), so
relaxing early, where an accepted draft also opens the later depths, buys more tokens per unit of
error than relaxing late.
"""

from __future__ import annotations

import dataclasses
import itertools

import torch

from coolsd.decoding import variants
from coolsd.decoding.rules import CoolSDRule, CustomScheduleRule, EagleRule, LinearDecayRule, Rule, UniformRSDRule
from coolsd.theory.oracle import OracleResult, exact, match_tau, sequence_probs
from coolsd.theory.tabular import TabularDrafter, TabularLM, random_tables
from coolsd.util.checks import check_number

SCHEDULES = {  # kind -> formula (the explorer's choices, in this order)
    "exponential": "COOL-SD: omega_i = delta exp(-nu i - mu), mu mean-normalised",
    "linear": "linear decay: omega_i = delta (1 + s (L + 1 - 2i) / (L - 1))",
    "uniform": "UniformRSD: omega_i = delta",
    "custom": "custom: omega_i from a list",
}
SCHEDULE_VARIANTS = {"exponential": "cool-sd", "linear": "linear-decay", "uniform": "uniform-rsd", "custom": "custom"}
DRAFTS = {  # the explorer's draft models: name -> mixing weight eps of Q = (1 - eps) P + eps R (None = noisy logits)
    "toy": None, "close": 0.2, "far": 0.7,
}
CLOSE_EPS = (0.1, 0.2, 0.3, 0.35)  # "close" drafts (spec section 3's measurement)
FAR_EPS = (0.5, 0.7, 0.9)  # "far" drafts
TWIN_BRACKET = (1e-2, 1e2)  # UniformRSD delta searched in [low, high] (geometric bisection)


# ---------------------------------------------------------------- models and rules
def mixed_tables(vocab_size: int, num_tokens: int, seed: int, eps: float, sharpness: float = 1.5,
                 noise: str = "random") -> tuple[TabularLM, TabularDrafter]:
    """Target P of `random_tables(vocab_size, num_tokens, seed, sharpness)` and draft Q = (1 - eps) P + eps R.

    R (per prefix): noise="random" an independent softmax(sharpness x standard normal logits), drawn from a
    generator seeded with `seed`; noise="uniform" the uniform distribution. eps in [0, 1] (0: Q = P).
    """
    check_number("eps", eps, 0, 1)
    if noise not in ("random", "uniform"):
        raise ValueError(f"noise must be 'random' or 'uniform', got {noise!r}")
    target, _ = random_tables(vocab_size, num_tokens, seed, sharpness=sharpness)
    gen = torch.Generator().manual_seed(10_000 + seed)
    table = {}
    for length in range(num_tokens):
        for prefix in itertools.product(range(vocab_size), repeat=length):
            r = (sharpness * torch.randn(vocab_size, generator=gen, dtype=torch.float64)).softmax(-1)
            if noise == "uniform":
                r = torch.full_like(r, 1 / vocab_size)
            table[prefix] = (1 - eps) * target.table[prefix] + eps * r
    return target, TabularDrafter(table, vocab_size, num_tokens, target.codebook)


def schedule_rule(kind: str, delta: float = CoolSDRule.delta, nu: float = CoolSDRule.nu,
                  slope: float = LinearDecayRule.slope,
                  omegas: tuple[float, ...] | list[float] = CustomScheduleRule.omegas,
                  floor_at_one: bool | None = None) -> Rule:
    """One member of the omega-schedule family (variants of `coolsd.decoding.variants`, all at mean `delta`);
    invalid values raise ValueError with the rule's message.

    kind: "exponential" (COOL-SD(delta, nu), mu mean-normalised), "linear" (linear decay(delta, slope)),
    "uniform" (UniformRSD(delta); floored: UniformRSD(max(delta, 1))), "custom" (the list `omegas`).
    floor_at_one: None keeps the variant's default (COOL-SD floored at 1, the others not).
    """
    if kind not in SCHEDULES:
        raise ValueError(f"unknown schedule {kind!r}; choose one of {', '.join(SCHEDULES)}")
    key = SCHEDULE_VARIANTS[kind]
    if kind == "exponential" and floor_at_one is False:
        key = "cool-sd-unclipped"
    options = {"exponential": {"delta": delta, "nu": nu}, "linear": {"delta": delta, "slope": slope},
               "uniform": {"delta": delta}, "custom": {"omegas": omegas}}[kind]
    rule = variants.build(key, options)
    if floor_at_one is None or kind == "exponential":
        return rule
    if kind == "uniform":
        return UniformRSDRule(delta=max(delta, 1.0)) if floor_at_one else rule
    return dataclasses.replace(rule, floor_at_one=floor_at_one)



def uniform_twin(target: TabularLM, drafter: TabularLM, tau: float, draft_len: int, iters: int = 30,
                 target_probs: torch.Tensor | None = None) -> tuple[UniformRSDRule, OracleResult]:
    """The UniformRSD whose delta reaches `tau` (bisection in TWIN_BRACKET; tau is monotone in delta)."""
    low, high = TWIN_BRACKET
    return match_tau(lambda d: UniformRSDRule(delta=d), tau, target, drafter, draft_len, low=low, high=high,
                     iters=iters, target_probs=target_probs)


def summary(rule: Rule, result: OracleResult, draft_len: int) -> dict:
    """JSON-ready numbers of one exact run: config, omega_1..L, tau, TV, bound and the per-depth arrays."""
    omega = rule.omega(torch.arange(1, draft_len + 1), draft_len).tolist()
    return {"rule": rule.config(), "omega": omega, "tau": result.tau, "tv": result.tv, "bound": result.bound,
            "depth_tests": list(result.depth_tests), "depth_accepts": list(result.depth_accepts),
            "depth_bound": list(result.depth_bound)}


# ---------------------------------------------------------------- the explorer's numbers
def explore(rule: Rule, drafts: str = "toy", vocab_size: int = 4, num_tokens: int = 5, draft_len: int = 3,
            seed: int = 0, iters: int = 24) -> dict:
    """Exact numbers of `rule` and of its uniform twin (same tau) on one toy model, plus Eagle-1's.

    drafts: a key of DRAFTS ("toy": `random_tables`' noisy-logit drafter; "close"/"far": mixed drafts).
    Returns {"setup", "schedule": summary, "twin": summary | None, "eagle": summary, "below_one": [depths
    with omega_i < 1], "twin_note": why there is no twin, or ""}; JSON-ready.
    """
    if drafts not in DRAFTS:
        raise ValueError(f"unknown drafts {drafts!r}; choose one of {', '.join(DRAFTS)}")
    eps = DRAFTS[drafts]
    target, drafter = (random_tables(vocab_size, num_tokens, seed) if eps is None else
                       mixed_tables(vocab_size, num_tokens, seed, eps))
    probs = sequence_probs(target)
    result = exact(target, drafter, rule, draft_len, probs)
    eagle = exact(target, drafter, EagleRule(), draft_len, probs)
    out = {"setup": {"vocab_size": vocab_size, "num_tokens": num_tokens, "draft_len": draft_len, "seed": seed,
                     "drafts": drafts, "eps": eps},
           "schedule": summary(rule, result, draft_len), "eagle": summary(EagleRule(), eagle, draft_len),
           "twin": None, "twin_note": ""}
    out["below_one"] = [i + 1 for i, w in enumerate(out["schedule"]["omega"]) if w < 1]
    low_tau = exact(target, drafter, UniformRSDRule(delta=TWIN_BRACKET[0]), draft_len, probs).tau
    high_tau = exact(target, drafter, UniformRSDRule(delta=TWIN_BRACKET[1]), draft_len, probs).tau
    if not low_tau <= result.tau <= high_tau:
        low, high = TWIN_BRACKET
        out["twin_note"] = (f"no uniform schedule reaches tau = {result.tau:.4f} on this model "
                            f"(delta in [{low:g}, {high:g}] gives {low_tau:.4f}..{high_tau:.4f})")
        return out
    twin_rule, twin = uniform_twin(target, drafter, result.tau, draft_len, iters, probs)
    out["twin"] = summary(twin_rule, twin, draft_len) | {"delta": twin_rule.delta}
    return out


# ---------------------------------------------------------------- the explorer's figures (plotly)
COLOURS = {"schedule": "#d62728", "below": "#ff9896", "twin": "#1f77b4", "eagle": "#444444"}


def omega_figure(result: dict):
    """Bars of omega_i over depth (lighter where omega_i < 1), the twin's uniform delta and omega = 1 marked."""
    import plotly.graph_objects as go

    omega = result["schedule"]["omega"]
    depth = list(range(1, len(omega) + 1))
    fig = go.Figure()
    fig.add_trace(go.Bar(x=depth, y=omega, name="this schedule", text=[f"{w:.2f}" for w in omega],
                         marker={"color": [COLOURS["below"] if w < 1 else COLOURS["schedule"] for w in omega]},
                         hovertemplate="depth %{x}: ω = %{y:.3f}<extra></extra>"))
    if result["twin"] is not None:
        twin = f"uniform twin (δ = {result['twin']['delta']:.3f})"
        fig.add_trace(go.Bar(x=depth, y=result["twin"]["omega"], name=twin,
                             marker={"color": COLOURS["twin"], "opacity": 0.45},
                             hovertemplate="depth %{x}: ω = %{y:.3f}<extra>twin</extra>"))
    fig.add_hline(y=1, line={"color": "black", "dash": "dash"}, annotation_text="ω = 1 (Eagle-1)",
                  annotation_position="top right")
    fig.update_layout(title="ωᵢ over the draft depth i (lighter bars: ωᵢ < 1, stricter than Eagle-1)",
                      xaxis={"title": "draft depth i", "tickmode": "array", "tickvals": depth},
                      yaxis_title="ωᵢ", barmode="group", template="plotly_white", height=380,
                      legend={"orientation": "h", "y": -0.2}, margin={"t": 50})
    return fig


def why_figure(result: dict):
    """Per depth: expected acceptance tests, accepted drafts and error (bound share), schedule vs twin."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, subplot_titles=("tests per image", "accepted per image", "error spent"))
    runs = [("this schedule", result["schedule"], COLOURS["schedule"]), ("Eagle-1", result["eagle"], COLOURS["eagle"])]
    if result["twin"] is not None:
        runs.insert(1, ("uniform twin", result["twin"], COLOURS["twin"]))
    for name, r, colour in runs:
        depth = list(range(1, len(r["depth_tests"]) + 1))
        for col, key in enumerate(("depth_tests", "depth_accepts", "depth_bound"), start=1):
            fig.add_trace(go.Bar(x=depth, y=r[key], name=name, legendgroup=name, showlegend=col == 1,
                                 marker={"color": colour}, hovertemplate="depth %{x}: %{y:.4f}<extra>" + name +
                                 "</extra>"), row=1, col=col)
    fig.update_xaxes(title_text="draft depth i", tickmode="linear", dtick=1)
    fig.update_layout(barmode="group", template="plotly_white", height=340, legend={"orientation": "h", "y": -0.25},
                      margin={"t": 40})
    return fig


# ---------------------------------------------------------------- the reported comparison
def compare_schedules(n_close: int = 10, n_far: int = 8, deltas: tuple[float, ...] = (1.5, 3.0),
                      vocab_size: int = 4, num_tokens: int = 5, draft_len: int = 3, nu: float = CoolSDRule.nu,
                      close_eps: tuple[float, ...] = CLOSE_EPS, far_eps: tuple[float, ...] = FAR_EPS,
                      iters: int = 30, tau_tol: float = 1e-6, sharpness: float = 1.5, noise: str = "random") -> dict:
    """Floored and unclipped COOL-SD against the uniform twin at matched tau, for close and far drafts.

    Models: `mixed_tables(vocab_size, num_tokens, seed, eps, sharpness, noise)` for every eps of the regime and seeds
    0..n-1; each delta in `deltas`. A comparison counts only when the twin's tau is within `tau_tol`
    (the rest are listed as unmatched). "Wins" = strictly lower exact TV (or bound) than the twin.
    Returns {"setup", "rows": [{"variant", "drafts", "n", "wins_tv", "wins_bound", means..., per-depth
    means of omega, tests and bound for the schedule and its twin}]}; JSON-ready. Reported, never asserted.
    """
    setup = {k: v for k, v in locals().items()}
    shape = "" if (sharpness, noise) == (1.5, "random") else f", sharpness={sharpness:g}, noise={noise!r}"
    setup |= {"model": f"coolsd.theory.annealing.mixed_tables({vocab_size}, {num_tokens}, seed, eps{shape})",
              "draft": f"Q = (1 - eps) P + eps R, R {'uniform' if noise == 'uniform' else 'random per prefix'}",
              "mu": "mean-normalised"}
    rows = []
    for variant, floor in (("floored", True), ("unclipped", False)):
        for drafts, (n_seeds, epsilons) in (("close", (n_close, close_eps)), ("far", (n_far, far_eps))):
            row = {"variant": variant, "drafts": drafts, "n": 0, "unmatched": 0, "wins_tv": 0, "wins_bound": 0}
            sums: dict[str, float] = {}
            depth_sums = {k: [0.0] * draft_len for k in ("omega", "tests", "bound", "twin_tests", "twin_bound")}
            for eps, seed, delta in itertools.product(epsilons, range(n_seeds), deltas):
                target, drafter = mixed_tables(vocab_size, num_tokens, seed, eps, sharpness, noise)
                probs = sequence_probs(target)
                rule = CoolSDRule(delta=delta, nu=nu, floor_at_one=floor)
                cool = exact(target, drafter, rule, draft_len, probs)
                twin_rule, twin = uniform_twin(target, drafter, cool.tau, draft_len, iters, probs)
                if abs(twin.tau - cool.tau) > tau_tol:
                    row["unmatched"] += 1
                    continue
                row["n"] += 1
                row["wins_tv"] += cool.tv < twin.tv
                row["wins_bound"] += cool.bound < twin.bound
                eagle_tau = exact(target, drafter, EagleRule(), draft_len, probs).tau
                for key, value in (("tv", cool.tv), ("twin_tv", twin.tv), ("bound", cool.bound),
                                   ("twin_bound", twin.bound), ("tau", cool.tau), ("eagle_tau", eagle_tau),
                                   ("twin_delta", twin_rule.delta)):
                    sums[key] = sums.get(key, 0.0) + value
                omega = rule.omega(torch.arange(1, draft_len + 1), draft_len).tolist()
                for i in range(draft_len):
                    for key, value in (("omega", omega[i]), ("tests", cool.depth_tests[i]),
                                       ("bound", cool.depth_bound[i]), ("twin_tests", twin.depth_tests[i]),
                                       ("twin_bound", twin.depth_bound[i])):
                        depth_sums[key][i] += value
            n = max(row["n"], 1)
            row |= {f"mean_{k}": v / n for k, v in sums.items()}
            row |= {f"depth_{k}": [v / n for v in vals] for k, vals in depth_sums.items()}
            rows.append(row)
    return {"setup": setup, "rows": rows}


def format_schedules(report: dict) -> str:
    """Plain-text table of `compare_schedules` (what docs/rules-and-theory.md quotes)."""
    s = report["setup"]
    lines = [f"Annealed (COOL-SD, nu={s['nu']:g}) vs uniform at matched tau; models {s['model']}, "
             f"{s['draft']}, L={s['draft_len']}, delta in {list(s['deltas'])}; close eps {list(s['close_eps'])} "
             f"x seeds 0..{s['n_close'] - 1}, far eps {list(s['far_eps'])} x seeds 0..{s['n_far'] - 1}",
             "| schedule | drafts | annealed beats uniform: exact TV | in the bound | mean TV (annealed / uniform) "
             "| mean bound | mean tau (Eagle-1) | per-depth bound share (annealed / uniform) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        if r["n"] == 0:
            lines.append(f"| {r['variant']} | {r['drafts']} | no matched models ({r['unmatched']} unmatched) |")
            continue
        share = " / ".join(",".join(f"{b:.3f}" for b in r[k]) for k in ("depth_bound", "depth_twin_bound"))
        unmatched = f" ({r['unmatched']} unmatched)" if r["unmatched"] else ""
        lines.append(
            f"| {r['variant']} | {r['drafts']} | {r['wins_tv']} / {r['n']} ({r['wins_tv'] / r['n']:.0%}){unmatched} "
            f"| {r['wins_bound']} / {r['n']} ({r['wins_bound'] / r['n']:.0%}) "
            f"| {r['mean_tv']:.4f} / {r['mean_twin_tv']:.4f} | {r['mean_bound']:.4f} / {r['mean_twin_bound']:.4f} "
            f"| {r['mean_tau']:.3f} ({r['mean_eagle_tau']:.3f}) | {share} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- floored COOL-SD against Eagle-1
def floor_vs_eagle(n_models: int = 20, deltas: tuple[float, ...] = (1.1, 2.0), vocab_size: int = 4,
                   num_tokens: int = 5, draft_len: int = 3, nu: float = CoolSDRule.nu) -> dict:
    """How often floored and unclipped COOL-SD reach Eagle-1's tau on prefix-dependent random models.

    On tables whose p and q do not depend on the prefix, every omega_i >= 1 accepts at least as much as
    Eagle-1 at every step (a theorem, tested); with prefix-dependent tables (`random_tables(vocab_size,
    num_tokens, seed)`, seeds 0..n_models-1) it is not guaranteed: this counts it. Reported, never asserted.
    Returns {"setup", "n", "floored_at_least_eagle", "unclipped_at_least_eagle", "rows": [per model and
    delta: seed, delta, eagle_tau, floored_tau, unclipped_tau, floored_tv, unclipped_tv]}; JSON-ready.
    """
    setup = {"n_models": n_models, "deltas": list(deltas), "vocab_size": vocab_size, "num_tokens": num_tokens,
             "draft_len": draft_len, "nu": nu,
             "model": f"coolsd.theory.tabular.random_tables({vocab_size}, {num_tokens}, seed)"}
    rows = []
    for seed, delta in itertools.product(range(n_models), deltas):
        target, drafter = random_tables(vocab_size, num_tokens, seed)
        probs = sequence_probs(target)
        row = {"seed": seed, "delta": delta, "eagle_tau": exact(target, drafter, EagleRule(), draft_len, probs).tau}
        for name in ("cool-sd", "cool-sd-unclipped"):
            result = exact(target, drafter, variants.build(name, {"delta": delta, "nu": nu}), draft_len, probs)
            prefix = "floored" if name == "cool-sd" else "unclipped"
            row |= {f"{prefix}_tau": result.tau, f"{prefix}_tv": result.tv}
        rows.append(row)
    count = {v: sum(r[f"{v}_tau"] >= r["eagle_tau"] - 1e-12 for r in rows) for v in ("floored", "unclipped")}
    return {"setup": setup, "n": len(rows), "floored_at_least_eagle": count["floored"],
            "unclipped_at_least_eagle": count["unclipped"], "by_delta": floor_summary(rows, deltas), "rows": rows}


def floor_summary(rows: list[dict], deltas) -> list[dict]:
    """Per delta of `floor_vs_eagle`'s rows: models, mean tau and exact TV of each schedule (Eagle-1's tau too),
    how many models reach Eagle-1's tau, and the range of floored minus unclipped TV (what the pages quote)."""
    out = []
    for delta in deltas:
        mine = [r for r in rows if r["delta"] == delta]
        if not mine:
            continue
        mean = {key: sum(r[key] for r in mine) / len(mine) for key in mine[0] if key.endswith(("_tau", "_tv"))}
        gap = [r["floored_tv"] - r["unclipped_tv"] for r in mine]
        out.append({"delta": delta, "models": len(mine), **{f"mean_{k}": v for k, v in mean.items()},
                    **{f"{v}_at_least_eagle": sum(r[f"{v}_tau"] >= r["eagle_tau"] - 1e-12 for r in mine)
                       for v in ("floored", "unclipped")},
                    "tv_gap_min": min(gap), "tv_gap_max": max(gap)})
    return out


def format_floor_vs_eagle(report: dict) -> str:
    """One line per variant: how often its tau reached Eagle-1's; one per delta: mean tau of each, how often each
    reached Eagle-1's, mean exact TV and the range of floored minus unclipped TV over the models (what
    `python -m coolsd.theory --report` prints and the docs quote)."""
    s, n = report["setup"], report["n"]
    head = (f"COOL-SD (nu={s['nu']:g}) vs Eagle-1 on prefix-dependent models {s['model']}, seeds "
            f"0..{s['n_models'] - 1}, L={s['draft_len']}, delta in {s['deltas']}:")
    lines = [head]
    for v in ("floored", "unclipped"):
        k = report[f"{v}_at_least_eagle"]
        mean = sum(r[f"{v}_tau"] - r["eagle_tau"] for r in report["rows"]) / max(n, 1)
        lines.append(f"- {v}: tau >= Eagle-1's on {k} / {n}; mean tau - Eagle-1's tau = {mean:+.4f}")
    for d in floor_summary(report["rows"], s["deltas"]):
        lines.append(f"- delta={d['delta']:g}: mean tau floored {d['mean_floored_tau']:.3f}, unclipped "
                     f"{d['mean_unclipped_tau']:.3f}, Eagle-1 {d['mean_eagle_tau']:.3f} (at least Eagle-1's: floored "
                     f"{d['floored_at_least_eagle']} / {d['models']}, unclipped {d['unclipped_at_least_eagle']} / "
                     f"{d['models']}); mean exact TV floored {d['mean_floored_tv']:.4f}, unclipped "
                     f"{d['mean_unclipped_tv']:.4f} (floored - unclipped in [{d['tv_gap_min']:+.4f}, "
                     f"{d['tv_gap_max']:+.4f}])")
    return "\n".join(lines)
