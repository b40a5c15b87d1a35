"""The app in headless Chromium (Debian's, driven by Playwright; Playwright never downloads a browser).

Loads the page, clicks Generate, counts every change of each decoder image (a MutationObserver on
the <img> src), waits for the final frame, checks the plots, the theory tab and the LaTeX render, that
the page asked no host but the server, and saves a screenshot (to COOLSD_SCREENSHOT if set).
"""

from __future__ import annotations

import os
import shutil
from urllib.parse import urlparse

os.environ.setdefault("COOLSD_MODEL", "tiny")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")

import pytest  # noqa: E402

CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)"),
    pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*"),
]

WATCH_IMAGES = """() => {
  window.__srcs = {};
  const record = () => {
    for (let i = 0; i < 5; i++) {
      const img = document.querySelector(`#img-${i} img`);
      const list = (window.__srcs[i] = window.__srcs[i] || []);
      if (img && img.src && list[list.length - 1] !== img.src) list.push(img.src);
    }
  };
  record();
  new MutationObserver(record).observe(document.body, {subtree: true, childList: true, attributes: true,
                                                       attributeFilter: ["src"]});
}"""


@pytest.fixture(scope="module")
def page_url():
    pytest.importorskip("playwright.sync_api", reason="playwright (Python) is not installed")
    import app
    from coolsd.ui import race as race_ui

    mp = pytest.MonkeyPatch()
    mp.setattr(race_ui, "IMAGE_EVERY_S", 0.0)  # the tiny model is fast: stream every round
    mp.setattr(race_ui, "FRAME_SHARE", 1.0)
    mp.setattr(race_ui, "PLOT_EVERY_S", 0.3)
    _, url, _ = app.demo.launch(prevent_thread_lock=True, quiet=True, **app.LAUNCH_KWARGS)
    yield url
    app.demo.close()
    mp.undo()


def test_generate_streams_images_and_plots(page_url, tmp_path):
    from playwright.sync_api import sync_playwright

    import app

    local = {urlparse(page_url).hostname, "localhost", "127.0.0.1"}
    foreign: list[str] = []
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1250})
            page.on("request", lambda r: foreign.append(r.url) if r.url.startswith("http")
                    and urlparse(r.url).hostname not in local else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_url)
            page.locator("#gen-btn").wait_for(timeout=60_000)
            page.evaluate(WATCH_IMAGES)
            page.locator("#gen-btn").click()
            page.wait_for_function("() => document.querySelector('#stats').innerText.includes('Finished')",
                                   timeout=90_000)
            page.wait_for_selector("#plot-acc .main-svg", timeout=30_000)
            page.wait_for_selector("#plot-len .main-svg", timeout=30_000)
            changes = page.evaluate("() => window.__srcs")
            # each decoder image: the placeholder, then several streamed blocks
            for i in (0, 1, 2, 4):  # the default racers' slots and vanilla AR's (slot 3 is unused)
                assert len(changes[str(i)]) >= 3, (i, len(changes[str(i)]))
            assert not page.locator("#img-3").is_visible()
            stats = page.locator("#stats").inner_text()
            assert f"{app.CTX.model.num_tokens} / {app.CTX.model.num_tokens}" in stats
            assert page.locator("#plot-acc .scatterlayer .trace").count() >= 3
            page.wait_for_timeout(300)
            shot = os.environ.get("COOLSD_SCREENSHOT") or str(tmp_path / "screenshot.png")
            page.screenshot(path=shot, full_page=True)
            assert os.path.getsize(shot) > 10_000
            # the explanation renders its formulas, the theory tab its plot
            page.get_by_role("tab", name="How it works").click()
            page.wait_for_selector("#how .katex", timeout=20_000)
            page.get_by_role("tab", name="Theory").click()
            page.wait_for_selector("#plot-theory .main-svg", timeout=60_000)
            page.get_by_role("tab", name="Race").click()
            _stop_within_a_second(page, app)
        finally:
            browser.close()
    assert not foreign, f"the page contacted other hosts: {foreign[:5]}"
    assert not errors, errors[:3]


def _stop_within_a_second(page, app):
    """Stop mid-race (a slowed-down model): the page says so and the server frees the race within a second."""
    import time

    from coolsd.ui import race as race_ui

    real_generate = race_ui.generate

    def slow_generate(*args, **kw):
        for event in real_generate(*args, **kw):
            time.sleep(0.1)
            yield event

    mp = pytest.MonkeyPatch()
    mp.setattr(race_ui, "generate", slow_generate)
    try:
        page.locator("#gen-btn").click()
        page.wait_for_function("() => document.querySelector('#stats').innerText.includes('Racing')",
                               timeout=30_000)
        t0 = time.perf_counter()
        page.locator("#stop-btn").click()
        page.wait_for_function("() => document.querySelector('#stats').innerText.includes('Stopped')",
                               timeout=5_000)
        while app.CTX.lanes.qsize() < app.WORKERS and time.perf_counter() - t0 < 5:
            time.sleep(0.01)
        assert time.perf_counter() - t0 < 1.0 and app.CTX.lanes.qsize() == app.WORKERS
        page.wait_for_timeout(500)
        assert "Stopped" in page.locator("#stats").inner_text()  # no frame arrived after the stop
    finally:
        mp.undo()
