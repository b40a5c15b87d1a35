"""The demo on the tiny random-weight model, built once per test session; no environment variable needed."""

from __future__ import annotations

import contextlib
import functools
import shutil

import gradio as gr
import pytest

from coolsd.app import race as race_ui
from coolsd.app.demo import LAUNCH_KWARGS, Demo, make_demo
from coolsd.app.race_view import API_NAMES, RaceFrame
from coolsd.app.racers import SLOTS

CHROMIUM = shutil.which("chromium")  # Debian's; Playwright never downloads a browser
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


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


def api_frame(values) -> RaceFrame:
    """A /race or /replay result from the API (its outputs in `race_view.API_NAMES` order; /replay's without the
    slider) as a RaceFrame."""
    values = list(values)
    names = API_NAMES if len(values) == len(API_NAMES) else [n for n in API_NAMES if n != "replay"]  # (/replay)
    named = dict(zip(names[SLOTS:], values[SLOTS:]))
    lines = tuple(named.pop(f"seen_{i + 1}") for i in range(SLOTS)) if "seen_1" in named else (gr.skip(),) * SLOTS
    return RaceFrame(images=tuple(values[:SLOTS]), captions=lines, **named)


class RaceAPI:
    """The Race tab's handlers of a demo, as the tests call them (each returns RaceFrames, by name)."""

    def __init__(self, demo: Demo) -> None:
        handle = demo.page.race
        self.stream, self.after, self.live = handle.stream, handle.after, handle.stream.live
        self.race = self.stream.race
        self.stopped, self.replay, self.show_overlay = self.after.stopped, self.after.replay, self.after.show_overlay
        self.trace_json, self.slot_layout, self.model_view = self.after.trace_json, self.after.slot_layout, \
            self.after.model_view
        self.recordings = self.after.recordings

    @property
    def live_overlay(self) -> dict:
        return self.live.overlay

    @property
    def active(self) -> dict:
        return self.live.active
