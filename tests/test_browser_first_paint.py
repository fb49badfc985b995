"""A fresh server's first paint: from the first frame, the sidebar lists the app's pages — never Streamlit's legacy
listing of every file in pages/ (the private helpers _ui, _graph_pane … and the app file itself) — and the page
shows the analysis's progress panel before its report. Behaviour only: how fast is bench/first_paint.py's."""
import os

import pytest

from browser import CHROMIUM, FLAGS, ROOT, dashboard

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")

# Every frame the page goes through, as the DOM changes: the sidebar's page list, and the main area's first words.
RECORDER = """
window.__xcNav = []; window.__xcMain = null;
new MutationObserver(() => {
    const nav = document.querySelector('[data-testid="stSidebarNav"]');
    const text = nav ? nav.innerText : null;
    if (text && window.__xcNav[window.__xcNav.length - 1] !== text) window.__xcNav.push(text);
    const main = document.querySelector('[data-testid="stMain"] [data-testid="stMainBlockContainer"]');
    if (window.__xcMain === null && main && main.innerText.trim()) window.__xcMain = main.innerText;
}).observe(document, {subtree: true, childList: true, characterData: true});
"""
PROGRESS = ("Compiling…", "Waiting for a free analysis slot")


def _legacy_labels() -> set[str]:
    """How Streamlit's legacy listing names the files of pages/ that are not pages, and the app file."""
    private = [f[:-3] for f in os.listdir(os.path.join(ROOT, "pages")) if f.startswith("_") and f.endswith(".py")
               and f != "__init__.py"]
    return {"app"} | {f.lstrip("_").replace("_", " ") for f in private} | set(private)


def test_a_fresh_servers_first_paint_lists_only_the_apps_pages(tmp_path):
    from playwright.sync_api import sync_playwright
    legacy = _legacy_labels()
    assert {"ui", "graph pane", "app"} <= legacy
    with dashboard(env={"XC_HOME": str(tmp_path / "home"), "XC_WARM_START": "1"}) as url, \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.add_init_script(RECORDER)
        page = context.new_page()
        page.goto(url, wait_until="commit", timeout=120_000)
        # The first screenshot with a sidebar page list in it.
        page.locator('[data-testid="stSidebarNav"]').wait_for(timeout=300_000)
        page.screenshot(path=str(tmp_path / "first.png"))
        first = page.locator('[data-testid="stSidebarNav"]').inner_text()
        assert "Overview" in first and "Topology" in first, first
        assert not legacy & {line.strip() for line in first.splitlines()}, first
        # The progress panel, then the report: every page list shown until then was the app's.
        page.locator('[data-testid="stMain"] [data-testid="stDataFrame"]').first.wait_for(state="attached",
                                                                                     timeout=900_000)
        navs = page.evaluate("window.__xcNav")
        main = page.evaluate("window.__xcMain")
        assert navs, "no page list was recorded"
        for nav in navs:
            assert not legacy & {line.strip() for line in nav.splitlines()}, nav
        assert main and any(w in main for w in PROGRESS), main     # the first words of the page: its progress
        assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()
