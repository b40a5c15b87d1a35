"""The app on the shipped default model, launched once per test session for every module that asks for it."""

from __future__ import annotations

import pytest
from demo_app import served

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
