"""The IR serialises every field, the same as dataclasses.asdict would, and reads back to an equal graph."""
from dataclasses import asdict, fields

from xc_core.ir import Graph, Node, TensorInfo


def test_to_dict_writes_every_field_as_asdict_would_and_reads_back():
    node = Node("n1", "Conv", domain="ai.onnx", inputs=[TensorInfo("x", [1, "h", None], "float32")],
                outputs=[TensorInfo("y", None, None)], attributes={"pads": [1, 1], "group": 2, "nested": {"a": [1]}},
                backend="cpu", kernel="k", precision="fp32", source_ops=["conv"], module_path="m.conv",
                source_location="f.py:3", fused_from=["a", "b"], fallback=True, fallback_reason="unsupported")
    g = Graph("g", "onnx", [node, Node("c", "Constant", kind="constant")], [TensorInfo("x")], [TensorInfo("y")])
    d = g.to_dict()
    # estimated_us (a compiler's estimate) is written only where a compiler estimated the node: the reports of
    # every other target stay as they were
    assert set(d["nodes"][0]) == {f.name for f in fields(Node)} - {"estimated_us"}
    assert d["nodes"] == [{k: v for k, v in asdict(n).items() if k != "estimated_us"} for n in g.nodes]
    assert Graph.from_dict(d) == g
    node.estimated_us = 1.5
    d = g.to_dict()
    assert d["nodes"][0]["estimated_us"] == 1.5 and Graph.from_dict(d) == g and g.nodes[0].time_us == 1.5
