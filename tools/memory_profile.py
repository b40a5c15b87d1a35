"""Run app.py under tracemalloc; each SIGUSR1 dumps a snapshot (what `tools/memory_run.py --profile` compares),
each SIGUSR2 writes an account of the server's memory (what `tools/memory_run.py --account` records).

    COOLSD_MODEL=emoji python tools/memory_profile.py   # files in $COOLSD_TRACEMALLOC_DIR: snap<N>.pickle, acct<N>.json
    COOLSD_TRACEMALLOC=0 COOLSD_MODEL=emoji python tools/memory_profile.py   # accounts only, full speed

tracemalloc sees Python allocations only (tensors' storages and glibc's own arenas are not traced); 10 frames per
allocation. An account reads glibc's `mallinfo2` (bytes the C heap holds in use and free: the free part is memory
fragmentation keeps from the system), the process's VmRSS, and what the app and Gradio keep per visitor: sessions
and their estimated state bytes, Gradio's per-session queues and per-event records, the files served.
The signals are handled in the main thread, which Gradio's launch keeps waiting while the workers serve.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import os
import runpy
import signal
import tracemalloc
import warnings
from pathlib import Path

from memory_run import rss_mb  # (tools/ is on the path of a script run from it)

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("COOLSD_TRACEMALLOC_DIR", "runs/tracemalloc"))


class MallInfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (all size_t; bytes)."""
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def malloc_info() -> dict:
    """The C heap in MB, over every arena: `heap` obtained with brk/mmap'd heaps, `mmapped` large blocks, `in_use`
    allocated, `free` held but unallocated (fragmentation), `top` the releasable top. Empty without glibc 2.33+."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = MallInfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    mb = 2.0 ** -20
    return {"heap": info.arena * mb, "mmapped": info.hblkhd * mb, "in_use": info.uordblks * mb,
            "free": info.fordblks * mb, "top": info.keepcost * mb}


def kept_by_app() -> dict:
    """What the served Blocks keep (found among live objects: the app's globals are not reachable from here)."""
    from coolsd.app.serving import ServedBlocks

    with warnings.catch_warnings():  # (isinstance on some of torch's deprecated module objects warns)
        warnings.simplefilter("ignore")
        blocks = next((o for o in gc.get_objects() if isinstance(o, ServedBlocks)), None)
    if blocks is None:
        return {}
    holder, queue = blocks.state_holder, blocks._queue
    return {"kept_sessions": len(holder.session_data), "state_mb": getattr(holder, "state_total", 0) * 2.0 ** -20,
            "evicted": dict(getattr(holder, "evicted", {})),
            "queue_sessions": len(queue.pending_messages_per_session),
            "queue_id_sets": len(queue.pending_event_ids_session),
            "queue_events": len(queue.event_ids_to_events), "analytics_events": len(queue.event_analytics),
            "served_files": blocks.served_files.kept, "gc_objects": len(gc.get_objects())}


def dump(signum, frame) -> None:
    """Write the next snapshot file, then an empty marker '<name>.done' (the reader waits for it)."""
    OUT.mkdir(parents=True, exist_ok=True)
    n = len(list(OUT.glob("snap*.pickle")))
    path = OUT / f"snap{n}.pickle"
    tracemalloc.take_snapshot().dump(path)
    path.with_suffix(".done").touch()


def account(signum, frame) -> None:
    """Write the next account file acct<N>.json (RSS, C heap, what the app keeps), then its '.done' marker."""
    OUT.mkdir(parents=True, exist_ok=True)
    n = len(list(OUT.glob("acct*.json")))
    path = OUT / f"acct{n}.json"
    traced = tracemalloc.get_traced_memory()[0] * 2.0 ** -20 if tracemalloc.is_tracing() else None
    try:
        kept = kept_by_app()
    except Exception as error:  # noqa: BLE001 (a handler's exception would stop the server it measures)
        kept = {"account_error": f"{type(error).__name__}: {error}"}
    path.write_text(json.dumps({"rss_mb": rss_mb(os.getpid()), "malloc_mb": malloc_info(), "python_traced_mb": traced,
                                **kept}))
    path.with_suffix(".done").touch()


if __name__ == "__main__":
    if os.environ.get("COOLSD_TRACEMALLOC", "1") != "0":
        tracemalloc.start(10)
    signal.signal(signal.SIGUSR1, dump)
    signal.signal(signal.SIGUSR2, account)
    os.chdir(ROOT)
    runpy.run_path(str(ROOT / "app.py"), run_name="__main__")
