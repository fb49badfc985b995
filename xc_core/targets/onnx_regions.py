"""Trace an ONNX Runtime optimized graph back to the graph it was optimized from.

ORT drops node metadata when it fuses, but it keeps tensor names at the boundaries of what it rewrites: a fused
node reads the tensors its first absorbed node read and writes the tensor its last absorbed node wrote. So the
nodes a compiled node absorbed are the original nodes between its boundary tensors. Nodes connected through
tensors ORT invented (e.g. the nchwc-blocked tensors between ReorderInput, Conv and ReorderOutput) are treated as
one cluster, and layout nodes inside a cluster are marked as inserted, not mapped.
"""
from __future__ import annotations

from collections import defaultdict

from ..ir import CAST, COMPUTE, LAYOUT, Graph, Node

# (op_type, domain) pairs that only move data between layouts; ORT inserts them, they come from no source op.
LAYOUT_OPS = {("ReorderInput", "com.microsoft.nchwc"), ("ReorderOutput", "com.microsoft.nchwc"),
              ("Transpose", "com.microsoft.nhwc")}


# Pure data-movement ops: when ORT wraps a fusion in reshapes (MatMul+Add → Reshape, Gemm, Reshape), the absorbed
# nodes belong to the op that computes, and a movement op that absorbed nothing was inserted by ORT.
MOVEMENT_OPS = {"Reshape", "Squeeze", "Unsqueeze", "Transpose", "Flatten", "Identity"}

# ORT's nchwc transformer names each blocked node after the original tensor it computes ("<tensor>_nchwc") while
# its output tensor gets a fresh name ("reorder_token_7"): the node name is the link back.
_NCHWC_SUFFIX = "_nchwc"


def map_optimized_graph(optimized: Graph, original: Graph) -> dict:
    """Fill `fused_from`, `source_ops`, `module_path` and `kind` of every optimized node in place.
    Returns the original compute nodes that no optimized node carries: constant-folded or eliminated."""
    orig_producer = {t.name: n for n in original.nodes for t in n.outputs}
    orig_known = set(orig_producer) | {t.name for t in original.inputs}
    for n in original.nodes:
        orig_known.update(t.name for t in n.inputs)

    consumers: dict[str, list[Node]] = defaultdict(list)
    for n in original.nodes:
        for t in n.inputs:
            consumers[t.name].append(n)
    tensor_alias = {}
    for n in optimized.nodes:
        stem = n.id[: -len(_NCHWC_SUFFIX)]
        if n.domain == "com.microsoft.nchwc" and n.id.endswith(_NCHWC_SUFFIX) and stem in orig_producer:
            # A 4th input is a fused residual Sum: the node then computes the Add that consumed the stem.
            if len(n.inputs) == 4:
                adds = [c for c in consumers.get(stem, []) if c.op_type in ("Add", "Sum")]
                stem = adds[0].outputs[0].name if len(adds) == 1 else stem
            for t in n.outputs[:1]:
                tensor_alias[t.name] = stem

    def alias(name: str) -> str | None:
        if name in orig_known:
            return name
        return tensor_alias.get(name)

    producers: dict[str, list[Node]] = defaultdict(list)  # original tensor name -> optimized nodes writing it
    opt_produced = {}
    for n in optimized.nodes:
        for t in n.outputs:
            opt_produced[t.name] = n
            a = alias(t.name)
            if a:
                producers[a].append(n)

    # Union optimized nodes connected through tensors that the original graph never had.
    parent = {n.id: n.id for n in optimized.nodes}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for n in optimized.nodes:
        for t in n.inputs:
            p = opt_produced.get(t.name)
            if p is not None and alias(t.name) is None:
                parent[find(n.id)] = find(p.id)
    clusters: dict[str, list[Node]] = defaultdict(list)
    for n in optimized.nodes:
        clusters[find(n.id)].append(n)

    dynamic = _input_dependent(original)
    # Graph order of the original nodes, built once: regions are sorted by it (per region it was quadratic).
    rank = {id(n): i for i, n in enumerate(orig_producer.values())}
    claimed: set[str] = set()
    folded: set[str] = set()
    for members in clusters.values():
        outputs = [a for m in members for t in m.outputs if (a := alias(t.name))]
        region = _region(outputs, orig_producer, producers, {id(m) for m in members}, rank)
        # Nodes that depend on no graph input were constant-folded into this node's inputs, not fused into it.
        folded.update(o.id for o in region if o.id not in dynamic)
        region = [o for o in region if o.id in dynamic]
        compute = [m for m in members if (m.op_type, m.domain) not in LAYOUT_OPS]
        for m in members:
            if (m.op_type, m.domain) in LAYOUT_OPS:
                m.kind = LAYOUT
        if not compute:
            continue
        # Region nodes go to the member of the same op type when there is exactly one, else to the last member
        # that computes (not a reshape ORT wrapped around the fusion).
        heavy = [c for c in compute if c.op_type not in MOVEMENT_OPS] or compute
        assignment: dict[str, list[Node]] = defaultdict(list)
        for o in region:
            same = [c for c in compute if op_family(c.op_type) == op_family(o.op_type)]
            owner = same[0] if len(same) == 1 else heavy[-1]
            assignment[owner.id].append(o)
        cluster_sources = _unique(s for o in region for s in o.source_ops)
        for c in compute:
            absorbed = assignment.get(c.id, [])
            claimed.update(o.id for o in absorbed)
            c.fused_from = [o.id for o in absorbed]
            c.source_ops = _unique(s for o in absorbed for s in o.source_ops)
            paths = [o.module_path for o in absorbed if o.module_path is not None and o.kind == COMPUTE]
            c.module_path = _common_path(paths) if paths else None
            locs = [o.source_location for o in absorbed if o.source_location]
            c.source_location = locs[0] if locs else None
            if not absorbed and c.op_type in MOVEMENT_OPS:
                c.kind = LAYOUT   # a reshape/transpose ORT inserted around a fusion or a layout change
            elif not absorbed and len(compute) > 1 and cluster_sources:
                # Part of the lowering of the cluster's source ops (e.g. the scale Mul of a quantised Conv):
                # it carries their provenance without having absorbed any node itself.
                c.source_ops = cluster_sources
                paths = [o.module_path for o in region if o.module_path is not None]
                c.module_path = _common_path(paths) if paths else None
            elif not absorbed and c.op_type == "Cast":
                c.kind = CAST
    gone = [n.id for n in original.nodes if n.id not in claimed and n.kind == COMPUTE]
    return {"constant_folded": [n for n in gone if n not in dynamic],
            "eliminated": [n for n in gone if n in dynamic]}


def _region(boundary_outputs, orig_producer, producers, members, rank: dict) -> list[Node]:
    """Original nodes from `boundary_outputs` backwards, stopping at tensors some other optimized node produces
    (or graph inputs / initializers, which have no producer)."""
    seen, order = set(), []
    stack = [orig_producer[t] for t in boundary_outputs if t in orig_producer]
    while stack:
        node = stack.pop()
        if node.id in seen:
            continue
        seen.add(node.id)
        order.append(node)
        for t in node.inputs:
            if any(id(p) not in members for p in producers.get(t.name, ())):
                continue  # another optimized node computes this tensor: the region ends here
            if t.name in orig_producer:
                stack.append(orig_producer[t.name])
    return sorted(order, key=lambda n: rank.get(id(n), 0))


_FAMILY_AFFIXES = ("QLinear", "DynamicQuantize", "Fused", "Nhwc")


def op_family(op_type: str) -> str:
    """ConvInteger, QLinearConv, FusedConv, NhwcConv → Conv; DynamicQuantizeMatMul, MatMulIntegerToFloat → MatMul."""
    name = op_type
    for affix in _FAMILY_AFFIXES:
        if name.startswith(affix) and len(name) > len(affix):
            name = name[len(affix):]
    for suffix in ("IntegerToFloat", "Integer"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name


def _input_dependent(graph: Graph) -> set[str]:
    """Ids of nodes whose value depends on a graph input (the rest is a constant subgraph)."""
    live = {t.name for t in graph.inputs}
    out = set()
    for n in graph.nodes:  # ONNX node lists are topologically sorted
        if any(t.name in live for t in n.inputs):
            out.add(n.id)
            live.update(t.name for t in n.outputs)
    return out


def _common_path(paths: list[str]) -> str:
    parts = [p.split(".") if p else [] for p in paths]
    common = []
    for items in zip(*parts):
        if len(set(items)) != 1:
            break
        common.append(items[0])
    return ".".join(common)


def _unique(items):
    seen, out = set(), []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


QUANT_OPS = {"MatMulInteger", "ConvInteger", "DynamicQuantizeLinear", "QuantizeLinear", "DequantizeLinear",
             "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QLinearConv", "QLinearMatMul", "QLinearAdd",
             "QLinearMul", "QGemm", "QAttention", "DynamicQuantizeLSTM", "QLinearSigmoid", "QLinearLeakyRelu",
             "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearConcat", "QLinearSoftmax"}


def onnx_node_precision(node: Node) -> str:
    """Compute precision of an ONNX node: int8 for quantised kernels, else the dtype of its float tensors."""
    from ..ir import precision_of_dtype
    if node.op_type in QUANT_OPS:
        return "int8"
    if node.op_type == "Cast" and "to" in node.attributes:
        from onnx import helper
        return precision_of_dtype(helper.tensor_dtype_to_np_dtype(int(node.attributes["to"])).name)
    dtypes = [t.dtype for t in node.inputs + node.outputs if t.dtype]
    for d in dtypes:
        if d.startswith("float") or d.startswith("bfloat"):
            return precision_of_dtype(d)
    if dtypes:
        return precision_of_dtype(dtypes[0])
    return "fp32" if node.domain.startswith("com.microsoft") else "unknown"
