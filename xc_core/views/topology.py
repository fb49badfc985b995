"""Topology drawings that read like Netron: labelled boxes (op type, key attributes, backend, precision), edges with
arrowheads and tensor shapes, module groups drawn as containers that expand in place, and collapsed groups that
say what they hide (nodes, fused, fallbacks, precision mix). Graphviz `dot` lays out and draws; nothing here
imports Streamlit, so the Topology page, the HTML report, the benchmark and the tests share it.

    layout.prepare(graph, fusions)    kept nodes, edges (with the tensor each carries), module paths
      → build_tree(prep)              the module hierarchy; flat graphs get one from node-name scopes
                                      ("/encoder/layer.3/MatMul") or, failing that, from runs of the node order
      → auto_expand(tree, budget)     the most detail that keeps the drawing at most `budget` boxes
      → view(tree, expanded)          boxes (nodes, collapsed groups), clusters (expanded groups), edges: plain data
      → to_dot(view) → render_svg()   an SVG string; box and cluster ids map back through view["items"]

Why Graphviz: measured on this kind of graph (bench/topology_bench.py, and a side-by-side run of elkjs, dagre
and igraph), `dot` lays out 300 labelled boxes with clusters in ~0.2–0.35 s, where elkjs needs 1.6–3 s and
dagre ~0.9 s, and it places edge labels, arrowheads and titled clusters itself. It grows super-linearly (5 s at
1,000 boxes), so a drawing never holds more than MAX_BOXES boxes: large graphs are drawn collapsed and opened
group by group, which is also what keeps a 20,000-node graph's first drawing fast.
"""
from __future__ import annotations

import heapq
import html
import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import evidence as ev
# Model text in a drawing: control and format characters (a NUL ends Graphviz's input, XML forbids most control
# characters, a right-to-left override reorders what follows) shown as escapes like \x00, \u202e — xc's one rule.
from ..errors import visible
from ..report.types import NodeRecord, TargetBlock, TensorRecord
from .graph_layout import (
    BACKEND_COLORS,
    FALLBACK_COLOR,
    OTHER_COLOR,
    Prepared,
    paused_gc,
)
from .typed_report import as_target

DEFAULT_BUDGET = 80      # boxes the first drawing of a pane shows at most: readable without zooming
MAX_BOXES = 400          # never more in one drawing (dot takes seconds beyond)
SEQUENCE_FANOUT = 24     # a flat graph without names is grouped in runs of the node order, this many per level
NAME_SCOPE_SHARE = 0.5   # node ids with "/" scopes on at least this share of nodes give the hierarchy
MAX_LABEL = 30


@dataclass
class Tree:
    """The module hierarchy of a prepared graph. Group paths are dotted ("blocks.3.attn"); "" is the root."""
    prep: Prepared
    comps: list[tuple[str, ...]]                 # per node: its group path, split
    children: dict[str, list[str]]               # group -> child groups, in first-appearance order
    direct: dict[str, list[int]]                 # group -> nodes directly in it
    size: dict[str, int]                         # group -> nodes in it and below
    synthesized: str | None = None               # None (module paths), "names" or "sequence"
    _stats: dict = field(default_factory=dict, repr=False)

    def members(self, path: str) -> list[int]:
        out, stack = [], [path]
        while stack:
            p = stack.pop()
            out += self.direct.get(p, [])
            stack += self.children.get(p, [])
        return out

    def stats(self, path: str) -> dict:
        """Counts of a group and everything below it, aggregated bottom-up once for the whole tree (a drawing of a
        20,000-node graph asks for ~80 groups; walking each one's members would cost a second)."""
        if not self._stats:
            self._aggregate()
        return self._stats[path]

    def _aggregate(self) -> None:
        prep = self.prep
        for p in reversed(_preorder(self.children)):
            nodes = [prep.nodes[i] for i in self.direct[p]]
            agg = {"nodes": self.size[p],
                   "fused": sum(1 for i in self.direct[p] if prep.is_fused(i)),
                   "fallback": sum(1 for n in nodes if n.fallback),
                   "backends": Counter(n.backend or "unknown" for n in nodes),
                   "precisions": Counter(n.precision or "—" for n in nodes),
                   "op_types": Counter(n.op_type or "?" for n in nodes),
                   # measured and estimated times summed apart: a group never adds an estimate to a measurement
                   "us": sum(n.measured_us for n in nodes if n.measured_us is not None),
                   "timed": sum(1 for n in nodes if n.measured_us is not None),
                   "us_estimated": sum(n.estimated_us for n in nodes
                                       if n.measured_us is None and n.estimated_us is not None),
                   "estimated": sum(1 for n in nodes if n.measured_us is None and n.estimated_us is not None)}
            for k in self.children[p]:
                sub = self._stats[k]
                for key in ("fused", "fallback", "us", "timed", "us_estimated", "estimated"):
                    agg[key] += sub[key]
                for key in ("backends", "precisions", "op_types"):
                    agg[key].update(sub[key])
            self._stats[p] = agg


def build_tree(prep: Prepared) -> Tree:
    with paused_gc():
        comps, synthesized = list(prep.comps), None
        if prep.ids and not any(comps):
            scoped = [_scope(nid) for nid in prep.ids]
            if sum(1 for s in scoped if s) >= NAME_SCOPE_SHARE * len(scoped):
                comps, synthesized = scoped, "names"
            elif len(prep.ids) > DEFAULT_BUDGET:
                comps, synthesized = _sequence_paths(len(prep.ids)), "sequence"
        tree = _compress_chains(_tree(prep, comps, synthesized))
        for _ in range(4):     # wide levels get runs of their children; rarely more than one round
            wide = {p: kids for p, kids in tree.children.items() if len(kids) > SEQUENCE_FANOUT}
            if not wide:
                break
            tree = _tree(prep, _split_wide(tree.comps, wide), synthesized)
        return tree


def _tree(prep: Prepared, comps: list[tuple[str, ...]], synthesized: str | None) -> Tree:
    children: dict[str, list[str]] = {"": []}
    direct: dict[str, list[int]] = {"": []}
    leaf: dict[tuple, str] = {}                 # distinct paths are far fewer than nodes: walk each once
    for i, c in enumerate(comps):
        path = leaf.get(c)
        if path is None:
            path = ""
            for x in c:
                sub = f"{path}.{x}" if path else x
                if sub not in children:
                    children[sub], direct[sub] = [], []
                    children[path].append(sub)
                path = sub
            leaf[c] = path
        direct[path].append(i)
    # Sizes bottom-up without recursion (a crafted model may nest modules thousands deep).
    order, size = _preorder(children), {}
    for p in reversed(order):
        size[p] = len(direct[p]) + sum(size[k] for k in children[p])
    return Tree(prep, comps, children, direct, size, synthesized)


def _preorder(children: dict[str, list[str]], root: str = "") -> list[str]:
    order, stack = [], [root]
    while stack:
        p = stack.pop()
        order.append(p)
        stack += reversed(children.get(p, []))
    return order


def _compress_chains(tree: Tree) -> Tree:
    """A group holding nothing but one group ("model" around "model.encoder") is merged into it: one box, one
    click, and no tower of nested containers (nor a thousand-deep one from a crafted model)."""
    through = {p for p, kids in tree.children.items() if p and len(kids) == 1 and not tree.direct[p]}
    if not through:
        return tree
    memo: dict[tuple, tuple] = {}
    comps = []
    for c in tree.comps:
        if c not in memo:
            out, cur, path = [], "", ""
            for x in c:
                path = f"{path}.{x}" if path else x
                cur = f"{cur}.{x}" if cur else x
                if path not in through:
                    out.append(cur)
                    cur = ""
            if cur:
                out.append(cur)
            memo[c] = tuple(out)
        comps.append(memo[c])
    return _tree(tree.prep, comps, tree.synthesized)


def _split_wide(comps: list[tuple[str, ...]], wide: dict[str, list[str]]) -> list[tuple[str, ...]]:
    """Groups with more than SEQUENCE_FANOUT child groups (97 transformer blocks under `blocks`) get runs of their
    children in between ("blocks[0–23]"), so every level of the drawing stays small enough to read and to open."""
    runs = {}
    for parent, kids in wide.items():
        for start in range(0, len(kids), SEQUENCE_FANOUT):
            chunk = [k.rsplit(".", 1)[-1] for k in kids[start:start + SEQUENCE_FANOUT]]
            for x in chunk:
                runs[(parent, x)] = f"[{chunk[0]}–{chunk[-1]}]"
    out = []
    for c in comps:
        new, path = [], ""
        for x in c:
            run = runs.get((path, x))
            if run:
                new.append(run)
            new.append(x)
            path = f"{path}.{x}" if path else x
        out.append(tuple(new))
    return out


def _scope(node_id: str) -> tuple[str, ...]:
    """ "/encoder/layer.3/attn/MatMul" -> ("encoder", "layer", "3", "attn"); ids without a scope -> ()."""
    parts = [p for p in node_id.strip("/").split("/") if p]
    return tuple(x for p in parts[:-1] for x in p.split(".") if x) if len(parts) > 1 else ()


def _sequence_paths(n: int) -> list[tuple[str, ...]]:
    """Nested runs of the node order (nodes are in graph order): "ops 1–480" > "ops 1–20"."""
    levels = max(1, math.ceil(math.log(max(n, 2), SEQUENCE_FANOUT)) - 1)
    out = []
    for i in range(n):
        path, lo, span = [], 0, SEQUENCE_FANOUT ** levels
        for _ in range(levels):
            start = lo + (i - lo) // span * span
            path.append(f"ops {start + 1}–{min(start + span, n)}")
            lo, span = start, span // SEQUENCE_FANOUT
        out.append(tuple(path))
    return out


def box_count(tree: Tree, expanded: set[str]) -> int:
    total, stack = 0, [""]
    while stack:
        path = stack.pop()
        total += len(tree.direct.get(path, []))
        for c in tree.children.get(path, []):
            if c in expanded or tree.size[c] == 1:
                stack.append(c)
            else:
                total += 1
    return total


def auto_expand(tree: Tree, budget: int = DEFAULT_BUDGET) -> set[str]:
    """Open the largest groups first while the drawing stays within `budget` boxes."""
    expanded: set[str] = set()
    count = len(tree.direct[""]) + len(tree.children[""])
    heap = [(-tree.size[c], c) for c in tree.children[""] if tree.size[c] > 1]
    heapq.heapify(heap)
    while heap:
        _, path = heapq.heappop(heap)
        delta = len(tree.direct.get(path, [])) + len(tree.children.get(path, [])) - 1
        if count + delta > budget:
            continue
        expanded.add(path)
        count += delta
        for c in tree.children.get(path, []):
            if tree.size[c] > 1:
                heapq.heappush(heap, (-tree.size[c], c))
    return expanded


def expansion_for(tree: Tree, node_indices: list[int], expanded: set[str], cap: int = MAX_BOXES) -> set[str]:
    """`expanded` plus the groups that hide these nodes, as long as the drawing stays within `cap` boxes."""
    out = set(expanded)
    for i in node_indices:
        c = tree.comps[i]
        want = {".".join(c[:k + 1]) for k in range(len(c))}
        if want <= out:
            continue
        if box_count(tree, out | want) <= cap:
            out |= want
    return out


def view(tree: Tree, expanded: set[str]) -> dict:
    """What one drawing shows: boxes (a node, or a collapsed group), clusters (expanded groups holding their
    boxes), edges between boxes with the tensor they carry. Only lists, dicts, strings and numbers."""
    prep = tree.prep
    visible = {""}
    clusters, boxes, box_of_node = [], [], [None] * len(prep.ids)

    # Depth first in graph order, without recursion (a crafted model may nest modules thousands deep).
    stack = [("visit", "", None)]
    while stack:
        what, path, cluster = stack.pop()
        if what == "nodes":
            for i in tree.direct.get(path, []):
                box_of_node[i] = len(boxes)
                boxes.append(_node_box(prep, i, cluster))
        elif what == "group":
            for i in tree.members(path):
                box_of_node[i] = len(boxes)
            boxes.append(_group_box(tree, path, cluster, f"g:{path}"))
        elif what == "open":
            visible.add(path)
            clusters.append(_cluster(tree, path, cluster))
            stack.append(("visit", path, path))
        else:
            todo = [("visit", c, cluster) if tree.size[c] == 1 else ("open" if c in expanded else "group", c, cluster)
                    for c in tree.children.get(path, [])]     # a group of one node is drawn as that node
            todo.append(("nodes", path, cluster))
            stack += reversed(todo)
    agg: dict[tuple[int, int], list] = {}
    for (a, b), t in zip(prep.edges, prep.tensors or [TensorRecord(null=True)] * len(prep.edges)):
        ba, bb = box_of_node[a], box_of_node[b]
        if ba is None or bb is None or ba == bb:
            continue
        e = agg.setdefault((ba, bb), [0, t])
        e[0] += 1
    edges = [{"source": a, "target": b, "count": k, "shape": _shape(t.shape), "dtype": t.dtype,
              "tensor": t.name if t else None} for (a, b), (k, t) in agg.items()]
    return {"boxes": boxes, "clusters": clusters, "edges": edges, "n_nodes": len(prep.ids), "n_boxes": len(boxes),
            "expanded": sorted(p for p in expanded if p in visible), "synthesized": tree.synthesized,
            "box_of_node": box_of_node,
            # A graph no compiler assigned (the captured graph): boxes then show no backend at all, not "unknown".
            "assigned": any(n.backend for n in prep.nodes)}


def _ops_are(target: TargetBlock) -> str:
    """What a pane's ops are: a step graph (views/rows.with_stage_graphs adds each as a target marked `stage_of`)
    holds the ops at that step, any other the target's compiled ops."""
    return "ops at this step" if target.extra.get("stage_of") else "compiled ops"


def count_caption(target: TargetBlock | Mapping, v: dict) -> str:
    """A pane's node count as what it is, beside the op counts every other view gives: "137 nodes drawn: 127
    compiled ops + 10 layout moves → 40 boxes" — the drawing holds every node but constants and graph
    inputs/outputs, so layout moves and casts make its count differ from the target's compiled ops."""
    from .target_counts import drawn_text
    target = as_target(target)
    return f"{drawn_text(target.graph.nodes, _ops_are(target))} → {v['n_boxes']} boxes"


def fallback_caption(target: TargetBlock | Mapping, nodes: list[NodeRecord]) -> str:
    """The drawn nodes on the CPU as fallback, counted as the split counts them: "75 compiled ops on the CPU as
    fallback", and apart from them any layout move or cast the target flags ("… and 2 layout moves")."""
    from .target_counts import KIND_WORDS, plural
    ops_are = _ops_are(as_target(target))
    flagged = [n for n in nodes if n.fallback]
    ops = sum(n.kind == "compute" for n in flagged)
    others = Counter(n.kind for n in flagged if n.kind != "compute")
    extra = "".join(f" and {plural(k, KIND_WORDS.get(kind, str(kind)))}" for kind, k in sorted(others.items()))
    return f"{ops} {ops_are.replace('ops', 'op', 1) if ops == 1 else ops_are} on the CPU as fallback{extra}"


def _shape(shape) -> str:
    if shape is None:
        return ""
    return "×".join(str(d) if d is not None else "?" for d in shape) or "scalar"


def _short(path: str) -> str:
    """A group's label: its module path (the last three parts), runs xc inserted shown as "blocks[0–23]"."""
    parts = path.split(".")
    if parts[-1].startswith("["):
        real = [p for p in parts[:-1] if not p.startswith("[")]
        return (real[-1] if real else "") + parts[-1]
    real = [p for p in parts if not p.startswith("[")]
    return ".".join(real) if len(real) <= 3 else "…" + ".".join(real[-3:])


def _mix(counter: Counter, k: int = 3) -> str:
    items = [f"{name} {n}" for name, n in counter.most_common() if name != "—"]
    return " · ".join(items[:k]) + (" …" if len(items) > k else "")


def _cluster(tree: Tree, path: str, parent: str | None) -> dict:
    s = tree.stats(path)
    return {"path": path, "parent": parent, "label": _short(path), "nodes": s["nodes"], "fused": s["fused"],
            "fallback": s["fallback"], "precisions": dict(s["precisions"]), "backends": dict(s["backends"])}


def _group_box(tree: Tree, path: str, cluster: str | None, key: str) -> dict:
    s = tree.stats(path)
    return {"kind": "group", "key": key, "path": path, "cluster": cluster, "label": _short(path),
            "nodes": s["nodes"], "fused": s["fused"], "fallback": s["fallback"],
            "backend": s["backends"].most_common(1)[0][0], "backends": dict(s["backends"]),
            "precisions": dict(s["precisions"]), "op_types": dict(s["op_types"].most_common(8)),
            **_box_time(s["us"] if s["timed"] else None, s["us_estimated"] if s["estimated"] else None)}


def _box_time(measured: float | None, estimated: float | None) -> dict:
    """A box's time and what it is: measured where any of its nodes was profiled, else the compiler's estimate
    (a target has one kind; the two are never added)."""
    if measured is not None:
        return {"us": measured, "time_evidence": ev.MEASURED}
    if estimated is not None:
        return {"us": estimated, "time_evidence": ev.ESTIMATED_COMPILER}
    return {"us": None, "time_evidence": None}


def _node_box(prep: Prepared, i: int, cluster: str | None) -> dict:
    n = prep.nodes[i]
    fused = prep.fused[i] if prep.is_fused(i) else None
    return {"kind": "node", "key": f"n:{prep.ids[i]}", "id": prep.ids[i], "cluster": cluster,
            "op_type": n.op_type or "?", "node_kind": n.kind, "attrs": key_attributes(n),
            "backend": n.backend or "unknown", "precision": n.precision,
            "fallback": bool(n.fallback), "fallback_reason": n.fallback_reason,
            "fused": ((fused["pattern"] or "").split(" → ")[0] or f"{len(fused['absorbed'])} ops") if fused
            else None,
            "absorbed": list(fused["absorbed"]) if fused else [],
            "module": prep.modules[i], "source_ops": list(n.source_ops),
            "kernel": n.kernel, "node_ids": [prep.ids[i]], **_box_time(n.measured_us, n.estimated_us)}


def key_attributes(node: NodeRecord) -> str:
    """The attributes Netron shows on the box: kernel, stride, groups, dilation, a fused activation, axes (each as
    the compiler named it in the node's attribute bag)."""
    a = node.attributes or {}
    bits = []

    def ints(v):
        return [int(x) for x in v] if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v) \
            else None

    k = ints(a.get("kernel_shape"))
    if k:
        bits.append("k" + "×".join(map(str, k)))
    s = ints(a.get("strides"))
    if s and any(x != 1 for x in s):
        bits.append("s" + "×".join(map(str, s)))
    d = ints(a.get("dilations"))
    if d and any(x != 1 for x in d):
        bits.append("d" + "×".join(map(str, d)))
    g = a.get("group")
    if isinstance(g, (int, float)) and g > 1:
        bits.append(f"g{int(g)}")
    if isinstance(a.get("activation"), str):
        bits.append("+" + a["activation"])
    p = ints(a.get("perm"))
    if p:
        bits.append("perm " + ",".join(map(str, p)))
    for name in ("axis", "axes"):
        if name in a and isinstance(a[name], (int, list)):
            bits.append(f"{name} {a[name] if isinstance(a[name], int) else ','.join(map(str, a[name]))}")
    if a.get("transB") == 1:
        bits.append("Bᵀ")
    text = " ".join(bits)
    return text if len(text) <= MAX_LABEL else text[:MAX_LABEL - 1] + "…"


# ------------------------------------------------------------------------------------------------ drawing

def tint(hex_colour: str, share: float = 0.72) -> str:
    r, g, b = (int(hex_colour[k:k + 2], 16) for k in (1, 3, 5))
    return "#%02x%02x%02x" % tuple(round(c + (255 - c) * share) for c in (r, g, b))


def _e(s) -> str:
    return html.escape(visible(str(s)), quote=True)


def _cut(s: str, k: int = MAX_LABEL) -> str:
    return s if len(s) <= k else s[:k - 1] + "…"


# The time colouring: pale yellow → orange → red as a box's share of the drawing's largest box time grows
# (ColorBrewer's YlOrRd, as the heat map's, without its darkest stops so the dark labels stay readable); a box with
# no time (measured, or a compiler's estimate) stays grey.
TIME_SCALE = ("#ffffcc", "#ffeda0", "#fed976", "#feb24c", "#fd8d3c", "#fc4e2a")
UNTIMED_COLOR = "#e6e6e6"


def time_colour(share: float) -> str:
    """The TIME_SCALE colour for a share in [0, 1], interpolated between its stops."""
    share = min(1.0, max(0.0, share)) * (len(TIME_SCALE) - 1)
    k = min(int(share), len(TIME_SCALE) - 2)
    f = share - k
    a, b = ([int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in TIME_SCALE[k:k + 2])
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b))


def to_dot(v: dict, colour: str = "backend") -> str:
    """The drawing as Graphviz DOT. Boxes are "b<k>" and clusters "cluster_<k>"; nothing from the model is used as
    a DOT identifier, and every label is escaped (HTML-like labels). `colour`: "backend" fills each box with its
    backend's colour, "time" with its time — measured, or a compiler's estimate: one target per drawing, one kind
    (TIME_SCALE, relative to the drawing's costliest box)."""
    lines = ['digraph G {',
             '  graph [rankdir=TB, ranksep=0.32, nodesep=0.22, fontname="Helvetica", fontsize=10, '
             'bgcolor="transparent", margin=0.05];',
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, margin="0.07,0.03", '
             'height=0.3, penwidth=1.2];',
             '  edge [fontname="Helvetica", fontsize=8, fontcolor="#6b6b6b", color="#9a9a9a", arrowsize=0.6];']
    timing = None
    if colour == "time":
        total = sum(b["us"] for b in v["boxes"] if b.get("us") is not None)
        timing = {"max": max((b["us"] for b in v["boxes"] if b.get("us") is not None), default=0.0),
                  "total": total}
    by_cluster: dict[str | None, list[int]] = {}
    for k, b in enumerate(v["boxes"]):
        by_cluster.setdefault(b["cluster"], []).append(k)
    kids: dict[str | None, list[int]] = {}
    for k, c in enumerate(v["clusters"]):
        kids.setdefault(c["parent"], []).append(k)

    def emit(cluster: str | None, indent: str) -> None:
        for k in kids.get(cluster, []):
            c = v["clusters"][k]
            lines.append(f'{indent}subgraph cluster_{k} {{')
            lines.append(f'{indent}  id="c{k}"; label=<{_cluster_label(c)}>; labeljust=l; style="rounded,dashed"; '
                         f'color="#b0b0b0"; fontsize=9; fontcolor="#444444"; penwidth=1;')
            emit(c["path"], indent + "  ")
            lines.append(f"{indent}}}")
        for k in by_cluster.get(cluster, []):
            lines.append(f"{indent}{_box_dot(k, v['boxes'][k], v.get('assigned', True), timing)}")

    emit(None, "  ")
    for e in v["edges"]:
        label = e["shape"] + (f" (×{e['count']})" if e["count"] > 1 else "")
        width = 1 + min(2.5, math.log(e["count"], 4)) if e["count"] > 1 else 1
        lines.append(f'  b{e["source"]} -> b{e["target"]} [label=<{_e(label)}>, penwidth={width:.2f}];')
    lines.append("}")
    return "\n".join(lines)


def _cluster_label(c: dict) -> str:
    bits = [f"{c['nodes']} nodes"]
    if c["fused"]:
        bits.append(f"{c['fused']} fused")
    if c["fallback"]:
        bits.append(f"{c['fallback']} on CPU")
    return f"▾ <B>{_e(c['label'])}</B>  <FONT COLOR=\"#777777\">{_e(' · '.join(bits))}</FONT>"


def _box_dot(k: int, b: dict, assigned: bool = True, timing: dict | None = None) -> str:
    colour = BACKEND_COLORS.get(b["backend"], OTHER_COLOR)
    border, pen = (FALLBACK_COLOR, 2.6) if b["fallback"] else (colour, 1.2)
    us = b.get("us")
    rows = []
    if b["kind"] == "group":
        rows.append(f"<B>▸ {_e(b['label'])}</B>")
        counts = [f"{b['nodes']} nodes"] + ([f"{b['fused']} fused"] if b["fused"] else [])
        rows.append(_e(" · ".join(counts)))
        if b["fallback"]:
            rows.append(f'<FONT COLOR="{FALLBACK_COLOR}">{b["fallback"]} on CPU</FONT>')
        mix = _mix(Counter(b["precisions"]))
        if mix:
            rows.append(f'<FONT POINT-SIZE="8" COLOR="#555555">{_e(mix)}</FONT>')
        style, extra = "rounded,filled,bold", ""
    else:
        rows.append(f"<B>{_e(_cut(b['op_type'], 24))}</B>")
        if b["attrs"]:
            rows.append(f'<FONT POINT-SIZE="8">{_e(b["attrs"])}</FONT>')
        if b["fused"]:
            rows.append(f'<FONT POINT-SIZE="8">◆ {_e(_cut(b["fused"], 34))}</FONT>')
        tail = " · ".join(x for x in (b["backend"] if assigned else None, b["precision"]) if x)
        if tail:
            rows.append(f'<FONT POINT-SIZE="8" COLOR="#555555">{_e(tail)}</FONT>')
        style = "rounded,filled" if b["node_kind"] == "compute" else "rounded,filled,dashed"
        extra = ""
    if timing is not None and us is not None:
        share = f" · {100 * us / timing['total']:.0f}%" if timing["total"] else ""
        # an estimate says so on the box itself, not only in the hover
        est = "est. " if b.get("time_evidence") == ev.ESTIMATED_COMPILER else ""
        rows.append(f'<FONT POINT-SIZE="8"><B>{est}{_e(_us(us))}{share}</B></FONT>')
    label = '<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">' + "".join(
        f"<TR><TD>{r}</TD></TR>" for r in rows) + "</TABLE>"
    if timing is not None:
        fill = time_colour(us / timing["max"]) if us is not None and timing["max"] else UNTIMED_COLOR
        if not b["fallback"]:
            border = "#8a8a8a"
    else:
        fill = tint(colour, 0.55 if b["kind"] == "group" else 0.72)
    return (f'b{k} [id="b{k}", label=<{label}>, fillcolor="{fill}", color="{border}", penwidth={pen}, '
            f'style="{style}"{extra}];')


def _us(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs" if us >= 10 else f"{us:.1f} µs"


def hover_text(b: dict) -> str:
    if b["kind"] == "group":
        lines = [f"{b['path']} — {b['nodes']} nodes (click to expand)",
                 "backends: " + ", ".join(f"{k} {n}" for k, n in b["backends"].items()),
                 "precision: " + ", ".join(f"{k} {n}" for k, n in b["precisions"].items()),
                 "op types: " + ", ".join(f"{k}×{n}" for k, n in b["op_types"].items())]
        if b["fallback"]:
            lines.append(f"{b['fallback']} node(s) fall back to the CPU")
        if b.get("us") is not None:
            lines.append(f"time: {_us(b['us'])} ({_time_words(b, 'its timed nodes together')})")
        return "\n".join(lines)
    lines = [f"{b['id']} — {b['op_type']}", f"module: {b['module'] or '(root)'}",
             f"backend: {b['backend']}" + (f" ({b['kernel']})" if b.get("kernel") else ""),
             f"precision: {b['precision'] or '—'}"]
    if b["fused"]:
        lines.append(f"fused: {b['fused']} — absorbed {', '.join(b['absorbed'][:8])}")
    if b["fallback"]:
        lines.append(f"falls back to the CPU: {b['fallback_reason'] or 'no reason given'}")
    if b.get("us") is not None:
        lines.append(f"time: {_us(b['us'])} ({_time_words(b, 'median of the profiled runs')})")
    lines.append("source ops: " + (", ".join(b["source_ops"][:12]) or "none (inserted by the compiler)"))
    return "\n".join(lines)


def _time_words(b: dict, measured_how: str) -> str:
    if b.get("time_evidence") == ev.ESTIMATED_COMPILER:
        return f"{ev.ESTIMATED_COMPILER}: the compiler's estimate for its device, nothing ran"
    return f"measured, {measured_how}"


class GraphvizMissing(RuntimeError):
    pass


def render_svg(v: dict, colour: str = "backend") -> str:
    """The drawing as an SVG string: dot's layout, each box's and cluster's <title> replaced by its hover text."""
    import graphviz
    try:
        svg = graphviz.Source(to_dot(v, colour)).pipe(format="svg", encoding="utf-8")
    except graphviz.ExecutableNotFound as e:
        raise GraphvizMissing("Graphviz's `dot` is not installed (Debian: apt-get install graphviz); the Topology "
                              "view needs it") from e
    svg = svg[svg.index("<svg"):]
    hovers = {f"b{k}": hover_text(b) for k, b in enumerate(v["boxes"])}
    hovers.update({f"cluster_{k}": f"{c['path']} — {c['nodes']} nodes (click the title to collapse)"
                   for k, c in enumerate(v["clusters"])})
    return re.sub(r"<title>([^<]*)</title>",
                  lambda m: f"<title>{html.escape(_visible_lines(hovers.get(m.group(1), '')), quote=False)}</title>"
                  if m.group(1) in hovers else ("<title></title>" if "&#45;&gt;" in m.group(1) else m.group(0)),
                  svg)


def _visible_lines(text: str) -> str:
    return "\n".join(visible(line) for line in text.split("\n"))


def boxes_holding(v: dict, prep: Prepared, node_ids: set[str]) -> list[int]:
    """Indices of the boxes that show (or hide, when collapsed) any of these nodes."""
    return sorted({v["box_of_node"][prep.index[n]] for n in node_ids
                   if n in prep.index and v["box_of_node"][prep.index[n]] is not None})


def mark(svg: str, classes: dict[str, list[int]]) -> str:
    """Add CSS classes to boxes of a rendered SVG ({"gap": [box indices]}), for drawings shown without script."""
    return add_classes(svg, classes, "b", "node")


def add_classes(svg: str, classes: dict[str, list[int]], id_prefix: str, element: str) -> str:
    """Add CSS classes to the `<g id="{id_prefix}K" class="{element}">` groups of a rendered SVG, by index K."""
    by_index: dict[int, list[str]] = {}
    for cls, ks in classes.items():
        for k in ks:
            by_index.setdefault(k, []).append(cls)
    return re.sub(rf'<g id="{id_prefix}(\d+)" class="{element}">',
                  lambda m: f'<g id="{id_prefix}{m.group(1)}" class="{element} {" ".join(by_index[int(m.group(1))])}">'
                  if int(m.group(1)) in by_index else m.group(0), svg)


# CSS for the marks, shared by the dashboard pane and the HTML report.
MARK_CSS = """
g.node.sel > path, g.node.sel > polygon { stroke: #111 !important; stroke-width: 4 !important;
                                          stroke-dasharray: none !important; }
g.node.gap > path, g.node.gap > polygon { stroke: #D62AD0; stroke-dasharray: 5 3; stroke-width: 2.4; }
g.node.match > path, g.node.match > polygon { stroke: #f0a30a !important; stroke-width: 4 !important; }
"""
