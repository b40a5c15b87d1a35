"""The Gradio app's panels (UI only: every number comes from `coolsd`; nothing here computes maths).

`app.py` (the entry point) loads the model once into a `Context` (`coolsd.app.context`), builds the
settings column (`coolsd.app.controls`), then one `gr.Tab` per panel module listed in `coolsd.app.demo.PANELS`, then
the share-link restore (`coolsd.app.share.wire_restore`). Modules: context (model, lanes, checks),
controls (settings column), racers (racer choice -> rules, from `coolsd.decoding.variants`), race (Race tab:
stream, replay, overlay), share (trace / PNG strip downloads, share links), theory, how, lab, schedule, cost (the
cost model), plots (figures and token images; drawing only).

The panel interface (each tab is one small module):

    ID, TITLE = "lab", "Quality lab"      # tab id (also the share link's ?tab=) and its label

    def build(ctx: Context, tab: gr.Tab) -> object | None:
        '''Called inside `with gr.Tab(TITLE, id=ID) as tab:`. Lay out the components, then wire the
        events at the bottom. Every event that is part of the API gets an explicit, stable
        `api_name=` (prefixed by the panel, e.g. "lab_grid"); UI-only events get
        `api_visibility="private"`. Returns an object the tests can reach as ctx.panels[ID]
        (e.g. the class whose methods are the handlers), or None.'''

What a panel may use from `ctx` (a `coolsd.app.context.Context`):
    ctx.model      AppModel: kind, name, target, drafter, tokenizer, neighbours, grid (H, W), conditioning
                   ("class" | "text"), class_names, sampling (the model's SamplingConfig), num_tokens
    ctx.device, ctx.pixels_hw, ctx.display_hw (H, W pixels), ctx.image_format, ctx.k_max (LANTERN++ k)
    ctx.lane()     context manager: borrow a list of MAX_LANE_HANDLES (target, drafter) model handles with
                   their own KV caches for one decode (a server-busy error after 60 s); give it back by
                   leaving the `with` (also when a streaming generator is closed)
    ctx.decode_pixels(tokens (T,), -1 = missing) -> (C, h, w); ctx.render(pixels, filled, kinds, overlay)
                   -> PIL image of display_hw; ctx.blank_image(); ctx.check_condition(value) -> engine cond
    ctx.controls   the race settings, name -> component (condition, seed, temperature, ..., racers, resolution,
                   model, style): use them as inputs to read the current settings; ctx.buttons ("generate", "stop")
    ctx.for_model(key)  the Context of picker model `key` (ctx.controls["model"]'s value; None: the app's), loaded
                   on first use and shared by every session (`ctx.catalogue`); ctx.for_trace(trace.settings) the
                   one a recorded race ran on. `ctx` itself is the app's default model: a handler reads the
                   visitor's model from its inputs (add ctx.controls["model"] last) or from the trace, never
                   from state one visitor's pick could change for others
    ctx.share_controls  add your own controls here (name -> component, names unique, e.g. "lab_delta"), and
                   ctx.share_specs[name] its `settings.Spec`: share links carry, check and restore them too
    ctx.variants   variant key -> Context, one per model resolution (LlamaGen "256" / "512"; else one entry);
                   ctx.variant(key) picks one (a clear error for an unknown key)
    ctx.panels     id -> what each earlier panel's build returned
Input checks: the HTTP API skips the page's limits, and Gradio replaces a component by a fresh copy in a
session once an event updates it, so checks live in the handlers, never in a component's preprocess:
wire every API event with `preprocess=False` and check each value with its `settings.Spec`
(`check_values(specs, values)`; the race's settings: `RaceSettings.check(ctx, values)`). The checks
themselves live in `coolsd.util.checks` (ValueError naming the parameter); `context.user_errors()` turns
a ValueError into `bad(message)`, a one-line gr.Error; `coolsd.util.checks.show(value)` quotes user
input safely for a message. `gpu` decorates a function that runs the models (ZeroGPU).
"""
