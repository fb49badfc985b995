"""One real-browser test: the dashboard opens on tts-mini in headless Chromium and shows the Overview."""
import os

import pytest

from browser import CHROMIUM, FLAGS, dashboard, settle

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")


def test_overview_in_headless_chromium(tmp_path):
    from playwright.sync_api import sync_playwright
    with dashboard() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url, timeout=120_000)
        settle(page)
        page.get_by_role("heading", name="Overview").wait_for(timeout=60_000)
        assert page.locator('[data-testid="stException"]').count() == 0
        body = page.inner_text("body")
        assert "tts-mini" in body and "ort-cpu" in body and "openvino-cpu" in body
        page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)
        browser.close()
