"""Issue 57's done-when: Model Explorer with xc's extension shows the fallback overlay of a target for a model in a
browser. `xc explorer MODEL` serves Model Explorer on loopback with the model opened through xc's adapter; in
headless Chromium the 'xc overlays' provider runs for ort-nnapi with the fallback overlay, and the side panel
names the overlay with its evidence and shows, on the HardSigmoid node NNAPI cannot take, the reason the report
gives (the Fallbacks page's words). And a run's sync mapping, uploaded as the user is told to, makes a click on a
captured node select the target's node that computes it in the split pane."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from browser import CHROMIUM, FLAGS, free_port

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")
pytest.importorskip("model_explorer")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Model Explorer draws its graph with WebGL: SwiftShader renders it without a GPU.
WEBGL = ["--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--disable-sync", "--no-first-run"]


def _wait_for_url(proc, log_path: str, timeout_s: float = 180) -> str:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        found = re.search(r"Starting Model Explorer server at:\s*(\S+)", text)
        if found:
            return found.group(1)
        if proc.poll() is not None:
            pytest.fail(f"xc explorer ended with {proc.returncode}:\n{text[-3000:]}")
        time.sleep(0.5)
    pytest.fail(f"xc explorer printed no URL in {timeout_s:.0f} s")


def test_model_explorer_shows_a_targets_fallback_overlay(tmp_path):
    from playwright.sync_api import sync_playwright
    from test_explorer_extension import tiny_onnx

    from xc_core import explorer
    from xc_core.views.fallbacks import fallback_rows
    model = tiny_onnx(str(tmp_path / "tiny.onnx"))
    port = free_port()
    log_path = str(tmp_path / "explorer.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "xc_core", "explorer", model, "--port", str(port), "--no-open"],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    passed = False
    try:
        url = _wait_for_url(proc, log_path)
        assert url.startswith(f"http://127.0.0.1:{port}/")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS + WEBGL)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url)
            # The model came in through xc's adapter: the graph is xc's captured graph (its info panel says so).
            page.get_by_text("Add per-node data").click(timeout=180_000)
            page.locator(".cdk-overlay-container").get_by_text("xc overlays").click()
            dialog = page.locator("mat-dialog-container")
            dialog.locator("select").nth(1).wait_for(timeout=60_000)
            dialog.locator("select").nth(0).select_option("ort-nnapi")
            dialog.locator("select").nth(1).select_option("fallback")
            dialog.get_by_role("button", name="Run").click()
            # The analysis of ort-nnapi runs now (the model was only captured so far): a few seconds.
            title = page.get_by_text(re.compile(r"^\s*ort-nnapi fallback \(predicted-runtime\)\s*$")).first
            title.wait_for(timeout=300_000)
            page.wait_for_timeout(1000)
            page.screenshot(path=str(tmp_path / "explorer-fallback.png"))

            # The reason shown is the report's, as the Fallbacks page lists it (the run is in the store now).
            report = explorer.report_for(model, "ort-nnapi")
            (row,) = fallback_rows(report, "ort-nnapi")
            assert row["op_type"] == "HardSigmoid" and row["reason"] != "—"
            cells = page.locator("tr").filter(has_text="HardSigmoid").filter(has_text=row["reason"])
            assert cells.count() >= 1, page.inner_text("body")[-1500:]
            assert page.locator("tr").filter(has_text="MatMul").filter(has_text="on nnapi").count() >= 1
            browser.close()
        passed = True
    finally:
        proc.send_signal(signal.SIGTERM)        # xc explorer stops as on Ctrl-C
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("xc explorer did not stop on SIGTERM")
        if not passed:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                print(f.read()[-4000:])


def test_a_runs_sync_mapping_selects_the_targets_node_in_the_split_pane(tmp_path):
    """`xc explorer RUN` opens on the captured graph; with ort-nnapi in the split pane and the mapping file it
    printed uploaded (Sync > Upload mapping from computer), selecting the captured HardSigmoid selects the node of
    ort-nnapi that computes it: the right pane's side panel then shows that node, with its fallback reason."""
    from playwright.sync_api import sync_playwright
    from test_explorer_extension import tiny_onnx

    from xc_core.api import analyze
    run_dir = str(tmp_path / "run")
    report = analyze(tiny_onnx(str(tmp_path / "tiny.onnx")), ["ort-cpu", "ort-nnapi"], out_dir=run_dir)
    (fell,) = [n for n in report["targets"]["ort-nnapi"]["graph"]["nodes"] if n["op_type"] == "HardSigmoid"]
    assert fell["fallback"] and fell["fallback_reason"]
    port = free_port()
    log_path = str(tmp_path / "explorer.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "xc_core", "explorer", run_dir, "--port", str(port),
                                 "--no-open"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    passed = False
    try:
        url = _wait_for_url(proc, log_path)
        with open(log_path, encoding="utf-8") as f:
            (mapping,) = re.findall(r"sync navigation captured \| ort-nnapi: .*> (\S+\.sync\.json)", f.read())
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS + WEBGL)
            page = browser.new_page(viewport={"width": 1600, "height": 950})
            page.goto(url)
            # Opened on the captured graph; ort-nnapi from the graph selector into the split pane.
            page.get_by_text("Add per-node data").wait_for(timeout=180_000)
            page.locator("text=/^\\s*captured\\s*$/").first.wait_for(timeout=60_000)
            page.get_by_text(re.compile(r"^\s*\d+ nodes\s*$")).first.click()
            page.locator('.graph-item-container[data-id="ort-nnapi"] .action-button').click()
            page.get_by_text("Sync", exact=True).click()
            dropdown = page.locator(".model-explorer-sync-navigation-dropdown")
            dropdown.get_by_text("Upload mapping from computer").click()
            dropdown.locator("input[type=file]").set_input_files(mapping)
            page.wait_for_timeout(1000)
            page.keyboard.press("Escape")
            assert page.get_by_text("NODE INFO").count() == 0
            # A search result locates the captured HardSigmoid (centred in the left pane); a click on it selects it as
            # a user does — sync navigation follows clicks on the graph, not the search's own selection.
            page.locator("input[placeholder*='Search nodes']").first.fill("HardSigmoid")
            page.get_by_text(re.compile(r"^\s*HardSigmoid\s*$")).first.click()
            page.keyboard.press("Escape")
            page.wait_for_timeout(1000)
            box = page.locator("canvas").first.bounding_box()
            page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.get_by_text("NODE INFO").nth(1).wait_for(timeout=30_000)      # both panes show a node now
            page.wait_for_timeout(500)
            page.screenshot(path=str(tmp_path / "explorer-sync.png"))
            body = page.inner_text("body")
            # The right pane's node is ort-nnapi's (the captured node has no backend): its reason is shown.
            assert fell["fallback_reason"][:60] in body, body[-2000:]
            browser.close()
        passed = True
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if not passed:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                print(f.read()[-4000:])
