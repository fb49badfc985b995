"""A server under load: N browser sessions analyse different models at once on one fresh dashboard server.
Reports, per session, the seconds until its report rendered and whether it succeeded, and the health endpoint's
latency throughout (median and worst) — the endpoint must keep answering within 1 s.

    python bench/sessions.py [--sessions 8]

Sessions differ by sample and target list (?sample=…&targets=… links), so each is its own analysis; the server
runs XC_CONCURRENT_ANALYSES of them at once (default 2) and queues the rest.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

TARGET_SETS = ["ort-cpu", "ort-cpu,openvino-cpu", "ort-nnapi,ort-cpu-int8", "coreml-cpu,ort-coreml"]
SAMPLES = ["vision-mini", "tts-mini", "transformer-mini"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=8)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from browser import CHROMIUM, FLAGS, dashboard, health_latencies
    home = tempfile.mkdtemp(prefix="bench-xc-home-")
    links = [f"?sample={SAMPLES[i % len(SAMPLES)]}&targets={TARGET_SETS[i % len(TARGET_SETS)]}"
             for i in range(args.sessions)]
    assert len(set(links)) == len(links), "sessions must analyse different models"
    results = {}
    with dashboard({"XC_HOME": home}) as url, sync_playwright() as p:
        stop, latencies = threading.Event(), []
        poller = threading.Thread(target=health_latencies, args=(url, stop, latencies), daemon=True)
        poller.start()
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        pages = []
        t0 = time.monotonic()
        for link in links:
            page = browser.new_context().new_page()
            page.goto(url + link, wait_until="commit")
            pages.append((link, page))
        pending = dict(pages)
        while pending and time.monotonic() - t0 < 1800:
            for link, page in list(pending.items()):
                if page.locator('[data-testid="stDataFrame"]').count():
                    failed = page.get_by_text("Could not analyse").count() + page.get_by_text("internal error").count()
                    results[link] = (time.monotonic() - t0, "ok" if not failed else "failed")
                    del pending[link]
            time.sleep(1)
        for link in pending:
            results[link] = (None, "did not finish")
        stop.set()
        poller.join()
        browser.close()
    for link in links:
        secs, status = results[link]
        print(f"{link:60} {status:15} {'' if secs is None else f'{secs:.0f} s'}")
    ok = sum(1 for s, st in results.values() if st == "ok")
    print(f"{ok} of {len(links)} sessions completed; health endpoint: {len(latencies)} polls, median "
          f"{statistics.median(latencies) * 1000:.0f} ms, worst {max(latencies) * 1000:.0f} ms")
    return 0 if ok == len(links) and max(latencies) < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
