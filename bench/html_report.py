"""HTML report benchmark: file size and how soon its first screen shows, in headless Chromium.

    xc analyze sample:transformer-mini --targets all --out DIR
    python bench/html_report.py --report DIR                  # render DIR/report.json with this xc, then measure
    python bench/html_report.py old.html new.html --runs 7    # measure HTML files written earlier
    python bench/html_report.py --report DIR --cpu-throttle 4 --screenshot first-screen.png

Each run opens the file in a new browser context (a fresh tab, no cache shared with the run before), from
file://, every other request refused and counted. Read from the page itself with the performance API:
first paint and first contentful paint (`performance.getEntriesByType("paint")`), DOMContentLoaded and load
(`PerformanceNavigationTiming`), and "first screen drawn": the moment every figure that intersects the viewport
has its plot drawn (for a report that draws figures lazily, that happens after load). Also how many of the
file's figures are drawn once the first screen is, and "1st figure": from scrolling to the first figure that is
not drawn yet to its plot drawn (for a lazy report, that includes unpacking and running plotly.js). Medians of
--runs runs are printed (run 1 included: a report is usually opened once). --cpu-throttle N slows the page's
CPU N× through Chromium's DevTools protocol, to stand in for a busy machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update"]
# A figure is any plotly container: the old reports' `plotly-graph-div`, the lazy reports' `xc-fig`.
FIGURES = "document.querySelectorAll('.plotly-graph-div, .xc-fig')"
FIRST_SCREEN_DRAWN = f"""() => {{
    const h = window.innerHeight;
    // A lazy report's load event can come before its first paint: wait for both paint entries too.
    return performance.getEntriesByType('paint').length >= 2 && [...{FIGURES}].filter(d => {{
        const r = d.getBoundingClientRect();
        return r.bottom > 0 && r.top < h && r.height > 0;
    }}).every(d => d.querySelector('svg.main-svg'));
}}"""
FIRST_FIGURE = f"""async () => {{
    const d = [...{FIGURES}].find(d => !d.querySelector('svg.main-svg'));
    if (!d) return null;
    const t0 = performance.now();
    d.scrollIntoView();
    while (!d.querySelector('svg.main-svg')) await new Promise(r => setTimeout(r, 5));
    return performance.now() - t0;
}}"""
READ = f"""() => {{
    const paint = Object.fromEntries(performance.getEntriesByType('paint').map(e => [e.name, e.startTime]));
    const nav = performance.getEntriesByType('navigation')[0];
    const all = [...{FIGURES}];
    return {{fp: paint['first-paint'], fcp: paint['first-contentful-paint'], dcl: nav.domContentLoadedEventEnd,
             load: nav.loadEventEnd, screen: performance.now(), figures: all.length,
             drawn: all.filter(d => d.querySelector('svg.main-svg')).length}};
}}"""


def measure(path: str, runs: int, width: int, height: int, throttle: float, screenshot: str | None) -> dict:
    from playwright.sync_api import sync_playwright
    samples, outside = [], []

    def route(r):
        if r.request.url.startswith(("file:", "data:", "blob:")):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            for k in range(runs):
                context = browser.new_context(viewport={"width": width, "height": height})
                context.route("**/*", route)
                page = context.new_page()
                if throttle > 1:
                    context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": throttle})
                page.goto("file://" + os.path.abspath(path), wait_until="load", timeout=600_000)
                page.wait_for_function(FIRST_SCREEN_DRAWN, timeout=600_000, polling=50)
                samples.append(page.evaluate(READ))
                if screenshot and k == 0:
                    page.screenshot(path=screenshot)
                samples[-1]["first_figure"] = page.evaluate(FIRST_FIGURE)
                context.close()
        finally:
            browser.close()
    out = {key: statistics.median(s[key] for s in samples) for key in ("fp", "fcp", "dcl", "load", "screen")}
    firsts = [s["first_figure"] for s in samples if s["first_figure"] is not None]
    out["first_figure"] = statistics.median(firsts) if firsts else None
    out.update(figures=samples[0]["figures"], drawn=samples[0]["drawn"], bytes=os.path.getsize(path),
               outside=len(outside), runs=runs)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="HTML reports to measure")
    ap.add_argument("--report", metavar="RUN", help="also render this run (folder, report.json or id) with this xc")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=800)
    ap.add_argument("--cpu-throttle", type=float, default=1.0, metavar="N")
    ap.add_argument("--screenshot", metavar="PNG", help="the first file's first screen, from its first run")
    args = ap.parse_args()
    files = list(args.files)
    if args.report:
        from xc_core.review.html import report_html
        from xc_core.review.runs import load_run
        fd, rendered = tempfile.mkstemp(prefix="xc-bench-", suffix=".html")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(report_html(load_run(args.report).report))
        files.append(rendered)
    if not files:
        ap.error("give HTML files or --report RUN")
    print(f"{args.width}×{args.height}, CPU throttle {args.cpu_throttle:g}×, median of {args.runs} runs (ms)")
    print(f"{'file':40} {'bytes':>10} {'FP':>8} {'FCP':>8} {'DCL':>8} {'load':>8} {'screen':>8} {'1st fig':>8}"
          "  figures drawn with the first screen")
    try:
        for i, path in enumerate(files):
            m = measure(path, args.runs, args.width, args.height, args.cpu_throttle,
                        args.screenshot if i == 0 else None)
            name = "(rendered from --report)" if args.report and path == files[-1] else os.path.basename(path)
            print(f"{name[:40]:40} {m['bytes']:>10,} {m['fp']:>8.0f} {m['fcp']:>8.0f} {m['dcl']:>8.0f} "
                  f"{m['load']:>8.0f} {m['screen']:>8.0f} "
                  + (f"{m['first_figure']:>8.0f}" if m["first_figure"] is not None else f"{'—':>8}")
                  + f"  {m['drawn']}/{m['figures']}"
                  + (f"  ({m['outside']} outside request(s) refused)" if m["outside"] else ""))
    finally:
        if args.report:
            os.unlink(files[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
