"""JSON-safe values: JSON has no nan or inf, so they become null (None)."""

from __future__ import annotations

import json
import math


def json_safe(value):
    """nan/inf -> None, recursively through dicts, lists and tuples (tuples become lists)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def dumps(value, **kwargs) -> str:
    """`json.dumps` of `json_safe(value)`: nan/inf written as null."""
    return json.dumps(json_safe(value), **kwargs)
