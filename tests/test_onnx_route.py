"""xc's ONNX → PyTorch route (xc_core/onnx_route), one tiny graph per thing real ONNX files hold that it must get
through; and what today's exporters write gets through to Core ML and int8: opset-18+ ops onnx.version_converter cannot
lower (Split with num_outputs, Reduce* with an axes input), and weights the graph computes (weight_norm), which
onnx2torch's Conv and quantize_dynamic both want as initializers."""
import dataclasses
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from xc_core.api import analyze
from xc_core.onnx_route.graph_prep import lower_opset
from xc_core.views.rows import onnx_route_lines

from tiny_models import chain_onnx


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


# ---------------------------------------------------------------- the route, one tiny graph per fix ----
def _model(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                                *[helper.make_opsetid(d, v) for d, v in extra_opsets]])
    model.ir_version = 8
    return model


def _route(tmp_path, model, feeds):
    """xc's ONNX → PyTorch route on `model` at the feeds' shapes: its record."""
    from xc_core.onnx_route import build
    from xc_core.readers.onnx import name_unnamed_nodes
    from xc_core.sources.onnx_file import onnx_input_specs
    name_unnamed_nodes(model)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    specs = [dataclasses.replace(s, shape=list(feeds[s.name].shape)) for s in onnx_input_specs(model)]
    return build(path, specs, feeds, str(tmp_path / "route"))


def _close(record, bound=1e-5):
    assert "error" not in record, record.get("error")
    drift = record["conversion_drift"]
    assert drift and all(m.get("max_abs", 1) <= bound for m in drift.values() if "error" not in m), drift
    return record


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_weights_listed_as_inputs_and_weights_as_constant_nodes(tmp_path):
    """paddle2onnx's habits: weights also listed as graph inputs, and weights written as Constant nodes."""
    w = numpy_helper.from_array(_x(4, 3, 3, 3, seed=1), "conv2d_0.w_0")
    b = helper.make_node("Constant", [], ["conv2d_0.b_0"], name="bias_const",
                         value=numpy_helper.from_array(_x(4, seed=2), "b"))
    nodes = [b, helper.make_node("Conv", ["x", "conv2d_0.w_0", "conv2d_0.b_0"], ["y"], name="conv", pads=[1] * 4)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
              helper.make_tensor_value_info("conv2d_0.w_0", TensorProto.FLOAT, [4, 3, 3, 3])]
    model = _model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    record = _close(_route(tmp_path, model, {"x": _x(1, 3, 8, 8)}))
    assert any("listed as graph inputs" in n for n in record["preprocessing"])
    assert any("Constant node(s) made initializers" in n for n in record["preprocessing"])
    assert set(record["origin"].values()) == {"conv"}
    # ORT's int8 quantizer refused such weights ("Expected conv2d_0.w_0 to be an initializer"), Core ML failed with a
    # bare KeyError: both take the model now, and say what was done
    report = analyze(str(tmp_path / "m.onnx"), ["ort-cpu-int8", "coreml-cpu"])
    int8, coreml = report["targets"]["ort-cpu-int8"], report["targets"]["coreml-cpu"]
    assert int8["status"] == "ok" and coreml["status"] == "ok", (int8["error"], coreml["error"])
    assert "remove_initializer_from_input" in int8["info"]["quantization"]["preprocessing"]


def test_global_max_pool_and_reflect_and_edge_padding_of_any_rank(tmp_path):
    """GlobalMaxPool has no onnx2torch converter; torch's reflect padding takes 1–3 trailing dims of a 2–5-D
    tensor, and not the second axis of a 4-D one."""
    pads = numpy_helper.from_array(np.array([0, 2, 0, 1, 0, 3, 0, 0], np.int64), "pads")
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"], name="reflect", mode="reflect"),
             helper.make_node("Pad", ["p", "pads"], ["q"], name="edge", mode="edge"),
             helper.make_node("GlobalMaxPool", ["q"], ["y"], name="gmp")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 6, 7])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                    helper.make_tensor_value_info("q", TensorProto.FLOAT, None)], [pads])
    record = _close(_route(tmp_path, model, {"x": _x(2, 5, 6, 7)}))
    assert record["conversion_drift"]["q"]["max_abs"] == 0.0


def test_an_if_on_the_inputs_keeps_the_branch_the_analysis_takes(tmp_path):
    """The condition depends on the input's values (not a constant): ONNX Runtime evaluates it on the analysis
    inputs and the program keeps that branch, which the notes say."""
    def branch(op, out, const):
        return helper.make_graph([helper.make_node(op, ["x", const], [out])], op, [],
                                 [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)])
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["positive"], name="positive"),
             helper.make_node("If", ["positive"], ["y"], name="pick", then_branch=branch("Mul", "t", "two"),
                              else_branch=branch("Sub", "e", "two"))]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    for x, kept in ((np.abs(_x(3, 4)), "then"), (-np.abs(_x(3, 4)), "else")):
        record = _close(_route(tmp_path, model, {"x": x}))
        note = next(n for n in record["preprocessing"] if n.startswith("If 'pick'"))
        assert f"keeps the {kept} branch only" in note
        assert set(record["origin"].values()) == {"pick"}     # the branch's op traces to the If


def test_integer_quantized_ops_are_computed_in_float_and_said_so(tmp_path):
    """ORT's dynamic quantization: DynamicQuantizeLinear feeding ConvInteger and MatMulInteger (integer values held
    in float32 on the PyTorch side: the same numbers ONNX Runtime's integer kernels give)."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.integers(-127, 127, (4, 3, 3, 3)).astype(np.int8), "wq"),
             numpy_helper.from_array(np.array(0, np.int8), "wzp"),
             numpy_helper.from_array(rng.integers(0, 255, (6, 5)).astype(np.uint8), "mq"),
             numpy_helper.from_array(np.array(128, np.uint8), "mzp")]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xzp"], name="dql"),
             helper.make_node("ConvInteger", ["xq", "wq", "xzp", "wzp"], ["c"], name="convint", pads=[1] * 4),
             helper.make_node("Cast", ["c"], ["cf"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["cf", "xs"], ["y"], name="scale"),
             helper.make_node("DynamicQuantizeLinear", ["v"], ["vq", "vs", "vzp"], name="dql2"),
             helper.make_node("MatMulInteger", ["vq", "mq", "vzp", "mzp"], ["mi"], name="matmulint"),
             helper.make_node("Cast", ["mi"], ["z"], name="cast2", to=TensorProto.FLOAT)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6]),
                           helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 6])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                    helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], inits)
    record = _close(_route(tmp_path, model, {"x": _x(1, 3, 6, 6), "v": _x(2, 6, seed=4)}), bound=1e-3)
    assert "float model" in record["float_model"] and "ConvInteger" in record["float_model"]
    # the integer weights are float32 constants of the program, not uint8 constants cast at run time (Core ML's
    # ExecuTorch delegate refused to cast a uint8 tensor)
    program = torch.export.load(record["program_path"])
    held = {**program.state_dict, **program.constants}
    assert held and {t.dtype for t in held.values()} == {torch.float32}
    signature = program.graph_signature
    weights = {**signature.inputs_to_buffers, **signature.inputs_to_lifted_tensor_constants}
    assert not [n for n in program.graph.nodes if n.op == "call_function" and n.args and n.args[0].name in weights
                and n.target in (torch.ops.aten.to.dtype, torch.ops.aten._to_copy.default)]


FLOAT16_MAX = 65504.0


def _largest_value(record, feeds) -> float:
    """The largest magnitude any float value of the route's program takes on `feeds` (float16 holds 65,504)."""
    module = torch.export.load(record["program_path"]).module()
    largest = [0.0]

    class Watch(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            if isinstance(out, torch.Tensor) and out.is_floating_point() and out.numel():
                largest[0] = max(largest[0], float(out.abs().max()))
            return out
    with torch.no_grad():
        Watch(module).run(*[torch.from_numpy(feeds[name]) for name in record["program_inputs"]])
    return largest[0]


def test_ort_dynamic_int8_becomes_float_ops_on_dequantized_values(tmp_path):
    """quantize_dynamic's ConvInteger / MatMulInteger chains (real ORT quantizer) become Conv / MatMul on
    dequantized values: the same numbers, at float magnitudes — the integer sums, held in float, overflow float16."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv, self.fc = torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.Linear(16, 5)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).mean((2, 3)))
    float_path, int8_path = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    torch.onnx.export(Net().eval(), (torch.randn(1, 8, 6, 6),), float_path, dynamo=False,
                      input_names=["x"], output_names=["y"])
    quantize_dynamic(float_path, int8_path, weight_type=QuantType.QUInt8, op_types_to_quantize=["Conv", "MatMul",
                                                                                                 "Gemm"])
    model = onnx.load(int8_path)
    assert {"ConvInteger", "MatMulInteger"} <= {n.op_type for n in model.graph.node}
    feeds = {"x": 3 * _x(1, 8, 6, 6)}
    record = _close(_route(tmp_path, model, feeds), bound=1e-4)
    rewritten = [n for n in record["preprocessing"] if "dynamic int8 computed as" in n]
    assert rewritten and "1 ConvInteger, 1 MatMulInteger" in rewritten[0], record["preprocessing"]
    assert set(record["origin"].values()) <= {n.name for n in model.graph.node}
    assert _largest_value(record, feeds) < FLOAT16_MAX


def test_dynamic_int8_with_a_quantized_bias_keeps_the_bias_at_float_magnitude(tmp_path):
    """Older quantize_dynamic adds an int32 bias, quantized at run time (floor(bias / scale)), before the Cast: the
    program adds the float bias it quantizes."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.integers(0, 255, (6, 4, 3, 3)).astype(np.uint8), "wq"),
             numpy_helper.from_array(np.array(120, np.uint8), "wzp"),
             numpy_helper.from_array(np.array(0.004, np.float32), "ws"),
             numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "bias"),
             numpy_helper.from_array(np.array([1, 6, 1, 1], np.int64), "bias_shape")]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xzp"], name="dql"),
             helper.make_node("Mul", ["xs", "ws"], ["scale"], name="scales_mul"),
             helper.make_node("Div", ["bias", "scale"], ["bias_div"], name="bias_div"),
             helper.make_node("Floor", ["bias_div"], ["bias_floor"], name="bias_floor"),
             helper.make_node("Cast", ["bias_floor"], ["bias_int"], name="bias_cast", to=TensorProto.INT32),
             helper.make_node("Reshape", ["bias_int", "bias_shape"], ["bias_q"], name="bias_reshape"),
             helper.make_node("ConvInteger", ["xq", "wq", "xzp", "wzp"], ["c"], name="conv_quant", pads=[1] * 4),
             helper.make_node("Add", ["c", "bias_q"], ["cb"], name="bias_add"),
             helper.make_node("Cast", ["cb"], ["cf"], name="bias_add_cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["cf", "scale"], ["y"], name="output_scale_mul")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    feeds = {"x": 4 * _x(1, 4, 5, 5)}
    # the float bias differs from floor(bias / scale)·scale by less than one scale step (x_scale·0.004 ≈ 4e-4)
    record = _close(_route(tmp_path, model, feeds), bound=1e-3)
    assert any("1 ConvInteger of ONNX Runtime's dynamic int8" in n for n in record["preprocessing"])
    assert 1 < np.abs(_run(model, feeds)[0]).max() < 100
    # bias / scale (thousands; past float16 for a large bias) is no longer computed: the bias is the float one
    assert _largest_value(record, feeds) < 1000


def test_lstm_bidirectional_with_initial_state_and_its_dynamic_int8_form(tmp_path):
    """onnx2torch has no LSTM converter; ORT's quantize_dynamic turns an LSTM into com.microsoft's
    DynamicQuantizeLSTM, which the route dequantizes."""
    from onnxruntime.quantization import quantize_dynamic
    hid, inp = 5, 3
    inits = [numpy_helper.from_array(_x(2, 4 * hid, inp, seed=5) * 0.5, "W"),
             numpy_helper.from_array(_x(2, 4 * hid, hid, seed=6) * 0.5, "R"),
             numpy_helper.from_array(_x(2, 8 * hid, seed=7) * 0.1, "B")]
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["", "hn", "cn"], name="lstm",
                              hidden_size=hid, direction="bidirectional")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7, 2, inp]),
              helper.make_tensor_value_info("h0", TensorProto.FLOAT, [2, 2, hid]),
              helper.make_tensor_value_info("c0", TensorProto.FLOAT, [2, 2, hid])]
    model = _model(nodes, inputs, [helper.make_tensor_value_info("hn", TensorProto.FLOAT, None),
                                   helper.make_tensor_value_info("cn", TensorProto.FLOAT, None)], inits, opset=14)
    feeds = {"x": _x(7, 2, inp, seed=8), "h0": _x(2, 2, hid, seed=9), "c0": _x(2, 2, hid, seed=10)}
    _close(_route(tmp_path, model, feeds))
    onnx.save(model, str(tmp_path / "f.onnx"))
    quantize_dynamic(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"))
    quantized = onnx.load(str(tmp_path / "q.onnx"))
    assert any(n.op_type == "DynamicQuantizeLSTM" for n in quantized.graph.node)
    record = _route(tmp_path, quantized, feeds)
    assert "error" not in record, record["error"]
    # ORT quantizes the activations too; the float program does not: close, not equal
    assert all(m["rel_l2"] < 0.05 for m in record["conversion_drift"].values()), record["conversion_drift"]
    assert "DynamicQuantizeLSTM" in record["float_model"]


def test_classic_ml_ops_linear_classifier_normalizer_zipmap(tmp_path):
    coef = _x(3, 4, seed=11).ravel().tolist()
    nodes = [helper.make_node("LinearClassifier", ["x"], ["label", "scores"], name="clf", domain="ai.onnx.ml",
                              classlabels_ints=[10, 20, 30], coefficients=coef, intercepts=[0.1, -0.2, 0.3],
                              post_transform="LOGISTIC"),
             helper.make_node("Normalizer", ["scores"], ["norm"], name="norm", domain="ai.onnx.ml", norm="L1"),
             helper.make_node("ZipMap", ["norm"], ["probabilities"], name="zip", domain="ai.onnx.ml",
                              classlabels_int64s=[10, 20, 30])]
    zip_type = helper.make_sequence_type_proto(helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 4])],
                   [helper.make_tensor_value_info("label", TensorProto.INT64, [5]),
                    helper.make_value_info("probabilities", zip_type)], opset=17, extra_opsets=[("ai.onnx.ml", 1)])
    record = _close(_route(tmp_path, model, {"x": _x(5, 4, seed=12)}))
    assert record["conversion_drift"]["label"]["max_abs"] == 0.0
    assert "not compared" in record["conversion_drift"]["probabilities"]["error"]   # a sequence of maps in ORT
    assert any("ZipMap" in n for n in record["preprocessing"])


def test_an_op_without_a_converter_is_named_with_its_domain_opset_node_and_what_to_do(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Frobnicate", ["r"], ["y"], name="our custom op", domain="com.acme")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], extra_opsets=[("com.acme", 3)])
    error = _route(tmp_path, model, {"x": _x(2, 3)})["error"]
    assert "Frobnicate" in error and "com.acme" in error and "opset 3" in error and "'our custom op'" in error
    assert ".pt2" in error and "\n" not in error and "KeyError" not in error


HOSTILE = 'conv "x")\n__import__("os")'


def test_a_form_xc_does_not_convert_names_the_node_in_one_line(tmp_path):
    """xc's converters refuse forms they do not compute (ConvInteger with SAME padding): the error names the op and
    the node — a name with quotes, a newline and ")" escaped, never executed — and what to do."""
    inits = [numpy_helper.from_array(np.ones((2, 3, 3, 3), np.int8), "w")]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="dql"),
             helper.make_node("ConvInteger", ["q", "w", "z"], ["c"], name=HOSTILE, auto_pad="SAME_UPPER")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                   [helper.make_tensor_value_info("c", TensorProto.INT32, None)], inits)
    error = _route(tmp_path, model, {"x": _x(1, 3, 4, 4)})["error"]
    assert error.startswith("ConvInteger 'conv \"x\")\\n__import__(\"os\")' (domain ai.onnx): ConvInteger with "
                            "auto_pad=SAME_UPPER — xc's converter does not compute this form; upload"), error
    assert "\n" not in error


def test_a_node_pytorch_cannot_run_is_named_in_one_line(tmp_path):
    idx = numpy_helper.from_array(np.array([[10 ** 9]], np.int64), "idx")
    nodes = [helper.make_node("GatherND", ["x", "idx"], ["y"], name=HOSTILE)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], [idx])
    error = _route(tmp_path, model, {"x": _x(4)})["error"]
    assert error.startswith("GatherND 'conv \"x\")\\n__import__(\"os\")' (domain ai.onnx) failed in PyTorch"), error
    assert "\n" not in error


@pytest.mark.slow
def test_one_program_per_run_reaches_executorch_and_core_ai(tmp_path):
    """An ONNX upload: the route runs once in prepare; ExecuTorch and Core AI compile its program, and their ops
    trace to the ONNX nodes."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv, self.fc = torch.nn.Conv2d(3, 4, 3), torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).mean((2, 3)))
    path = str(tmp_path / "net.onnx")
    torch.onnx.export(Net().eval(), (torch.randn(1, 3, 8, 8),), path, dynamo=True)
    events = []
    report = analyze(path, ["ort-cpu", "executorch-xnnpack", "coreai-cpu", "inductor-cpu"],
                     out_dir=str(tmp_path / "out"), progress=events.append)
    assert [e.status for e in events if e.step == "onnx-route"] == ["running", "done"]
    assert os.path.exists(tmp_path / "out" / "artifacts" / "capture" / "onnx_route.pt2")
    onnx_nodes = {n["id"] for n in report["capture"]["graph"]["nodes"]} if "graph" in report["capture"] else None
    conversions = []
    for tid in ("executorch-xnnpack", "coreai-cpu", "inductor-cpu"):
        t = report["targets"][tid]
        assert t["status"] == "ok", (tid, t["error"])
        conversions.append(t["info"]["onnx_conversion"])
        assert report["alignment"]["coverage"][tid]["ratio"] > 0.5, tid
        assert t["drift"]["worst"]["rel_l2"] < 1e-4, tid
        if onnx_nodes:
            assert {s for n in t["graph"]["nodes"] for s in n.get("source_ops") or []} <= onnx_nodes
    assert all(c == conversions[0] for c in conversions)        # one route, one program for all
    # per-layer values come back in the ONNX node names (Core AI's runtime logger, through the program)
    assert len(report["targets"]["coreai-cpu"]["layer_drift"]["points"]) > 0
    route = report["capture"]["onnx_route"]
    assert route["evidence"] == "measured" and set(route["targets"]) == {"executorch-xnnpack", "coreai-cpu",
                                                                         "inductor-cpu"}
    from xc_core.review.html import report_html
    from xc_core.review.markdown import report_markdown
    assert "ONNX → PyTorch route (measured)" in report_markdown(report)
    assert "ONNX → PyTorch route" in report_html(report)


@pytest.mark.slow
def test_nested_ifs_and_an_input_only_a_condition_reads(tmp_path):
    """silero-vad's shape: an If on a scalar input (the sample rate) whose branch holds an If on the data. Both are
    specialised, one level at a time; the scalar is no input of the program, and ExecuTorch and Core AI run it."""
    from realistic_models import branch_onnx
    inner_then = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["a"])], "t", [],
                                   [helper.make_tensor_value_info("a", TensorProto.FLOAT, None)])
    inner_else = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "e", [],
                                   [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    outer_then = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
         helper.make_node("Greater", ["m", "zero"], ["big"]),
         helper.make_node("If", ["big"], ["inner"], name="inner_if", then_branch=inner_then,
                          else_branch=inner_else)], "outer_then", [],
        [helper.make_tensor_value_info("inner", TensorProto.FLOAT, None)])
    outer_else = helper.make_graph([helper.make_node("Sub", ["x", "two"], ["c"])], "outer_else", [],
                                   [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)])
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(16000, np.int64), "k")]
    nodes = [helper.make_node("Equal", ["rate", "k"], ["is16k"], name="is16k"),
             helper.make_node("If", ["is16k"], ["y"], name="outer_if", then_branch=outer_then,
                              else_branch=outer_else)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
                           helper.make_tensor_value_info("rate", TensorProto.INT64, [])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    record = _close(_route(tmp_path, model, {"x": np.abs(_x(2, 5)), "rate": np.array(16000, np.int64)}))
    kept = [n for n in record["preprocessing"] if n.startswith("If '")]
    assert len(kept) == 2 and "then branch" in kept[0] and "then branch" in kept[1], kept
    assert record["program_inputs"] == ["x"]
    assert set(record["origin"].values()) == {"outer_if"}
    report = analyze(branch_onnx(str(tmp_path / "branch.onnx")), ["executorch-xnnpack", "coreai-cpu"])
    for tid, t in report["targets"].items():
        assert t["status"] == "ok", (tid, t["error"])
        assert t["drift"]["worst"]["rel_l2"] < 1e-6, tid
    assert "The program takes no rate" in " ".join(onnx_route_lines(report))


@pytest.mark.slow
def test_a_0d_input_the_program_reads_reaches_the_runtimes_as_0d(tmp_path):
    """silero-vad (opset 15) adds its int64 sample rate, scaled to nothing, into its state output: a 0-d input the
    program reads. Each runtime gets it 0-d (ExecuTorch's set_inputs refused it made 1-d, Core AI's runtime
    crashed), and the Core ML delegate gets the (1,) shape coremltools gives a scalar."""
    inits = [numpy_helper.from_array(np.array(1e-9, np.float32), "tiny")]
    nodes = [helper.make_node("Cast", ["rate"], ["rate_f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["rate_f", "tiny"], ["nudge"]),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Add", ["r", "nudge"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
                           helper.make_tensor_value_info("rate", TensorProto.INT64, [])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])], inits)
    path = str(tmp_path / "rate.onnx")
    onnx.save(model, path)
    report = analyze(path, ["executorch-xnnpack", "executorch-coreml", "coreai-cpu"],
                     values={"rate": 16000}, out_dir=str(tmp_path / "out"))
    assert report["capture"]["onnx_route"]["program_inputs"] == ["x", "rate"]
    assert "takes no" not in " ".join(onnx_route_lines(report))
    for tid, t in report["targets"].items():
        assert t["status"] == "ok", (tid, t["error"])
        assert t["drift"]["worst"]["rel_l2"] < (1e-2 if tid == "executorch-coreml" else 1e-5), tid   # fp16 there


@pytest.mark.slow
def test_programs_above_the_node_limit_skip_the_pytorch_side_targets_and_the_route(tmp_path):
    """Above --max-program-nodes the targets that compile a PyTorch program are skipped, each saying the size, the
    limit and the flag; an ONNX upload's route is not built at all (the limit reaches the isolated route job);
    the ONNX-native targets run as ever."""
    from xc_core.limits import Limits
    report = analyze(chain_onnx(tmp_path / "chain.onnx", 12), ["ort-cpu", "coreml-cpu", "litert-xnnpack"],
                     limits=Limits(max_program_nodes=10))
    assert report["targets"]["ort-cpu"]["status"] == "ok"
    for tid in ("coreml-cpu", "litert-xnnpack"):
        t = report["targets"][tid]
        assert t["status"] == "unavailable", (tid, t["error"])
        assert "the ONNX model has 12 nodes, above the 10-node limit" in t["error"]
        assert "--max-program-nodes" in t["error"] and "XC_MAX_PROGRAM_NODES" in t["error"]
        assert t["info"]["skipped_above_size"]["limit"] == 10
    route = report["capture"]["onnx_route"]
    assert route["skipped"]["nodes"] == 12 and "program_nodes" not in route and "error" not in route
    assert route["targets"] == ["coreml-cpu", "litert-xnnpack"]
    assert onnx_route_lines(report)[0].startswith("The ONNX was not made a PyTorch program, so coreml-cpu, "
                                                  "litert-xnnpack did not compile it: the ONNX model has 12 nodes")
    # A PyTorch source: the captured program itself is measured, in process too.
    report = analyze("sample:vision-mini", ["coreml-cpu"], limits=Limits(max_program_nodes=5), isolate=False)
    t = report["targets"]["coreml-cpu"]
    assert t["status"] == "unavailable" and "the program has" in t["error"] and "--max-program-nodes" in t["error"]


# ---------------------------------------------------------------- the route's own error, checked and located ----
class _CumSumNet(torch.nn.Module):
    """The issue's model: Conv → BN → ReLU → mean → Linear → GELU → CumSum(axis -1)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.bn, self.fc = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.Linear(8, 6)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        y = torch.nn.functional.gelu(self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3))))
        return torch.cumsum(y, -1)


def _cumsum_onnx(tmp_path):
    """Exported as the issue's was (TorchScript exporter, opset 17): CumSum without a `reverse` attribute."""
    path = str(tmp_path / "cumsum.onnx")
    torch.onnx.export(_CumSumNet().eval(), (torch.randn(1, 3, 12, 12),), path, dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    model = onnx.load(path)
    cumsum = next(n for n in model.graph.node if n.op_type == "CumSum")
    assert "reverse" not in {a.name for a in cumsum.attribute}
    return model, cumsum.name


def test_the_issues_cumsum_model_converts_within_1e6_and_hands_its_outputs_on(tmp_path):
    model, cumsum = _cumsum_onnx(tmp_path)
    feeds = {"x": _x(1, 3, 12, 12)}
    record = _close(_route(tmp_path, model, feeds))
    drift = record["conversion_drift"]["y"]
    assert drift["rel_l2"] <= 1e-6 and drift["shape_match"] and drift["dtype_match"], drift
    assert "first_departure" not in record             # nothing departs: the localisation never ran
    note = next(n for n in record["preprocessing"] if n.startswith("CumSum"))
    assert f"'{cumsum}'" in note and "reverse" in note and "onnx2torch reads as 1" in note
    # the program's own outputs at the analysis inputs, for the analyses that measure the compilers against it
    with np.load(record["program_outputs_path"], allow_pickle=False) as saved:
        assert list(saved.keys()) == ["y"]
        program = torch.export.load(record["program_path"]).module()
        np.testing.assert_array_equal(saved["y"], program(torch.from_numpy(feeds["x"])).detach().numpy())


def test_a_departing_route_names_the_first_onnx_node_that_departs(tmp_path, monkeypatch):
    """onnx2torch's own CumSum default brought back (xc's spelled-out defaults undone): the route's output departs,
    and the node-by-node comparison against ONNX Runtime names the CumSum — not the Conv before it, not the
    output."""
    from xc_core.onnx_route import graph_prep
    model, cumsum = _cumsum_onnx(tmp_path)
    monkeypatch.setattr(graph_prep, "spell_out_defaults", lambda m: [])
    record = _route(tmp_path, model, {"x": _x(1, 3, 12, 12)})
    assert record["conversion_drift"]["y"]["rel_l2"] > 0.1
    found = record["first_departure"]
    assert found["node"] == cumsum and found["op_type"] == "CumSum" and found["output"] == "y", found
    assert found["rel_l2"] > 0.1 and found["compared"] > 5       # the nodes before it were compared and agreed


def _nonzero_model():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("NonZero", ["r"], ["y"], name="where_positive")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                  [helper.make_tensor_value_info("y", TensorProto.INT64, None)])


def test_a_shape_that_differs_is_a_finding_not_a_small_error(tmp_path, monkeypatch):
    """NonZero as onnx2torch computed it ([count, rank], ONNX says [rank, count]): the route's drift says the
    shapes differ, gives no value metric, departs, and names the node."""
    from xc_core.onnx_route import modules
    x = np.array([[1, 0, 2, 0], [0, 3, 0, 0], [4, 0, 0, 5]], np.float32)
    assert _close(_route(tmp_path, _nonzero_model(), {"x": x}))["conversion_drift"]["y"]["exact"]
    monkeypatch.setattr(modules.NonZero, "forward", lambda self, t: torch.nonzero(t))
    record = _route(tmp_path, _nonzero_model(), {"x": x})
    entry = record["conversion_drift"]["y"]
    assert entry["shape_match"] is False and entry["shape"] == [5, 2] and entry["reference_shape"] == [2, 5]
    assert "cannot be trusted" in entry["error"] and "rel_l2" not in entry
    assert record["first_departure"]["node"] == "where_positive" and "shape" in record["first_departure"]["why"]


def test_a_dtype_that_differs_is_a_finding(tmp_path, monkeypatch):
    """Pow of an int64 base keeps int64 in ONNX; torch promotes to float."""
    from xc_core.onnx_route import modules
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    nodes = [helper.make_node("Pow", ["x", "two"], ["y"], name="square")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.INT64, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, None)], inits)
    feeds = {"x": np.array([1, 2, 3, 4], np.int64)}
    assert _close(_route(tmp_path, model, feeds))["conversion_drift"]["y"]["exact"]
    monkeypatch.setattr(modules.Pow, "forward", lambda self, a, b: torch.pow(a, b))
    entry = _route(tmp_path, model, feeds)["conversion_drift"]["y"]
    assert entry["dtype_match"] is False and entry["dtype"] == "float32" and entry["reference_dtype"] == "int64"
    assert "cannot be trusted" in entry["error"] and "rel_l2" not in entry
