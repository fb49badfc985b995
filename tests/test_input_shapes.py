"""Inputs that fit: symbolic dims picked by name and role and probed on the reference; user dims, values, ranges
and .npz arrays checked against the model in its own words."""
import numpy as np
import pytest

from realistic_models import branch_onnx, detector_onnx, text_onnx, two_in_three_out_onnx
from xc_core.api import analyze
from xc_core.errors import XcInputError
from xc_core.inputs.shapes import resolve_inputs
from xc_core.sources import load_source
from xc_core.sources.spec import InputSpec


def test_a_detector_needing_multiples_of_64_is_probed_to_a_size_that_runs(tmp_path):
    path = detector_onnx(str(tmp_path / "det64.onnx"), stages=6)
    report = analyze(path, ["ort-cpu", "ort-nnapi"])
    (spec,) = report["source"]["inputs"]
    assert spec["shape"] == [1, 3, 256, 256]
    res = report["inputs"]["resolution"]
    assert res["picked_by"] == "probe"
    first, second = res["probes"][:2]
    assert first["dims"] == "batch=1, height=width=224" and not first["ok"]
    assert "Concat node" in first["error"]                  # what failed, in the runtime's words
    assert second["ok"] and "height=width=256" in second["dims"]
    assert "height=width=256 (image)" in spec["note"]
    assert report["reference"]["status"] == "ok" and report["targets"]["ort-cpu"]["status"] == "ok"


def test_mobile_ep_share_with_resolved_and_with_shipped_dims(tmp_path):
    path = detector_onnx(str(tmp_path / "det.onnx"))
    report = analyze(path, ["ort-nnapi"])
    info = report["targets"]["ort-nnapi"]["info"]
    resolved, shipped = info["partitioning"], info["partitioning_as_shipped"]
    assert resolved["accelerated_share_nodes"] > 0.9 > 0.1 > shipped["accelerated_share_nodes"]
    assert shipped["nodes_unsupported_due_to_dynamic_input"] > resolved["nodes_unsupported_due_to_dynamic_input"]
    assert "images=1x3x224x224" in info["checked_graph"]
    # Every boundary is sized, in both figures: the cliff counts all of them.
    for b in (info["boundaries"], shipped["boundaries"]):
        assert b["symbolic_count"] == 0 and all(i["bytes"] is not None for i in b["items"])
        assert b["latency_cliff"]["assumptions"]["unsized_boundaries"] == 0


def test_token_ids_are_drawn_from_the_embedding_and_sequence_gets_its_default(tmp_path):
    src = load_source(text_onnx(str(tmp_path / "text.onnx")))
    (spec,), _ = resolve_inputs(src.inputs)
    assert (spec.low, spec.high) == (0, 1000) and spec.shape == [1, 16]
    assert "sequence=16 (sequence)" in spec.note and "[0, 1000)" in spec.note


def test_a_scalar_that_picks_a_branch_is_flagged_and_can_be_given(tmp_path):
    path = branch_onnx(str(tmp_path / "branch.onnx"))
    drawn = analyze(path, ["ort-cpu"])
    rate = next(i for i in drawn["source"]["inputs"] if i["name"] == "rate")
    assert "picks a branch of If 'pick'" in rate["note"]
    given = analyze(path, ["ort-cpu"], values={"rate": 16000})
    rate = next(i for i in given["source"]["inputs"] if i["name"] == "rate")
    assert rate["value"] == 16000 and "picks a branch" not in rate["note"]
    assert given["inputs"]["resolution"]["inputs"]["rate"]["values_from"] == "value 16000"


def test_named_dims_and_ranges_from_the_user(tmp_path):
    src = load_source(text_onnx(str(tmp_path / "text.onnx")))
    (spec,), record = resolve_inputs(src.inputs, dims={"sequence": 40}, ranges={"input_ids": (5, 9)})
    assert spec.shape == [1, 40] and (spec.low, spec.high) == (5, 9)
    with pytest.raises(XcInputError, match=r"--dim names no symbolic dim of this model: seq; its dims are batch, "
                                           r"sequence \(input_ids \[batch, sequence\] int64\)"):
        resolve_inputs(src.inputs, dims={"seq": 40})


def _specs():
    return [InputSpec("images", [1, 3, 16, 16], "float32", dim_names=("batch", None, "height", "width")),
            InputSpec("mask", [1, 16], "int64", dim_names=("batch", "height"))]


@pytest.mark.parametrize("arrays,message", [
    ({"images": np.zeros((1, 16, 16, 3), np.float32), "mask": np.zeros((1, 16), np.int64)},
     r"input 'images': the .npz array is \[1, 16, 16, 3\]; the model takes \[batch, 3, height, width\] float32 "
     r"\(axis 1 must be 3\)"),
    ({"images": np.zeros((3, 16, 16), np.float32), "mask": np.zeros((1, 16), np.int64)},
     r"input 'images': the .npz array has 3 dims \[3, 16, 16\]; the model takes 4: \[batch, 3, height, width\]"),
    ({"images": np.zeros((1, 3, 8, 8), np.int32), "mask": np.zeros((1, 8), np.int64)},
     r"input 'images': the .npz array is int32; the model takes float32 \(float values\)"),
    ({"image": np.zeros((1, 3, 8, 8), np.float32), "mask": np.zeros((1, 8), np.int64)},
     r"the .npz has no array for input\(s\) images; it has image, mask, and the model takes images \[batch, 3, "
     r"height, width\] float32, mask \[batch, height\] int64"),
])
def test_npz_arrays_are_checked_against_the_model_in_its_own_words(arrays, message):
    with pytest.raises(XcInputError, match=message):
        resolve_inputs(_specs(), arrays=arrays)


def test_npz_shapes_bind_the_named_dims_of_other_inputs():
    specs, record = resolve_inputs(_specs()[:1] + [InputSpec("mask", [1, 16], "int64",
                                                             dim_names=("batch", "height"))],
                                   arrays={"images": np.zeros((1, 3, 40, 40), np.float32),
                                           "mask": np.zeros((1, 40), np.int64)})
    assert [s.shape for s in specs] == [[1, 3, 40, 40], [1, 40]]
    assert record["inputs"]["images"]["shape_from"] == "npz"


def test_unknown_input_names_list_the_inputs_with_their_dims(tmp_path):
    path = two_in_three_out_onnx(str(tmp_path / "m.onnx"))
    with pytest.raises(XcInputError, match=r"--shape names no input of this model: feature; its inputs are "
                                           r"features \[2, 6\] float32, signal \[2, 2, 10\] float32"):
        analyze(path, ["ort-cpu"], shapes={"feature": ([2, 6], None)})
