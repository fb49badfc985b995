"""On a fresh server, clicking across pages as fast as a user can while the Overview still draws the default sample
changes nothing the user did not change: the sample box keeps the default sample under its own description, and no
analysis starts besides the one the server began at start-up (its own module: it needs a fresh server)."""
import os

import pytest

from browser import CHROMIUM, FLAGS, dashboard, settle

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")

# Two quick targets: the Overview draws (progress, then the table) for a few seconds, not minutes.
TARGETS = "ort-cpu,ort-nnapi"
ROUNDS = 3


def test_fast_page_clicks_while_the_overview_draws_keep_the_sample_and_start_nothing(tmp_path):
    from playwright.sync_api import sync_playwright

    from xc_core.sources.samples import DEFAULT_SAMPLE, SAMPLES
    from xc_core.store import RunStore
    home = tmp_path / "home"
    with dashboard(env={"XC_HOME": str(home), "XC_WARM_START": "1", "XC_DEFAULT_TARGETS": TARGETS}) as url, \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url, wait_until="commit", timeout=120_000)
        sidebar = page.locator('[data-testid="stSidebar"]')
        links = page.locator('[data-testid="stSidebarNav"] a')
        # From the first page list on: the first run is still drawing the sidebar, then the Overview its progress.
        links.first.wait_for(timeout=120_000)
        names = [links.nth(i).inner_text() for i in range(links.count())]
        assert len(names) >= 10, names
        for _ in range(ROUNDS):         # every page link, no pause between clicks
            for i in range(len(names)):
                links.nth(i).click()
        sidebar.locator('[data-testid="stSelectbox"]').first.wait_for(timeout=120_000)
        for _ in range(ROUNDS):         # and again while the Overview's progress polls
            for i in range(len(names)):
                links.nth(i).click()
        links.nth(0).click()            # back to the Overview
        settle(page)
        page.keyboard.press("r")        # a rerun, as any next widget click makes: it sends the browser's widget values
        settle(page)
        page.locator('[data-testid="stMain"] [data-testid="stDataFrame"]').first.wait_for(state="attached",
                                                                                     timeout=120_000)
        settle(page)

        box = sidebar.locator('[data-testid="stSelectbox"]').first
        shown = box.locator("input").input_value()
        assert DEFAULT_SAMPLE in shown, f"the sample box shows {shown!r}"
        captions = sidebar.locator('[data-testid="stCaptionContainer"]').all_inner_texts()
        assert SAMPLES[DEFAULT_SAMPLE].description in captions, captions
        header = page.locator('[data-testid="stMain"] [data-testid="stCaptionContainer"]', has_text="· sample ·")
        assert DEFAULT_SAMPLE in header.first.inner_text(), header.first.inner_text()
        assert page.get_by_text("Compiling…").count() == 0, "another analysis is running"
        assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()
    # The store holds the start-up analysis only: no other sample or target set was analysed, and the first visitor
    # joined the analysis the warm-up started rather than starting one of its own (it would be a second run).
    runs = RunStore(str(home)).runs()
    assert [r["source_name"] for r in runs] == [DEFAULT_SAMPLE], runs
