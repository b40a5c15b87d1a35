"""The app in headless Chromium (Debian's, driven by Playwright; Playwright never downloads a browser).

Loads the page, clicks Generate, counts every change of each decoder image (a MutationObserver on
the <img> src), waits for the final frame, checks the plots, the theory, lab and schedule tabs and the LaTeX
render, that the page asked no host but the server, and saves a screenshot (to COOLSD_SCREENSHOT if set).
"""

from __future__ import annotations

import json
import os
from urllib.parse import urlparse

import pytest
from demo_app import CHROMIUM, CHROMIUM_ARGS, served, tiny_demo

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


def wait_text(page, selector: str, text: str, timeout: int = 30_000) -> None:
    """Wait (at most `timeout` ms) until the element at `selector` shows `text`."""
    # the element may not exist yet (Gradio renders some outputs only once they have a value)
    script = f"() => (document.querySelector({json.dumps(selector)})?.innerText || '').includes({json.dumps(text)})"
    page.wait_for_function(script, timeout=timeout)


@pytest.fixture(scope="module")
def page_url():
    pytest.importorskip("playwright.sync_api", reason="playwright (Python) is not installed")
    # the tiny model is fast: stream every round
    with served(tiny_demo().blocks, {"IMAGE_EVERY_S": 0.0, "FRAME_SHARE": 1.0, "PLOT_EVERY_S": 0.3}) as url:
        yield url


def test_generate_streams_images_and_plots(page_url, tmp_path):
    from playwright.sync_api import sync_playwright

    APP = tiny_demo()

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
            wait_text(page, "#stats", "Finished", timeout=90_000)
            page.wait_for_selector("#plot-acc .main-svg", timeout=30_000)
            page.wait_for_selector("#plot-len .main-svg", timeout=30_000)
            changes = page.evaluate("() => window.__srcs")
            # each decoder image: the placeholder, then several streamed blocks
            for i in (0, 1, 2, 4):  # the default racers' slots and vanilla AR's (slot 3 is unused)
                assert len(changes[str(i)]) >= 3, (i, len(changes[str(i)]))
            assert not page.locator("#img-3").is_visible()
            stats = page.locator("#stats").inner_text()
            assert f"{APP.ctx.model.num_tokens} / {APP.ctx.model.num_tokens}" in stats
            assert page.locator("#plot-acc .scatterlayer .trace").count() >= 3
            page.wait_for_timeout(300)
            shot = os.environ.get("COOLSD_SCREENSHOT") or str(tmp_path / "screenshot.png")
            page.screenshot(path=shot, full_page=True)
            assert os.path.getsize(shot) > 10_000
            # the explanation renders its formulas, the theory tab its plot
            page.get_by_role("tab", name="How it works").click()
            page.wait_for_selector("#how .katex", timeout=20_000)
            paper = page.locator("#paper-beside-us").inner_text()  # the paper's numbers beside ours
            assert "LlamaGen-XL 775M" in paper and "embedded MNIST" in paper and "CPU only" in paper
            page.get_by_role("tab", name="Theory").click()
            page.wait_for_selector("#plot-theory .main-svg", timeout=60_000)
            _lab_and_schedule_tabs(page)
            page.get_by_role("tab", name="Race").click()
            _stop(page, APP)
        finally:
            browser.close()
    assert not foreign, f"the page contacted other hosts: {foreign[:5]}"
    assert not errors, errors[:3]


def _lab_and_schedule_tabs(page):
    """The Quality lab streams a grid to the end; the Schedule explorer draws its bars and explains omega_i < 1."""
    page.get_by_role("tab", name="Quality lab").click()
    page.locator("#lab-run").click()
    wait_text(page, "#lab-stats", "Finished", timeout=90_000)
    assert page.locator("#lab-grid img").count() == 1
    assert "Vanilla AR" in page.locator("#lab-stats").inner_text()
    page.get_by_role("tab", name="Schedule explorer").click()  # selecting the tab computes the default schedule
    page.wait_for_selector("#sched-bars .main-svg", timeout=60_000)
    page.locator("#sched-floor input").uncheck()  # floored at 1 by default now: the unclipped schedule has omega_i < 1
    wait_text(page, "#sched-numbers", "stricter than", timeout=60_000)


def _stop(page, app):
    """Stop mid-race (a slowed-down model): the page says so, the race's decoders are closed before their end,
    and the server gets its model lane back. Every wait has a deadline; nothing is timed."""
    import threading
    import time

    from coolsd.app import settings as settings_ui

    real_generate = settings_ui.generate
    closed = threading.Event()

    def slow_generate(*args, **kw):
        try:
            for event in real_generate(*args, **kw):
                time.sleep(0.1)
                yield event
        except GeneratorExit:
            closed.set()
            raise

    mp = pytest.MonkeyPatch()
    mp.setattr(settings_ui, "generate", slow_generate)
    try:
        page.locator("#gen-btn").click()
        wait_text(page, "#stats", "Racing")
        page.locator("#stop-btn").click()
        wait_text(page, "#stats", "Stopped")
        assert closed.wait(30), "the race's decoders were never closed"
        end = time.monotonic() + 30
        while app.ctx.lanes.qsize() < app.workers:
            assert time.monotonic() < end, "the model lane never came back"
            time.sleep(0.01)
        wait_text(page, "#stats", "Stopped")  # still: no frame after the stop replaced it
        assert "Replay" not in page.locator("#stats").inner_text()
        assert page.locator("#replay input[type=range]").is_enabled()  # the stopped race can be replayed
    finally:
        mp.undo()


def _browser(p):
    return p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)


def test_share_link_racers_replay_and_downloads(page_url):
    """A share link sets the controls (racer choice included); the race, the replay slider, the downloads and a new
    share link work on the page; a bad link value is one plain warning, without markup."""
    import time

    from playwright.sync_api import sync_playwright

    base = page_url.rstrip("/") + "/"
    errors: list[str] = []
    with sync_playwright() as p:
        browser = _browser(p)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1400})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(base + "?seed=7&racers=eagle-1,uniform-rsd,custom&custom_omegas=3,1&uniform_delta=4")
            page.locator("#gen-btn").wait_for(timeout=60_000)
            page.wait_for_function("() => document.querySelector('#seed input').value === '7'", timeout=30_000)
            page.wait_for_function("() => [...document.querySelectorAll('#racers label')].some("
                                   "l => l.innerText.includes('UniformRSD') && l.querySelector('input').checked)",
                                   timeout=30_000)
            assert not page.locator("#racers label", has_text="LANTERN++").first.locator("input").is_checked()
            page.locator("#gen-btn").click()  # the slots take the racers' names when the race starts (issue 26 #6)
            wait_text(page, "#title-1", "UniformRSD")
            wait_text(page, "#title-2", "Custom schedule")  # Gradio may overlay a timer ("1.4s")
            assert page.locator("#title-2").inner_text().strip().splitlines()[-1] == "Custom schedule"
            wait_text(page, "#stats", "Finished", timeout=90_000)
            assert not page.locator("#img-3").is_visible() and page.locator("#img-4").is_visible()
            page.wait_for_selector("#plot-hist .main-svg", timeout=30_000)
            assert page.locator("#plot-hist .barlayer .trace").count() == 3  # one bar series per racer
            # replay: step back with the keyboard; the stats say which step is shown
            slider = page.locator("#replay input[type=range]")
            slider.focus()
            t0 = time.perf_counter()
            page.keyboard.press("Home")
            wait_text(page, "#stats", "Replay: step 0 ")
            print(f"replay redraw in the browser: {time.perf_counter() - t0:.3f} s")  # measured, not asserted
            page.keyboard.press("ArrowRight")
            wait_text(page, "#stats", "Replay: step 1 ")
            # take it away
            page.locator("#trace-btn").click()
            wait_text(page, "#download", ".json")
            page.locator("#strip-btn").click()
            wait_text(page, "#download", ".png")
            page.locator("#link-btn").click()
            page.wait_for_function("() => (document.querySelector('#share-link textarea, #share-link input') || {})"
                                   ".value?.startsWith(location.origin)", timeout=30_000)
            link = page.locator("#share-link textarea, #share-link input").first.input_value()
            assert "seed=7" in link and "racers=eagle-1%2Cuniform-rsd%2Ccustom" in link
            # a bad value: one warning, plain text, the rest restored
            page.goto(base + "?seed=-5&delta=3&condition=%3Cb%3Eeleven%3C/b%3E")
            toast = page.locator("[data-testid='toast-body']").first
            toast.wait_for(timeout=30_000)
            text = toast.inner_text()
            assert "share link: seed must be in [0, 2147483647], got -5" in text, text
            assert "unknown digit '‹b›eleven‹/b›'" in text and "&#" not in text and "&lt;" not in text
            assert page.locator("[data-testid='toast-body'] b").count() == 0  # no markup rendered
            page.wait_for_function("() => document.querySelector('#delta input[type=number]').value === '3'",
                                   timeout=30_000)
        finally:
            browser.close()
    assert not errors, errors[:3]


def test_same_noise_control_races_and_the_legend_follows_it(page_url):
    """The Noise control (Drafting accordion) set to same noise with the overlay on, a race: the line under Eagle-1's
    picture says all its tokens are vanilla AR's and the legend names the same-noise tint; back to one stream, the
    legend names the token outcomes again and the line is gone."""
    from playwright.sync_api import sync_playwright

    n = tiny_demo().ctx.model.num_tokens
    errors: list[str] = []
    with sync_playwright() as p:
        browser = _browser(p)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1400})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_url)
            page.locator("#gen-btn").wait_for(timeout=60_000)
            page.locator("#noise label", has_text="same noise").click()
            page.locator("#overlay input").check()
            page.locator("#gen-btn").click()
            wait_text(page, "#seen-0", f"same as vanilla AR at {n} / {n} tokens", timeout=90_000)
            wait_text(page, "#legend", "not vanilla AR's token")
            assert "accepted draft" not in page.locator("#legend").inner_text()
            page.locator("#noise label", has_text="one stream").click()
            page.locator("#gen-btn").click()
            wait_text(page, "#legend", "accepted draft", timeout=90_000)
            page.wait_for_function("() => !(document.querySelector('#seen-0')?.innerText || '')"
                                   ".includes('same as vanilla AR')", timeout=90_000)
        finally:
            browser.close()
    assert not errors, errors[:3]


def test_llamagen_prompt_ui(tmp_path_factory):
    """The prompt UI on a tiny random LlamaGen with both resolutions: an example prompt, 512 px, one race."""
    pytest.importorskip("playwright.sync_api", reason="playwright (Python) is not installed")
    from playwright.sync_api import sync_playwright
    from test_app import tiny_llamagen_app

    from coolsd.models.llamagen import EXAMPLE_PROMPTS

    demo = tiny_llamagen_app(tmp_path_factory)
    ctx, blocks = demo.ctx, demo.blocks
    _, url, _ = blocks.launch(prevent_thread_lock=True, quiet=True)
    try:
        with sync_playwright() as p:
            browser = _browser(p)
            try:
                page = browser.new_page(viewport={"width": 1500, "height": 1400})
                page.goto(url)
                page.locator("#gen-btn").wait_for(timeout=60_000)
                assert page.locator("#condition textarea").input_value() == EXAMPLE_PROMPTS[0]
                page.get_by_text(EXAMPLE_PROMPTS[2], exact=True).first.click()  # an example prompt
                page.wait_for_function(f"() => document.querySelector('#condition textarea').value === "
                                       f"{EXAMPLE_PROMPTS[2]!r}", timeout=30_000)
                page.locator("#resolution label", has_text="512").click()
                page.locator("#gen-btn").click()
                wait_text(page, "#stats", "Finished", timeout=90_000)
                page.wait_for_function("() => { const i = document.querySelector('#img-0 img');"
                                       " return i && i.complete && i.naturalWidth > 0; }", timeout=30_000)
                size = page.evaluate("() => { const i = document.querySelector('#img-0 img');"
                                     " return [i.naturalWidth, i.naturalHeight]; }")
                assert tuple(size) == ctx.variants["512"].display_hw[::-1]
                n = ctx.variants["512"].model.num_tokens
                assert page.locator("#stats").inner_text().count(f"{n} / {n}") == 4  # three racers + vanilla AR
                page.get_by_text("Raw numbers (what the API returns)").click()  # what the page raced
                page.wait_for_selector("#stats-json", timeout=30_000)
                raw = page.locator("#stats-json").inner_text()
                assert '"512"' in raw and EXAMPLE_PROMPTS[2] in raw, raw[:500]
            finally:
                browser.close()
    finally:
        blocks.close()
