"""The Microscope tab: every number of one round of one decoder of the last race (or the shipped one). The race keeps
no detail, so each decoder is decoded again once per race with `DecodeConfig(detail=True)`. API: microscope."""

from __future__ import annotations

import gradio as gr
import torch
from PIL import Image, ImageDraw

from coolsd.app.context import APP_MODEL, Context, bad, gpu, user_errors
from coolsd.app.plots import LIGHT_LAYOUT, image_strip, token_image
from coolsd.app.recorded import Recordings
from coolsd.app.serving import MICROSCOPE_TTL_S
from coolsd.compare import microscope as scope
from coolsd.compare.trace import RaceTrace
from coolsd.util.checks import check_choice, check_int
from coolsd.util.format import small
from coolsd.util.jsonsafe import json_safe

ID, TITLE = "microscope", "Microscope"
LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]
VERDICT_COLOURS = {scope.ACCEPTED: (0, 170, 90), scope.REJECTED: (220, 30, 30), scope.NOT_TESTED: (150, 150, 150)}
LAST_COLOURS = {"resampled": (255, 140, 0), "bonus": (60, 120, 255)}
NEXT_JS = "(r) => Math.min(r + 1, Number(document.querySelector('#micro-round input[type=range]')?.max ?? r + 1))"
PATCH_PX = 56  # on-page size of one token patch
NOTHING = "nothing to look at yet: run a race first"
INTRO = """
**A round under the microscope.** Pick a decoder and a round of the last race (or of the recorded one shown at
page open): the image shows the committed tokens up to this round, the round's draft positions outlined
(**green** accepted, **red** rejected, **grey** drafted but never tested) and the last token's cell (**orange**
resampled after a rejection, **blue** bonus). The table gives, for each draft, $q(\\tilde x_i)$, $p(\\tilde x_i)$,
$\\omega_i$, the acceptance probability $a_i$ and the uniform $u_i$ drawn: the draft is kept when $u_i \\le a_i$.
The bars show where the last token came from. ← / → step through the rounds; a click on the image jumps to the
round that committed that cell. A round of a no-drafter racer (SJD, COOL-SD or LANTERN++ without a drafter) is one
Jacobi iteration: its drafts are the window, each drawn from q, the target's own distribution for that cell as the
previous iteration's forward computed it, and p is this iteration's; $\\omega_i$ runs over the window's depths.
"""


class MicroscopePanel:
    """The tab's handlers; a decoder's re-run is cached in a per-session gr.State."""

    def __init__(self, ctx: Context, recordings: Recordings) -> None:
        self.ctx, self.recordings = ctx, recordings

    @gpu
    def events(self, trace: RaceTrace, key: str, cache: dict) -> tuple[list, bool, dict]:
        """(racer `key`'s rounds, whether a re-run here reproduced them (else: the trace's, without detail), cache)."""
        sig = (id(trace), len(trace), key)
        if cache.get("sig") == sig:
            return cache["events"], cache["matches"], cache
        ctx = self.ctx.for_trace(trace.settings)
        cond = ctx.check_condition(trace.settings.condition, trace.settings.style)
        with ctx.lane() as lane:
            target, drafter = lane[0]
            events = scope.rerun(trace, key, target, drafter, cond, ctx.model.neighbours)
        same = scope.matches(trace, key, events) and len(events) == len(scope.recorded(trace, key))
        events = events if same else scope.recorded(trace, key)
        return events, same, {"sig": sig, "events": events, "matches": same}

    # ---------------------------------------------------------------- handlers
    def view(self, key, round_no, trace, cache, model=APP_MODEL):
        """Round `round_no` of decoder `key`: (image, patches, bars, table, header, JSON view, cache).
        Before any race of this session: of `model`'s recorded race (default: the app's model)."""
        trace = self.recordings.on_show(trace, model, NOTHING)
        with user_errors():
            key = check_choice("decoder", key, [k for k, _ in trace.racers])
            check_int("round", round_no, 0)  # its kind before the decoder is decoded again (its range after)
        ctx = self.ctx.for_trace(trace.settings)
        rule = scope.rule_of(trace, key, ctx.model.neighbours)
        drafting = trace.settings.drafting_of(key)
        if not drafting.detail:  # (a static tree's rounds keep no per-depth detail)
            raise bad("the microscope shows chain rounds: race with drafting = chain (static-tree rounds have no "
                      "per-depth detail)")
        events, same, cache = self.events(trace, key, cache or {})
        with user_errors():
            round_no = check_int("round", round_no, 0, len(events) - 1)
        view = scope.round_view if events[round_no].detail is not None else scope.stored_view
        v = view(events[round_no], trace.grid, scope.residual_label(rule)) | {"q_from": scope.q_label(drafting)}
        header = header_markdown(v, dict(trace.racers)[key], len(events), same, trace) + coupled_note(trace, rule)
        payload = json_safe({"decoder": key, "rounds": len(events), "matches_race": same, "rule": scope.describe(rule),
                             "drafting": drafting.config(), "source": "re-run" if same else "trace", **v})
        return (round_image(ctx, events, round_no, v), patch_strip(ctx, events, round_no, v), bars_figure(v),
                table_markdown(v), header, payload, cache)

    def opened(self, key, round_no, trace, cache, model=APP_MODEL):
        """Tab opened / race finished: the decoder choices and the round range of the trace on show, then the view."""
        trace = self.recordings.on_show(trace, model, NOTHING)
        keys = [k for k, _ in trace.racers]
        key = key if key in keys else next((k for k in keys if k != scope.VANILLA), keys[0])
        fresh = (cache or {}).get("sig", (None, None))[:2] != (id(trace), len(trace))  # a race not looked at yet
        events, _, cache = self.events(trace, key, cache or {})
        rounds = len(events)
        # a new race opens on a round in the middle (round 0 only samples the first token): the picture is half drawn
        keep = not fresh and isinstance(round_no, (int, float)) and 0 <= round_no < rounds
        round_no = int(round_no) if keep else rounds // 2
        out = self.view(key, round_no, trace, cache, model)
        return (gr.Dropdown(choices=[(label, k) for k, label in trace.racers], value=key),
                gr.Slider(minimum=0, maximum=max(rounds - 1, 1), value=round_no,
                          label=f"round (0 to {rounds - 1}; round 0 samples the first token)"), *out)

    def clicked(self, key, trace, cache, evt: gr.SelectData, model=APP_MODEL):
        """A click on the image -> the round that committed the clicked cell."""
        trace = self.recordings.on_show(trace, model, NOTHING)
        with user_errors():
            key = check_choice("decoder", key, [k for k, _ in trace.racers])
        events, _, _ = self.events(trace, key, cache or {})
        x, y = evt.index
        h, w = self.ctx.for_trace(trace.settings).display_hw
        rows, cols = trace.grid
        cell = min(int(y) * rows // h, rows - 1) * cols + min(int(x) * cols // w, cols - 1)
        return scope.round_at(events, cell)  # a position in `events`, as the slider and `view` count rounds


# ---------------------------------------------------------------- drawing (views of the library's numbers)
def _tokens_until(events, j: int, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """((T,) ids committed by rounds 0..j, -1 elsewhere; (T,) int8 outcome codes)."""
    tokens = torch.full((num_tokens,), -1, dtype=torch.long)
    kinds = torch.zeros(num_tokens, dtype=torch.int8)
    for e in events[: j + 1]:
        tokens[e.start : e.start + len(e.tokens)] = e.tokens
        kinds[e.start : e.start + len(e.tokens)] = torch.tensor([k.code for k in e.kinds], dtype=torch.int8)
    return tokens, kinds


def _outline(draw: ImageDraw.ImageDraw, cell: list[int], size: tuple[float, float], colour, width: int) -> None:
    (r, c), (ch, cw) = cell, size
    draw.rectangle([c * cw, r * ch, (c + 1) * cw - 1, (r + 1) * ch - 1], outline=colour, width=width)


def round_image(ctx, events, j: int, v: dict) -> Image.Image:
    """The decoder's image after round j (later tokens a checkerboard), the round's cells outlined."""
    tokens, kinds = _tokens_until(events, j, ctx.model.num_tokens)
    img = ctx.render(ctx.decode_pixels(tokens), tokens >= 0, kinds, False)
    draw = ImageDraw.Draw(img)
    size = (img.height / ctx.model.grid[0], img.width / ctx.model.grid[1])
    for row in v["depths"]:
        _outline(draw, row["position"], size, VERDICT_COLOURS[row["verdict"]], 2)
    _outline(draw, v["token_position"], size, LAST_COLOURS[v["last"]], 4)
    return img


def patch_strip(ctx, events, j: int, v: dict) -> Image.Image:
    """The drafted tokens (each decoded in place on the committed prefix) and the last token, as patches."""
    tokens, _ = _tokens_until(events, j - 1, ctx.model.num_tokens)
    drafted = tokens.clone()
    shown = [row for row in v["depths"] if row["token"] is not None]  # (a trace stores the accepted drafts only)
    for row in shown:
        drafted[v["start"] + row["depth"] - 1] = row["token"]
    final, _ = _tokens_until(events, j, ctx.model.num_tokens)
    cells = [(drafted, row["position"], VERDICT_COLOURS[row["verdict"]], f"i={row['depth']} {row['verdict'][:3]}")
             for row in shown]
    cells.append((final, v["token_position"], LAST_COLOURS[v["last"]], v["last"]))
    patches, labels = [], []
    for ids, (r, c), colour, label in cells:
        pixels = ctx.decode_pixels(ids)  # (C, h, w)
        ph, pw = pixels.shape[-2] // ctx.model.grid[0], pixels.shape[-1] // ctx.model.grid[1]
        patch = token_image(pixels[:, r * ph : (r + 1) * ph, c * pw : (c + 1) * pw], torch.ones(1, dtype=torch.bool),
                            (1, 1), min_size=PATCH_PX)
        framed = Image.new("RGB", (patch.width + 6, patch.height + 6), colour)
        framed.paste(patch, (3, 3))
        patches.append(framed)
        labels.append(label)
    return image_strip(patches, labels)


def bars_figure(v: dict):
    """Top tokens of p, q and the residual at the last depth, as grouped bars; the drawn token marked."""
    import plotly.graph_objects as go

    fig = go.Figure(layout=LIGHT_LAYOUT)
    if not v["top"]:  # a round as a trace stores it: no distributions
        fig.update_layout(height=120, margin={"l": 10, "r": 10, "t": 40, "b": 10}, xaxis={"visible": False},
                          yaxis={"visible": False},
                          title={"text": f"token {v['token']} drawn from {v['drawn_from']} (the trace keeps no "
                                         "distributions)", "font": {"size": 13}})
        return fig
    order = [r["token"] for r in v["top"]["p"]]
    for name in ("q", "residual"):
        order += [r["token"] for r in v["top"].get(name, []) if r["token"] not in order]
    names = {"p": f"p (target) at depth {v['n_accepted'] + 1}", "q": v.get("q_from", "q (drafter)"),
             "residual": "residual"}
    colours = {"p": "#444444", "q": "#1f77b4", "residual": "#ff7f0e"}
    for name, rows in v["top"].items():
        probs = {r["token"]: r["prob"] for r in rows}
        fig.add_trace(go.Bar(x=[str(t) for t in order], y=[probs.get(t, 0.0) for t in order], name=names[name],
                             marker={"color": colours[name]},
                             hovertemplate="token %{x}: %{y:.4f}<extra>" + names[name] + "</extra>"))
    fig.add_annotation(x=str(v["token"]), y=max(v["token_probs"].values()), text="drawn", showarrow=True,
                       arrowhead=2, ay=-30)
    fig.update_layout(barmode="group", height=300, margin={"l": 45, "r": 10, "t": 50, "b": 40},
                      title={"text": f"where the last token came from: {v['drawn_from']}", "font": {"size": 13}},
                      xaxis_title="token id", yaxis_title="probability",
                      legend={"orientation": "h", "y": -0.25})
    return fig


def table_markdown(v: dict) -> str:
    """Per depth: position, draft, q, p, omega, a, u, verdict (markdown)."""
    lines = ["| i | cell (row, col) | draft | q(x) | p(x) | ωᵢ | aᵢ | uᵢ | verdict |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in v["depths"]:
        mark = {"accepted": "✓ u ≤ a", "rejected": "✗ u > a"}.get(r["verdict"], "not tested")
        tested = r["verdict"] in ("accepted", "rejected")  # an untested draft has no a_i or u_i to show
        a, u = (small(r["accept"]), small(r["u"])) if tested else ("–", "–")
        token = "–" if r["token"] is None else r["token"]
        lines.append(f"| {r['depth']} | {tuple(r['position'])} | {token} | {small(r['q'])} | {small(r['p'])} | "
                     f"{small(r['omega'])} | {a} | {u} | {mark} |")
    if not v["depths"]:
        lines.append("| – | – | – | – | – | – | – | – | no drafts this round |")
    return "\n".join(lines)


def header_markdown(v: dict, label: str, rounds: int, same: bool, trace: RaceTrace) -> str:
    """The round in words; when `same` is False (not decoded bit for bit here), which numbers the trace keeps."""
    warn = "" if same else (
        " The numbers are the race's own, as its trace stores them (it ran on another CPU, precision or execution "
        "path, so this server does not decode it bit for bit): each round's tokens, verdicts, aᵢ and ωᵢ; q, p, uᵢ, a "
        "rejected draft and the residual are shown for races run on this server.")
    return (f"**{label}**, round {v['round']} (rounds 0 to {rounds - 1}): {v['n_drafted']} drafts from cell "
            f"{tuple(v['positions'][0])}, {v['n_accepted']} accepted, then token {v['token']} ({v['last']}) drawn "
            f"from {v['drawn_from']}. Residual: {v['residual']}. Drafts drawn from {v.get('q_from', 'q (drafter)')}."
            f"{warn}")


def coupled_note(trace: RaceTrace, rule) -> str:
    """Under same noise, what a lossless rule's test read (`coolsd.decoding.noise`); "" otherwise."""
    if not trace.settings.same_noise or rule is None or not rule.lossless:
        return ""
    return (" Same noise: this lossless rule's test is coupled: a draft is accepted exactly when it is the target's "
            "own draw at its position (aᵢ is 1 or 0, uᵢ is not read), and a rejection commits that draw.")


def build(ctx: Context, model: gr.Dropdown, trace: gr.State, recordings: Recordings, tab: gr.Tab) -> MicroscopePanel:
    """The tab (call inside `gr.Tab(TITLE, id=ID)`): `model` is the picker, `trace` the race's trace state."""
    panel = MicroscopePanel(ctx, recordings)
    gr.Markdown(INTRO, latex_delimiters=LATEX)
    with gr.Row():
        key = gr.Dropdown(choices=[], value=None, label="decoder", elem_id="micro-decoder", scale=2, min_width=200)
        prev = gr.Button("← Prev", elem_id="micro-prev", scale=1, min_width=80)
        nxt = gr.Button("Next →", elem_id="micro-next", scale=1, min_width=80)
    round_no = gr.Slider(0, 1, value=0, step=1, label="round", elem_id="micro-round")
    header = gr.Markdown(elem_id="micro-header")
    with gr.Row():
        image = gr.Image(type="pil", format="png", show_label=False, interactive=False, elem_id="micro-image",
                         min_width=200)
        strip = gr.Image(type="pil", format="png", show_label=False, interactive=False, elem_id="micro-patches",
                         min_width=200)
    table = gr.Markdown(elem_id="micro-table")
    bars = gr.Plot(show_label=False, elem_id="micro-bars")
    with gr.Accordion("Raw numbers (what the API returns)", open=False):
        raw = gr.JSON(elem_id="micro-json", label="microscope")
    # the re-decoded rounds (cheap to decode again): kept a shorter time than the race, and within the budget
    cache = gr.State({}, time_to_live=MICROSCOPE_TTL_S)
    outputs = [image, strip, bars, table, header, raw, cache]
    tab.select(panel.opened, [key, round_no, trace, cache, model], [key, round_no, *outputs], api_visibility="private",
               show_progress="minimal")
    gr.on([round_no.change, key.input], panel.view, [key, round_no, trace, cache, model], outputs,
          api_name="microscope", preprocess=False, trigger_mode="always_last", concurrency_limit=2,
          concurrency_id="microscope", show_progress="minimal")
    prev.click(None, round_no, round_no, js="(r) => Math.max(0, r - 1)", api_visibility="private")
    nxt.click(None, round_no, round_no, js=NEXT_JS, api_visibility="private")
    image.select(panel.clicked, [key, trace, cache, model], round_no, api_visibility="private")
    return panel
