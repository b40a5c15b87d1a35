"""The Lab's precomputed δ sweep (`coolsd.bench.delta_sweep` files) with the race's δ marked: the figure, words
whose every number is read from the file, and a picture sheet of its samples. API: delta_sweep."""

from __future__ import annotations

import math
import threading

import gradio as gr
from PIL import Image

from coolsd.app.context import APP_MODEL, Context, user_errors
from coolsd.app.plots import LIGHT_LAYOUT
from coolsd.app.settings import specs
from coolsd.bench.delta_sweep import SWEEPS, breaking_delta, load, nearest, reach, read_tokens, reference, swept
from coolsd.compare.likeness import BROKEN_BELOW
from coolsd.util.checks import plain
from coolsd.util.format import number
from coolsd.util.jsonsafe import json_safe
from coolsd.util.paths import ROOT
from coolsd.util.sheet import Sheet

COOL = "#d62728"  # COOL-SD's line
RACE = "#1f77b4"  # the race's delta
BAND = "rgba(120, 120, 120, 0.18)"  # vanilla AR's band
PANELS = (("tau", "τ (tokens per target forward)"), ("speedup", "speed-up vs vanilla AR (×)"),
          ("fid", "FID (lower is better)"), ("recognition", "recognised (the class asked for)"),
          ("broken", f"called broken (likeness below {BROKEN_BELOW})"), ("nll", "target NLL, nats/token"))
SHARES = ("recognition", "broken")  # the panels of shares, drawn with their Wilson intervals
CELL = 56  # pixels per picture in the sheet
LABEL_W = 150


# ---------------------------------------------------------------- words
def _d(value) -> str:
    return f"{value:g}"


def range_sentence(sweep: dict | None) -> str:
    """"From δ = 64 on, every swept δ (up to 256) has ...": where pictures break, from the sweep."""
    if not sweep:
        return "This model has no precomputed δ sweep."
    top, n, b = reach(sweep), sweep["samples"], sweep["breaks"]
    what = [name for key, name in (("fid", "FID above"), ("recognition", "recognition below"),
                                   ("broken", "more pictures called broken than"))
            if b[key] is not None and b[key] == b["picture"]]
    if b["picture"] is not None:
        return (f"From δ = {_d(b['picture'])} on, every swept δ (up to {_d(top)}) has {' and '.join(what)} vanilla "
                f"AR's band ({n} samples a point).")
    nll = f" The target's NLL of the pictures rises beyond it from δ = {_d(b['nll'])}." if b["nll"] else ""
    return (f"No swept δ up to {_d(top)} moved FID or recognition beyond vanilla AR's band ({n} samples a "
            f"point): the pictures stay recognisable.{nll}")


def summary_markdown(sweep: dict | None, delta: float, kind: str = "", key: str = "") -> str:
    """The text under the figure; `kind` / `key` (model kind, picker key) name the command that makes a missing one."""
    if not sweep:
        path = SWEEPS.get(kind)
        where = f" --out {path.relative_to(ROOT)}" if path else " --out FILE"
        return ("No precomputed δ sweep for this model. Make one with "
                f"`python -m coolsd.bench.delta_sweep --model {plain(key) or 'MODEL'}{where}`.")
    near, band = nearest(sweep, delta), sweep["band"]
    low, high = band["broken"]  # the broken shares: None without likeness
    band_broken = "" if low is None else f", called broken {_pct(low)} to {_pct(high)}"
    near_broken = "" if near["broken"] is None else f", called broken {_pct(near['broken'])}"
    lines = [f"**{range_sentence(sweep)}**", "",
             f"Precomputed by `{plain(sweep['command'])}` on {plain(sweep['machine'])}, {plain(sweep['date'])}: "
             f"{sweep['samples']} samples a point (each another class, one seed each), L = {sweep['draft_len']}, "
             f"ν = {_d(sweep['nu'])}; the same samples for every δ. Grey band: vanilla AR's FID and NLL ± "
             f"{_d(sweep['band_width'])} spreads (bootstrap / standard error), its recognition's 95 % interval "
             f"(FID {number(band['fid'][0], '.1f')} to {number(band['fid'][1], '.1f')}, recognised "
             f"{_pct(band['recognition'][0])} to {_pct(band['recognition'][1])}{band_broken}). Speed-up: CPU "
             "time on that machine.",
             "", f"The race's δ = {_d(delta)}; the nearest swept point, δ = {_d(near['delta'])}: τ "
             f"{number(near['tau'], '.2f')}, speed-up {number(near['speedup'], '.2f')}×, FID "
             f"{number(near['fid'], '.1f')} ± {number(near['fid_std'], '.1f')}, recognised "
             f"{_pct(near['recognition'])}{near_broken}, NLL {number(near['nll'], '.3f')}."]
    if delta > reach(sweep) or delta < swept(sweep)[0]["delta"]:
        lines.append(f"(The race's δ lies outside the swept range, {_d(swept(sweep)[0]['delta'])} to "
                     f"{_d(reach(sweep))}.)")
    return "\n".join(lines)


def _pct(value) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.0%}"


# ---------------------------------------------------------------- the figure
def figure(sweep: dict, delta: float | None):
    """plotly figure, one panel per measure the sweep holds against δ (log axis), the race's `delta` marked."""
    from plotly.subplots import make_subplots

    panels = [(key, title) for key, title in PANELS if any(_finite(r[key]) for r in sweep["rows"])]
    rows = -(-len(panels) // 2)
    fig = make_subplots(rows=rows, cols=2, subplot_titles=[t for _, t in panels], horizontal_spacing=0.1,
                        vertical_spacing=0.12)
    breaks = breaking_delta(sweep)
    for j, (key, _) in enumerate(panels):
        at = {"row": j // 2 + 1, "col": j % 2 + 1}
        _panel(fig, sweep, key, at, legend=j == 0)
        fig.update_xaxes(title_text="δ" if j + 2 >= len(panels) else None, **at)
        if breaks is not None:
            fig.add_vline(x=breaks, line={"color": COOL, "dash": "dot", "width": 1}, **at)
        if delta is not None:
            fig.add_vline(x=delta, line={"color": RACE, "width": 2}, **at)
    if delta is not None:  # the vertical lines' names in the legend
        fig.add_trace(_marker(f"the race's δ = {_d(delta)}", "solid", True, RACE), row=1, col=1)
    if breaks is not None:
        fig.add_trace(_marker(f"pictures break: δ = {_d(breaks)}", "dot", True, COOL), row=1, col=1)
    fig.update_layout(**LIGHT_LAYOUT, height=780, margin={"l": 55, "r": 20, "t": 110, "b": 45},
                      title={"text": f"COOL-SD's δ swept: {sweep['samples']} samples a point, "
                                     f"{plain(sweep['model'])}", "font": {"size": 14}, "y": 0.985,
                             "yanchor": "top"},
                      legend={"orientation": "h", "x": 0, "y": 1.05, "yanchor": "bottom", "font": {"size": 11}})
    return fig


def _panel(fig, sweep: dict, key: str, at: dict, legend: bool) -> None:
    rows = swept(sweep)
    xs = [r["delta"] for r in rows]
    fig.add_trace(_line(rows, xs, key, legend), **at)  # (first: plotly adds no shape to an empty panel)
    if key in sweep["band"] and _finite(sweep["band"][key][0]):
        fig.add_hrect(y0=sweep["band"][key][0], y1=sweep["band"][key][1], fillcolor=BAND, line_width=0, **at)
    for ref, dash, name in ((reference(sweep, None), "dash", "vanilla AR"),
                            (reference(sweep, "eagle-1"), "dot", "Eagle-1 (lossless)")):
        if ref is not None and _finite(ref[key]):
            fig.add_hline(y=ref[key], line={"color": "#555555", "dash": dash, "width": 1}, **at)
            fig.add_trace(_marker(name, dash, legend), **at)
    fig.update_xaxes(type="log", tickvals=xs, ticktext=[_d(x) for x in xs], tickfont={"size": 10}, **at)
    if key in SHARES:
        fig.update_yaxes(tickformat=".0%", **at)


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _line(rows: list[dict], xs: list[float], key: str, legend: bool):
    """COOL-SD's values of `key` with their spreads (FID: bootstrap; NLL: standard error; shares: Wilson)."""
    import plotly.graph_objects as go

    ys = [r[key] for r in rows]
    error = None
    if key in ("fid", "nll"):
        error = {"type": "data", "array": [r["fid_std" if key == "fid" else "nll_se"] for r in rows]}
    elif key in SHARES:
        error = {"type": "data", "symmetric": False, "array": [r[f"{key}_high"] - r[key] for r in rows],
                 "arrayminus": [r[key] - r[f"{key}_low"] for r in rows]}
    return go.Scatter(x=xs, y=ys, mode="lines+markers", name="COOL-SD", legendgroup="cool", showlegend=legend,
                      line={"color": COOL}, marker={"color": COOL, "size": 7}, error_y=error,
                      hovertemplate="δ = %{x:g}<br>%{y:.3g}<extra>COOL-SD</extra>")


def _marker(name: str, dash: str, legend: bool, colour: str = "#555555"):
    import plotly.graph_objects as go

    return go.Scatter(x=[None], y=[None], mode="lines", name=name, legendgroup=name, showlegend=legend,
                      line={"color": colour, "dash": dash, "width": 1})


# ---------------------------------------------------------------- the pictures
def sheet_rows(sweep: dict, delta: float) -> list[tuple[str, str]]:
    """(label, setting) rows: vanilla AR, Eagle-1, COOL-SD nearest `delta` and at the breaking (else largest) δ."""
    rows = [("vanilla AR", reference(sweep, None)["setting"]), ("Eagle-1", reference(sweep, "eagle-1")["setting"])]
    near, top = nearest(sweep, delta), breaking_delta(sweep) or reach(sweep)
    far = next(r for r in swept(sweep) if r["delta"] == top)
    for r, tag in ((near, "nearest the race's"), (far, "breaking" if breaking_delta(sweep) else "largest swept")):
        if r["setting"] not in [s for _, s in rows]:
            rows.append((f"COOL-SD delta = {_d(r['delta'])} ({tag})", r["setting"]))  # (the font has no δ)
    return rows


def sheet(ctx: Context, sweep: dict, delta: float) -> Image.Image | None:
    """The kept samples of `sheet_rows`; None when the file keeps none or its tokens do not fit this model."""
    rows = [(label, sweep["kept"].get(setting)) for label, setting in sheet_rows(sweep, delta)]
    if any(not lines for _, lines in rows):
        return None
    try:
        grids = [[read_tokens(line) for line in lines] for _, lines in rows]
    except ValueError:
        return None
    vocab = int(getattr(ctx.model.target, "vocab_size", 0) or 0)
    if any(len(t) != ctx.model.num_tokens or (vocab and int(t.max()) >= vocab) or int(t.min()) < 0
           for g in grids for t in g):
        return None
    pictures = [ctx.decode_many(g) for g in grids]
    labels = [label.replace(" (", "\n(") for label, _ in rows]
    return layout(len(rows), max(len(p) for p in pictures)).draw(pictures, labels)


def layout(rows: int, cols: int) -> Sheet:
    return Sheet.grid(rows, cols, CELL, label_w=LABEL_W, gap=4, margin=4)


# ---------------------------------------------------------------- the handler and the layout
class _RaceDelta:
    def __repr__(self) -> str:
        return "RACE_DELTA"


RACE_DELTA = _RaceDelta()  # a handler's δ when Python code leaves it out: the race's default (never an API value)


class SweepPanel:
    """The sweep view (`numbers`: /delta_sweep); sheets are cached, so a slider move redraws only a new nearest δ."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._sheets: dict[tuple, Image.Image | None] = {}
        self._lock = threading.Lock()

    def checked(self, model, delta) -> tuple[Context, float, dict | None]:
        """(the picked model's context, the checked δ (RACE_DELTA: the race's default), its sweep or None)."""
        ctx = self.ctx.picked(model)
        spec = specs(ctx)["delta"]
        with user_errors():
            delta = spec.default if delta is RACE_DELTA else spec.check(delta)
        return ctx, delta, load(ctx.model.kind)

    def view(self, model=APP_MODEL, delta=RACE_DELTA) -> tuple:
        """(figure or None, text, picture sheet or None) of `model`'s sweep with `delta` marked."""
        ctx, delta, sweep = self.checked(model, delta)
        text = summary_markdown(sweep, delta, ctx.model.kind, ctx.model_key)
        if sweep is None:
            return None, text, None
        return figure(sweep, delta), text, self.sheet(ctx, sweep, delta)

    def sheet(self, ctx: Context, sweep: dict, delta: float) -> Image.Image | None:
        key = (ctx.model_key, id(sweep), tuple(sheet_rows(sweep, delta)))
        with self._lock:
            if key not in self._sheets:
                self._sheets = {k: v for k, v in self._sheets.items() if k[:2] == key[:2]}  # (a newer file: drop)
                self._sheets[key] = sheet(ctx, sweep, delta)
            return self._sheets[key]

    def numbers(self, model=APP_MODEL, delta=RACE_DELTA) -> dict | None:
        """The sweep file's numbers but its tokens, with "delta" and the "nearest" swept δ; None without a sweep."""
        ctx, delta, sweep = self.checked(model, delta)
        if sweep is None:
            return None
        return json_safe({k: v for k, v in sweep.items() if k != "kept"} | {"delta": delta,
                                                                            "nearest": nearest(sweep, delta)["delta"]})


def build(ctx: Context, model: gr.Dropdown, delta: gr.Slider) -> SweepPanel:
    """The sweep section (inside the Lab tab): figure, words, pictures; they follow the picker and the race's δ."""
    panel = SweepPanel(ctx)
    figure0, text0, sheet0 = panel.view()
    gr.Markdown("### What relaxation costs: COOL-SD's δ swept (precomputed)\nEach point decodes the same samples "
                "with COOL-SD at one δ; the grey band is vanilla AR's spread. Move the race's **δ** slider: its "
                "value is marked here, and the pictures below show the samples at the nearest swept δ.")
    plot = gr.Plot(figure0, label="COOL-SD's δ swept", show_label=False, elem_id="sweep-plot")
    text = gr.Markdown(text0, elem_id="sweep-text")
    pictures = gr.Image(sheet0 if sheet0 is not None else layout(1, 1).blank(), type="pil", format="png",
                        show_label=False, interactive=False, elem_id="sweep-sheet", label="sweep samples",
                        visible=sheet0 is not None)

    def show(model_key, value):
        fig, words, picture = panel.view(model_key, value)
        return fig, words, gr.Image(value=picture, visible=picture is not None)

    for source in (delta, model):
        source.change(show, [model, delta], [plot, text, pictures], api_visibility="private", show_progress="hidden",
                      trigger_mode="always_last", concurrency_id="sweep", concurrency_limit=4)

    def delta_sweep(model: str = ctx.model_key, delta: float = specs(ctx)["delta"].default) -> dict | None:
        """The precomputed δ sweep of `model` (default: the app's): the file's numbers (per setting tau, speed-up,
        FID and its spread, recognition and its interval, NLL and its standard error; vanilla AR's band; "breaks":
        the δ from which each measure stays beyond it), with `delta` (the race's) and the nearest swept δ; null
        when the model has none."""
        return panel.numbers(model, delta)

    gr.api(delta_sweep, api_name="delta_sweep")
    return panel
