"""Topology: two or three targets' compiled graphs side by side as layered DAGs (igraph Sugiyama, top to bottom),
collapsed by module so large graphs stay readable. Selecting a node in one pane selects the nodes that carry the
same source ops on the other panes, through the report's alignment."""
import functools

import pandas as pd
import streamlit as st

from pages import _ui
from xc_core import layout as topo

report = _ui.require_report()
_ui.header(report, "Topology")

SEL, PICK, PICK_MOD = "topo_sel", "topo_source_op", "topo_op_module"
NONE = "—"
MAX_TABLE_OPS = 50
FLAT_PICKER_MAX = 1000   # above this many source ops, pick a module first (a 20k-option list is slow to ship
                         # to the browser and to filter while typing)


def _rkey(report: dict) -> str:
    """Identity of the report object for the caches (the sidebar serves the same object for the same analysis)."""
    return f"{report['source'].get('sha256')}|{report.get('created_at')}|{id(report)}"


@st.cache_resource(max_entries=32, show_spinner=False)
def _prepared(rkey: str, tid: str, _target: dict) -> topo.Prepared:
    return topo.prepare(_target["graph"], _target.get("fusions"))


@st.cache_resource(max_entries=64, show_spinner="Laying out the graph…")
def _layout(rkey: str, tid: str, depth, expand, _prep: topo.Prepared) -> dict:
    return topo.layout(_prep, depth, expand)


@st.cache_resource(max_entries=64, show_spinner=False)
def _gaps(rkey: str, tid: str, shown: tuple, _prep: topo.Prepared, _aidx: dict) -> dict:
    return topo.counterpart_gaps(_prep, tid, _aidx, list(shown))


@st.cache_resource(max_entries=8, show_spinner=False)
def _alignment(rkey: str, _report: dict) -> dict:
    return topo.index_alignment(topo.alignment_rows(_report))


def _on_click(tid: str) -> None:
    """A point clicked in one pane: remember its nodes and their source ops (an empty selection is ignored, so a
    pane re-rendering with new highlights never clears what the user picked)."""
    state = st.session_state.get(f"topo_chart_{tid}") or {}
    points = ((state.get("selection") or {}).get("points")) or []
    lay = (st.session_state.get("_topo_layouts") or {}).get(tid)
    if not points or lay is None:
        return
    boxes = set()
    for p in points:
        cd = p.get("customdata")
        if isinstance(cd, list):
            cd = cd[0] if cd else None
        if isinstance(cd, (int, float)) and 0 <= int(cd) < len(lay["boxes"]):
            boxes.add(int(cd))
    if not boxes:
        return
    nodes, ops = [], []
    for b in sorted(boxes):
        box = lay["boxes"][b]
        nodes += box["node_ids"]
        ops += [s for s in box["source_ops"] if s not in ops]
    first = lay["boxes"][min(boxes)]
    st.session_state[SEL] = {"ops": ops, "origin": tid, "nodes": nodes, "label": first["id"]}
    known = st.session_state.get("_topo_op_module") or {}
    if first["kind"] == "node" and ops and ops[0] in known:
        st.session_state[PICK] = ops[0]          # the picker follows the click (first source op of the node)
        st.session_state[PICK_MOD] = known[ops[0]]
    else:
        st.session_state[PICK] = NONE


def _on_pick() -> None:
    v = st.session_state.get(PICK)
    st.session_state[SEL] = None if v in (None, NONE) else {"ops": [v], "origin": None, "nodes": [], "label": v}


def _clear() -> None:
    st.session_state[SEL] = None
    st.session_state[PICK] = NONE


def _valid(key: str, options: list, default) -> None:
    """Keep a widget's remembered value valid for this report's options (a new report may have other targets)."""
    v = st.session_state.get(key)
    if isinstance(default, list):
        kept = [x for x in (v or []) if x in options]
        if not kept or kept != v:
            st.session_state[key] = kept or default
    elif v not in options:
        st.session_state[key] = default


candidates = [tid for tid, t in report["targets"].items() if (t.get("graph") or {}).get("nodes")]
if not candidates:
    st.info("No selected target produced a compiled graph to draw. Pick targets in the sidebar.")
    st.stop()
ok = [tid for tid in candidates if report["targets"][tid]["status"] == "ok"] or candidates

rk = _rkey(report)
aidx = _alignment(rk, report)
rows = aidx["rows"]
op_module = {op: (r.get("module_path") or "(root)") for op, r in rows.items()}
st.session_state["_topo_op_module"] = op_module

c1, c2, c3 = st.columns([3, 1.3, 2])
_valid("topo_targets", candidates, ok[:2])
picked = c1.multiselect("Targets (2 or 3)", candidates, max_selections=3, key="topo_targets",
                        help="Panes side by side; pick two or three compiled graphs to compare.")
if not picked:
    st.info("Pick two or three targets to compare.")
    st.stop()
if len(picked) == 1:
    st.caption("One target picked: add another to see counterparts side by side.")

preps = {tid: _prepared(rk, tid, report["targets"][tid]) for tid in picked}
auto = topo.auto_depth(list(preps.values()))
max_depth = max(p.max_depth for p in preps.values())
depth_opts = ["auto"] + [str(d) for d in range(1, max_depth + 1)] + ["all"]


def _depth_label(o: str) -> str:
    if o == "auto":
        return f"auto ({'all nodes' if auto is None else f'depth {auto}'})"
    if o == "all":
        return "all nodes (no collapsing)"
    return f"depth {o} — " + " / ".join(str(topo.box_count(preps[t], int(o))) for t in picked) + " boxes"


_valid("topo_depth", depth_opts, "auto")
depth_choice = c2.selectbox("Module depth", depth_opts, key="topo_depth", format_func=_depth_label,
                            help="Modules at this depth of the module path become one box (n nodes inside, the "
                                 "backends mix on hover). auto: the most detail that keeps every pane at most "
                                 f"{topo.DEFAULT_BUDGET} boxes.")
depth = auto if depth_choice == "auto" else None if depth_choice == "all" else int(depth_choice)
if depth is None and max(len(p.ids) for p in preps.values()) > 3000:
    st.warning("Drawing every node of a graph this large takes a while and is hard to read; a module depth is "
               "faster.")

mod_counts: dict[str, int] = {}
for p in preps.values():
    for m, k in topo.collapsed_modules(p, depth):
        mod_counts[m] = max(mod_counts.get(m, 0), k)
expand_opts = [NONE] + sorted(mod_counts)
_valid("topo_expand", expand_opts, NONE)
expand_choice = c3.selectbox("Expand module", expand_opts, key="topo_expand", disabled=len(expand_opts) == 1,
                             format_func=lambda m: m if m == NONE else f"{m} ({mod_counts[m]} nodes)",
                             help="Open one collapsed module to see the nodes inside it.")
expand = None if expand_choice == NONE else expand_choice

if len(rows) > FLAT_PICKER_MAX:
    s0, s1, s2 = st.columns([2.5, 2.5, 1])
    op_mods = sorted(set(op_module.values()))
    _valid(PICK_MOD, op_mods, op_mods[0])
    pick_mod = s0.selectbox("Source op module", op_mods, key=PICK_MOD,
                            help=f"{len(rows)} source ops: pick the module, then the op.")
    op_opts = [NONE] + [op for op in rows if op_module[op] == pick_mod]
else:
    s1, s2 = st.columns([5, 1])
    op_opts = [NONE] + list(rows)
_valid(PICK, op_opts, NONE)
s1.selectbox("Source op", op_opts, key=PICK, on_change=_on_pick,
             format_func=lambda s: s if s == NONE else
             f"{s} · {rows[s]['op_type']} · {rows[s].get('module_path') or '(root)'}",
             help="Or click a node in any pane. Its counterparts on the other panes are ringed in black.")
s2.button("Clear selection", on_click=_clear, key="topo_clear", width="stretch")

sel = st.session_state.get(SEL) or None
sel_ops = list(sel["ops"]) if sel else []
st.caption("Colour = backend · ■ module box (size ~ node count) · ◆ fused node · ▼ layout/cast node · "
           "red outline = fallback · magenta ring = no counterpart on another displayed target (or no source "
           "op: inserted by the compiler) · black ring = the selected source op's nodes. Edges point down.")

layouts = {}
panes = st.columns(len(picked))
for col, tid in zip(panes, picked):
    t = report["targets"][tid]
    prep = preps[tid]
    lay = _layout(rk, tid, depth, expand, prep)
    layouts[tid] = lay
    gaps = _gaps(rk, tid, tuple(sorted(picked)), prep, aidx)
    selected = topo.nodes_for_source_ops(aidx, tid, sel_ops)
    if sel and sel.get("origin") == tid:
        selected |= set(sel["nodes"])
    fig = topo.figure(lay, gaps=gaps, selected=selected,
                      uirevision=f"{tid}|{depth}|{expand}")
    with col:
        st.subheader(tid)
        ev = (t.get("graph") or {}).get("evidence")
        st.markdown(_ui.evidence_badge(ev) + f" graph evidence: **{ev or 'unknown'}**"
                    + ("" if t["status"] == "ok" else f" · status **{t['status']}**"))
        st.plotly_chart(fig, key=f"topo_chart_{tid}", on_select=functools.partial(_on_click, tid),
                        selection_mode="points",
                        config={"displaylogo": False, "scrollZoom": True})
        n_fb = sum(1 for n in prep.nodes if n.get("fallback"))
        n_fused = sum(1 for i in range(len(prep.ids)) if prep.is_fused(i))
        st.caption(f"{lay['n_nodes']} nodes → {lay['n_boxes']} boxes "
                   f"({'all nodes' if depth is None else f'module depth {depth}'}"
                   f"{f', {expand} expanded' if expand else ''}), {lay['n_layers']} layers · {n_fb} fallback · "
                   f"{n_fused} fused · {len(gaps)} without counterpart · "
                   f"{len(selected)} selected")
st.session_state["_topo_layouts"] = layouts

st.subheader("Selected source op across targets")
if not sel:
    st.write("Click a node in a pane, or pick a source op above.")
    st.stop()
if not sel_ops:
    st.info(f"`{sel['label']}` on `{sel['origin']}` carries no source op: the compiler inserted it, so no other "
            "target has a counterpart.")
    st.stop()
if sel.get("origin"):
    st.caption(f"From `{sel['label']}` on `{sel['origin']}`: {len(sel_ops)} source op(s)"
               + (f"; the first {MAX_TABLE_OPS} are listed" if len(sel_ops) > MAX_TABLE_OPS else ""))
table = []
for op in sel_ops[:MAX_TABLE_OPS]:
    row = rows.get(op)
    for tid in picked:
        cell = ((row or {}).get("targets") or {}).get(tid)
        base = {"source op": op, "source op_type": (row or {}).get("op_type", "—"),
                "module": ((row or {}).get("module_path") or "(root)") if row else "—", "target": tid}
        if cell is None:
            table.append({**base, "status": "not aligned", "node": "—", "op_type": "—", "backend": "—",
                          "precision": "—", "fused with": "—", "fallback reason": "—"})
            continue
        table.append({**base, "status": cell.get("status") or "—", "node": cell.get("node") or "—",
                      "op_type": cell.get("op_type") or "—", "backend": cell.get("backend") or "—",
                      "precision": cell.get("precision") or "—",
                      "fused with": ", ".join(cell.get("fused_with") or []) or "—",
                      "fallback reason": cell.get("fallback_reason") or "—"})
st.dataframe(pd.DataFrame(table).astype(str), hide_index=True, width="stretch")
st.caption("Alignment evidence: " + _ui.evidence_badge((report.get("alignment") or {}).get("evidence") or "reported")
           + " — provenance recorded by capture and each compiler (source ops carried by each node).")
