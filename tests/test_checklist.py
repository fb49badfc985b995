"""Checklist questions that carry signal: question 3 warns only where a fusion the target's own compiler implements
was possible and did not fire; question 1 passes a runtime-checked prediction; question 5 names what a precision
the runtime chose by itself cost."""
import pytest

from tiny_models import BlockedConvBn, ConvBnReluStack
from xc_core.analysis.checklist import _q4, _q5
from xc_core.analysis.fusion_catalogue import check_catalogue
from xc_core.api import analyze
from xc_core.ir import Graph, Node, TensorInfo
from xc_core.sources.spec import InputSpec, Source


def _analyze(module, name):
    src = Source(kind="sample", name=name, sha256=("a" if name.startswith("plain") else "b") * 64, inputs=[InputSpec("x", [1, 3, 16, 16], "float32")],
                 module=module.eval())
    # every target, the deprecated ort-nnapi too (question 1 is asked of its checker's prediction), but the Ethos-U
    # ones: their PT2E + Vela lowering adds ~20 s each, and tests/test_ethos_u.py asks them the questions
    from xc_core.targets import target_ids
    return analyze(src, [t for t in target_ids() if not t.startswith("executorch-ethos-u")])


@pytest.fixture(scope="module")
def plain():
    return _analyze(ConvBnReluStack(), "plain-conv-bn-relu")


@pytest.fixture(scope="module")
def blocked():
    return _analyze(BlockedConvBn(), "blocked-conv-bn")


def _q(report, tid, qid):
    return report["checklist"]["targets"][tid][qid - 1]


@pytest.mark.slow
def test_q3_passes_everywhere_when_every_compiler_fuses_what_it_can(plain):
    for tid, t in plain["targets"].items():
        assert t["status"] == "ok", (tid, t["error"])
        q3 = _q(plain, tid, 3)
        # Vulkan fuses inside its delegates, out of sight: the question does not apply there. XNNPACK's fusions
        # are read from the graph each delegate serialized: they count.
        hidden = (t.get("info") or {}).get("fusions_inside_delegates") and not t["fusions"]["count"]
        assert q3["verdict"] == ("not applicable" if hidden else "pass"), (tid, q3["detail"])
    if "executorch-xnnpack" in plain["targets"]:
        assert plain["targets"]["executorch-xnnpack"]["fusions"]["count"] > 0
    # The catalogue saw real opportunities (not a pass by finding nothing) and every one fired.
    cat = plain["targets"]["ort-cpu"]["fusions"]["catalogue"]
    assert cat["counts"]["fired"] >= 4 and {"ConvBNFusion", "ConvActivationFusion"} <= {
        o["fusion"] for o in cat["opportunities"]}
    assert plain["targets"]["coreml-cpu"]["fusions"]["catalogue"]["counts"]["fired"] == 2
    # Cross-target differences stay visible as information.
    assert plain["fusion_matrix"]["not_fired"]


@pytest.mark.slow
def test_q3_warns_where_a_conv_with_a_second_consumer_blocks_its_compilers_fusion(blocked):
    warned = {tid for tid in blocked["targets"] if _q(blocked, tid, 3)["verdict"] == "warn"}
    # ORT (Level 1 ConvBNFusion on every EP), OpenVINO and coremltools all fold BatchNorm into a Conv — not here.
    assert {"ort-cpu", "ort-nnapi", "ort-coreml", "openvino-cpu", "coreml-cpu", "coreml-ane"} <= warned
    for tid in warned:
        detail = _q(blocked, tid, 3)["detail"]
        if blocked["targets"][tid]["fusions"].get("catalogue") is None:
            # No catalogue for this compiler (Core ML through ExecuTorch): the plain count, not a reason.
            assert "no fusion" in detail, (tid, detail)
            continue
        assert "also feeds" in detail and "conv2d" in detail, (tid, detail)
    blocked_rows = [o for o in blocked["targets"]["ort-cpu"]["fusions"]["catalogue"]["opportunities"]
                    if o["outcome"] == "blocked"]
    assert blocked_rows and blocked_rows[0]["fusion"] == "ConvBNFusion"
    # The int8 model's Conv is a ConvInteger: no catalogued float fusion applies, so nothing to warn about.
    assert _q(blocked, "ort-cpu-int8", 3)["verdict"] == "pass"


@pytest.mark.slow
def test_q1_passes_a_runtime_checked_prediction_and_warns_on_xcs_own_rules(plain):
    q1 = _q(plain, "ort-nnapi", 1)
    assert q1["verdict"] == "pass" and q1["evidence"] == "predicted-runtime"
    q1 = _q(plain, "coreml-ane", 1)
    assert q1["verdict"] == "warn" and q1["evidence"] == "predicted-rules"


def _t(n, op, ins, outs, **attrs):
    return Node(id=n, op_type=op, inputs=[TensorInfo(i) for i in ins], outputs=[TensorInfo(o) for o in outs],
                attributes=attrs, fused_from=[n])


@pytest.mark.slow
def test_catalogue_needs_a_constant_bias_and_reports_a_fusion_that_took_an_op_first():
    # MatMul(x, W) + b, then Relu; ORT's MatMulAddFusion fused MatMul+Add, so GemmActivation never saw a Gemm
    # (nothing to match), and an Add of two computed tensors is no bias (no MatMulAdd opportunity).
    given = Graph("g", "onnx", [_t("mm", "MatMul", ["x", "W"], ["m"]), _t("add", "Add", ["m", "b"], ["a"]),
                                _t("mm2", "MatMul", ["x", "W2"], ["m2"]), _t("add2", "Add", ["m2", "a"], ["y"])],
                  inputs=[TensorInfo("x")], outputs=[TensorInfo("y")])
    compiled = Graph("c", "optimized", [Node("gemm", "Gemm", fused_from=["mm", "add"]),
                                        Node("mm2", "MatMul", fused_from=["mm2"]),
                                        Node("add2", "Add", fused_from=["add2"])])
    cat = check_catalogue(compiled, given, "onnxruntime")
    by_nodes = {tuple(o["nodes"]): o["outcome"] for o in cat["opportunities"]}
    assert by_nodes == {("mm", "add"): "fired"}


def _typed(t: dict):
    """A target block as checklist() hands it to a question: typed, and its compiled graph as the dict it is."""
    from xc_core.report.types import TargetBlock
    return TargetBlock.from_dict({**t, "graph": None}), t.get("graph")


def _q4_of(t: dict, report: dict) -> dict:
    from xc_core.report.types import ReferenceBlock
    return _q4(*_typed(t), ReferenceBlock.from_dict(report.get("reference")),
               (report.get("capture") or {}).get("onnx_route"))


def test_q5_warns_on_a_runtime_chosen_bf16_with_its_drift_and_the_switch():
    # What an AMX / avx512_bf16 CPU reports when nobody asked for a precision: the plugin's hint reads bf16.
    t = {"id": "openvino-cpu", "status": "ok", "graph": {"nodes": []},
         "info": {"inference_precision": "bf16", "inference_precision_requested": None},
         "precision": {"mix": {"bf16": 20, "fp32": 4}, "evidence": "reported"},
         "drift": {"worst": {"output": "logits", "rel_l2": 3.2e-3}}}
    q5 = _q5(*_typed(t))
    assert q5["verdict"] == "warn" and "by the runtime's own choice" in q5["detail"]
    assert "3.20e-03" in q5["detail"] and "INFERENCE_PRECISION_HINT" in q5["detail"]
    # Asked for: the target's typed declared_precisions (what openvino-cpu sets from inference_precision=bf16).
    asked = _q5(*_typed({**t, "info": {"inference_precision": "bf16", "inference_precision_requested": "bf16"},
                         "declared_precisions": ["bf16"]}))
    assert "as configured" in asked["detail"]


@pytest.mark.slow
def test_a_residual_sum_fused_into_the_other_producer_is_not_a_miss():
    # Two convs meet in a residual add; OpenVINO puts the sum into one of them. The other conv's chain lost the
    # add to the same fusion on its sibling: superseded, not blocked or missed.
    shape = [1, 8, 4, 4]
    given = Graph("g", "onnx", [
        Node("ca", "Conv", inputs=[TensorInfo("x"), TensorInfo("wa")], outputs=[TensorInfo("a", shape)]),
        Node("bn", "BatchNormalization", inputs=[TensorInfo("a", shape), TensorInfo("s")],
             outputs=[TensorInfo("b", shape)]),
        Node("cb", "Conv", inputs=[TensorInfo("x"), TensorInfo("wb")], outputs=[TensorInfo("c", shape)]),
        Node("add", "Add", inputs=[TensorInfo("b", shape), TensorInfo("c", shape)], outputs=[TensorInfo("y", shape)])],
        inputs=[TensorInfo("x")], outputs=[TensorInfo("y")])
    compiled = Graph("c", "runtime", [Node("ca'", "Convolution", fused_from=["ca", "bn"]),
                                      Node("cb'", "Convolution", fused_from=["cb", "add"])])
    cat = check_catalogue(compiled, given, "openvino-cpu")
    outcome = {(o["fusion"], tuple(o["nodes"])): o["outcome"] for o in cat["opportunities"]}
    sums = "FuseConvolutionSumAndConvolutionSumActivation"
    assert outcome[(sums, ("cb", "add"))] == "fired"
    assert outcome[(sums, ("ca", "bn", "add"))] == "superseded"
    assert outcome[("BatchNormDecomposition+ConvolutionMultiplyFusion", ("ca", "bn"))] == "fired"


def test_a_failed_target_is_one_finding_and_a_failed_reference_judges_no_drift():
    """A target that never produced a graph is n/a on every question (question 1 carries its error: the failure is
    the target's status, not a verdict). When the reference itself failed, no target's outputs 'do not match'."""
    from xc_core.analysis.checklist import checklist
    report = {"reference": {"status": "ok"}, "targets": {"openvino-cpu": {
        "id": "openvino-cpu", "status": "error", "error": "killed by SIGSEGV in run", "graph": None}}}
    verdicts = [(q["verdict"], q["detail"]) for q in checklist(report, [])["targets"]["openvino-cpu"]]
    assert verdicts[0] == ("not applicable", "no compiled graph came back, so there is no report to read: "
                                             "killed by SIGSEGV in run")
    assert [v for v, _ in verdicts[1:]] == ["not applicable"] * 4
    ran_not = {"id": "ort-cpu", "status": "error", "error": "run failed: invalid index", "graph": {}, "drift": None}
    assert _q4_of(ran_not, report)["verdict"] == "fail"
    assert _q4_of(ran_not, {**report, "reference": {"status": "error"}})["verdict"] == "not applicable"
