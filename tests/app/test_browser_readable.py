"""The default page in headless Chromium (Debian's, via Playwright) after what a newcomer did in issue 60: a race on
a typo ("rockit": the status line says "rockit: showing rocket"), then an unknown name ("zzzz"): one message, no
error badge over the pictures, their lines or the status, the pictures still shown, the stale status line gone.
And at a phone's width the acceptance plot's title and its legend do not overlap, nor the Cost tab's."""

from __future__ import annotations

import pytest
from demo_app import CHROMIUM
from test_browser_phone import _click_tab
from test_browser_tabs import PROBLEMS_JS

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)"),
    pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*"),
]
WAIT_MS = 300_000  # a deadline for slow shared machines, not a timing
# the boxes of a plot's title and legend, and whether they overlap
OVERLAP_JS = """(sel) => {
  const plot = document.querySelector(sel), t = plot?.querySelector('.gtitle'), l = plot?.querySelector('.legend');
  if (!t || !l) return null;
  const a = t.getBoundingClientRect(), b = l.getBoundingClientRect();
  return a.right > b.left && b.right > a.left && a.bottom > b.top && b.bottom > a.top; }"""


def _name(page, text: str) -> None:
    box = page.locator("#condition input")
    box.click()
    box.fill(text)
    box.press("Enter")
    page.locator("body").click(position={"x": 5, "y": 5})  # (the dropdown closes; the typed name stays)


def test_an_unknown_name_is_one_message_and_the_pictures_stay(shipped_app, browser):
    demo, url = shipped_app
    if demo.ctx.model.conditioning != "class" or not len(demo.ctx.model.conditions.styles):
        pytest.skip("the default model names no emoji")
    page = browser.new_page(viewport={"width": 1500, "height": 1250})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url)
        page.wait_for_function("() => document.querySelector('#stats')?.innerText?.includes('Recorded race')",
                               timeout=WAIT_MS)
        _name(page, "rockit")
        page.locator("#gen-btn").click()
        page.wait_for_function("() => document.querySelector('#stats').innerText.includes('Finished')",
                               timeout=WAIT_MS)
        assert "rockit: showing rocket" in page.locator("#stats").inner_text()
        page.locator("[data-testid='toast-body']").first.wait_for(state="detached", timeout=WAIT_MS)  # the typo's
        # toast goes (waited for, not timed: a loaded machine draws it late)
        _name(page, "zzzz")
        page.locator("#gen-btn").click()
        toast = page.locator("[data-testid='toast-body']").first
        toast.wait_for(timeout=WAIT_MS)
        assert "unknown emoji 'zzzz'" in toast.inner_text()
        page.wait_for_function("() => document.querySelector('#stats').innerText.includes('Not raced')",
                               timeout=WAIT_MS)
        status = page.locator("#stats").inner_text()
        assert "unknown emoji 'zzzz'" in status and "rockit" not in status, status
        page.wait_for_timeout(1500)  # an error badge would show by now
        problems = [p for p in page.evaluate(PROBLEMS_JS, 0) if not p.startswith("toast:")]
        assert not problems, problems  # no red "Error" over the pictures, their lines, the plots or the status
        assert page.locator("[data-testid='toast-body']").count() == 1  # one message
        for slot in (0, 4):  # the last race's pictures are still shown
            assert page.evaluate(f"() => document.querySelector('#img-{slot} img')?.naturalWidth > 0")
    finally:
        page.close()
    assert not errors, errors[:3]


def test_at_a_phones_width_no_plot_title_overlaps_its_legend(shipped_app, browser):
    _, url = shipped_app
    page = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        page.goto(url)
        page.wait_for_selector("#plot-acc .main-svg", timeout=WAIT_MS)
        page.locator("#plot-acc").scroll_into_view_if_needed()
        page.wait_for_timeout(800)
        assert page.evaluate(OVERLAP_JS, "#plot-acc") is False  # (None: no title or legend drawn)
        _click_tab(page, "Cost model")
        page.wait_for_selector("#cost-curve .main-svg", timeout=WAIT_MS)
        page.locator("#cost-curve").scroll_into_view_if_needed()
        page.wait_for_timeout(800)
        assert page.evaluate(OVERLAP_JS, "#cost-curve") is False
    finally:
        page.close()
