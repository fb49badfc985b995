"""ORT CPU and OpenVINO compile for real, their compiled graphs are read back with provenance, and one failing
target never hides the others."""
import numpy as np
import pytest

from tiny_models import TwoOutputs, conv_bn_relu
from xc_core.api import analyze
from xc_core.capture import capture
from xc_core.inputs.values import random_inputs
from xc_core.sources.spec import InputSpec, Source
from xc_core.targets import ERROR, OK, execute_target, make_target
from xc_core.targets.base import REGISTRY, Target, register


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model, args = conv_bn_relu()
    src = Source(kind="sample", name="tiny", sha256="0" * 64,
                 inputs=[InputSpec("x", list(args[0].shape), "float32")], module=model)
    feeds = random_inputs(src.inputs)
    return capture(src, str(tmp_path_factory.mktemp("cap")), feeds), feeds


def test_ort_cpu_fuses_conv_bn_relu_and_reports_providers(tiny, tmp_path):
    cap, feeds = tiny
    r = execute_target(make_target("ort-cpu"), cap, feeds, str(tmp_path))
    assert r.status == OK, r.error
    conv = next(n for n in r.graph.compute_nodes() if "Conv" in n.op_type)
    absorbed = [cap.onnx_node(i).op_type for i in conv.fused_from]
    assert absorbed == ["Conv", "BatchNormalization", "Relu"]
    assert conv.source_ops == ["conv2d", "batch_norm", "relu"]
    assert all(n.backend == "cpu" and n.kernel == "CPUExecutionProvider" for n in r.graph.compute_nodes())
    assert len(r.graph.compute_nodes()) < len(cap.before.compute_nodes())
    ref = execute_target(make_target("torch"), cap, feeds, str(tmp_path / "ref"))
    np.testing.assert_allclose(r.outputs[cap.output_names[0]], ref.outputs[cap.output_names[0]], atol=1e-5)


def test_openvino_runtime_model_names_what_fused(tiny, tmp_path):
    cap, feeds = tiny
    r = execute_target(make_target("openvino-cpu"), cap, feeds, str(tmp_path))
    assert r.status == OK, r.error
    conv = next(n for n in r.graph.compute_nodes() if n.op_type == "Convolution")
    assert [cap.onnx_node(i).op_type for i in conv.fused_from] == ["Conv", "BatchNormalization", "Relu"]
    assert conv.precision in ("fp32", "bf16") and conv.kernel
    assert all(n.source_ops for n in r.graph.compute_nodes())


def test_outputs_are_matched_by_name_with_several_outputs(tmp_path):
    import torch
    model = TwoOutputs().eval()
    src = Source(kind="sample", name="two", sha256="1" * 64, inputs=[InputSpec("x", [2, 6], "float32")],
                 module=model)
    feeds = random_inputs(src.inputs)
    cap = capture(src, str(tmp_path / "cap"), feeds)
    with torch.no_grad():
        a, b = model(torch.from_numpy(feeds["x"]))
    # OpenVINO pinned to fp32: on bf16-capable CPUs its default would be bf16.
    for target in (make_target("ort-cpu"), make_target("openvino-cpu", inference_precision="f32")):
        r = execute_target(target, cap, feeds, str(tmp_path / target.id))
        np.testing.assert_allclose(r.outputs[cap.output_names[0]], a.numpy(), atol=1e-5)
        np.testing.assert_allclose(r.outputs[cap.output_names[1]], b.numpy(), atol=1e-5)


class _Exploding(Target):
    id = "test-exploding"
    label = "a target whose compiler crashes"
    description = "test only"
    evidence = {"assignment": "reported", "numerics": "measured"}

    def _compile(self, captured, workdir, result):
        raise RuntimeError("compiler crashed on node 7\nsecond line")

    def _inspect(self, compiled, captured, result):
        raise AssertionError("never reached")

    def _run(self, compiled, inputs, captured, result):
        raise AssertionError("never reached")


def test_a_failing_target_is_a_value_and_the_others_complete():
    register(_Exploding)
    try:
        report = analyze("sample:vision-mini", ["test-exploding", "ort-cpu"])
    finally:
        REGISTRY.pop("test-exploding")
    bad, good = report["targets"]["test-exploding"], report["targets"]["ort-cpu"]
    assert bad["status"] == ERROR and bad["error"] == "compile failed: compiler crashed on node 7"
    assert good["status"] == OK and good["drift"]["outputs"]
