"""Topology: two or three targets' compiled graphs side by side, drawn like Netron (labelled boxes, edges with
tensor shapes, module groups that expand in place) by Graphviz. Selecting a node in one pane rings the nodes that
carry the same source ops on the other panes, through the report's alignment; search finds nodes and source ops
by name and opens the groups that hide them. While an analysis runs, the captured graph is drawn as soon as capture
has written it (pages/_capture_preview.py)."""
import functools
import html

import pandas as pd
import streamlit as st

from pages import _capture_preview, _ui
from pages._graph_pane import HIERARCHY_NOTES, graph_pane, pane_items
from xc_core.views import graph_layout as layout, topology
from xc_core.views.rows import stage_graph_choices, with_stage_graphs
from xc_core.views.time_evidence import timed_label
from xc_core.views.typed_report import Report, TargetBlock, as_report

# While the targets compile, the captured graph (what every target starts from) is drawn instead.
report = _ui.require_report(while_running=_capture_preview.show)
_ui.header(report, "Topology")

SEL, PICK, PICK_MOD, EXPANDED, FIND = "topo_sel", "topo_source_op", "topo_op_module", "topo_expanded", "topo_find"
NONE = "—"
MAX_TABLE_OPS = 50
FLAT_PICKER_MAX = 1000   # above this many source ops, pick a module first (a 20k-option list is slow to ship
                         # to the browser and to filter while typing)
PANE_HEIGHT = 680


def _rkey(report: Report) -> str:
    """Identity of the report object for the caches (the session keeps one Report per analysis: _ui.session_report)."""
    return f"{report.source.sha256}|{report.created_at}|{id(report)}"


@st.cache_resource(max_entries=32, show_spinner=False)
def _tree(rkey: str, tid: str, _target: TargetBlock) -> topology.Tree:
    return topology.build_tree(layout.prepare(_target.graph, _target.fusions))


@st.cache_resource(max_entries=96, show_spinner="Drawing the graph…")
def _drawing(rkey: str, tid: str, expanded: tuple, colour: str, _tree: topology.Tree) -> tuple[dict, str]:
    v = topology.view(_tree, set(expanded))
    return v, topology.render_svg(v, colour)


@st.cache_resource(max_entries=8, show_spinner=False)
def _alignment(rkey: str, _report: Report) -> dict:
    return layout.index_alignment(layout.alignment_rows(_report))


@st.cache_resource(max_entries=32, show_spinner=False)
def _gaps(rkey: str, tid: str, shown: tuple, _tree: topology.Tree, _aidx: dict) -> dict:
    return layout.counterpart_gaps(_tree.prep, tid, _aidx, list(shown))


def _on_pane_event(tid: str) -> None:
    """A click in a pane, handled before the rerun draws anything: a group toggles open / closed (every pane), a
    node becomes the selection (its nodes and source ops)."""
    ev = st.session_state.get(f"topo_pane_{tid}") or {}
    v = (st.session_state.get("_topo_drawings") or {}).get(tid)
    toggle, pick = ev.get("toggle"), ev.get("select")
    if toggle:
        state = st.session_state.get(EXPANDED) or {"paths": []}
        st.session_state[EXPANDED] = {**state, "paths": sorted(set(state["paths"]) ^ {toggle})}
    elif pick and v is not None and pick[1:].isdigit() and int(pick[1:]) < len(v["boxes"]):
        box = v["boxes"][int(pick[1:])]
        ops = list(dict.fromkeys(box["source_ops"]))
        st.session_state[SEL] = {"ops": ops, "origin": tid, "nodes": box["node_ids"],
                                 "label": box.get("id") or box["path"]}
        st.session_state[PICK] = ops[0] if ops else NONE     # the picker follows the click (checked below)
        module = (st.session_state.get("_topo_op_module") or {}).get(ops[0]) if ops else None
        if module is not None:
            st.session_state[PICK_MOD] = module


def _on_pick() -> None:
    v = st.session_state.get(PICK)
    st.session_state[SEL] = None if v in (None, NONE) else {"ops": [v], "origin": None, "nodes": [], "label": v}


def _clear() -> None:
    st.session_state[SEL] = None
    st.session_state[PICK] = NONE
    st.session_state[FIND] = ""


def _valid(key: str, options: list, default) -> None:
    """Keep a widget's remembered value valid for this report's options (a new report may have other targets)."""
    v = st.session_state.get(key)
    if isinstance(default, list):
        kept = [x for x in (v or []) if x in options]
        if not kept or kept != v:
            st.session_state[key] = kept or default
    elif v not in options:
        st.session_state[key] = default


@st.cache_resource(max_entries=8, show_spinner=False)
def _with_steps(rkey: str, picks: tuple, _report: Report, _graphs: dict) -> Report:
    """The report with the picked step graphs as extra targets (one object per pick set, so the drawing caches
    below keep hitting)."""
    return as_report(with_stage_graphs(_report, _graphs, list(picks)))


_ui.apply_stage_request()
step_choices = stage_graph_choices(report) if _ui.stage_graph_file(report) else []
if step_choices:
    labels = [lab for _, _, lab in step_choices]
    _valid(_ui.STAGE_PICKS, labels, [])
    with st.expander("Step graphs: a target's graph after an earlier lowering stage", expanded=bool(
            st.session_state.get(_ui.STAGE_PICKS))):
        st.multiselect("Add as panes", labels, key=_ui.STAGE_PICKS,
                       help="The graph after an ORT optimization level, a coremltools pass, OpenVINO's common "
                            "transformations or Inductor's post-grad passes; it aligns with the compiled graphs "
                            "through its source ops. The Stages page lists every step.")
    chosen = tuple(c for c in step_choices if c[2] in (st.session_state.get(_ui.STAGE_PICKS) or []))
    if chosen:
        report = _with_steps(_rkey(report), chosen, report, _ui.stage_graphs(report))

candidates = [tid for tid, t in report.targets.items() if t.graph.nodes]
if not candidates:
    st.info("No selected target produced a compiled graph to draw. Pick targets in the sidebar.")
    st.stop()
ok = [tid for tid in candidates if report.targets[tid].status == "ok"] or candidates

rk = _rkey(report)
aidx = _alignment(rk, report)
rows = aidx["rows"]
PICKER_RUN = 500     # source ops without a module path are offered in runs of this many (a flat 20k-node ONNX)
op_module = {}
for k, (op, r) in enumerate(rows.items()):
    lo = k // PICKER_RUN * PICKER_RUN
    op_module[op] = r.get("module_path") or (f"(no module) ops {lo + 1}–{min(lo + PICKER_RUN, len(rows))}"
                                             if len(rows) > FLAT_PICKER_MAX else "(root)")
st.session_state["_topo_op_module"] = op_module

c1, c2, c3, c4 = st.columns([3, 2.4, 1, 1])
_valid("topo_targets", candidates, ok[:2])
picked = c1.multiselect("Targets (2 or 3)", candidates, max_selections=3, key="topo_targets",
                        help="Panes side by side; pick two or three compiled graphs to compare.")
if not picked:
    st.info("Pick two or three targets to compare.")
    st.stop()
trees = {tid: _tree(rk, tid, report.targets[tid]) for tid in picked}
largest = max(trees.values(), key=lambda tr: len(tr.prep.ids))

# One set of expanded groups for every pane: group paths are source module paths, the same on every target.
state = st.session_state.get(EXPANDED)
if not state or state.get("report") != rk:
    state = {"report": rk, "paths": sorted(topology.auto_expand(largest))}
    st.session_state[EXPANDED] = state
expanded = set(state["paths"])


def _set_expanded(paths: set[str]) -> None:
    st.session_state[EXPANDED] = {"report": rk, "paths": sorted(paths)}


find = c2.text_input("Find a node or source op", key=FIND, placeholder="e.g. Conv, layer_norm, blocks.1",
                     help="Matches node names, source-op names and op types; the groups that hide a match open.")
if c3.button("Auto", key="topo_auto", width="stretch",
             help=f"The most detail that keeps the largest pane at {topology.DEFAULT_BUDGET} boxes."):
    _set_expanded(topology.auto_expand(largest))
    st.rerun()
if c4.button("Collapse", key="topo_collapse", width="stretch", help="Every group closed."):
    _set_expanded(set())
    st.rerun()

matches: dict[str, list[int]] = {}
if find.strip():
    q = find.strip().lower()
    for tid, tr in trees.items():
        matches[tid] = [i for i, (nid, n) in enumerate(zip(tr.prep.ids, tr.prep.nodes))
                        if q in nid.lower() or q in (n.op_type or "").lower()
                        or any(q in s.lower() for s in n.source_ops)
                        or q in (tr.prep.modules[i] or "").lower()][:200]
    if st.session_state.get("_topo_found") != (rk, q):      # open the hiding groups once per new query
        st.session_state["_topo_found"] = (rk, q)
        opened = set(expanded)
        for tid, idx in matches.items():
            opened = topology.expansion_for(trees[tid], idx, opened)
        if opened != expanded:
            _set_expanded(opened)
            expanded = opened

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
s2.button("Clear", on_click=_clear, key="topo_clear", width="stretch", help="Clear the selection and the search.")

sel = st.session_state.get(SEL) or None
sel_ops = list(sel["ops"]) if sel else []
timed = [tid for tid in picked if report.targets[tid].node_times.timed_us]
colour = st.radio("Colour", ["backend", "time"], horizontal=True, key="topo_colour",
                  help="time: each box by its measured time (the runtime's profiler on this host's CPU, median of "
                       "the profiled runs) or, for a device no one runs here (Ethos-U), its compiler's estimate "
                       "(estimated-compiler: \"est.\" on the box), relative to the pane's costliest box; grey: "
                       "not timed")
if colour == "time" and not timed:
    st.caption("None of the picked targets timed its nodes in this run: every box is grey.")
chips = " ".join(f'<span style="background:{topology.tint(c, 0.6)};border:1px solid {c};border-radius:4px;'
                 f'padding:0 6px">{b}</span>' for b, c in layout.BACKEND_COLORS.items() if b != "unknown")
if colour == "time":
    timed_names = ", ".join(timed_label(t, report.targets[t].node_times) for t in timed)   # an estimate marked
    chips = " ".join(f'<span style="background:{topology.time_colour(x)};color:{ink};border:1px solid #8a8a8a;'
                     f'border-radius:4px;padding:0 6px">{label}</span>'
                     for x, label, ink in ((0, "least", "#222"), (0.5, "half", "#222"), (1, "most", "#222")))
    chips += (f' <span style="background:{topology.UNTIMED_COLOR};border-radius:4px;padding:0 6px">not timed</span> '
              f'(timed: {html.escape(timed_names) or "none"}; relative to the pane\'s costliest box)')
st.markdown(
    f'<div style="font-size:0.82rem;line-height:1.9">{"Time" if colour == "time" else "Backend"}: {chips} · '
    f'<span style="border:2px solid {layout.FALLBACK_COLOR};border-radius:4px;padding:0 6px">falls back to the '
    f'CPU</span> · ◆ fused (what it absorbed) · <span style="border:2px dashed {layout.GAP_COLOR};'
    'border-radius:4px;padding:0 6px">no counterpart on another pane</span> · <span style="border:3px solid #111;'
    'border-radius:4px;padding:0 6px">selected</span> · <span style="border:3px solid #f0a30a;border-radius:4px;'
    'padding:0 6px">search match</span> · ▸ collapsed group (click to open) · ▾ open group (click its title to '
    'close) · edges carry the tensor shape</div>', unsafe_allow_html=True)

too_big = [tid for tid, tr in trees.items() if topology.box_count(tr, expanded) > topology.MAX_BOXES]
if too_big:
    st.warning(f"Opening that many groups would draw more than {topology.MAX_BOXES} boxes on {', '.join(too_big)}; "
               "the previous view is kept. Close a group first.")
    last = st.session_state.get("_topo_last_ok") or {}
    expanded = set(last.get("paths") or []) if last.get("report") == rk else set()
    _set_expanded(expanded)
else:
    st.session_state["_topo_last_ok"] = {"report": rk, "paths": sorted(expanded)}

panes = st.columns(len(picked))
drawings = {}
for col, tid in zip(panes, picked):
    t, tr = report.targets[tid], trees[tid]
    try:
        v, svg = _drawing(rk, tid, tuple(sorted(expanded)), colour, tr)
    except topology.GraphvizMissing as e:
        st.error(str(e))
        st.stop()
    drawings[tid] = v
    gaps = _gaps(rk, tid, tuple(sorted(picked)), tr, aidx)
    selected = layout.nodes_for_source_ops(aidx, tid, sel_ops)
    if sel and sel.get("origin") == tid:
        selected |= set(sel["nodes"])
    found = {tr.prep.ids[i] for i in matches.get(tid, [])}
    sel_boxes = [f"b{k}" for k in topology.boxes_holding(v, tr.prep, selected)]
    gap_boxes = [f"b{k}" for k, b in enumerate(v["boxes"]) if b["kind"] == "node" and b["id"] in gaps]
    match_boxes = [f"b{k}" for k in topology.boxes_holding(v, tr.prep, found)]
    items, clusters = pane_items(v)
    n_fused = sum(1 for i in range(len(tr.prep.ids)) if tr.prep.is_fused(i))
    with col:
        ev = t.graph.evidence
        st.markdown(f"**{_ui.plain(tid)}** " + _ui.evidence_badge(ev)
                    + ("" if t.status == "ok" else f" · status **{t.status}**"),
                    help=f"Backend assignment evidence: {ev or 'unknown'} — {_ui.EVIDENCE_HELP.get(ev, '')}")
        graph_pane(
            data={"svg": svg, "key": f"{rk}|{tid}|{colour}|{len(expanded)}|{hash(tuple(sorted(expanded)))}",
                  "items": items,
                  "clusters": clusters, "selected": sel_boxes, "gaps": gap_boxes, "matches": match_boxes,
                  "height": PANE_HEIGHT, "scroll_to": (sel["label"] if sel else "") + "|" + find,
                  "info": f"{v['n_nodes']} nodes · {v['n_boxes']} boxes"},
            key=f"topo_pane_{tid}", on_select_change=functools.partial(_on_pane_event, tid),
            on_toggle_change=functools.partial(_on_pane_event, tid),
            height=PANE_HEIGHT + 40)
        hier = f" · {HIERARCHY_NOTES[v['synthesized']]}" if v["synthesized"] in HIERARCHY_NOTES else ""
        st.caption(f"{topology.count_caption(t, v)}, {len(v['clusters'])} groups open · "
                   f"{topology.fallback_caption(t, tr.prep.nodes)} · {n_fused} fused · {len(gaps)} without "
                   f"counterpart · {len(sel_boxes)} selected"
                   + (f" · {len(match_boxes)} found" if find.strip() else "") + hier)

st.session_state["_topo_drawings"] = drawings

st.subheader("Selected source op across targets")
if not sel:
    st.write("Click a node in a pane, or pick a source op above.")
    st.stop()
if not sel_ops:
    st.info(f"{_ui.code(sel['label'])} on {_ui.code(sel['origin'])} carries no source op: the compiler inserted it, "
            "so no other target has a counterpart.")
    st.stop()
if sel.get("origin"):
    st.caption(f"From {_ui.code(sel['label'])} on {_ui.code(sel['origin'])}: {len(sel_ops)} source op(s)"
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
st.caption("Alignment evidence: " + _ui.evidence_badge(report.alignment.evidence or "reported")
           + " — provenance recorded by capture and each compiler (source ops carried by each node).")
