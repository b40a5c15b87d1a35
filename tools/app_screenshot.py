"""A screenshot of a race (not a test), replayed mid-race. The README's and the docs' pictures of the page are all
made by `tools/page_pictures.py`.

    OMP_NUM_THREADS=1 COOLSD_MODEL=emoji python tools/app_screenshot.py --page-open --out assets/screenshot.png
    OMP_NUM_THREADS=1 python tools/app_screenshot.py --out assets/screenshot_mnist.png   # MNIST, four racers

Starts the app in-process in headless Chromium (Debian's, via Playwright). With --page-open: the page as a visitor
first sees it, the recorded default race, stepped back to the middle of the race. Without: a share link picks four
racers and settings (MNIST digit 8), the race runs to the end and is stepped back to its middle with the overlay
on. Saves the page.
"""

from __future__ import annotations

import argparse

from demo_page import demo_page  # tools/

LINK = "?condition=8&seed=2&overlay=true&delta=2&racers=eagle-1,lantern%2B%2B,uniform-rsd,cool-sd"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="assets/screenshot.png")
    parser.add_argument("--replay-share", type=float, default=0.5, help="replay step, as a share of the race")
    parser.add_argument("--page-open", action="store_true", help="the recorded race the page opens on")
    args = parser.parse_args(argv)
    with demo_page(1500, 1250) as (page, url):
        if args.page_open:
            page.goto(url)
            page.wait_for_function("() => document.querySelector('#stats')?.innerText?.includes('Recorded race')",
                                   timeout=120_000)
        else:
            page.goto(url.rstrip("/") + "/" + LINK)
            page.wait_for_function("() => document.querySelector('#title-2')?.innerText?.includes('UniformRSD')",
                                   timeout=60_000)
            page.locator("#gen-btn").click()
            page.wait_for_function("() => document.querySelector('#stats').innerText.includes('Finished')",
                                   timeout=300_000)
        steps = int(page.locator("#replay input[type=range]").get_attribute("max"))
        target = round(steps * args.replay_share)
        box = page.locator("#replay input[type=number]")
        box.fill(str(target))
        box.press("Enter")
        page.wait_for_function(f"() => document.querySelector('#stats').innerText.includes('step {target} ')",
                               timeout=60_000)
        page.wait_for_selector("#plot-hist .main-svg", timeout=60_000)
        page.wait_for_timeout(800)
        page.screenshot(path=args.out, full_page=True)
        print(f"replayed step {target} of {steps}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
