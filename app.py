"""coolsd demo: Eagle-1, LANTERN++ and COOL-SD (plus vanilla AR) racing side by side, streamed round by round.

    python app.py                      # http://127.0.0.1:7860 (a Space runs the same file)
    COOLSD_MODEL=tiny python app.py    # embedded | tiny (random weights, fast) | llamagen (GPU)

The entry point only: offline flags, the model loaded once (`coolsd.app.context`), the settings
column, one tab per panel module of `coolsd.app` (interface documented there), launch. All maths
lives in `coolsd`. API: see the README section "The app".
"""

from __future__ import annotations

import os

# No network at run time: set before gradio / huggingface_hub are imported.
for _key, _value in {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
                     "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1"}.items():
    os.environ.setdefault(_key, _value)

import logging  # noqa: E402

import gradio as gr  # noqa: E402
import torch  # noqa: E402

from coolsd.app import controls, how, lab, race, schedule, share, theory  # noqa: E402
from coolsd.app.context import Context, default_model_choice, load_models  # noqa: E402
from coolsd.models.llamagen.fetch import fetch_on_start  # noqa: E402

WORKERS = int(os.environ.get("COOLSD_WORKERS", "1") or 1)  # races run at once (each has its own KV caches)
if WORKERS < 1:
    raise SystemExit(f"COOLSD_WORKERS must be an integer >= 1, got {WORKERS}")
PANELS = [race, lab, schedule, theory, how]  # tab order; each module has ID, TITLE and build(ctx, tab)
CSS = """
.panel-title {text-align: center}
#header {margin-bottom: 0}
#download {max-height: 120px; overflow: auto}
"""

fetch_on_start()  # downloads LlamaGen only when $COOLSD_FETCH_LLAMAGEN asks (a Space sets it), in a child process
CTX = Context.for_models(load_models(default_model_choice()), workers=WORKERS)
if CTX.device.type == "cpu":
    torch.set_num_threads(1)  # small models decode faster single-threaded (and leave a core to the server)


def model_info() -> dict:
    """The loaded model and the valid range of every race argument."""
    m = CTX.model
    return {"model": m.name, "kind": m.kind, "conditioning": m.conditioning, "grid": list(m.grid),
            "classes": m.class_names, "image_size": list(CTX.display_hw), "device": str(CTX.device),
            "drafting": list(controls.DRAFTING), "lantern_k_max": CTX.k_max, "max_draft_len": controls.MAX_DRAFT_LEN,
            "max_prompt_chars": m.max_prompt_chars, "resolutions": list(CTX.variants),
            "example_prompts": list(m.example_prompts), "defaults": controls.default_values(CTX)}


def build_demo(ctx: Context) -> gr.Blocks:
    m = ctx.model
    with gr.Blocks(title="COOL-SD · speculative decoding race", delete_cache=(3600, 7200)) as blocks:
        note = f"\n\n⚠️ {m.note}" if m.note else ""
        name = m.name if len(ctx.variants) < 2 else f"{m.name.split(' (')[0]} ({' / '.join(ctx.variants)} px)"
        gr.Markdown(f"## Speculative decoding race: Eagle-1 vs LANTERN++ vs COOL-SD\n"
                    f"Model: **{name}** on {ctx.device.type.upper()}, {m.grid[0]}×{m.grid[1]} tokens. "
                    f"One click decodes the same image four ways; the decoder that has used the least compute "
                    f"runs next, so each frame compares equal compute.{note}", elem_id="header")
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=320):
                controls.build(ctx)
            with gr.Column(scale=3), gr.Tabs() as tabs:
                for panel in PANELS:
                    with gr.Tab(panel.TITLE, id=panel.ID) as tab:
                        ctx.panels[panel.ID] = panel.build(ctx, tab)
        share.wire_restore(ctx, blocks, tabs, [panel.ID for panel in PANELS])  # share links: ?seed=3&delta=2...
        gr.api(model_info, api_name="model_info")
    blocks.queue(max_size=64, default_concurrency_limit=1)
    return blocks


demo = build_demo(CTX)
LAUNCH_KWARGS = {"theme": gr.themes.Soft(), "css": CSS, "show_error": True, "footer_links": ["api", "gradio"]}

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # no server_name/port here: a Space sets GRADIO_SERVER_NAME / GRADIO_SERVER_PORT, locally 127.0.0.1:7860
    demo.launch(**LAUNCH_KWARGS)
