"""Re-opening an analysed model: a fresh dashboard server (its own empty run store) analyses the default sample with
every target once; then new browser sessions open the same page, each timed from navigation to the Overview drawn
(the report's status and its figures on screen, the script run finished). Median and every run.

    python bench/reopen.py [--sessions 5] [--sample tts-mini]

The first analysis is timed too (its worker processes, the toolchains' compile), for scale. Two kinds of new
session, each a new Streamlit session (its own websocket and script run) on a server whose caches and run store are
warm:
- cold: a new browser context, nothing cached in the browser (a first visit from another machine);
- warm: a new tab of a browser that has opened the dashboard before (its HTTP cache holds Streamlit's frontend,
  as a returning user's does).
The floor is the same measurement on a one-line Streamlit app (st.caption) served the same way: what loading
Streamlit's frontend and one script run cost in this browser on this machine, before xc does anything.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]


def _overview_drawn(page, sample: str, timeout_ms: int) -> None:
    """The page header names the sample (it does once the report is there), the sidebar says what compiled, and
    the script run has finished."""
    page.locator('[data-testid="stCaptionContainer"]', has_text=sample).first.wait_for(timeout=timeout_ms)
    page.get_by_text("Compiled:").first.wait_for(timeout=timeout_ms)
    page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout_ms,
                           polling=50)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


FLOOR_APP = 'import streamlit as st\nst.caption("floor")\n'


def _sessions(browser, url: str, drawn, sessions: int, warm: bool) -> list[float]:
    """Seconds from navigation to `drawn(page)` for `sessions` new sessions: new contexts (cold), or new tabs of
    one context that has loaded the page once (warm)."""
    out = []
    shared = browser.new_context(viewport={"width": 1400, "height": 1000}) if warm else None
    if shared is not None:
        first = shared.new_page()
        first.goto(url, timeout=120_000)
        drawn(first)
        first.close()
    for _ in range(sessions):
        ctx = shared or browser.new_context(viewport={"width": 1400, "height": 1000})
        page = ctx.new_page()
        t0 = time.perf_counter()
        page.goto(url, timeout=120_000)
        drawn(page)
        out.append(time.perf_counter() - t0)
        if page.locator('[data-testid="stException"]').count():
            raise SystemExit(page.locator('[data-testid="stException"]').first.inner_text())
        page.close()
        if shared is None:
            ctx.close()
    if shared is not None:
        shared.close()
    return out


def _floor_drawn(page) -> None:
    page.locator('[data-testid="stCaptionContainer"]', has_text="floor").first.wait_for(timeout=60_000)
    page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000, polling=50)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def _floor(browser, sessions: int) -> dict[str, list[float]]:
    """New sessions of a one-line app on its own server, timed like the dashboard's."""
    import subprocess

    from browser import free_port
    tmp = tempfile.mkdtemp(prefix="bench-xc-floor-")
    with open(os.path.join(tmp, "floor.py"), "w") as f:
        f.write(FLOOR_APP)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "floor.py", "--server.headless", "true",
                             "--server.port", str(port), "--browser.gatherUsageStats", "false"], cwd=tmp,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        ctx = browser.new_context()
        page = ctx.new_page()
        for _ in range(120):                   # the server is starting; this first visit warms it
            try:
                page.goto(url, timeout=60_000)
                break
            except Exception:  # noqa: BLE001
                time.sleep(0.5)
        _floor_drawn(page)
        ctx.close()
        out = {kind: _sessions(browser, url, _floor_drawn, sessions, kind == "warm") for kind in ("cold", "warm")}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--sample", default=None, help="a bundled sample (default: the dashboard's default)")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from browser import CHROMIUM, FLAGS, dashboard
    from xc_core.sources.samples import DEFAULT_SAMPLE
    sample = args.sample or DEFAULT_SAMPLE
    home = tempfile.mkdtemp(prefix="bench-xc-home-")
    query = f"?sample={args.sample}" if args.sample else ""
    try:
        with dashboard(env={"XC_HOME": home}) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = ctx.new_page()
            t0 = time.perf_counter()
            page.goto(url + query, timeout=600_000)
            _overview_drawn(page, sample, 900_000)
            first = time.perf_counter() - t0
            ctx.close()

            def drawn(p):
                _overview_drawn(p, sample, 120_000)
            times = {kind: _sessions(browser, url + query, drawn, args.sessions, kind == "warm")
                     for kind in ("cold", "warm")}
            floor = _floor(browser, args.sessions)
            browser.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(f"sample {sample} · every available target · headless Chromium")
    print(f"  first analysis, navigation → Overview drawn: {first:.2f} s")
    for kind, words in (("cold", "new browser context (nothing cached)"),
                        ("warm", "new tab of a browser that has opened it before")):
        x, f = statistics.median(times[kind]), statistics.median(floor[kind])
        print(f"  re-open, {words}: median {x:.2f} s (runs: {', '.join(f'{t:.2f}' for t in times[kind])}); "
              f"floor {f:.2f} s (runs: {', '.join(f'{t:.2f}' for t in floor[kind])}); re-open / floor {x / f:.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
