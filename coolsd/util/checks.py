"""Value checks shared by the library: each raises a ValueError whose message names the parameter.

The app wraps these messages in its one-line `gr.Error` (`coolsd.app.context`); nothing here knows
about Gradio.
"""

from __future__ import annotations

import math


def is_number(value) -> bool:
    """A real int or float (bool excluded: True is not a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_integer(value) -> bool:
    """A real int (bool excluded)."""
    return isinstance(value, int) and not isinstance(value, bool)


def finite(name: str, value) -> float:
    """`value` when it is a finite number, else ValueError "<name> must be a finite number, got ..."."""
    if not is_number(value) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return value


def number(name: str, value, low: float | None = None, low_open: bool = False, integer: bool = False):
    """A finite number, integral when `integer`, >= low (> low when `low_open`); returns it unchanged."""
    finite(name, value)
    if integer and int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}")
    return value


def integer(name: str, value, low: int = 0, high: int | None = None, bounds: str | None = None) -> int:
    """An int in [low, high] (high None: no upper bound), else ValueError "<name> must be an integer
    <bounds>, got ..." (bounds defaults to ">= low" or "in [low, high]")."""
    if not is_integer(value) or value < low or (high is not None and value > high):
        bounds = bounds or (f">= {low}" if high is None else f"in [{low}, {high}]")
        raise ValueError(f"{name} must be an integer {bounds}, got {value!r}")
    return value


def choice(name: str, value, values, suffix: str = ""):
    """`value` when it is one of `values`, else ValueError "unknown <name> ...; choose one of a, b<suffix>"."""
    if value not in values:
        raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(map(str, values))}{suffix}")
    return value
