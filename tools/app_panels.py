"""Measure what the race's panels cost the server: memory after each panel is used, and the replay slider's latency.

Starts `python app.py` in a subprocess (as a Space does), drives it with gradio_client, and reads the server's
resident memory (VmRSS, Linux /proc) before and after each stage. Replay latency is client-observed (submit ->
the redrawn images and plots received), for steps spread over the race.

    .venv/bin/python tools/app_panels.py --model embedded --out bench_out/app_panels.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from app_latency import free_port, start_server  # noqa: E402


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--races", type=int, default=3, help="races per racer choice")
    parser.add_argument("--replays", type=int, default=30)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from gradio_client import Client

    port = free_port()
    proc, start_s = start_server(args.model, port)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=False)
        info = client.predict(api_name="/model_info")
        defaults = info["defaults"]
        stages, pid = [], proc.pid

        def stage(name: str, fn) -> None:
            before = rss_mb(pid)
            t0 = time.perf_counter()
            extra = fn()
            stages.append({"stage": name, "rss_before_mb": round(before, 1), "rss_after_mb": round(rss_mb(pid), 1),
                           "added_mb": round(rss_mb(pid) - before, 1), "seconds": round(time.perf_counter() - t0, 2),
                           **(extra or {})})
            print(json.dumps(stages[-1]), flush=True)

        def races(racers):
            for seed in range(args.races):
                client.predict(**(defaults | {"seed": seed, "racers": racers}), api_name="/race")

        stage("idle after start", lambda: None)
        stage(f"race: {args.races} x default racers", lambda: races(defaults["racers"]))
        stage(f"race: {args.races} x four racers", lambda: races(["uniform-rsd", "linear-decay", "cool-sd-unclipped",
                                                                  "cool-sd"]))

        def replays():
            steps = client.predict(api_name="/trace")["steps"]
            n = len(steps)
            seconds = []
            for i in range(args.replays):
                t0 = time.perf_counter()
                client.predict(step=round(i * n / max(args.replays - 1, 1)), overlay=bool(i % 2), api_name="/replay")
                seconds.append(time.perf_counter() - t0)
            ordered = sorted(seconds)
            return {"race_steps": n, "replay_median_s": round(statistics.median(seconds), 3),
                    "replay_p90_s": round(ordered[int(0.9 * len(ordered))], 3), "replay_max_s": round(max(seconds), 3)}

        stage(f"replay: {args.replays} steps", replays)

        def take_away():
            trace = client.predict(api_name="/trace")
            client.predict(api_name="/trace_file")
            client.predict(overlay=True, api_name="/strip_file")
            query = client.predict(**defaults, api_name="/share_link")
            client.predict(query=query, api_name="/share_restore")
            return {"trace_json_kb": round(len(json.dumps(trace)) / 1024, 1)}

        stage("take away: trace, trace file, PNG strip, share link x1", take_away)
        theory = {k: defaults[k] for k in ("delta", "nu", "mu", "mean_omega", "lantern_k", "lantern_lambda")}
        stage("theory plot", lambda: client.predict(**theory, api_name="/theory") and None)
        result = {"command": "python tools/app_panels.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                  "model": info["model"], "machine": f"{platform.processor() or platform.machine()}, "
                  f"{__import__('os').cpu_count()} cores, Python {platform.python_version()}",
                  "server_start_s": round(start_s, 1), "stages": stages, "peak_rss_mb": round(rss_mb(pid, "VmHWM"), 1)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
