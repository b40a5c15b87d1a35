"""The demo on the tiny random-weight model, built once per test session; no environment variable needed."""

from __future__ import annotations

import functools

from coolsd.app.demo import Demo, make_demo


@functools.cache
def tiny_demo() -> Demo:
    """`coolsd.app.demo.make_demo("tiny")` with the tiny model alone in its picker (one worker): what
    `COOLSD_MODEL=tiny python app.py` serves, less the other models its picker offers."""
    return make_demo("tiny", workers=1, models=[])


@functools.cache
def picker_demo() -> Demo:
    """The tiny-model demo whose picker also offers the shipped models found here (as `app.py` does)."""
    return make_demo("tiny", workers=1)
