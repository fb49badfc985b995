"""OpenVINO → IR: an openvino.Model (an IR as read, or a model after OpenVINO's transformations) read into xc's
graph IR, one node per op named by its friendly name, with the names of the ops a transformation merged into it."""
from __future__ import annotations

from ..ir import CAST, COMPUTE, CONSTANT, IO, LAYOUT, Graph, Node, TensorInfo

LAYER_KINDS = {"Input": IO, "Parameter": IO, "Output": IO, "Result": IO, "Const": CONSTANT, "Constant": CONSTANT,
               "Reorder": LAYOUT, "Convert": CAST}


def openvino_model_graph(model, stage: str) -> Graph:
    """An openvino.Model (an IR as read) in the IR: one node per op, named by its friendly name."""
    g = Graph(name=stage, stage=stage)
    known: dict = {}
    for op in model.get_ordered_ops():
        kind = LAYER_KINDS.get(op.get_type_name(), COMPUTE)
        inputs, outputs = port_tensors(op, known)
        name = op.get_friendly_name()
        rt = op.get_rt_info()
        # The names of the ops a transformation merged into this one (what the runtime model's
        # originalLayersNames are made from).
        fused = rt["fused_names_0"].astype(str) if "fused_names_0" in rt.keys() else ""
        g.nodes.append(Node(id=name, op_type=op.get_type_name(), domain="openvino", kind=kind, inputs=inputs,
                            outputs=outputs, source_ops=[name] if kind == COMPUTE else [],
                            attributes={"fused_names": [f for f in fused.split(",") if f]}))
    g.inputs, g.outputs = graph_io(model)
    return g


def port_tensors(op, known: dict | None = None) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """An op's input and output tensors, named "<producer friendly name>:<port>". `known` (filled here, ops given
    in topological order) holds the outputs already read, so a producer's shape and type are read from OpenVINO
    once, not again for each consumer (half of the reading time of a big model)."""
    known = {} if known is None else known
    inputs = []
    for inp in op.inputs():
        prod = inp.get_source_output()
        name = f"{prod.get_node().get_friendly_name()}:{prod.get_index()}"
        t = known.get(name)
        # a copy: nodes own their TensorInfo (readers rename them in place)
        inputs.append(TensorInfo(name, None if t.shape is None else list(t.shape), t.dtype) if t is not None else
                      TensorInfo(name, _shape(prod.get_partial_shape()), prod.get_element_type().get_type_name()))
    outputs = [TensorInfo(f"{op.get_friendly_name()}:{o.get_index()}", _shape(o.get_partial_shape()),
                          o.get_element_type().get_type_name()) for o in op.outputs()]
    for t in outputs:
        known[t.name] = t
    return inputs, outputs


def graph_io(model) -> tuple[list[TensorInfo], list[TensorInfo]]:
    return ([TensorInfo(p.get_friendly_name(), _shape(p.get_partial_shape()), p.get_element_type().get_type_name())
             for p in model.get_parameters()],
            [TensorInfo(r.get_friendly_name(), _shape(r.get_output_partial_shape(0)),
                        r.get_element_type().get_type_name()) for r in model.get_results()])


def _shape(ps) -> list | None:
    if ps.rank.is_dynamic:
        return None
    # By index: iterating a PartialShape ends on an IndexError raised through pybind11, ~10× slower per shape.
    dims = (ps[i] for i in range(ps.rank.get_length()))
    return [d.get_length() if d.is_static else "?" for d in dims]
