"""Model-controlled names never reach generated code. onnx2torch names each submodule after its ONNX node and
torch.fx writes `forward` as Python source holding those names (`getattr(self, "<name>")`, unescaped), so a node
name that closes the quote would run as Python in the worker. Before onnx2torch sees the graph every node, value,
initializer and graph input/output is renamed to a plain identifier (`n0`, `v0`, …) and the mapping kept, so
provenance, reports and drift still show the model's own names."""
from __future__ import annotations

import re

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def safe_names(model) -> tuple[object, dict[str, str]]:
    """A copy of `model` whose names are all plain identifiers, and {new name: the model's name} for its nodes and
    values.

    Every node becomes `n<i>` and every value (graph inputs and outputs, initializers, value_info, node inputs and
    outputs, in subgraphs too) `v<i>`: one consistent renaming, so the graph computes the same. The default domain
    spelled "ai.onnx" becomes "" (onnx2torch puts the domain in the module name)."""
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(model)
    values: dict[str, str] = {}
    nodes: dict[str, str] = {}

    def value(name: str) -> str:
        if not name:            # an omitted optional input or output stays omitted
            return name
        if name not in values:
            values[name] = f"v{len(values)}"
        return values[name]

    def graph(g) -> None:
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            vi.name = value(vi.name)
        for t in g.initializer:
            t.name = value(t.name)
        for st in g.sparse_initializer:
            st.values.name = value(st.values.name)
            st.indices.name = value(st.indices.name)
        for n in g.node:
            new = f"n{len(nodes)}"
            nodes[new] = n.name
            n.name = new
            if n.domain == "ai.onnx":
                n.domain = ""
            n.input[:] = [value(x) for x in n.input]
            n.output[:] = [value(x) for x in n.output]
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    graph(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sub in a.graphs:
                        graph(sub)
        g.name = "g"

    graph(m.graph)
    return m, {**nodes, **{new: old for old, new in values.items()}}


def shown(name: str) -> str:
    """A model's name inside a one-line message: escaped as a Python string literal ("\\n", quotes)."""
    return repr(name)[1:-1]


def in_model_names(text: str, names: dict[str, str]) -> str:
    """An error message about the renamed graph, in the model's own names."""
    return re.sub(r"\b[nv]\d+\b", lambda m: shown(names[m.group(0)]) if m.group(0) in names else m.group(0),
                  text)


def checked_module_names(model, node_names: dict[str, str]) -> dict[str, str]:
    """{onnx2torch submodule name: the model's node name}, after refusing any submodule name that is not a plain
    identifier: it would be written into the Python source torch.fx generates."""
    from .converters import import_onnx2torch
    import_onnx2torch()
    from onnx2torch.onnx_graph import OnnxGraph
    out = {}
    for node in model.graph.node:
        module = OnnxGraph.generate_node_name(node)
        if not IDENTIFIER.match(module):
            raise RuntimeError(f"refused: onnx2torch would name a module {module[:40]!r}, not a plain identifier "
                               "(xc never lets a model's names into generated code)")
        out[module] = node_names.get(node.name, node.name)
    return out
