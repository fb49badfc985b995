"""A .tflite uploaded in the dashboard, on a fresh server, by two sessions at once: one gets its LiteRT report
(Overview, then Fallbacks with XNNPACK's CUMSUM on the CPU), the other — a damaged flatbuffer — one line saying what
is wrong, and neither disturbs the other."""
import os

import pytest

from browser import CHROMIUM, FLAGS, dashboard, settle

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")


@pytest.fixture(scope="module")
def tflite_files(tmp_path_factory):
    pytest.importorskip("litert_torch")
    import litert_torch
    import torch

    from tiny_models import ConvMeanGeluCumsum
    folder = tmp_path_factory.mktemp("tflite-upload")
    torch.manual_seed(0)
    good = folder / "phone_model.tflite"
    litert_torch.convert(ConvMeanGeluCumsum().eval(), (torch.randn(1, 3, 16, 16),)).export(str(good))
    damaged = folder / "damaged.tflite"
    damaged.write_bytes(good.read_bytes()[:300])
    return good, damaged


def test_two_sessions_upload_tflite_models_at_once(tflite_files, tmp_path):
    from playwright.sync_api import sync_playwright
    good, damaged = tflite_files

    def upload(page, url, path):
        page.goto(url + "?targets=litert-xnnpack,litert-gpu", timeout=120_000)
        settle(page)
        page.locator('[data-testid="stSidebar"] [data-testid="stRadio"] label', has_text="Upload").click()
        model = page.locator('[data-testid="stSidebar"] [data-testid="stFileUploader"] input[type="file"]').first
        model.wait_for(state="attached", timeout=60_000)
        model.set_input_files([str(path)])

    with dashboard(env={"XC_HOME": str(tmp_path / "home")}) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        a = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        b = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        upload(a, url, good)
        upload(b, url, damaged)
        alert = b.locator('[data-testid="stMain"] [data-testid="stAlert"]', has_text="damaged.tflite")
        alert.first.wait_for(timeout=300_000)
        text = alert.first.inner_text()
        assert "not a readable TFLite model" in text and "\n" not in text.strip() and str(tmp_path) not in text
        a.locator('[data-testid="stCaptionContainer"]', has_text="phone_model.tflite").first.wait_for(timeout=600_000)
        settle(a)
        main = a.locator('[data-testid="stMain"]').inner_text()
        assert "litert-xnnpack" in main and "tflite-reference" in main
        a.locator('[data-testid="stSidebarNav"] a', has_text="Fallbacks").click()
        settle(a)
        a.get_by_text("CUMSUM").first.wait_for(timeout=60_000)
        for page in (a, b):
            assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()
