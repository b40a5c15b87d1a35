"""One grammar for a custom schedule's omega list as text: `parse_omegas` / `format_omegas`
("2 1 0.5" = "2, 1, 0.5")."""

from __future__ import annotations

import math
import re

from coolsd.util.checks import show


def parse_omegas(value) -> tuple[float, ...]:
    """A custom schedule omega_1..omega_L from "2, 1, 0.5", "2 1 0.5", "2; 1; 0.5" or a list of numbers.

    Separators: commas, semicolons and/or white space. Returns floats; a one-line ValueError for
    anything else (not text or a list, a part that is not a finite number, nothing at all). Whether
    the values are positive and how many there may be is the rule's check (`CustomScheduleRule`).
    """
    if isinstance(value, (list, tuple)):
        parts = list(value)
    elif isinstance(value, str):
        parts = [p for p in re.split(r"[,;\s]+", value.strip()) if p]
    else:
        raise ValueError(f"the omega list must be numbers such as '2, 1, 0.5', got {show(value)}")
    values = []
    for part in parts:
        if isinstance(part, bool):
            raise ValueError(f"the omega list must hold numbers, got {show(part)}")
        try:
            number = float(part)
        except (TypeError, ValueError):
            raise ValueError(f"the omega list: {show(part)} is not a number; write numbers separated by commas "
                             "or spaces, e.g. 2, 1, 0.5") from None
        if not math.isfinite(number):
            raise ValueError(f"the omega list must be finite numbers, got {show(part)}")
        values.append(number)
    if not values:
        raise ValueError("the omega list is empty: give at least one number (omega_1), e.g. 2, 1, 0.5")
    return tuple(values)


def format_omegas(omegas) -> str:
    """(2.0, 1.0, 0.5) -> "2, 1, 0.5" (what `parse_omegas` reads back)."""
    return ", ".join(f"{w:g}" for w in omegas)
