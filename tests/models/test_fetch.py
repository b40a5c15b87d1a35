"""python -m coolsd.fetch against a local stand-in for the hub (an HTTP server in this process; no network).

The real huggingface_hub client talks to the stand-in: tree listing, HEAD + GET (with Range) of
`resolve/` URLs, and the hub's error headers (X-Error-Code: RepoNotFound / GatedRepo).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import torch
from huggingface_hub import constants
from llamagen_weights import (
    PUBLISHED_CONFIG,
    TINY_VQ,
    original_layout,
    published_drafter,
    published_target,
    published_vq,
    write_t5,
)
from safetensors.torch import save

from coolsd.models.llamagen import ENV_VAR, available_resolutions, load_llamagen
from coolsd.models.llamagen import fetch as fetch_module
from coolsd.models.llamagen.fetch import FETCH_ENV, FetchError, fetch, fetch_on_start, main

COMMIT = "0123456789abcdef0123456789abcdef01234567"
DECOYS = {"README.md": b"# card", ".gitattributes": b"*.bin lfs", "flax_model.msgpack": b"x" * 300}


def _torch_bytes(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def hub_repos(tmp_path: Path) -> dict[str, dict[str, bytes]]:
    """repo id -> {file name: content}: tiny models under the published repo ids and file names."""
    t5 = tmp_path / "t5-src"
    write_t5(t5)
    t5_files = {p.name: p.read_bytes() for p in t5.iterdir() if p.is_file()}
    t5_files["spiece.model"] = b"sentencepiece stand-in (the fast tokenizer.json is what loads)"
    target = {
        "config.json": json.dumps(PUBLISHED_CONFIG).encode(),
        "generation_config.json": b"{}",
        "model.safetensors": save(published_target()),
        **DECOYS,
    }
    drafter = {
        "config.json": json.dumps({**PUBLISHED_CONFIG, "num_hidden_layers": 1}).encode(),
        "pytorch_model.bin": _torch_bytes(published_drafter()),
        **DECOYS,
    }
    original = _torch_bytes({"model": original_layout(published_target())})
    return {
        "jadohu/LlamaGen-T2I": target,
        "jadohu/LlamaGen-T2I-2": dict(target),
        "jadohu/llamagen_drafter": drafter,
        "jadohu/llamagen2_drafter": dict(drafter),
        "peizesun/llamagen_t2i": {
            "vq_ds16_t2i.pt": _torch_bytes({"model": published_vq()}),
            "t2i_XL_stage1_256.pt": original,
            "t2i_XL_stage2_512.pt": original,
            "vq_ds8_c2i.pt": b"y" * 500,
            **DECOYS,
        },
        "google/flan-t5-xl": {**t5_files, "pytorch_model.bin": b"z" * 400, "tf_model.h5": b"w" * 400, **DECOYS},
    }


class FakeHub:
    """The hub endpoints huggingface_hub uses to list and download; records every request."""

    def __init__(self, repos: dict[str, dict[str, bytes]]):
        self.repos = repos
        self.gated: set[str] = set()
        self.cut: dict[str, int] = {}  # file -> bytes to send before dropping the connection (then 503s)
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                hub.serve(self, body=False)

            def do_GET(self):
                hub.serve(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def downloaded(self) -> list[str]:
        """Repo-relative paths of every file GET (repo_id/filename)."""
        return [
            path.split("/resolve/")[0][1:] + "/" + path.split("/", 5)[-1]
            for method, path, _ in self.requests
            if method == "GET" and "/resolve/" in path
        ]

    def _error(self, handler, status: int, code: str):
        handler.send_response(status)
        handler.send_header("X-Error-Code", code)
        handler.send_header("Content-Type", "application/json")
        message = json.dumps({"error": code}).encode()
        handler.send_header("Content-Length", str(len(message)))
        handler.end_headers()
        handler.wfile.write(message)

    def serve(self, handler, body: bool):
        path = unquote(urlparse(handler.path).path)
        self.requests.append((handler.command, path, handler.headers.get("Range")))
        parts = path.strip("/").split("/")
        listing = parts[:2] == ["api", "models"]
        repo_id = "/".join(parts[2:4] if listing else parts[0:2])
        if repo_id not in self.repos:
            return self._error(handler, 404, "RepoNotFound")
        if repo_id in self.gated:
            return self._error(handler, 403, "GatedRepo")
        files = self.repos[repo_id]
        if listing:  # /api/models/{repo}/tree/{revision}
            entries = [
                {"type": "file", "oid": hashlib.sha1(data).hexdigest(), "size": len(data), "path": name}
                for name, data in files.items()
            ]
            payload = json.dumps(entries).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            return handler.wfile.write(payload)
        name = "/".join(parts[4:])  # /{repo}/resolve/{revision}/{file}
        if name not in files:
            return self._error(handler, 404, "EntryNotFound")
        data = files[name]
        start = 0
        if handler.headers.get("Range"):
            start = int(handler.headers["Range"].split("=")[1].split("-")[0])
        if body and name in self.cut and self.cut[name] < 0:
            return self._error(handler, 503, "Unavailable")
        handler.send_response(206 if start else 200)
        handler.send_header("X-Repo-Commit", COMMIT)
        handler.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        handler.send_header("Content-Length", str(len(data) - start))
        if start:
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        handler.end_headers()
        if not body:
            return None
        if name in self.cut:  # send part of the file, then drop the connection; later GETs fail
            handler.wfile.write(data[: self.cut[name]])
            handler.wfile.flush()
            self.cut[name] = -1
            handler.close_connection = True
            return None
        handler.wfile.write(data[start:])
        return None


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    return hub_repos(tmp_path_factory.mktemp("hub"))


@pytest.fixture
def hub(repos, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # the tests' hub is this local server
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    server = FakeHub({repo: dict(files) for repo, files in repos.items()})
    yield server
    server.close()


def test_fetch_lays_out_a_folder_load_llamagen_accepts(hub, tmp_path):
    root = tmp_path / "lg"
    out = io.StringIO()
    fetch([256], root, endpoint=hub.url, out=out)
    lines = out.getvalue().splitlines()
    total_line = next(i for i, line in enumerate(lines) if line.startswith("total "))
    assert "to download" in lines[total_line] and lines[-1].startswith(f"done: export {ENV_VAR}=")
    fetched = sorted(hub.downloaded())
    assert not [
        f
        for f in fetched
        if Path(f).name in DECOYS or f.endswith(("pytorch_model.bin", "tf_model.h5")) and f.startswith("google/")
    ], fetched  # only what load_llamagen reads
    assert "peizesun/llamagen_t2i/t2i_XL_stage1_256.pt" not in fetched  # the converted target by default
    assert (root / "256" / "target" / "model.safetensors").exists() and (root / "t5" / "config.json").exists()
    assert available_resolutions(root) == [256]
    model = load_llamagen(root, resolution=256, k_max=4, vq_config=TINY_VQ, device="cpu")
    assert model.target.start("a red cat", True).logits.shape[0] == 2
    # the second resolution fetches only its own parts; the shared T5 and VQ are already there
    hub.requests.clear()
    fetch([512], root, endpoint=hub.url, out=io.StringIO())
    assert all(f.startswith(("jadohu/LlamaGen-T2I-2/", "jadohu/llamagen2_drafter/")) for f in hub.downloaded())
    assert available_resolutions(root) == [256, 512]
    # a complete folder downloads nothing
    hub.requests.clear()
    fetch([256, 512], root, endpoint=hub.url, out=(out := io.StringIO()))
    assert hub.downloaded() == [] and "to download 0.00 GB in 0 files" in out.getvalue()


def test_original_checkpoint_option(hub, tmp_path):
    fetch([256], tmp_path, original=True, endpoint=hub.url, out=io.StringIO())
    assert (tmp_path / "256" / "target" / "t2i_XL_stage1_256.pt").exists()
    assert not any(f.startswith("jadohu/LlamaGen-T2I") for f in hub.downloaded())
    assert available_resolutions(tmp_path) == [256]


def test_interrupted_download_resumes(hub, tmp_path, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)  # huggingface_hub's pause before its own retry
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 1024)  # write to disk every KiB (the hub's: 10 MB)
    data = hub.repos["jadohu/LlamaGen-T2I"]["model.safetensors"]
    half = len(data) // 2
    hub.cut["model.safetensors"] = half
    with pytest.raises(FetchError, match="answered HTTP 503") as failure:
        fetch([256], tmp_path, endpoint=hub.url, out=io.StringIO())
    assert "\n" not in str(failure.value)
    partial = tmp_path / ".partial" / "256" / "target" / "model.safetensors"
    kept = partial.stat().st_size  # the whole chunks received before the cut
    assert half - 1024 < kept <= half and not (tmp_path / "256" / "target" / "model.safetensors").exists()
    assert available_resolutions(tmp_path) == []
    del hub.cut["model.safetensors"]
    hub.requests.clear()
    fetch([256], tmp_path, endpoint=hub.url, out=io.StringIO())
    ranges = [r for m, p, r in hub.requests if m == "GET" and p.endswith("/model.safetensors") and "T2I" in p]
    assert ranges == [f"bytes={kept}-"]  # only the missing part was asked for
    assert (tmp_path / "256" / "target" / "model.safetensors").read_bytes() == data and not partial.exists()
    assert available_resolutions(tmp_path) == [256]


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("coolsd.fetch: "), err
    return err


def test_errors_are_one_line(hub, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)  # huggingface_hub backs off between retries
    base = ["llamagen", "--dir", str(tmp_path), "--endpoint", hub.url]
    with monkeypatch.context() as patch:
        patch.setattr(fetch_module, "free_bytes", lambda path: 10)  # a full disk
        assert "free; the download needs" in _one_line_error(capsys, base)
    del hub.repos["jadohu/llamagen_drafter"]
    assert "jadohu/llamagen_drafter was not found" in _one_line_error(capsys, base)
    hub.gated.add("google/flan-t5-xl")
    assert "google/flan-t5-xl is gated" in _one_line_error(capsys, base + ["--resolution", "512"])
    del hub.repos["google/flan-t5-xl"]["spiece.model"]
    hub.gated.clear()
    assert "no file matching 'spiece.model'" in _one_line_error(capsys, base + ["--resolution", "512"])
    closed = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    dead = f"http://127.0.0.1:{closed.server_address[1]}"
    closed.server_close()  # nothing listens there: no network
    assert "cannot reach" in _one_line_error(capsys, ["llamagen", "--dir", str(tmp_path), "--endpoint", dead])
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert "offline mode is on" in _one_line_error(capsys, base)
    assert not list(tmp_path.rglob("*.safetensors"))  # nothing was written by the failed runs


def test_nothing_is_fetched_unless_asked(hub, tmp_path):
    environ = {ENV_VAR: str(tmp_path)}
    assert fetch_on_start(environ) == []
    assert hub.requests == [] and not any(tmp_path.iterdir())
    assert fetch_on_start({FETCH_ENV: "300"}) == []  # not a resolution: logged, nothing fetched
    assert hub.requests == []


def test_fetch_on_start_runs_offline_app_fetch_in_a_child(hub, tmp_path):
    environ = {
        **os.environ,
        FETCH_ENV: "256",
        ENV_VAR: str(tmp_path / "space"),
        "HF_ENDPOINT": hub.url,
        "HF_HUB_OFFLINE": "1",  # as app.py sets it: the child drops it, the parent keeps it
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": str(Path(__file__).parents[2]),
    }
    assert fetch_on_start(environ, timeout_s=300) == [256]
    assert environ["HF_HUB_OFFLINE"] == "1"
    assert available_resolutions(tmp_path / "space") == [256]
    default = {k: v for k, v in environ.items() if k != ENV_VAR}
    default[FETCH_ENV] = "256"
    empty = FakeHub({})  # every repo missing: the child fails, the failure is logged, the app goes on
    try:
        default["HF_ENDPOINT"] = empty.url
        assert fetch_on_start(default, timeout_s=300) == [] and default[ENV_VAR] == "weights/llamagen"
        assert empty.requests  # the child did ask
    finally:
        empty.close()
