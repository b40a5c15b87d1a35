"""Record the race the app shows at page open: the default settings, on this machine, as a shipped trace.

    python -m coolsd.app.record_default                 # the model the app would load ($COOLSD_MODEL or default)
    python -m coolsd.app.record_default --model tiny    # any key of `coolsd.models.registry.MODELS`

Runs the Race tab's own handler with every control at its default (`coolsd.app.settings.RaceSettings.defaults`),
so the recording is exactly what Generate gives, and writes `assets/traces/<model slug>.json.gz`: the
trace (`coolsd.compare.trace` format) plus where and when it ran (CPU model name, date, load) and
the defaults it used. The app shows it only while the model and the defaults still match
(`coolsd.app.shipped`); a change of defaults means recording again with this command.
"""

from __future__ import annotations

import argparse
import os
import sys

OFFLINE = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
for _key, _value in OFFLINE.items():
    os.environ.setdefault(_key, _value)

from coolsd.app import shipped  # noqa: E402
from coolsd.app.context import Context, open_context, serving_threads  # noqa: E402
from coolsd.app.race import LiveRaces, RaceStream  # noqa: E402
from coolsd.app.settings import RaceSettings  # noqa: E402
from coolsd.compare.trace import RaceTrace  # noqa: E402


def record(ctx: Context) -> RaceTrace:
    """The default race of `ctx`'s model, run by the Race tab's handler; its finished trace."""
    frames = RaceStream(ctx, LiveRaces()).race(**RaceSettings.defaults(ctx).as_dict())
    last = None
    for frame in frames:
        last = frame
    trace = last.trace
    if not isinstance(trace, RaceTrace) or trace.status != "finished":
        raise RuntimeError("the default race did not finish")
    return trace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="embedded | tiny | llamagen | ... (default: as the app)")
    parser.add_argument("--out", default=None, help="output file (default: assets/traces/<model slug>.json.gz)")
    args = parser.parse_args(argv)
    serving_threads()  # as app.py runs it
    ctx = open_context(args.model, others=[])
    trace = record(ctx)
    path = shipped.save(ctx, trace, args.out)
    print(f"wrote {path}: {len(trace)} race steps of {ctx.model.name}, {shipped.machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
