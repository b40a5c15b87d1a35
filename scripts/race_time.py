"""Time the app's default race over the API: starts `python app.py` (embedded model), 4 races (seeds 0-3).

    OMP_NUM_THREADS=1 python scripts/race_time.py      # prints one line per race, writes runs/race_time.json
"""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from app_latency import free_port, start_server  # noqa: E402
from gradio_client import Client  # noqa: E402

port = free_port()
proc, t_start = start_server("embedded", port)
try:
    url = f"http://127.0.0.1:{port}/"
    client = Client(url, verbose=False, download_files=False, analytics_enabled=False)
    args = client.predict(api_name="/model_info")["defaults"]
    print("defaults", {k: args[k] for k in ("draft_len", "drafting", "racers") if k in args})
    out = []
    for seed in range(4):
        t0 = time.perf_counter()
        job = client.submit(**(args | {"seed": seed}), api_name="/race")
        for _ in job:
            pass
        done = time.perf_counter() - t0
        stats = [o for o in job.outputs()[-1] if isinstance(o, dict) and "decoders" in o]
        info = stats[0] if stats else {}
        out.append({"seed": seed, "done_s": round(done, 2), "finished": info.get("finished"),
                    "server_wall_s": info.get("wall_seconds"),
                    "tau": {k: round(d["mean_accepted_length"], 2) for k, d in info.get("decoders", {}).items()},
                    "speedup": {k: d.get("speedup") and round(d["speedup"], 2)
                                for k, d in info.get("decoders", {}).items()}})
        print(out[-1], flush=True)
    Path("runs").mkdir(exist_ok=True)
    Path("runs/race_time.json").write_text(json.dumps(out, indent=1) + "\n")
finally:
    proc.terminate()
