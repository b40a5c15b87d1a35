"""Where the shipped assets live (the repository's `assets/` folder, next to the `coolsd` package)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (holds coolsd/, assets/, docs/)
ASSETS = ROOT / "assets"
EMBEDDED_DIR = ASSETS / "embedded"  # the shipped digit model: vq/, target/, drafter/, classifier/
EMBEDDED_CLASSIFIER = EMBEDDED_DIR / "classifier"
EMOJI_DIR = ASSETS / "emoji"  # the shipped emoji model (same four folders; class + style conditional, RGB)
EMOJI_CLASSIFIER = EMOJI_DIR / "classifier"
BENCH_DIR = ASSETS / "bench"  # the benchmark's shipped results
TRACES_DIR = ASSETS / "traces"  # the recorded default race of each shipped model (coolsd.compare.trace.recording_path)
THEORY_REPORT = ASSETS / "theory_schedules.json"  # python -m coolsd.theory --report --report-out ...
DOCS = ROOT / "docs"
