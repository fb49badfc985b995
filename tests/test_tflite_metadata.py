"""Files as people ship them (issue 51): a .tflite with TFLite Support metadata — a TFLITE_METADATA buffer and a zip
of its labels appended after the flatbuffer, the metadata writer's layout — is recognised by its flatbuffer
identifier, its associated files and labels read into the report, CLI and Markdown, and analysed for real; a .tflite whose custom
op only XNNPACK provides gets a reference run with that delegate, and litert-xnnpack's drift against it is said to be
not informative."""
import json
import os
import sys

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")
sys.path.insert(0, os.path.dirname(__file__))

from tflite_builders import (  # noqa: E402
    classifier,
    model_metadata,
    tflite_bytes,
    transpose_conv_params,
    with_appended_zip,
)

LABELS = "".join(f"class_{k}\n" for k in range(4))


def _mediapipe_style(tmp_path, name="classifier_with_metadata.tflite"):
    meta = model_metadata("toy classifier", {"probability": [("labels.txt", "class names", 2)]},
                          model_files=[("readme.md", "how to use", 1)])
    path = tmp_path / name
    path.write_bytes(with_appended_zip(classifier(meta), {"labels.txt": LABELS, "vocab.bin": "\x00\x01"}))
    return path


def test_a_tflite_with_an_appended_zip_is_sniffed_as_tflite(tmp_path):
    from xc_core.limits import Limits
    from xc_core.sources import safe_zip, sniff
    path = _mediapipe_style(tmp_path)
    assert safe_zip.is_zip(str(path))                     # it is a zip too: the reason it was refused before
    assert sniff.sniff(str(path), Limits.from_env()) == sniff.TFLITE


def test_metadata_and_labels_are_read_without_extracting(tmp_path):
    from xc_core.sources import load_source
    path = _mediapipe_style(tmp_path)
    before = set(os.listdir(tmp_path))
    src = load_source(str(path))
    assert set(os.listdir(tmp_path)) == before            # read from the zip in memory, nothing written
    meta = src.metadata
    assert meta["name"] == "toy classifier" and meta["version"] == "v2" and meta["identifier"] == "M001"
    files = {f["name"]: f for f in meta["associated_files"]}
    labels = files["labels.txt"]
    assert labels["type"] == "TENSOR_AXIS_LABELS" and labels["owner"] == "output probability"
    assert labels["in_zip"] and labels["lines"] == 4 and labels["first_lines"] == ["class_0", "class_1", "class_2",
                                                                                  "class_3"]
    assert files["readme.md"]["owner"] == "model" and not files["readme.md"]["in_zip"]   # declared, not shipped
    assert files["vocab.bin"]["in_zip"] and "lines" not in files["vocab.bin"]             # shipped, not declared
    assert meta["appended_zip"] == {"files": 2}
    assert any("labels.txt" in n and "4 lines" in n for n in src.notes)


def test_a_zip_without_metadata_buffer_and_a_damaged_metadata_buffer(tmp_path):
    from xc_core.sources import load_source
    plain = tmp_path / "zip_only.tflite"
    plain.write_bytes(with_appended_zip(classifier(), {"labels.txt": "a\nb\n"}))
    meta = load_source(str(plain)).metadata
    assert [f["name"] for f in meta["associated_files"]] == ["labels.txt"] and meta["associated_files"][0]["lines"] == 2
    damaged = tmp_path / "damaged_meta.tflite"
    damaged.write_bytes(classifier(metadata=b"\xff\xff\xff\x7f" + b"M001" + bytes(8)))
    meta = load_source(str(damaged)).metadata      # the model still loads; the metadata's problem is said
    assert "metadata_error" in meta
    assert load_source(str(tmp_path / "zip_only.tflite")).kind == "tflite"
    assert load_source(str(_plain(tmp_path))).metadata == {}


def test_a_hostile_appended_zip_is_refused_by_safe_zip_and_the_model_still_loads(tmp_path):
    import io
    import zipfile

    from xc_core.sources import load_source
    from xc_core.sources.facts import source_fact_lines
    buf = io.BytesIO(classifier())
    buf.seek(0, io.SEEK_END)
    with zipfile.ZipFile(buf, "a") as z:
        z.writestr("../../escape.txt", "x\n")                # a path out of any folder it would be unpacked into
    path = tmp_path / "hostile_zip.tflite"
    path.write_bytes(buf.getvalue())
    src = load_source(str(path))
    assert src.kind == "tflite" and src.metadata["appended_zip"]["files"] == 0
    assert "escape" in src.metadata["appended_zip"]["error"] or "path" in src.metadata["appended_zip"]["error"]
    lines = source_fact_lines({"source": {"metadata": src.metadata}})
    assert any("was not read" in line for line in lines) and not (tmp_path.parent / "escape.txt").exists()


def _plain(tmp_path):
    path = tmp_path / "plain.tflite"
    path.write_bytes(classifier())
    return path


@pytest.mark.slow
def test_mediapipe_style_file_is_analysed_and_its_labels_reach_cli_and_markdown(tmp_path):
    from xc_core.cli import main
    path = _mediapipe_style(tmp_path)
    out, md = tmp_path / "out", tmp_path / "report.md"
    rc = main(["analyze", str(path), "--targets", "litert-xnnpack", "--out", str(out), "--no-store", "--quiet",
               "--md", str(md)])
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    assert report["reference"]["id"] == "tflite-reference" and report["reference"]["status"] == "ok"
    assert "ran_with" not in report["reference"]                     # the built-in kernels run it
    t = report["targets"]["litert-xnnpack"]
    assert t["status"] == "ok", t["error"]
    assert t["drift"]["informative"] and t["drift"]["worst"]["rel_l2"] < 1e-6
    meta = report["source"]["metadata"]
    labels = next(f for f in meta["associated_files"] if f["name"] == "labels.txt")
    assert meta["evidence"] == "reported" and labels["first_lines"][0] == "class_0"
    text = md.read_text()
    assert "TFLite metadata of 'toy classifier'" in text and "labels.txt" in text and "4 lines" in text
    from xc_core.cli import inputs_table
    assert "associated file labels.txt (tensor axis labels, output probability): 4 lines" in inputs_table(report)
    from test_pages import _page_with_report
    at = _page_with_report("overview", report)                     # the dashboard says it under Inputs
    assert any("labels.txt" in c.value and "4 lines" in c.value for c in at.caption)
    from xc_core.report.schema import validate_report
    validate_report(report)


def test_an_old_report_without_metadata_gives_no_source_lines():
    from xc_core.sources.facts import source_fact_lines
    assert source_fact_lines({"source": {"kind": "tflite", "name": "m.tflite", "notes": []}}) == []


def _delegate_only(tmp_path):
    """MediaPipe's segmentation pattern: Convolution2DTransposeBias, a custom op XNNPACK's delegate implements and
    LiteRT's built-in resolver does not."""
    path = tmp_path / "selfie_like.tflite"
    path.write_bytes(tflite_bytes(
        ops=[("Convolution2DTransposeBias", [0, 1, 2], [3], transpose_conv_params()), ("LOGISTIC", [3], [4], None)],
        tensors=[("image", [1, 2, 2, 1], None), ("weights", [1, 2, 2, 1], np.full((1, 2, 2, 1), 0.5)),
                 ("bias", [1], [0.25]), ("upsampled", [1, 4, 4, 1], None), ("mask", [1, 4, 4, 1], None)],
        inputs=[0], outputs=[4]))
    return path


@pytest.mark.slow
def test_the_decision_retries_only_an_unresolved_custom_op(tmp_path):
    from xc_core.targets.litert.common import interpreter
    from xc_core.targets.litert.reference import needs_delegate, reference_interpreter
    path = str(_delegate_only(tmp_path))
    with pytest.raises(RuntimeError) as e:
        interpreter(path, delegates=False)               # the real failure, from LiteRT's own interpreter
    assert needs_delegate(e.value)
    it, why = reference_interpreter(path)
    assert "Convolution2DTransposeBias" in why
    it.set_tensor(it.get_input_details()[0]["index"], np.ones((1, 2, 2, 1), np.float32))
    it.invoke()
    # VALID transpose conv, stride 2, 2x2 kernel of 0.5: every output pixel is 0.5 + bias 0.25, then a sigmoid.
    np.testing.assert_allclose(it.get_tensor(it.get_output_details()[0]["index"]), 1 / (1 + np.exp(-0.75)),
                               rtol=1e-6)
    assert reference_interpreter(str(_plain(tmp_path)))[1] is None
    assert not needs_delegate(RuntimeError("tensor 3 has the wrong shape"))
    nobody = tmp_path / "nobody_has_it.tflite"      # a custom op the delegate lacks too: one line naming both
    nobody.write_bytes(tflite_bytes(ops=[("AppOnlyOp", [0], [1], b"")],
                                    tensors=[("x", [1, 4], None), ("y", [1, 4], None)], inputs=[0], outputs=[1]))
    with pytest.raises(RuntimeError) as e:
        reference_interpreter(str(nobody))
    assert "AppOnlyOp" in str(e.value) and "XNNPACK" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
def test_a_delegate_only_custom_op_runs_the_reference_on_xnnpack_and_says_so(tmp_path):
    from xc_core.api import analyze
    from xc_core.review.markdown import report_markdown
    from xc_core.views.rows import drift_flags
    report = analyze(str(_delegate_only(tmp_path)), ["litert-xnnpack", "litert-gpu"], out_dir=str(tmp_path / "out"))
    ref = report["reference"]
    assert ref["status"] == "ok", ref["error"]
    assert ref["ran_with"]["delegate"] == "XNNPACK" and "unresolved custom op" in ref["ran_with"]["why"]
    x = report["targets"]["litert-xnnpack"]
    assert x["status"] == "ok", x["error"]
    assert x["drift"]["informative"] is False and "vs itself" in x["drift"]["worst"]["not_informative"]
    gpu = report["targets"]["litert-gpu"]
    if gpu["status"] == "ok":                                     # another runtime: its drift still tells
        assert gpu["drift"].get("informative", True)
    assert any("litert-xnnpack" in f and "vs itself" in f for f in drift_flags(report))
    assert "vs itself" in report_markdown(report)
    from xc_core.report.schema import validate_report
    validate_report(report)
