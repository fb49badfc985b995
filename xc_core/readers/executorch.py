"""ExecuTorch programs → IR. After `to_edge_transform_and_lower`, the program's graph holds one
`executorch_call_delegate` call per delegated subgraph (its `lowered_module_N` keeps the Edge-dialect subgraph it
took, `original_module`) and the ops no delegate took, which run on ExecuTorch's own CPU kernels. The IR expands
each delegate into the ops it holds, so a delegate and the ops left outside it sit in one graph; tensors are named
so the edges between them line up (a delegate's inputs are the caller's arguments, its outputs the `getitem`s
that read them).

Provenance: every Edge node's `from_node` metadata chains back through `to_edge`'s decompositions (and a PT2E
quantization's re-export) to the node of the captured ExportedProgram it came from.
"""
from __future__ import annotations

import operator

from ..ir import ALIAS, CAST, COMPUTE, Graph, Node, TensorInfo
from .exported_program import _location, _module_path, _shape_dtype

DELEGATE_CALL = "executorch_call_delegate"
# Quantize / dequantize ops a PT2E flow inserts: conversions, not compute (XNNPACK folds them into int8 kernels).
_QDQ = ("quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel", "dequantize_per_channel",
        "choose_qparams")


def source_origin(node, source_ids: set[str]) -> str | None:
    """The captured-program node an Edge node came from: the earliest node in its `from_node` chain that is one."""
    chain = node.meta.get("from_node") or []
    found = node.name if node.name in source_ids else None
    while chain:
        src = chain[-1]
        if src.name in source_ids:
            found = src.name
        chain = src.from_node
    return found


def op_name(target) -> str:
    """executorch's EdgeOpOverload aten.mean.dim → 'aten.mean.dim'; operator.getitem → 'getitem'."""
    text = getattr(target, "_name", None) or str(target)
    text = text.replace("<EdgeOpOverload: ", "").split(">")[0].split(":")[0].strip()
    return text if "." in text else getattr(target, "__name__", text)


def op_type_of(target) -> str:
    """'aten.convolution.default' → 'convolution'; 'quantized_decomposed.dequantize_per_tensor.default' →
    'dequantize_per_tensor'; 'aten.mean.dim' → 'mean' (namespace.op.overload: the middle part)."""
    parts = op_name(target).split(".")
    return parts[-2] if len(parts) >= 3 else parts[-1]


def is_delegate_call(node) -> bool:
    return node.op == "call_function" and getattr(node.target, "__name__", "") == DELEGATE_CALL


def lowered_modules(edge_ep) -> list[tuple[str, object]]:
    """(name, LoweredBackendModule) per delegate call, in the order the program calls them."""
    gm = edge_ep.graph_module
    out = []
    for n in edge_ep.graph.nodes:
        if is_delegate_call(n):
            name = n.args[0].target
            out.append((name, getattr(gm, name)))
    return out


class ProgramReader:
    """Reads one partitioned Edge program. `graph(..., expand=)` may replace each delegate's Edge subgraph by what
    the backend compiled (Core ML's ML program): `expand(reader, graph, module_name, lowered, args, outs,
    backend)` appends its nodes; by default (and from `expand` through `reader.expand_edge`) a delegate's nodes are
    its Edge ops."""

    def __init__(self, edge_ep, source_index: dict, backend_of: dict[str, str], cpu_kernel: str = "portable"):
        self.ep = edge_ep
        self.source_ids = set(source_index)
        self.source_index = source_index
        self.backend_of = backend_of          # backend id (XnnpackBackend) → IR backend (xnnpack)
        self.cpu_kernel = cpu_kernel
        self.delegates: list[dict] = []       # per delegate: name, backend, node ids, input / output tensors

    def graph(self, name: str, stage: str, expand=None) -> Graph:
        g = Graph(name=name, stage=stage)
        gm = self.ep.graph_module
        user_inputs = set(self.ep.graph_signature.user_inputs)
        getitems: dict[str, dict[int, str]] = {}     # delegate call → output index → the getitem reading it
        for n in self.ep.graph.nodes:
            if n.op == "call_function" and n.target is operator.getitem and is_delegate_call(n.args[0]):
                getitems.setdefault(n.args[0].name, {})[n.args[1]] = n.name
        for n in self.ep.graph.nodes:
            if n.op == "placeholder" and n.name in user_inputs:
                g.inputs.append(TensorInfo(n.name, *_shape_dtype(n.meta.get("val"))))
            elif n.op == "output":
                for a in n.args[0] if isinstance(n.args[0], (list, tuple)) else [n.args[0]]:
                    if hasattr(a, "name"):
                        g.outputs.append(TensorInfo(a.name, *_shape_dtype(a.meta.get("val"))))
            elif is_delegate_call(n):
                module_name = n.args[0].target
                lowered = getattr(gm, module_name)
                args = [a.name for a in n.args[1:] if hasattr(a, "name")]
                outs = getitems.get(n.name, {})
                backend = self.backend_of.get(lowered.backend_id, lowered.backend_id.lower())
                before = len(g.nodes)
                if expand is not None:
                    expand(self, g, module_name, lowered, args, outs, backend)
                else:
                    self.expand_edge(g, module_name, lowered, args, outs, backend)
                self.delegates.append({"name": module_name, "backend_id": lowered.backend_id, "backend": backend,
                                       "nodes": [x.id for x in g.nodes[before:]],
                                       "processed_bytes": len(lowered.processed_bytes or b"")})
            elif n.op == "call_function":
                if n.target is operator.getitem and is_delegate_call(n.args[0]):
                    continue           # the delegate's output, already named after this getitem
                g.nodes.append(self._node(n, n.name, [a.name for a in n.all_input_nodes], n.name,
                                          backend="cpu", kernel=f"{self.cpu_kernel} {op_name(n.target)}"))
        return g

    def expand_edge(self, g: Graph, module_name: str, lowered, args: list[str], outs: dict, backend: str) -> None:
        """A delegate as the Edge ops it took, ids `lowered_module_0/aten_relu_default`."""
        sub = lowered.original_module
        names: dict[str, str] = {}
        placeholders = [p for p in sub.graph.nodes if p.op == "placeholder"]
        users = [p for p in placeholders if p.name in set(sub.graph_signature.user_inputs)]
        for p, arg in zip(users, args):
            names[p.name] = arg
        for p in placeholders:
            names.setdefault(p.name, p.name)           # weights and buffers keep their names
        output = next(x for x in sub.graph.nodes if x.op == "output")
        returned = output.args[0] if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
        for i, r in enumerate(returned):
            if hasattr(r, "name") and i in outs:
                names[r.name] = outs[i]
        for x in sub.graph.nodes:
            if x.op == "call_function":
                names.setdefault(x.name, f"{module_name}/{x.name}")
        for x in sub.graph.nodes:
            if x.op != "call_function":
                continue
            g.nodes.append(self._node(x, f"{module_name}/{x.name}", [names.get(a.name, a.name) for a in
                                                                     x.all_input_nodes], names[x.name],
                                      backend=backend, kernel=f"{module_name} ({lowered.backend_id})"))
            g.nodes[-1].attributes["delegate"] = module_name

    def _node(self, n, node_id: str, inputs: list[str], output: str, backend: str, kernel: str) -> Node:
        kind = ALIAS if n.target is operator.getitem else CAST if op_type_of(n.target) in _QDQ else COMPUTE
        origin = source_origin(n, self.source_ids)
        src = self.source_index.get(origin)
        vals = {a.name: a.meta.get("val") for a in n.all_input_nodes}
        return Node(
            id=node_id, op_type=op_type_of(n.target) if n.target is not operator.getitem else "getitem",
            domain="edge", kind=kind,
            inputs=[TensorInfo(name, *_shape_dtype(vals.get(a.name))) for name, a in zip(inputs, n.all_input_nodes)],
            outputs=[TensorInfo(output, *_shape_dtype(n.meta.get("val")))],
            attributes={"target": op_name(n.target)}, backend=backend, kernel=kernel,
            source_ops=[origin] if origin else [],
            module_path=(src.module_path if src is not None else _module_path(n.meta.get("nn_module_stack"))),
            source_location=(src.source_location if src is not None else _location(n.meta.get("stack_trace"))))
