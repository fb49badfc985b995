"""Topology views: a compiled graph as a layered top-to-bottom DAG (igraph's Sugiyama layout), optionally collapsed
by module path, and a plotly figure of it. No Streamlit here: the Topology page, the benchmark and the tests call it.

The pipeline, each step returning plain data:

    prepare(graph)                      kept nodes (constants and graph inputs/outputs dropped), implicit edges
                                        (input tensor name == output tensor name), effective module paths
      → layout(prep, depth, expand)     boxes (a node, or a module collapsed to `depth` path components) placed by
                                        Sugiyama: layer 0 at the top, every edge points down; edges as polylines
      → figure(lay, gaps, selected)     plotly Figure: colour = backend, red outline = fallback, ◆ = fused,
                                        magenta ring = no counterpart on another displayed target,
                                        black ring = the selected source op's nodes

`layout()` returns only lists, dicts, strings and numbers (JSON-serialisable); plotly figures are too.

Module paths: a node whose module path is unknown (None — typically a reorder or cast the compiler inserted) is put
in the deepest module shared by its neighbours (`module_inferred` says so), so it does not split that module's box.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

DROP_KINDS = ("constant", "io")
DEFAULT_BUDGET = 300     # default collapse depth: the deepest one that draws at most this many boxes

# Fixed colours so a backend has the same colour on every pane and every page.
BACKEND_COLORS = {
    "cpu": "#4C78A8",      # blue
    "nnapi": "#54A24B",    # green
    "coreml": "#F58518",   # orange
    "ane": "#B279A2",      # purple
    "gpu": "#72B7B2",      # teal
    "npu": "#EECA3B",      # yellow
    "dsp": "#9D755D",      # brown
    "unknown": "#BAB0AC",  # grey
}
OTHER_COLOR = "#79706E"
FALLBACK_COLOR = "#E45756"
GAP_COLOR = "#D62AD0"      # magenta: no counterpart on another displayed target
SELECTED_COLOR = "#111111"
EDGE_COLOR = "#B8B8B8"
MAX_LIST = 12              # items listed in a hover before "+k more"


def backend_color(backend: str | None) -> str:
    return BACKEND_COLORS.get(backend or "unknown", OTHER_COLOR)


# ------------------------------------------------------------------------------------------------- preparation

@dataclass
class Prepared:
    """A graph's kept nodes with their edges and module paths, indexed for repeated collapsing."""
    nodes: list[dict]                         # report node dicts (not copied), constants/io dropped
    ids: list[str]
    modules: list[str]                        # effective module path ("" = root)
    inferred: list[bool]                      # module path inferred from neighbours
    comps: list[tuple[str, ...]]              # module path split on "."
    edges: list[tuple[int, int]]              # (producer index, consumer index), de-duplicated
    index: dict[str, int] = field(default_factory=dict)
    fused: list[dict | None] = field(default_factory=list)   # {"pattern", "absorbed"} for fused nodes
    _memo: dict = field(default_factory=dict, repr=False)     # box counts / collapsed modules per depth

    def is_fused(self, i: int) -> bool:
        return bool(self.fused) and self.fused[i] is not None

    @property
    def max_depth(self) -> int:
        return max((len(c) for c in self.comps), default=0)


def prepare(graph: dict, fusions: dict | None = None) -> Prepared:
    """Keep every node except constants and graph inputs/outputs; edges join a tensor's producer to its consumers,
    bridging through dropped nodes (so a graph-I/O or alias-like dropped node does not cut a path).

    fusions: the target's report block `fusions` ({"groups": [{node, pattern, absorbed, ...}]}); a node is fused
    when it heads a group there (it absorbed two or more compute nodes of the graph its compiler was given). Without
    it, a node with two or more `fused_from` ids counts as fused."""
    all_nodes = graph.get("nodes") or []
    keep = [n for n in all_nodes if n.get("kind") not in DROP_KINDS]
    dropped = [n for n in all_nodes if n.get("kind") in DROP_KINDS]
    ids, seen = [], Counter()
    for n in keep:                            # node ids are unique in practice; stay correct if not
        seen[n["id"]] += 1
        ids.append(n["id"] if seen[n["id"]] == 1 else f"{n['id']}#{seen[n['id']]}")
    index = {nid: i for i, nid in enumerate(ids)}

    producer: dict[str, int] = {}
    for i, n in enumerate(keep):
        for o in n.get("outputs") or []:
            producer.setdefault(o["name"], i)
    # Tensors produced by a dropped node resolve to the kept producers of that node's inputs.
    dropped_out: dict[str, dict] = {}
    for n in dropped:
        for o in n.get("outputs") or []:
            dropped_out.setdefault(o["name"], n)
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
        res = tuple(sorted({p for t in d.get("inputs") or [] for p in producers_of(t["name"], depth + 1)}))
        memo[tensor] = res
        return res

    edge_set: dict[tuple[int, int], None] = {}     # insertion-ordered set: producer order, then consumer order
    for j, n in enumerate(keep):
        for t in n.get("inputs") or []:
            i = producer.get(t["name"])
            if i is not None:
                if i != j:
                    edge_set[(i, j)] = None
            elif t["name"] in dropped_out:
                for i in producers_of(t["name"]):
                    if i != j:
                        edge_set[(i, j)] = None
    edges = list(edge_set)

    raw = [n.get("module_path") for n in keep]
    modules = [m if m is not None else "" for m in raw]
    inferred = [False] * len(keep)
    unknown = [i for i, m in enumerate(raw) if m is None]
    if unknown:
        nbrs: dict[int, list[int]] = {i: [] for i in unknown}
        for a, b in edges:
            if a in nbrs:
                nbrs[a].append(b)
            if b in nbrs:
                nbrs[b].append(a)
        for i in unknown:
            known = [raw[k] for k in nbrs[i] if raw[k] is not None]
            if known:
                modules[i] = _common_prefix(known)
                inferred[i] = True
    comps = [tuple(m.split(".")) if m else () for m in modules]
    groups = {g["node"]: g for g in (fusions or {}).get("groups") or []}
    fused: list[dict | None] = []
    for n in keep:
        if fusions is not None and fusions.get("groups") is not None:
            g = groups.get(n["id"])
            fused.append({"pattern": g.get("pattern"), "absorbed": [a["id"] for a in g.get("absorbed") or []]}
                         if g else None)
        elif len(n.get("fused_from") or []) > 1:
            fused.append({"pattern": None, "absorbed": list(n["fused_from"])})
        else:
            fused.append(None)
    return Prepared(keep, ids, modules, inferred, comps, edges, index, fused)


def _common_prefix(paths: list[str]) -> str:
    parts = [p.split(".") if p else [] for p in paths]
    out = []
    for level in zip(*parts):
        if all(x == level[0] for x in level):
            out.append(level[0])
        else:
            break
    return ".".join(out)


# ---------------------------------------------------------------------------------------------------- collapse

def _keys(prep: Prepared, depth: int | None, expand: str | None, budget: int) -> list[str]:
    """Box key of every kept node: "m:<module prefix>" for nodes collapsed into a module box, "n:<id>" otherwise.
    depth None = no collapsing. Nodes inside `expand` are shown individually when they fit the budget, else
    collapsed at the deepest sub-depth that fits."""
    inner_depth = None
    inside = None
    if expand is not None:
        mc = tuple(expand.split(".")) if expand else ()
        inside = [c[:len(mc)] == mc for c in prep.comps]
        members = [i for i, f in enumerate(inside) if f]
        if len(members) > budget:
            inner_depth = len(mc) + 1
            sub_max = max((len(prep.comps[i]) for i in members), default=0)
            for d in range(sub_max, len(mc), -1):
                if _count([prep.comps[i] for i in members], d) <= budget:
                    inner_depth = d
                    break
    keys = []
    for i, c in enumerate(prep.comps):
        d = inner_depth if (inside is not None and inside[i]) else depth
        if d is None or len(c) < d or d <= 0:
            keys.append("n:" + prep.ids[i])
        else:
            keys.append("m:" + ".".join(c[:d]))
    return keys


def _count(comps: list[tuple[str, ...]], depth: int | None) -> int:
    if depth is None:
        return len(comps)
    boxes, singles = set(), 0
    for c in comps:
        if len(c) < depth:
            singles += 1
        else:
            boxes.add(c[:depth])
    return singles + len(boxes)


def box_count(prep: Prepared, depth: int | None) -> int:
    """Boxes drawn at this collapse depth (None = every node)."""
    key = ("count", depth)
    if key not in prep._memo:
        prep._memo[key] = _count(prep.comps, depth)
    return prep._memo[key]


def auto_depth(preps: list[Prepared], budget: int = DEFAULT_BUDGET) -> int | None:
    """The most detailed collapse depth at which every graph draws at most `budget` boxes: None (no collapsing)
    when every graph fits, else the deepest module depth that fits, else 1."""
    if all(len(p.ids) <= budget for p in preps):
        return None
    top = max((p.max_depth for p in preps), default=0)
    for d in range(top, 0, -1):
        if all(box_count(p, d) <= budget for p in preps):
            return d
    return 1 if top else None


def collapsed_modules(prep: Prepared, depth: int | None) -> list[tuple[str, int]]:
    """(module, node count) of the module boxes drawn at this depth (modules of one node are drawn as the node)."""
    if depth is None:
        return []
    key = ("modules", depth)
    if key not in prep._memo:
        cnt = Counter(".".join(c[:depth]) for c in prep.comps if len(c) >= depth)
        prep._memo[key] = sorted((m, k) for m, k in cnt.items() if k > 1)
    return list(prep._memo[key])


# ------------------------------------------------------------------------------------------------------ layout

def layout(prep: Prepared, depth: int | None = None, expand: str | None = None, *, budget: int = DEFAULT_BUDGET,
           maxiter: int = 100) -> dict:
    """Sugiyama layout of the graph collapsed at `depth` (None: every node), with module `expand` opened.

    Returns {"depth", "expand", "n_nodes", "n_layers", "width", "boxes": [...], "edges": [...]} where each box has
    x, y (y = layer; layer 0 is the top and every edge goes from a smaller to a larger y on a DAG), a kind
    ("node" or "module") and its attributes, and each edge has source/target box indices, the number of node
    edges it stands for and its polyline points (with igraph's control points for edges spanning layers)."""
    import igraph

    keys = _keys(prep, depth, expand, budget)
    members: dict[str, list[int]] = {}
    for i, k in enumerate(keys):
        members.setdefault(k, []).append(i)
    order = list(members)
    # A module box of one node is drawn as that node.
    box_of_key = {k: b for b, k in enumerate(order)}
    box_of_node = [box_of_key[k] for k in keys]
    ecount: Counter = Counter()
    for a, b in prep.edges:
        ba, bb = box_of_node[a], box_of_node[b]
        if ba != bb:
            ecount[(ba, bb)] += 1
    elist = list(ecount)

    g = igraph.Graph(n=len(order), edges=elist, directed=True)
    lay = g.layout_sugiyama(weights=[ecount[e] for e in elist] if elist else None, maxiter=maxiter)
    coords = lay.coords
    routing = lay.edge_routing or [[] for _ in elist]

    boxes = []
    for b, k in enumerate(order):
        idx = members[k]
        x, y = coords[b][0], coords[b][1]
        if k.startswith("m:") and len(idx) > 1:
            box = _module_box(prep, k[2:], idx)
        else:
            box = _node_box(prep, idx[0])
        box.update(key=k, x=float(x), y=float(y))
        boxes.append(box)
    edges = []
    for e, (a, b) in enumerate(elist):
        pts = [[float(coords[a][0]), float(coords[a][1])]]
        pts += [[float(p[0]), float(p[1])] for p in (routing[e] if e < len(routing) else [])]
        pts.append([float(coords[b][0]), float(coords[b][1])])
        edges.append({"source": a, "target": b, "count": ecount[(a, b)], "points": pts})
    ys = [bx["y"] for bx in boxes] or [0.0]
    xs = [bx["x"] for bx in boxes] or [0.0]
    return {"depth": depth, "expand": expand, "n_nodes": len(prep.ids), "n_boxes": len(boxes),
            "n_layers": int(max(ys)) + 1, "width": float(max(xs) - min(xs) + 1), "boxes": boxes, "edges": edges}


def _node_box(prep: Prepared, i: int) -> dict:
    n = prep.nodes[i]
    return {
        "kind": "node", "id": prep.ids[i], "label": n.get("op_type") or "?", "op_type": n.get("op_type"),
        "node_kind": n.get("kind"), "module": prep.modules[i], "module_inferred": prep.inferred[i],
        "count": 1, "node_ids": [prep.ids[i]],
        "backend": n.get("backend") or "unknown", "backends": {n.get("backend") or "unknown": 1},
        "precision": n.get("precision"),
        "fallback": 1 if n.get("fallback") else 0,
        "fallback_reasons": [n["fallback_reason"]] if n.get("fallback") and n.get("fallback_reason") else [],
        "fused": 1 if prep.is_fused(i) else 0,
        "fusion_pattern": prep.fused[i]["pattern"] if prep.is_fused(i) else None,
        "source_ops": list(n.get("source_ops") or []),
        "fused_from": list(prep.fused[i]["absorbed"]) if prep.is_fused(i) else list(n.get("fused_from") or []),
        "op_types": {n.get("op_type") or "?": 1},
    }


def _module_box(prep: Prepared, module: str, idx: list[int]) -> dict:
    nodes = [prep.nodes[i] for i in idx]
    backends = Counter(n.get("backend") or "unknown" for n in nodes)
    precisions = Counter(n.get("precision") or "—" for n in nodes)
    ops: list[str] = []
    seen = set()
    for n in nodes:
        for s in n.get("source_ops") or []:
            if s not in seen:
                seen.add(s)
                ops.append(s)
    reasons = Counter(n.get("fallback_reason") or "—" for n in nodes if n.get("fallback"))
    return {
        "kind": "module", "id": module, "label": _short(module) + f" ({len(idx)})", "op_type": None,
        "node_kind": "module", "module": module, "module_inferred": False, "count": len(idx),
        "node_ids": [prep.ids[i] for i in idx],
        "backend": backends.most_common(1)[0][0], "backends": dict(backends.most_common()),
        "precision": None, "precisions": dict(precisions.most_common()),
        "fallback": sum(1 for n in nodes if n.get("fallback")),
        "fallback_reasons": [r for r, _ in reasons.most_common()],
        "fused": sum(1 for i in idx if prep.is_fused(i)),
        "source_ops": ops, "fused_from": [],
        "op_types": dict(Counter(n.get("op_type") or "?" for n in nodes).most_common()),
    }


def _short(module: str) -> str:
    parts = module.split(".")
    return module if len(parts) <= 2 else "…" + ".".join(parts[-2:])


# --------------------------------------------------------------------------------------------------- alignment

def alignment_rows(report: dict) -> list[dict]:
    """The report's source-op alignment rows; computed from the graphs when the report predates them."""
    al = report.get("alignment") or {}
    if al.get("source_ops") is not None:
        return al["source_ops"]
    cap = (report.get("capture") or {}).get("graph")
    if not cap:
        return []
    from .analysis.alignment import source_op_table
    from .ir import Graph
    graphs = {tid: Graph.from_dict(t["graph"]) for tid, t in report["targets"].items() if t.get("graph")}
    return source_op_table(Graph.from_dict(cap), graphs)


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
        ops = n.get("source_ops") or []
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


def boxes_for_nodes(lay: dict, node_ids: set[str]) -> list[int]:
    return [b for b, box in enumerate(lay["boxes"]) if node_ids.intersection(box["node_ids"])]


# ------------------------------------------------------------------------------------------------------ figure

def _more(items: list[str], k: int = MAX_LIST) -> str:
    items = [str(x) for x in items]
    return ", ".join(items[:k]) + (f" … +{len(items) - k} more" if len(items) > k else "")


def _hover(box: dict, gap_nodes: list[tuple[str, str]]) -> str:
    if box["kind"] == "module":
        lines = [f"<b>{box['module']}</b> — {box['count']} nodes",
                 "backends: " + ", ".join(f"{b} {c}" for b, c in box["backends"].items()),
                 "precision: " + ", ".join(f"{p} {c}" for p, c in box["precisions"].items()),
                 "op types: " + _more([f"{o}×{c}" for o, c in box["op_types"].items()], 6)]
        if box["fused"]:
            lines.append(f"fused nodes: {box['fused']}")
        if box["fallback"]:
            lines.append(f"<b>fallback nodes: {box['fallback']}</b> — " + _more(box["fallback_reasons"], 2))
        if gap_nodes:
            lines.append(f"no counterpart: {len(gap_nodes)} node(s)")
        lines.append("source ops: " + (_more(box["source_ops"], 6) or "—"))
        return "<br>".join(lines)
    mod = box["module"] or "(root)"
    lines = [f"<b>{box['op_type']}</b> · {box['id']}",
             f"module: {mod}" + (" (inferred from neighbours)" if box["module_inferred"] else ""),
             f"backend: {box['backend']} · precision: {box['precision'] or '—'} · {box['node_kind']}"]
    if box["fused"]:
        lines.append("<b>fused</b>" + (f" {box['fusion_pattern']}" if box.get("fusion_pattern") else ""))
        lines.append("absorbed source ops: " + (_more(box["source_ops"]) or "—"))
        lines.append("absorbed nodes: " + (_more(box["fused_from"]) or "—"))
    else:
        lines.append("source ops: " + (_more(box["source_ops"]) or "—"))
    if box["fallback"]:
        lines.append("<b>fallback</b>: " + (box["fallback_reasons"][0] if box["fallback_reasons"] else "—"))
    if gap_nodes:
        lines.append("<b>no counterpart</b>: " + gap_nodes[0][1])
    return "<br>".join(lines)


def _symbol(box: dict) -> str:
    if box["kind"] == "module":
        return "square"
    if box["fused"]:
        return "diamond"
    if box["node_kind"] in ("layout", "cast", "alias"):
        return "triangle-down"
    return "circle"


def _scatter(**kw) -> dict:
    """A scatter trace as a plain dict (None values left out)."""
    return {"type": "scatter", **{k: v for k, v in kw.items() if v is not None}}


def figure(lay: dict, *, gaps: dict[str, str] | None = None, selected: set[str] | None = None, title: str = "",
           height: int | None = None, labels: bool | None = None, uirevision: str | None = None,
           fast: bool = True):
    """Plotly figure of a layout. gaps: node id → why it has no counterpart on another displayed target;
    selected: node ids to emphasise (the selected source op's nodes). Every point's customdata is its box index."""
    import plotly.graph_objects as go

    gaps = gaps or {}
    selected = selected or set()
    boxes = lay["boxes"]
    labels = len(boxes) <= 80 if labels is None else labels
    box_gaps = [[(nid, gaps[nid]) for nid in b["node_ids"] if nid in gaps] for b in boxes] if gaps else \
        [[] for _ in boxes]
    sel_boxes = {b for b, box in enumerate(boxes) if selected.intersection(box["node_ids"])} if selected else set()

    traces = []
    ex, ey = [], []
    for e in lay["edges"]:
        for x, y in e["points"]:
            ex.append(x)
            ey.append(y)
        ex.append(None)
        ey.append(None)
    traces.append(_scatter(x=ex, y=ey, mode="lines", line={"color": EDGE_COLOR, "width": 1}, hoverinfo="skip",
                           showlegend=False, name="edges"))

    n_layers = lay["n_layers"]
    height = height or int(max(420, min(3000, 90 + 24 * n_layers)))
    pitch = (height - 90) / max(1, n_layers)            # pixels between layers: markers must not overlap
    node_size = max(4.0, min(11.0, 0.8 * pitch))
    box_cap = max(5.0, min(34.0, 0.95 * pitch))
    by_backend: dict[str, list[int]] = {}
    for b, box in enumerate(boxes):
        by_backend.setdefault(box["backend"], []).append(b)
    for backend in sorted(by_backend, key=lambda k: (k not in BACKEND_COLORS, k)):
        idx = by_backend[backend]
        sizes = [min(box_cap, 12 + 3 * boxes[b]["count"] ** 0.5) if boxes[b]["kind"] == "module" else node_size
                 for b in idx]
        traces.append(_scatter(
            x=[boxes[b]["x"] for b in idx], y=[boxes[b]["y"] for b in idx],
            mode="markers+text" if labels else "markers",
            text=[boxes[b]["label"] for b in idx] if labels else None, textposition="middle right",
            textfont={"size": 10},
            customdata=idx, hovertext=[_hover(boxes[b], box_gaps[b]) for b in idx], hoverinfo="text",
            marker={"color": backend_color(backend), "size": sizes, "symbol": [_symbol(boxes[b]) for b in idx],
                    "line": {"color": [FALLBACK_COLOR if boxes[b]["fallback"] else "#FFFFFF" for b in idx],
                             "width": [3 if boxes[b]["fallback"] else 1 for b in idx]}},
            selectedpoints=[k for k, b in enumerate(idx) if b in sel_boxes] if sel_boxes else None,
            unselected={"marker": {"opacity": 0.3}}, selected={"marker": {"opacity": 1.0}},
            name=backend, legendgroup=backend))

    gap_idx = [b for b in range(len(boxes)) if box_gaps[b]]
    traces.append(_scatter(
        x=[boxes[b]["x"] for b in gap_idx] or [None], y=[boxes[b]["y"] for b in gap_idx] or [None],
        mode="markers", hoverinfo="skip", name="no counterpart on another target", customdata=gap_idx,
        marker={"symbol": ["square-open" if boxes[b]["kind"] == "module" else "circle-open" for b in gap_idx]
                or "circle-open", "size": [min(box_cap, 12 + 3 * boxes[b]["count"] ** 0.5) + 6
                                           if boxes[b]["kind"] == "module" else node_size + 7 for b in gap_idx]
                or 18, "color": GAP_COLOR, "line": {"width": 2}}))
    sel = sorted(sel_boxes)
    traces.append(_scatter(
        x=[boxes[b]["x"] for b in sel] or [None], y=[boxes[b]["y"] for b in sel] or [None],
        mode="markers", hoverinfo="skip", name="selected source op", customdata=sel,
        marker={"symbol": "circle-open", "size": max(16.0, box_cap + 10), "color": SELECTED_COLOR,
                "line": {"width": 3}}))
    # Legend-only entries for the encodings that are not a trace of their own.
    for name, marker in (("fallback (red outline)", {"symbol": "circle", "color": "#FFFFFF",
                                                     "line": {"color": FALLBACK_COLOR, "width": 3}}),
                         ("fused node (◆)", {"symbol": "diamond", "color": "#888888"}),
                         ("layout / cast (▼)", {"symbol": "triangle-down", "color": "#888888"}),
                         ("module box (■, size ~ nodes)", {"symbol": "square", "color": "#888888"})):
        traces.append(_scatter(x=[None], y=[None], mode="markers", marker={**marker, "size": 11}, name=name,
                               hoverinfo="skip", showlegend=True))

    fig_layout = {
        "height": height,
        "margin": {"l": 10, "r": 30, "t": 80 if title else 60, "b": 10},
        "showlegend": True,
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 0, "font": {"size": 10}},
        "modebar": {"orientation": "v"},
        "hovermode": "closest", "dragmode": "pan", "clickmode": "event+select", "plot_bgcolor": "#FFFFFF",
        "xaxis": {"visible": False}, "yaxis": {"visible": False, "autorange": "reversed"},
    }
    if title:
        fig_layout["title"] = {"text": title, "font": {"size": 14}}
    if uirevision is not None:
        fig_layout["uirevision"] = uirevision
    # Built from plain dicts without plotly's per-element validation (most of the cost on large graphs; the
    # structure is fixed here and the tests validate it): the same Figure, several times faster.
    fig = go.Figure(data=traces, layout=fig_layout, _validate=not fast)
    return fig
