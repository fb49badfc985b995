"""The Compare page in a real browser: two CLI runs of issue 56's done-when pair (one inserted block, one swapped
activation, one retrained layer) opened by a `?base=…&head=…` link. The header counts and the change table are
exactly those three changes; both panes colour their changed nodes (the inserted block green on the right);
scrolling one pane moves the other; a click rings a node and its counterpart; filtering by kind drops rows."""
import json
import os

import pytest
import torch

from browser import CHROMIUM, FLAGS, dashboard, settle

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")


@pytest.fixture(scope="module")
def pair_home(tmp_path_factory):
    import model_pairs
    from xc_core.cli import main
    folder = tmp_path_factory.mktemp("browser-compare")
    home = folder / "xc-home"
    old = os.environ.get("XC_HOME")
    os.environ["XC_HOME"] = str(home)
    keys = {}
    try:
        for name, model in (("base", model_pairs.base_model()), ("head", model_pairs.head_model())):
            path = folder / f"{name}.pt2"
            torch.export.save(torch.export.export(model, model_pairs.example_inputs()), str(path))
            assert main(["analyze", str(path), "--targets", "ort-cpu", "--out", str(folder / name), "--quiet"]) == 0
            keys[name] = json.load(open(folder / name / "report.json"))["run"]["key"]
    finally:
        os.environ["XC_HOME"] = old
    return str(home), keys


def _table(page) -> list[list[str]]:
    """The change table's rows as text (Glide's grid keeps an accessible copy of its cells in the DOM)."""
    grid = page.locator('[data-testid="stMain"] [data-testid="stDataFrame"]').first
    cells = [c.inner_text() for c in grid.locator('[role="gridcell"]').all()]
    return [cells[k:k + 5] for k in range(0, len(cells), 5)]


def test_a_compare_link_shows_the_three_changes_on_synced_panes(pair_home, tmp_path):
    from playwright.sync_api import sync_playwright
    home, keys = pair_home
    with dashboard({"XC_HOME": home, "XC_DEFAULT_TARGETS": "ort-cpu"}) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1400})
        page.goto(f"{url}compare?base={keys['base'][:12]}&head={keys['head'][:12]}", wait_until="commit")
        page.get_by_role("heading", name="Compare runs", exact=True).wait_for(timeout=300_000)
        settle(page)
        page.locator(".xc-canvas svg").nth(1).wait_for(timeout=60_000)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert "1 block added (4 ops) · 1 op replaced · weights changed on 1 op · 18 ops matched" in page.inner_text("body")
        assert _table(page) == [
            ["added", "blocks.1", "block of 4 ops", "—", "inserted block: conv2d×2, relu, add"],
            ["replaced", "blocks.3.act", "hardswish", "relu", "relu → hardswish"],
            ["weights", "head.fc", "linear", "—", "head.fc.weight (5×8): rel L2 0.1"]]

        base, head = page.locator(".xc-canvas").nth(0), page.locator(".xc-canvas").nth(1)
        # Base: the swapped activation and the retrained layer amber, nothing added or removed; head: the
        # inserted block's four ops green inside a green frame, and its two changed ops amber.
        assert base.locator("g.node.mc-changed").count() == 2 and base.locator("g.node.mc-added").count() == 0
        assert base.locator("g.node.mc-removed").count() == 0
        assert head.locator("g.node.mc-added").count() == 4 and head.locator("g.node.mc-changed").count() == 2
        assert head.locator("g.cluster.mc-added").count() == 1

        # Scrolling the base pane moves the head pane, further: the inserted block sits above the same ops there.
        base.evaluate("e => { e.scrollTop = 600; }")
        page.wait_for_timeout(800)
        assert head.evaluate("e => e.scrollTop") > base.evaluate("e => e.scrollTop") > 0

        # A click on the head's hardswish rings it and the base's relu it replaced.
        head.locator("g.node.mc-changed", has_text="hardswish").click()
        settle(page)
        assert "relu_3" in base.locator("g.node.sel").text_content()
        assert head.locator("g.node.sel").count() == 1 and "hardswish" in head.locator("g.node.sel").text_content()
        page.screenshot(path=str(tmp_path / "compare.png"))

        # Filtering by kind: without "added", the inserted block's row goes.
        page.locator('[data-testid="stMain"] [data-testid="stMultiSelect"]') \
            .get_by_role("button", name="Remove added", exact=True).click()
        settle(page)
        assert [row[0] for row in _table(page)] == ["replaced", "weights"]
        assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()
