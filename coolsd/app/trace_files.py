"""Where a model's recorded default race lives, and the seed it was recorded with (read before the settings exist:
the race settings' default seed is the recording's, `coolsd.app.settings`).

One gzipped JSON file per model under assets/traces/ (`<model slug>.json.gz`, written by
`python -m coolsd.app.record_default`); its "recorded" block names the seed it chose ("seed").
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path

from coolsd.util.paths import ASSETS

TRACES_DIR = ASSETS / "traces"


def slug(name: str) -> str:
    """"coolsd embedded (digits)" -> "coolsd-embedded-digits" (the file name of a model's recording)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "model"


def trace_file(model_name: str, folder: Path | None = None) -> Path:
    """The recording of model `model_name` in `folder` (default TRACES_DIR)."""
    return Path(folder or TRACES_DIR) / f"{slug(model_name)}.json.gz"


def recorded_seed(model_name: str) -> int:
    """The seed the model's shipped recording chose (0 without a recording, or one that names none)."""
    path = trace_file(model_name)
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return 0
    return _seed_in(str(path), stamp)


@functools.lru_cache(maxsize=16)
def _seed_in(path: str, stamp: int) -> int:
    """The "recorded" block's seed of the file at `path` (read once per version of the file, `stamp`)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            seed = (json.load(f).get("recorded") or {}).get("seed", 0)
    except (OSError, ValueError, AttributeError):
        return 0
    return seed if isinstance(seed, int) and seed >= 0 else 0
