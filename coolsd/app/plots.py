"""Views of a race: token grids to PIL RGB images, outcome overlays, stats and plotly figures, all drawn from what
`coolsd.compare.race.Racer` recorded (no decoding maths)."""

from __future__ import annotations

import math

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from coolsd.compare.race import running_mean
from coolsd.decoding import variants
from coolsd.decoding.events import TokenOutcome
from coolsd.util.format import number
from coolsd.util.sheet import Sheet, to_rgb_array

DECODER_COLOURS = variants.COLOURS  # one colour per decoder variant, in every figure
ACCEPTED, RESAMPLED, BONUS = (k.code for k in TokenOutcome)  # int8 codes in the per-token kinds tensor
DIFFERS = max(ACCEPTED, RESAMPLED, BONUS) + 1  # the same-noise overlay's code: not vanilla AR's token there
KIND_COLOURS = {ACCEPTED: (0, 200, 120), RESAMPLED: (255, 140, 0), BONUS: (60, 120, 255), DIFFERS: (230, 0, 200)}
KIND_NAMES = {ACCEPTED: "accepted draft", RESAMPLED: "resampled (draft rejected)", BONUS: "bonus / target sample",
              DIFFERS: "not vanilla AR's token (same noise: where this racer's rule left vanilla AR's picture; "
                       "untinted: vanilla AR's token)"}
NO_REFERENCE = "same noise, but vanilla AR is not in this race: nothing to compare, no tint"
OVERLAY_ALPHA = 0.5
PLACEHOLDER_GREYS = (104, 120)  # checkerboard of token cells not generated yet


# ---------------------------------------------------------------- token grids to images
def fill_ids(tokens: Tensor) -> Tensor:
    """(T,) ids, -1 for missing -> the most common committed id there (the VQ decoder needs a full grid)."""
    known = tokens[tokens >= 0]
    fill = int(torch.mode(known).values) if len(known) else 0
    return torch.where(tokens >= 0, tokens, torch.full_like(tokens, fill))


def display_size(grid: tuple[int, int], pixel_hw: tuple[int, int], min_size: int = 256) -> tuple[int, int]:
    """(height, width) in display pixels: an integer upscale of the decoded image to at least `min_size`."""
    h, w = pixel_hw
    scale = max(1, math.ceil(min_size / max(h, w)))  # whole pixels: the nearest upscale stays sharp
    return h * scale, w * scale


def placeholder(grid: tuple[int, int], size_hw: tuple[int, int]) -> Image.Image:
    """A neutral checkerboard of token cells: nothing generated yet."""
    H, W = grid
    board = (np.add.outer(np.arange(H), np.arange(W)) % 2).astype(bool)
    grey = np.where(board, PLACEHOLDER_GREYS[0], PLACEHOLDER_GREYS[1]).astype(np.uint8)
    img = Image.fromarray(np.repeat(grey[:, :, None], 3, axis=2))
    return img.resize((size_hw[1], size_hw[0]), Image.NEAREST)


def token_image(pixels: Tensor, filled: Tensor, grid: tuple[int, int], kinds: Tensor | None = None,
                overlay: bool = False, min_size: int = 256) -> Image.Image:
    """PIL RGB image: `pixels` (C, h, w) in [0, 1] where `filled` ((T,) bool over the (H, W) `grid`), a checkerboard
    elsewhere; with `overlay`, committed cells tinted by `kinds` ((T,) int8 `TokenOutcome.code` or DIFFERS)."""
    H, W = grid
    img = to_rgb_array(pixels).astype(np.float32)
    h, w = img.shape[:2]
    # compose at the decoded resolution (cheap), then upscale by an integer factor (nearest)
    rows = np.minimum(np.arange(h) * H // h, H - 1)
    cols = np.minimum(np.arange(w) * W // w, W - 1)
    cell = rows[:, None] * W + cols[None, :]  # (h, w) token id of every pixel
    filled_np = filled.cpu().numpy().astype(bool)
    if overlay and kinds is not None:
        kinds_np = kinds.cpu().numpy()
        tint = np.zeros((H * W, 3), dtype=np.float32)
        alpha = np.zeros(H * W, dtype=np.float32)
        for code, colour in KIND_COLOURS.items():
            tint[kinds_np == code] = colour
            alpha[kinds_np == code] = OVERLAY_ALPHA
        a = alpha[cell][..., None]
        img = (1 - a) * img + a * tint[cell]
    board = ((rows[:, None] + cols[None, :]) % 2).astype(bool)
    grey = np.where(board, PLACEHOLDER_GREYS[0], PLACEHOLDER_GREYS[1]).astype(np.float32)[..., None]
    img = np.where(filled_np[cell][..., None], img, grey)
    out_h, out_w = display_size(grid, (h, w), min_size)
    small = Image.fromarray(np.clip(img + 0.5, 0, 255).astype(np.uint8))
    return small.resize((out_w, out_h), Image.NEAREST)


def overlay_legend_html(noise: str = "stream", reference: bool = True) -> str:
    """HTML legend of the overlay: the outcomes, or under "same" noise the tint (`reference`: vanilla AR raced)."""
    codes = (DIFFERS,) if noise == "same" else (ACCEPTED, RESAMPLED, BONUS)
    items = "".join(
        f'<span style="display:inline-flex;align-items:center;margin-right:14px">'
        f'<span style="width:14px;height:14px;background:rgb{KIND_COLOURS[c]};display:inline-block;'
        f'margin-right:5px;border-radius:3px"></span>{KIND_NAMES[c]}</span>' for c in codes)
    if noise == "same" and not reference:
        items = NO_REFERENCE
    return f'<div style="font-size:0.9em">Overlay: {items}</div>'


# ---------------------------------------------------------------- numbers
def stats_markdown(stats: list[dict], status: str = "") -> str:
    """Markdown table of `Racer.stats(...)` dicts, one row per decoder, plus a status line."""
    lines = ["| decoder | tokens | target forwards | τ (mean accepted length) | compute s | speed-up vs AR |",
             "|---|---:|---:|---:|---:|---:|"]
    for s in stats:
        mark = " ✓" if s["finished"] else ""
        lines.append(f"| {s['decoder']}{mark} | {s['tokens']} / {s['num_tokens']} | {s['target_forwards']} | "
                     f"{number(s['mean_accepted_length'], '.2f')} | {number(s['compute_seconds'], '.3f')} | "
                     f"{number(s.get('speedup', math.nan), '.2f')}× |")
    return (f"{status}\n\n" if status else "") + "\n".join(lines)


# ---------------------------------------------------------------- figures
# plotly_white's look on the empty "none" template (a named template is serialised with every figure: too slow)
_GRID = "#EBF0F8"
_AXIS = {"gridcolor": _GRID, "linecolor": _GRID, "zerolinecolor": _GRID, "ticks": "", "automargin": True}
LIGHT_LAYOUT = {"template": "none", "paper_bgcolor": "white", "plot_bgcolor": "white", "font": {"color": "#2a3f5f"},
                "hovermode": "closest", "xaxis": _AXIS, "yaxis": _AXIS}


def _figure(traces: list[dict], title: str, xaxis: dict, yaxis: dict, height: int = 340, **layout):
    """One validated Figure from trace dicts and the shared look (not a call per trace: races redraw as they stream)."""
    import plotly.graph_objects as go

    full = {**LIGHT_LAYOUT, "title": {"text": title, "font": {"size": 14}, "y": 0.98, "yanchor": "top"},
            "xaxis": {**_AXIS, **xaxis}, "yaxis": {**_AXIS, **yaxis}, "height": height,
            "margin": {"l": 55, "r": 50, "t": 80, "b": 45},
            "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "font": {"size": 11}},
            "uirevision": "keep", **layout}  # uirevision: keep the user's zoom across streamed updates
    return go.Figure(data=traces, layout=full)


def _axis(title: str, **settings) -> dict:
    return {"title": {"text": title}, **settings}


def acceptance_figure(racers: list, draft_len: int, omegas: dict | None = None):
    """Mean tested acceptance per draft position per `Racer`; `omegas` (key -> (n,) omega_i): dashed, right axis."""
    traces, labels = [], {}
    for r in racers:
        labels[r.key] = r.label
        rate = r.accept_rate.tolist()
        traces.append({
            "type": "scatter", "x": list(range(1, len(rate) + 1)), "y": [None if math.isnan(v) else v for v in rate],
            "mode": "lines+markers", "name": r.label, "line": {"color": DECODER_COLOURS.get(r.key)},
            "customdata": r.depth_count.tolist(), "hovertemplate":
                "i = %{x}<br>mean aᵢ = %{y:.3f}<br>tests: %{customdata:.0f}<extra>" + r.label + "</extra>"})
    omegas = {k: w for k, w in (omegas or {}).items() if w is not None and len(w)}
    for key, omega in omegas.items():
        w, name = omega.tolist(), labels.get(key, key)
        traces.append({
            "type": "scatter", "x": list(range(1, len(w) + 1)), "y": w, "mode": "lines+markers",
            "name": f"{name} ωᵢ (right axis)", "yaxis": "y2",
            "line": {"color": DECODER_COLOURS.get(key), "dash": "dash"}, "marker": {"symbol": "diamond-open"},
            "hovertemplate": "i = %{x}<br>ωᵢ = %{y:.3f}<extra>" + name + " ω</extra>"})
    right = {}
    if omegas:  # a dotted line at omega = 1 on the right axis, whose title stays clear of its tick labels
        right = {"yaxis2": {"title": {"text": "ωᵢ", "standoff": 10}, "overlaying": "y", "side": "right",
                            "rangemode": "tozero", "showgrid": False, "automargin": True, "ticks": ""},
                 "shapes": [{"type": "line", "xref": "x domain", "x0": 0, "x1": 1, "yref": "y2", "y0": 1.0, "y1": 1.0,
                             "line": {"color": "#999999", "dash": "dot", "width": 1}}],
                 "annotations": [{"text": "ω = 1 (lossless)", "showarrow": False, "xref": "x domain", "x": 0,
                                  "xanchor": "left", "yref": "y2", "y": 1.0, "yanchor": "bottom"}]}
    # the legend under the plot: above it, on a phone, its rows grew into the title
    below = {"legend": {"orientation": "h", "x": 0, "y": -0.22, "yanchor": "top", "font": {"size": 11}},
             "margin": {"l": 55, "r": 50, "t": 40, "b": 45}}
    return _figure(traces, "Acceptance probability per draft position",
                   _axis("draft position i", range=[0.5, max(draft_len, 1) + 0.5], dtick=1),
                   _axis("mean tested acceptance prob.", range=[0, 1.05]), height=400, **below, **right)


SMOOTH_ROUNDS = 15  # rounds in the running mean of the accepted-length plot (one round is too noisy to read)


def length_figure(racers: list):
    """Running mean of tokens committed per round against the share of the image committed; vanilla AR = 1."""
    traces = []
    for r in racers:
        y = list(r.round_tokens)
        if not y:
            continue
        done = np.cumsum(np.asarray(y, dtype=np.float64))
        traces.append({
            "type": "scatter", "x": (100 * done / max(r.num_tokens, 1)).tolist(), "y": running_mean(y, SMOOTH_ROUNDS),
            "mode": "lines", "name": r.label, "line": {"color": DECODER_COLOURS.get(r.key), "width": 2},
            "customdata": y,
            "hovertemplate": "%{x:.0f} % of the image<br>mean %{y:.2f} tokens per round<extra>" + r.label + "</extra>"})
    traces.append({"type": "scatter", "x": [0, 100], "y": [1, 1], "mode": "lines", "name": "vanilla AR",
                   "line": {"color": DECODER_COLOURS["vanilla"], "dash": "dot"}, "hoverinfo": "skip"})
    return _figure(traces, f"Accepted length along the image (mean of {SMOOTH_ROUNDS} rounds)",
                   _axis("image committed", range=[0, 100], ticksuffix=" %"),
                   _axis("tokens per round", rangemode="tozero"))


def length_histogram(racers: list):
    """Share of speculative rounds that committed n tokens (accepted drafts + 1), grouped bars per racer."""
    traces, longest = [], 1
    for r in racers:
        y = list(r.round_tokens)
        if not y:
            continue
        counts = np.bincount(np.asarray(y, dtype=np.int64))[1:]  # counts[n - 1]: rounds committing n tokens
        longest = max(longest, len(counts))
        traces.append({
            "type": "bar", "x": list(range(1, len(counts) + 1)), "y": (counts / len(y)).tolist(), "name": r.label,
            "customdata": counts.tolist(), "marker": {"color": DECODER_COLOURS.get(r.key)},
            "hovertemplate": "%{x} tokens: %{y:.0%} of rounds (%{customdata})<extra>" + r.label + "</extra>"})
    return _figure(traces, "Accepted length histogram",
                   _axis("tokens committed per round", range=[0.5, longest + 0.5], dtick=1),
                   _axis("share of rounds", tickformat=".0%", rangemode="tozero"), barmode="group", bargap=0.15)


def image_strip(images: list[Image.Image], labels: list[str], band: int = 22) -> Image.Image:
    """The images side by side on one white strip, each under its label."""
    sheet = Sheet(tuple(im.width for im in images), (max(im.height for im in images),), head_h=band, gap=8)
    return sheet.draw([images], col_labels=labels)
