"""Measure the app as a visitor meets it: latency of the first streamed block and of the whole race, server memory,
and N concurrent API clients. Starts `python app.py` in a subprocess (as a Space does) and talks to it over HTTP.

    .venv/bin/python tools/app_latency.py                       # embedded model, 3 runs, 8 clients
    .venv/bin/python tools/app_latency.py --model tiny --browser --out bench_out/app_latency.json

Numbers: first update = submit -> first streamed frame received by gradio_client; done = submit -> final frame;
--browser also times click -> first change of a decoder image in headless Chromium. Peak RSS is the server
process's VmHWM (Linux /proc), read after all runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OFFLINE = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: str, port: int, timeout_s: float = 300,
                 script: str = "app.py") -> tuple[subprocess.Popen, float]:
    """`python <script>` (the app, or a wrapper that runs it) serving `model` on `port`, once its page answers."""
    env = os.environ | OFFLINE | {"COOLSD_MODEL": model, "GRADIO_SERVER_PORT": str(port)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, script], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    import httpx

    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"app.py exited with {proc.returncode}:\n{proc.stdout.read()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/", timeout=1).status_code == 200:
                return proc, time.perf_counter() - t0
        except httpx.HTTPError:
            pass
        if time.perf_counter() - t0 > timeout_s:
            proc.kill()
            raise RuntimeError(f"app.py did not answer within {timeout_s:.0f} s")
        time.sleep(0.25)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_race(url: str, seed: int) -> dict:
    """Submit one default race; times are from submit."""
    from gradio_client import Client

    client = Client(url, verbose=False, download_files=False, analytics_enabled=False)
    args = client.predict(api_name="/model_info")["defaults"] | {"seed": seed}
    t0 = time.perf_counter()
    job = client.submit(**args, api_name="/race")
    first = None
    n = 0
    for _ in job:
        n += 1
        if first is None:
            first = time.perf_counter() - t0
    done = time.perf_counter() - t0
    final = next(o for o in job.outputs()[-1] if isinstance(o, dict) and "decoders" in o)  # the stats JSON
    num = final["decoders"]["vanilla"]["num_tokens"]
    ok = final["finished"] and all(d["tokens"] == num and d["mean_accepted_length"] >= 1
                                   for d in final["decoders"].values())
    return {"first_update_s": first, "done_s": done, "updates": n, "ok": ok,
            "server_first_frame_s": final["first_frame_seconds"], "server_wall_s": final["wall_seconds"],
            "decoders": {k: {"tau": d["mean_accepted_length"], "compute_s": d["compute_seconds"],
                             "speedup": d["speedup"]} for k, d in final["decoders"].items()}}


def concurrent(url: str, n: int) -> dict:
    results: list[dict | Exception] = [None] * n

    def work(i: int) -> None:
        try:
            results[i] = one_race(url, seed=100 + i)
        except Exception as err:  # report, don't hide
            results[i] = err

    t0 = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    good = [r for r in results if isinstance(r, dict) and r["ok"]]
    return {"clients": n, "completed_ok": len(good), "wall_s": wall,
            "errors": [repr(r) for r in results if not (isinstance(r, dict) and r["ok"])],
            "max_done_s": max((r["done_s"] for r in good), default=float("nan"))}


MID_RACE = """() => {
  const row = [...document.querySelectorAll('#stats tr')].find(r => r.innerText.includes('Vanilla'));
  if (!row) return false;
  const [done, total] = row.cells[1].innerText.split('/').map(Number);
  return done >= 0.4 * total;
}"""


def browser_first_block(url: str, screenshot: Path | None = None) -> dict:
    """Click Generate in headless Chromium; time to the first change of any decoder image, and to 'Finished'.

    screenshot: also save a mid-race picture there (vanilla AR 40% done; a CDP capture, which does not
    wait for the stream to settle as page.screenshot does).
    """
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), headless=True, args=args)
        page = browser.new_page(viewport={"width": 1500, "height": 1080})
        page.goto(url)
        page.locator("#gen-btn").wait_for(timeout=60_000)
        before = page.evaluate("() => [0,1,2,3].map(i => document.querySelector(`#img-${i} img`)?.src)")
        t0 = time.perf_counter()
        page.locator("#gen-btn").click()
        page.wait_for_function(
            "(before) => [0,1,2,3].some(i => document.querySelector(`#img-${i} img`)?.src !== before[i])",
            arg=before, timeout=60_000, polling=20)
        first = time.perf_counter() - t0
        if screenshot is not None:
            page.wait_for_function(MID_RACE, timeout=300_000, polling=20)
            import base64

            cdp = page.context.new_cdp_session(page)
            shot = cdp.send("Page.captureScreenshot", {"format": "png"})
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        page.wait_for_function("() => document.querySelector('#stats').innerText.includes('Finished')",
                               timeout=300_000, polling=50)
        done = time.perf_counter() - t0
        browser.close()
    return {"click_to_first_block_s": first, "click_to_finished_s": done}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded", help="COOLSD_MODEL for the server: embedded | tiny | llamagen")
    parser.add_argument("--runs", type=int, default=3, help="sequential default races (the first is a warm-up)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent API clients")
    parser.add_argument("--browser", action="store_true", help="also time click -> first block in headless Chromium")
    parser.add_argument("--screenshot", type=Path, help="with --browser: save a mid-race screenshot here")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    os.environ.update(OFFLINE)
    port = free_port()
    proc, startup = start_server(args.model, port)
    url = f"http://127.0.0.1:{port}/"
    try:
        runs = [one_race(url, seed=i) for i in range(args.runs)]
        warm = runs[1:] or runs
        out = {
            "model": args.model, "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
            "python": platform.python_version(), "startup_s": startup,
            "first_update_s_median": statistics.median(r["first_update_s"] for r in warm),
            "done_s_median": statistics.median(r["done_s"] for r in warm),
            "runs": runs,
        }
        if args.browser:
            out["browser"] = browser_first_block(url, args.screenshot)
        out["concurrent"] = concurrent(url, args.clients)
        out["peak_rss_mb"] = peak_rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(json.dumps(out, indent=1))
    c = out["concurrent"]
    print(f"\nmodel={args.model}: first update {out['first_update_s_median']:.2f} s, full race "
          f"{out['done_s_median']:.2f} s (median of {len(warm)} warm runs), server peak RSS "
          f"{out['peak_rss_mb']:.0f} MB, {c['completed_ok']}/{c['clients']} concurrent clients ok in "
          f"{c['wall_s']:.1f} s" + (f", browser click->first block {out['browser']['click_to_first_block_s']:.2f} s"
                                    if args.browser else ""))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))
    return 0 if c["completed_ok"] == c["clients"] and all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
