"""The page at a phone's width and the teaching views, in headless Chromium (Debian's, driven by Playwright).

On the embedded model with its shipped recording: at 390 px the Race tab comes first and shows the recorded race at
once (images, numbers, a Generate under the images), nothing needs sideways scrolling, the How tab's table keeps
whole words; a 390 px screenshot is saved (to $COOLSD_PHONE_SCREENSHOT if set). On a wide page: the Microscope steps
with the arrow keys and jumps on a click, and a tour step runs and shows the measured value beside the guess.
"""

from __future__ import annotations

import os
import shutil

import pytest

from coolsd.util.paths import EMBEDDED_DIR

CHROMIUM = shutil.which("chromium")
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)"),
    pytest.mark.skipif(not (EMBEDDED_DIR / "target").is_dir(), reason="the embedded model is not shipped here"),
    pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*"),
]
WAIT_MS = 120_000  # a deadline for slow shared machines, not a timing


@pytest.fixture(scope="module")
def page_url():
    pytest.importorskip("playwright.sync_api", reason="playwright (Python) is not installed")
    from coolsd.app.demo import LAUNCH_KWARGS, make_demo

    demo = make_demo("embedded")
    assert demo.ctx.panels["race"].shipped is not None, "no current recording: python -m coolsd.app.record_default"
    _, url, _ = demo.blocks.launch(prevent_thread_lock=True, quiet=True, **LAUNCH_KWARGS)
    yield url
    demo.blocks.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


def _click_tab(page, name: str) -> None:
    """Select a tab by its label, also when a narrow page has moved it into the overflow menu."""
    page.evaluate("(name) => [...document.querySelectorAll('button')].find(b => b.innerText.trim() === name).click()",
                  name)


def test_phone_width_shows_the_recorded_race_at_once(page_url, browser, tmp_path):
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(page_url)
    page.locator("#gen-btn-phone").wait_for(state="visible", timeout=WAIT_MS)
    assert "Recorded race" in page.locator("#stats").inner_text()
    assert not page.locator("#gen-btn").is_visible() or page.locator("#gen-btn").bounding_box()["y"] > \
        page.locator("#img-0").bounding_box()["y"]  # the images come before the settings column
    for slot in (0, 1, 2, 4):  # lazy images load once scrolled to
        page.locator(f"#img-{slot}").scroll_into_view_if_needed()
        page.wait_for_function(f"() => document.querySelector('#img-{slot} img')?.naturalWidth > 0", timeout=WAIT_MS)
    page.wait_for_selector("#plot-acc .main-svg", timeout=WAIT_MS)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # no sideways scrolling
    for box in (page.locator("#gen-btn-phone").bounding_box(), page.locator("#stats table").bounding_box()):
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390
    headers = page.evaluate("() => [...document.querySelectorAll('#stats th')].map(h => h.clientWidth)")
    assert min(headers) >= 30, headers  # no column squeezed to single letters
    shot = os.environ.get("COOLSD_PHONE_SCREENSHOT") or str(tmp_path / "phone.png")
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=shot, full_page=True)
    assert os.path.getsize(shot) > 10_000
    _click_tab(page, "How it works")
    page.wait_for_selector("#paper-beside-us table", timeout=WAIT_MS)
    cells = page.evaluate("""() => [...document.querySelectorAll('#paper-beside-us th, #paper-beside-us td')]
        .filter(c => c.innerText.trim()).map(c => [c.innerText, c.clientWidth, c.scrollWidth])""")
    narrow = [c for c in cells if c[1] < 40 or c[2] > c[1] + 1]
    assert not narrow, narrow[:5]  # every cell wide enough for its words
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.close()


def test_microscope_steps_by_keys_and_clicks_and_a_tour_step_reveals(page_url, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(page_url)
    page.locator("#gen-btn").wait_for(timeout=WAIT_MS)
    _click_tab(page, "Microscope")
    page.wait_for_function("() => document.querySelector('#micro-header').innerText.includes('round 1 of')",
                           timeout=WAIT_MS)
    assert page.locator("#micro-table table").count() == 1 and page.locator("#micro-bars .main-svg").count() >= 1
    page.locator("#micro-header").click()  # focus the page, not a field
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.querySelector('#micro-header').innerText.includes('round 2 of')",
                           timeout=WAIT_MS)
    page.locator("#micro-prev").click()
    page.wait_for_function("() => document.querySelector('#micro-header').innerText.includes('round 1 of')",
                           timeout=WAIT_MS)
    box = page.locator("#micro-image img").bounding_box()
    page.mouse.click(box["x"] + box["width"] - 3, box["y"] + box["height"] - 3)  # the last cell: the last round
    page.wait_for_function("() => !document.querySelector('#micro-header').innerText.includes('round 1 of')",
                           timeout=WAIT_MS)
    page.locator("#tour").click()  # open the tour
    page.locator("#tour-guess-1 input").fill("1.5")
    page.locator("#tour-run-1").click()
    page.wait_for_function("() => document.querySelector('#tour-result-1').innerText.includes('Measured')",
                           timeout=WAIT_MS)
    result = page.locator("#tour-result-1").inner_text()
    assert "Your guess: 1.5" in result and "Eagle-1" in result
    page.close()
