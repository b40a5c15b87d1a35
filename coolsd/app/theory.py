"""The Theory tab: exact TV vs accepted length on the toy tabular model, the race's COOL-SD and LANTERN++ marked.
API: theory."""

from __future__ import annotations

import functools

import gradio as gr

from coolsd.app.context import Context, unexpected_errors
from coolsd.app.settings import check_values, make_rules, specs
from coolsd.decoding import variants
from coolsd.theory import sweeps

ID, TITLE = "theory", "Theory"
INPUTS = ("delta", "nu", "mu", "mean_omega", "lantern_k", "lantern_lambda")
INTRO = f"""
Exact numbers, no sampling: a toy tabular target and drafter (V = {sweeps.VOCAB_SIZE} codes, T = {sweeps.NUM_TOKENS}
tokens, L = {sweeps.DRAFT_LEN}) small enough to enumerate every output sequence (`coolsd.theory`). Each curve sweeps one
knob: UniformRSD's δ, COOL-SD's δ floored at 1 and unclipped (ν from the slider), LANTERN++'s λ (k ≤ {sweeps.K} on
the toy codebook). The ✕ marks are the current sliders. Lower-right is better: longer accepted runs at a smaller
total-variation error. It updates when you release a COOL-SD or LANTERN++ slider (a new ν takes a few seconds).
"""


@functools.lru_cache(maxsize=32)
def _curves(nu: float, k: int) -> dict:
    return sweeps.tradeoff_curves(nu=nu, k=k)


def theory_plot(ctx: Context, delta, nu, mu, mean_omega, lantern_k, lantern_lambda):
    import plotly.graph_objects as go

    rules = make_rules(ctx, ["cool-sd", "lantern++"], {"delta": delta, "nu": nu, "mu": mu, "mean_omega": mean_omega,
                                                        "lantern_k": lantern_k, "lantern_lambda": lantern_lambda})
    with unexpected_errors("theory plot", "the exact oracle"):
        curves = _curves(round(float(nu), 3), min(int(lantern_k), sweeps.K))
        fig = sweeps.tradeoff_figure(curves, mark=rules["cool-sd"])
        lantern = sweeps.mark_point(curves, rules["lantern++"])
    fig.add_trace(go.Scatter(x=[lantern["tau"]], y=[lantern["tv"]], mode="markers", name=lantern["label"],
                             marker={"color": variants.COLOURS["lantern++"], "size": 14, "symbol": "x-thin",
                                     "line": {"width": 3, "color": variants.COLOURS["lantern++"]}},
                             hovertemplate="tau = %{x:.3f}<br>TV = %{y:.4f}<extra>current LANTERN++</extra>"))
    sweeps.display_names(fig)
    s = curves["setup"]
    # the legend under the plot (it wraps, never over the curves); the width follows the page (phones)
    fig.update_layout(width=None, height=620, autosize=True,
                      title={"text": f"Exact error vs speed (toy model: V={s['vocab_size']}, T={s['num_tokens']}, "
                                     f"L={s['draft_len']})", "font": {"size": 14}, "x": 0.01, "xanchor": "left"},
                      legend={"orientation": "h", "x": 0, "y": -0.18, "xanchor": "left", "yanchor": "top",
                              "font": {"size": 11}},
                      margin={"l": 50, "r": 10, "t": 40, "b": 10}, xaxis={"title": {"text": "accepted length τ"}},
                      yaxis={"title": {"text": "TV(output, P)"}})
    return fig


def build(ctx: Context, controls, tab: gr.Tab) -> None:
    """The tab; `controls`: the settings column (its COOL-SD and LANTERN++ knobs are marked)."""
    gr.Markdown(INTRO)
    button = gr.Button("Update the theory plot", elem_id="theory-btn")
    plot = gr.Plot(label="exact TV vs accepted length", show_label=False, elem_id="plot-theory", min_width=300)
    table = {name: spec for name, spec in specs(ctx).items() if name in INPUTS}

    def update(delta, nu, mu, mean_omega, lantern_k, lantern_lambda):
        """The Theory tab's plot for these COOL-SD and LANTERN++ settings (checked as the race checks them)."""
        v = check_values(table, {"delta": delta, "nu": nu, "mu": mu, "mean_omega": mean_omega, "lantern_k": lantern_k,
                                 "lantern_lambda": lantern_lambda})
        return theory_plot(ctx, **v)

    c = controls
    gr.on([button.click, tab.select, c["delta"].release, c["nu"].release, c["mu"].release, c["mean_omega"].input,
           c["lantern_k"].release, c["lantern_lambda"].release], update, [c[k] for k in INPUTS], plot,
          api_name="theory", preprocess=False, concurrency_limit=1, concurrency_id="theory", trigger_mode="always_last",
          show_progress="minimal")
