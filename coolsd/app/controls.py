"""The race settings column: one control per `RaceSettings` field, presets; `build` returns the `Controls` handle."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from coolsd.app.context import Context
from coolsd.app.settings import EXAMPLE_PROMPTS, RaceSettings, specs
from coolsd.decoding.rules import CoolSDRule
from coolsd.models.conditions import name_choices

# the accordions of the settings column: (title, settings in it, open)
GROUPS = [
    ("Sampling", ("seed", "temperature", "top_k", "cfg_scale"), True),
    ("Drafting", ("draft_len", "drafting", "noise"), True),
    ("COOL-SD", ("delta", "nu", "mean_omega", "mu"), True),
    ("LANTERN++", ("lantern_k", "lantern_lambda"), True),
    ("More rules: UniformRSD, linear decay, custom schedule",
     ("uniform_delta", "linear_delta", "linear_slope", "custom_omegas"), False),
    ("No drafter: the Jacobi window W", ("sjd_window",), False),
]

# the controls whose choices, bounds or defaults depend on the model (a model switch updates them)
MODEL_CONTROLS = ("condition", "style", "temperature", "top_k", "cfg_scale", "lantern_k", "resolution")
ALL_GROUPS = "all groups"


@dataclass(frozen=True)
class Controls:
    """`settings`: name -> component in argument order; `group`: the condition's group filter (hidden without)."""

    settings: dict
    generate: gr.Button
    stop: gr.Button
    group: gr.Dropdown

    def __getitem__(self, name: str):
        return self.settings[name]

    @property
    def inputs(self) -> list:
        return list(self.settings.values())


def mixed_conditioning(ctx: Context) -> bool:
    """Whether the picker offers text and class models both (then the condition is a dropdown taking any text)."""
    keys = ctx.catalogue.keys
    return any(ctx.catalogue.is_text(k) for k in keys) and any(not ctx.catalogue.is_text(k) for k in keys)


def group_choices(picked: Context) -> list[str]:
    """The group filter's choices: "all groups", then the model's groups in first-seen order."""
    groups = picked.model.class_groups if picked.model.conditioning == "class" else []
    return [ALL_GROUPS, *dict.fromkeys(groups)] if groups else [ALL_GROUPS]


def filter_names(picked: Context, group, current):
    """The condition dropdown showing the names of `group` (keeps the current name when it is one of them)."""
    if picked.model.conditioning != "class":
        return gr.skip()
    m = picked.model
    names = set(m.conditions.in_group(None if group == ALL_GROUPS else group))
    choices = [(label, n) for label, n in name_choices(m.conditions, m.class_chars) if n in names]
    return gr.Dropdown(choices=choices, value=current if current in names else choices[0][1])


def _condition_choices(picked: Context) -> list:
    m = picked.model
    if m.conditioning == "class":
        return name_choices(m.conditions, m.class_chars)
    return list(m.example_prompts or EXAMPLE_PROMPTS)


def model_updates(ctx: Context, picked: Context, values=None) -> dict:
    """name -> update of each MODEL_CONTROLS control for model `picked`, showing `values[name]` or its default."""
    table, values = specs(picked), values or {}
    out = {name: table[name].component(value=values.get(name, table[name].default)) for name in MODEL_CONTROLS}
    # a class model: every name (searchable; typed text is matched); mixed text and class models: a dropdown
    if picked.model.conditioning == "class" or mixed_conditioning(ctx):
        out["condition"] = gr.Dropdown(choices=_condition_choices(picked), label=table["condition"].label,
                                       value=values.get("condition", table["condition"].default))
    return out


def presets(ctx: Context) -> tuple[list[list], list[str]]:
    """Example rows (every race input, in order) and their labels; nothing is computed at start-up."""
    d = RaceSettings.defaults(ctx)
    names = list(ctx.model.conditions.classes) if ctx.model.conditioning == "class" else []

    def row(**changes):
        return list(d.replace(**changes).as_dict().values())

    prompts = ctx.model.example_prompts or EXAMPLE_PROMPTS
    pick = (lambda i: names[i % len(names)]) if names else (lambda i: prompts[i % len(prompts)])
    rows = [
        (f"Paper setting: COOL-SD δ = 1.1, ν = {CoolSDRule.nu:g} (floored at 1), L = 3",
         row(condition=pick(3), delta=1.1, draft_len=3)),
        ("Aggressive: COOL-SD δ = 4", row(condition=pick(8), seed=1, delta=4.0, overlay=True)),
        ("Uniform relaxation (ν = 0), L = 3", row(condition=pick(5), seed=2, nu=0.0, draft_len=3)),
        ("Sanity: δ = 1, ν = 0 gives Eagle-1's image", row(condition=pick(2), delta=1.0, nu=0.0)),
        ("LANTERN++ k = 5, λ = 20", row(condition=pick(7), lantern_k=min(5, ctx.k_max), lantern_lambda=20.0)),
        ("Static tree (Eagle-1's 25 nodes)", row(condition=pick(0), drafting="eagle-25")),
        ("Long drafts: L = 8", row(condition=pick(6), draft_len=8, overlay=True)),
        ("Schedules at mean ω = 2: uniform, linear, exponential unclipped and floored",
         row(condition=pick(4), racers=["uniform-rsd", "linear-decay", "cool-sd-unclipped", "cool-sd"])),
        ("LANTERN++: published residual vs G*", row(condition=pick(9), racers=["eagle-1", "lantern++",
                                                                               "lantern++-gstar"])),
        ("Same noise: Eagle-1 and SJD draw vanilla AR's picture; the overlay marks where COOL-SD left it",
         row(condition=pick(1), noise="same", overlay=True, racers=["eagle-1", "sjd", "cool-sd"])),
    ]
    return [r for _, r in rows], [label for label, _ in rows]


def build(ctx: Context) -> Controls:
    """The settings column; call inside a `gr.Column`. Returns the `Controls` every panel reads."""
    table = specs(ctx)
    c = {"model": table["model"].component()}
    groups = group_choices(ctx)
    group = gr.Dropdown(groups, value=ALL_GROUPS, label="Group", elem_id="group", visible=len(groups) > 1,
                        filterable=True)
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
        generate = gr.Button("Generate", variant="primary", elem_id="gen-btn")
        stop = gr.Button("Stop", variant="stop", elem_id="stop-btn")
    c["overlay"] = table["overlay"].component()
    for title, names, is_open in GROUPS:
        with gr.Accordion(title, open=is_open):
            for name in names:
                c[name] = table[name].component()
    c["resolution"] = table["resolution"].component()
    controls = Controls({name: c[name] for name in RaceSettings.names()}, generate, stop, group)
    presets_row(ctx, controls)
    c["mean_omega"].change(lambda on: gr.Slider(interactive=not on), c["mean_omega"], c["mu"], queue=False,
                           api_visibility="private", show_progress="hidden")
    group.input(lambda model, g, current: filter_names(ctx.for_model(model), g, current),
                [c["model"], group, c["condition"]], c["condition"], api_visibility="private", show_progress="hidden")
    return controls


def presets_row(ctx: Context, controls: Controls) -> None:
    """The presets set the settings only; with a picker they keep model, class and style (theirs: the default's)."""
    rows, labels = presets(ctx)
    names = RaceSettings.names()
    kept = [n for n in names if len(ctx.catalogue.keys) < 2 or n not in ("model", "style", "condition")]
    gr.Examples([[row[names.index(n)] for n in kept] for row in rows], [controls[n] for n in kept],
                label="Presets (click one, then Generate)", example_labels=labels, cache_examples=False,
                examples_per_page=10)
