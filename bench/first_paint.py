"""A fresh server's first paint: a dashboard server started on an empty XC_HOME (no run store, no TorchInductor
cache), one browser opening it at once, timed from the server's start.

    python bench/first_paint.py [--runs 3] [--visit-after 0]

Per run, from the moment the server process is started:
- answer:   the server answers GET / (the port opens well before: a server still starting holds the request);
- page:     the first time the page shows anything of the app (a sidebar or a status panel);
- progress: the progress panel ("Compiling…" or "Waiting for a free analysis slot…") is on screen;
- table:    the default sample's Overview shows its table (the report is there and drawn).
The sidebar's page list is read every 0.1 s until the table is drawn; a private module's name in it (Streamlit's
legacy pages/ listing) is counted. `--until page|progress` ends a run there (the first paint alone: no wait for
the analysis). `--visit-after S` waits S seconds after the server answers before the browser
opens it (a first visitor who comes a little later). Prints the median of each and every run.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

PRIVATE = ("capture preview", "graph pane", "inputs panel", "_ui", "_graph_pane", "_inputs_panel",
           "_capture_preview")
PROGRESS = ("Compiling…", "Waiting for a free analysis slot")


def _nav_text(page) -> str:
    nav = page.locator('[data-testid="stSidebarNav"]')
    try:
        return nav.inner_text(timeout=200) if nav.count() else ""
    except Exception:  # noqa: BLE001 — the element went between count() and inner_text()
        return ""


def _private_seen(nav: str) -> bool:
    lines = {line.strip() for line in nav.splitlines()}
    return bool(lines & {"ui", "app"}) or any(p in nav for p in PRIVATE)


def _time_answer(url: str, t0: float, out: dict) -> None:
    """out["answer"]: when GET / first comes back from the server, in seconds from t0."""
    import urllib.request
    while time.monotonic() - t0 < 300:
        try:
            urllib.request.urlopen(url, timeout=300).read()
            out["answer"] = time.monotonic() - t0
            return
        except OSError:
            time.sleep(0.05)


def one_run(browser, visit_after: float, timeout_s: float, until: str = "table") -> dict:
    import threading

    from browser import free_port
    home = tempfile.mkdtemp(prefix="bench-xc-first-paint-")
    port = free_port()
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                             "--server.port", str(port), "--browser.gatherUsageStats", "false"],
                            cwd=ROOT, env={**os.environ, "XC_HOME": home}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    out = {"private": False}
    try:
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if time.monotonic() - t0 > 120:
                raise SystemExit("the server did not open its port in 120 s")
            time.sleep(0.05)
        out["port"] = time.monotonic() - t0
        answer = threading.Thread(target=_time_answer, args=(f"http://127.0.0.1:{port}/", t0, out), daemon=True)
        answer.start()
        time.sleep(visit_after)
        ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = ctx.new_page()
        out["visit"] = time.monotonic() - t0
        page.goto(f"http://127.0.0.1:{port}/", wait_until="commit", timeout=120_000)
        while time.monotonic() - t0 < timeout_s:
            nav = _nav_text(page)
            out["private"] |= _private_seen(nav)
            now = time.monotonic() - t0
            if "page" not in out and (nav or page.locator('[data-testid="stExpander"]').count()):
                out["page"] = now
            if "progress" not in out and any(page.get_by_text(w).count() for w in PROGRESS):
                out["progress"] = now
                out.setdefault("page", now)
            if until in out:
                break
            if page.locator('[data-testid="stMain"] [data-testid="stDataFrame"]').count():
                out["table"] = now
                break
            if page.locator('[data-testid="stException"]').count():
                raise SystemExit(page.locator('[data-testid="stException"]').first.inner_text())
            time.sleep(0.1)
        else:
            raise SystemExit(f"no Overview table within {timeout_s:.0f} s")
        ctx.close()
        answer.join(timeout=60)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        # A run ended by --until leaves the analysis's workers running: they go with the server's process group,
        # before its XC_HOME is removed (else they write into it again).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(0.5)
        shutil.rmtree(home, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--visit-after", type=float, default=0.0, help="seconds between the server answering and the "
                                                                   "first visit")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--until", choices=("page", "progress", "table"), default="table",
                    help="end each run when this is on screen (default: the Overview's table)")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from browser import CHROMIUM, FLAGS
    runs = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        for i in range(args.runs):
            r = one_run(browser, args.visit_after, args.timeout, args.until)
            runs.append(r)
            print(f"run {i + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in r.items() if isinstance(v, float))
                  + f"; private module names in the sidebar: {'yes' if r['private'] else 'no'}", flush=True)
        browser.close()
    print(f"fresh server (empty XC_HOME), default sample, every available target, first visit "
          f"{args.visit_after:g} s after the port opened · {len(runs)} run(s), seconds from the server's start:")
    for k, words in (("answer", "GET / answered"), ("page", "first paint of the app"),
                     ("progress", "progress panel on screen"), ("table", "Overview table drawn")):
        vals = [r[k] for r in runs if k in r]
        if vals:
            print(f"  {words}: median {statistics.median(vals):.2f} s (runs: {', '.join(f'{v:.2f}' for v in vals)})")
    print(f"  runs whose sidebar listed a private module: {sum(r['private'] for r in runs)} of {len(runs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
