"""`python -m coolsd.bench.live`: the default race as a visitor gets it, over the API of a freshly started app.

    python -m coolsd.bench.live --model emoji --seeds 0-2 --out assets/emoji/bench/live

Starts `python app.py` on a free port (the model in $COOLSD_MODEL, offline), races the page's defaults once per
seed through gradio_client's /race and reads the final frame's stats JSON: each racer's speed-up over vanilla AR in
compute (its own CPU seconds), tau, and the race's wall-clock seconds from submit to the final frame. Writes OUT.json
and OUT.md with the CPU (`lscpu`'s model name) and the load average before the first race.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from coolsd.bench.cli import int_list
from coolsd.util.machine import bf16_units, cpu_name
from coolsd.util.paths import ROOT

OFFLINE = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(model: str, port: int, timeout_s: float = 300) -> subprocess.Popen:
    """`python app.py` serving `model` on `port`, returned once its page answers (RuntimeError if it exits or
    does not answer within `timeout_s` seconds)."""
    import httpx

    env = os.environ | OFFLINE | {"COOLSD_MODEL": model, "GRADIO_SERVER_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"app.py exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    proc.kill()
    raise RuntimeError(f"app.py did not answer within {timeout_s:.0f} s")


def one_race(client, model: str, seed: int) -> dict:
    """The page's default race at `seed` -> {"seed", "wall_s", "racers": [{decoder, speedup, tau, compute_s}]}
    (the race's outputs named as the app's /model_info names them)."""
    outputs = client.predict(api_name="/model_info")["race_outputs"]
    t0 = time.perf_counter()
    job = client.submit(model=model, seed=seed, api_name="/race")
    for _ in job:
        pass
    wall = time.perf_counter() - t0
    stats = dict(zip(outputs, job.outputs()[-1]))["stats"]
    racers = [{"key": key, "decoder": r["decoder"], "speedup": r.get("speedup"), "tau": r["mean_accepted_length"],
               "compute_s": r["compute_seconds"]} for key, r in stats["decoders"].items()]
    return {"seed": seed, "wall_s": wall, "racers": racers}


def table(runs: list[dict]) -> str:
    """Markdown: one row per seed, each racer's speed-up (tau), the race's wall seconds."""
    names = [r["decoder"] for r in runs[0]["racers"]]
    lines = ["| seed | " + " | ".join(names) + " | race wall s |", "|---|" + "---:|" * (len(names) + 1)]
    for run in runs:
        cells = [f"{r['speedup']:.2f}x ({r['tau']:.2f})" for r in run["racers"]]
        lines.append(f"| {run['seed']} | " + " | ".join(cells) + f" | {run['wall_s']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m coolsd.bench.live", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="emoji")
    ap.add_argument("--seeds", type=int_list, default=[0, 1, 2])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md (default: print only)")
    args = ap.parse_args(argv)
    from gradio_client import Client

    port = free_port()
    proc = start_app(args.model, port)
    try:
        load = os.getloadavg()[0]
        client = Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=False)
        runs = [one_race(client, args.model, seed) for seed in args.seeds]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    machine = f"{cpu_name()} ({bf16_units() or 'no bf16 units'}), {os.cpu_count()} cores, load {load:.2f} before"
    md = (f"`python -m coolsd.bench.live --model {args.model} --seeds {','.join(map(str, args.seeds))}` on {machine}: "
          f"the page's default race over the API of a fresh app; speed-up over vanilla AR in compute (tau).\n\n"
          + table(runs) + "\n")
    print(md)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps({"machine": machine, "model": args.model, "runs": runs},
                                                            indent=1) + "\n")
        args.out.with_suffix(".md").write_text(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
