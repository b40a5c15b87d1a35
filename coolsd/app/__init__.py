"""The Gradio app's panels (UI only: every number comes from `coolsd`; nothing here computes maths).

`app.py` (the entry point) calls `coolsd.app.demo.make_demo`: the model comes from the one registry
(`coolsd.models.registry.MODELS`) into a frozen `Context` (`context.py`), then `demo.build_demo` builds
every panel in one visible order, handing each builder what it reads, and returns a frozen `Page`:

    controls = controls.build(ctx)                                  # the settings column -> Controls
    race = race.build(ctx, controls, recordings, tab)               # -> RaceHandle (outputs by name, trace state)
    microscope.build(ctx, controls["model"], race.outputs.trace, recordings, tab)
    lab = lab.build(ctx, controls["condition"], controls["model"], tab, controls["delta"])  # -> LabHandle
    schedule.build(ctx, tab); theory.build(ctx, controls, tab); how.build(ctx, tab)
    cost.build(ctx, controls["model"], race.outputs.trace, recordings, tab)
    tour.wire(guide, tabs, controls, race, lab); share.wire_restore(ctx, controls, blocks, tabs, ids)

No panel reads another panel's attributes: what others may read, a builder returns in a small frozen handle
(`tests/test_layout.py` keeps it so). Modules: context (the Context, the Catalogue of models on offer, the
one-line errors), controls (settings column), settings (every race argument's Spec: label, bounds from the
rule dataclasses, check), racers (racer choice -> rules, from `coolsd.decoding.variants`), race (streams the
race), race_view (a race's outputs and frames, by name), after_race (stop, overlay, replay), recorded (the
recorded default races), share (downloads, share links), judge (what the model's classifier sees in a finished
picture, under it), microscope, lab, sweep_view (the Lab's precomputed δ sweep), schedule, theory, cost, how,
tour, plots (figures and token images; drawing only), serving (sessions, unknown endpoints).

Every event that is part of the API gets an explicit, stable `api_name=`; UI-only events get
`api_visibility="private"`. A handler reads the visitor's model from its inputs (the picker) or from the trace
on show, never from state one visitor's pick could change for others; `ctx.for_model(key)` gives the Context of
a picked model (loaded on first use, shared by every session), `ctx.for_trace(trace.settings)` the one a race
ran on. What a visitor names as a condition becomes the engine's in one place, `ctx.check_condition(value,
style)` (`ModelBundle.condition`, `coolsd.models.conditions`).

Input checks: the HTTP API skips the page's limits, and Gradio replaces a component by a fresh copy in a
session once an event updates it, so checks live in the handlers, never in a component's preprocess:
wire every API event with `preprocess=False` and check each value with its `settings.Spec`
(`check_values(specs, values)`; the race's settings: `RaceSettings.check(ctx, values)`). The checks
themselves live in `coolsd.util.checks` (ValueError naming the parameter); `context.user_errors()` turns
a ValueError into `bad(message)`, a one-line gr.Error; `coolsd.util.checks.show(value)` quotes user
input safely for a message. `gpu` decorates a function that runs the models (ZeroGPU).
"""
