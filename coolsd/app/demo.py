"""The whole demo as one Gradio Blocks: header, settings column, one tab per panel, share links, API.

`make_demo("tiny")` builds it for any model without touching the environment (tests, tools);
`app.py` (the entry point a Space runs) reads the environment and calls the same function.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import gradio as gr
from starlette.middleware import Middleware

from coolsd.app import controls, cost, how, lab, microscope, race, schedule, settings, share, theory, tour
from coolsd.app.context import Context, load_models
from coolsd.app.serving import UnknownEndpoint, session_capacity_from_env
from coolsd.app.settings import RaceSettings

PANELS = [race, microscope, lab, schedule, theory, cost, how]  # tab order; each has ID, TITLE and build(ctx, tab)
CSS = """
.panel-title {text-align: center}
#header {margin-bottom: 0}
#download {max-height: 120px; overflow: auto}
table th, table td {word-break: normal !important; overflow-wrap: normal !important}
@media (min-width: 701px) {.phone-only {display: none !important}}
/* phone widths: the tabs (images, numbers) above the settings; tables keep whole words */
@media (max-width: 700px) {
  #main-row {flex-direction: column-reverse !important}
  #main-row > * {min-width: 0 !important; width: 100% !important}
  #stats table, #micro-table table {font-size: 11px !important; width: 100% !important; min-width: 0 !important}
  #stats, #micro-table {overflow-x: auto}
  #stats th, #stats td, #micro-table th, #micro-table td {padding: 2px 3px !important; font-size: 11px !important}
  #paper-beside-us table {display: block; overflow-x: auto; font-size: 12px}
  #paper-beside-us th:first-child, #paper-beside-us td:first-child {position: sticky; left: 0; background: white}
}
"""
# The arrow keys step the microscope's rounds while its tab is on show (not while typing in a field).
HEAD = """<script>
document.addEventListener("keydown", (e) => {
  if (e.altKey || e.ctrlKey || e.metaKey || ["INPUT", "TEXTAREA", "SELECT"].includes(e.target.tagName)) return;
  const id = {ArrowLeft: "micro-prev", ArrowRight: "micro-next"}[e.key];
  const button = id && document.getElementById(id);
  if (button && button.offsetParent !== null) { button.click(); e.preventDefault(); }
});
</script>"""
# memory bounded per session (coolsd.app.serving); an unknown api_name answered with a 404
LAUNCH_KWARGS = {"theme": gr.themes.Soft(), "css": CSS, "head": HEAD, "show_error": True,
                 "footer_links": ["api", "gradio"],
                 "state_session_capacity": session_capacity_from_env(),
                 "app_kwargs": {"middleware": [Middleware(UnknownEndpoint)]}}


@dataclass
class Demo:
    """The loaded models (`ctx`), the Blocks to launch, and how many races may run at once."""

    ctx: Context
    blocks: gr.Blocks
    workers: int


def workers_from_env() -> int:
    """$COOLSD_WORKERS (races run at once, each with its own KV caches; default 1)."""
    workers = int(os.environ.get("COOLSD_WORKERS", "1") or 1)
    if workers < 1:
        raise SystemExit(f"COOLSD_WORKERS must be an integer >= 1, got {workers}")
    return workers


def model_info(ctx: Context) -> dict:
    """The loaded model and the valid range of every race argument."""
    m = ctx.model
    return {"model": m.name, "kind": m.kind, "conditioning": m.conditioning, "grid": list(m.grid),
            "classes": m.class_names, "image_size": list(ctx.display_hw), "device": str(ctx.device),
            "drafting": list(settings.DRAFTING), "lantern_k_max": ctx.k_max, "max_draft_len": settings.MAX_DRAFT_LEN,
            "max_prompt_chars": m.max_prompt_chars, "resolutions": list(ctx.variants),
            "example_prompts": list(m.example_prompts), "defaults": RaceSettings.defaults(ctx).as_dict(),
            "execution": m.execution}


def build_demo(ctx: Context) -> gr.Blocks:
    """The Blocks for `ctx`: every panel built, events wired, the queue set."""
    m = ctx.model
    with gr.Blocks(title="COOL-SD · speculative decoding race", delete_cache=(3600, 7200)) as blocks:
        note = f"\n\n⚠️ {m.note}" if m.note else ""
        name = m.name if len(ctx.variants) < 2 else f"{m.name.split(' (')[0]} ({' / '.join(ctx.variants)} px)"
        gr.Markdown(f"## Speculative decoding race: Eagle-1 vs LANTERN++ vs COOL-SD\n"
                    f"Model: **{name}** on {ctx.device.type.upper()}"
                    f"{f' ({m.execution})' if m.execution else ''}, {m.grid[0]}×{m.grid[1]} tokens. "
                    f"One click decodes the same image four ways; the decoder that has used the least compute "
                    f"runs next, so each frame compares equal compute.{note}", elem_id="header")
        with gr.Row(equal_height=False, elem_id="main-row"):
            with gr.Column(scale=1, min_width=320):
                controls.build(ctx)
            with gr.Column(scale=3):
                guide = tour.build(ctx)
                with gr.Tabs() as tabs:
                    for panel in PANELS:
                        with gr.Tab(panel.TITLE, id=panel.ID) as tab:
                            ctx.panels[panel.ID] = panel.build(ctx, tab)
        tour.wire(guide, tabs)
        share.wire_restore(ctx, blocks, tabs, [panel.ID for panel in PANELS])  # share links: ?seed=3&delta=2...

        def info() -> dict:
            """The loaded model and the valid range of every race argument."""
            return model_info(ctx)

        gr.api(info, api_name="model_info")
    blocks.queue(max_size=64, default_concurrency_limit=1)
    return blocks


def make_demo(model: str, workers: int = 1) -> Demo:
    """Load `model` ("embedded", "tiny" or "llamagen"; see `coolsd.app.context.load_models`) and build
    the demo around it. Small models on a CPU decode single-threaded (a core is left to the server)."""
    import torch

    ctx = Context.for_models(load_models(model), workers=workers)
    if ctx.device.type == "cpu":
        torch.set_num_threads(1)
    return Demo(ctx, build_demo(ctx), workers)
