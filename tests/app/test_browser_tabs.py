"""One browser pass per tab on the default model (the page `app.py` serves), at 1400 px and at a phone's 390 px, in
Debian's Chromium driven by Playwright: once a tab has drawn what it draws on opening, there is no error badge or
toast, no text cut inside its box (inputs, dropdowns, buttons, labels, table cells) and no plot narrower than
300 px. Skipped where chromium or Playwright is missing (tools/test.sh installs both)."""

from __future__ import annotations

import pytest
from demo_app import CHROMIUM
from test_browser_phone import _click_tab

from coolsd.app import cost, how, lab, microscope, race, schedule, theory

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)"),
    pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*"),
]
WAIT_MS = 180_000  # a deadline for slow shared machines, not a timing
MIN_PLOT_PX = 300
WIDTHS = {"wide": 1400, "phone": 390}
# tab title -> what shows once the tab has drawn on opening (a selector whose element is non-empty)
TABS = {race.TITLE: "#stats table", microscope.TITLE: "#micro-table table", lab.TITLE: "#lab-stats",
        schedule.TITLE: "#sched-bars .js-plotly-plot", theory.TITLE: "#plot-theory .js-plotly-plot",
        cost.TITLE: "#cost-curve .js-plotly-plot", how.TITLE: "#paper-beside-us table"}

# Problems on the page as it is now, each a short string: error badges and toasts, text cut in its box, narrow plots.
PROBLEMS_JS = """(minPlot) => {
  const visible = (e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 &&
    getComputedStyle(e).visibility !== 'hidden' && e.offsetParent !== null; };
  const out = [];
  for (const e of document.querySelectorAll("[data-testid='toast-body'], .toast-body"))
    if (visible(e)) out.push('toast: ' + e.innerText.slice(0, 120));
  for (const e of document.querySelectorAll('.error, .status-tracker .error, [data-testid="status-tracker"] .error'))
    if (visible(e) && e.innerText.trim()) out.push('error badge: ' + e.innerText.slice(0, 120));
  for (const e of document.querySelectorAll('input[type=text], input:not([type]), textarea, select'))
    if (visible(e) && e.value && e.scrollWidth > e.clientWidth + 2)
      out.push(`cut input ${e.closest('[id]')?.id}: '${e.value.slice(0, 60)}' ${e.scrollWidth}>${e.clientWidth}`);
  for (const e of document.querySelectorAll('button, label span, th, td, .tab-container button'))
    if (visible(e) && e.innerText.trim() && getComputedStyle(e).overflow !== 'visible' &&
        e.scrollWidth > e.clientWidth + 2)
      out.push(`cut text ${e.closest('[id]')?.id}: '${e.innerText.slice(0, 60)}' ${e.scrollWidth}>${e.clientWidth}`);
  for (const e of document.querySelectorAll('.js-plotly-plot'))
    if (visible(e) && e.getBoundingClientRect().width < minPlot)
      out.push(`narrow plot ${e.closest('[id]')?.id}: ${Math.round(e.getBoundingClientRect().width)} px`);
  return out; }"""


@pytest.mark.parametrize("width", list(WIDTHS.values()), ids=list(WIDTHS))
def test_every_tab_opens_clean(shipped_app, browser, width):
    _, url = shipped_app
    page = browser.new_page(viewport={"width": width, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url)
        page.locator("#gen-btn").wait_for(timeout=WAIT_MS)
        found = {}
        for title, ready in TABS.items():
            _click_tab(page, title)
            page.locator(ready).first.wait_for(state="visible", timeout=WAIT_MS)
            page.wait_for_timeout(500)  # a toast or a late error badge shows within this
            problems = page.evaluate(PROBLEMS_JS, MIN_PLOT_PX)
            if problems:
                found[title] = problems[:6]
        assert not found, found
    finally:
        page.close()
    assert not errors, errors[:3]
