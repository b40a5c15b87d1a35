"""The demo on the tiny random-weight model, built once per test session; no environment variable needed."""

from __future__ import annotations

import contextlib
import functools

import pytest

from coolsd.app import race as race_ui
from coolsd.app.demo import LAUNCH_KWARGS, Demo, make_demo


@functools.cache
def tiny_demo() -> Demo:
    """`coolsd.app.demo.make_demo("tiny")` with the tiny model alone in its picker (one worker): what
    `COOLSD_MODEL=tiny python app.py` serves, less the other models its picker offers."""
    return make_demo("tiny", workers=1, models=[])


@functools.cache
def picker_demo() -> Demo:
    """The tiny-model demo whose picker also offers the shipped models found here (as `app.py` does)."""
    return make_demo("tiny", workers=1)


@contextlib.contextmanager
def served(blocks, throttles: dict | None = None, **launch):
    """`blocks` launched in-process on a free port with the app's launch settings (`launch` overrides some),
    the race module's constants in `throttles` (e.g. IMAGE_EVERY_S=0.0: stream every round) set meanwhile;
    yields the URL and closes the server afterwards."""
    mp = pytest.MonkeyPatch()
    for name, value in (throttles or {}).items():
        mp.setattr(race_ui, name, value)
    try:
        _, url, _ = blocks.launch(prevent_thread_lock=True, quiet=True, **(LAUNCH_KWARGS | launch))
        yield url
    finally:
        blocks.close()
        mp.undo()
