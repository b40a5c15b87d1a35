"""The whole demo as one Gradio Blocks; `make_demo` reads no environment (`app.py` does, then calls it)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
from starlette.middleware import Middleware

from coolsd.app import controls, cost, how, lab, microscope, race, schedule, settings, share, theory, tour
from coolsd.app.context import Context, open_context, serving_threads
from coolsd.app.race_view import API_NAMES
from coolsd.app.recorded import Recordings
from coolsd.app.served_files import DELETE_CACHE
from coolsd.app.serving import ServedBlocks, UnknownEndpoint, session_capacity_from_env
from coolsd.app.settings import RaceSettings
from coolsd.util.env import env_int

PANELS = [race, microscope, lab, schedule, theory, cost, how]  # tab order (each module has ID and TITLE)
CSS = """
.panel-title {text-align: center}
.panel-seen {text-align: center; font-size: 0.85em}
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
  #paper-beside-us table {width: 100% !important; min-width: 0 !important; font-size: 12px}
  #paper-beside-us th, #paper-beside-us td {padding: 3px 4px !important}
}
"""
# Arrow keys step the microscope's rounds while its tab shows (not while typing). Phones: side margins 32 -> 8 px, a
# rule on the page's own frame (.main), so in the head (Gradio scopes `css` to the app's content).
HEAD = """<style>@media (max-width: 700px) {.gradio-container .main {padding-left: 8px !important;
  padding-right: 8px !important}}</style>
<script>
document.addEventListener("keydown", (e) => {
  if (e.altKey || e.ctrlKey || e.metaKey || ["INPUT", "TEXTAREA", "SELECT"].includes(e.target.tagName)) return;
  const id = {ArrowLeft: "micro-prev", ArrowRight: "micro-next"}[e.key];
  const button = id && document.getElementById(id);
  if (button && button.offsetParent !== null) { button.click(); e.preventDefault(); }
});
</script>"""
LAUNCH_KWARGS = {"theme": gr.themes.Soft(), "css": CSS, "head": HEAD, "show_error": True,
                 "footer_links": ["api", "gradio"], "state_session_capacity": session_capacity_from_env(),
                 "app_kwargs": {"middleware": [Middleware(UnknownEndpoint)]}}


@dataclass(frozen=True)
class Page:
    """The built page: Blocks, settings column and the panel handles tools and tests reach handlers through."""

    blocks: gr.Blocks
    controls: controls.Controls
    race: race.RaceHandle
    lab: lab.LabHandle


@dataclass(frozen=True)
class Demo:
    """The loaded models (`ctx`), the page (`page`; `blocks` to launch), and how many races may run at once."""

    ctx: Context
    page: Page
    workers: int

    @property
    def blocks(self) -> gr.Blocks:
        return self.page.blocks


def workers_from_env() -> int:
    """$COOLSD_WORKERS (races run at once, each with its own KV caches; default 1)."""
    return env_int("COOLSD_WORKERS", 1)


def model_info(ctx: Context) -> dict:
    """`ctx`'s model (its picker key, name, execution path) and the valid range of every race argument for it."""
    m = ctx.model
    return {"model": m.name, "model_key": ctx.model_key, "models": list(ctx.catalogue.keys), "kind": m.kind,
            "conditioning": m.conditioning, "grid": list(m.grid), "classes": m.base_class_names,
            "styles": list(m.style_names), "groups": list(m.class_groups), "conditions": m.class_names,
            "image_size": list(ctx.display_hw), "race_outputs": API_NAMES, "device": str(ctx.device),
            "drafting": list(settings.DRAFTING), "noises": list(settings.NOISE), "lantern_k_max": ctx.k_max,
            "max_draft_len": settings.MAX_DRAFT_LEN, "delta_max": settings.DELTA_TOP,
            "max_prompt_chars": m.max_prompt_chars, "resolutions": list(ctx.variants),
            "example_prompts": list(m.example_prompts), "defaults": RaceSettings.defaults(ctx).as_dict(),
            "execution": m.execution, "execution_path": m.path, "credits": m.credits}


def header_markdown(ctx: Context) -> str:
    """The page header, with the artwork's credits (a licence such as CC-BY asks for them wherever it is shown)."""
    m = ctx.model
    precision = m.execution.split(" (")[0] if m.execution else ""  # "bf16 weights, fp32 maths (...)"
    precision = precision.replace("weights, fp32 maths", "weights (fp32 maths)")
    runs = f"{m.path} path" + (f", {precision}" if precision else "")  # e.g. "fused path, bf16 weights (fp32 maths)"
    note = f"\n\n⚠️ {m.note}" if m.note else ""
    credits = f"\n\nCredits: {m.credits.rstrip('.')}." if m.credits else ""
    name = m.name if len(ctx.variants) < 2 else f"{m.name.split(' (')[0]} ({' / '.join(ctx.variants)} px)"
    return (f"## Speculative decoding race: Eagle-1 vs LANTERN++ vs COOL-SD\n"
            f"Model: **{name}** on {ctx.device.type.upper()}, {runs}, {m.grid[0]}×{m.grid[1]} tokens. "
            f"One click decodes the same image four ways; the decoder that has used the least compute "
            f"runs next, so each frame compares equal compute.{note}{credits}")


def wire_model_picker(ctx: Context, header: gr.Markdown, controls_: controls.Controls, handle: race.RaceHandle,
                      load_event) -> None:
    """Header, model controls and race area follow a picked model, also one a share link named (`load_event`)."""
    c, after = controls_, handle.after
    names = controls.MODEL_CONTROLS
    area = handle.outputs.components()
    layout = [*handle.titles, *handle.columns]

    def race_area(model, racers) -> tuple:
        frame, slots = after.model_view(model, racers)
        return (*handle.outputs.values(frame), *slots)

    def switch(model, racers):
        picked = ctx.for_model(model)
        groups = controls.group_choices(picked)
        return (header_markdown(picked), *controls.model_updates(ctx, picked).values(),
                gr.Dropdown(choices=groups, value=groups[0], visible=len(groups) > 1), *race_area(model, racers))

    def opened(model, racers):
        if model == ctx.model_key:  # the page opened on the default model: nothing to redraw
            return tuple(gr.skip() for _ in range(1 + len(area) + len(layout)))
        return header_markdown(ctx.for_model(model)), *race_area(model, racers)

    c["model"].input(switch, [c["model"], c["racers"]], [header, *(c[n] for n in names), c.group, *area, *layout],
                     api_visibility="private", show_progress="minimal", concurrency_id="model", concurrency_limit=4,
                     cancels=list(handle.run_events))  # a race of the old model would draw over the new one
    load_event.then(opened, [c["model"], c["racers"]], [header, *area, *layout], api_visibility="private",
                    show_progress="hidden", concurrency_limit=None)  # (page loads: no queue behind each other)


def build_demo(ctx: Context) -> Page:
    """The page for `ctx`: every panel built, in this order, each given what it reads; events wired; the queue set."""
    recordings = Recordings(ctx)
    with ServedBlocks(title="COOL-SD · speculative decoding race", delete_cache=DELETE_CACHE) as blocks:
        header = gr.Markdown(header_markdown(ctx), elem_id="header")
        with gr.Row(equal_height=False, elem_id="main-row"):
            with gr.Column(scale=1, min_width=320):
                settings_column = controls.build(ctx)
            with gr.Column(scale=3):
                guide = tour.build(ctx)
                model = settings_column["model"]
                with gr.Tabs() as tabs:
                    with gr.Tab(race.TITLE, id=race.ID) as tab:
                        racing = race.build(ctx, settings_column, recordings, tab)
                    trace = racing.outputs.trace
                    with gr.Tab(microscope.TITLE, id=microscope.ID) as tab:
                        microscope.build(ctx, model, trace, recordings, tab)
                    with gr.Tab(lab.TITLE, id=lab.ID) as tab:
                        quality = lab.build(ctx, settings_column["condition"], model, tab, settings_column["delta"])
                    with gr.Tab(schedule.TITLE, id=schedule.ID) as tab:
                        schedule.build(ctx, tab)
                    with gr.Tab(theory.TITLE, id=theory.ID) as tab:
                        theory.build(ctx, settings_column, tab)
                    with gr.Tab(cost.TITLE, id=cost.ID) as tab:
                        cost.build(ctx, model, trace, recordings, tab)
                    with gr.Tab(how.TITLE, id=how.ID) as tab:
                        how.build(ctx, tab)
        tour.wire(guide, tabs, settings_column, racing, quality)
        restored = share.wire_restore(ctx, settings_column, blocks, tabs, [panel.ID for panel in PANELS])
        wire_model_picker(ctx, header, settings_column, racing, restored)

        def info(model: str = ctx.model_key) -> dict:
            """`model`'s name, picker key and execution path (default: the app's model) and the valid range of
            every race argument for it; "models" lists the picker's keys, "race_outputs" names /race's outputs."""
            return model_info(ctx.picked(model))

        gr.api(info, api_name="model_info")
    blocks.queue(max_size=64, default_concurrency_limit=1)
    return Page(blocks, settings_column, racing, quality)


def make_demo(model: str | None = None, workers: int = 1, models: list[str] | None = None) -> Demo:
    """The demo around `model` (a registry key or alias), the picker offering it first, then `models`."""
    serving_threads()
    ctx = open_context(model, workers, models)
    return Demo(ctx, build_demo(ctx), workers)
