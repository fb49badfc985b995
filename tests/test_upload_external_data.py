"""An ONNX model with external data — what torch.onnx.export(..., dynamo=True, external_data=True) writes:
model.onnx + model.onnx.data — uploaded in the dashboard as several files or as a zip of its folder, with the same
rules as the CLI (data only from files beside the model, sizes bounded) and one line for every refusal."""
import hashlib
import os
import zipfile

import pytest

from browser import CHROMIUM, FLAGS, dashboard, settle


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny model as torch's own exporter writes it: m.onnx and its weights in m.onnx.data."""
    import torch
    folder = tmp_path_factory.mktemp("exported")

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    torch.manual_seed(0)
    torch.onnx.export(Tiny().eval(), (torch.randn(2, 64),), str(folder / "m.onnx"), dynamo=True, external_data=True)
    assert (folder / "m.onnx.data").is_file(), sorted(os.listdir(folder))     # the exporter split the weights off
    return folder


def _named(folder, *names):
    return [(n, (folder / n).read_bytes()) for n in names]


# ------------------------------------------------------------------------------ the files the uploader takes
def test_the_onnx_file_is_the_model_and_the_others_its_data(exported):
    from xc_core.service import take_upload
    up = take_upload(_named(exported, "m.onnx.data", "m.onnx"))
    assert up.model_file == "m.onnx"
    assert sorted(up.files) == ["m.onnx", "m.onnx.data"]


def test_every_name_is_reduced_to_a_safe_base_name():
    from xc_core.service import take_upload
    up = take_upload([("../../etc/m.onnx", b"model"), ("C:\\fakepath\\m.onnx.data", b"w"), (".hidden.data", b"h"),
                      ("we ights$.data", b"x")])
    assert sorted(up.files) == ["hidden.data", "m.onnx", "m.onnx.data", "we_ights_.data"]
    assert up.model_file == "m.onnx"


@pytest.mark.parametrize("names,words", [
    (["a.onnx", "b.onnx", "a.onnx.data"], ["2 model files", "a.onnx, b.onnx", "one model"]),
    (["m.onnx.data", "w.bin"], ["none of the 2 uploaded files", "m.onnx.data, w.bin", ".onnx"]),
    (["m.pt2", "m.onnx.data"], ["m.pt2 came with 1 other file", "only an ONNX model", "upload m.pt2 alone"]),
])
def test_the_model_must_be_exactly_one_onnx_file(names, words):
    from xc_core.errors import XcInputError
    from xc_core.service import take_upload
    with pytest.raises(XcInputError) as e:
        take_upload([(n, b"x" + n.encode()) for n in names])
    line = e.value.for_dashboard()
    assert "\n" not in line and all(w in line for w in words), line


def test_a_data_file_alone_asks_for_its_model():
    from xc_core.errors import XcInputError
    from xc_core.service import take_upload
    with pytest.raises(XcInputError, match=r"m.onnx.data is an ONNX model's external data.*add the model"):
        take_upload([("m.onnx.data", b"weights")])


def test_two_files_that_reduce_to_one_name_are_refused():
    from xc_core.errors import XcInputError
    from xc_core.service import take_upload
    with pytest.raises(XcInputError, match="both named a_b.data"):
        take_upload([("m.onnx", b"m"), ("a b.data", b"1"), ("a_b.data", b"2")])


def test_the_files_together_are_bounded_like_one_model_file(monkeypatch):
    from xc_core.errors import XcInputError
    from xc_core.service import take_upload
    monkeypatch.setenv("XC_MAX_FILE_MB", "0.01")      # 10 KiB: each file fits, both together do not
    with pytest.raises(XcInputError) as e:
        take_upload([("m.onnx", b"m" * 6000), ("m.onnx.data", b"w" * 6000)])
    line = e.value.for_dashboard()
    assert "the 2 uploaded files total" in line and "XC_MAX_FILE_MB" in line, line
    assert take_upload([("m.onnx", b"m" * 6000)]).model_file == "m.onnx"


def test_the_run_key_covers_every_files_content():
    from xc_core.service import take_upload
    one = take_upload([("m.onnx", b"model")])
    assert one.digest == hashlib.sha256(b"model").hexdigest()      # a single file: its content, as before
    base = take_upload([("m.onnx", b"model"), ("m.onnx.data", b"weights")]).digest
    assert take_upload([("m.onnx.data", b"weights"), ("m.onnx", b"model")]).digest == base     # order: no matter
    assert take_upload([("m.onnx", b"model"), ("m.onnx.data", b"weightz")]).digest != base     # other weights
    assert take_upload([("m.onnx", b"model"), ("n.onnx.data", b"weights")]).digest != base     # other data name


# ------------------------------------------------------------------------------ the analysis of an upload
def _analyse(files: dict, model_file: str):
    from xc_core.service import AnalysisService
    svc = AnalysisService()
    key = hashlib.sha256(repr(sorted((n, hashlib.sha256(d).hexdigest()) for n, d in files.items())).encode())
    a = svc.submit(key.hexdigest()[:32], None, files, model_file=model_file, targets=["ort-cpu"])
    assert a.finished.wait(600)
    return a


def test_the_model_and_its_data_analyse(exported):
    from xc_core.service import DONE, take_upload
    up = take_upload(_named(exported, "m.onnx", "m.onnx.data"))
    a = _analyse(up.files, up.model_file)
    assert a.state == DONE, a.error
    assert a.report["source"]["name"] == "m.onnx" and a.report["targets"]["ort-cpu"]["status"] == "ok"


def test_a_missing_data_file_is_named_in_one_line(exported):
    from xc_core.service import REFUSED, take_upload
    from xc_core.paths import home
    up = take_upload(_named(exported, "m.onnx"))
    a = _analyse(up.files, up.model_file)
    assert a.state == REFUSED
    assert "'m.onnx.data'" in a.error and "add it to the upload" in a.error, a.error
    assert "\n" not in a.error and home() not in a.error and "/" not in a.error.replace("m.onnx", "")


# ------------------------------------------------------------------------------ a zip of the model's folder
def _zip(path, entries):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries:
            z.writestr(name, data)
    return str(path)


def test_a_zip_of_the_folder_is_a_model_for_the_cli_too(exported, tmp_path):
    from xc_core.api import analyze
    z = _zip(tmp_path / "folder.zip", [("model/m.onnx", (exported / "m.onnx").read_bytes()),
                                        ("model/m.onnx.data", (exported / "m.onnx.data").read_bytes())])
    report = analyze(z, ["ort-cpu"], out_dir=str(tmp_path / "out"))
    assert report["source"]["name"] == "folder.zip" and report["source"]["kind"] == "onnx"
    assert report["source"]["sha256"] == hashlib.sha256(open(z, "rb").read()).hexdigest()
    assert report["targets"]["ort-cpu"]["status"] == "ok"


@pytest.mark.parametrize("entries,words", [
    ([("m.onnx", "model")], ["folder.zip", "'m.onnx.data'", "not beside it in the zip"]),
    ([("a/m.onnx", "model"), ("b/m.onnx", "model"), ("a/m.onnx.data", "data")], ["2 ONNX models", "a/m.onnx"]),
    ([("m/m.onnx", "model"), ("m.onnx.data", "data")], ["not beside it in the zip"]),
])
def test_a_zip_without_the_data_beside_the_model_is_refused(exported, tmp_path, entries, words):
    from xc_core.errors import XcInputError
    from xc_core.sources import load_source
    files = {"model": (exported / "m.onnx").read_bytes(), "data": (exported / "m.onnx.data").read_bytes()}
    z = _zip(tmp_path / "folder.zip", [(n, files[what]) for n, what in entries])
    with pytest.raises(XcInputError) as e:
        load_source(z)
    line = str(e.value)
    assert "\n" not in line and all(w in line for w in words), line
    assert str(tmp_path) not in line and "xc-onnx-zip" not in line


def test_a_zipped_models_data_may_not_leave_its_folder(exported, tmp_path):
    """The model names '../m.onnx.data' (a file that is in the zip, beside the model's folder): refused like a data
    path out of the model's folder on disk."""
    import onnx
    from xc_core.errors import XcInputError
    from xc_core.sources import load_source
    model = onnx.load(str(exported / "m.onnx"), load_external_data=False)
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../m.onnx.data"
    z = _zip(tmp_path / "folder.zip", [("m/m.onnx", model.SerializeToString()),
                                        ("m.onnx.data", (exported / "m.onnx.data").read_bytes())])
    with pytest.raises(XcInputError, match="outside the model's folder"):
        load_source(z)


# ------------------------------------------------------------------------------ in the dashboard
@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")
def test_an_onnx_with_external_data_uploads_in_the_dashboard(exported, tmp_path):
    from playwright.sync_api import sync_playwright

    def upload(page, url, paths):
        page.goto(url + "?targets=ort-cpu", timeout=120_000)
        settle(page)
        page.locator('[data-testid="stSidebar"] [data-testid="stRadio"] label', has_text="Upload").click()
        model = page.locator('[data-testid="stSidebar"] [data-testid="stFileUploader"] input[type="file"]').first
        model.wait_for(state="attached", timeout=60_000)
        model.set_input_files([str(p) for p in paths])

    with dashboard(env={"XC_HOME": str(tmp_path / "home")}) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        upload(page, url, [exported / "m.onnx", exported / "m.onnx.data"])
        # The Overview of the uploaded model: its name in the header, ort-cpu compiled it.
        page.locator('[data-testid="stCaptionContainer"]', has_text="m.onnx").first.wait_for(timeout=600_000)
        page.get_by_role("heading", name="Overview", exact=True).wait_for(timeout=60_000)
        settle(page)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert "ort-cpu" in page.locator('[data-testid="stMain"]').inner_text()
        assert page.locator('[data-testid="stMain"] [data-testid="stAlert"]').count() == 0

        # The model alone: one line naming the data file it needs.
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        upload(page, url, [exported / "m.onnx"])
        alert = page.locator('[data-testid="stMain"] [data-testid="stAlert"]', has_text="m.onnx.data")
        alert.first.wait_for(timeout=300_000)
        text = alert.first.inner_text()
        assert "add it to the upload" in text and str(tmp_path) not in text, text
        assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()
