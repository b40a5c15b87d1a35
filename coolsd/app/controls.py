"""The race settings (the left column): condition, sampling, drafting and each rule's knobs, with presets.

`build(ctx)` lays out one control per `coolsd.app.settings.RaceSettings` field (made by its Spec)
and stores them in `ctx.controls` (name -> component, in the race's argument order), the Generate /
Stop buttons in `ctx.buttons`. Defaults come from the Specs (read from the library's dataclasses).
"""

from __future__ import annotations

import gradio as gr

from coolsd.app.context import TEXT_MODELS, Context
from coolsd.app.settings import EXAMPLE_PROMPTS, RaceSettings, specs
from coolsd.decoding.rules import CoolSDRule

# the accordions of the settings column: (title, settings in it, open)
GROUPS = [
    ("Sampling", ("seed", "temperature", "top_k", "cfg_scale"), True),
    ("Drafting", ("draft_len", "drafting"), True),
    ("COOL-SD", ("delta", "nu", "mean_omega", "mu"), True),
    ("LANTERN++", ("lantern_k", "lantern_lambda"), True),
    ("More rules: UniformRSD, linear decay, custom schedule",
     ("uniform_delta", "linear_delta", "linear_slope", "custom_omegas"), False),
]

# the controls whose choices, bounds or defaults depend on the model (a model switch updates them)
MODEL_CONTROLS = ("condition", "style", "temperature", "top_k", "cfg_scale", "lantern_k", "resolution")


def mixed_conditioning(ctx: Context) -> bool:
    """Whether the picker offers text and class models both (then the condition is a dropdown taking any text)."""
    keys = ctx.catalogue.keys if ctx.catalogue else [ctx.model_key]
    return any(k in TEXT_MODELS for k in keys) and any(k not in TEXT_MODELS for k in keys)


def _condition_choices(picked: Context) -> list:
    m = picked.model
    return [(n, n) for n in m.base_class_names] if m.conditioning == "class" else list(m.example_prompts or
                                                                                         EXAMPLE_PROMPTS)


def model_updates(ctx: Context, picked: Context, values=None) -> dict:
    """name -> update of each MODEL_CONTROLS control for model `picked`: its choices, bounds and labels, showing
    `values[name]` (checked values of that model) or else the model's default."""
    table, values = specs(picked), values or {}
    out = {name: table[name].update(values.get(name)) for name in MODEL_CONTROLS}
    if mixed_conditioning(ctx):
        out["condition"] = gr.Dropdown(choices=_condition_choices(picked), label=table["condition"].label,
                                       value=values.get("condition", table["condition"].default))
    return out


def presets(ctx: Context) -> tuple[list[list], list[str]]:
    """Example rows (every race input, in order) and their labels; nothing is computed at start-up."""
    d = RaceSettings.defaults(ctx)
    names = ctx.model.class_names

    def row(**changes):
        return list(d.replace(**changes).as_dict().values())

    prompts = ctx.model.example_prompts or EXAMPLE_PROMPTS
    pick = (lambda i: names[i % len(names)]) if names else (lambda i: prompts[i % len(prompts)])
    rows = [
        (f"Paper setting: COOL-SD δ = 1.1, ν = {CoolSDRule.nu:g} (floored at 1)", row(condition=pick(3), delta=1.1)),
        ("Aggressive: COOL-SD δ = 4", row(condition=pick(8), seed=1, delta=4.0, overlay=True)),
        ("Uniform relaxation (ν = 0)", row(condition=pick(5), seed=2, nu=0.0)),
        ("Sanity: δ = 1, ν = 0 gives Eagle-1's image", row(condition=pick(2), delta=1.0, nu=0.0)),
        ("LANTERN++ k = 5, λ = 20", row(condition=pick(7), lantern_k=min(5, ctx.k_max), lantern_lambda=20.0)),
        ("Static tree (Eagle-1's 25 nodes)", row(condition=pick(0), drafting="eagle-25")),
        ("Long drafts: L = 8", row(condition=pick(6), draft_len=8, overlay=True)),
        ("Schedules at mean ω = 2: uniform, linear, exponential unclipped and floored",
         row(condition=pick(4), racers=["uniform-rsd", "linear-decay", "cool-sd-unclipped", "cool-sd"])),
        ("LANTERN++: published residual vs G*", row(condition=pick(9), racers=["eagle-1", "lantern++",
                                                                               "lantern++-gstar"])),
    ]
    return [r for _, r in rows], [label for label, _ in rows]


def build(ctx: Context) -> None:
    """The settings column; call inside a `gr.Column`. Fills ctx.controls (argument order) and ctx.buttons."""
    table = specs(ctx)
    c = {"model": table["model"].component()}
    with gr.Row(equal_height=True):
        if mixed_conditioning(ctx):
            spec = table["condition"]
            c["condition"] = gr.Dropdown(choices=_condition_choices(ctx), value=spec.default, label=spec.label,
                                         allow_custom_value=True, elem_id="condition", scale=2)
        else:
            c["condition"] = table["condition"].component(scale=2)
        c["style"] = table["style"].component(scale=1, min_width=120)
    if ctx.model.conditioning == "text":
        gr.Examples([[p] for p in (ctx.model.example_prompts or EXAMPLE_PROMPTS)], [c["condition"]],
                    label="Example prompts", cache_examples=False, examples_per_page=8)
    c["racers"] = table["racers"].component()
    with gr.Row():
        ctx.buttons["generate"] = gr.Button("Generate", variant="primary", elem_id="gen-btn")
        ctx.buttons["stop"] = gr.Button("Stop", variant="stop", elem_id="stop-btn")
    c["overlay"] = table["overlay"].component()
    for title, names, is_open in GROUPS:
        with gr.Accordion(title, open=is_open):
            for name in names:
                c[name] = table[name].component()
    c["resolution"] = table["resolution"].component()
    ctx.controls = {name: c[name] for name in RaceSettings.names()}  # argument order
    rows, labels = presets(ctx)
    # with a model picker, a preset keeps the picked model, class and style (its classes are the default model's)
    names = RaceSettings.names()
    kept = [n for n in names if len(ctx.catalogue.keys) < 2 or n not in ("model", "style", "condition")]
    gr.Examples([[row[names.index(n)] for n in kept] for row in rows], [ctx.controls[n] for n in kept],
                label="Presets (click one, then Generate)", example_labels=labels, cache_examples=False,
                examples_per_page=10)
    c["mean_omega"].change(lambda on: gr.Slider(interactive=not on), c["mean_omega"], c["mu"], queue=False,
                           api_visibility="private", show_progress="hidden")
