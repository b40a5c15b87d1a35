"""The race settings (the left column): condition, sampling, drafting and each rule's knobs, with presets.

`build(ctx)` lays the controls out and stores them in `ctx.controls` (name -> component, in the
race's argument order) and the Generate / Stop buttons in `ctx.buttons`. Defaults are read from
the library's dataclasses, never retyped.
"""

from __future__ import annotations

import gradio as gr

from coolsd.app import racers
from coolsd.app.context import MAX_SEED, Context, checked
from coolsd.decoding.engine import DecodeConfig
from coolsd.decoding.rules import CoolSDRule, LanternPPRule
from coolsd.decoding.tree import TREES

MAX_DRAFT_LEN = 8
DRAFTING = {"chain": "chain (L drafts per round)", "eagle-25": "static tree (Eagle-1's 25 nodes)"}
assert set(DRAFTING) - {"chain"} <= set(TREES), "every static tree offered must exist in coolsd.decoding.tree.TREES"
EXAMPLE_PROMPTS = ["a red fox sitting in the snow, photo", "a lighthouse on a cliff at sunset",
                   "a bowl of ramen, studio lighting"]
# the race's arguments, in order (the API's positional order too)
ARGS = ("condition", "seed", "temperature", "top_k", "cfg_scale", "draft_len", "drafting", "delta", "nu", "mu",
        "mean_omega", "lantern_k", "lantern_lambda", "overlay", "racers", "uniform_delta", "linear_delta",
        "linear_slope", "custom_omegas", "resolution")


def top_k_max(ctx: Context) -> int:
    """The top-k slider's end: the codebook size (top-k >= V keeps every code, like a smaller V would)."""
    return int(getattr(ctx.model.target, "vocab_size", 256))


def default_values(ctx: Context) -> dict:
    """Defaults of every race argument, read from the library's dataclasses (never retyped)."""
    m = ctx.model
    s, cool, lantern = m.sampling, CoolSDRule(), LanternPPRule()
    prompts = m.example_prompts or EXAMPLE_PROMPTS
    return {"condition": m.class_names[3 % len(m.class_names)] if m.class_names else prompts[0],
            "seed": 0, "temperature": s.temperature, "top_k": min(s.top_k, top_k_max(ctx)), "cfg_scale": s.cfg_scale,
            "draft_len": DecodeConfig().draft_len, "drafting": "chain",
            "delta": cool.delta, "nu": cool.nu, "mu": 0.0, "mean_omega": cool.mu is None,
            "lantern_k": min(lantern.k, ctx.k_max), "lantern_lambda": lantern.lam, "overlay": False,
            "racers": list(racers.DEFAULT_RACERS), "resolution": ctx.variant_key} | racers.DEFAULTS


def presets(ctx: Context) -> tuple[list[list], list[str]]:
    """Example rows (every race input, in order) and their labels; nothing is computed at start-up."""
    d = default_values(ctx)
    names = ctx.model.class_names

    def row(**changes):
        v = d | changes
        return [v[k] for k in ARGS]

    prompts = ctx.model.example_prompts or EXAMPLE_PROMPTS
    pick = (lambda i: names[i % len(names)]) if names else (lambda i: prompts[i % len(prompts)])
    rows = [
        ("Paper setting: COOL-SD δ = 1.1, ν = 0.7", row(condition=pick(3), delta=1.1)),
        ("Aggressive: COOL-SD δ = 4", row(condition=pick(8), seed=1, delta=4.0, overlay=True)),
        ("Uniform relaxation (ν = 0)", row(condition=pick(5), seed=2, nu=0.0)),
        ("Sanity: δ = 1, ν = 0 gives Eagle-1's image", row(condition=pick(2), delta=1.0, nu=0.0)),
        ("LANTERN++ k = 5, λ = 20", row(condition=pick(7), lantern_k=min(5, ctx.k_max), lantern_lambda=20.0)),
        ("Static tree (Eagle-1's 25 nodes)", row(condition=pick(0), drafting="eagle-25")),
        ("Long drafts: L = 8", row(condition=pick(6), draft_len=8, overlay=True)),
        ("Schedules at mean ω = 2: uniform, linear, exponential, floored",
         row(condition=pick(4), racers=["uniform-rsd", "linear-decay", "cool-sd", "cool-sd-floor"])),
        ("LANTERN++: published residual vs G*", row(condition=pick(9), racers=["eagle-1", "lantern++",
                                                                               "lantern++-gstar"])),
    ]
    return [r for _, r in rows], [label for label, _ in rows]


def build(ctx: Context) -> None:
    """The settings column; call inside a `gr.Column`. Fills ctx.controls and ctx.buttons."""
    d = default_values(ctx)
    m = ctx.model
    c = ctx.controls
    if m.conditioning == "text":
        c["condition"] = gr.Textbox(value=d["condition"], label="Prompt", max_length=m.max_prompt_chars, lines=2,
                                    elem_id="condition")
        gr.Examples([[p] for p in (m.example_prompts or EXAMPLE_PROMPTS)], [c["condition"]], label="Example prompts",
                    cache_examples=False, examples_per_page=8)
    else:
        c["condition"] = gr.Dropdown(choices=m.class_names, value=d["condition"], label="Digit", elem_id="condition")
    c["racers"] = gr.CheckboxGroup(choices=[(label, key) for key, label in racers.RACERS.items()], value=d["racers"],
                                   label=f"Racers (up to {racers.MAX_RACERS}; vanilla AR always races)",
                                   elem_id="racers")
    with gr.Row():
        ctx.buttons["generate"] = gr.Button("Generate", variant="primary", elem_id="gen-btn")
        ctx.buttons["stop"] = gr.Button("Stop", variant="stop", elem_id="stop-btn")
    overlay = gr.Checkbox(value=d["overlay"], label="overlay: colour tokens by outcome", elem_id="overlay")
    with gr.Accordion("Sampling", open=True):
        c["seed"] = gr.Number(value=d["seed"], label="seed", precision=0, minimum=0, maximum=MAX_SEED, elem_id="seed")
        c["temperature"] = gr.Slider(0.0, 2.0, value=d["temperature"], step=0.05, label="temperature (0 = greedy)",
                                     elem_id="temperature")
        c["top_k"] = gr.Slider(0, top_k_max(ctx), value=d["top_k"], step=1, label="top-k (0 = off)", elem_id="top-k")
        c["cfg_scale"] = gr.Slider(1.0, 10.0, value=d["cfg_scale"], step=0.1, label="CFG scale (1 = off)",
                                   elem_id="cfg")
    with gr.Accordion("Drafting", open=True):
        c["draft_len"] = gr.Slider(1, MAX_DRAFT_LEN, value=d["draft_len"], step=1, label="draft length L",
                                   elem_id="draft-len")
        c["drafting"] = gr.Radio(choices=[(v, k) for k, v in DRAFTING.items()], value=d["drafting"],
                                 label="Drafting", elem_id="drafting")
    with gr.Accordion("COOL-SD", open=True):
        c["delta"] = gr.Slider(0.1, 8.0, value=d["delta"], step=0.05, label="delta (overall relaxation)",
                               elem_id="delta")
        c["nu"] = gr.Slider(0.0, 3.0, value=d["nu"], step=0.05, label="nu (annealing rate)", elem_id="nu")
        c["mean_omega"] = gr.Checkbox(value=d["mean_omega"], label="mean omega = delta (sets mu)",
                                      elem_id="mean-omega")
        c["mu"] = gr.Slider(-5.0, 5.0, value=d["mu"], step=0.05, label="mu (schedule shift)",
                            interactive=not d["mean_omega"], elem_id="mu")
    with gr.Accordion("LANTERN++", open=True):
        c["lantern_k"] = gr.Slider(1, ctx.k_max, value=d["lantern_k"], step=1, label="k (neighbours)",
                                   elem_id="lantern-k")
        c["lantern_lambda"] = gr.Slider(1.0, 50.0, value=d["lantern_lambda"], step=0.5, label="lambda (budget)",
                                        elem_id="lantern-lambda")
    with gr.Accordion("More rules: UniformRSD, linear decay, custom schedule", open=False):
        c["uniform_delta"] = gr.Slider(0.1, 8.0, value=d["uniform_delta"], step=0.05, label="UniformRSD delta",
                                       elem_id="uniform-delta")
        c["linear_delta"] = gr.Slider(0.1, 8.0, value=d["linear_delta"], step=0.05,
                                      label="linear decay delta (mean omega)", elem_id="linear-delta")
        c["linear_slope"] = gr.Slider(0.0, 1.0, value=d["linear_slope"], step=0.05,
                                      label="linear decay slope (0 = uniform, 1 = falls to 0)", elem_id="linear-slope")
        c["custom_omegas"] = gr.Textbox(value=d["custom_omegas"], label="custom schedule omega_1, omega_2, ...",
                                        max_lines=1, elem_id="custom-omegas")
    c["overlay"] = overlay
    variants = list(ctx.variants) or [ctx.variant_key]
    c["resolution"] = gr.Radio(choices=variants, value=d["resolution"], label="resolution (px)",
                               visible=len(variants) > 1, elem_id="resolution")
    ctx.controls = {k: c[k] for k in ARGS}  # argument order
    for name, component in ctx.controls.items():
        if name == "racers":
            checked(component, racers.check_racers)
        elif name == "custom_omegas":
            checked(component, lambda text: (racers.parse_omegas(text), text)[1])
        elif name != "condition" or not isinstance(component, gr.Textbox):  # a prompt: ctx.check_condition
            checked(component)
    rows, labels = presets(ctx)
    gr.Examples(rows, list(ctx.controls.values()), label="Presets (click one, then Generate)", example_labels=labels,
                cache_examples=False, examples_per_page=10)
    c["mean_omega"].change(lambda on: gr.Slider(interactive=not on), c["mean_omega"], c["mu"], queue=False,
                           api_visibility="private", show_progress="hidden")
