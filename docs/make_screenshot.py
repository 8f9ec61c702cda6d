"""Make docs/report.png, the README's picture of a report: the HTML report of a bundled sample,
rendered in headless Chromium (Debian's `chromium`, driven through playwright), its top part.

    python docs/make_screenshot.py [--sample sample_traces/input_bound.json] [--out docs/report.png]

Run it again when the page's look changes; the PNG is kept small (under 150 KB: a palette PNG of
the first screen at 1100 px).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
        "--disable-default-apps", "--disable-extensions"]
WIDTH, HEIGHT = 1100, 780
MAX_BYTES = 150_000


def screenshot(sample: Path, out: Path) -> Path:
    from playwright.sync_api import sync_playwright

    import traceanalyzer as ta

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        raise SystemExit("Chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        page_path = Path(tmp) / "report.html"
        cwd = Path.cwd()
        try:  # the report names its input as given: a path relative to the checkout, not this machine's
            os.chdir(ROOT)
            ta.analyze(sample.resolve().relative_to(ROOT)).to_html(page_path)
        finally:
            os.chdir(cwd)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=ARGS)
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                       else route.abort())
            page.goto(page_path.as_uri())
            page.wait_for_load_state("load")
            png = page.screenshot(full_page=False)
            browser.close()
    out.write_bytes(_small(png))
    if out.stat().st_size > MAX_BYTES:
        raise SystemExit(f"{out} is {out.stat().st_size} bytes, over {MAX_BYTES}")
    return out


def _small(png: bytes) -> bytes:
    """A palette PNG when Pillow is at hand (a report is flat colours: 256 are plenty), else as taken."""
    try:
        from PIL import Image
    except ImportError:
        return png
    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=128)
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True)
    return buf.getvalue() if buf.tell() < len(png) else png


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=Path, default=ROOT / "sample_traces" / "input_bound.json")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "report.png")
    args = parser.parse_args()
    print(screenshot(args.sample, args.out))


if __name__ == "__main__":
    main()
