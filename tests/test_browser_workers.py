"""The served dashboard with compilers that segfault, hang and allocate without bound: the run finishes, those
targets are errors with their reasons, the others are ok, the server keeps answering its health check — and after
a restart the same model opens from the run store without compiling again."""
import os
import threading
import time

import pytest

from browser import CHROMIUM, CLASSIC_TARGETS, FLAGS, dashboard, health_latencies, settle

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")
HERE = os.path.dirname(os.path.abspath(__file__))


def test_hostile_targets_in_the_dashboard_and_the_store_across_a_restart(tmp_path):
    from playwright.sync_api import sync_playwright
    env = {"XC_HOME": str(tmp_path / "xc-home"), "XC_PLUGINS": "hostile_targets", "XC_TIMEOUT_S": "25",
           "XC_DEFAULT_TARGETS": CLASSIC_TARGETS + ",test-segfault,test-hang,test-oom",
           "XC_MEMORY_GIB": "2", "PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])}
    url_path = "?sample=vision-mini"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        with dashboard(env) as url:
            stop, latencies = threading.Event(), []
            poller = threading.Thread(target=health_latencies, args=(url, stop, latencies), daemon=True)
            page = browser.new_context().new_page()
            t0 = time.monotonic()
            page.goto(url + url_path, wait_until="commit")
            # From when the workers run: what must not stall the server is their crashing, hanging and allocating
            # (a new server's first session imports the toolchains once; bench/first_paint.py times that).
            page.get_by_text("Compiling").first.wait_for(timeout=300_000)
            poller.start()
            table = page.locator('[data-testid="stTable"]').first
            table.wait_for(timeout=600_000)
            first = time.monotonic() - t0
            settle(page)
            stop.set()
            poller.join()
            text = page.locator("body").inner_text()
            assert "killed by SIGSEGV in compile" in text
            assert "exceeded 25 s in compile" in text
            assert "exceeded the 2 GiB memory limit in compile" in text
            assert page.locator('[data-testid="stException"]').count() == 0
            assert latencies and max(latencies) < 2.0, f"health endpoint worst {max(latencies):.2f} s"
        with dashboard(env) as url:   # a restart: a new server process, the same XC_HOME
            page = browser.new_context().new_page()
            t0 = time.monotonic()
            page.goto(url + url_path, wait_until="commit")
            page.locator('[data-testid="stTable"]').first.wait_for(timeout=120_000)
            opened = time.monotonic() - t0
            settle(page)
            assert "killed by SIGSEGV in compile" in page.locator("body").inner_text()
            assert page.get_by_text("Compiling").count() == 0
            assert opened < first, (opened, first)
        browser.close()
    assert os.listdir(tmp_path / "xc-home" / "work") == []
