"""Capture: the ExportedProgram is the "before" graph; every ONNX node is traced back to a source op."""
import pytest

from tiny_models import conv_bn_relu
from xc_core.capture import capture
from xc_core.inputs.values import random_inputs
from xc_core.sources.spec import InputSpec, Source


def _source(model, args):
    return Source(kind="sample", name="tiny", sha256="0" * 64,
                  inputs=[InputSpec("x", list(args[0].shape), "float32")], module=model)


@pytest.mark.slow
def test_exported_program_is_the_before_graph(tmp_path):
    model, args = conv_bn_relu()
    src = _source(model, args)
    cap = capture(src, str(tmp_path), random_inputs(src.inputs))
    ops = [n.op_type for n in cap.before.compute_nodes()]
    assert ops == ["conv2d", "batch_norm", "relu", "mean", "linear"]
    by_op = {n.op_type: n for n in cap.before.nodes}
    assert by_op["conv2d"].module_path == "conv" and by_op["linear"].module_path == "head"
    assert by_op["relu"].source_location.startswith("tiny_models.py:")


def test_every_onnx_node_maps_to_a_source_op(tmp_path):
    model, args = conv_bn_relu()
    src = _source(model, args)
    cap = capture(src, str(tmp_path), random_inputs(src.inputs))
    compute = cap.onnx_graph.compute_nodes()
    assert compute and all(n.source_ops for n in compute)
    bn = next(n for n in compute if n.op_type == "BatchNormalization")
    assert bn.source_ops == ["batch_norm"] and bn.module_path == "bn"
    # The exporter's optimizer is off: BatchNorm is still there for the target compilers to fuse.
    assert [n.op_type for n in compute][:3] == ["Conv", "BatchNormalization", "Relu"]
