"""Settings read from the environment: one check for every integer the app reads at start-up."""

from __future__ import annotations

import os
import re


def env_int(name: str, default: int, minimum: int = 1) -> int:
    """$`name` as an integer >= `minimum` (unset or empty: `default`); otherwise SystemExit naming it."""
    text = os.environ.get(name, "") or str(default)
    if not re.fullmatch(r"[0-9]+", text) or int(text) < minimum:  # (str.isdigit also takes "²", which int() refuses)
        raise SystemExit(f"{name} must be an integer >= {minimum}, got {text!r}")
    return int(text)
