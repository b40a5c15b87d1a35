"""Memory under many visitors: open N sessions on `python app.py` (half of them racing) and record the server's RSS.

    nice -n 10 .venv/bin/python tools/memory_run.py --model tiny --sessions 2000 --out runs/memory_tiny.json
    nice -n 10 .venv/bin/python tools/memory_run.py --model mnist --sessions 400 --capacity 100 --bound-mb 800

Each session is a fresh session hash over raw HTTP on loopback (POST /gradio_api/call/<name>, then its
event stream): an even session asks /model_info (a visitor who only looks), an odd one runs /race with
small settings (Eagle-1 and vanilla AR, seed = session number) to the end, so it keeps a trace and the
images on show. The loop is bounded (N sessions, one at a time); the server runs with one torch thread.
RSS is the server's VmRSS (Linux /proc) every `--every` sessions; `--bound-mb` (stated before the
run) makes the exit status 1 when any sample is above it. `--profile` serves through tools/memory_profile.py
(tracemalloc, slower) and adds the growth of live Python allocations between warm-up and the end, by source line.
`--account` (without tracemalloc, at full speed) adds to every sample what the server holds: glibc's heap in use
and free (`mallinfo2`), the kept sessions and their estimated state bytes, Gradio's per-session queues and
per-event records, the files served (tools/memory_profile.py's SIGUSR2).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import tracemalloc
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
OFFLINE = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: str, port: int, timeout_s: float = 300,
                 script: str = "app.py") -> tuple[subprocess.Popen, float]:
    """`python <script>` (the app, or tools/memory_profile.py, which runs it) serving `model` on `port`, once its
    page answers; returns the process and the seconds it took to answer."""
    env = os.environ | OFFLINE | {"COOLSD_MODEL": model, "GRADIO_SERVER_PORT": str(port)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, script], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{script} exited with {proc.returncode}:\n{proc.stdout.read()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/", timeout=1).status_code == 200:
                return proc, time.perf_counter() - t0
        except httpx.HTTPError:
            pass
        if time.perf_counter() - t0 > timeout_s:
            proc.kill()
            raise RuntimeError(f"{script} did not answer within {timeout_s:.0f} s")
        time.sleep(0.25)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc")


def call(base: str, name: str, data: list, session: str, timeout: float = 600) -> str:
    """One API call in `session`; returns the last SSE event type ("complete" or "error")."""
    reply = httpx.post(f"{base}/gradio_api/call/{name}", json={"data": data, "session_hash": session}, timeout=60)
    reply.raise_for_status()
    event = None
    with httpx.stream("GET", f"{base}/gradio_api/call/{name}/{reply.json()['event_id']}", timeout=timeout) as stream:
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
    return event or "none"


def ask(proc, folder: Path, kind: str, timeout_s: float = 300) -> Path:
    """Signal the server started by tools/memory_profile.py for its next file of `kind` ("snap": SIGUSR1, a
    tracemalloc snapshot; "acct": SIGUSR2, an account) and return the file's path once it is written."""
    suffix = {"snap": ".pickle", "acct": ".json"}[kind]
    n = len(list(folder.glob(f"{kind}*{suffix}")))
    proc.send_signal(signal.SIGUSR1 if kind == "snap" else signal.SIGUSR2)
    done, t0 = folder / f"{kind}{n}.done", time.perf_counter()
    while not done.exists():
        if time.perf_counter() - t0 > timeout_s:
            raise RuntimeError(f"the server wrote no {kind} file: was it started by tools/memory_profile.py?")
        time.sleep(0.2)
    return folder / f"{kind}{n}{suffix}"


def snapshot(proc, folder: Path) -> tracemalloc.Snapshot:
    """A tracemalloc snapshot of the profiled server."""
    return tracemalloc.Snapshot.load(str(ask(proc, folder, "snap")))


def account(proc, folder: Path | None) -> dict:
    """The server's own account of its memory (empty when it was not started by tools/memory_profile.py)."""
    return json.loads(ask(proc, folder, "acct").read_text()) if folder else {}


def growth_by_line(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, top: int = 25) -> list[dict]:
    """The `top` source lines whose live Python allocations grew most between the snapshots (KiB, count),
    with the four innermost frames that led there (innermost first)."""
    stats = after.compare_to(before, "traceback")
    rows = []
    for stat in sorted(stats, key=lambda s: -s.size_diff)[:top]:
        frames = [f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in list(stat.traceback)[::-1][:4]]
        rows.append({"kib": round(stat.size_diff / 1024, 1), "blocks": stat.count_diff, "where": frames})
    return rows


def race_args(base: str, model: str) -> tuple[list, int]:
    """The /race arguments in the API's order (the defaults, Eagle-1 only) and the seed's position."""
    session = uuid.uuid4().hex
    reply = httpx.post(f"{base}/gradio_api/call/model_info", json={"data": [model], "session_hash": session},
                       timeout=60)
    with httpx.stream("GET", f"{base}/gradio_api/call/model_info/{reply.json()['event_id']}", timeout=60) as s:
        data = [json.loads(line[5:]) for line in s.iter_lines() if line.startswith("data:")][-1][0]
    defaults = data["defaults"] | {"racers": ["eagle-1"]}
    return list(defaults.values()), list(defaults).index("seed")


def run(args) -> dict:
    port = free_port()
    env_extra = {"COOLSD_SESSION_CAPACITY": str(args.capacity)} if args.capacity else {}
    env_extra |= {"COOLSD_STATE_BUDGET_MB": str(args.budget_mb)} if args.budget_mb else {}
    os.environ.update(env_extra | {"OMP_NUM_THREADS": "1"})
    profile_dir = None
    if args.profile or args.account:
        os.environ["COOLSD_TRACEMALLOC"] = "1" if args.profile else "0"
        profile_dir = Path(os.environ.setdefault("COOLSD_TRACEMALLOC_DIR", str(ROOT / "runs" / f"tracemalloc_{port}")))
        profile_dir.mkdir(parents=True, exist_ok=True)
    proc, start_s = start_server(args.model, port, timeout_s=1200,  # a loaded machine starts slowly
                                 script="tools/memory_profile.py" if profile_dir else "app.py")
    profiled = {}
    base = f"http://127.0.0.1:{port}"
    samples, errors = [], 0
    try:
        template, seed_at = race_args(base, args.model)
        for _ in range(3):  # warm-up: the first races allocate the model's caches
            call(base, "race", template, uuid.uuid4().hex)
        warm = rss_mb(proc.pid)
        first = snapshot(proc, profile_dir) if args.profile else None
        samples.append({"sessions": 0, "rss_mb": warm, "seconds": 0.0, **account(proc, profile_dir)})
        t0 = time.perf_counter()
        for i in range(1, args.sessions + 1):
            session = uuid.uuid4().hex
            if i % 2:
                data = list(template)
                data[seed_at] = i
                errors += call(base, "race", data, session) != "complete"
            else:
                errors += call(base, "model_info", [args.model], session) != "complete"
            if i % args.every == 0 or i == args.sessions:
                samples.append({"sessions": i, "rss_mb": rss_mb(proc.pid), "seconds": time.perf_counter() - t0,
                                **account(proc, profile_dir)})
                print(f"{i:5d} sessions  RSS {samples[-1]['rss_mb']:7.1f} MB  {samples[-1]['seconds']:6.0f} s",
                      flush=True)
                if args.out:  # the samples so far survive an interrupted run
                    args.out.write_text(json.dumps({"partial": True, "samples": samples}, indent=1))
        if args.profile:
            last = snapshot(proc, profile_dir)
            traced = sum(s.size_diff for s in last.compare_to(first, "filename"))
            profiled = {"python_growth_mib": round(traced / 2**20, 2), "by_line": growth_by_line(first, last)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"model": args.model, "sessions": args.sessions, "racing": (args.sessions + 1) // 2,
            "capacity": args.capacity or "app default", "bound_mb": args.bound_mb, "server_start_s": start_s,
            "errors": errors,
            "warm_rss_mb": warm, "samples": samples, "peak_rss_mb": max(s["rss_mb"] for s in samples),
            "growth_mb": samples[-1]["rss_mb"] - warm,
            # growth per session while the capacity fills (every session is still kept): the cost of a kept session
            "kb_per_session": 1024 * (samples[-1]["rss_mb"] - warm) / max(1, min(args.sessions, args.capacity or 1000)),
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            **({"tracemalloc": profiled} if profiled else {}),
            "command": " ".join([sys.executable.split("/")[-1], *sys.argv])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", help="COOLSD_MODEL of the server (tiny: fast races)")
    p.add_argument("--sessions", type=int, default=2000)
    p.add_argument("--capacity", type=int, default=0, help="COOLSD_SESSION_CAPACITY (0: the app's default)")
    p.add_argument("--every", type=int, default=100, help="sample RSS every this many sessions")
    p.add_argument("--budget-mb", type=int, default=0, help="COOLSD_STATE_BUDGET_MB (0: the app's default)")
    p.add_argument("--bound-mb", type=float, default=None, help="fail (exit 1) when RSS goes above this")
    p.add_argument("--out", type=Path, default=None, help="write the samples here (JSON)")
    p.add_argument("--profile", action="store_true",
                   help="serve through tools/memory_profile.py (tracemalloc) and report the Python growth by line")
    p.add_argument("--account", action="store_true",
                   help="serve through tools/memory_profile.py without tracemalloc; every sample adds the server's "
                        "account (C heap in use / free, kept sessions, Gradio's queues, served files)")
    args = p.parse_args()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    result = run(args)
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    if result["errors"] or (args.bound_mb is not None and result["peak_rss_mb"] > args.bound_mb):
        sys.exit(1)


if __name__ == "__main__":
    main()
