"""Every picture of the page that README.md and docs/ show, made from the current page in one command (not a test):

    OMP_NUM_THREADS=1 python tools/page_pictures.py                      # all four, on the app's default model
    OMP_NUM_THREADS=1 python tools/page_pictures.py --only screenshot,phone --out /tmp/pictures

Serves the app in-process (the model `app.py` picks: $COOLSD_MODEL, else the registry's default) and drives
headless Chromium (Debian's, via Playwright) through it:

- screenshot: `assets/screenshot.png` (README, docs/app-and-api.md), the page as a visitor first sees it, the
  recorded default race replayed to its middle, 1500 x 1250;
- phone: `assets/screenshots/phone.png` (README-linked docs), the same page at 390 px, its first screens (header,
  tour, pictures, Generate, the race's table);
- lab: `assets/lab_screenshot.png`, the Quality lab run to its end at relaxation `--relaxation` (minutes of CPU);
- schedule: `assets/schedule_screenshot.png`, the Schedule explorer as it opens.

Each picture is written whole or not at all, and the command says what it wrote.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/
from demo_page import demo_page  # noqa: E402

PICTURES = {"screenshot": "screenshot.png", "phone": "screenshots/phone.png", "lab": "lab_screenshot.png",
            "schedule": "schedule_screenshot.png"}
WAIT_MS = 300_000


def page_open(page, url: str, share: float = 0.5) -> str:
    """The page as it opens, its recorded race replayed to `share` of its steps; returns what it shows."""
    page.goto(url)
    page.wait_for_function("() => document.querySelector('#stats')?.innerText?.includes('Recorded race')",
                           timeout=WAIT_MS)
    steps = int(page.locator("#replay input[type=range]").get_attribute("max"))
    target = round(steps * share)
    box = page.locator("#replay input[type=number]")
    box.fill(str(target))
    box.press("Enter")
    page.wait_for_function(f"() => document.querySelector('#stats').innerText.includes('step {target} ')",
                           timeout=WAIT_MS)
    page.wait_for_selector("#plot-hist .main-svg", timeout=WAIT_MS)
    page.wait_for_timeout(800)
    return f"the recorded race replayed to step {target} of {steps}"


def phone(page, url: str, path: Path) -> str:
    """The page at 390 px: its first screens, down to the race's table."""
    page.goto(url)
    page.locator("#gen-btn-phone").wait_for(state="visible", timeout=WAIT_MS)
    for slot in (0, 1, 2, 4):  # lazy images load once scrolled to
        page.locator(f"#img-{slot}").scroll_into_view_if_needed()
        page.wait_for_function(f"() => document.querySelector('#img-{slot} img')?.naturalWidth > 0",
                               timeout=WAIT_MS)
    page.wait_for_timeout(800)  # (the clip ends at the race's table: the plots below it are not in the picture)
    page.evaluate("window.scrollTo(0, 0)")
    bottom = page.locator("#stats table").bounding_box()
    page.screenshot(path=str(path), full_page=True,
                    clip={"x": 0, "y": 0, "width": 390, "height": bottom["y"] + bottom["height"] + 16})
    return "390 px, the first screens"


def main(argv: list[str] | None = None) -> int:
    from lab_screenshot import crop, lab

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("assets"), help="folder the pictures go to")
    parser.add_argument("--only", default=",".join(PICTURES), help=f"comma-separated: {', '.join(PICTURES)}")
    parser.add_argument("--relaxation", default="4", help="the Quality lab's relaxation (lab picture)")
    parser.add_argument("--rule", default="COOL-SD (nu 0.7, mean omega = delta)")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in PICTURES]
    if unknown or not chosen:
        parser.error(f"--only takes {', '.join(PICTURES)}; got {args.only!r}")
    os.environ.setdefault("COOLSD_MODEL", "")  # demo_page: the app's default model
    with demo_page(1500, 1250) as (page, url):
        for name in chosen:
            path = args.out / PICTURES[name]
            path.parent.mkdir(parents=True, exist_ok=True)
            staging = path.with_name(f".{path.stem}.partial.png")  # a picture is written whole or not at all
            if name == "screenshot":
                said = page_open(page, url)
                page.screenshot(path=str(staging), full_page=True)
            elif name == "phone":
                small = page.context.browser.new_page(viewport={"width": 390, "height": 844})
                said = phone(small, url, staging)
                small.close()
            elif name == "lab":
                wide = page.context.browser.new_page(viewport={"width": 1500, "height": 1100})
                wide.goto(url)
                lab(wide, argparse.Namespace(relaxation=args.relaxation, rule=args.rule, out=str(staging.parent)),
                    path=staging)
                wide.close()
                said = f"the Quality lab at relaxation {args.relaxation}"
            else:
                wide = page.context.browser.new_page(viewport={"width": 1500, "height": 1100})
                wide.goto(url)
                wide.get_by_role("tab", name="Schedule explorer").click()
                wide.wait_for_function("() => document.querySelector('#sched-numbers').innerText.includes('τ')",
                                       timeout=WAIT_MS)
                wide.wait_for_timeout(800)
                wide.screenshot(path=str(staging), full_page=True)
                crop(str(staging))
                wide.close()
                said = "the Schedule explorer as it opens"
            staging.replace(path)
            print(f"wrote {path}: {said}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
