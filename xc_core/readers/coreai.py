"""Core AI programs → IR. coreai-torch converts an ExportedProgram into an MLIR module of `coreai.graph`s: the entry
graph (`@main`) holds `coreai.*` ops; a layer the converter recognises (layer norm, scaled-dot-product attention)
becomes a private composite graph that `@main` calls with `coreai.invoke` — one op to the compiler, which may
lower it to one kernel. The IR keeps each `@main` op as one node; an invoke node is named after its composite
(`scaled_dot_product_attention`) and lists the ops of its body.

Provenance: coreai-torch's debug locations (a `debuginfo` dialect) carry, for every op, its own Core AI operation
id, the FX node of the (decomposed) ExportedProgram it was lowered from (`sources`: name "torch", the node's name)
and the module call stack. Node ids are the Core AI operation ids (`op27`); the pre-compilation rewrite numbers
its ops afresh, so the program as converted and the program as rewritten are matched by FX node, not by id.

Model-controlled names (input, output and node names) are only ever read as data here.
"""
from __future__ import annotations

import re

from ..ir import CAST, COMPUTE, CONSTANT, Graph, Node, TensorInfo, precision_of_dtype

# Core AI element types → the numpy spelling the IR uses.
_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64", "si64": "int64",
           "si32": "int32", "si16": "int16", "si8": "int8", "ui64": "uint64", "ui32": "uint32", "ui16": "uint16",
           "ui8": "uint8", "i1": "bool", "i64": "int64", "i32": "int32", "i8": "int8"}
_TENSOR = re.compile(r"tensor<([^>]*)>")
_COMPOSITE = re.compile(r'composite_declaration<"([\w.]+)"')


def tensor_type(text: str) -> tuple[list | None, str | None]:
    """'tensor<2x7x32xf32>' → ([2, 7, 32], 'float32'); 'tensor<?x4xf32>' → [None, 4]; a scalar → []."""
    m = _TENSOR.search(text)
    if not m:
        return None, None
    parts = m.group(1).split(",")[0].split("x")
    elem = parts[-1].strip()
    dims = [None if p in ("?", "") else int(p) if p.isdigit() else p for p in parts[:-1]]
    return dims, _DTYPES.get(elem, elem)


def op_type(name: str) -> str:
    """'coreai.decomposable.broadcasting_add' → 'broadcasting_add'; 'coreai.conv2d' → 'conv2d'."""
    return name.rsplit(".", 1)[-1]


def _graphs(module) -> dict[str, object]:
    """sym_name → coreai.graph operation, for every graph at the top of the module."""
    out = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "coreai.graph" and "sym_name" in op.attributes:
            out[str(op.attributes["sym_name"]).strip('"')] = op
    return out


def _names(attrs) -> list[str | None]:
    """The `coreai.name` of each argument / result of a graph (its user-facing tensor names)."""
    out = []
    for a in attrs or []:
        try:
            out.append(str(a["coreai.name"]).strip('"'))
        except (KeyError, TypeError, IndexError):
            out.append(None)
    return out


def _ops(graph_op):
    return [o.operation for o in graph_op.regions[0].blocks[0].operations]


def source_of(operation) -> tuple[int | None, list[str], list[str]]:
    """An op's Core AI operation id, the FX node names it was lowered from and its module call stack."""
    from coreai._compiler._mlir_libs._coreaiIR._bindings import mlir
    loc = operation.location
    oid = mlir.get_operation_id(loc, "coreai")
    names = [str(i) for s in mlir.get_source_info(loc) if getattr(s, "name", None) == "torch"
             for i in (getattr(s, "identifiers", None) or [])]
    stack = re.findall(r'"call_stack": \[([^\]]*)\]', str(loc))
    frames = re.findall(r'"([^"]*)"', stack[0]) if stack else []
    return (getattr(oid, "value", None) if oid is not None else None), names, frames


def composites(module) -> dict[str, dict]:
    """Composite graph name → {composite: its declared op, ops: the op types of its body}."""
    out = {}
    for name, g in _graphs(module).items():
        text = str(g.attributes["composite_decl"]) if "composite_decl" in g.attributes else ""
        m = _COMPOSITE.search(text)
        if m:
            out[name] = {"composite": m.group(1),
                         "ops": [op_type(o.name) for o in _ops(g) if o.name not in ("coreai.constant", "coreai.output")]}
    return out


def entry_graph(module, entry: str = "main"):
    graphs = _graphs(module)
    if entry in graphs:
        return graphs[entry]
    public = [g for g in graphs.values() if "priv" not in g.attributes]
    if not public:
        raise ValueError("the Core AI program has no entry graph")
    return public[0]


def io_names(module, which: str) -> list[str | None]:
    """The entry graph's input ("arg_attrs") or output ("res_attrs") names, in order."""
    g = entry_graph(module)
    return _names(g.attributes[which] if which in g.attributes else [])


def program_graph(module, name: str, stage: str, origin: dict[str, str] | None = None,
                  index: dict | None = None) -> Graph:
    """The entry graph of a Core AI program (an MLIR module) as IR. `origin` maps FX node names of the converted
    program to ids of the captured graph (`index`: its nodes by id), for provenance."""
    origin, index = origin or {}, index or {}
    graph_op = entry_graph(module)
    comps = composites(module)
    in_names = _names(graph_op.attributes["arg_attrs"] if "arg_attrs" in graph_op.attributes else [])
    block = graph_op.regions[0].blocks[0]
    g = Graph(name=name, stage=stage)
    value_names: dict[str, str] = {}
    for i, arg in enumerate(block.arguments):
        label = (in_names[i] if i < len(in_names) else None) or f"input_{i}"
        value_names[arg.get_name()] = label
        shape, dtype = tensor_type(str(arg.type))
        g.inputs.append(TensorInfo(label, shape, dtype))
    seen: dict[str, int] = {}
    for op in _ops(graph_op):
        oid, sources, frames = source_of(op)
        if op.name == "coreai.output":
            for v in op.operands:
                shape, dtype = tensor_type(str(v.type))
                # An output is named by the value it returns, so its edge lines up with the op that makes it.
                g.outputs.append(TensorInfo(value_names.get(v.get_name(), v.get_name()), shape, dtype))
            continue
        kind_name = op_type(op.name)
        nid = f"op{oid}" if oid is not None else f"{kind_name}_{len(g.nodes)}"
        if nid in seen:           # ids are unique per program; guard against a toolchain that repeats them
            seen[nid] += 1
            nid = f"{nid}_{seen[nid]}"
        else:
            seen[nid] = 0
        outs = []
        for r in op.results:
            shape, dtype = tensor_type(str(r.type))
            outs.append(TensorInfo(r.get_name(), shape, dtype))
        ins = []
        for v in op.operands:
            shape, dtype = tensor_type(str(v.type))
            ins.append(TensorInfo(value_names.get(v.get_name(), v.get_name()), shape, dtype))
        attrs: dict = {"coreai_op": op.name}
        if oid is not None:
            attrs["coreai_op_id"] = oid
        for a in op.attributes:
            if a.name in ("value", "callee"):
                continue
            attrs[a.name] = str(a.attr)[:200]
        optype = kind_name
        if op.name == "coreai.invoke" and "callee" in op.attributes:
            m = re.search(r"@([\w.$-]+)", str(op.attributes["callee"]))     # '#param.constant<@sdpa_x> : …'
            callee = m.group(1) if m else str(op.attributes["callee"])
            comp = comps.get(callee)
            attrs["callee"] = callee
            if comp:
                optype = comp["composite"]
                attrs["composite"], attrs["composite_ops"] = comp["composite"], comp["ops"]
        if sources:
            attrs["torch_nodes"] = sources
        if frames:
            attrs["call_stack"] = frames
        kind = CONSTANT if kind_name == "constant" else CAST if kind_name == "cast" else COMPUTE
        node = Node(id=nid, op_type=optype, domain="coreai", kind=kind, inputs=ins, outputs=outs,
                    attributes=attrs)
        dtypes = [t.dtype for t in outs if t.dtype]
        node.precision = precision_of_dtype(dtypes[0]) if dtypes else None
        if kind != CONSTANT:
            node.source_ops = list(dict.fromkeys(origin[s] for s in sources if s in origin))
            src = index.get(node.source_ops[-1]) if node.source_ops else None
            if src is not None:
                node.module_path, node.source_location = src.module_path, src.source_location
        g.nodes.append(node)
    return g
