"""ONNX → IR: an ONNX ModelProto read into xc's graph IR (one node per ONNX node, tensors with shapes and dtypes
where shape inference gives them). Used for the captured ONNX and for every graph an ONNX toolchain writes back
(ORT's optimized models, the int8 model, the EP-partitioned model)."""
from __future__ import annotations

import math

from ..ir import COMPUTE, CONSTANT, Graph, Node, TensorInfo


def name_unnamed_nodes(model) -> None:
    """Targets identify nodes by name: give unnamed (or duplicate) nodes stable, unique names, in place."""
    seen = {n.name for n in model.graph.node if n.name}
    used = set()
    for i, n in enumerate(model.graph.node):
        if not n.name or n.name in used:
            name = f"{n.op_type}_{i}"
            while name in seen:
                name += "_"
            n.name = name
        used.add(n.name)
        seen.add(n.name)


def onnx_ir_graph(model, stage: str) -> Graph:
    """An ONNX ModelProto in the IR. Shapes and dtypes come from ONNX shape inference where it succeeds."""
    import onnx
    from onnx import helper
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:
        inferred = model
    types = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        types[vi.name] = _vi_shape_dtype(vi)
    for init in model.graph.initializer:
        types[init.name] = (list(init.dims), helper.tensor_dtype_to_np_dtype(init.data_type).name)
    initializers = {i.name for i in model.graph.initializer}

    def tensor(name):
        shape, dtype = types.get(name, (None, None))
        return TensorInfo(name, shape, dtype)

    g = Graph(name=model.graph.name or "onnx", stage=stage)
    g.inputs = [tensor(i.name) for i in model.graph.input if i.name not in initializers]
    g.outputs = [tensor(o.name) for o in model.graph.output]
    from .exported_program import bounded
    plain = (onnx.AttributeProto.FLOAT, onnx.AttributeProto.INT, onnx.AttributeProto.STRING,
             onnx.AttributeProto.FLOATS, onnx.AttributeProto.INTS, onnx.AttributeProto.STRINGS)
    for i, n in enumerate(model.graph.node):
        attrs = {}
        for a in n.attribute:
            if a.type not in plain:      # graphs, tensors, sparse tensors, type protos: named, not copied
                attrs[a.name] = f"<{onnx.AttributeProto.AttributeType.Name(a.type).lower()}>"
            else:
                v = helper.get_attribute_value(a)
                v = v.decode("utf-8", "replace") if isinstance(v, bytes) else (list(v) if isinstance(v, (list, tuple)) else v)
                if isinstance(v, list):
                    v = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
                # JSON has no inf / NaN; a long list or string (an EP's cached context blob) is kept as a digest.
                if isinstance(v, float) and not math.isfinite(v):
                    v = str(v)
                attrs[a.name] = bounded(v)
        attrs["_metadata"] = {p.key: p.value for p in n.metadata_props}
        kind = CONSTANT if n.op_type == "Constant" else COMPUTE
        g.nodes.append(Node(id=n.name or f"{n.op_type}_{i}", op_type=n.op_type, domain=n.domain, kind=kind,
                            inputs=[tensor(x) for x in n.input if x], outputs=[tensor(x) for x in n.output if x],
                            attributes=attrs))
    return g


def _vi_shape_dtype(vi):
    from onnx import helper
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        return None, None
    dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else None
    if not tt.HasField("shape"):
        return None, dtype
    shape = [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
    return shape, dtype
