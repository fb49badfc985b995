"""Two browser sessions analysing different samples at once on a fresh server both get their own report (its own
module: it needs a server whose first runs are these two)."""
import os

import pytest

from browser import CHROMIUM, FLAGS, dashboard, settle

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")


def test_two_sessions_at_once_do_not_break_each_other():
    """torch.export keeps process-wide state; two analyses in one server process at once failed each other
    ("Trying to pop empty mode stack") and the failure was shown as the model's."""
    from playwright.sync_api import sync_playwright
    with dashboard() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        a, b = browser.new_context().new_page(), browser.new_context().new_page()
        a.goto(f"{url}?sample=vision-mini", wait_until="commit")
        b.goto(f"{url}fallbacks?sample=transformer-mini", wait_until="commit")
        for page, sample in ((a, "vision-mini"), (b, "transformer-mini")):
            settle(page)
            header = page.locator('[data-testid="stCaptionContainer"]', has_text="· sample ·")
            header.first.wait_for(timeout=600_000)
            assert sample in header.first.inner_text()
            assert page.locator('[data-testid="stException"]').count() == 0
            assert not any("failed" in t for t in page.locator('[data-testid="stAlert"]').all_inner_texts())
        browser.close()
