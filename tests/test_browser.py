"""Real-browser tests: the dashboard opens on tts-mini in headless Chromium, and each page renders for each
bundled sample with no exception box."""
import os

import pytest

from browser import CHROMIUM, FLAGS, dashboard, settle

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")

PAGES = {"topology": "Topology", "heatmap": "Backend heat map", "fusion": "Fusion", "stages": "Stages",
         "drift": "Numerical drift",
         "precision": "Precision audit", "checklist": "Checklist", "fallbacks": "Fallbacks", "coreml": "Core ML",
         "history": "History", "downloads": "Downloads"}


@pytest.fixture(scope="module")
def browser_page():
    from playwright.sync_api import sync_playwright
    with dashboard() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        yield url, page
        browser.close()


def test_overview_in_headless_chromium(browser_page, tmp_path):
    url, page = browser_page
    page.goto(url, timeout=120_000)
    settle(page)
    page.get_by_role("heading", name="Overview", exact=True).wait_for(timeout=60_000)
    assert page.locator('[data-testid="stException"]').count() == 0
    body = page.inner_text("body")
    assert "tts-mini" in body and "ort-cpu" in body and "openvino-cpu" in body
    # A user sees the app, not Streamlit's developer controls: no Deploy button, no rerun / cache / settings items.
    assert page.locator('[data-testid="stAppDeployButton"]').count() == 0
    menu = page.locator('[data-testid="stMainMenu"]')
    if menu.count():
        menu.locator("button").first.click()
        items = page.locator('[data-testid="stMainMenuList"]').inner_text(timeout=10_000)
        page.keyboard.press("Escape")
        assert not any(word in items for word in ("Rerun", "Clear cache", "Settings", "Deploy")), items
    page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)


@pytest.mark.parametrize("sample", ["vision-mini", "tts-mini", "transformer-mini"])
@pytest.mark.parametrize("path,title", list(PAGES.items()))
def test_pages_render_for_each_sample(browser_page, sample, path, title):
    url, page = browser_page
    page.goto(f"{url}{path}?sample={sample}", timeout=120_000)
    settle(page)
    page.get_by_role("heading", name=title, exact=True).wait_for(timeout=60_000)
    # The page header names the analysed source once the report is there (History lists runs, not one report).
    if path != "history":
        page.locator('[data-testid="stCaptionContainer"]', has_text=sample).first.wait_for(timeout=600_000)
    assert page.locator('[data-testid="stException"]').count() == 0

    if path == "topology":
        # Netron-like panes: labelled boxes, edges with tensor shapes and arrowheads; a click rings the node.
        panes = page.locator(".xc-canvas svg")
        panes.nth(1).locator("g.node").first.wait_for(timeout=120_000)
        assert panes.count() == 2
        for k in range(2):
            labels = panes.nth(k).locator("g.node text").all_text_contents()
            assert len(labels) >= 10 and any(t[:1].isupper() for t in labels), labels[:10]
            edges = panes.nth(k).locator("g.edge")
            assert edges.count() >= 3 and edges.first.locator("polygon").count() == 1     # arrowhead
            shapes = panes.nth(k).locator("g.edge text").all_text_contents()
            assert shapes and all("×" in s or s.isdigit() or s in ("scalar",) or "(" in s for s in shapes), shapes
        panes.nth(0).locator("g.node").filter(
            has_not=page.locator("title", has_text="click to expand")).nth(2).click()
        settle(page)
        page.locator(".xc-canvas g.node.sel").first.wait_for(timeout=60_000)
        assert page.get_by_text("Selected source op across targets").count() == 1
