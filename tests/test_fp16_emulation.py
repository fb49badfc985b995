"""The fp16 emulation of mobile-EP partitions: graphs onnxconverter-common gets wrong still emulate (a weaker,
labelled rung), and when nothing works the target keeps its partitions and says the emulation failed."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from xc_core.emulate.fp16_onnx import EmulationFailed, emulate_fp16
from xc_core.targets.ort_common import make_session, run_session

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
W = numpy_helper.from_array(np.linspace(0.5, 1.5, 8, dtype=np.float32), "w")
B = numpy_helper.from_array(np.zeros(8, np.float32), "b")


def _model(nodes, inits):
    return helper.make_model(helper.make_graph(nodes, "g", [X], [Y], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def _if_reading_an_outer_weight():
    then_b = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 8])])
    else_b = helper.make_graph([helper.make_node("Add", ["x", "w"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 8])])
    cond = numpy_helper.from_array(np.array(True), "c")
    return _model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_b, else_branch=else_b)],
                  [W, cond]), {"if"}


CASES = {
    # One weight read by an accelerated Mul and a CPU Add: the converter made it fp16 for both.
    "shared-weight": (lambda: (_model([helper.make_node("Mul", ["x", "w"], ["m"], name="acc"),
                                       helper.make_node("Add", ["m", "w"], ["y"], name="cpu")], [W]), {"acc"}),
                      "converted"),
    # LayerNormalization's scale shared with a CPU node: "Scale has inconsistent type" before the split.
    "layernorm-shared-scale": (lambda: (_model([helper.make_node("Add", ["x", "w"], ["a"], name="cpu"),
                                                helper.make_node("LayerNormalization", ["a", "w", "b"], ["y"],
                                                                 name="ln", axis=-1)], [W, B]), {"ln"}),
                               "converted"),
    # An If whose branches read an outer-scope weight: the converter types the subgraph wrongly.
    "if-outer-weight": (_if_reading_an_outer_weight, "rounded"),
    # A Cast to float inside the partition followed by a Transpose: "Inferred elem type differs".
    "transpose-after-cast": (lambda: (_model([helper.make_node("Cast", ["x"], ["xc"], name="cast",
                                                               to=TensorProto.FLOAT),
                                              helper.make_node("Transpose", ["xc"], ["tt"], name="tr", perm=[1, 0]),
                                              helper.make_node("Transpose", ["tt"], ["y"], name="tr2",
                                                               perm=[1, 0])], []), {"cast", "tr"}),
                             "rounded"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_graphs_the_converter_gets_wrong_still_emulate(tmp_path, case):
    build, expected = CASES[case]
    model, accelerated = build()
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)}
    ref = run_session(make_session(_save(model, tmp_path / "ref.onnx"), "ORT_DISABLE_ALL"), feeds)["y"]
    em = emulate_fp16(model, accelerated, str(tmp_path), lambda p: run_session(make_session(p, "ORT_DISABLE_ALL"),
                                                                                feeds))
    assert em.method == expected, em.attempts
    onnx.checker.check_model(onnx.load(em.path), full_check=True)
    got = em.outputs["y"].astype(np.float32)
    assert np.allclose(got, ref, rtol=2e-3, atol=2e-3)      # fp16-rounded, not garbage
    if expected != "converted":
        assert em.attempts[0]["error"] and em.attempts[-1]["error"] is None


def test_when_no_rung_runs_the_failure_is_reported_not_raised(tmp_path):
    model, accelerated = CASES["shared-weight"][0]()

    def never_runs(path):
        raise RuntimeError("simulated runtime refusal")

    with pytest.raises(EmulationFailed) as e:
        emulate_fp16(model, accelerated, str(tmp_path), never_runs)
    assert [a["method"] for a in e.value.attempts] == ["converted", "converted-partly", "rounded"]


def test_a_failed_emulation_keeps_the_partitions_on_the_target(tmp_path, monkeypatch):
    """The target stays ok with its partitions, fallbacks and boundaries; its numerics say xc failed."""
    from tiny_models import conv_bn_relu
    from xc_core.api import analyze
    import xc_core.emulate.fp16_onnx as fp16
    import torch

    def broken(model, accelerated, workdir, run):
        raise fp16.EmulationFailed([{"method": "converted", "error": "simulated"}])

    monkeypatch.setattr(fp16, "emulate_fp16", broken)
    model, args = conv_bn_relu()
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, args), str(path))
    report = analyze(str(path), ["ort-coreml"], isolate=False)   # the patch lives in this process
    t = report["targets"]["ort-coreml"]
    assert t["status"] == "ok"
    assert t["info"]["partitioning"]["num_partitions"] >= 1 and "boundaries" in t["info"]
    assert t["drift"]["failed"].startswith("xc's fp16 emulation could not build a model")
    q4 = report["checklist"]["targets"]["ort-coreml"][3]
    assert q4["verdict"] == "not applicable" and "not a finding about the model" in q4["detail"]


def _save(model, path):
    onnx.save(model, str(path))
    return str(path)


def test_a_model_that_fails_in_fp32_too_is_the_models_error_not_the_emulations(tmp_path):
    """Every rung fails because the model itself cannot run (an index out of range): the CoreML EP target says
    what ONNX Runtime says, like every other ORT target, instead of blaming xc's emulation."""
    from test_workers import gathernd_out_of_range
    from xc_core.api import analyze
    report = analyze(gathernd_out_of_range(tmp_path / "gnd.onnx"), ["ort-cpu", "ort-coreml"])
    t = report["targets"]["ort-coreml"]
    assert t["status"] == "error" and t["error_stage"] == "run"
    assert "invalid index found" in t["error"] and "emulation" not in t["error"]
    assert t["error"].split(": ", 1)[1] == report["targets"]["ort-cpu"]["error"].split(": ", 1)[1]
