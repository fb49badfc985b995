"""Weight records (analysis/model_weights.py) and the captured graph's aten arguments (readers/exported_program.py):
what the model diff compares beyond op types."""
import hashlib
import json

import numpy as np
import pytest
import torch
from torch import nn

from model_pairs import FC_SCALE, base_model, example_inputs, head_model
from tflite_builders import classifier
from xc_core.analysis.model_weights import records_from_onnx, records_from_program, records_from_tflite
from xc_core.readers.tflite import TENSOR_TYPES
from xc_core.readers.exported_program import MAX_ARGUMENT_CHARS, bounded, exported_program_graph


def _program(model, args=None):
    return torch.export.export(model, args or example_inputs())


@pytest.fixture(scope="module")
def programs():
    return {"base": _program(base_model()), "again": _program(base_model()), "head": _program(head_model())}


def _by_name(records):
    return {r["name"]: r for r in records}


def test_records_are_the_same_for_two_captures_of_one_model(programs):
    first = records_from_program(programs["base"], exported_program_graph(programs["base"], "m", arguments=True))
    second = records_from_program(programs["again"], exported_program_graph(programs["again"], "m", arguments=True))
    assert first == second
    # parameters, persistent buffers (running stats, the batch counter): every tensor of the state dict
    assert {r["name"] for r in first} == set(base_model().state_dict())


def test_only_the_retrained_tensor_and_the_inserted_block_hash_differently(programs):
    base = _by_name(records_from_program(programs["base"]))
    head = _by_name(records_from_program(programs["head"]))

    def renumbered(name):          # the base's key of a head tensor, or None for the inserted block's own
        parts = name.split(".")
        if parts[0] == "blocks":
            index = int(parts[1])
            if index == 1:
                return None
            parts[1] = str(index - 1 if index > 1 else index)
        return ".".join(parts)
    changed = {name for name, r in head.items()
               if renumbered(name) is not None and r["sha256"] != base[renumbered(name)]["sha256"]}
    assert changed == {"head.fc.weight"}
    fc_b, fc_h = base["head.fc.weight"], head["head.fc.weight"]
    assert fc_h["l2"] == pytest.approx(FC_SCALE * fc_b["l2"], rel=1e-6)
    assert (fc_h["shape"], fc_h["dtype"], fc_h["numel"]) == ([5, 8], "float32", 40)


def test_a_record_links_to_the_node_inputs_that_read_it(programs):
    ep = programs["base"]
    graph = exported_program_graph(ep, "m", arguments=True)
    records = _by_name(records_from_program(ep, graph))
    readers = {}
    for node in graph.nodes:
        for t in node.inputs:
            readers.setdefault(t.name, node)
    fc = records["head.fc.weight"]
    assert fc["graph_name"] == "p_head_fc_weight" and readers[fc["graph_name"]].op_type == "linear"
    assert fc["module_path"] == "head.fc" == readers[fc["graph_name"]].module_path
    assert records["blocks.2.conv1.weight"]["module_path"] == "blocks.2.conv1"
    # read by no node (torch.export keeps it as an input): its owner read off its name
    assert records["stem.1.num_batches_tracked"]["module_path"] == "stem.1"
    values = ep.state_dict["head.fc.weight"].detach().numpy()
    assert fc["sha256"] == hashlib.sha256(values.tobytes()).hexdigest()
    assert fc["l2"] == pytest.approx(float(np.linalg.norm(values.astype(np.float64))), rel=1e-12)


class _Mixed(nn.Module):
    """A bf16 parameter, a bool and an int buffer, a lifted tensor constant."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.linspace(-2, 2, 12, dtype=torch.bfloat16).reshape(3, 4))
        self.register_buffer("mask", torch.tensor([True, False, True, True]))
        self.register_buffer("steps", torch.arange(4, dtype=torch.int64), persistent=False)
        self.scale = torch.tensor([0.5, 2.0, 1.0, 4.0])

    def forward(self, x):
        return (x.to(torch.bfloat16) @ self.w.t()).float().sum() + (self.mask * self.steps * self.scale).sum()


def test_bf16_bool_int_and_constant_tensors_are_recorded():
    ep = _program(_Mixed(), (torch.ones(2, 4),))
    records = _by_name(records_from_program(ep, exported_program_graph(ep, "m", arguments=True)))
    w = records["w"]
    bits = ep.state_dict["w"].detach().view(torch.int16).numpy()
    assert w["dtype"] == "bfloat16" and w["sha256"] == hashlib.sha256(bits.tobytes()).hexdigest()
    assert w["l2"] == pytest.approx(float(torch.linalg.vector_norm(ep.state_dict["w"].detach().double())), rel=1e-12)
    assert records["mask"]["dtype"] == "bool" and records["mask"]["l2"] is None
    assert records["steps"]["dtype"] == "int64" and records["steps"]["l2"] == pytest.approx(14 ** 0.5)
    constant = next(r for r in records.values() if r["graph_name"].startswith("c_"))
    assert constant["l2"] == pytest.approx((0.25 + 4 + 1 + 16) ** 0.5) and constant["shape"] == [4]
    json.dumps(list(records.values()), allow_nan=False)      # plain JSON, as the report holds it


def test_onnx_records_hash_like_the_program_and_take_any_storage():
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    values = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    hostile = 'fc.weight"; rm -rf / <script>\u202e'
    raw = numpy_helper.from_array(values, hostile)                                  # raw_data
    typed = helper.make_tensor("typed", TensorProto.FLOAT, [2, 3], values.ravel().tolist())   # float_data
    constant = helper.make_node("Constant", [], ["shape"], name="c",
                                value=numpy_helper.from_array(np.array([3, 2], np.int64)))
    nodes = [constant, helper.make_node("Add", [hostile, "typed"], ["sum"], name="add"),
             helper.make_node("Reshape", ["sum", "shape"], ["y"], name="reshape")]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
                              initializer=[raw, typed])
    records = _by_name(records_from_onnx(helper.make_model(graph)))
    digest = hashlib.sha256(values.tobytes()).hexdigest()
    assert records[hostile]["sha256"] == records["typed"]["sha256"] == digest
    assert records[hostile]["graph_name"] == hostile and records[hostile]["module_path"] == "fc"
    assert records["shape"]["dtype"] == "int64" and records["shape"]["l2"] == pytest.approx(13 ** 0.5)
    assert onnx.checker.check_model(helper.make_model(graph)) is None


def test_tflite_records_are_its_constant_tensors():
    records = records_from_tflite(classifier(), TENSOR_TYPES)
    assert [(r["name"], r["shape"], r["dtype"], r["module_path"]) for r in records] == \
        [("bias", [1, 4], "float32", None)]
    bias = np.array([[0.5, -1.0, 2.0, 0.0]], np.float32)
    assert records[0]["sha256"] == hashlib.sha256(bias.tobytes()).hexdigest()
    assert records[0]["l2"] == pytest.approx(float(np.linalg.norm(bias)))


class _Args(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.conv2d(x, torch.ones(2, 3, 3, 3), stride=2, padding=1)
        return y.sum(dim=(2, 3), keepdim=True).to(torch.float16), x.reshape(x.shape[0], -1)


def test_aten_nodes_carry_their_non_tensor_arguments():
    batch = torch.export.Dim("batch", min=2)
    ep = torch.export.export(_Args(), (torch.ones(2, 3, 8, 8),), dynamic_shapes=({0: batch},))
    by_op = {n.op_type: n for n in exported_program_graph(ep, "m", arguments=True).nodes}
    assert by_op["conv2d"].attributes == {"target": "aten.conv2d.default", "stride": [2, 2], "padding": [1, 1]}
    assert by_op["sum"].attributes["dim"] == [2, 3] and by_op["sum"].attributes["keepdim"] is True
    assert by_op["to"].attributes["dtype"] == "float16"
    symbol, rest = by_op["reshape"].attributes["shape"]
    assert rest == -1 and symbol == str(ep.range_constraints and next(iter(ep.range_constraints)))   # the batch dim
    # other stage graphs keep only the target
    plain = {n.op_type: n for n in exported_program_graph(ep, "m").nodes}
    assert plain["conv2d"].attributes == {"target": "aten.conv2d.default"}


def test_long_arguments_are_kept_as_a_digest():
    short = list(range(10))
    assert bounded(short) == short and bounded(3.5) == 3.5
    long_a, long_b = list(range(1000)), list(range(1, 1001))
    a, b = bounded(long_a), bounded(long_b)
    assert isinstance(a, str) and len(a) < 60 and a.startswith("<1000 items") and a != b
    assert len(json.dumps(bounded("x" * 5000))) <= MAX_ARGUMENT_CHARS
