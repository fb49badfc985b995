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
    assert set(d["nodes"][0]) == {f.name for f in fields(Node)}
    assert d["nodes"] == [asdict(n) for n in g.nodes]
    assert Graph.from_dict(d) == g
