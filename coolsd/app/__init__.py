"""The Gradio app's panels (UI only: every number comes from `coolsd`; nothing here computes maths).

`app.py` calls `coolsd.app.demo.make_demo`: the model comes from the registry into a frozen `Context`
(`context.py`), then `demo.build_demo` builds every panel in one visible order, handing each builder what it reads:

    controls = controls.build(ctx)                                  # the settings column -> Controls
    race = race.build(ctx, controls, recordings, tab)               # -> RaceHandle (outputs by name, trace state)
    microscope.build(ctx, controls["model"], race.outputs.trace, recordings, tab)
    lab = lab.build(ctx, controls["condition"], controls["model"], tab, controls["delta"])  # -> LabHandle
    schedule.build(ctx, tab); theory.build(ctx, controls, tab); how.build(ctx, tab)
    cost.build(ctx, controls["model"], race.outputs.trace, recordings, tab)
    tour.wire(guide, tabs, controls, race, lab); share.wire_restore(ctx, controls, blocks, tabs, ids)

No panel reads another's attributes: what others may read, a builder returns in a small frozen handle
(`tests/test_layout.py` keeps it so). API events get a stable `api_name=`, UI-only ones `api_visibility="private"`.
A handler reads the visitor's model from its inputs or from the trace on show (`ctx.for_model`, `ctx.for_trace`),
never from state another visitor could change. The API skips the page's limits, so every API event is wired with
`preprocess=False` and its handler checks each value by its `settings.Spec` (`coolsd.util.checks`; a ValueError
becomes one line through `context.user_errors()`). `gpu` decorates a function that runs the models (ZeroGPU).
"""
