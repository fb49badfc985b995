"""What today's exporters write gets through to Core ML and int8: opset-18+ ops onnx.version_converter cannot
lower (Split with num_outputs, Reduce* with an axes input), and weights the graph computes (weight_norm), which
onnx2torch's Conv and quantize_dynamic both want as initializers."""
import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto, helper, numpy_helper

from xc_core.api import analyze
from xc_core.targets.onnx_to_torch import lower_opset


def _run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_lower_opset_rewrites_split_and_reduce_and_computes_the_same():
    nodes = [helper.make_node("Split", ["x"], ["a", "b", "c"], name="split", axis=1, num_outputs=3),
             helper.make_node("ReduceMean", ["a", "axes"], ["m"], name="mean", keepdims=1),
             helper.make_node("IsNaN", ["b"], ["nan"], name="isnan"),
             helper.make_node("Where", ["nan", "c", "b"], ["w"], name="where"),
             helper.make_node("Add", ["m", "w"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          [numpy_helper.from_array(np.array([1], np.int64), "axes")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    lowered, rewritten = lower_opset(model, 20, 17)
    assert lowered.opset_import[0].version == 17
    assert rewritten == ["ReduceMean × 1 rewritten for opset 17", "Split × 1 rewritten for opset 17"]
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 7)).astype(np.float32)}
    for a, b in zip(_run(model, feeds), _run(lowered, feeds)):
        np.testing.assert_array_equal(a, b)


class _WeightNormConv(torch.nn.Module):
    """A weight the graph computes from g and v, as wav2vec2's positional convolution has."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(8, 8, 5, padding=2), dim=2)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.nn.functional.gelu(self.conv(x)).transpose(1, 2))


def test_computed_weights_reach_core_ml_and_int8(tmp_path):
    path = str(tmp_path / "wn.onnx")
    # as a real wav2vec2's 768×48×128 weight stays computed: beyond the exporter's own folding limit
    torch.onnx.export(_WeightNormConv().eval(), (torch.randn(1, 8, 32),), path, dynamo=True, optimize=False)
    init = {i.name for i in onnx.load(path).graph.initializer}
    conv = next(n for n in onnx.load(path).graph.node if n.op_type == "Conv")
    assert conv.input[1] not in init            # the case: the exporter left the weight computed
    report = analyze(path, ["coreml-cpu", "ort-cpu-int8"], out_dir=str(tmp_path / "out"))
    for tid in ("coreml-cpu", "ort-cpu-int8"):
        assert report["targets"][tid]["status"] == "ok", report["targets"][tid]["error"]
    prep = report["targets"]["ort-cpu-int8"]["info"]["quantization"]["preprocessing"]
    assert prep and "quant_pre_process" in prep and "to be an initializer" in prep
