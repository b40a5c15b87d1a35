"""The Cost model tab: where the time goes, from `coolsd.compare.cost` and this machine's call times
(`coolsd.models.timing`, measured once per model and path in the background). API: cost, cost_whatif."""

from __future__ import annotations

import math

import gradio as gr

from coolsd.app.context import APP_MODEL, Context, bad, log, named
from coolsd.app.recorded import Recordings
from coolsd.app.settings import MAX_DRAFT_LEN, RaceSettings, Spec, check_values
from coolsd.bench.shipped import PAPER
from coolsd.compare import cost
from coolsd.compare.race import fork_models
from coolsd.compare.trace import RaceTrace
from coolsd.decoding import variants
from coolsd.decoding.drafting import Chain, Jacobi
from coolsd.models.timing import forward_times
from coolsd.util.checks import plain
from coolsd.util.format import number, subscript
from coolsd.util.jsonsafe import json_safe

ID, TITLE = "cost", "Cost model"
MAX_DEPTH = MAX_DRAFT_LEN  # what-if sliders a_1..a_8; the curve is measured for 1..L + 1 tokens
REPEATS, WAIT_S = 9, 60.0  # calls per median; how long a request waits for the background measurement
PAPER_BEST = max(PAPER, key=lambda row: row[3])  # the paper's highest reported speed-up (LlamaGen-XL, COOL-SD delta 2)
INTRO = """
A chain round of L drafts costs **L c + V(L + 1)** target steps, where one *target step* is a target forward of one
token (with its CFG rows), **c** is a drafter step in target steps and **V(n)** a target forward of n tokens in
target steps. It commits **E = 1 + a₁ + a₁a₂ + … + a₁⋯a<sub>L</sub>** tokens on average (aᵢ: the acceptance rate at
draft depth i), and vanilla AR commits one token per step, so the predicted speed-up over vanilla AR is **E / (L c +
V(L + 1))**. The call times below are measured on this machine (once per model, in the background); the acceptance
comes from the race on show on the Race tab (the recorded one until you race). The prediction leaves out the image's
first and last rounds and the time spent outside model calls (sampling, the rules), so the gap to the measured
speed-up shows what those cost.
"""


def cost_specs() -> dict[str, Spec]:
    accept = {f"a_{i}": Spec(f"a{subscript(i)}", "number", 0.8, 0.0, 1.0, 0.01,
                             elem_id=f"cost-a{i}", extra={"min_width": 80}, name=f"a_{i}")  # (the API's name)
              for i in range(1, MAX_DEPTH + 1)}
    return {"memory_bound": Spec("memory-bound (V = 1: verifying L + 1 tokens costs one step)", "bool", False,
                                 elem_id="cost-memory"),
            "L": Spec("what-if L", "int", Chain.draft_len, 1, MAX_DEPTH, 1, elem_id="cost-L"),
            "c": Spec("draft cost c (target steps)", "number", 0.2, 0.0, 2.0, 0.01, elem_id="cost-c"),
            "V": Spec("verify cost V(L + 1) (target steps)", "number", 1.2, 0.5, 5.0, 0.01, elem_id="cost-v"),
            **accept}


def path_label(ctx: Context) -> str:
    """The call times' execution: "cpu, fused, bf16" (device, path, dtype from `execution` or the target)."""
    dtype = ctx.model.execution.split(" ")[0] if ctx.model.execution else getattr(ctx.model.target, "dtype", None)
    return f"{ctx.device.type}, {ctx.model.path}" + (f", {dtype}" if dtype else "")


class CostPanel:
    """The handlers (API: cost, cost_whatif); one background measurement per model variant."""

    def __init__(self, ctx: Context, recordings: Recordings | None = None) -> None:
        self.ctx, self.recordings = ctx, recordings
        self.curves, self.specs = cost.CurveCache(), cost_specs()

    def start(self, ctx: Context | None = None) -> None:
        """Begin measuring `ctx`'s call times on its own model handles (no-op once begun)."""
        ctx = ctx or self.ctx
        m = ctx.model
        defaults = RaceSettings.defaults(ctx)
        cond = ctx.check_condition(defaults.condition, defaults.style)

        def measure():
            target, drafter = fork_models(m.target, m.drafter)
            return forward_times(target, drafter, cond, guidance=m.default_sampling.cfg_scale != 1.0,
                                 max_tokens=MAX_DEPTH + 1, context=max(1, m.num_tokens // 2), repeats=REPEATS)

        self.curves.start((ctx.variant_key, path_label(ctx)), measure)

    def costs(self, ctx: Context, memory_bound: bool = False) -> cost.Costs:
        """The measured costs of `ctx`'s model (waits for the measurement; a clear error if it failed)."""
        self.start(ctx)
        try:
            times = self.curves.get((ctx.variant_key, path_label(ctx)), timeout=WAIT_S)
        except RuntimeError as err:
            log.warning("cost measurement failed: %s", err)
            raise bad(plain(str(err))[:200]) from None
        if times is None:
            raise bad("still measuring this model's call times; try again in a few seconds")
        return cost.Costs(times, memory_bound)

    def compare(self, trace, memory_bound=False, model=APP_MODEL):
        """-> (curve figure, predicted vs measured table (markdown), JSON) for the race on show, on its model: the
        session's last race (`trace`), else the recorded race of `model` (default: the app's model; JSON "race":
        "session" or "recorded"); without either, the call times of `model` alone ("race": None)."""
        memory_bound = check_values(self.specs, {"memory_bound": memory_bound})["memory_bound"]
        picked = self.ctx.picked(model)  # checked also when the race on show names the model
        source = "session" if isinstance(trace, RaceTrace) and len(trace) else None
        if source is None and self.recordings is not None:
            trace = self.recordings.trace_or_recorded(None, picked.model_key)
            source = "recorded" if trace is not None else None
        ctx = self.ctx.for_trace(trace.settings) if isinstance(trace, RaceTrace) else picked
        costs = self.costs(ctx, memory_bound)
        payload = {"model": ctx.model.name, "execution": path_label(ctx), "step_ms": costs.step_ms,
                   "draft_cost": costs.draft_cost, "memory_bound": memory_bound, "curve": costs.curve(),
                   "rows": costs.times.rows, "racers": [], "paper_speedup": PAPER_BEST[3], "race": source}
        if isinstance(trace, RaceTrace) and len(trace):
            racers = trace.replay(len(trace))
            s = trace.settings
            windows = {key: d.window for key in s.draftings if isinstance(d := s.drafting_of(key), Jacobi)}
            payload |= {"draft_len": s.draft_len, "chain": s.chain, "race_status": trace.status,
                        "race_cfg_scale": s.sampling.cfg_scale, "sjd_windows": windows,
                        "racers": cost.compare_racers(racers, costs, s.draft_len, racers[-1], s.chain, windows)}
        return curve_figure(payload), table_markdown(payload), json_safe(payload)

    def what_if(self, **values):
        """The formula at these inputs (L, a_1..a_8, c, V, memory_bound; the first L of a_i) -> (markdown, JSON)."""
        v = check_values(self.specs, values, defaults=True)
        draft_len, draft_cost, memory_bound = v["L"], v["c"], v["memory_bound"]
        if unknown := set(values) - set(self.specs):
            raise bad(f"unknown what-if input {sorted(unknown)[0]!r}; give {', '.join(WHAT_IF_NAMES)}")
        accept = [v[f"a_{i}"] for i in range(1, draft_len + 1)]
        verify = 1.0 if memory_bound else v["V"]
        try:
            e, speedup = cost.expected_tokens(accept), cost.predicted_speedup(accept, draft_cost, verify)
        except ValueError as err:
            raise bad(str(err)) from None
        out = {"draft_len": draft_len, "acceptance": accept, "draft_cost": draft_cost, "verify_cost": verify,
               "memory_bound": memory_bound, "expected_tokens": e, "predicted_speedup": speedup,
               "paper_speedup": PAPER_BEST[3]}
        text = (f"**What if:** E = {e:.3f} tokens per round for {draft_len} × {draft_cost:.3f} + {verify:.3f} = "
                f"{draft_len * draft_cost + verify:.3f} target steps → predicted speed-up **{speedup:.2f}×**"
                + (" (memory-bound: verifying L + 1 tokens costs one step)" if memory_bound else "")
                + f". The paper's best: {PAPER_BEST[3]:.2f}× ({PAPER_BEST[0]}, {PAPER_BEST[1]}, on a GPU).")
        return text, out


WHAT_IF_NAMES = ["L", *(f"a_{i}" for i in range(1, MAX_DEPTH + 1)), "c", "V", "memory_bound"]  # /cost_whatif's order


def named_what_if(panel: CostPanel):
    """`panel.what_if` with one named parameter per input, in WHAT_IF_NAMES order (the API shows the names)."""
    return named(panel.what_if, WHAT_IF_NAMES, {n: spec.default for n, spec in panel.specs.items()})


# ---------------------------------------------------------------- drawing (no maths)
def curve_figure(payload: dict):
    """Measured ms of a target forward of n tokens (bars) with V(n) in target steps, and the drafter step."""
    import plotly.graph_objects as go

    curve = payload["curve"]
    fig = go.Figure(go.Bar(x=[p["tokens"] for p in curve], y=[p["ms"] for p in curve], name="target forward",
                           text=[f"{p['steps']:.2f}×" for p in curve], marker={"color": variants.COLOURS["eagle-1"]},
                           hovertemplate="%{x} tokens: %{y:.2f} ms (%{text} a step)<extra></extra>"))
    if math.isfinite(payload["draft_cost"]):
        ends = [curve[0]["tokens"] - 0.5, curve[-1]["tokens"] + 0.5] if curve else [0.5, 1.5]
        fig.add_trace(go.Scatter(x=ends, y=[payload["draft_cost"] * payload["step_ms"]] * 2, mode="lines",
                                 name=f"drafter step: c = {payload['draft_cost']:.3f}",
                                 line={"color": variants.COLOURS["cool-sd"]}, hoverinfo="name"))
    rows = "CFG: 2 rows" if payload["rows"] == 2 else f"{payload['rows']} row"
    fig.update_layout(title=f"Measured call times ({payload['execution']}; {rows}; bar label: V(n) in target steps)",
                      xaxis={"title": "tokens per target forward n", "dtick": 1}, yaxis_title="ms per call",
                      template="plotly_white", height=360, margin={"t": 50, "b": 100},
                      legend={"orientation": "h", "yanchor": "top", "y": -0.3, "xanchor": "left", "x": 0})
    return fig


def table_markdown(payload: dict) -> str:
    """Per racer: a_i, E predicted / tokens per round measured, speed-up predicted / measured."""
    lines = [f"One target step = **{payload['step_ms']:.2f} ms** on {payload['execution']}; draft cost "
             f"c = {number(payload['draft_cost'], '.3f')}" + ("; memory-bound: V(n) = 1" if payload["memory_bound"]
                                                            else "") + "."]
    if not payload["racers"]:
        return "\n\n".join(lines + ["No race yet: run one on the Race tab, then come back (or press Compute)."])
    if payload["race"] == "recorded":
        lines.append("The race is the recorded one on show on the Race tab: its measured speed-ups are those of the "
                     "machine that recorded it (named there), the prediction uses this machine's call times.\n")
    if not payload["chain"]:
        lines.append("The last race used a static tree: the model above covers chain drafting only (and the "
                     "no-drafter racers).")
    if payload["sjd_windows"]:
        windows = ", ".join(str(w) for w in sorted(set(payload["sjd_windows"].values())))
        lines.append("SJD has no drafter, nor has any racer of the no-drafter group: an iteration is one target "
                     f"forward of W + 1 tokens, so its row uses L = W and c = 0 (W = {windows}).")
    if (payload["race_cfg_scale"] != 1.0) != (payload["rows"] == 2):
        lines.append("Note: the race's CFG setting differs from the measured rows.")
    lines += ["| decoder | a₁ … a<sub>L</sub> (race) | E predicted | tokens / round measured | speed-up predicted "
              "| measured |", "|---|---|---:|---:|---:|---:|"]
    for r in payload["racers"]:
        accept = ", ".join(f"{a:.2f}" for a in r["acceptance"]) or "–"
        lines.append(f"| {r['decoder']} | {accept} | {number(r['expected_tokens'], '.3f')} | "
                     f"{number(r['measured_tokens_per_round'], '.3f')} | "
                     f"{number(r['predicted_speedup'], '.2f', '×')} | {number(r['measured_speedup'], '.2f', '×')} |")
    gaps = [(r["decoder"].split(" (")[0], r["measured_over_predicted"]) for r in payload["racers"][:-1]
            if math.isfinite(r["measured_over_predicted"])]
    if gaps:
        lines.append("\nMeasured ÷ predicted: " + "; ".join(f"{name} {number(g, '.2f')}" for name, g in gaps)
                     + ". The prediction counts model calls only; the rest of each round (sampling, the rule's test, "
                     "the race's bookkeeping) and the image's first and last rounds take the difference.")
    if payload["race_status"] != "finished":
        lines.append(f"\nThe race is {payload['race_status']}: its numbers cover the part it ran.")
    lines.append(f"\nThe paper's best reported speed-up: {PAPER_BEST[3]:.2f}× ({PAPER_BEST[0]}, {PAPER_BEST[1]}, GPU).")
    return "\n".join(lines[:1]) + "\n\n" + "\n".join(lines[1:])


# ---------------------------------------------------------------- the tab
def build(ctx: Context, model: gr.Dropdown, trace: gr.State, recordings: Recordings, tab: gr.Tab) -> CostPanel:
    """The tab (call inside `gr.Tab(TITLE, id=ID)`): `model` is the picker, `trace` the race's trace state."""
    panel = CostPanel(ctx, recordings)
    gr.Markdown(INTRO)
    with gr.Row():
        memory = panel.specs["memory_bound"].component()
        button = gr.Button("Compute", variant="primary", elem_id="cost-btn")
    curve = gr.Plot(show_label=False, elem_id="cost-curve")
    table = gr.Markdown(elem_id="cost-table")
    with gr.Accordion("What if: your own acceptance and costs", open=True):
        with gr.Row():
            what_len, c, v = (panel.specs[name].component() for name in ("L", "c", "V"))
        with gr.Row():
            accept = [panel.specs[f"a_{i}"].component() for i in range(1, MAX_DEPTH + 1)]
        what_if = gr.Markdown(elem_id="cost-whatif")
    with gr.Accordion("Raw numbers (what the API returns)", open=False):
        raw = gr.JSON(label="cost", elem_id="cost-json")
        raw_if = gr.JSON(label="what if", elem_id="cost-whatif-json")

    tab.select(lambda key: panel.start(ctx.for_model(key)), model, None, api_visibility="private", queue=False)
    gr.on([button.click, tab.select, memory.input], panel.compare, [trace, memory, model], [curve, table, raw],
          api_name="cost", preprocess=False, concurrency_limit=1, concurrency_id="cost", show_progress="minimal")
    what_inputs = [what_len, *accept, c, v, memory]
    gr.on([x.release for x in (what_len, c, v, *accept)] + [memory.input, tab.select], named_what_if(panel),
          what_inputs, [what_if, raw_if], api_name="cost_whatif", preprocess=False, concurrency_limit=4,
          concurrency_id="cost_whatif", show_progress="hidden")
    return panel
