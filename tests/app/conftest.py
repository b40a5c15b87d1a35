"""The app on the shipped default model, launched once per test session for every module that asks for it."""

from __future__ import annotations

import pytest
from demo_app import CHROMIUM, CHROMIUM_ARGS, served

from coolsd.app.demo import make_demo
from coolsd.models import registry


@pytest.fixture(scope="session")
def shipped_app():
    """(Demo, URL): `make_demo()` as `app.py` makes it (the default model, the picker offering every shipped
    model), served in-process; skipped where no shipped model is present."""
    if not registry.available():
        pytest.skip("no shipped model here (assets/emoji/, assets/embedded/)")
    demo = make_demo(registry.default_key() if registry.default_key() != "llamagen" else "emoji")
    with served(demo.blocks) as url:
        yield demo, url


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (Debian's) for one test module; skipped without Playwright."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (Python) is not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()
