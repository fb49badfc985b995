"""The Drift page in a real browser on a stored run whose target carries an isolation block: the culprit sentence,
the two curves along depth with the gate, the ops above the gate, the trials; the opt-in form refuses a gate that
is not a number in one line. The Overview names the culprit, Downloads offers the repro folder as one zip."""
import io
import json
import os
import zipfile

import pytest

from browser import CHROMIUM, FLAGS, dashboard, settle

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")
TARGET = "ort-cpu"
HOSTILE = "<script>alert(1)</script>"


def _isolation_block(report: dict) -> dict:
    """A block as culprit search writes it, over the run's own captured ops: the third op alone gives non-finite
    values (the culprit), the fourth a local error above the gate."""
    ops = [n for n in report["capture"]["graph"]["nodes"] if n["kind"] == "compute"]
    points = {p["source_op"]: p["rel_l2"] for p in (report["targets"][TARGET].get("layer_drift") or {}).get("points")
              or []}
    rows = []
    for depth, n in enumerate(ops):
        local = {"rel_l2": 1e-6 * (depth + 1), "max_abs": 1e-5, "mse": 1e-10, "cosine": 0.9999999, "snr_db": 110.0,
                 "psnr_db": 120.0, "pearson": 0.9999999, "non_finite": False}
        failed = []
        if depth == 2:
            local = {k: None for k in local} | {"non_finite": True}
            failed = ["rel_l2", "cosine"]
        elif depth == 3:
            local |= {"rel_l2": 0.04, "cosine": 0.998}
            failed = ["rel_l2", "cosine"]
        rows.append({"source_op": n["id"], "op_type": n["op_type"],
                     "module_path": (n.get("module_path") or "") + (HOSTILE if depth == 2 else ""),
                     "depth": depth, "local": local, "failed_gates": failed, "above_gate": bool(failed),
                     "carried_rel_l2": points.get(n["id"]), "nodes": []})
    culprit = ops[2]["id"]
    trial = {"first": 0, "last": len(ops) - 1, "ops": len(ops), "rel_l2": None, "non_finite": True, "error": None,
             "seconds": 0.4}
    return {"evidence": "measured", "method": "each op of the captured program cut into its own island",
            "gates": {"rel_l2": 0.01, "cosine": 0.999}, "gates_text": "rel_l2 at most 0.01, cosine at least 0.999",
            "ops": rows, "isolated": len(rows), "above_gate": [r["source_op"] for r in rows if r["above_gate"]],
            "not_isolated": [], "error": None, "seconds": 0.8,
            "culprit": {"status": "found", "share_required": 0.9, "baseline": trial, "first": 2, "last": 2,
                        "ops": [culprit], "explained": 1.0, "runs": 2,
                        "trials": [trial, trial | {"first": 2, "last": 2, "ops": 1}], "seconds": 0.9,
                        "sentence": f"{TARGET}: the {ops[2]['op_type']} at {ops[2].get('module_path')} (1 op) "
                                    "accounts for all of the output drift; in isolation it gives non-finite values",
                        "local": rows[2]["local"],
                        "repro": {"folder": f"artifacts/{TARGET}/repro", "files": ["run_repro.py", "io.json"],
                                  "script": "run_repro.py", "no_script": None,
                                  "tracker": "onnxruntime: https://github.com/microsoft/onnxruntime/issues"}}}


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory):
    """A CLI run of a tiny model on ort-cpu, stored again with an isolation block and a repro folder."""
    import torch
    from tiny_models import conv_bn_relu

    from xc_core.cli import main
    from xc_core.store import RunStore
    folder = tmp_path_factory.mktemp("browser-isolation")
    home, out = folder / "xc-home", folder / "run"
    model, example = conv_bn_relu()
    path = folder / "tiny.pt2"
    torch.export.save(torch.export.export(model, example), str(path))
    old = os.environ.get("XC_HOME")
    os.environ["XC_HOME"] = str(home)
    try:
        assert main(["analyze", str(path), "--targets", TARGET, "--out", str(out), "--quiet"]) == 0
    finally:
        os.environ["XC_HOME"] = old
    report = json.load(open(out / "report.json"))
    block = _isolation_block(report)
    report["targets"][TARGET]["isolation"] = block
    repro = out / "artifacts" / TARGET / "repro"
    repro.mkdir(parents=True)
    (repro / "run_repro.py").write_text("print('reproduce')\n")
    (repro / "io.json").write_text("{}\n")
    key = report["run"]["key"]
    RunStore(str(home)).put(key, report, run_dir=str(out))
    return {"home": str(home), "key": key, "sentence": block["culprit"]["sentence"],
            "above": block["above_gate"]}


def _open(browser, url, page_name, key, heading):
    page = browser.new_context(accept_downloads=True).new_page()
    page.goto(url + f"{page_name}?run={key[:12]}", wait_until="commit")
    page.get_by_role("heading", name=heading).wait_for(timeout=300_000)
    settle(page)
    return page


def test_drift_page_shows_the_culprit_curves_ops_and_trials_and_refuses_a_bad_gate(stored_run):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        with dashboard({"XC_HOME": stored_run["home"]}) as url:
            page = _open(browser, url, "drift", stored_run["key"], "Numerical drift")
            body = page.locator("body").inner_text()
            assert "Per-op isolation and the culprit" in body
            assert stored_run["sentence"].split(HOSTILE)[0] in body        # the sentence, shown as text
            assert "share of the output drift: 100 % · found in 2 trial compiles" in body
            assert "the culprit alone: non-finite values" in body
            assert f"artifacts/{TARGET}/repro" in body
            assert "Gates: rel_l2 at most 0.01, cosine at least 0.999" in body
            # The figure: both curves, the evidence in the legend, the gate line, the non-finite op on top.
            figure = page.locator('[data-testid="stPlotlyChart"]').last
            figure.locator("svg.main-svg").first.wait_for(timeout=60_000)
            legend = " ".join(figure.locator(".legendtext").all_text_contents())
            assert "local: each op alone (measured)" in legend and "carried: the full run" in legend
            assert "non-finite (NaN or ±inf, above the gate)" in legend and "above the gate" in legend
            assert "gate 0.01" in " ".join(figure.locator(".annotation-text").all_text_contents())
            # The ops above the gate: a table of them (Streamlit's data grid draws its cells on a canvas).
            assert page.locator('[data-testid="stDataFrame"]').count() >= 2
            # The trials, one click away.
            page.get_by_text("Culprit search: 2 trial compiles").click()
            page.wait_for_timeout(500)
            # Nothing the model named ran as markup.
            assert page.locator("script:text('alert(1)')").count() == 0
            # The opt-in: a gate that is not a number is refused in one line, before anything compiles.
            page.get_by_text("Isolate ops and find the culprit").first.click()
            field = page.get_by_label("rel_l2 (at most)")
            field.fill("lots")
            field.press("Tab")
            page.get_by_role("button", name="Isolate ops and find the culprit").click()
            settle(page)
            error = page.locator('[data-testid="stAlert"]').filter(has_text="gate rel_l2")
            assert error.inner_text().strip() == "gate rel_l2: 'lots' is not a number — enter a bound, or 'off' to " \
                                                 "leave it out"
            assert page.locator('[data-testid="stException"]').count() == 0

            # The Overview names the culprit with its evidence; Downloads offers the repro folder as one zip.
            page = _open(browser, url, "", stored_run["key"], "Overview")
            body = page.locator("body").inner_text()
            assert "Culprits" in body and "(2 trial compiles)" in body
            assert page.locator('[data-testid="stException"]').count() == 0
            page = _open(browser, url, "downloads", stored_run["key"], "Downloads")
            button = page.get_by_role("button", name=f"{TARGET}: repro bundle (2 file(s))")
            with page.expect_download(timeout=120_000) as info:
                button.click()
            with zipfile.ZipFile(io.BytesIO(open(info.value.path(), "rb").read())) as z:
                assert sorted(z.namelist()) == [f"{TARGET}-repro/io.json", f"{TARGET}-repro/run_repro.py"]
            assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()
