"""`python app.py` as a newcomer runs it, with a fresh GRADIO_TEMP_DIR, raced from a default gradio_client (which
downloads every file each frame names) on every shipped model in turn, the second model picked over the API:
the server's log holds no traceback (issue 60: h11's "Too little data for declared Content-Length" while a file
was being written again under a download, `coolsd.app.served_files.cache_writes_in_place`) and every file the
client fetched is whole."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image

from coolsd.app.context import open_context
from coolsd.app.settings import RaceSettings
from coolsd.models import registry

ROOT = Path(__file__).resolve().parents[2]
MODELS = [key for key in ("emoji", "mnist") if key in registry.available()]
RACES_PER_MODEL = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """(URL, log file) of `app.py` in a child process on a free port, its Gradio cache a fresh folder."""
    if len(MODELS) < 2:
        pytest.skip("needs the two shipped models (assets/emoji/, assets/embedded/)")
    folder = tmp_path_factory.mktemp("fresh")
    port, log = free_port(), folder / "server.log"
    env = os.environ | {"GRADIO_TEMP_DIR": str(folder / "gradio"), "GRADIO_SERVER_PORT": str(port),
                        "GRADIO_SERVER_NAME": "127.0.0.1", "COOLSD_MODEL": MODELS[0], "OMP_NUM_THREADS": "1"}
    with open(log, "w") as out:
        child = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.time() + 600
        while time.time() < deadline:
            assert child.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(url, timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(2)
        else:
            pytest.fail("app.py did not answer in 600 s")
        yield url, log, folder
    finally:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()


def test_a_downloading_client_races_both_models_without_a_server_traceback(launched):
    from gradio_client import Client

    url, log, folder = launched
    downloads = folder / "client"
    client = Client(url, verbose=False, download_files=str(downloads), analytics_enabled=False)
    ctx = open_context(MODELS[0], others=MODELS)
    fetched = 0
    for model in MODELS:
        values = RaceSettings.defaults(ctx.for_model(model)).as_dict() | {"model": model}
        for seed in range(RACES_PER_MODEL):
            job = client.submit(**values | {"seed": seed}, api_name="/race")
            final = job.result(timeout=600)
            pictures = [v for frame in job.outputs() for v in frame[:5] if isinstance(v, str)]
            assert len([v for v in final[:5] if isinstance(v, str)]) == 4, (model, seed)  # 3 racers, vanilla AR
            for path in pictures:  # every file the client downloaded is whole
                with Image.open(path) as img:
                    img.load()
            fetched += len(pictures)
    text = log.read_text()
    assert "Traceback" not in text and "Too little data" not in text, text[-4000:]
    assert fetched >= 4 * len(MODELS) * RACES_PER_MODEL
    print(f"{fetched} files downloaded over {len(MODELS) * RACES_PER_MODEL} races, 0 server tracebacks")
