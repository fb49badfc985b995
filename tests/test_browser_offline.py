"""The dashboard makes no request to outside hosts (every page, in one browser session, with a report on it), and
a server sweeps a crashed process's scratch folders and repairs a damaged run index when it starts, before any
session (its own module: it starts its own servers)."""
import os
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest

from browser import CHROMIUM, FLAGS, dashboard, settle

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")

PAGES = ["Topology", "Heat map", "Fusion", "Stages", "Drift", "Precision", "Checklist", "Fallbacks", "Core ML",
         "History", "Fleet", "Downloads", "Overview"]
LOCAL = {"127.0.0.1", "localhost", "::1", "[::1]"}


def test_no_request_leaves_localhost(tmp_path):
    from playwright.sync_api import sync_playwright
    outside = []

    def guard(route):
        # Refused, not sent: the test records the attempt and never reaches the outside host.
        host = urllib.parse.urlsplit(route.request.url).hostname
        if host in LOCAL or route.request.url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    with dashboard(env={"XC_HOME": str(tmp_path / "home")}) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.route("**/*", guard)
        page = context.new_page()
        page.goto(f"{url}?sample=vision-mini&targets=ort-cpu,ort-nnapi,coreml-ane,openvino-cpu", timeout=120_000)
        settle(page)
        page.locator('[data-testid="stCaptionContainer"]', has_text="vision-mini").first.wait_for(timeout=600_000)
        for title in PAGES:
            page.locator('[data-testid="stSidebarNav"] a', has_text=title).first.click()
            settle(page)
            assert page.locator('[data-testid="stException"]').count() == 0, title
        favicon = page.evaluate("document.querySelector(\"link[rel='shortcut icon']\").href")
        browser.close()
    assert outside == []
    assert not favicon.startswith("http") or urllib.parse.urlsplit(favicon).hostname in LOCAL


def test_the_server_sweeps_a_crashed_runs_scratch_and_repairs_its_index_when_it_starts(tmp_path):
    home = tmp_path / "home"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    left = home / "work" / f"dashboard-run-{dead}-0123456789"
    (left / "artifacts").mkdir(parents=True)
    (left / "artifacts" / "model.onnx").write_bytes(b"left behind by a killed server")
    (home / "runs.sqlite").write_bytes(b"\x00garbage" * 500)
    with dashboard(env={"XC_HOME": str(home)}) as url:
        # Healthy means started: the start-up hook has run; no session has been opened.
        assert urllib.request.urlopen(url + "_stcore/health", timeout=30).status == 200
        assert not left.exists()
        assert [n for n in os.listdir(home) if n.startswith("runs.sqlite.damaged-")]
