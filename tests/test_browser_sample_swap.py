"""On a fresh server, the sample a user picks stays picked when they open another page (its own module: it needs a
server whose very first run is this test's)."""
import os

import pytest

from browser import CHROMIUM, FLAGS, dashboard, settle

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")


def test_picked_sample_survives_the_first_page_change_on_a_fresh_server():
    """Streamlit runs the first script of a process in its legacy pages/ mode, where widget ids differ from every
    later run; a sidebar built in that run lost the user's pick on the next click (it fell back to the first
    sample in the list)."""
    from playwright.sync_api import sync_playwright
    with dashboard() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url, timeout=120_000)
        settle(page)
        header = page.locator('[data-testid="stCaptionContainer"]', has_text="· sample ·")
        header.filter(has_text="tts-mini").first.wait_for(timeout=600_000)
        sidebar = page.locator('[data-testid="stSidebar"]')
        sidebar.locator('[data-testid="stSelectbox"]').first.click()
        page.get_by_role("option", name="transformer-mini").click()
        settle(page)
        assert "transformer-mini" in header.first.inner_text(), header.first.inner_text()
        page.locator('[data-testid="stSidebarNav"] a', has_text="Fusion").click()
        settle(page)
        page.get_by_role("heading", name="Fusion", exact=True).wait_for(timeout=600_000)
        assert "transformer-mini" in header.first.inner_text(), header.first.inner_text()
        picked = sidebar.locator('[data-testid="stSelectbox"] input').first.input_value() or \
            sidebar.locator('[data-testid="stSelectbox"]').first.inner_text()
        assert "transformer-mini" in picked, picked
        assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()
