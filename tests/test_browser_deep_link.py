"""A deep link as the very first request of a fresh server (its own module: it starts its own server and
Playwright, after test_browser.py's module-scoped browser has closed)."""
import os

import pytest

from browser import CHROMIUM, FLAGS, dashboard, settle

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")


def test_a_deep_link_as_the_first_request_of_a_fresh_server():
    """Streamlit's legacy pages/ mode would run the page file alone; xc reroutes it through app.py."""
    from playwright.sync_api import sync_playwright
    with dashboard() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}checklist?sample=vision-mini", timeout=120_000)
        settle(page)
        page.get_by_role("heading", name="Checklist", exact=True).wait_for(timeout=600_000)
        page.locator('[data-testid="stCaptionContainer"]', has_text="vision-mini").first.wait_for(timeout=600_000)
        nav = page.inner_text('[data-testid="stSidebarNav"]')
        assert "Topology" in nav and "ui" not in nav.split()
        browser.close()
