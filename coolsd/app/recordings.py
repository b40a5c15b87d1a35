"""The recorded default races (`coolsd.app.shipped`), read and drawn once per model and process.

The Race tab opens on its model's recording; a picked model shows its own; the Microscope and the Cost
model use it until the session races. `Recordings` is made once by `make_demo` and handed to each
builder that needs it.
"""

from __future__ import annotations

import threading

from coolsd.app import shipped
from coolsd.app.context import Context
from coolsd.app.race_view import RaceFrame, draw
from coolsd.compare.trace import RaceTrace


class Recordings:
    """model key -> (trace, status line, final frame) of its recorded default race, or None when it has none."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx  # the app's model: a key of None or "" means it
        self._found: dict[str, tuple[RaceTrace, str, RaceFrame] | None] = {}
        self._lock = threading.Lock()

    def of(self, ctx: Context) -> tuple[RaceTrace, str, RaceFrame] | None:
        """(trace, status line, final frame) of the recorded default race of `ctx`'s model; None without one."""
        key = ctx.model_key
        if key not in self._found:
            with self._lock:
                if key not in self._found:
                    found = shipped.load(ctx.for_model())
                    if found is not None:
                        trace, label = found[0], shipped.label(found[1])
                        found = (trace, label, draw(ctx.for_trace(trace.settings), trace, len(trace), False, label))
                    self._found[key] = found
        return self._found[key]

    def of_model(self, model=None) -> tuple[RaceTrace, str, RaceFrame] | None:
        """`of` for picker model `model` (None or "": the app's)."""
        return self.of(self.ctx.for_model(model))

    def trace_or_recorded(self, trace, model=None) -> RaceTrace | None:
        """This session's race when it has one, else the recorded default race of `model` (default: the app's;
        None when it has none)."""
        if isinstance(trace, RaceTrace) and len(trace):
            return trace
        found = self.of_model(model)
        return found[0] if found else None
