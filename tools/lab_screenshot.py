"""Screenshots of the Quality lab and the Schedule explorer, for the docs (not a test; `tools/page_pictures.py`
makes them with every other page picture).

    COOLSD_MODEL=mnist OMP_NUM_THREADS=1 python tools/lab_screenshot.py --relaxation 4

Starts the app in-process, drives headless Chromium (Debian's, via Playwright), runs the lab to the end,
and writes assets/lab_screenshot.png and assets/schedule_screenshot.png.
"""

from __future__ import annotations

import argparse
import time

from demo_page import demo_page  # tools/


def lab(page, args, path=None) -> None:
    """Run the Quality lab to its end and save it (cropped to the tab) to `path` (default OUT/lab_screenshot.png)."""
    page.get_by_role("tab", name="Quality lab").click()
    box = page.locator("#lab-relaxation input[type=number]")
    box.fill(args.relaxation)
    box.press("Enter")
    t0 = time.perf_counter()
    page.locator("#lab-run").click()
    page.wait_for_function("() => document.querySelector('#lab-stats').innerText.includes('Finished')",
                           timeout=900_000)
    page.wait_for_selector("#lab-pareto .main-svg", timeout=60_000)
    print(f"lab finished after {time.perf_counter() - t0:.1f} s in the browser")
    page.wait_for_timeout(500)
    path = str(path or f"{args.out}/lab_screenshot.png")
    page.screenshot(path=path, full_page=True)
    crop(path)


def crop(path: str) -> None:
    """Keep the tab's column (the shared settings column and the footer are cut away)."""
    from PIL import Image

    with Image.open(path) as img:
        box = (470, 150, 1370, min(img.height, 2190))
        img.crop(box).save(path, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--relaxation", default="4")
    parser.add_argument("--rule", default="COOL-SD (nu 0.7, mean omega = delta)")
    parser.add_argument("--out", default="assets")
    parser.add_argument("--skip-lab", action="store_true", help="only the schedule explorer")
    args = parser.parse_args()
    with demo_page(1500, 1100) as (page, url):
        page.goto(url)
        if not args.skip_lab:
            lab(page, args)
        page.get_by_role("tab", name="Schedule explorer").click()
        page.wait_for_function("() => document.querySelector('#sched-numbers').innerText.includes('τ')",
                               timeout=120_000)
        page.wait_for_timeout(800)
        page.screenshot(path=f"{args.out}/schedule_screenshot.png", full_page=True)
        crop(f"{args.out}/schedule_screenshot.png")


if __name__ == "__main__":
    main()
