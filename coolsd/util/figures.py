"""Figures drawn from result rows that more than one layer shows: the benchmark's Pareto figure (written by
`python -m coolsd.bench`, a lab run marked on it by the app's Quality lab: `mark_run`). Drawing only, from dicts."""

from __future__ import annotations

import math
from collections import defaultdict

VANILLA = "vanilla"  # the benchmark's reference family
QUALITY = {"fid": "fid_std", "nll": "nll_se"}  # quality measure (lower is better) -> its noise estimate


def pareto_figure(rows: list[dict], title: str):
    """plotly figure, one curve per family joined in sweep order (delta, lambda ascending):
    FID (top) and the target's NLL (bottom) against measured speed-up (left) and tau (right);
    error bars = bootstrap spread of the FID, standard error of the NLL."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    titles = ("FID vs wall-clock speed-up", "FID vs mean accepted length tau",
              "target NLL vs wall-clock speed-up", "target NLL vs mean accepted length tau")
    fig = make_subplots(rows=2, cols=2, subplot_titles=titles, horizontal_spacing=0.07, vertical_spacing=0.11)
    families: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("n_images") and math.isfinite(r.get("fid", math.nan)):
            families[r["family"]].append(r)
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
               "#bcbd22", "#7f7f7f", "#393b79", "#637939"]
    for j, (family, pts) in enumerate(families.items()):
        color = "black" if family == VANILLA else palette[j % len(palette)]
        symbol = "star" if family == VANILLA else ("diamond" if "tree" in family else
                                                   "square" if family.startswith("sjd") or "jacobi" in family
                                                   else "circle")  # no drafter (Jacobi drafts): square
        for row, (quality, noise) in enumerate(QUALITY.items(), start=1):
            for col, axis in ((1, "speedup"), (2, "tau")):
                fig.add_trace(go.Scatter(
                    x=[r[axis] for r in pts], y=[r[quality] for r in pts], mode="lines+markers", name=family,
                    legendgroup=family, showlegend=(row, col) == (1, 1),
                    marker={"color": color, "symbol": symbol, "size": 8},
                    line={"color": color, "dash": "dot" if "G*" in family or "unclipped" in family else "solid"},
                    error_y={"type": "data", "array": [r.get(noise, math.nan) for r in pts], "thickness": 1,
                             "width": 2},
                    text=[r["setting"] for r in pts],
                    hovertemplate="%{text}<br>x=%{x:.2f}<br>y=%{y:.3f}<extra></extra>"), row=row, col=col)
    for row in (1, 2):
        fig.update_xaxes(title_text="speed-up vs vanilla AR (x)", row=row, col=1)
        fig.update_xaxes(title_text="tau (tokens per target forward)", row=row, col=2)
    fig.update_yaxes(title_text="offline FID (lower is better)", row=1, col=1)
    fig.update_yaxes(title_text="NLL, nats/token (lower is better)", row=2, col=1)
    fig.update_layout(title=title, template="plotly_white", width=1250, height=950, legend={"font": {"size": 11}})
    return fig


def mark_run(fig, marks: list[dict]) -> None:
    """Mark points of a run on `pareto_figure`'s panels: each mark (dict: name, group, colour, symbol, speedup, tau,
    nll, hover) is a point on the NLL panels and a dashed x line on the FID panels; an axis of None is skipped."""
    import plotly.graph_objects as go

    for m in marks:
        for col, axis in ((1, "speedup"), (2, "tau")):
            if m[axis] is None:
                continue
            fig.add_trace(go.Scatter(
                x=[m[axis]], y=[m["nll"]], mode="markers", name=m["name"], legendgroup=m["group"],
                showlegend=col == 1, marker={"color": m["colour"], "symbol": m["symbol"], "size": 16,
                                             "line": {"width": 2, "color": "black"}},
                hovertemplate=f"{m['hover']}<br>x=%{{x:.2f}}<br>NLL=%{{y:.3f}}<extra></extra>"), row=2, col=col)
            fig.add_vline(x=m[axis], line={"color": m["colour"], "dash": "dash", "width": 1}, row=1, col=col)


def write_png(fig, path, scale: float = 1) -> str | None:
    """Write a plotly figure as a PNG through kaleido; None when written, else one line saying it was skipped and
    why (kaleido needs a Chrome or Chromium the README's set-up does not install). Never raises for that: the
    caller writes everything else."""
    try:
        fig.write_image(path, scale=scale)
    except Exception as err:  # kaleido raises RuntimeError / ChromeNotFoundError / ValueError, by version
        why = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        return (f"{getattr(path, 'name', path)} skipped: {why} (kaleido draws PNGs through Chrome or Chromium: "
                "`plotly_get_chrome` or `apt-get install chromium` installs one; --no-png skips the figure); "
                "the .html figure and every other file are written")
    return None
