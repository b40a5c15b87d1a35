"""The recorded default race the Race tab shows at page open: files under assets/traces/.

One gzipped JSON file per model (`<model slug>.json.gz`): a `coolsd.compare.trace` trace plus "recorded": the
machine (CPU model name), its `cpu_key` and the model's execution (precision and path: what its tokens depend on
besides the seed), date, load average, command, and the control defaults the race ran with. `load(ctx)` returns it
only when the file's model is the loaded model and its defaults are the app's current ones; otherwise None (the page
opens empty, as without a file). Write one with `python -m coolsd.app.record_default`.
"""

from __future__ import annotations

import datetime
import gzip
import json
import logging
import os
from pathlib import Path

from coolsd.app.context import Context
from coolsd.app.settings import RaceSettings
from coolsd.app.trace_files import TRACES_DIR, trace_file
from coolsd.compare.trace import RaceTrace
from coolsd.util.machine import cpu_key, cpu_name

COMMAND = "python -m coolsd.app.record_default"
log = logging.getLogger("coolsd.app")


def path_for(ctx: Context, folder: Path | None = None) -> Path:
    """The recording of `ctx`'s model in `folder` (default TRACES_DIR)."""
    return trace_file(ctx.model.name, folder or TRACES_DIR)


def machine() -> str:
    """"<CPU model name>, <n> cores" (`coolsd.util.machine.cpu_name`)."""
    return f"{cpu_name()}, {os.cpu_count()} cores"


def defaults_json(ctx: Context) -> dict:
    """The race settings' defaults and the rules they make, as they read back from JSON (tuples become lists)."""
    defaults = RaceSettings.defaults(ctx)
    rules = {key: rule.config() for key, rule in defaults.plan(ctx).rules.items()}
    return json.loads(json.dumps(defaults.as_dict() | {"rules": rules}))


def save(ctx: Context, trace: RaceTrace, out: str | Path | None = None, chosen: dict | None = None) -> Path:
    """Write `trace` with where, when and with which defaults it was recorded; returns the path. `chosen`: how its
    seed was chosen ({"seed": s, "tried": [...], "why": "..."}); the seed becomes the default the app races with."""
    path = Path(out) if out else path_for(ctx)
    path.parent.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 - Python 3.10 has no datetime.UTC
    defaults = defaults_json(ctx) | ({"seed": chosen["seed"]} if chosen else {})
    recorded = {"machine": machine(), "cpu": cpu_key(), "execution": execution(ctx),
                "device": ctx.device.type, "date": now.strftime("%Y-%m-%d %H:%M UTC"),
                "load_average": [round(v, 2) for v in os.getloadavg()], "command": COMMAND,
                "defaults": defaults, "seed": defaults["seed"], "seed_choice": chosen}
    data = trace.to_json() | {"recorded": recorded}
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(data, f, separators=(",", ":"))
    return path


def load(ctx: Context, folder: Path | None = None) -> tuple[RaceTrace, dict] | None:
    """(trace, its "recorded" block) of the loaded model at the current defaults, else None."""
    path = path_for(ctx, folder)
    if not path.exists():
        return None
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
        trace = RaceTrace.from_json(data)
    except (OSError, ValueError, KeyError, TypeError) as err:
        log.warning("shipped trace %s is unreadable (%s); the page opens empty", path, err)
        return None
    recorded = data.get("recorded") or {}
    if data.get("model") != ctx.model.name or recorded.get("defaults") != defaults_json(ctx):
        log.warning("shipped trace %s was recorded for other defaults or another model; re-record it with `%s`",
                    path, COMMAND)
        return None
    return trace, recorded


def same_machine(ctx: Context, recorded: dict) -> bool:
    """Whether this machine decodes a recording's tokens bit for bit: the same CPU (`cpu_key`: other vector units
    round products differently, and a late draw can fall the other way) and the same execution of the model."""
    return recorded.get("cpu") == cpu_key() and recorded.get("execution") == execution(ctx)


def execution(ctx: Context) -> str:
    """How the model's calls run: its precision and execution path, e.g. "bfloat16 on fused"."""
    return f"{ctx.model.execution} on {ctx.model.path}"


def label(recorded: dict) -> str:
    """The status line of the shipped race."""
    load = recorded.get("load_average")
    busy = f", load average {load[0]:g}" if load else ""
    choice = recorded.get("seed_choice") or {}
    why = f" Seed {choice['seed']}: {choice['why']}." if choice.get("why") else ""
    return (f"**Recorded race** of the default settings on {recorded.get('machine', 'an unrecorded machine')} "
            f"({recorded.get('device', 'cpu').upper()}{busy}), {recorded.get('date', 'undated')}: replay it with the "
            f"slider, or press **Generate** to race live on this server.{why}")
