"""The captured graph while the targets still compile: drawn as soon as capture has written it, so a big upload can
be browsed in seconds instead of after every compiler has finished (OpenVINO alone takes minutes on a 20,000-node
graph). It is the graph every target starts from — torch.export's ExportedProgram for PyTorch sources, the ONNX
graph for ONNX uploads — drawn with the Topology page's pane; the compiled graphs replace it when the report is
ready."""
import os

import streamlit as st

from pages._graph_pane import HIERARCHY_NOTES, graph_pane, pane_items
from pages._markup import evidence_badge
from xc_core import evidence as ev_kinds
from xc_core.evidence import HELP as EVIDENCE_HELP
from xc_core.views import graph_layout as layout, topology
from xc_core.sources.spec import BEFORE_STAGE_WORDS
from xc_core.views.progress import captured_event

EXPANDED = "capture_preview_expanded"
PANE_HEIGHT = 640


@st.cache_resource(max_entries=4, show_spinner="Reading the captured graph…")
def _tree(path: str, mtime: float) -> topology.Tree:
    import json
    with open(path) as f:
        data = json.load(f)
    graph = data["before"] if data.get("before") is not None else data["onnx_graph"]
    return topology.build_tree(layout.prepare(graph))


@st.cache_resource(max_entries=16, show_spinner="Drawing the graph…")
def _drawing(path: str, mtime: float, expanded: tuple, _tree: topology.Tree) -> tuple[dict, str]:
    v = topology.view(_tree, set(expanded))
    return v, topology.render_svg(v)


def _on_toggle() -> None:
    ev = st.session_state.get("capture_preview_pane") or {}
    if ev.get("toggle"):
        state = st.session_state.get(EXPANDED) or {"paths": []}
        st.session_state[EXPANDED] = {**state, "paths": sorted(set(state["paths"]) ^ {ev["toggle"]})}


def show(analysis) -> bool:
    """Draw the captured graph of a running analysis; False when capture has not finished (nothing drawn)."""
    ev = captured_event(analysis.events) if analysis is not None else None
    path = ev and ev.captured
    try:
        mtime = os.path.getmtime(path) if path else None
    except OSError:      # the run folder went: the analysis just ended and the page reruns with the report
        mtime = None
    if mtime is None:
        return False
    try:
        tree = _tree(path, mtime)
    except (OSError, ValueError, KeyError):
        return False
    state = st.session_state.get(EXPANDED)
    if not state or state.get("file") != path:
        state = {"file": path, "paths": sorted(topology.auto_expand(tree))}
        st.session_state[EXPANDED] = state
    expanded = set(state["paths"])
    if topology.box_count(tree, expanded) > topology.MAX_BOXES:
        expanded = topology.auto_expand(tree)
        st.session_state[EXPANDED] = {"file": path, "paths": sorted(expanded)}
    try:
        v, svg = _drawing(path, mtime, tuple(sorted(expanded)), tree)
    except topology.GraphvizMissing as e:
        st.error(str(e))
        return True
    st.subheader("Captured graph, while the targets compile")
    # The graph as torch.export or the uploaded file records it: what the report's capture block calls reported.
    st.markdown(evidence_badge(ev_kinds.REPORTED), help=EVIDENCE_HELP.get(ev_kinds.REPORTED, ""))
    what = BEFORE_STAGE_WORDS.get(ev.graph, "captured graph")
    st.caption(f"The {what} every target starts from: {ev.nodes if ev.nodes is not None else v['n_nodes']} ops, "
               f"{v['n_boxes']} boxes · click a ▸ group to open it. The compiled graphs side by side, with "
               "backends, fusions and fallbacks, replace this when the report is ready.")
    items, clusters = pane_items(v)
    graph_pane(data={"svg": svg, "key": f"{path}|{hash(tuple(sorted(expanded)))}", "items": items,
                     "clusters": clusters, "selected": [],
                     "gaps": [], "matches": [], "height": PANE_HEIGHT, "scroll_to": "",
                     "info": f"{v['n_nodes']} nodes · {v['n_boxes']} boxes"},
               key="capture_preview_pane", on_toggle_change=_on_toggle, on_select_change=lambda: None,
               height=PANE_HEIGHT + 40)
    if v["synthesized"] in HIERARCHY_NOTES:
        st.caption(HIERARCHY_NOTES[v["synthesized"]])
    return True
