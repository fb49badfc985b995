"""Models shaped like the ones users bring, analysed with every target and no flags: each target is ok, or its
error names the cause in the user's terms — never a traceback, never a bare source location."""
import os

import pytest

from conftest import ALL_TARGETS
from realistic_models import BUILDERS
from xc_core.api import analyze

# What cannot work, and the words that must say so (everything else must be ok). The ONNX → PyTorch route takes
# the classifier, the If and the LSTM to Core ML and Inductor (xc's converters, the branch specialised).
EXPECTED_ERRORS = {
    ("zipmap", "openvino-cpu"): "output_probability",                  # OpenVINO reads no sequence/map outputs
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = {}

    def get(name):
        if name not in out:
            path = BUILDERS[name](str(tmp_path_factory.mktemp(name) / f"{name}.onnx"))
            out[name] = analyze(path, list(ALL_TARGETS))
        return out[name]
    return get


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BUILDERS))
def test_every_target_is_ok_or_names_the_cause(reports, name):
    report = reports(name)
    assert report["reference"]["status"] == "ok", report["reference"]["error"]
    for tid, t in report["targets"].items():
        expected = EXPECTED_ERRORS.get((name, tid))
        if expected is None:
            assert t["status"] == "ok", (name, tid, t["error"])
            continue
        assert t["status"] == "error" and expected in t["error"], (name, tid, t["error"])
        assert "\n" not in t["error"] and "Traceback" not in t["error"]
        assert not t["error"].rstrip().endswith(".cpp:") and "Exception from src/" not in t["error"]


@pytest.mark.slow
def test_detector_runs_everywhere_with_no_flags(reports):
    report = reports("detector")
    assert report["source"]["inputs"][0]["shape"] == [1, 3, 224, 224]
    for tid in ("ort-cpu", "openvino-cpu", "ort-nnapi", "coreml-ane"):
        assert report["targets"][tid]["status"] == "ok"
    nnapi = report["targets"]["ort-nnapi"]["info"]
    assert nnapi["partitioning"]["accelerated_share_nodes"] > nnapi["partitioning_as_shipped"]["accelerated_share_nodes"]


@pytest.mark.slow
def test_a_sequence_of_maps_is_compared_in_key_order(reports):
    t = reports("zipmap")["targets"]["ort-cpu"]
    drift = t["drift"]["outputs"]["output_probability"]
    assert drift["rel_l2"] < 1e-6
    assert "sequence of 1 maps compared as an array [N, 3] in key order [0, 1, 2]" in \
        t["info"]["output_matching"]["converted"]["output_probability"]


@pytest.mark.slow
def test_tf_style_names_survive_every_target(reports):
    report = reports("tf-names")
    assert set(report["targets"]["openvino-cpu"]["drift"]["outputs"]) == {"Identity:0"}
    assert report["source"]["inputs"][0]["name"] == "input:0"


@pytest.mark.slow
def test_onnx_uploads_get_core_ml_and_inductor_with_the_conversion_measured_apart(reports):
    for name in ("detector", "text", "two-in-three-out", "lstm", "branch"):
        for tid in ("coreml-ane", "coreml-cpu", "inductor-cpu"):
            t = reports(name)["targets"][tid]
            conv = t["info"]["onnx_conversion"]
            assert "onnx2torch" in conv["route"] and conv["evidence"] == "measured"
            assert conv["conversion_drift"] and all(m["rel_l2"] < 1e-5 for m in conv["conversion_drift"].values())
            if name == "branch":    # the condition folded away; the op left is the If's branch, traced to it
                assert {s for n in t["graph"]["nodes"] for s in n.get("source_ops") or []} == {"pick"}, tid
                assert any("If 'pick'" in note and "branch only" in note for note in conv["preprocessing"]), conv
            else:                   # the compiled ops trace to ONNX nodes
                assert reports(name)["alignment"]["coverage"][tid]["ratio"] > 0.5, (name, tid)


@pytest.mark.slow
@pytest.mark.parametrize("sample", ["vision-mini", "tts-mini", "transformer-mini"])
def test_each_bundled_samples_onnx_converts_to_core_ml(sample_report, sample):
    _, out = sample_report(sample)
    onnx_path = os.path.join(out, "artifacts", "capture", "model.onnx")
    report = analyze(onnx_path, ["coreml-ane", "coreml-cpu"])
    for tid in ("coreml-ane", "coreml-cpu"):
        t = report["targets"][tid]
        assert t["status"] == "ok", (sample, tid, t["error"])
        drift = t["info"]["onnx_conversion"]["conversion_drift"]
        assert all(m["rel_l2"] < 1e-5 for m in drift.values()), drift
        assert report["alignment"]["coverage"][tid]["ratio"] >= 0.9
    # fp32 Core ML agrees with ONNX Runtime; fp16 drifts more — its drift is Core ML's, not the conversion's.
    cpu, ane = (report["targets"][t]["drift"]["worst"]["rel_l2"] for t in ("coreml-cpu", "coreml-ane"))
    assert cpu < 1e-4 and ane > cpu
