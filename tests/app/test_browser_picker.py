"""The model picker in headless Chromium: a pick switches the header, the class and style pickers and the race
area; Generate then races the picked model; a share link names it and opens the page on it; an unknown model
in a link is one warning line. Runs on the picker demo (`tests/demo_app.py: picker_demo`) with the emoji model;
its names, styles and the labels the page shows are read from the model (it is retrained with other names).
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest
from demo_app import CHROMIUM, CHROMIUM_ARGS, picker_demo, served
from test_browser import wait_text

from coolsd.models.conditions import default_condition, name_choices
from coolsd.models.registry import MODELS
from coolsd.util.paths import EMOJI_DIR

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)"),
    pytest.mark.skipif(not (EMOJI_DIR / "target" / "config.json").is_file(), reason="assets/emoji is not shipped"),
    pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*"),
]
HEADER = "() => document.querySelector('#header').innerText.includes('emoji (Llama')"


@pytest.fixture(scope="module")
def page_url():
    pytest.importorskip("playwright.sync_api", reason="playwright (Python) is not installed")
    with served(picker_demo().blocks) as url:
        yield url


def pick(page, elem_id: str, label: str) -> None:
    """Choose `label` in dropdown `elem_id` as a visitor does: open it, type to filter, press Enter."""
    box = page.locator(f"#{elem_id} input")
    box.click()
    box.fill(label)
    page.get_by_role("option", name=label, exact=True).wait_for(timeout=30_000)
    box.press("Enter")
    page.wait_for_function(f"() => document.querySelector('#{elem_id} input').value === {label!r}", timeout=30_000)
    page.locator("#header").click()  # close the list (blur)


def test_picking_a_model_switches_the_page_and_generate_races_it(page_url):
    from playwright.sync_api import sync_playwright

    app = picker_demo()
    emoji = app.ctx.for_model("emoji")
    m = emoji.model
    shown = {name: label for label, name in name_choices(m.conditions, m.class_chars)}  # the picker's text per name
    start, start_style = default_condition(m.conditions, m.default_class)  # where the page starts on this model
    names, styles = emoji.model.base_class_names, emoji.model.style_names
    name = next(n for n in names[2:] if n != start)  # another emoji ...
    style = next(s for s in styles if s != start_style)  # ... in another style
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1250})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_url)
            page.locator("#gen-btn").wait_for(timeout=60_000)
            assert not page.locator("#style").is_visible()  # the tiny model has no styles
            pick(page, "model", MODELS["emoji"].label)
            page.wait_for_function(HEADER, timeout=120_000)
            assert page.locator("#style").is_visible() and page.locator("#style input").input_value() == start_style
            assert page.locator("#condition input").input_value() == shown[start]
            page.locator("#condition input").click()
            assert page.get_by_role("option").count() == len(names)  # the emoji, not the digits
            page.locator("#header").click()
            pick(page, "condition", shown[name])
            pick(page, "style", style)
            page.locator("#gen-btn").click()
            wait_text(page, "#stats", "Finished", timeout=300_000)
            page.get_by_text("Raw numbers (what the API returns)").first.click()  # the race's stats JSON
            wait_text(page, "#stats-json", emoji.model.conditions.label(emoji.model.condition(name, style)),
                      timeout=60_000)
            assert emoji.model.name in page.locator("#stats-json").inner_text()
            page.locator("#link-btn").click()
            page.wait_for_function("() => document.querySelector('#share-link textarea').value.includes('model=')",
                                   timeout=60_000)
            link = page.locator("#share-link textarea").input_value()
            query = parse_qs(urlsplit(link).query)
            assert query["model"] == ["emoji"] and query["condition"] == [name] and query["style"] == [style], link
            # the link opens a fresh page on the emoji model with its class and style
            fresh = browser.new_page(viewport={"width": 1500, "height": 1250})
            fresh.goto(link)
            fresh.locator("#header").wait_for(timeout=60_000)
            fresh.wait_for_function(HEADER, timeout=120_000)
            picked = f"() => document.querySelector('#condition input').value === {json.dumps(shown[name])}"
            fresh.wait_for_function(picked, timeout=60_000)
            assert fresh.locator("#style input").input_value() == style
            assert fresh.locator("#model input").input_value().startswith("Emoji")
            # an unknown model: one warning line, the page stays on the app's model
            bad = browser.new_page()
            bad.goto(page_url + "?model=warp")
            bad.locator("#header").wait_for(timeout=60_000)
            toast = bad.locator('[data-testid="toast-body"]').first
            toast.wait_for(timeout=60_000)
            assert "unknown model 'warp'; choose one of" in toast.inner_text()
            assert "Traceback" not in toast.inner_text()
        finally:
            browser.close()
    assert not errors, errors
