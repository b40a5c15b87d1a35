"""The page at a phone's width and the teaching views, in headless Chromium (Debian's, driven by Playwright).

On the page a visitor opens (the model `coolsd.models.registry.default_key` picks: the emoji model where shipped,
else the embedded MNIST one), with its shipped recording: at 390 px the Race tab comes first and shows the recorded
race at once (images, numbers, a Generate under the images); no element sticks out of the page or out of the box it
scrolls in, the race's table and the How tab's paper-beside-us tables fit their boxes with every cell wide enough
for its words; a 390 px screenshot of the first screens is saved (to $COOLSD_PHONE_SCREENSHOT if set). On a wide
page: the Microscope steps with the arrow keys and jumps on a click, and a tour step, run from its own Run button,
shows the measured value beside the typed guess, equal to the race table's number from the same run.
"""

from __future__ import annotations

import os
import re

import pytest
from demo_app import CHROMIUM

from coolsd.util.paths import EMBEDDED_DIR

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)"),
    pytest.mark.skipif(not (EMBEDDED_DIR / "target").is_dir(), reason="the embedded model is not shipped here"),
    pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*"),
]
WAIT_MS = 120_000  # a deadline for slow shared machines, not a timing


@pytest.fixture(scope="module")
def page_url(shipped_app):
    pytest.importorskip("playwright.sync_api", reason="playwright (Python) is not installed")
    demo, url = shipped_app  # the default page, launched once for every module (tests/app/conftest.py)
    recordings = demo.page.race.after.recordings
    assert recordings.of(demo.ctx) is not None, "no current recording: python -m coolsd.app.recorded"
    return url


# Elements whose box ends right of the viewport (or starts left of it), apart from those hidden by design (KaTeX's
# MathML copy, Gradio's off-screen tab measurer, plotly's off-screen tester). Clipped ones count: a page with
# overflow-x hidden would otherwise hide what a phone cannot reach.
OUTSIDE_JS = """() => {
  const W = document.documentElement.clientWidth, out = [];
  for (const e of document.querySelectorAll('body *')) {
    const r = e.getBoundingClientRect();
    if (!r.width || !r.height || r.right < 0 || (r.right <= W + 1 && r.left >= -1)) continue;
    if (e.closest('.katex-mathml, .visually-hidden, .js-plotly-tester')) continue;
    const name = `${e.tagName}#${e.id}.${String(e.className).slice(0, 30)}`;
    out.push(`${name} [${Math.round(r.left)}, ${Math.round(r.right)}]`);
  }
  return out;
}"""
# (text, clientWidth, scrollWidth) of every non-empty cell of the tables under a selector
CELLS_JS = """(sel) => [...document.querySelectorAll(`${sel} th, ${sel} td`)].filter(c => c.innerText.trim())
  .map(c => [c.innerText, c.clientWidth, c.scrollWidth])"""
MIN_CELL_PX = 30  # narrower than this, a column holds only a few letters per line


def _click_tab(page, name: str) -> None:
    """Click a tab as a visitor does: its button, or on a narrow page the overflow menu ("...") and then the tab."""
    shown = page.locator(".tab-container:not(.visually-hidden) button").filter(has_text=name)
    more = page.locator(".overflow-menu > button")
    shown.or_(more).first.wait_for(state="visible", timeout=WAIT_MS)  # the tab bar is laid out after measuring
    if shown.count() and shown.first.is_visible():
        shown.first.click()
        return
    more.first.click()
    page.locator(".overflow-dropdown button").filter(has_text=name).first.click()


def _fits(page, selector: str) -> None:
    """Every cell under `selector` wide enough for its words, the tables inside their boxes and the viewport."""
    cells = page.evaluate(CELLS_JS, selector)
    assert cells, selector
    narrow = [c for c in cells if c[1] < MIN_CELL_PX or c[2] > c[1] + 1]
    assert not narrow, narrow[:5]
    boxes = page.evaluate(f"""() => [...document.querySelectorAll('{selector} table')].map(t => {{
        const r = t.getBoundingClientRect(), p = t.parentElement.getBoundingClientRect();
        return [r.left, r.right, p.left, p.right, document.documentElement.clientWidth]; }})""")
    for left, right, box_left, box_right, width in boxes:
        assert 0 <= box_left - 1 <= left and right <= box_right + 1 <= width + 1, (selector, left, right, box_right)


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
    assert not page.evaluate(OUTSIDE_JS)
    for sel in ("#gen-btn-phone", "#stats table", "#plot-acc", *(f"#img-{s} img" for s in (0, 1, 2, 4))):
        box = page.locator(sel).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390, sel
    _fits(page, "#stats")  # every number of the race's table in view, no column squeezed to single letters
    shot = os.environ.get("COOLSD_PHONE_SCREENSHOT") or str(tmp_path / "phone.png")
    page.evaluate("window.scrollTo(0, 0)")
    bottom = page.locator("#stats table").bounding_box()
    page.screenshot(path=shot, full_page=True,  # the first screens: header, tour, images, Generate, numbers
                    clip={"x": 0, "y": 0, "width": 390, "height": bottom["y"] + bottom["height"] + 16})
    assert os.path.getsize(shot) > 10_000
    _click_tab(page, "How it works")
    page.wait_for_selector("#paper-beside-us table", timeout=WAIT_MS)
    assert page.locator("#paper-beside-us table").count() == 3  # the paper's two models, ours
    _fits(page, "#paper-beside-us")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert not page.evaluate(OUTSIDE_JS)
    page.close()


def _number(text: str, pattern: str) -> str:
    """The first match group of `pattern` in `text` (the test fails if it is not there)."""
    match = re.search(pattern, text)
    assert match, (pattern, text)
    return match.group(1)


def test_microscope_steps_by_keys_and_clicks_and_a_tour_step_reveals(page_url, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(page_url)
    page.locator("#gen-btn").wait_for(timeout=WAIT_MS)
    _click_tab(page, "Microscope")
    header = "(document.querySelector('#micro-header')?.innerText ?? '')"  # rendered once it has a value
    page.wait_for_function(f"() => {header}.includes('(rounds 0 to')", timeout=WAIT_MS)  # opens on a middle round
    page.wait_for_selector("#micro-table table", timeout=WAIT_MS)  # the round's numbers and its bars
    page.wait_for_selector("#micro-bars .main-svg", timeout=WAIT_MS)
    first = int(_number(page.locator("#micro-header").inner_text(), r"round (\d+) \(rounds"))
    page.locator("#micro-header").click()  # focus the page, not a field
    page.keyboard.press("ArrowRight")
    page.wait_for_function(f"() => {header}.includes('round {first + 1} (')", timeout=WAIT_MS)
    page.locator("#micro-prev").click()
    page.wait_for_function(f"() => {header}.includes('round {first} (')", timeout=WAIT_MS)
    page.locator("#micro-image img").scroll_into_view_if_needed()  # a longer header (a re-run on another CPU
    box = page.locator("#micro-image img").bounding_box()  # warns) pushes the image's last row below the viewport
    page.mouse.click(box["x"] + box["width"] - 3, box["y"] + box["height"] - 3)  # the last cell: the last round
    page.wait_for_function(f"() => {header}.includes('round') && !{header}.includes('round {first} (')",
                           timeout=WAIT_MS)
    last = page.locator("#micro-header").inner_text()
    rounds = _number(last, r"round (\d+) \(rounds")
    assert rounds == _number(last, r"\(rounds 0 to (\d+)\)"), last  # the click on the last cell: the last round
    page.locator("#tour").click()  # open the tour, go on to step 2 (Eagle-1's speed-up), guess, run
    page.locator("#tour-next-0").click()
    page.locator("#tour-guess-1 input").fill("1.5")
    page.locator("#tour-run-1").click()
    page.wait_for_function("() => document.querySelector('#tour-result-1')?.innerText.includes('Measured')",
                           timeout=WAIT_MS)
    result = page.locator("#tour-result-1").inner_text()
    assert "Your guess: 1.5." in result and "Eagle-1" in result, result
    table = page.locator("#stats").inner_text()  # the race the step ran, as the Race tab shows it
    assert "Recorded race" not in table, table
    row = next(line for line in table.splitlines() if line.startswith("Eagle-1"))
    assert _number(result, r"Eagle-1[^:]*: (\d+\.\d+)") == _number(row, r"(\d+\.\d+)×"), (result, row)
    page.close()
