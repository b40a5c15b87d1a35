"""The Gradio app's panels (UI only: every number comes from `coolsd`). `demo.build_demo` builds them in visible
order around a frozen `Context` (`context.py`), handing each builder only what it reads; what others may read, a
builder returns in a small frozen handle (`tests/test_layout.py` keeps it so). API events get a stable `api_name=`,
UI-only ones `api_visibility="private"`. A handler reads the visitor's model from its inputs or the trace on show
(`ctx.for_model`, `ctx.for_trace`), never from shared state. API events use `preprocess=False` (the API skips the
page's limits), so handlers check each value by its `settings.Spec` (a ValueError becomes one line through
`context.user_errors()`). `gpu` decorates a function that runs the models (ZeroGPU)."""
