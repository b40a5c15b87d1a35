"""One page of headless Chromium (Debian's, via Playwright) on the demo served in-process: for the screenshot tools.

    with demo_page(1500, 1250) as (page, url):
        page.goto(url)
"""

from __future__ import annotations

import contextlib
import os
import shutil

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@contextlib.contextmanager
def demo_page(width: int, height: int):
    """The demo on COOLSD_MODEL (unset or empty: the app's default model, as `app.py` picks it) with the app's
    launch settings, and a `width` x `height` page; yields (page, server URL); closes the browser and the server
    afterwards."""
    from playwright.sync_api import sync_playwright

    from coolsd.app.demo import LAUNCH_KWARGS, make_demo

    demo = make_demo(os.environ.get("COOLSD_MODEL") or None).blocks
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True, **LAUNCH_KWARGS)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), headless=True,
                                        args=["--no-sandbox", "--headless", "--disable-gpu"])
            try:
                yield browser.new_page(viewport={"width": width, "height": height}), url
            finally:
                browser.close()
    finally:
        demo.close()
