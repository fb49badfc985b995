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


# --- what "fp16" means: checked against numpy's float16 (bench/emulator_conformance.py runs ONNX's node tests) ---

def _graph(nodes, inits=(), opset=17):
    return helper.make_model(helper.make_graph(nodes, "g", [X], [Y], list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)])


def _emulate(model, accelerated, tmp_path, x):
    run = lambda p: run_session(make_session(p, "ORT_DISABLE_ALL"), {"x": x})  # noqa: E731
    return emulate_fp16(model, accelerated, str(tmp_path), run), run(_save(model, tmp_path / "fp32.onnx"))["y"]


def _fp16(a):
    return np.asarray(a, np.float32).astype(np.float16)


X_VALUES = np.array([[1.0001, -2.0003, 3.14159, 0.1, 7.77, -0.333, 12.5, 1e-3]], np.float32)


def test_accelerated_nodes_store_every_tensor_in_fp16(tmp_path):
    """ORT's CPU EP has no fp16 Sin: it computes the node in fp32 between casts it inserts and folds those casts
    with the converter's, which left the whole graph in fp32. Each tensor must be an fp16 value, as numpy's float16
    gives it."""
    model = _graph([helper.make_node("Sin", ["x"], ["s"], name="a"), helper.make_node("Sin", ["s"], ["y"], name="b")])
    em, fp32 = _emulate(model, {"a", "b"}, tmp_path, X_VALUES)
    assert em.method == "converted"
    got = em.outputs["y"]
    np.testing.assert_array_equal(_fp16(got).astype(np.float32), got)          # fp16 values …
    expected = _fp16(np.sin(_fp16(np.sin(_fp16(X_VALUES).astype(np.float32))).astype(np.float32)))
    ulp = np.spacing(expected).astype(np.float32)                              # … as numpy's float16 rounds them
    assert np.all(np.abs(got - expected.astype(np.float32)) <= ulp)           # (ORT's fp32 sin may differ by 1 ulp)
    assert np.max(np.abs(got - fp32)) > 1e-4


def test_nodes_left_on_the_cpu_keep_their_fp32_values(tmp_path):
    """A CPU node's output read by two CPU nodes (a residual) went through Cast(fp16) → Cast(fp32), and a graph
    output a CPU node produces came back typed float16: both are the CPU EP's fp32 numbers, bit for bit."""
    nodes = [helper.make_node("Sin", ["x"], ["s"], name="cpu1"), helper.make_node("Cos", ["s"], ["c"], name="cpu2"),
             helper.make_node("Mul", ["s", "c"], ["y"], name="cpu3")]
    for accelerated in (set(), {"unrelated"}):
        em, fp32 = _emulate(_graph(nodes), accelerated, tmp_path, X_VALUES)
        assert em.outputs["y"].dtype == np.float32
        np.testing.assert_array_equal(em.outputs["y"], fp32)


def test_weights_convert_within_fp16s_range(tmp_path):
    """onnxconverter-common clamps weights to ±10,000 by default; fp16 reaches 65,504."""
    w = numpy_helper.from_array(np.full(8, 30000.0, np.float32), "w")
    em, _ = _emulate(_graph([helper.make_node("Mul", ["x", "w"], ["y"], name="m")], [w]), {"m"}, tmp_path,
                     np.ones((1, 8), np.float32) * 0.5)
    np.testing.assert_array_equal(em.outputs["y"], np.full((1, 8), 15000.0, np.float32))


def test_op_types_the_converter_keeps_in_fp32_are_named(tmp_path):
    """Its default block list (Max among them) stays fp32 even on the `converted` rung: the emulation says so."""
    model = _graph([helper.make_node("Max", ["x", "x"], ["y"], name="mx")])
    em, _ = _emulate(model, {"mx"}, tmp_path, X_VALUES)
    assert em.method == "converted" and em.kept_fp32_ops == ["Max"]


def test_a_run_without_fp16_rounding_is_not_passed_off_as_fp16(tmp_path):
    """A runtime that computes without the rounding (as ORT did, folding its casts): no rung is accepted."""
    model = _graph([helper.make_node("Sin", ["x"], ["y"], name="a")])
    fp32_path = _save(model, tmp_path / "fp32.onnx")

    def rounding_dropped(path):
        return run_session(make_session(fp32_path, "ORT_DISABLE_ALL"), {"x": X_VALUES})

    with pytest.raises(EmulationFailed, match="without the fp16 rounding") as e:
        emulate_fp16(model, {"a"}, str(tmp_path), rounding_dropped)
    assert all("without the fp16 rounding" in a["error"] for a in e.value.attempts)
