"""Run app.py under tracemalloc; each SIGUSR1 dumps a snapshot (what `tools/memory_run.py --profile` compares).

    COOLSD_MODEL=emoji python tools/memory_profile.py      # snapshots to $COOLSD_TRACEMALLOC_DIR/snap<N>.pickle

Python allocations only (tensors' storages and glibc's own arenas are not traced); 10 frames per allocation.
The signal is handled in the main thread, which Gradio's launch keeps waiting while the workers serve.
"""

from __future__ import annotations

import os
import runpy
import signal
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("COOLSD_TRACEMALLOC_DIR", "runs/tracemalloc"))


def dump(signum, frame) -> None:
    """Write the next snapshot file, then an empty marker '<name>.done' (the reader waits for it)."""
    OUT.mkdir(parents=True, exist_ok=True)
    n = len(list(OUT.glob("snap*.pickle")))
    path = OUT / f"snap{n}.pickle"
    tracemalloc.take_snapshot().dump(path)
    path.with_suffix(".done").touch()


if __name__ == "__main__":
    tracemalloc.start(10)
    signal.signal(signal.SIGUSR1, dump)
    os.chdir(ROOT)
    runpy.run_path(str(ROOT / "app.py"), run_name="__main__")
