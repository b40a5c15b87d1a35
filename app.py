"""coolsd demo: Eagle-1, LANTERN++ and COOL-SD (plus vanilla AR) racing side by side, streamed round by round.

    python app.py                      # http://127.0.0.1:7860 (a Space runs the same file)
    COOLSD_MODEL=tiny python app.py    # emoji | mnist | tiny (random weights, fast) | llamagen (GPU)

The entry point only: offline flags, the model chosen from the environment, the demo built by
`coolsd.app.demo.make_demo` (panels documented in `coolsd.app`), launch. All maths lives in `coolsd`.
API: see docs/app-and-api.md.
"""

from __future__ import annotations

import os

# No network at run time: set before gradio / huggingface_hub are imported.
for _key, _value in {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
                     "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1"}.items():
    os.environ.setdefault(_key, _value)

import logging  # noqa: E402

# before the model loads: its execution path and precision are logged as it loads
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

from coolsd.app.demo import LAUNCH_KWARGS, make_demo, workers_from_env  # noqa: E402
from coolsd.app.sessions import limit_arenas  # noqa: E402
from coolsd.models.llamagen.fetch import fetch_on_start  # noqa: E402

limit_arenas()  # glibc: two malloc arenas, not one per worker thread (memory per visitor)
WORKERS = workers_from_env()
fetch_on_start()  # downloads LlamaGen only when $COOLSD_FETCH_LLAMAGEN asks (a Space sets it), in a child process
APP = make_demo(workers=WORKERS)  # the model: $COOLSD_MODEL, else as coolsd.models.registry.default_key says
CTX, demo = APP.ctx, APP.blocks  # a Space launches `demo`

if __name__ == "__main__":
    # no server_name/port here: a Space sets GRADIO_SERVER_NAME / GRADIO_SERVER_PORT, locally 127.0.0.1:7860
    demo.launch(**LAUNCH_KWARGS)
