"""Every Python code block of README.md and docs/ that calls the app's API or the library runs as written: API
blocks against the launched app (its URL put in place of the documented one), library blocks in-process.
A block that needs what this machine lacks (LlamaGen's weights, a GPU) is skipped and says so."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
DOC_URL = "http://127.0.0.1:7860/"


def blocks() -> list:
    """pytest params: (file: line, code) of every python block that calls the API or the library."""
    out = []
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            code = m.group(1)
            if "gradio_client" in code or "coolsd" in code:
                line = text[: m.start()].count("\n") + 1
                out.append(pytest.param(code, id=f"{path.relative_to(ROOT)}:{line}"))
    return out


def needs(code: str) -> str | None:
    """Why this machine cannot run `code` (None: it can)."""
    from coolsd.models.llamagen import find_llamagen

    if "load_llamagen(" in code and find_llamagen() is None:
        return "LlamaGen's weights are not here (COOLSD_LLAMAGEN_DIR)"
    if "cuda" in code and not torch.cuda.is_available():
        return "needs a GPU"
    return None


def test_the_docs_have_api_and_library_examples():
    ids = [p.id for p in blocks()]
    assert any(i.startswith("README.md") for i in ids) and any(i.startswith("docs/app-and-api.md") for i in ids)


@pytest.mark.parametrize("code", blocks())
def test_the_example_runs(code, shipped_app, tmp_path, monkeypatch):
    reason = needs(code)
    if reason:
        pytest.skip(reason)
    if "gradio_client" in code:
        assert DOC_URL in code, "an API example names the app's URL as the docs do"
        code = code.replace(DOC_URL, shipped_app[1])
    monkeypatch.chdir(tmp_path)
    torch.set_num_threads(1)
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    runpy.run_path(str(script), run_name="__main__")
