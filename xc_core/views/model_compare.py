"""The Compare page's views of a model diff (the dict xc_core/review/model_diff.py makes): which boxes and groups of
each side's topology drawing to colour, which box of one side answers which box of the other (selection rings and
synced scrolling), the change list as table rows with their filters, and the header's words. Nothing here imports
Streamlit, so the page and the tests share it.

Colours are CSS classes on the SVG (COMPARE_CSS, like topology.MARK_CSS): a box whose nodes all share one status is
filled with it — added green, removed red, replaced or changed amber; a collapsed group or an open group's frame
holding some changes is tinted amber, so a change stays findable when its group is closed."""
from __future__ import annotations

from collections import Counter

from .graph_layout import Prepared
from .topology import Tree, add_classes, boxes_holding

BASE, NEW = "base", "new"
KINDS = ("added", "removed", "replaced", "attributes", "shapes", "dtypes", "weights")
FIELDS = ("ops", "attributes", "shapes", "dtypes", "weights")      # what a diff can be asked to compare
# node_status values ("removed" | "replaced" | "changed" on the base side, "added" | … on the new side) → CSS class
STATUS_CLASS = {"added": "mc-added", "removed": "mc-removed", "replaced": "mc-changed", "changed": "mc-changed"}
HOLDS_CLASS = "mc-holds"      # a group that holds changes of more than one kind, or unchanged nodes beside them
MAX_DETAIL = 160              # characters of one table cell's detail

COMPARE_CSS = """
g.node.mc-added > path, g.node.mc-added > polygon { fill: #ccf0d4; stroke: #1a7f37; stroke-width: 2; }
g.node.mc-removed > path, g.node.mc-removed > polygon { fill: #ffd7d5; stroke: #cf222e; stroke-width: 2; }
g.node.mc-changed > path, g.node.mc-changed > polygon { fill: #ffe7a3; stroke: #bf8700; stroke-width: 2; }
g.node.mc-holds > path, g.node.mc-holds > polygon { fill: #fff4d1; stroke: #bf8700; stroke-width: 1.6; }
g.cluster.mc-added > path { fill: #eefaf1; stroke: #1a7f37; }
g.cluster.mc-removed > path { fill: #fff0ef; stroke: #cf222e; }
g.cluster.mc-changed > path, g.cluster.mc-holds > path { fill: #fffaeb; stroke: #bf8700; }
"""
# The legend beside the panes: (label, fill, border) of each class above.
LEGEND = (("added", "#ccf0d4", "#1a7f37"), ("removed", "#ffd7d5", "#cf222e"),
          ("replaced / changed", "#ffe7a3", "#bf8700"), ("group holding changes", "#fff4d1", "#bf8700"))


# ------------------------------------------------------------------------------------------------ the drawings

def status_classes(tree: Tree, v: dict, status: dict[str, str]) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """The CSS classes of one side's drawing `v` (topology.view of `tree`) from that side's node_status: (box
    indices by class, cluster indices by class). A node box takes its node's class; a collapsed group or an open
    group's frame takes the class all its nodes share, else HOLDS_CLASS when any of them changed."""
    prep = tree.prep
    per_path: dict[str, Counter] = {}            # group path -> changed nodes in it (and below) by class
    node_class: dict[int, str] = {}
    for nid, s in status.items():
        i = prep.index.get(nid)
        cls = STATUS_CLASS.get(s)
        if i is None or cls is None:             # a constant or graph input (not drawn), or an unknown status
            continue
        node_class[i] = cls
        comps, path = tree.comps[i], ""
        for part in comps:
            path = f"{path}.{part}" if path else part
            per_path.setdefault(path, Counter())[cls] += 1

    def group_class(path: str) -> str | None:
        counts = per_path.get(path)
        if not counts:
            return None
        if len(counts) == 1 and sum(counts.values()) == tree.size.get(path, -1):
            return next(iter(counts))
        return HOLDS_CLASS

    boxes: dict[str, list[int]] = {}
    for k, b in enumerate(v["boxes"]):
        cls = group_class(b["path"]) if b["kind"] == "group" else node_class.get(prep.index.get(b["id"], -1))
        if cls:
            boxes.setdefault(cls, []).append(k)
    clusters: dict[str, list[int]] = {}
    for k, c in enumerate(v["clusters"]):
        cls = group_class(c["path"])
        if cls:
            clusters.setdefault(cls, []).append(k)
    return boxes, clusters


def mark_clusters(svg: str, classes: dict[str, list[int]]) -> str:
    """Add CSS classes to the open groups' frames of a rendered SVG (topology.mark does the boxes)."""
    return add_classes(svg, classes, "c", "cluster")


def changed_indices(tree: Tree, status: dict[str, str]) -> list[int]:
    """The drawn nodes of one side that changed (to open the groups hiding them on a first drawing)."""
    return sorted(i for nid in status if (i := tree.prep.index.get(nid)) is not None)


def pairs(diff: dict, side: str) -> dict[str, str]:
    """Matched node pairs from one side's node ids to the other's (node_map is new → base)."""
    node_map = diff.get("node_map") or {}
    return dict(node_map) if side == NEW else {b: n for n, b in node_map.items()}


def counterpart_nodes(diff: dict, side: str, node_ids: list[str]) -> list[str]:
    """The other side's nodes matched to these (an added or removed node has none)."""
    other = pairs(diff, side)
    return [other[n] for n in node_ids if n in other]


def counterpart_boxes(v: dict, prep: Prepared, other_v: dict, other_prep: Prepared,
                      matched: dict[str, str]) -> dict[str, str]:
    """For each box of one drawing, the box of the other drawing that shows the counterpart of its first matched
    node ("b3" -> "b5", the panes' SVG ids): what synced scrolling keeps level, from whichever pane moves."""
    out: dict[str, str] = {}
    for i, nid in enumerate(prep.ids):
        k = v["box_of_node"][i]
        if k is None or f"b{k}" in out:
            continue
        j = other_prep.index.get(matched.get(nid, ""))
        other_k = other_v["box_of_node"][j] if j is not None else None
        if other_k is not None:
            out[f"b{k}"] = f"b{other_k}"
    return out


def selected_boxes(v: dict, prep: Prepared, node_ids: list[str]) -> list[str]:
    return [f"b{k}" for k in boxes_holding(v, prep, set(node_ids))]


def counterpart_path(diff: dict, path: str, side: str) -> str | None:
    """A group path of one side as the other side names it, through renamed and renumbered modules
    ("blocks.2.conv1" on the new side is "blocks.1.conv1" on the base side after an insertion at blocks.1): the
    longest renamed prefix wins; a path under no rename is the same on both sides — unless the other side gave
    that name to another module (the inserted "blocks.1": the base's blocks.1 is the new side's blocks.2), then
    None: it has no counterpart."""
    src, dst = (NEW, BASE) if side == NEW else (BASE, NEW)

    def longest(names):
        under = [p for p in names if path == p or path.startswith(p + ".")]
        return max(under, key=len, default=None)

    renames = diff.get("renamed_modules") or []
    mine = longest([r[src] for r in renames])
    taken = longest([r[dst] for r in renames])
    if taken is not None and (mine is None or len(taken) > len(mine)):
        return None
    if mine is None:
        return path
    other = next(r[dst] for r in renames if r[src] == mine)
    return other + path[len(mine):]


# ------------------------------------------------------------------------------------------------ the words

def counts_line(diff: dict) -> str:
    """The header's line: the counts every rendering of a model diff starts with (the CLI's, the Markdown's), and
    how much matched ("1 block added (4 ops) · 1 op replaced · weights changed on 1 op · 18 ops matched")."""
    s = diff.get("summary") or {}
    changed = any(s.get(k) for k in KINDS) or any(r.get("why") == "renamed" for r in diff.get("renamed_modules") or [])
    matched = f"{diff.get('matched', 0)} ops matched"
    if changed:
        # renumbered modules are an insertion's echo, not a change: the caption below the line says them
        words = summary_line({**diff, "renamed_modules": [r for r in diff.get("renamed_modules") or []
                                                          if r.get("why") == "renamed"]})
        return f"{words} · {matched}"
    fields = (diff.get("options") or {}).get("fields") or KINDS
    compared = "" if len(fields) >= len(FIELDS) else f"'s {', '.join(fields)}"
    return f"No change in the model{compared} ({matched})."


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def summary_line(md: dict) -> str:
    """One line of counts: "1 block added (4 ops) · 1 op replaced · weights changed on 1 op · 2 modules renumbered";
    for models that cannot be lined up, the model diff's own line."""
    if not md.get("comparable", True):
        return md.get("line") or "the two models cannot be compared"
    s = md.get("summary") or {}
    blocks = md.get("blocks") or []
    parts = []
    for kind in ("added", "removed"):
        mine = [b for b in blocks if b["kind"] == kind]
        in_blocks = sum(b.get("ops", 0) for b in mine)
        if mine:
            parts.append(f"{plural(len(mine), 'block')} {kind} ({plural(in_blocks, 'op')})")
        loose = s.get(kind, 0) - in_blocks
        if loose > 0:
            parts.append(f"{plural(loose, 'op')} {kind}")
    if s.get("replaced"):
        parts.append(f"{plural(s['replaced'], 'op')} replaced")
    for kind, words in (("weights", "weights"), ("attributes", "attributes"), ("shapes", "shapes"),
                        ("dtypes", "dtypes")):
        if s.get(kind):
            parts.append(f"{words} changed on {plural(s[kind], 'op')}")
    renames = md.get("renamed_modules") or []
    for why in ("renamed", "renumbered"):
        n = sum(r.get("why") == why for r in renames)
        if n:
            parts.append(f"{plural(n, 'module')} {why}")
    if not parts:
        return f"no change in the model ({plural(md.get('matched') or 0, 'op')} matched)"
    return " · ".join(parts)



def renames_caption(diff: dict) -> str:
    """Renamed and renumbered modules in one line (renumbering is the insertion's echo, not a change)."""
    words = {"renamed": "renamed", "renumbered": "renumbered by an insertion or removal"}
    parts = [f"{r['base']} → {r['new']} ({words.get(r.get('why'), r.get('why') or 'renamed')})"
             for r in diff.get("renamed_modules") or []]
    return ("Modules under another path: " + "; ".join(parts)) if parts else ""


def _fmt(value) -> str:
    if isinstance(value, (list, tuple)) and all(isinstance(x, int) or x is None for x in value):
        return "×".join("?" if x is None else str(x) for x in value) or "scalar"
    return str(value)


def _rel(t: dict) -> str:
    rel = t.get("rel_l2")
    if rel is None:
        return "changed"
    bound = "≥ " if t.get("rel_l2_bound") == "lower" else ""
    return f"rel L2 {bound}{rel:.3g}"


def detail_words(change: dict) -> str:
    """A change's detail in words, for one table cell."""
    d = change.get("detail") or {}
    kind = change.get("kind")
    if kind == "replaced":
        text = f"{change.get('base_op') or '?'} → {change.get('op_type') or '?'}"
    elif kind == "attributes":
        text = "; ".join(f"{name}: {_fmt(bn[0])} → {_fmt(bn[1])}" for name, bn in d.items())
    elif kind in ("shapes", "dtypes"):
        text = "; ".join(f"{where}: {_fmt(bn[0])} → {_fmt(bn[1])}" for where, bn in d.items())
    elif kind == "weights":
        text = "; ".join(f"{t.get('name')} ({_fmt(t.get('shape') or [])}): {_rel(t)}"
                         for t in d.get("tensors") or [])
    elif kind in ("added", "removed"):
        text = "only in new" if kind == "added" else "only in base"
    else:
        text = change.get("text") or ""
    return text if len(text) <= MAX_DETAIL else text[:MAX_DETAIL - 1] + "…"


def _op_mix(op_types: dict) -> str:
    return ", ".join(f"{op}×{n}" if n > 1 else op for op, n in sorted(op_types.items(), key=lambda kv: -kv[1]))


def change_rows(diff: dict) -> list[dict]:
    """The change list as table rows, in graph order: a whole inserted or removed block is one row (its ops are
    the block), every other change one row each. Each row also carries the nodes it stands for on each side
    (`base_nodes`, `new_nodes`: what selecting it rings in the panes)."""
    blocks = {(b["kind"], b["module_path"]): b for b in diff.get("blocks") or []}
    block_nodes: dict[tuple, dict] = {}
    rows: list[dict] = []
    for c in diff.get("changes") or []:
        key = (c.get("kind"), c.get("block"))
        if c.get("block") is not None and key in blocks:
            if key not in block_nodes:
                b = blocks[key]
                block_nodes[key] = {"kind": b["kind"], "module_path": b["module_path"],
                                    "op": f"block of {b['ops']} ops",
                                    "base_op": "—",
                                    "detail": f"{'inserted' if b['kind'] == 'added' else 'removed'} block: "
                                              f"{_op_mix(b.get('op_types') or {})}"[:MAX_DETAIL],
                                    "base_nodes": [], "new_nodes": []}
                rows.append(block_nodes[key])
            row = block_nodes[key]
        else:
            row = {"kind": c.get("kind"), "module_path": c.get("module_path") or "(root)",
                   "op": c.get("op_type") or "?", "base_op": c.get("base_op") or "—", "detail": detail_words(c),
                   "base_nodes": [], "new_nodes": []}
            rows.append(row)
        if c.get("base_node"):
            row["base_nodes"].append(c["base_node"])
        if c.get("new_node"):
            row["new_nodes"].append(c["new_node"])
    return rows


def top_modules(diff: dict) -> list[str]:
    """The modules the by-module summary names, for the table's module filter."""
    return [m["module_path"] for m in diff.get("by_module") or []]


def filter_rows(rows: list[dict], kinds=None, module: str | None = None, text: str = "") -> list[dict]:
    """Rows of the kinds picked (None: every kind), in `module` or below it (None or "": anywhere), holding `text`
    (case-insensitive, in the module path, op, base op or detail)."""
    q = text.strip().lower()
    out = []
    for r in rows:
        if kinds is not None and r["kind"] not in kinds:
            continue
        path = r["module_path"]
        if module and not (path == module or path.startswith(module + ".")):
            continue
        if q and not any(q in str(r[k]).lower() for k in ("module_path", "op", "base_op", "detail")):
            continue
        out.append(r)
    return out


def table(rows: list[dict]) -> list[dict]:
    """The rows as the page's table shows them (the node lists stay behind, for selection)."""
    return [{"kind": r["kind"], "module path": r["module_path"], "op": r["op"], "base op": r["base_op"],
             "detail": r["detail"]} for r in rows]
