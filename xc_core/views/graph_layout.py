"""Graph preparation shared by the topology drawings (xc_core/views/topology.py) and the exports: a compiled graph's kept
nodes (constants and graph inputs/outputs dropped), the edges between them with the tensor each carries (input
tensor name == output tensor name, bridged through dropped nodes), effective module paths, which nodes are
fused; and the alignment lookups that match nodes across targets through their source ops. Fixed backend colours
live here so a backend has the same colour on every pane and page.

Module paths: a node whose module path is unknown (None — typically a reorder or cast the compiler inserted) is put
in the deepest module shared by its neighbours (`inferred` says so), so it does not split that module's box — or,
when it sits between two modules (a cast from one block into the next), with its only consumer or its producer.
"""
from __future__ import annotations

import contextlib
import gc
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..report.types import Fusions, GraphBlock, NodeRecord, Report, TensorRecord
from .typed_report import as_report

DROP_KINDS = ("constant", "io")

# Fixed colours so a backend has the same colour on every pane and every page.
BACKEND_COLORS = {
    "cpu": "#4C78A8",      # blue
    "nnapi": "#54A24B",    # green
    "coreml": "#F58518",   # orange
    "ane": "#B279A2",      # purple
    "gpu": "#72B7B2",      # teal
    "npu": "#EECA3B",      # yellow
    "dsp": "#9D755D",      # brown
    "xnnpack": "#FF9DA6",  # pink: ExecuTorch's XNNPACK delegate
    "vulkan": "#9ECAE9",   # light blue: ExecuTorch's Vulkan delegate
    "ethos-u": "#D4A6C8",  # mauve: Arm's Ethos-U NPU (ExecuTorch's Arm backend)
    "unknown": "#BAB0AC",  # grey
}
OTHER_COLOR = "#79706E"
FALLBACK_COLOR = "#E45756"
GAP_COLOR = "#D62AD0"      # magenta: no counterpart on another displayed target


def backend_color(backend: str | None) -> str:
    return BACKEND_COLORS.get(backend or "unknown", OTHER_COLOR)


# ------------------------------------------------------------------------------------------------- preparation

@dataclass
class Prepared:
    """A graph's kept nodes with their edges and module paths, indexed for repeated collapsing."""
    nodes: list[NodeRecord]                   # the graph's nodes (not copied), constants/io dropped
    ids: list[str]
    modules: list[str]                        # effective module path ("" = root)
    inferred: list[bool]                      # module path inferred from neighbours
    comps: list[tuple[str, ...]]              # module path split on "."
    edges: list[tuple[int, int]]              # (producer index, consumer index), de-duplicated
    index: dict[str, int] = field(default_factory=dict)
    fused: list[dict | None] = field(default_factory=list)   # {"pattern", "absorbed"} for fused nodes
    tensors: list[TensorRecord] = field(default_factory=list)  # per edge: the tensor it carries

    def is_fused(self, i: int) -> bool:
        return bool(self.fused) and self.fused[i] is not None



@contextlib.contextmanager
def paused_gc():
    """Building a tree over a 20,000-node report allocates many small objects; the cyclic collector would walk the
    whole report each time it triggers (0.7 s instead of 0.2 s measured). Nothing built here forms cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def prepare(graph: GraphBlock | Mapping, fusions: Fusions | Mapping | None = None) -> Prepared:
    """A graph — a report's (GraphBlock), or one read from a file beside it (a captured graph, a step graph: a dict
    read as a GraphBlock here) — prepared for drawing; `fusions` see `_prepare`."""
    with paused_gc():
        if not isinstance(graph, GraphBlock):
            graph = GraphBlock.from_dict(graph)
        if fusions is not None and not isinstance(fusions, Fusions):
            fusions = Fusions.from_dict(fusions)
        return _prepare(graph, fusions)


def _groups_given(fusions: Fusions | None) -> bool:
    """Whether the fusions block holds its `groups` list (an empty one too): then the groups, not the nodes'
    `fused_from`, say which nodes are fused."""
    if fusions is None or fusions.null:
        return False
    written = fusions.key_order is None or "groups" in fusions.key_order    # None: a block made in code
    return written and "groups" not in fusions.extra                        # extra: stored null (or misfit)


def _prepare(graph: GraphBlock, fusions: Fusions | None) -> Prepared:
    """Keep every node except constants and graph inputs/outputs; edges join a tensor's producer to its consumers,
    bridging through dropped nodes (so a graph-I/O or alias-like dropped node does not cut a path).

    fusions: the target's report block `fusions` (its groups: node, pattern, absorbed …); a node is fused when it
    heads a group there (it absorbed two or more compute nodes of the graph its compiler was given). Without its
    groups, a node with two or more `fused_from` ids counts as fused."""
    all_nodes = graph.nodes
    keep = [n for n in all_nodes if n.kind not in DROP_KINDS]
    dropped = [n for n in all_nodes if n.kind in DROP_KINDS]
    ids, seen = [], Counter()
    for n in keep:                            # node ids are unique in practice; stay correct if not
        seen[n.id] += 1
        ids.append(n.id if seen[n.id] == 1 else f"{n.id}#{seen[n.id]}")
    index = {nid: i for i, nid in enumerate(ids)}

    producer: dict[str, int] = {}
    for i, n in enumerate(keep):
        for o in n.outputs:
            producer.setdefault(o.name, i)
    # Tensors produced by a dropped node resolve to the kept producers of that node's inputs.
    dropped_out: dict[str, NodeRecord] = {}
    for n in dropped:
        for o in n.outputs:
            dropped_out.setdefault(o.name, n)
    memo: dict[str, tuple[int, ...]] = {}

    def producers_of(tensor: str, depth: int = 0) -> tuple[int, ...]:
        if tensor in producer:
            return (producer[tensor],)
        if tensor in memo:
            return memo[tensor]
        d = dropped_out.get(tensor)
        memo[tensor] = ()
        if d is None or depth > 50:
            return ()
        res = tuple(sorted({p for t in d.inputs for p in producers_of(t.name, depth + 1)}))
        memo[tensor] = res
        return res

    # insertion-ordered: producer order, then consumer order; the value is the tensor the edge carries
    edge_set: dict[tuple[int, int], TensorRecord] = {}
    for j, n in enumerate(keep):
        for t in n.inputs:
            i = producer.get(t.name)
            if i is not None:
                if i != j:
                    edge_set.setdefault((i, j), t)
            elif t.name in dropped_out:
                for i in producers_of(t.name):
                    if i != j:
                        edge_set.setdefault((i, j), t)
    edges = list(edge_set)
    tensors = list(edge_set.values())

    raw = [n.module_path for n in keep]
    modules = [m if m is not None else "" for m in raw]
    inferred = [False] * len(keep)
    unknown = [i for i, m in enumerate(raw) if m is None]
    if unknown:
        nbrs: dict[int, list[int]] = {i: [] for i in unknown}
        producers: dict[int, list[int]] = {i: [] for i in unknown}
        for a, b in edges:
            if a in nbrs:
                nbrs[a].append(b)
            if b in nbrs:
                nbrs[b].append(a)
                producers[b].append(a)
        for i in unknown:
            known = [raw[k] for k in nbrs[i] if raw[k] is not None]
            if known:
                common = _common_prefix(known)
                if common not in known:
                    # Between two modules (a cast from one block into the next) the shared parent is far from
                    # both: a node with one consumer goes with it (a cast-in precedes its op), else with its producer.
                    fed = [raw[k] for k in producers[i] if raw[k] is not None]
                    feeds = [raw[k] for k in nbrs[i] if k not in producers[i] and raw[k] is not None]
                    common = feeds[0] if len(feeds) == 1 else fed[0] if fed else common
                modules[i] = common
                inferred[i] = True
    comps = [tuple(m.split(".")) if m else () for m in modules]
    by_groups = _groups_given(fusions)
    groups = {g.node: g for g in fusions.groups} if by_groups else {}
    fused: list[dict | None] = []
    for n in keep:
        if by_groups:
            g = groups.get(n.id)
            # absorbed: the report's {id, op_type …} records of the nodes the group took in
            fused.append({"pattern": g.pattern, "absorbed": [a["id"] for a in g.absorbed]} if g else None)
        elif len(n.fused_from) > 1:
            fused.append({"pattern": None, "absorbed": list(n.fused_from)})
        else:
            fused.append(None)
    return Prepared(keep, ids, modules, inferred, comps, edges, index, fused, tensors)


def _common_prefix(paths: list[str]) -> str:
    parts = [p.split(".") if p else [] for p in paths]
    out = []
    for level in zip(*parts):
        if all(x == level[0] for x in level):
            out.append(level[0])
        else:
            break
    return ".".join(out)


# --------------------------------------------------------------------------------------------------- alignment

def alignment_rows(report: Report | Mapping) -> list[dict]:
    """The report's source-op alignment rows; computed from the graphs when the report predates them."""
    report = as_report(report)
    if report.alignment.source_ops is not None:
        return report.alignment.source_ops
    cap = report.capture.graph
    if not cap:
        return []
    from ..analysis.alignment import source_op_table
    from ..ir import Graph
    graphs = {tid: Graph.from_dict(t.graph.to_dict()) for tid, t in report.targets.items() if t.graph}
    return source_op_table(Graph.from_dict(cap.to_dict()), graphs)


def index_alignment(rows: list[dict]) -> dict:
    """{"rows": {source op: row}, "status": {tid: {op: status}}, "nodes": {tid: {op: [node ids]}}}."""
    status: dict[str, dict[str, str]] = {}
    nodes: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        for tid, cell in (r.get("targets") or {}).items():
            status.setdefault(tid, {})[r["source_op"]] = cell.get("status")
            if cell.get("nodes"):
                nodes.setdefault(tid, {})[r["source_op"]] = cell["nodes"]
    return {"rows": {r["source_op"]: r for r in rows}, "status": status, "nodes": nodes}


def counterpart_gaps(prep: Prepared, tid: str, aidx: dict, others: list[str]) -> dict[str, str]:
    """Nodes of `tid` with no counterpart on another displayed target, with the reason: the node carries no source
    op (the compiler inserted it), or every source op it carries is `absent` on that other target."""
    gaps = {}
    others = [o for o in others if o != tid]
    for nid, n in zip(prep.ids, prep.nodes):
        ops = n.source_ops
        if not ops:
            gaps[nid] = "no source op (inserted by the compiler)"
            continue
        missing = [o for o in others if o in aidx["status"]
                   and all(aidx["status"][o].get(s) == "absent" for s in ops)]
        if missing:
            gaps[nid] = "source ops absent on " + ", ".join(missing)
    return gaps


def nodes_for_source_ops(aidx: dict, tid: str, ops: list[str]) -> set[str]:
    """Node ids of target `tid` that carry any of the source ops, through the alignment."""
    table = aidx["nodes"].get(tid, {})
    return {nid for s in ops for nid in table.get(s, [])}
