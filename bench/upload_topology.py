"""From upload to a drawn Topology, in headless Chromium, on a flat transformer ONNX of --nodes nodes (no module
paths: the shape of graph Netron is measured on) — beside Netron's figure for the same size.

    python bench/upload_topology.py [--nodes 20000] [--targets ort-cpu,openvino-cpu,ort-nnapi] [--repeat 3]
                                    [--full]

Each repeat is a fresh dashboard server with an empty run store and a new browser session: the Topology page is
opened, the file is given to the sidebar's uploader, and the clock runs from the file handed to the browser to the
first graph box on screen (the captured graph, drawn while the targets compile; Netron's figure is also from file
accepted to graph drawn). With --full it keeps going until the report is ready and its compiled panes are drawn
(OpenVINO's own compile_model takes minutes at 20,000 nodes). Median and every run.

Netron, measured on the same kind of flat transformer ONNX on this kind of machine: 1.9 s at 1,280 nodes, 5.9 s at
5,120 and 20.7 s at 20,000 (it draws every node).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
NETRON_S = {1280: 1.9, 5120: 5.9, 20000: 20.7}
NODES_PER_LAYER = 19      # bench.models.flat_transformer_onnx


def one_run(browser, model: str, targets: str, full: bool, timeout_s: float) -> dict:
    from browser import dashboard
    home = tempfile.mkdtemp(prefix="bench-xc-upload-")
    out = {}
    try:
        with dashboard({"XC_HOME": home}) as url:
            page = browser.new_context(viewport={"width": 1500, "height": 1000}).new_page()
            for _ in range(120):        # the server may still be starting
                try:
                    page.goto(url + f"topology?targets={targets}", timeout=60_000)
                    break
                except Exception:  # noqa: BLE001 — connection refused while Streamlit starts
                    time.sleep(0.5)
            page.get_by_text("Upload", exact=True).click()
            uploader = page.locator('[data-testid="stFileUploaderDropzoneInput"]').first
            uploader.wait_for(state="attached", timeout=60_000)
            t0 = time.perf_counter()
            uploader.set_input_files(model)
            page.locator(".xc-canvas svg g.node").first.wait_for(timeout=timeout_s * 1000)
            page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            out["drawn_s"] = time.perf_counter() - t0
            out["preview"] = page.get_by_text("Captured graph, while the targets compile").count() > 0
            if full:
                page.get_by_text("Captured graph, while the targets compile").wait_for(state="detached",
                                                                                        timeout=timeout_s * 1000)
                page.locator(".xc-canvas svg g.node").first.wait_for(timeout=timeout_s * 1000)
                out["report_s"] = time.perf_counter() - t0
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=20000)
    ap.add_argument("--targets", default="ort-cpu,openvino-cpu,ort-nnapi")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="also time until the compiled panes are drawn")
    ap.add_argument("--timeout", type=float, default=3600)
    args = ap.parse_args()
    from browser import CHROMIUM, FLAGS
    from playwright.sync_api import sync_playwright

    from bench.models import flat_transformer_onnx
    tmp = tempfile.mkdtemp(prefix="bench-xc-flat-")
    layers = max(1, round(args.nodes / NODES_PER_LAYER))
    model = flat_transformer_onnx(os.path.join(tmp, f"flat_{layers * NODES_PER_LAYER}.onnx"), layers)
    size_mb = os.path.getsize(model) / 2**20
    print(f"flat transformer ONNX: {layers * NODES_PER_LAYER} nodes ({layers} layers), {size_mb:.1f} MB · "
          f"targets {args.targets}")
    runs = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            for k in range(args.repeat):
                r = one_run(browser, model, args.targets, args.full, args.timeout)
                runs.append(r)
                print(f"  run {k + 1}: graph drawn {r['drawn_s']:.2f} s"
                      + ("" if r["preview"] else " (the report was already there)")
                      + (f" · report drawn {r['report_s']:.1f} s" if "report_s" in r else ""), flush=True)
            browser.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = statistics.median(r["drawn_s"] for r in runs)
    netron = NETRON_S.get(layers * NODES_PER_LAYER) or NETRON_S.get(args.nodes)
    print(f"upload → Topology drawn: median {med:.2f} s over {len(runs)} runs"
          + (f" · Netron {netron} s at this size: ×{med / netron:.2f}" if netron else ""))
    if args.full:
        print(f"upload → compiled panes drawn: median {statistics.median(r['report_s'] for r in runs):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
