"""The demo on the tiny random-weight model, built once per test session; no environment variable needed."""

from __future__ import annotations

import functools

from coolsd.app.demo import Demo, make_demo


@functools.cache
def tiny_demo() -> Demo:
    """`coolsd.app.demo.make_demo("tiny")`: what `COOLSD_MODEL=tiny python app.py` serves (one worker)."""
    return make_demo("tiny", workers=1)
