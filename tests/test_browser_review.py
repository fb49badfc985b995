"""The reviewer's dashboard in a real browser: History lists the CLI's runs after a restart, compares two, opens a
report.json uploaded from CI; a `?run=ID` link opens Downloads on that run, and every file listed there downloads
with the bytes the store holds."""
import json
import os
import shutil
import zipfile

import pytest

from browser import CHROMIUM, FLAGS, dashboard, settle

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")
TARGETS = "ort-cpu,ort-nnapi"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two CLI runs in one store (v1, v2), and a report.json made elsewhere (a CI job's store), to upload."""
    from tiny_models import review_pair
    from xc_core.cli import main
    folder = tmp_path_factory.mktemp("browser-review")
    home = folder / "xc-home"
    v1, v2 = review_pair(str(folder))
    ci_model = folder / "ci_model.pt2"
    shutil.copy(v2, ci_model)
    old = os.environ.get("XC_HOME")
    os.environ["XC_HOME"] = str(home)
    try:
        for name, model in (("v1", v1), ("v2", v2)):
            assert main(["analyze", model, "--targets", TARGETS, "--out", str(folder / name), "--quiet"]) == 0
        assert main(["analyze", str(ci_model), "--targets", TARGETS, "--out", str(folder / "ci"), "--quiet",
                     "--no-store"]) == 0
    finally:
        os.environ["XC_HOME"] = old
    keys = {n: json.load(open(folder / n / "report.json"))["run"]["key"] for n in ("v1", "v2")}
    return {"home": str(home), "keys": keys, "ci_report": str(folder / "ci" / "report.json")}


def _history(browser, url):
    """A new session on the History page, once it has listed the runs: (page, its text)."""
    page = browser.new_context().new_page()
    page.goto(url + "history", wait_until="commit")
    page.get_by_text("run(s) in").wait_for(timeout=300_000)
    settle(page)
    return page, page.locator("body").inner_text()


def test_history_lists_compares_and_opens_an_uploaded_report_after_a_restart(runs):
    from playwright.sync_api import sync_playwright
    env = {"XC_HOME": runs["home"]}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        with dashboard(env) as url:
            page, body = _history(browser, url)
            assert "2 run(s) in" in body
            assert "regression(s)" in body and "under the default gate rules" in body      # v1 → v2
            assert page.locator('[data-testid="stException"]').count() == 0
            page.get_by_text("Open a report.json").click()
            page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(runs["ci_report"])
            page.get_by_text("Imported as run").wait_for(timeout=60_000)
            page.get_by_role("button", name="Open it").click()
            page.get_by_role("heading", name="Overview").wait_for(timeout=60_000)
            settle(page)
            assert "ci_model.pt2" in page.locator("body").inner_text()
        with dashboard(env) as url:      # a restart: a new server, the same store
            page, body = _history(browser, url)
            assert "3 run(s) in" in body
            assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()


def test_a_run_link_opens_downloads_and_every_file_downloads(runs, tmp_path):
    from playwright.sync_api import sync_playwright

    from xc_core.store import RunStore
    key = runs["keys"]["v1"]
    stored = RunStore(runs["home"]).files(key)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        with dashboard({"XC_HOME": runs["home"]}) as url:
            page = browser.new_context(accept_downloads=True).new_page()
            page.goto(url + f"downloads?run={key[:12]}", wait_until="commit")
            page.get_by_role("heading", name="Downloads").wait_for(timeout=300_000)
            settle(page)
            assert "review_v1.pt2" in page.locator("body").inner_text()
            buttons = page.locator('[data-testid="stDownloadButton"] button:visible')
            labels = [b.locator('[data-testid="stMarkdownContainer"]').inner_text().strip() for b in buttons.all()]
            # Artifacts are labelled by file name under their target's heading (names repeat across targets: the
            # bytes say which file a download is); the Model Explorer export is one zip, built on the click.
            artifacts = [rel for rel in stored if rel != "report.json"]
            assert not any(rel.startswith("model_explorer/") for rel in stored)
            assert any(rel.startswith("artifacts/ort-nnapi/") for rel in artifacts)
            assert {os.path.basename(rel) for rel in artifacts} <= set(labels)
            assert "model_explorer.zip" in labels and not any(l.endswith(".json") and "model_explorer/" in l
                                                              for l in labels)
            got: list[tuple[str, int]] = []
            for i, label in enumerate(labels):
                page.wait_for_timeout(500)
                with page.expect_download(timeout=120_000) as info:
                    buttons.nth(i).click()
                path = tmp_path / f"{i}-{info.value.suggested_filename}"
                info.value.save_as(path)
                size = path.stat().st_size
                assert size > 0, label
                got.append((label, size))
                if label == "model_explorer.zip":
                    with zipfile.ZipFile(path) as z:
                        index = json.loads(z.read("model_explorer/index.json"))
                        inside = {os.path.basename(n) for n in z.namelist()}
                    assert "ort-nnapi" in index["graphs"] and set(index["graphs"].values()) <= inside
                if label == "HTML (one offline file)":
                    assert path.read_text().lstrip().lower().startswith("<!doctype html")
                if label == "Markdown (PR comment)":
                    assert path.read_text().startswith("### xc: review")
            # every stored artifact came down byte for byte (matched by name and size)
            wanted = sorted((os.path.basename(rel), os.path.getsize(stored[rel])) for rel in artifacts)
            missing = [w for w in wanted if w not in got]
            assert not missing, missing
            assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()
