"""Compare: what changed in the model itself between two stored runs — ops added, removed or replaced, attributes,
shapes, dtypes and weights — on the two captured graphs side by side and as a list to filter. The same model diff as
`xc diff --model-only` (xc_core/review/model_diff.py); History compares the compilers' decisions.

The two panes are two instances of the Topology page's pane joined by a sync name: scrolling and zooming happen in
the browser, pane to pane (a round trip per scroll step would lag), while a selection goes through Python like the
Topology page's — a click in a pane or a row of the table rings the node and its counterpart (the diff's node_map)
in both panes, and opens the groups that hide them."""
import functools

import pandas as pd
import streamlit as st

from pages import _ui
from pages._graph_pane import HIERARCHY_NOTES, graph_pane, pane_items
from xc_core.errors import XcInputError
from xc_core.review.model_diff import ModelDiffOptions, model_diff_of_runs
from xc_core.review.model_sides import side_from_report
from xc_core.review.runs import from_store, resolve_key
from xc_core.views import graph_layout as layout, model_compare as mc, topology

_ui.guard_page()
st.title("Compare runs")
st.caption("What changed in the model itself between two runs: ops added, removed or replaced, attributes, shapes, "
           "dtypes and weights. History compares what the compilers decided.")
store = _ui._service().store

BASE_PICK, HEAD_PICK, EXPANDED, SEL, TABLE = "cmp_base", "cmp_head", "cmp_expanded", "cmp_sel", "cmp_table"
FIELDS = mc.FIELDS
SIDES = (mc.BASE, mc.NEW)
PANE_HEIGHT = 640
SYNC = "model-compare"        # the panes' sync name (pages/_graph_pane.py)


@st.cache_resource(max_entries=16, show_spinner="Comparing the two models…")
def _model_diff(base_key: str, head_key: str, fields: tuple, weight_rtol: float, attribute_rtol: float,
                _store) -> dict:
    """Runs in the store never change under their key: one diff per pair and options, for every session."""
    options = ModelDiffOptions(fields=fields, weight_rtol=weight_rtol, attribute_rtol=attribute_rtol)
    return model_diff_of_runs(from_store(base_key, _store), from_store(head_key, _store), options)


@st.cache_resource(max_entries=8, show_spinner="Reading the ONNX export…")
def _export_graph(run_key: str, optimized: bool, _store) -> dict:
    """A PyTorch run compared with an ONNX one is diffed through its ONNX export: its pane draws that graph, so the
    colours and counterparts are the diff's own nodes."""
    run = from_store(run_key, _store)
    side = side_from_report(run.report, run.files, "onnx", optimize_export=optimized)
    return {"nodes": [n.to_dict() for n in side.nodes]}


def _graph_key(run_key: str, diff_side: dict) -> str:
    """The drawing's cache key: the run, and which of its graphs the diff read (captured, ONNX export)."""
    return f"{run_key}|{diff_side.get('graph') or 'captured'}"


@st.cache_resource(max_entries=16, show_spinner="Reading the captured graph…")
def _tree(run_key: str, _graph: dict) -> topology.Tree:
    return topology.build_tree(layout.prepare(_graph))


@st.cache_resource(max_entries=48, show_spinner="Drawing the graph…")
def _drawing(run_key: str, expanded: tuple, _tree: topology.Tree) -> tuple[dict, str]:
    v = topology.view(_tree, set(expanded))
    return v, topology.render_svg(v)


runs = store.runs()
if not runs:
    st.info("No runs yet. Every dashboard analysis and every `xc analyze` (without --no-store) is kept in the run "
            "store; analyze two versions of a model to compare them here.")
    st.stop()
if len(runs) < 2:
    st.info("Compare needs two runs: analyze another version of the model (one run is stored so far).")
    st.stop()

labels = {r["key"]: _ui.run_label(r) for r in runs}
keys = list(labels)
by_key = {r["key"]: r for r in runs}

# ?base=ID&head=ID links open a pair (from a PR comment, or a copied address); the pickers keep it current.
for param, widget in (("base", BASE_PICK), ("head", HEAD_PICK)):
    wanted = st.query_params.get(param)
    if wanted and widget not in st.session_state:
        try:
            st.session_state[widget] = resolve_key(wanted, store)
        except XcInputError as e:
            st.error(_ui.plain(f"The link's {param} run: {e}"))
if st.session_state.get(HEAD_PICK) not in keys:
    st.session_state[HEAD_PICK] = keys[0]
if st.session_state.get(BASE_PICK) not in keys:
    # The baseline a reviewer means: the run of the same model before the head, else the run before it.
    head = st.session_state[HEAD_PICK]
    same = [k for k in keys if k != head and by_key[k]["source_name"] == by_key[head]["source_name"]]
    st.session_state[BASE_PICK] = same[0] if same else next(k for k in keys if k != head)

c1, c2 = st.columns(2)
base_key = c1.selectbox("Base", keys, format_func=lambda k: labels[k], key=BASE_PICK)
head_key = c2.selectbox("Head", keys, format_func=lambda k: labels[k], key=HEAD_PICK)
st.query_params.update(base=base_key[:12], head=head_key[:12])

with st.container(horizontal=True, vertical_alignment="bottom"):
    fields = tuple(f for f in FIELDS if st.toggle(f, value=True, key=f"cmp_field_{f}",
                                                  help=f"Compare the models' {f}"))
    weight_rtol = st.number_input("Weight tolerance (relative L2)", min_value=0.0, max_value=10.0, value=0.0,
                                  step=0.001, format="%g", key="cmp_weight_rtol",
                                  help="A weight whose change ‖new − base‖ / ‖base‖ is at most this is "
                                       "unchanged (0: any change counts; an equal hash is always unchanged).")
    attribute_rtol = st.number_input("Attribute tolerance (relative)", min_value=0.0, max_value=10.0, value=0.0,
                                     step=0.001, format="%g", key="cmp_attribute_rtol",
                                     help="Numeric attributes closer than this, relatively, are equal.")
if not fields:
    st.info("Turn on at least one of ops, attributes, shapes, dtypes and weights to compare.")
    st.stop()

reports = {mc.BASE: store.get(base_key), mc.NEW: store.get(head_key)}
if reports[mc.BASE] is None or reports[mc.NEW] is None:
    st.error("One of the runs is gone from the store; pick another.")
    st.stop()
graphs = {side: ((r.get("capture") or {}).get("graph") or {}) for side, r in reports.items()}
no_graph = [side for side in SIDES if not graphs[side].get("nodes")]
if no_graph:
    st.error(f"The {' and the '.join('head' if s == mc.NEW else 'base' for s in no_graph)} run has no captured "
             "graph (its capture failed, or its report was imported without it): there is no model to compare.")
    st.stop()
try:
    diff = _model_diff(base_key, head_key, fields, float(weight_rtol), float(attribute_rtol), store)
except XcInputError as e:
    st.error(_ui.plain(e.for_dashboard()))
    st.stop()
except Exception as e:  # noqa: BLE001 — xc's bug, but the page still lists the runs
    st.error(_ui.plain(f"These two models cannot be compared (an error in xc: {type(e).__name__}); compare them "
                       f"from the CLI with XC_DEBUG=1 for the details: xc diff {base_key[:12]} {head_key[:12]} "
                       "--model-only"))
    st.stop()

if not diff.get("comparable"):
    st.warning(_ui.plain(diff.get("line") or "These two models cannot be compared."))
    st.stop()
st.markdown(f"**{_ui.plain(mc.counts_line(diff))}**")
for note in diff.get("notes") or []:
    st.caption(_ui.plain(note))
renames = mc.renames_caption(diff)
if renames:
    st.caption(_ui.plain(renames))

# ------------------------------------------------------------------------------------------------ the two panes
pair = (base_key, head_key)
run_keys = {mc.BASE: base_key, mc.NEW: head_key}
graph_keys = {side: _graph_key(run_keys[side], diff.get(side) or {}) for side in SIDES}
for side in SIDES:
    drawn = str((diff.get(side) or {}).get("graph") or "")
    if drawn.startswith("ONNX export"):
        graphs[side] = _export_graph(run_keys[side], "optimized" in drawn, store)
trees = {side: _tree(graph_keys[side], graphs[side]) for side in SIDES}
statuses = {side: (diff.get("node_status") or {}).get(side) or {} for side in SIDES}
state = st.session_state.get(EXPANDED)
if not state or state.get("pair") != pair:
    # The first drawing: the most detail the budget allows, plus the groups hiding a change where that still fits.
    state = {"pair": pair}
    for side in SIDES:
        opened = topology.auto_expand(trees[side])
        state[side] = sorted(topology.expansion_for(trees[side], mc.changed_indices(trees[side], statuses[side]),
                                                    opened, cap=2 * topology.DEFAULT_BUDGET))
    st.session_state[EXPANDED] = state
    st.session_state[SEL] = None


def _open(side: str, paths: set[str]) -> None:
    st.session_state[EXPANDED] = {**st.session_state[EXPANDED], side: sorted(paths)}


def _select(node_ids: dict[str, list[str]], label: str) -> None:
    """Ring these nodes of each side, and open the groups that hide them (within the drawing's budget)."""
    st.session_state[SEL] = {**node_ids, "label": label}
    for side in SIDES:
        tree = trees[side]
        shown = set(st.session_state[EXPANDED][side])
        idx = [i for n in node_ids[side] if (i := tree.prep.index.get(n)) is not None]
        _open(side, topology.expansion_for(tree, idx, shown))


def _on_pane_event(side: str) -> None:
    """A click in a pane, before the rerun draws: a group toggles open / closed (and its counterpart on the other
    side, through renamed modules), a node becomes the selection with its counterpart."""
    ev = st.session_state.get(f"cmp_pane_{side}") or {}
    v = (st.session_state.get("_cmp_drawings") or {}).get(side)
    toggle, pick = ev.get("toggle"), ev.get("select")
    other = mc.BASE if side == mc.NEW else mc.NEW
    if toggle:
        _open(side, set(st.session_state[EXPANDED][side]) ^ {toggle})
        twin = mc.counterpart_path(diff, toggle, side)
        other_tree = trees[other]
        if twin is not None and twin in other_tree.size and (twin in st.session_state[EXPANDED][other]) != \
                (toggle in st.session_state[EXPANDED][side]):
            _open(other, set(st.session_state[EXPANDED][other]) ^ {twin})
    elif pick and v is not None and pick[1:].isdigit() and int(pick[1:]) < len(v["boxes"]):
        box = v["boxes"][int(pick[1:])]
        ids = list(box["node_ids"])
        _select({side: ids, other: mc.counterpart_nodes(diff, side, ids)}, box.get("id") or box["path"])


def _on_row() -> None:
    picked = (st.session_state.get(TABLE) or {}).get("selection", {}).get("rows") or []
    rows = st.session_state.get("_cmp_rows") or []
    if not picked or picked[0] >= len(rows):
        st.session_state[SEL] = None
        return
    r = rows[picked[0]]
    # A replaced or changed op's counterpart is in the row; an added op's is nowhere (nothing to ring).
    _select({mc.BASE: r["base_nodes"], mc.NEW: r["new_nodes"]}, f"{r['kind']}|{r['module_path']}|{r['op']}")


chips = " ".join(f'<span style="background:{fill};border:2px solid {border};border-radius:4px;padding:0 6px">'
                 f'{label}</span>' for label, fill, border in mc.LEGEND)
st.markdown(f'<div style="font-size:0.82rem;line-height:1.9">{chips} · unchanged: grey · <span style="border:3px '
            'solid #111;border-radius:4px;padding:0 6px">selected</span> and its counterpart · ▸ collapsed group '
            '(click to open) · the panes scroll together</div>', unsafe_allow_html=True)

sel = st.session_state.get(SEL)
too_big = [side for side in SIDES if topology.box_count(trees[side], set(state[side])) > topology.MAX_BOXES]
if too_big:
    st.warning(f"Opening that many groups would draw more than {topology.MAX_BOXES} boxes; every group of that "
               "pane is closed again. Open fewer at a time.")
    for side in too_big:
        _open(side, topology.auto_expand(trees[side]))
    state = st.session_state[EXPANDED]

drawings, views = {}, {}
for side in SIDES:
    try:
        views[side] = _drawing(graph_keys[side], tuple(state[side]), trees[side])
    except topology.GraphvizMissing as e:
        st.error(str(e))
        st.stop()
    drawings[side] = views[side][0]
st.session_state["_cmp_drawings"] = drawings

diff_id = f"{'|'.join(fields)}|{weight_rtol}|{attribute_rtol}"
for col, side in zip(st.columns(2), SIDES):
    other = mc.BASE if side == mc.NEW else mc.NEW
    v, svg = views[side]
    tree = trees[side]
    box_classes, cluster_classes = mc.status_classes(tree, v, statuses[side])
    svg = mc.mark_clusters(topology.mark(svg, box_classes), cluster_classes)
    items, clusters = pane_items(v)
    matched = mc.pairs(diff, side)
    counterparts = mc.counterpart_boxes(v, tree.prep, drawings[other], trees[other].prep, matched)
    selected = mc.selected_boxes(v, tree.prep, (sel or {}).get(side) or [])
    r = by_key[run_keys[side]]
    with col:
        st.markdown(f"**{'Head' if side == mc.NEW else 'Base'}** · {_ui.plain(r['source_name'] or '?')} · run "
                    f"{_ui.code(run_keys[side][:12])}")
        graph_pane(
            data={"svg": svg, "key": f"{run_keys[side]}|{side}|{diff_id}|{hash(tuple(state[side]))}",
                  "items": items, "clusters": clusters, "selected": selected, "gaps": [], "matches": [],
                  "height": PANE_HEIGHT, "scroll_to": (sel or {}).get("label") or "",
                  "info": f"{v['n_nodes']} nodes · {v['n_boxes']} boxes", "sync": SYNC,
                  "counterparts": counterparts},
            key=f"cmp_pane_{side}", on_select_change=functools.partial(_on_pane_event, side),
            on_toggle_change=functools.partial(_on_pane_event, side), height=PANE_HEIGHT + 40)
        hier = f" · {HIERARCHY_NOTES[v['synthesized']]}" if v["synthesized"] in HIERARCHY_NOTES else ""
        changed = len(mc.changed_indices(tree, statuses[side]))
        st.caption(f"{v['n_nodes']} ops drawn, {v['n_boxes']} boxes, {len(v['clusters'])} groups open · {changed} "
                   f"{'added or changed' if side == mc.NEW else 'removed or changed'} · {len(selected)} selected"
                   + hier)

# ------------------------------------------------------------------------------------------------ the change list
st.subheader("Changes")
rows = mc.change_rows(diff)
if not rows:
    st.info("Nothing changed in what was compared" + ("" if len(fields) == len(FIELDS) else
            f" ({', '.join(fields)})") + ".")
else:
    f1, f2, f3 = st.columns([2, 2, 2])
    present = [k for k in mc.KINDS if any(r["kind"] == k for r in rows)]
    if "cmp_kinds" not in st.session_state or any(k not in present for k in st.session_state["cmp_kinds"]):
        st.session_state["cmp_kinds"] = present       # every kind of this diff (another pair has other kinds)
    kinds = f1.multiselect("Kind", present, key="cmp_kinds")
    modules = ["(every module)"] + mc.top_modules(diff)
    module = f2.selectbox("Module", modules, key="cmp_module",
                          help="The top-level modules of the by-module summary; a change in it or below it.")
    text = f3.text_input("Filter", key="cmp_text", placeholder="e.g. conv, blocks.3, hardswish",
                         help="Text in the module path, op, base op or detail.")
    shown = mc.filter_rows(rows, set(kinds), None if module == modules[0] else module, text)
    st.session_state["_cmp_rows"] = shown
    st.dataframe(pd.DataFrame(mc.table(shown), columns=["kind", "module path", "op", "base op", "detail"]),
                 hide_index=True, width="stretch", key=TABLE, on_select=_on_row, selection_mode="single-row")
    st.caption(f"{len(shown)} of {len(rows)} change(s) shown · select a row to ring its nodes in both panes.")

by_module = diff.get("by_module") or []
if by_module:
    st.subheader("By module")
    st.dataframe(pd.DataFrame(by_module, columns=["module_path", "added", "removed", "replaced", "changed"])
                 .rename(columns={"module_path": "module"}), hide_index=True, width="stretch")
st.caption(f"From the CLI: `xc diff {base_key[:12]} {head_key[:12]} --model-only`")
