"""The Fleet page in headless Chromium: a batch made by `xc batch` shows as a coloured model × target grid, its
colouring and family filter change it, and a click on a cell opens that model's run on Overview."""
import os
import subprocess
import sys

import pytest

from browser import CHROMIUM, FLAGS, dashboard, settle
from test_fleet import _conv, _two_output_mlp

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")


def test_fleet_page_shows_the_grid_and_a_click_opens_the_run(tmp_path):
    from playwright.sync_api import sync_playwright
    home = tmp_path / "home"
    models = tmp_path / "models"
    models.mkdir()
    _two_output_mlp(str(models / "mlp.onnx"))
    _conv(str(models / "conv.onnx"))
    (tmp_path / "fleet.txt").write_text("models/mlp.onnx\nmodels/conv.onnx\n")
    r = subprocess.run([sys.executable, "-m", "xc_core", "batch", str(tmp_path / "fleet.txt"), "--targets",
                        "ort-cpu,ort-nnapi", "--out", str(tmp_path / "out"), "--quiet"],
                       env={**os.environ, "XC_HOME": str(home)}, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    with dashboard(env={"XC_HOME": str(home), "XC_DEFAULT_TARGETS": "ort-cpu"}) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}fleet", timeout=120_000)
        settle(page)
        page.get_by_role("heading", name="Fleet", exact=True).wait_for(timeout=60_000)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert "2 model(s) × 2 target(s): 4 cells, 4 ok" in page.inner_text("body")
        grid = page.locator('[data-testid="stDataFrame"]').first
        grid.wait_for(timeout=60_000)
        page.screenshot(path=str(tmp_path / "fleet.png"), full_page=True)
        # Colour by another figure: the page reruns with no exception.
        page.locator('[data-testid="stMain"] [data-testid="stSelectbox"]').filter(has_text="Colour by").click()
        page.get_by_role("option", name="worst drift").click()
        settle(page)
        assert page.locator('[data-testid="stException"]').count() == 0
        # A click on the first model's ort-nnapi cell (Glide's canvas grid: rows of 35 px under a 35 px header;
        # the index column, then one column per target) opens that model's run.
        box = grid.bounding_box()
        x, y = box["x"] + box["width"] - 20, box["y"] + 35 + 17
        page.mouse.move(x, y)               # as a hand does: Glide's canvas takes a click once the pointer is over it
        page.wait_for_timeout(500)
        page.mouse.click(x, y)
        page.get_by_role("heading", name="Overview", exact=True).wait_for(timeout=120_000)
        settle(page)
        assert page.locator('[data-testid="stException"]').count() == 0
        body = page.inner_text("body")
        assert "mlp.onnx" in body and "ort-nnapi" in body
        browser.close()
