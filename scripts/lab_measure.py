"""Measure the Quality lab and the Schedule explorer in the app process (not a test; never asserted).

    COOLSD_MODEL=embedded OMP_NUM_THREADS=1 python -m scripts.lab_measure [--rule cool-sd] [--relaxation 2]

Imports the app (model loaded, panels built), then runs the lab handler twice (cold, then with vanilla AR
and Eagle-1 reused) and the schedule explorer on every draft model, printing JSON: time to the first
sample of every decoder, time to the full grid, and the process's resident memory after each step.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time

os.environ.setdefault("COOLSD_MODEL", "embedded")


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rule", default="cool-sd")
    parser.add_argument("--relaxation", type=float, default=2.0)
    parser.add_argument("--samples", type=int, default=10)
    args = parser.parse_args()
    import app

    gc.collect()
    out = {"model": app.CTX.model.name, "cpus": os.cpu_count(), "load_before": os.getloadavg(),
           "rss_app_mb": rss_mb()}
    lab = app.CTX.panels["lab"]
    for attempt in ("cold", "warm"):
        t0 = time.perf_counter()
        first = None
        for frame in lab.grid(args.rule, args.relaxation, args.samples, 0, "3"):
            stats = frame[3]
            if first is None and stats["first_row_seconds"] is not None:
                first = time.perf_counter() - t0
        out[attempt] = {"first_row_s": first, "full_grid_s": time.perf_counter() - t0,
                        "decoders": {d["label"]: {k: d[k] for k in ("accuracy", "nll", "tau", "speedup", "cached")}
                                     for d in stats["decoders"]}}
        gc.collect()
        out[f"rss_after_lab_{attempt}_mb"] = rss_mb()
    schedule = app.CTX.panels["schedule"]
    t0 = time.perf_counter()
    for drafts in ("toy", "close", "far"):
        for floor in (False, True):
            schedule.compute("exponential", 1.5, 0.7, 0.5, "", floor, drafts)
    out["schedule_6_calls_s"] = time.perf_counter() - t0
    gc.collect()
    out["rss_after_schedule_mb"] = rss_mb()
    out["lab_added_mb"] = out["rss_after_lab_warm_mb"] - out["rss_app_mb"]
    out["schedule_added_mb"] = out["rss_after_schedule_mb"] - out["rss_after_lab_warm_mb"]
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
